"""Interdependence functions ξ of the compiler's core set: none, grid patches, chain, graph, bilinear forms.

Instance matrices are stored with row = output item (``Y = A @ Z``); attribute matrices act as ``Z @ A``.
"""

from __future__ import annotations

import math
from typing import Literal, Optional

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from rpn2c.components.base import Interdependence, ShapeRuleError, XiModule
from rpn2c.components.grid import CentredPatchHP, Geometry, PatchHP
from rpn2c.components.registry import HP, ValueRef, register
from rpn2c.functional import structure


@register
class NoneXi(Interdependence):
    """Identity interdependence A = I (skipped entirely): RPN 2 reduces to RPN v1."""

    name, family = "identity", "interdependence"
    aliases = ("none", "eye")

    def build(self, ctx):
        return _IdentityXi(ctx.axis)


class _IdentityXi(XiModule):
    def __init__(self, axis):
        super().__init__()
        self.axis = axis

    def matrix(self, q, c, aux, size=None):
        n = size if size is not None else c.shape[-2 if self.axis == "instance" else -1]
        return torch.eye(n, dtype=q.dtype, device=q.device)

    def apply(self, z, q, c, aux):
        return z


# ------------------------------------------------------------------------------------------------ grid
class GridXi(Interdependence):
    """Base of grid patch ξ. On an image head it turns [C, *S] into patches: [P, C·p] (padding mode,
    i.e. im2col — a convolution once ψ is applied) or [P, C] (aggregation mode, a box sum)."""

    axes = ("attribute",)
    kind = "grid"

    def geometry(self, rank: int) -> Geometry:
        raise NotImplementedError

    @property
    def mode(self) -> str:
        return self.hp.mode

    def patch_features(self, channels: int, rank: int) -> int:
        return channels * self.geometry(rank).patch_size if self.mode == "padding" else channels

    def build(self, ctx):
        raise ShapeRuleError("grid interdependence is applied by the head")


class _GridHP(PatchHP):
    mode: Literal["padding", "aggregation"] = "padding"


@register
class GridPatch(GridXi):
    """Cuboid grid patches in conv terms (size, stride, pad, dilation, padding mode): x·A is im2col."""

    name, family = "grid_patch", "interdependence"
    HP = _GridHP

    def geometry(self, rank):
        return self.hp.geometry(rank)


class _CentredHP(CentredPatchHP):
    mode: Literal["padding", "aggregation"] = "padding"


@register
class CuboidPatch(GridXi):
    """The paper's centred cuboid patch (half-extents p, p' per axis, centre distance = stride): ceil(L/s) patches."""

    name, family = "cuboid_patch", "interdependence"
    HP = _CentredHP

    def geometry(self, rank):
        return self.hp.geometry(rank)


def padding_matrix(geo: Geometry, spatial: tuple[int, ...], dtype, device) -> torch.Tensor:
    """The paper's padding-mode matrix A ∈ {0,1}^{N x P·p}: column q·p + j is one-hot at tap j of patch q."""
    return structure.padding_matrix(**geo.structure_args(spatial, device), device=device, dtype=dtype)


def aggregation_matrix(geo: Geometry, spatial: tuple[int, ...], dtype, device) -> torch.Tensor:
    """The paper's aggregation-mode matrix A ∈ {0,1}^{N x P}: column q sums the cells of patch q."""
    return structure.aggregation_matrix(**geo.structure_args(spatial, device), device=device, dtype=dtype)


# ------------------------------------------------------------------------------------------------ chain
@register
class Chain(Interdependence):
    """Chain ξ: A[t, t−1] = 1 (forward), A[t, t+1] = 1 (backward) or both; optional self-loop; multi-hop A^h
    or accumulated Σ_{k=0..h} A^k (I included, eq 78); optional row/column normalisation."""

    name, family = "chain", "interdependence"

    class HP(HP):
        direction: Literal["forward", "backward", "bidirectional"] = "forward"
        self_loop: bool = False
        hops: int = Field(1, ge=1)
        accumulate: bool = False
        norm: Literal["none", "row", "column"] = "none"

    def build(self, ctx):
        return _ChainXi(self.hp, ctx.axis)


