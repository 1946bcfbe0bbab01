"""Packed attention heads (``rpn2c/ir/layout.py``): the layer's packed tensors, each head's views of them, loading
checkpoints written with per-head tensors, and the kernel ``fused_sdpa`` that runs the H heads as torch runs
``nn.MultiheadAttention``:

    [Q | K | V] = X · in_proj_weightᵀ + in_proj_bias                 (one GEMM when q, k, v read one input)
    O_h = softmax(Q_h K_g(h)ᵀ · scale + masks) V_g(h)                (one scaled_dot_product_attention, all heads)
    Y   = [O_1 | … | O_H] W_oᵀ + b_o                                 (concat_linear fusion: one GEMM)

with ``qk_norm`` Q and K normalised per head by the layer's shared weights, and rotary positions, before SDPA.

No parameter is stacked, selected or concatenated per call. The bias of V can join the GEMM because every row of
a softmax sums to 1 (A(V + 1bᵀ) = AV + 1bᵀ), except where a mask can empty a row (then A's row is 0 and the head
adds b after ξ, as the reference does): with an ``attn_mask``, ``key_padding`` or a ``window``.

With ``kv_heads = G`` the GEMM computes K and V for the G groups only and g(h) = h // (H/G); the one SDPA call
reads them with ``enable_gqa`` (``repeat_kv`` inside the kernel), never H copies of the projections.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rpn2c.ir.layout import AttentionLayout


@dataclass(frozen=True)
class _Link:
    """One per-head tensor as a view of the packed ones: ``module.attr`` (checkpoint key ``path`` under the
    layer) is row block ``head`` of ``part``'s weight (transposed: ξ stores ``[M, r]``) or bias (for k and v
    the head's group)."""

    path: str
    module: nn.Module
    attr: str
    part: str
    block: int
    bias: bool
    transpose: bool


class PackedHeads:
    """The packing of one layer's attention heads: moves their tensors into the layer's packed parameters
    (values kept), then serves per-head views and migrates per-head checkpoints."""

    def __init__(self, layer: nn.Module, holders: list[tuple[str, nn.Module]], layout: AttentionLayout):
        self.layout = layout
        self.keys = per_head_keys(layout, [prefix for prefix, _ in holders])
        self.links: list[_Link] = []
        for path, part, head, block, bias, transpose in self.keys:
            prefix, holder = holders[head]
            where, _, attr = path[len(prefix):].rpartition(".")
            self.links.append(_Link(path, holder.get_submodule(where), attr, part, block, bias, transpose))
        own: dict = {}  # a group's k and v: its first head's (the others' are dropped)
        for link in self.links:
            own.setdefault((link.part, link.block, link.bias), getattr(link.module, link.attr))
        for name, rows in self._weights():
            layer.register_parameter(name, nn.Parameter(torch.cat(
                [self._oriented(own[(part, h, False)], part) for part in rows
                 for h in range(layout.blocks(part))]).detach()))
        if layout.biased:
            layer.register_parameter("in_proj_bias", nn.Parameter(torch.cat(
                [own[(part, h, True)] for part in layout.biased for h in range(layout.blocks(part))]).detach()))
        for norm in layout.norms:  # shared by every head: the first head's
            layer.register_parameter(f"{norm}_weight", nn.Parameter(own[(norm, 0, False)].detach()))
        for link in self.links:
            del link.module._parameters[link.attr]

    def _weights(self) -> list[tuple[str, tuple[str, ...]]]:
        """(parameter name, parts in its rows)."""
        parts = tuple(p for p, _, _ in self.layout.parts)
        return [("in_proj_weight", parts)] if self.layout.packed else [(f"{p}_proj_weight", (p,)) for p in parts]

    def _oriented(self, t: torch.Tensor, part: str) -> torch.Tensor:
        return t.t() if part in ("q", "k") else t

    def weight(self, layer, part: str) -> torch.Tensor:
        """The packed weight holding ``part``'s rows (``in_proj_weight`` or ``{part}_proj_weight``)."""
        return layer.in_proj_weight if self.layout.packed else getattr(layer, f"{part}_proj_weight")

    def view(self, layer, link: _Link) -> torch.Tensor:
        if link.part in self.layout.norms:
            return getattr(layer, f"{link.part}_weight")
        per = self.layout.per_head(link.part)
        if link.bias:
            start, _ = self.layout.bias_rows(link.part)
            return layer.in_proj_bias[start + link.block * per:start + (link.block + 1) * per]
        start, _ = self.layout.rows(link.part)
        rows = self.weight(layer, link.part)[start + link.block * per:start + (link.block + 1) * per]
        return rows.t() if link.transpose else rows

    def bind_views(self, layer) -> None:
        """Give each head its tensors as views of the packed ones (for the per-head forms: the reference, a
        rule switched off, the layer-matrix view). Per call: a conversion (``.double()``) replaces the storage."""
        for link in self.links:
            link.module.__dict__[link.attr] = self.view(layer, link)

    def migrate(self, state_dict: dict, prefix: str) -> None:
        migrate_per_head(state_dict, prefix, self.layout, self.keys)


def per_head_keys(layout: AttentionLayout, prefixes: list[str]) -> list[tuple[str, str, int, int, bool, bool]]:
    """The per-head tensors packed heads replace, as ``(checkpoint key under the layer, part, head, row block, is
    a bias, stored transposed)``: head h's ``w_q`` [M, r] is the transpose of its rows of the packed weight; its
    ``w_k`` and ψ are its key/value group's rows (``layout.block``); the query/key norms' weights are one for all
    heads (block 0)."""
    parts = [p for p, _, _ in layout.parts]
    keys = []
    for h, prefix in enumerate(prefixes):
        keys.append((f"{prefix}xi_instance.w_q", "q", h, h, False, True))
        if "k" in parts:
            keys.append((f"{prefix}xi_instance.w_k", "k", h, layout.block("k", h), False, True))
        keys.append((f"{prefix}psi.weight", "v", h, layout.block("v", h), False, False))
        keys += [(f"{prefix}{name}", part, h, layout.block(part, h), True, False)
                 for part, name in (("q", "xi_instance.b_q"), ("k", "xi_instance.b_k"), ("v", "bias"))
                 if part in layout.biased]
        keys += [(f"{prefix}xi_instance.{norm}_weight", norm, h, 0, False, False) for norm in layout.norms]
    return keys


