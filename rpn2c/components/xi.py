"""Interdependence functions ξ of the compiler's core set: none, grid patches, chain, graph, bilinear forms.

Instance matrices are stored with row = output item (``Y = A @ Z``); attribute matrices act as ``Z @ A``.
"""

from __future__ import annotations

import functools
import math
from typing import Literal, Optional

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from rpn2c.components.base import Interdependence, ShapeRuleError, XiModule, graph_example
from rpn2c.components.grid import CentredPatchHP, Geometry, PatchHP
from rpn2c.components.registry import HP, ValueRef, register
from rpn2c.functional import flex_op, kernels, structure


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
    example_call = "grid_patch(size = 3, pad = 1)"

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
class _ChainHP(HP):
    direction: Literal["forward", "backward", "bidirectional"] = "forward"
    self_loop: bool = False
    self_scaling: float = Field(1.0, description="s of the self-loop A + s·I (toolkit self_scaling)")
    mode: Literal["power", "accumulate", "inverse", "inverse_approx", "exponential"] = "power"
    hops: int = Field(1, ge=0, description="h of A^h (power) or Σ_{k≤h} A^k (accumulate)")
    accumulate: bool = Field(False, description='shorthand for mode = "accumulate"')
    include_identity: bool = Field(True, description="accumulate from k = 0 (eq 78) or from k = 1 (toolkit)")
    alpha: float = Field(1.0, description="α of (I − αA)⁻¹ and exp(αA)")
    norm: Literal["none", "row", "column", "symmetric"] = "none"

    @model_validator(mode="after")
    def _consistent(self):
        if self.accumulate and self.mode not in ("power", "accumulate"):
            raise ValueError(f'accumulate = true contradicts mode = "{self.mode}"')
        s = self.self_scaling if self.self_loop else 0.0
        if self.mode == "inverse_approx" and self.self_loop:
            raise ValueError('mode = "inverse_approx" is eq (80) on the chain without self-loop')
        if self.mode == "inverse":
            if self.direction == "bidirectional" and abs(self.alpha) * (2 + abs(s)) >= 1:
                raise ValueError('a bidirectional chain needs |alpha|·(2 + |s|) < 1 for mode = "inverse" (a '
                                 'convergent Σ α^k A^k); the paper\'s fallback is mode = "inverse_approx"')
            if self.direction != "bidirectional" and 1 - self.alpha * s == 0:
                raise ValueError("I − αA is singular when alpha · self_scaling = 1")
        if self.mode == "exponential" and abs(self.alpha) * (2 + abs(s)) > 700:  # e^{α(λ+s)} beyond float64
            raise ValueError("exp(αA) overflows: |alpha|·(2 + |self_scaling|) must stay below 700")
        return self

    @property
    def effective_mode(self) -> str:
        return "accumulate" if self.accumulate else self.mode


@register
class Chain(Interdependence):
    """Chain ξ: M·z, A[t, t−1] = 1 (forward) | A[t, t+1] (backward) | both, + s·I; M = A^h | Σ_{k=k0..h} A^k | (I − αA)⁻¹ | exp(αA), then row/column/symmetric degree normalisation.

    Stored row = output item: the paper's superdiagonal A(i, i+1) applied as xA / AᵀX (eq 74, 175) is our
    A[t, t−1] (semantics.md); on the attribute axis the matrix is its transpose (z·A).
    Accumulate includes I (k0 = 0, eq 78); include_identity = false gives the toolkit's Σ_{k=1..h} (erratum 12).
    The toolkit's multi-hop chain is (A + I)^h: self_loop = true (erratum 12); the paper's A^h is the default.
    inverse = (I − αA)⁻¹ exactly (uni: doubling scan; bidirectional: DST-I spectral, needs |α|(2+|s|) < 1).
    inverse_approx = the paper's eq (80) usage: uni (I − A)⁻¹ (lower ones), bidirectional Σ_{k<n} A^k (eq 78 with
    h = n − 1, the paper's fallback; the toolkit's Σ_{k≥1} + column normalisation is not followed).
    exponential = exp(αA) (Horner on shifts, or DST-I spectral); default lowering never builds an n x n matrix.
    """

    name, family = "chain", "interdependence"
    HP = _ChainHP

    def build(self, ctx):
        return _ChainXi(self.hp, ctx.axis)