class _ChainXi(XiModule):
    def __init__(self, hp, axis):
        super().__init__()
        self.hp, self.axis = hp, axis

    # one application of the chain adjacency along the item axis (dim -2 of [.., N, F]); transpose flips it
    def _step(self, z, transpose=False):
        fwd = self.hp.direction in ("forward", "bidirectional")
        bwd = self.hp.direction in ("backward", "bidirectional")
        if transpose:
            fwd, bwd = bwd, fwd
        out = z * 1.0 if self.hp.self_loop else torch.zeros_like(z)
        if fwd:  # out[t] += z[t-1]
            out = out + F.pad(z, (0, 0, 1, 0))[..., :-1, :]
        if bwd:  # out[t] += z[t+1]
            out = out + F.pad(z, (0, 0, 0, 1))[..., 1:, :]
        return out

    def _power(self, z, transpose=False):
        hp = self.hp
        acc = z if hp.accumulate else None
        cur = z
        for _ in range(hp.hops):
            cur = self._step(cur, transpose)
            acc = acc + cur if hp.accumulate else None
        return acc if hp.accumulate else cur

    def _on_items(self, z):
        """A @ z along dim -2, normalised, without building A."""
        if self.hp.norm == "row":
            ones = torch.ones(*z.shape[-2:-1], 1, dtype=z.dtype, device=z.device)
            deg = self._power(ones)
            return self._power(z) / torch.where(deg == 0, torch.ones_like(deg), deg)
        if self.hp.norm == "column":
            ones = torch.ones(*z.shape[-2:-1], 1, dtype=z.dtype, device=z.device)
            deg = self._power(ones, transpose=True)
            return self._power(z / torch.where(deg == 0, torch.ones_like(deg), deg))
        return self._power(z)

    def matrix(self, q, c, aux, size=None):
        n = size if size is not None else (c.shape[-2] if self.axis == "instance" else c.shape[-1])
        a = _chain_dense(n, self.hp, q.dtype, q.device)
        return a if self.axis == "instance" else a.T

    def apply(self, z, q, c, aux):
        if self.axis == "instance":
            return self._on_items(z)
        return self._on_items(z.transpose(-1, -2)).transpose(-1, -2)


def _chain_dense(n, hp, dtype, device):
    """The literal chain matrix (row = output item)."""
    a = torch.zeros(n, n, dtype=dtype, device=device)
    idx = torch.arange(n - 1, device=device)
    if hp.direction in ("forward", "bidirectional"):
        a[idx + 1, idx] = 1
    if hp.direction in ("backward", "bidirectional"):
        a[idx, idx + 1] = 1
    if hp.self_loop:
        a = a + torch.eye(n, dtype=dtype, device=device)
    power = torch.linalg.matrix_power(a, hp.hops)
    if hp.accumulate:
        power = sum((torch.linalg.matrix_power(a, k) for k in range(hp.hops + 1)),
                    torch.zeros_like(a))
    return _degree_normalize(power, hp.norm)


def _degree_normalize(a, norm):
    if norm == "row":
        d = a.sum(-1, keepdim=True)
        return a / torch.where(d == 0, torch.ones_like(d), d)
    if norm == "column":
        d = a.sum(-2, keepdim=True)
        return a / torch.where(d == 0, torch.ones_like(d), d)
    return a


# ------------------------------------------------------------------------------------------------ graph
@register
class Graph(Interdependence):
    """Graph ξ from an edge list (row 0 source, row 1 target; A[target, source] = w), optional self-loops,
    normalisation none | row (D⁻¹A) | column (AD⁻¹) | symmetric (D^{-1/2}(A+I)D^{-1/2}, Kipf's GCN)."""

    name, family = "graph", "interdependence"
    axes = ("instance",)

    class HP(HP):
        edges: ValueRef
        weight: Optional[ValueRef] = None
        norm: Literal["none", "row", "column", "symmetric"] = "none"
        self_loops: bool = False
        directed: bool = True
        hops: int = Field(1, ge=1)

    def build(self, ctx):
        return _GraphXi(self.hp)


