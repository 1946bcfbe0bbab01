"""The bilinear / attention ξ (paper eq 55–56, 181–182): A = softmax((X W_q)(C W_k)ᵀ · scale + masks).

Causal, windowed, attn_mask and key_padding masks are one additive mask (:func:`structure.additive_mask`). The
default lowering attends by the kernel op the optimiser chose (SDPA, SDPA's causal form, FlexAttention's band);
the reference lowering builds the literal matrix; a hybrid ξ takes the entries at its edges (:meth:`entries`).
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from rpn2c.components.base import Interdependence, ShapeRuleError, XiModule
from rpn2c.components.registry import HP, ValueRef, register
from rpn2c.errors import InputError
from rpn2c.functional import flex_op, structure


class _BilinearHP(HP):
    softmax: bool = Field(True, description="row softmax over keys (scaled-softmax, eq 182)")
    scale: Optional[float] = Field(None, description="logit scale; default 1/sqrt(rank)")
    bias: bool = Field(False, description="biases on the query/key projections")
    causal: bool = Field(False, description="item t attends only to items <= t")
    window: Optional[int] = Field(None, ge=0, description="local window: item i attends only to items j with "
                                                          "|i − j| <= window (with causal: i − window <= j <= i)")
    key_padding: Optional[ValueRef] = Field(None, description="[B, Nc] mask input over context items")
    attn_mask: Optional[ValueRef] = Field(None, description="[Nq, Nc] or [B, Nq, Nc] mask input")
    keys: Optional[ValueRef] = Field(None, description="items input the keys are computed from "
                                                      "(default: the head's data, i.e. its context)")


class _BilinearBase(Interdependence):
    axes = ("instance",)
    kind = "data"
    attention = True

    def rank(self, ctx) -> int:
        raise NotImplementedError

    def out_size(self, ctx):
        keys = ctx.aux.get("keys")
        if keys is not None and str(keys.items) != str(ctx.size):
            raise ShapeRuleError(f"the keys {keys} must have as many items as the values ({ctx.size})")
        return ctx.size

    def key_features(self, ctx):
        keys = ctx.aux.get("keys")
        return ctx.context_features if keys is None else keys.features

    def count(self, ctx):
        r = self.rank(ctx)
        extra = 2 * r if self.hp.bias else 0
        return ctx.query_features * r + self.key_features(ctx) * r + extra

    def build(self, ctx):
        return _BilinearXi(self.hp, ctx.query_features, self.key_features(ctx), self.rank(ctx), ctx.aux)


@register
class LowRankBilinear(_BilinearBase):
    """Low-rank bilinear ξ: A = softmax((X W_q)(C W_k)ᵀ · scale) with W_q, W_k of rank r (attention, eq 56/181)."""

    name, family = "low_rank_bilinear", "interdependence"
    aliases = ("attention",)
    example_call = "low_rank_bilinear(rank = 2)"

    class HP(_BilinearHP):
        rank: int = Field(..., ge=1)

    def rank(self, ctx):
        return self.hp.rank


@register
class Bilinear(_BilinearBase):
    """Parameterised bilinear ξ: A = softmax(X W Cᵀ · scale), W ∈ R^{Mq x Mc} (eq 55)."""

    name, family = "bilinear", "interdependence"
    HP = _BilinearHP

    def rank(self, ctx):
        return self.key_features(ctx)

    def count(self, ctx):
        mk = self.key_features(ctx)
        return ctx.query_features * mk + (mk if self.hp.bias else 0)

    def build(self, ctx):
        return _BilinearXi(self.hp, ctx.query_features, self.key_features(ctx), None, ctx.aux)


class _BilinearXi(XiModule):
    axis = "instance"

    def __init__(self, hp, mq, mc, rank, aux_types):
        super().__init__()
        self.hp = hp
        self.full = rank is None
        r = mc if rank is None else rank
        bound_q, bound_k = 1 / math.sqrt(mq), 1 / math.sqrt(mc)
        self.w_q = nn.Parameter(torch.empty(mq, r).uniform_(-bound_q, bound_q))
        if not self.full:
            self.w_k = nn.Parameter(torch.empty(mc, r).uniform_(-bound_k, bound_k))
        self.b_q = nn.Parameter(torch.zeros(r)) if hp.bias else None
        self.b_k = nn.Parameter(torch.zeros(r)) if hp.bias and not self.full else None
        self.scale = hp.scale if hp.scale is not None else 1 / math.sqrt(r)
        self.modes = {k: t.mask_mode for k, t in aux_types.items()}

    def _qk(self, q, c, aux):
        if self.hp.keys is not None:
            c = aux["keys"]
        qq = q @ self.w_q + (self.b_q if self.b_q is not None else 0)
        kk = c if self.full else c @ self.w_k + (self.b_k if self.b_k is not None else 0)
        return qq, kk

    def _additive_mask(self, aux, nq, nc, dtype, device, literal=False, rows=None, cols=None):
        """All masks as one additive float mask [.., Nq, Nc] (-inf = blocked), or None
        (:func:`rpn2c.functional.structure.additive_mask`); ``literal``: the window as the band matrix R; ``rows``,
        ``cols``: only the entries M[.., rows, cols]."""
        hp = self.hp
        return structure.additive_mask(
            nq, nc, dtype, device, causal=hp.causal, window=hp.window,
            attn_mask=aux["attn_mask"] if hp.attn_mask is not None else None,
            attn_mode=self.modes.get("attn_mask", "block"),
            key_padding=aux["key_padding"] if hp.key_padding is not None else None,
            padding_mode=self.modes.get("key_padding", "block"), literal=literal, rows=rows, cols=cols)

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
        qq, kk = self._qk(q, c, aux)
        return structure.bilinear_entries(qq, kk, dst, src, self.scale, self.hp.softmax,
                                          self.entry_bias(aux, qq.shape[-2], kk.shape[-2]))

    def matrix(self, q, c, aux, size=None):
        qq, kk = self._qk(q, c, aux)
        logits = (qq @ kk.transpose(-1, -2)) * self.scale
        self._check_masks(aux, q.shape[0] if q.dim() == 3 else 1, q.shape[-2], c.shape[-2])
        mask = self._additive_mask(aux, q.shape[-2], c.shape[-2], q.dtype, q.device, literal=True)
        if not self.hp.softmax:
            # without softmax a blocked pair has weight 0 (not -inf); finite additive masks are added
            return logits if mask is None else torch.where(torch.isneginf(mask), 0.0, logits + mask)
        if mask is None:
            return torch.softmax(logits, dim=-1)
        logits = logits + mask
        empty = torch.isneginf(logits).all(-1, keepdim=True)  # a query with no key left: a zero row (as SDPA)
        return torch.where(empty, 0.0, torch.softmax(torch.where(empty, 0.0, logits), dim=-1))

    def apply(self, z, q, c, aux, kernel: str | None = None):
        if not self.hp.softmax:
            return self.matrix(q, c, aux) @ z
        qq, kk = self._qk(q, c, aux)
        if qq.shape[-1] != kk.shape[-1]:  # pragma: no cover - shapes are checked statically
            raise RuntimeError("query/key width mismatch")
        return self.attend(qq, kk, z, aux, kernel)

    def attend(self, qq, kk, values, aux, kernel: str | None = None):
        """softmax(qq kkᵀ · scale + masks) · values, ``[..., Nq, r]`` × ``[..., Nc, r]`` × ``[..., Nc, n]``, by the
        kernel op the optimiser chose: ``sdpa_causal`` (SDPA's is_causal: the causal mask is the only one),
        ``flex_attention`` (FlexAttention's band block mask; its declared fallback ``sdpa_band`` where gradients
        are needed, for float64 or short sequences), else SDPA with every mask as one additive mask."""
        if kernel == "sdpa_causal" and self.hp.window is None:  # top-left aligned = triu(1) blocked; a band isn't
            return F.scaled_dot_product_attention(qq, kk, values, is_causal=True, scale=self.scale)
        if (kernel == "flex_attention" and flex_op.supported(qq, kk, values)
                and flex_op.worthwhile(qq.shape[-2], kk.shape[-2], self.hp.window)):
            return windowed_flex_attention(qq, kk, values, self.hp.window, self.hp.causal, self.scale)
        self._check_masks(aux, qq.shape[0] if qq.dim() >= 3 else 1, qq.shape[-2], kk.shape[-2])
        mask = self._additive_mask(aux, qq.shape[-2], kk.shape[-2], qq.dtype, qq.device)
        if mask is not None and qq.dim() == 4 and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # [B, 1, Nq|1, Nc]: broadcast over heads
        return F.scaled_dot_product_attention(qq, kk, values, attn_mask=mask, scale=self.scale)


def windowed_flex_attention(qq, kk, values, window: int, causal: bool, scale: float):
    """Attention restricted to |i − j| <= window (and j <= i if causal) by FlexAttention's block mask (the op
    ``rpn2c::window_attention``); 3-D operands get a head axis."""
    heads = qq.dim() == 4
    q, k, v = (t if heads else t.unsqueeze(1) for t in (qq, kk, values))
    out = flex_op.window_attention(q, k, v, window, causal, scale)
    return out if heads else out.squeeze(1)