class _ChainXi(XiModule):
    def __init__(self, hp, axis):
        super().__init__()
        self.hp, self.axis = hp, axis

    def _forward_op(self, z):
        """M @ z along dim -2 for the forward (or bidirectional) chain, by shifts / scans / DST."""
        hp = self.hp
        bi = hp.direction == "bidirectional"
        s = hp.self_scaling if hp.self_loop else 0.0
        mode = hp.effective_mode
        if mode in ("power", "accumulate"):
            return structure.chain_apply(z, -2, hp.hops, mode=mode, bidirectional=bi, self_loop=hp.self_loop,
                                         self_scaling=hp.self_scaling, include_identity=hp.include_identity)
        if mode == "inverse_approx":
            return structure.chain_apply(z, -2, mode="inverse", bidirectional=bi)
        if mode == "inverse":
            return structure.chain_inverse_apply(z, -2, alpha=hp.alpha, bidirectional=bi, self_scaling=s)
        return structure.chain_exp_apply(z, -2, alpha=hp.alpha, bidirectional=bi, self_scaling=s)

    def _op(self, z, transpose=False):
        """M @ z (or Mᵀ @ z): backward = J·M_forward·J and M_forwardᵀ = J·M_forward·J (J reverses the items)."""
        backward = self.hp.direction == "backward"
        if transpose and self.hp.direction != "bidirectional":
            backward = not backward
        return self._forward_op(z.flip(-2)).flip(-2) if backward else self._forward_op(z)

    def _on_items(self, z):
        """Normalised M @ z along dim -2 without building M (degrees = M applied to ones; zero degree -> 0)."""
        norm = self.hp.norm
        if norm == "none":
            return self._op(z)
        ones = torch.ones(z.shape[-2], 1, dtype=z.dtype, device=z.device)
        if norm == "row":
            return self._op(z) * _chain_inv(self._op(ones))
        if norm == "column":
            return self._op(z * _chain_inv(self._op(ones, transpose=True)))
        d = _chain_inv_sqrt(self._op(ones))
        return d * self._op(z * d)

    def matrix(self, q, c, aux, size=None):
        n = size if size is not None else (c.shape[-2] if self.axis == "instance" else c.shape[-1])
        a = _chain_dense(n, self.hp, q.dtype, q.device)
        return a if self.axis == "instance" else a.T

    def apply(self, z, q, c, aux):
        if self.axis == "instance":
            return self._on_items(z)
        return self._on_items(z.transpose(-1, -2)).transpose(-1, -2)


def _chain_inv(d):
    return torch.where(d != 0, 1.0 / torch.where(d != 0, d, torch.ones_like(d)), torch.zeros_like(d))


def _chain_inv_sqrt(d):
    return torch.where(d > 0, torch.where(d > 0, d, torch.ones_like(d)).rsqrt(), torch.zeros_like(d))


def _chain_dense(n, hp, dtype, device):
    """The literal chain matrix (row = output item), as the paper writes it (reference lowering)."""
    bi = hp.direction == "bidirectional"
    mode = hp.effective_mode
    if mode in ("power", "accumulate"):
        m = structure.multihop_chain(n, hp.hops, mode == "accumulate", hp.include_identity, bidirectional=bi,
                                     self_loop=hp.self_loop, self_scaling=hp.self_scaling, device=device,
                                     dtype=dtype)
    elif mode == "inverse_approx":
        m = structure.chain_inverse_approx(n, bi, device=device, dtype=dtype)
    else:
        a = structure.chain_matrix(n, bi, hp.self_loop, hp.self_scaling, device=device, dtype=dtype)
        if mode == "inverse":
            m = torch.linalg.inv(torch.eye(n, dtype=dtype, device=device) - hp.alpha * a)
        else:
            m = torch.linalg.matrix_exp(hp.alpha * a)
    if hp.direction == "backward":
        m = m.T
    return m if hp.norm == "none" else kernels.degree_normalize(m, hp.norm)


# ------------------------------------------------------------------------------------------------ graph
class _GraphHP(HP):
    edges: ValueRef
    weight: Optional[ValueRef] = None
    norm: Literal["none", "row", "column", "symmetric"] = "none"
    self_loops: Optional[bool] = Field(None, description="add missing self-loops first; default: symmetric only")
    directed: bool = True
    hops: int = Field(1, ge=0)
    mode: Literal["power", "accumulate"] = "power"
    include_identity: bool = Field(True, description="accumulate from k = 0 (eq 83) or from k = 1")


@register
class Graph(Interdependence):
    """Graph ξ: M·z, A[dst, src] = w from an edge list, normalised none | row D⁻¹A | column AD⁻¹ | symmetric D^{-1/2}(A+I)D^{-1/2}; M = A^h or Σ_{k=k0..h} A^k.

    Edge list: row 0 source, row 1 target (PyG); undirected = max(A, Aᵀ); self-loops are added before
    normalising (toolkit order) and default to on for symmetric only, which is Kipf's GCN = PyG gcn_norm
    (semantics.md). Erratum 13: eq (176) (column) and eq (177) (D⁻¹Â + I, row) are neither Kipf's nor each
    other; eq (177) is hybrid(parts = ["graph", "identity"], edges = edges, norm = "row") (sum fusion).
    Multi-hop (eq 83): accumulate includes I (k0 = 0) unless include_identity = false. Default lowering:
    gather/index_add per hop, never an n x n matrix.
    """

    name, family = "graph", "interdependence"
    HP = _GraphHP
    example, example_call = graph_example(), "{name}(edges = edges)"
    shareable = True  # the normalised edge list depends only on the named inputs: computed once per forward
    graph_operator = True  # propagation can run as one SpMM on the built adjacency (rule graph_spmm)

    def build(self, ctx):
        return _GraphXi(self.hp, ctx.axis)