class _GraphXi(XiModule):
    axis = "instance"

    def __init__(self, hp):
        super().__init__()
        self.hp = hp

    def edge_list(self, aux, n, dtype, device):
        """(src, dst, w) with self-loops and normalisation applied: A[dst, src] = w. O(E)."""
        hp = self.hp
        return structure.graph_norm_weights(aux["edges"], n, aux.get("weight"), self_loops=hp.self_loops,
                                            normalization=hp.norm, directed=hp.directed, device=device,
                                            dtype=dtype)

    def matrix(self, q, c, aux, size=None):
        n = size if size is not None else c.shape[-2]
        src, dst, w = self.edge_list(aux, n, q.dtype, q.device)
        a = torch.zeros(n, n, dtype=q.dtype, device=q.device).index_put_((dst, src), w, accumulate=True)
        return torch.linalg.matrix_power(a, self.hp.hops)

    def apply(self, z, q, c, aux):
        n = z.shape[-2]
        src, dst, w = self.edge_list(aux, n, z.dtype, z.device)
        for _ in range(self.hp.hops):
            z = structure.graph_propagate(z, src, dst, w, n, dim=-2)
        return z


# ------------------------------------------------------------------------------------------------ bilinear
class _BilinearHP(HP):
    softmax: bool = Field(True, description="row softmax over keys (scaled-softmax, eq 182)")
    scale: Optional[float] = Field(None, description="logit scale; default 1/sqrt(rank)")
    bias: bool = Field(False, description="biases on the query/key projections")
    causal: bool = Field(False, description="item t attends only to items <= t")
    key_padding: Optional[ValueRef] = Field(None, description="[B, Nc] mask input over context items")
    attn_mask: Optional[ValueRef] = Field(None, description="[Nq, Nc] or [B, Nq, Nc] mask input")
    keys: Optional[ValueRef] = Field(None, description="items input the keys are computed from "
                                                      "(default: the head's data, i.e. its context)")


class _BilinearBase(Interdependence):
    axes = ("instance",)
    kind = "data"

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

    def _additive_mask(self, aux, nq, nc, dtype, device):
        """All masks as one additive float mask [.., Nq, Nc] (-inf = blocked), or None."""
        bias = None

        def add(m, mode):
            nonlocal bias
            if mode == "add":
                term = m.to(dtype)
            else:
                blocked = m.bool() if mode == "block" else ~m.bool()
                term = torch.zeros(blocked.shape, dtype=dtype, device=device).masked_fill(blocked, float("-inf"))
            bias = term if bias is None else bias + term

        if self.hp.causal:
            add(torch.ones(nq, nc, dtype=torch.bool, device=device).triu(1), "block")
        if self.hp.attn_mask is not None:
            add(aux["attn_mask"], self.modes.get("attn_mask", "block"))
        if self.hp.key_padding is not None:
            add(aux["key_padding"].unsqueeze(-2), self.modes.get("key_padding", "block"))
        return bias

    def matrix(self, q, c, aux, size=None):
        qq, kk = self._qk(q, c, aux)
        logits = (qq @ kk.transpose(-1, -2)) * self.scale
        mask = self._additive_mask(aux, q.shape[-2], c.shape[-2], q.dtype, q.device)
        if not self.hp.softmax:
            # without softmax a blocked pair has weight 0 (not -inf); finite additive masks are added
            return logits if mask is None else torch.where(torch.isneginf(mask), 0.0, logits + mask)
        if mask is not None:
            logits = logits + mask
        return torch.softmax(logits, dim=-1)

    def apply(self, z, q, c, aux):
        if not self.hp.softmax:
            return self.matrix(q, c, aux) @ z
        qq, kk = self._qk(q, c, aux)
        mask = self._additive_mask(aux, q.shape[-2], c.shape[-2], q.dtype, q.device)
        if qq.shape[-1] != kk.shape[-1]:  # pragma: no cover - shapes are checked statically
            raise RuntimeError("query/key width mismatch")
        return F.scaled_dot_product_attention(qq, kk, z, attn_mask=mask, scale=self.scale)

