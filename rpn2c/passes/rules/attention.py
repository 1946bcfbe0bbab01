"""Attention heads: a lone causal mask as SDPA's is_causal; a local window as FlexAttention with a band block
mask; H identical softmax-bilinear heads as one batched scaled_dot_product_attention."""

from __future__ import annotations

from dataclasses import dataclass

from rpn2c.components.xi_attention import FLEX_ATTENTION, LINEAR_ATTENTION, SDPA_CAUSAL
from rpn2c.ir.kernels import ATTEND_ARGS, Kernel, offered
from rpn2c.ir.layout import attention_heads
from rpn2c.passes.cost import Cost, size
from rpn2c.passes.rewrite import Match
from rpn2c.passes.rule import P, Rule, Site, makes, to


def _fusable(s: Site) -> bool:
    layer = s.node.layer  # eq 30's π inside each head's term is not the kernel's: the heads then run one by one
    return attention_heads(layer, s.node.trace["heads"]) and not layer.pi_in_terms


def _only(s: Site, kernel) -> bool:
    """The head's one ξ is an instance ξ implementing ``kernel``, which applies to it."""
    xi = s.head.xi.get("xi_instance")
    return xi is not None and len(s.head.xi) == 1 and offered(xi.component, kernel)


def _window_cost(s: Site) -> Cost:
    """Scores and weights over every (query, key) pair, versus the band's blocks only (2·window + 1 keys per
    query, rounded up to FlexAttention's 128-item blocks)."""
    t, xi = s.trace, s.head.xi["xi_instance"].component
    n_q, n_k = size(t.n_out), size(t.nz)
    r = xi.hp.rank if hasattr(xi.hp, "rank") else s.data.features
    n = s.head.out or t.d
    band = min(n_k, 128 * (2 + (2 * xi.hp.window + 1) // 128))
    return Cost(n_q * n_k * (r + n), n_q * band * (r + n), 8 * n_q * n_k, 8 * n_q * band)


def _instance(t) -> bool:
    return t.info.get("slot") == "xi_instance"


def _implements(kernel):
    """A pattern's test: an instance ξ term whose component implements ``kernel``, which applies to it."""
    return lambda t: _instance(t) and offered(t.info["use"].component, kernel)


@dataclass(frozen=True)
class FusedHeads:
    """``fused_sdpa``'s argument, fixed once by the rule: the heads' attention kernel (the record their ξ declares
    that applies to it; None: SDPA with every mask), the number of heads, and whether the concat_linear fusion's
    GEMM reads the heads' outputs directly (no head has processing of its own)."""

    kernel: Kernel | None
    heads: int
    fuse_out: bool

    def __str__(self) -> str:
        return f"{self.heads} heads" + (f"; {self.kernel.name}" if self.kernel is not None else "")


@makes("fused_sdpa")
def _horizontal(m: Match):
    """``fuse_heads(h…)`` → ``fused_sdpa(x…)``: one kernel over the heads, on the terms it reads (the query and the
    context: the heads' terms do not run, Q, K and V come from one packed GEMM)."""
    heads = m.root.args
    xi = next((u.info["use"].component for u in heads[0].walk() if _instance(u) and u.info.get("use") is not None),
              None)
    kernel = next((k for k in type(xi).kernels if k.args == ATTEND_ARGS and k.applies(xi)), None) if xi else None
    own = any(u.op == "process" and u.info.get("head") is not None for h in heads for u in h.walk())
    arg = FusedHeads(kernel, len(heads), m.root.info.get("what") == "concat_linear" and not own)
    reads = tuple(dict.fromkeys(u for h in heads for u in h.walk()
                                if u.info.get("head") is None and u.op in ("input", "process")))
    outer = tuple(u for u in reads if not any(u in v.args for v in reads))  # the query, the context
    return m.make("fused_sdpa", outer, info={**m.root.info, "arg": arg})


ATTENTION_RULES: tuple[Rule, ...] = (
    Rule("causal_sdpa", "head", "mask", lambda s: _only(s, SDPA_CAUSAL),
         "a causal mask and no other: scaled_dot_product_attention(is_causal=True), the kernel skips the blocked "
         "half instead of adding a materialised -inf mask",
         "RPN 2 §6.4; torch SDPA is_causal (top-left aligned: item t sees items <= t)", benefit=1,
         pattern=P(("xi", "xi_kernel"), "k", where=_instance), rewrite=to(SDPA_CAUSAL)),
    Rule("flex_window", "head", "mask", lambda s: _only(s, FLEX_ATTENTION),
         "a local window |i − j| <= k (optionally causal) and no other mask: FlexAttention with a band block mask "
         "computes only the 128-item blocks that meet the band (the op rpn2c::window_attention, mask built once "
         "per size) where no gradient is needed and the band skips at least half the blocks; elsewhere (training: "
         "torch 2.13 has no CPU backward; float64; short sequences) SDPA with the band mask from item indices",
         "RPN 2 §6.4 attention as bilinear ξ with a structured mask; torch FlexAttention (block-sparse masks)",
         benefit=1, cost=_window_cost, pattern=P(("xi", "xi_kernel"), "k", where=_instance),
         rewrite=to(FLEX_ATTENTION)),
    Rule("linear_attention", "head", "attention", lambda s: _only(s, LINEAR_ATTENTION),
         "a linear attention ξ: φ(Q)(φ(K)ᵀ z) over φ(Q)(φ(K)ᵀ 1) by associativity (causal: prefix sums over the "
         "items), O(N·r·n) work and memory instead of building the N x N matrix",
         "Katharopoulos et al. 2020 (Transformers are RNNs) eq (4)-(6); RPN 2 §6.4 attention as a data ξ",
         benefit=2, pattern=P(("xi", "xi_kernel"), "k", where=_implements(LINEAR_ATTENTION)),
         rewrite=to(LINEAR_ATTENTION)),
    Rule("fused_heads", "layer", "heads", _fusable,
         "H identical attention heads (packed parameters, as nn.MultiheadAttention): Q, K and V by one GEMM on "
         "the layer input (one per distinct input), query/key norms and rotary positions (where ξ has them) on Q "
         "and K per head, "
         "one [B, H, N, r] scaled_dot_product_attention for every head (a per-head relative bias [H, N, N], "
         "relative_bias or alibi, joins its attn_mask with the other masks; a window_attention ξ rolls and cuts "
         "Q, K and V into its windows, [B, nW·H, w², r], its window_bias and shift mask the attn_mask), "
         "and a concat_linear head fusion as one GEMM on the heads' outputs, no per-head copies",
         "RPN 2 §6.4 Transformer as multi-head bilinear ξ; torch SDPA", benefit=2,
         pattern=P("fuse_heads"), rewrite=_horizontal),
)
