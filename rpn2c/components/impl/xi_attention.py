"""The ``nn.Module`` implementations of :mod:`rpn2c.components.xi_attention` (imported when a model is built)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend

from rpn2c.components.impl.base import XiModule
from rpn2c.errors import InputError
from rpn2c.ir.types import is_head_bias
from rpn2c.functional import flex_op, linear_attention, rotary, structure


def default_scale(softmax: bool, r: int) -> float:
    """The logit scale when none is given: 1/√r of the scaled softmax (eq 182) with softmax; 1 without, since the
    bilinear form itself (eq 55–56, and A_b in the hybrid A_g ∘ A_b of eq 86) has no scale (docs/semantics.md)."""
    return 1 / math.sqrt(r) if softmax else 1.0


class _BilinearXi(XiModule):
    axis = "instance"

    def __init__(self, hp, mq, mc, rank, aux_types, rotary_dims=None, head: int = 0):
        super().__init__()
        self.rotary_dims = rotary_dims
        if hp.rotary is not None:  # θ_i, float32, once (not saved: the spec fixes them)
            self.register_buffer("inv_freq", rotary.frequencies(rotary_dims, hp.rotary), persistent=False)
        self.head = head  # which slice of a per-head attn_mask [H, Nq, Nc] this head adds
        self.head_bias = is_head_bias(aux_types.get("attn_mask"))
        self.hp = hp
        self.full = rank is None
        r = mc if rank is None else rank
        bound_q, bound_k = 1 / math.sqrt(mq), 1 / math.sqrt(mc)
        self.w_q = nn.Parameter(torch.empty(mq, r).uniform_(-bound_q, bound_q))
        if not self.full:
            self.w_k = nn.Parameter(torch.empty(mc, r).uniform_(-bound_k, bound_k))
        self.b_q = nn.Parameter(torch.zeros(r)) if hp.bias else None
        self.b_k = nn.Parameter(torch.zeros(r)) if hp.bias and not self.full else None
        self.scale = hp.scale if hp.scale is not None else default_scale(hp.softmax, r)
        if hp.qk_norm != "none":  # γ_q, γ_k: a fresh norm scales by 1
            self.q_norm_weight = nn.Parameter(torch.ones(r))
            self.k_norm_weight = nn.Parameter(torch.ones(r))
        self.modes = {k: t.mask_mode for k, t in aux_types.items()}

    def _qk(self, q, c, aux, literal=False):
        if self.hp.keys is not None:
            c = aux["keys"]
        qq = q @ self.w_q + (self.b_q if self.b_q is not None else 0)
        kk = c if self.full else c @ self.w_k + (self.b_k if self.b_k is not None else 0)
        qq, kk = self.normalise(qq, kk, literal=literal)
        if self.hp.rotary is None:
            return qq, kk
        if literal:  # the oracle: each item's rotation matrix R_t applied to it
            def turn(t):
                r = rotary.rotation_matrices(t.shape[-2], t.shape[-1], self.rotary_dims, self.hp.rotary,
                                             self.hp.rotary_interleaved, t.dtype, t.device)
                return torch.einsum("nij,...nj->...ni", r, t)
            return turn(qq), turn(kk)
        return self.rotate(qq, kk)

    def normalise(self, qq, kk, gamma_q=None, gamma_k=None, literal=False):
        """Queries and keys ``[..., N, r]`` under ``qk_norm``: ``t/√(mean(t²) + ε)·γ`` over the r features
        (unchanged without it). ``gamma_q``, ``gamma_k``: the packed heads' shared weights (default: this ξ's);
        ``literal``: the formula written out (the oracle), else ``F.rms_norm``."""
        if self.hp.qk_norm == "none":
            return qq, kk
        gq = self.q_norm_weight if gamma_q is None else gamma_q
        gk = self.k_norm_weight if gamma_k is None else gamma_k
        eps, up = self.hp.qk_norm_eps, self.hp.qk_norm_upcast
        return _rms(qq, gq, eps, literal, up), _rms(kk, gk, eps, literal, up)

    def rotate(self, qq, kk):
        """Queries and keys ``[..., N, r]`` turned by their items' positions (rotary; unchanged without it)."""
        if self.hp.rotary is None:
            return qq, kk
        inter, nq, nk = self.hp.rotary_interleaved, qq.shape[-2], kk.shape[-2]
        cos, sin = rotary.full_tables(max(nq, nk), self.inv_freq, qq.dtype, inter)  # one table for q and k
        return rotary.rotate_by(qq, cos[:nq], sin[:nq], inter), rotary.rotate_by(kk, cos[:nk], sin[:nk], inter)

    def _additive_mask(self, aux, nq, nc, dtype, device, literal=False, rows=None, cols=None, all_heads=False):
        """All masks as one additive float mask [.., Nq, Nc] (-inf = blocked), or None
        (:func:`rpn2c.functional.structure.additive_mask`); ``literal``: the window as the band matrix R; ``rows``,
        ``cols``: only the entries M[.., rows, cols]. A per-head ``attn_mask`` [H, Nq, Nc] adds this head's slice,
        or with ``all_heads`` (the packed heads' one call) all of it: [B | 1, H, Nq, Nc]."""
        hp = self.hp
        mask = structure.additive_mask(
            nq, nc, dtype, device, causal=hp.causal, window=None if self.multiplied else hp.window,
            region=None if self.multiplied or hp.regions is None else (hp.region, hp.regions),
            attn_mask=aux["attn_mask"] if hp.attn_mask is not None and not self.head_bias else None,
            attn_mode=self.modes.get("attn_mask", "block"),
            key_padding=aux["key_padding"] if hp.key_padding is not None else None,
            padding_mode=self.modes.get("key_padding", "block"), literal=literal, rows=rows, cols=cols)
        if not self.head_bias:
            return mask
        bias = aux["attn_mask"].to(dtype)
        if all_heads:
            bias = bias.unsqueeze(0)  # [1, H, Nq, Nc]
            return bias if mask is None else bias + (mask.unsqueeze(-3) if mask.dim() == 3 else mask)
        bias = bias[self.head] if rows is None else bias[self.head][rows, cols]
        return bias if mask is None else bias + mask

    @property
    def multiplied(self) -> bool:
        """``window_scores = "multiply"``: the window or region multiplies the scores (seed 002 eq 7, ``R ⊙ Ψ``)."""
        return (self.hp.window is not None or self.hp.regions is not None) and self.hp.window_scores == "multiply"

    def logits(self, qq, kk, literal=False):
        """``Q Kᵀ · scale``; with ``window_scores = "multiply"`` times the band ``R_ij = [|i − j| <= window]`` and
        the region pair ``R^{r(k)}`` (the literal indicator matrices, or ``literal = False`` the pairs from item
        indices): a pair outside scores 0."""
        logits = (qq @ kk.transpose(-1, -2)) * self.scale
        if not self.multiplied:
            return logits
        hp, (nq, nc), dev = self.hp, logits.shape[-2:], logits.device
        if literal:
            keep = torch.ones(nq, nc, dtype=torch.bool, device=dev)
            if hp.window is not None:
                keep = keep & structure.band_matrix(nq, nc, hp.window, device=dev)
            if hp.regions is not None:
                keep = keep & structure.region_matrix(nq, nc, hp.region, hp.regions, device=dev)
            return logits * keep.to(logits.dtype)
        rows, cols = torch.arange(nq, device=dev)[:, None], torch.arange(nc, device=dev)
        outside = torch.zeros(nq, nc, dtype=torch.bool, device=dev)
        if hp.window is not None:
            outside = outside | structure.band_outside(rows, cols, hp.window)
        if hp.regions is not None:
            outside = outside | structure.region_outside(rows, cols, nq, nc, hp.region, hp.regions)
        return torch.where(outside, 0.0, logits)

    def _check_masks(self, aux, batch, nq, nc) -> None:
        """Each mask input fits the scores ``[B, Nq, Nc]`` (an ``InputError`` naming it otherwise): its symbols
        are sizes only the inputs fix, e.g. a ``[T, T]`` key_padding given to an unbatched graph."""
        if torch.compiler.is_compiling():
            return
        for key, tail in (("attn_mask", (nq, nc)), ("key_padding", (nc,))):
            ref = getattr(self.hp, key)
            if ref is None:
                continue
            shape = tuple(aux[key].shape)
            if key == "attn_mask" and self.head_bias:
                if shape[-2:] != (nq, nc) or self.head >= shape[0]:
                    raise InputError(f"the per-head bias '{ref.name}' has shape {list(shape)}, which does not fit "
                                     f"the attention scores [H > {self.head}, {nq}, {nc}]")
                continue
            lead, end = shape[:-len(tail)], shape[-len(tail):]
            if (len(shape) < len(tail) or len(lead) > 1 or (lead and lead[0] not in (1, batch))
                    or any(a not in (1, b) for a, b in zip(end, tail))):
                raise InputError(f"mask '{ref.name}' ({key}) has shape {list(shape)}, which does not fit the "
                                 f"attention scores [{', '.join(map(str, (batch, *tail)))}] "
                                 f"({'[B, Nq or 1, Nc] or [Nq or 1, Nc]' if len(tail) == 2 else '[B, Nc] or [Nc]'})")

    def entry_bias(self, aux, nq, nc):
        """``bias(rows, cols, dtype)``: the additive mask at the entries ``(rows, cols)`` (causal, window, attn_mask
        and key_padding terms), as :func:`structure.bilinear_entries` takes it."""
        return lambda rows, cols, dtype: self._additive_mask(aux, nq, nc, dtype, None, rows=rows, cols=cols)

    def entries(self, q, c, aux, dst, src):
        """Row = output entries A[dst, src] in O(E·r) without the N x N matrix: masked logits, and with softmax
        the row softmax over all keys (:func:`structure.bilinear_entries`)."""
        if self.multiplied or self.hp.softmax_upcast:  # every score of a row changes: its dense map at the edges
            return self.matrix(q, c, aux, literal=False)[..., dst, src]
        qq, kk = self._qk(q, c, aux)
        return structure.bilinear_entries(qq, kk, dst, src, self.scale, self.hp.softmax,
                                          self.entry_bias(aux, qq.shape[-2], kk.shape[-2]))

    def matrix(self, q, c, aux, size=None, literal=True):
        """softmax(Q Kᵀ · s + M), a query with no key left giving a zero row (as the attention kernels do).
        ``literal``: rotations as matrices and the window as the band matrix (the oracle); else the rotary tables
        and the masks from item indices (a relation's default form). Without softmax, the masked logits."""
        qq, kk = self._qk(q, c, aux, literal=literal)
        logits = self.logits(qq, kk, literal)
        self._check_masks(aux, q.shape[0] if q.dim() == 3 else 1, q.shape[-2], c.shape[-2])
        mask = self._additive_mask(aux, q.shape[-2], c.shape[-2], q.dtype, q.device, literal=literal)
        return _masked_softmax(logits, mask, self.hp.softmax, self.hp.softmax_upcast)

    def relation(self, q, c, aux):
        """The matrix with the rotary tables and the masks from item indices (no band or rotation matrix)."""
        return self.matrix(q, c, aux, literal=False)

    def apply(self, z, q, c, aux, attend=None):
        """``A z``; with softmax by ``attend(qq, kk, z, aux)`` (a kernel's bound method; default :meth:`attend`)."""
        if not self.hp.softmax:
            return self.relation(q, c, aux) @ z
        qq, kk = self._qk(q, c, aux)
        if qq.shape[-1] != kk.shape[-1]:  # pragma: no cover - shapes are checked statically
            raise RuntimeError("query/key width mismatch")
        return (attend or self.attend)(qq, kk, z, aux)

    def attend(self, qq, kk, values, aux):
        """softmax(qq kkᵀ · scale + masks) · values, ``[..., Nq, r]`` × ``[..., Nc, r]`` × ``[..., Nc, n]``: SDPA with
        every mask as one additive mask; a multiplied window (R ⊙ Ψ) changes the scores themselves, which no
        kernel's mask expresses, so its weights are formed here."""
        if self.multiplied or self.hp.softmax_upcast:  # weights formed here (no kernel scores so)
            self._check_masks(aux, qq.shape[0] if qq.dim() >= 3 else 1, qq.shape[-2], kk.shape[-2])
            mask = self._additive_mask(aux, qq.shape[-2], kk.shape[-2], qq.dtype, qq.device, all_heads=qq.dim() == 4)
            if mask is not None and qq.dim() == 4 and mask.dim() == 3:
                mask = mask.unsqueeze(1)
            weights = _masked_softmax(self.logits(qq, _repeat_kv(qq, kk)), mask, True, self.hp.softmax_upcast)
            return weights @ _repeat_kv(qq, values)
        self._check_masks(aux, qq.shape[0] if qq.dim() >= 3 else 1, qq.shape[-2], kk.shape[-2])
        mask = self._additive_mask(aux, qq.shape[-2], kk.shape[-2], qq.dtype, qq.device, all_heads=qq.dim() == 4)
        if mask is not None and qq.dim() == 4 and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # [B, 1, Nq|1, Nc]: broadcast over heads
        return _sdpa(qq, kk, values, mask, False, self.scale)

    sdpa_band = attend  # ``flex_attention``'s declared fallback: the band as SDPA's additive mask

    def attend_causal(self, qq, kk, values, aux):
        """Kernel op ``sdpa_causal``: SDPA's is_causal (top-left aligned: triu(1) blocked), the only mask."""
        return _sdpa(qq, kk, values, None, True, self.scale)

    def attend_window(self, qq, kk, values, aux):
        """Kernel op ``flex_attention``: FlexAttention's band block mask (key/value groups repeated per head)."""
        kk, values = _repeat_kv(qq, kk), _repeat_kv(qq, values)
        return flex_op.windowed_flex_attention(qq, kk, values, self.hp.window, self.hp.causal, self.scale)