def migrate_per_head(state_dict: dict, prefix: str, layout: AttentionLayout, keys) -> None:
    """A checkpoint with per-head tensors (``heads.h0.xi_instance.w_q`` …, written before heads were packed, or
    mapped per head) becomes the packed tensors, in place; a partial one is left for ``strict`` to report. With
    key/value groups a group's k and v are its first head's."""
    full = [prefix + path for path, *_ in keys]
    if not all(k in state_dict for k in full):
        return
    got: dict = {}
    for k, (_, part, _, block, bias, transpose) in zip(full, keys):
        t = state_dict.pop(k)
        got.setdefault((part, block, bias), t.t() if transpose else t)
    parts = [p for p, _, _ in layout.parts]
    for name, rows in ([("in_proj_weight", parts)] if layout.packed else [(f"{p}_proj_weight", [p]) for p in parts]):
        state_dict[prefix + name] = torch.cat([got[(p, h, False)] for p in rows for h in range(layout.blocks(p))])
    if layout.biased:
        state_dict[prefix + "in_proj_bias"] = torch.cat([got[(p, h, True)] for p in layout.biased
                                                         for h in range(layout.blocks(p))])
    for norm in layout.norms:
        state_dict[prefix + f"{norm}_weight"] = got[(norm, 0, False)]


def _split_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """``[B, N, H·r] -> [B, H, N, r]`` (a view)."""
    return t.unflatten(-1, (heads, -1)).transpose(-3, -2)


def packed_attention(layer, x, data, aux: dict, fold_v_bias: bool, fuse_out: bool, kernel=None):
    """Kernel op ``fused_sdpa``: the H packed heads of ``layer`` on queries ``x`` and context ``data``; ``aux``:
    the extra inputs (masks, keys) by the ξ's hyper-parameter names.

    Returns the concat_linear fusion's output ``[B, Nq, n_out]`` when ``fuse_out``, else the heads' outputs
    (a list of ``[B, Nq, n]``). ``fold_v_bias``: V's bias joins the projection GEMM (no mask can empty a row).
    ``kernel``: the heads' attention kernel (an ``rpn2c.ir.kernels.Kernel`` their ξ declares: ``sdpa_causal``,
    ``flex_attention``; None: SDPA with the masks).
    """
    pk: PackedHeads = layer.packed
    lay, heads = pk.layout, pk.layout.heads
    first = layer.first_attention
    keys = aux["keys"] if first.hp.keys is not None else data
    source = {"q": x, "k": keys, "v": data}
    parts = [p for p, _, _ in lay.parts]
    groups: list[list[str]] = []  # consecutive parts that read one input: one GEMM (only in a packed weight)
    for p in parts:
        if groups and lay.packed and source[p] is source[groups[-1][-1]]:
            groups[-1].append(p)
        else:
            groups.append([p])
    bias = layer.in_proj_bias if lay.biased else None
    out: dict[str, torch.Tensor] = {}
    late: list[str] = []  # biased parts whose bias is added after the GEMM (v: after ξ when not folded)
    for group in groups:
        w = pk.weight(layer, group[0])
        a, b = lay.rows(group[0])[0], lay.rows(group[-1])[1]
        if (a, b) != (0, w.shape[0]):
            w = w[a:b]
        in_gemm = all(p in lay.biased and (p != "v" or fold_v_bias) for p in group)
        gb = None
        if in_gemm:
            c, d = lay.bias_rows(group[0])[0], lay.bias_rows(group[-1])[1]
            gb = bias if (c, d) == (0, bias.shape[0]) else bias[c:d]
        else:
            late += [p for p in group if p in lay.biased]
        y = F.linear(source[group[0]], w, gb)
        ys = [y] if len(group) == 1 else y.split([lay.blocks(p) * lay.per_head(p) for p in group], dim=-1)
        out.update(zip(group, ys))
    for p in late:
        if p != "v" or fold_v_bias:
            c, d = lay.bias_rows(p)
            out[p] = out[p] + bias[c:d]
    qq = _split_heads(out["q"], heads)
    kk = _split_heads(out["k"], lay.groups) if "k" in out else keys.unsqueeze(1).expand(-1, heads, -1, -1)
    vv = _split_heads(out["v"], lay.groups)  # [B, G, Nc, n]: one per group of query heads
    if lay.norms:  # the shared γ_q, γ_k, per head (per group for k), before the rotation
        qq, kk = first.normalise(qq, kk, layer.q_norm_weight, layer.k_norm_weight)
    qq, kk = first.rotate(qq, kk)  # rotary positions, per head (per group for k), before the one SDPA call
    y = (first.attend if kernel is None else kernel.bind(first))(qq, kk, vv, aux)  # [B, H, Nq, n]
    if "v" in late and not fold_v_bias:
        c, d = lay.bias_rows("v")
        b = bias[c:d].view(lay.groups, 1, -1)
        y = y + (b if lay.groups == heads else b.repeat_interleave(heads // lay.groups, 0))
    if fuse_out:
        fusion = layer.fusion.linear
        return F.linear(y.transpose(-3, -2).flatten(-2), fusion.weight, fusion.bias)
    return list(y.unbind(-3))
