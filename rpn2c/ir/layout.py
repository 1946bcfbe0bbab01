"""Parameter layouts that follow from the checked layer alone, never from an optimiser decision: both lowerings
(and every rule switched off) store the same tensors under the same names, so one ``state_dict`` loads into all.

**Packed attention.** A layer whose heads are H ≥ 1 identical softmax-attention heads joined by a head fusion
(RPN 2 §6.4: the Transformer's multi-head bilinear ξ, ``nn.MultiheadAttention``) stores the heads' projections as
torch does, one tensor each, rows grouped by part then by head:

    in_proj_weight = [W_q,1ᵀ; …; W_q,Hᵀ; W_k,1ᵀ; …; W_k,Hᵀ; ψ_1; …; ψ_H]      [H·(r + r + n), D]
    in_proj_bias   = [b_q,1; …; b_q,H; b_k,1; …; b_k,H; b_1; …; b_H]           (the parts that have a bias)

where W_q,h ∈ R^{Mq x r}, W_k,h ∈ R^{Mc x r} are head h's ξ projections and ψ_h ∈ R^{n x D} its reconciliation.
When the query, key and value widths differ the weight is three tensors, ``q_proj_weight``, ``k_proj_weight``,
``v_proj_weight`` (torch's ``_qkv_same_embed_dim = False``); a full bilinear ξ (no W_k) has no key part.

**Grouped key/value heads** (``kv_heads = G``, G | H): query head h reads the W_k and ψ (and their biases) of its
group g = h // (H/G), so the key and value parts hold G heads' rows, not H (a Llama attention's
``cat(q_proj.weight, k_proj.weight, v_proj.weight)``):

    in_proj_weight = [W_q,1ᵀ; …; W_q,Hᵀ; W_k,1ᵀ; …; W_k,Gᵀ; ψ_1; …; ψ_G]      [H·r + G·(r + n), D]

**Query/key norms** (``qk_norm``): the H heads share one γ_q and one γ_k [r], ``q_norm_weight`` and
``k_norm_weight`` (a Qwen3 attention's ``q_norm.weight``, ``k_norm.weight``); every head's ξ reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

from rpn2c.ir.graph import HeadSpec, LayerSpec


def _attention_head(h: HeadSpec, view: str) -> bool:
    xi = h.xi.get("xi_instance")
    return (set(h.xi) == {"xi_instance"} and xi.component.attention and xi.component.hp.softmax
            and h.kappa.name == "identity" and h.psi.name == "identity" and h.channels == 1 and h.groups == 1
            and h.bias != "untied" and h.tie is None and view == "items")


def _same(h: HeadSpec, first: HeadSpec) -> bool:
    def key(x):
        return {k: v for k, v in x.canonical().items() if k != "name"}

    return key(h) == key(first)


@dataclass(frozen=True)
class AttentionLayout:
    """Where each part of H packed attention heads lives. ``parts`` is ``(part, rows per head, input width)`` in
    row order (``q``, ``k`` unless the ξ is full, ``v``); ``biased`` the parts with a bias, in the same order;
    ``kv_heads`` the G groups whose heads share ``k`` and ``v`` (None: every head its own)."""

    heads: int
    parts: tuple[tuple[str, int, int], ...]
    biased: tuple[str, ...]
    kv_heads: int | None = None
    norms: tuple[str, ...] = ()  # ("q_norm", "k_norm") under qk_norm: one weight each, shared by all H heads

    @property
    def groups(self) -> int:
        """How many heads' rows the key and value parts hold (G; H without grouping)."""
        return self.kv_heads if self.kv_heads is not None else self.heads

    def blocks(self, part: str) -> int:
        """How many per-head row blocks ``part`` holds: H for the queries, G for the keys and values."""
        return self.heads if part == "q" else self.groups

    def block(self, part: str, head: int) -> int:
        """The row block of ``part`` query head ``head`` reads: its own, or its group's for k and v."""
        return head if part == "q" else head // (self.heads // self.groups)

    @property
    def packed(self) -> bool:
        """One ``in_proj_weight`` (every part reads the same width), else one ``{part}_proj_weight`` each."""
        return len({width for _, _, width in self.parts}) == 1

    def rows(self, part: str) -> tuple[int, int]:
        """Row range of ``part`` (all heads) in its weight: in ``in_proj_weight`` when packed, else its own."""
        start = 0
        for name, per_head, _ in self.parts:
            if name == part:
                return start, start + self.blocks(name) * per_head
            if self.packed:
                start += self.blocks(name) * per_head
        raise KeyError(part)

    def bias_rows(self, part: str) -> tuple[int, int] | None:
        """Entry range of ``part``'s bias in ``in_proj_bias``, or None when the part has none."""
        if part not in self.biased:
            return None
        start = 0
        for name, per_head, _ in self.parts:
            if name == part:
                return start, start + self.blocks(name) * per_head
            if name in self.biased:
                start += self.blocks(name) * per_head
        raise KeyError(part)

    def per_head(self, part: str) -> int:
        return next(per_head for name, per_head, _ in self.parts if name == part)