class _LinearAttentionXi(XiModule):
    """``A = D⁻¹(φ(q W_q) φ(c W_k)ᵀ ⊙ M)`` (:mod:`rpn2c.functional.linear_attention`)."""

    axis = "instance"

    def __init__(self, hp, mq, mc):
        super().__init__()
        self.hp = hp
        self.w_q = nn.Parameter(torch.empty(mq, hp.rank).uniform_(-1 / math.sqrt(mq), 1 / math.sqrt(mq)))
        self.w_k = nn.Parameter(torch.empty(mc, hp.rank).uniform_(-1 / math.sqrt(mc), 1 / math.sqrt(mc)))

    def _features(self, q, c):
        return linear_attention.feature_map(q @ self.w_q), linear_attention.feature_map(c @ self.w_k)

    def matrix(self, q, c, aux, size=None):
        return linear_attention.linear_attention_matrix(*self._features(q, c), self.hp.causal)

    def associative(self, z, q, c, aux):
        """Kernel op ``linear_attention``: ``A z`` by associativity, without the matrix."""
        return linear_attention.linear_attention(*self._features(q, c), z, self.hp.causal)


def _rms(t, gamma, eps: float, literal: bool, upcast: bool = False):
    """``t/√(mean(t²) + ε)·γ`` over the last axis; half precision normalised in float32 (as ``rms_norm``);
    ``upcast``: every dtype normalised in float32 and cast back before γ (LlamaRMSNorm's order)."""
    if upcast:
        h = t.to(torch.float32)
        return gamma * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(t.dtype)
    if literal:
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps) * gamma
    if t.dtype in (torch.float16, torch.bfloat16):
        return F.rms_norm(t.float(), (t.shape[-1],), None, eps).to(t.dtype) * gamma
    return F.rms_norm(t, (t.shape[-1],), gamma, eps)