class _GraphXi(XiModule):
    def __init__(self, hp, axis="instance"):
        super().__init__()
        self.hp, self.axis = hp, axis
        self.share_key = None  # set by the lowering when the optimiser's shared_xi rule merged this ξ with others

    def edge_list(self, aux, n, dtype, device):
        """(src, dst, w) with self-loops and normalisation applied: A[dst, src] = w. O(E).

        Shared within one forward by every ξ the optimiser found identical (``shared_xi``: same settings, same
        edge inputs), also under ``torch.compile``. Across calls, the one graph cache (``graph_cache``) serves it
        while the same edge (and weight) tensors come back unmodified — a fixed training graph is normalised
        once; weights that need gradients and compiled graphs compute it in place.
        """
        memo = aux.get("_memo") if self.share_key is not None else None
        if memo is not None:
            key = (self.share_key, n if isinstance(n, int) else str(n), dtype, device)  # str: a symbolic size
            if key not in memo:
                memo[key] = self._edge_list(aux, n, dtype, device)
            return memo[key]
        return self._edge_list(aux, n, dtype, device)

    def _edge_list(self, aux, n, dtype, device):
        hp = self.hp
        return structure.normalized_edges(aux["edges"], aux.get("weight"), n, dtype, device, hp.self_loops, hp.norm,
                                          hp.directed)

    def support(self, aux, n, dtype, device):
        """The edge list of the literal matrix when it is the 1-hop adjacency (hybrid's sparse path), else None."""
        if self.hp.hops != 1 or self.hp.mode != "power":
            return None
        return self.edge_list(aux, n, dtype, device)

    def _adjacency(self, aux, n, dtype, device):
        hp = self.hp
        return structure.graph_adjacency(aux["edges"], n, aux.get("weight"), directed=hp.directed,
                                         self_loops=hp.self_loops, normalization=hp.norm, device=device,
                                         dtype=dtype)

    def _from_adjacency(self, a):
        """The literal matrix, given the normalised 1-hop adjacency (multi-hop power or accumulation)."""
        return structure.multihop_graph(a, self.hp.hops, self.hp.mode == "accumulate", self.hp.include_identity)

    def _propagate(self, zz, src, dst, w, n, operator=None):
        """``_from_adjacency(A) @ zz`` on the edge list or its SpMM operator (never a dense multi-hop matrix)."""
        hp = self.hp
        return structure.multihop_propagate(zz, src, dst, w, n, hp.hops, hp.mode == "accumulate",
                                            hp.include_identity, dim=-2, operator=operator)

    def matrix(self, q, c, aux, size=None):
        n = size if size is not None else (c.shape[-2] if self.axis == "instance" else c.shape[-1])
        m = self._from_adjacency(self._adjacency(aux, n, q.dtype, q.device))
        return m if self.axis == "instance" else m.T

    def operator(self, aux, n, dtype):
        """``x ↦ A @ x`` on the graph's cached operator (kernel op ``spmm``: one SpMM or GEMM per hop, built once
        per edge tensor, also under ``torch.compile``); ``None`` where its declared fallback ``gather_scatter``
        runs: edge weights that need gradients, or dtypes without a sparse kernel."""
        weight = aux.get("weight")
        if dtype not in (torch.float32, torch.float64) or (weight is not None and weight.requires_grad):
            return None
        hp = self.hp
        return functools.partial(structure.graph_mm, aux["edges"], weight, n=n, self_loops=hp.self_loops,
                                 norm=hp.norm, directed=hp.directed)

    def apply(self, z, q, c, aux, kernel: str | None = None):
        zz = z if self.axis == "instance" else z.transpose(-1, -2)
        n = zz.shape[-2]
        op = self.operator(aux, n, zz.dtype) if kernel == "spmm" else None
        if op is not None:
            y = self._propagate(zz, None, None, None, n, operator=op)
        else:
            y = self._propagate(zz, *self.edge_list(aux, n, zz.dtype, zz.device), n)
        return y if self.axis == "instance" else y.transpose(-1, -2)


# ------------------------------------------------------------------------------------------------ bilinear
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

    def _additive_mask(self, aux, nq, nc, dtype, device, literal=False):
        """All masks as one additive float mask [.., Nq, Nc] (-inf = blocked), or None
        (:func:`rpn2c.functional.structure.additive_mask`); ``literal``: the window as the band matrix R."""
        hp = self.hp
        return structure.additive_mask(
            nq, nc, dtype, device, causal=hp.causal, window=hp.window,
            attn_mask=aux["attn_mask"] if hp.attn_mask is not None else None,
            attn_mode=self.modes.get("attn_mask", "block"),
            key_padding=aux["key_padding"] if hp.key_padding is not None else None,
            padding_mode=self.modes.get("key_padding", "block"), literal=literal)

    def matrix(self, q, c, aux, size=None):
        qq, kk = self._qk(q, c, aux)
        logits = (qq @ kk.transpose(-1, -2)) * self.scale
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