def attention_heads(layer: LayerSpec, traces) -> bool:
    """Whether ``layer``'s heads are H ≥ 1 identical softmax-attention heads under a head fusion (κ and ψ identity,
    one channel, no other ξ, no tying): their parameters are then packed."""
    heads = layer.heads
    return (layer.fusion is not None and all(_attention_head(h, t.view) for h, t in zip(heads, traces))
            and all(_same(h, heads[0]) for h in heads[1:]))


def attention_layout(layer: LayerSpec, traces, query_features: int, data_features: int,
                     aux_types: dict) -> AttentionLayout | None:
    """The packed layout of ``layer``'s heads (None unless :func:`attention_heads`). The keys are computed from
    the ξ's ``keys`` input (its type in ``aux_types``, by value id) when it names one, else from the data."""
    if not attention_heads(layer, traces):
        return None
    first = layer.heads[0]
    comp = first.xi["xi_instance"].component
    key_features = data_features if comp.hp.keys is None else aux_types[comp.hp.keys.name].features
    full = not hasattr(comp.hp, "rank")  # a full bilinear ξ: W ∈ R^{Mq x Mc}, keys unprojected
    rank = key_features if full else comp.hp.rank
    n = first.out if first.out is not None else traces[0].d
    parts = (("q", rank, query_features),) + ((("k", rank, key_features),) if not full else ()) + \
        (("v", n, data_features),)
    biased = ((("q",) if full else ("q", "k")) if comp.hp.bias else ()) + (("v",) if first.bias == "tied" else ())
    norms = ("q_norm", "k_norm") if comp.hp.qk_norm != "none" else ()
    return AttentionLayout(len(layer.heads), parts, biased, layer.kv_heads, norms)


def kv_sharing_problem(layer: LayerSpec, traces) -> str | None:
    """Why ``layer``'s heads cannot share keys and values in groups (``kv_heads``), or None: they must be
    identical softmax-attention heads whose ξ learns its key projection W_k (a low-rank bilinear ξ)."""
    for h, t in zip(layer.heads, traces):
        xi = h.xi.get("xi_instance")
        if xi is None or not xi.component.attention:
            return "its heads have no attention ξ (xi_instance = attention(rank = r, ...))"
        if not xi.component.hp.softmax:
            return f"its heads' ξ '{xi.name}' has no softmax (softmax = false): they are not attention heads"
        if not hasattr(xi.component.hp, "rank"):
            return f"its heads' ξ '{xi.name}' has no key projection W_k to share: use attention(rank = r)"
        if not _attention_head(h, t.view):
            return ("each head must be attention alone: identity κ and ψ, one channel, one ξ, a tied or no bias, "
                    "no tie, on items")
    if not all(_same(h, layer.heads[0]) for h in layer.heads[1:]):
        return "its heads differ"
    return None