def _masked_softmax(logits, mask, softmax: bool, upcast: bool = False):
    """``softmax(logits + mask)`` over the keys, a query with no key left giving a zero row (as SDPA); without
    softmax a blocked pair has weight 0 (not −inf) and finite additive masks are added; ``upcast``: the softmax
    in float32, cast back to the logits' dtype."""
    if not softmax:
        return logits if mask is None else torch.where(torch.isneginf(mask), 0.0, logits + mask)

    def soft(t):
        return torch.softmax(t, dim=-1, dtype=torch.float32).to(t.dtype) if upcast else torch.softmax(t, dim=-1)

    if mask is None:
        return soft(logits)
    logits = logits + mask
    empty = torch.isneginf(logits).all(-1, keepdim=True)
    return torch.where(empty, 0.0, soft(torch.where(empty, 0.0, logits)))


def _grouped(qq, kk) -> bool:
    """Whether ``kk`` ``[B, G, Nc, r]`` holds G < H key/value heads for the H query heads of ``qq``."""
    return qq.dim() == 4 and kk.shape[-3] != qq.shape[-3]


def _repeat_kv(qq, t):
    """``t`` ``[B, G, Nc, ·]`` as ``[B, H, Nc, ·]``, group g serving query heads g·H/G … (g+1)·H/G − 1 (transformers'
    ``repeat_kv``); unchanged without groups."""
    if not _grouped(qq, t):
        return t
    b, g, n, w = t.shape
    return t[:, :, None].expand(b, g, qq.shape[-3] // g, n, w).reshape(b, qq.shape[-3], n, w)


def _sdpa(qq, kk, values, mask, causal: bool, scale: float):
    """One ``scaled_dot_product_attention``; key/value groups (fewer heads in ``kk`` than in ``qq``) by its
    ``enable_gqa`` where torch's fused kernel for these operands takes it (every CPU kernel, CUDA's flash), else
    on copies of each group's keys and values per query head (the math kernel would make the same copies)."""
    if not _grouped(qq, kk):
        return F.scaled_dot_product_attention(qq, kk, values, attn_mask=mask, is_causal=causal, scale=scale)
    if qq.device.type != "cuda" or torch.compiler.is_compiling() or torch._fused_sdp_choice(
            qq, kk, values, mask, 0.0, causal, scale=scale, enable_gqa=True) != SDPBackend.MATH.value:
        return F.scaled_dot_product_attention(qq, kk, values, attn_mask=mask, is_causal=causal, scale=scale,
                                              enable_gqa=True)
    return F.scaled_dot_product_attention(qq, _repeat_kv(qq, kk), _repeat_kv(qq, values), attn_mask=mask,
                                          is_causal=causal, scale=scale)
