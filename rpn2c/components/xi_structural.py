"""Structural interdependence ξ beyond the core set: constant matrices, cylinder / sphere patches and packing
strategies, multi-hop chains, multi-hop graphs and PageRank (paper §5.1.1, §5.2; catalog §3, §4).

Static structures never become dense matrices in the default lowering: patches are convolutions / gathers
(``rpn2c.lower.heads`` reads :class:`Geometry`), chains are shifts, scans or DST products, graphs are
gather/``index_add`` propagation. The reference lowering builds every matrix literally.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from rpn2c.components.base import (GRID_VOLUME, Interdependence, ShapeRuleError, edge_messages, graph_example,
                                   head_example)
from rpn2c.components.grid import Geometry, IntOrList, PatchHP, _per_axis
from rpn2c.components.registry import HP, ValueRef, register
from rpn2c.components.xi import Chain, GridXi, _ChainHP
from rpn2c.components.xi_graph import SPMM, Graph, _GraphHP
from rpn2c.functional import structure
from rpn2c.ir.types import is_known


# ------------------------------------------------------------------------------------------------ constant
class _ConstantHP(HP):
    c: float = Field(1.0, description="the constant c of A = c·1")
    out: Optional[int] = Field(None, ge=1, description="output length m' / N' (default: the axis length)")
    matrix: Optional[list[list[float]]] = Field(None, description="a literal A, rows = input positions")

    @model_validator(mode="after")
    def _rectangular(self):
        if self.matrix is not None:
            if not self.matrix or len({len(r) for r in self.matrix}) != 1 or not self.matrix[0]:
                raise ValueError("matrix must be a non-empty rectangular list of rows")
            if self.out is not None and self.out != len(self.matrix[0]):
                raise ValueError(f"out = {self.out} but the matrix has {len(self.matrix[0])} columns")
        return self


@register
class Constant(Interdependence):
    """Constant ξ: A = c·1 ∈ R^{size x out} (eq 33), or a given literal matrix; out changes the axis length.

    ``matrix`` is written as the paper does, rows = input positions (m x m' / b x b'); on the instance axis it is
    stored transposed (row = output item). Default lowering: c·1 is a broadcast sum, never a matrix.
    """

    name, family = "constant", "interdependence"
    aliases = ("constant_c",)
    HP = _ConstantHP

    def _value(self) -> float:
        return self.hp.c

    def out_size(self, ctx):
        m = getattr(self.hp, "matrix", None)
        if m is not None:
            if not is_known(ctx.size) or ctx.size != len(m):
                raise ShapeRuleError(f"'{self.name}' has a {len(m)}-row matrix; the {ctx.axis} axis has length "
                                     f"{ctx.size}")
            return len(m[0])
        return self.hp.out if self.hp.out is not None else ctx.size

    def build(self, ctx):
        from rpn2c.components.impl.xi_structural import _ConstantXi

        return _ConstantXi(self._value(), self.hp.out, getattr(self.hp, "matrix", None), ctx.axis)


class _ZeroHP(HP):
    out: Optional[int] = Field(None, ge=1, description="output length (default: the axis length)")


@register
class Zero(Constant):
    """Zero ξ: A = 0 ∈ R^{size x out} (eq 33, c = 0): the head sees no data, only its bias."""

    name, family = "zero", "interdependence"
    aliases = ()
    HP = _ZeroHP

    def _value(self):
        return 0.0


@register
class One(Constant):
    """One ξ: A = 1 ∈ R^{size x out} (eq 33, c = 1): every output is the sum over the axis."""

    name, family = "one", "interdependence"
    aliases = ()
    HP = _ZeroHP

    def _value(self):
        return 1.0


# ------------------------------------------------------------------------------------------------ patches
class _ShapedPatchHP(HP):
    """Patch options shared by cylinder / sphere / geometric patches."""

    style: Literal["centred", "conv"] = Field("centred", description="the paper's centred patch or conv windows")
    stride: Optional[IntOrList] = Field(None, description="centre distance per axis (default 1)")
    packing: Optional[str] = Field(None, description="a packing strategy of catalog §3.4 (sets the stride)")
    packing_convention: Literal["paper", "toolkit"] = "paper"
    centres: Literal["lattice", "cells"] = Field(
        "lattice", description="packing centres: the paper's real-valued lattice rounded per centre, or its distances "
        "floored to whole cells")
    mode: Literal["padding", "aggregation"] = "padding"
    pad: Union[int, list[int], Literal["same", "valid"]] = Field(0, description="conv style only")
    pad_after: Optional[IntOrList] = Field(None, description="conv style only")
    dilation: IntOrList = Field(1, description="conv style only")
    padding_mode: Literal["zeros", "circular", "reflect", "replicate"] = "zeros"

    @model_validator(mode="after")
    def _style(self):
        if self.stride is not None and self.packing is not None:
            raise ValueError("give either stride or packing (a packing strategy sets the stride)")
        if "centres" in self.model_fields_set and (self.packing is None or self.style != "centred"):
            raise ValueError('centres places the centres of a packing: give packing (style = "centred")')
        conv_only = {"pad": 0, "pad_after": None, "dilation": 1, "padding_mode": "zeros"}
        if self.style == "centred":
            bad = [k for k, d in conv_only.items() if getattr(self, k) != d]
            if bad:
                raise ValueError(f"{', '.join(bad)} apply to style = \"conv\" only")
        for key in ("stride", "dilation"):
            v = getattr(self, key)
            if v is not None and any(x < 1 for x in ([v] if isinstance(v, int) else v)):
                raise ValueError(f"{key} must be >= 1")
        return self


class _PatchBase(GridXi):
    """Grid patch ξ of a given shape: ``shape_kind``, the kernel box and its taps come from the subclass."""

    shape_kind = "cuboid"

    def extents(self, rank: int) -> tuple[tuple[int, ...], tuple[int, ...], list | None]:
        """(before, after) half-extents per axis and the tap list (kernel-box coordinates) or None."""
        raise NotImplementedError

    def packing_params(self, rank: int):
        raise NotImplementedError

    def stride(self, rank: int) -> tuple[int, ...]:
        hp = self.hp
        if hp.packing is not None:
            s = structure.packing_stride(self.shape_kind, hp.packing, self.packing_params(rank),
                                         hp.packing_convention)
            if len(s) != rank:
                raise ShapeRuleError(f"packing gives {len(s)} strides for a {rank}-D grid")
            return s
        return _per_axis(hp.stride if hp.stride is not None else 1, rank, "stride")

    def lattice(self, rank: int) -> structure.Lattice | None:
        """The packing's real-valued centres (``centres = "lattice"``) unless they are whole cells anyway."""
        hp = self.hp
        if hp.centres != "lattice" or hp.packing is None or hp.style != "centred":
            return None
        lat = structure.packing_lattice(self.shape_kind, hp.packing, self.packing_params(rank), hp.packing_convention)
        return None if lat.whole else lat

    def geometry(self, rank):
        try:
            before, after, taps = self.extents(rank)
        except ValueError as exc:  # e.g. a kernel box over structure.MAX_PATCH_BOX (cuboid half-extents)
            raise ShapeRuleError(str(exc)) from None
        kernel = tuple(b + a + 1 for b, a in zip(before, after))
        stride = self.stride(rank)
        hp = self.hp
        shift = structure.packing_row_shift(hp.packing, stride)
        layers = structure.packing_layer_shift(self.shape_kind, hp.packing, stride)
        if hp.style == "centred":
            return Geometry(kernel, stride, (1,) * rank, before, after, "zeros", taps, shift, layers,
                            self.lattice(rank))
        try:
            conv = PatchHP(size=list(kernel), stride=list(stride), pad=hp.pad, pad_after=hp.pad_after,
                           dilation=hp.dilation, padding_mode=hp.padding_mode)
        except ValueError as exc:  # pydantic's ValidationError: the derived conv patch is not one
            raise ShapeRuleError(f"the patch is not a valid convolution window: {exc.errors()[0]['msg']}"
                                 if hasattr(exc, "errors") else str(exc)) from None
        return replace(conv.geometry(rank, taps), row_shift=shift, layer_shift=layers)


def _taps(offsets: list[tuple[int, ...]], before: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Centre-relative offsets -> kernel-box coordinates (lexicographic, = conv weight flatten order)."""
    return tuple(tuple(v + b for v, b in zip(row, before)) for row in offsets)


class _CylinderFields(HP):
    radius: int = Field(1, ge=0, le=64, description="disc radius r (eq 65)")
    depth: int = Field(0, ge=0, le=64, description="p_d: depth taps before the centre (3-D grids)")
    depth_after: Optional[int] = Field(None, ge=0, le=64, description="p'_d (default p_d)")


class _CylinderHP(_ShapedPatchHP, _CylinderFields):
    @field_validator("packing")
    @classmethod
    def _strategy(cls, v):
        if v is not None and v not in structure.packing_strategies("cylinder"):
            raise ValueError(f"cylinder packing is one of {', '.join(structure.packing_strategies('cylinder'))}")
        return v


@register
class CylinderPatch(_PatchBase):
    """Cylinder patch ξ: taps ∇i² + ∇j² ≤ r² on the first two grid axes × ∇k ∈ [−p_d, p'_d] (eq 65), padding or aggregation mode.

    2-D grids: a disc (depth must be 0); 3-D grids: disc × depth range. Both depth bounds are honoured (the
    toolkit ignores p_d, catalog §3.2). Centred style: ceil(L/s) patches (conv with padding (r, r)); conv style:
    kernel box 2r+1, pad/dilation/padding_mode as grid_patch. A masked-kernel convolution in the default lowering.
    """

    name, family = "cylinder_patch", "interdependence"
    HP = _CylinderHP
    shape_kind = "cylinder"

    def _depth(self):
        return self.hp.depth, self.hp.depth if self.hp.depth_after is None else self.hp.depth_after

    def extents(self, rank):
        r = self.hp.radius
        pd, pa = self._depth()
        if rank == 2:
            if pd or pa:
                raise ShapeRuleError("a cylinder on a 2-D grid is a disc: depth must be 0")
            before, after = (r, r), (r, r)
        elif rank == 3:
            before, after = (r, r, pd), (r, r, pa)
        else:
            raise ShapeRuleError(f"a cylinder patch needs a 2-D or 3-D grid, got {rank}-D")
        offsets = structure.cylinder_rows(r, pd, pa, ndim=rank)
        return before, after, _taps(offsets, before)

    def packing_params(self, rank):
        return (self.hp.radius,) if rank == 2 else (self.hp.radius, self.hp.depth)


class _SphereHP(_ShapedPatchHP):
    radius: int = Field(1, ge=0, le=32, description="ball radius r (eq 65)")

    @field_validator("packing")
    @classmethod
    def _strategy(cls, v):
        if v is not None and v not in structure.packing_strategies("sphere"):
            raise ValueError(f"sphere packing is one of {', '.join(structure.packing_strategies('sphere'))}")
        return v


@register
class SpherePatch(_PatchBase):
    """Sphere patch ξ: taps ∇i² + ∇j² + ∇k² ≤ r² on a 3-D grid (eq 65), padding or aggregation mode.

    Sizes r = 1, 2, 3, 4: 7, 33, 123, 257 taps. Centred or conv style as cylinder_patch; packing strategies of
    catalog §3.4 (paper values by default, toolkit values with packing_convention = "toolkit", erratum 7); FCC and
    hexagonal packings offset the rows and put each depth layer in the interstices of the one below (Fig 16).
    """

    name, family = "sphere_patch", "interdependence"
    HP = _SphereHP
    example = head_example(GRID_VOLUME, "xi_attribute = {call}")
    shape_kind = "sphere"

    def extents(self, rank):
        if rank != 3:
            raise ShapeRuleError(f"a sphere patch needs a 3-D grid, got {rank}-D (use cylinder_patch on 2-D)")
        r = self.hp.radius
        before = (r, r, r)
        return before, before, _taps(structure.sphere_rows(r), before)

    def packing_params(self, rank):
        return self.hp.radius


class _GeometricHP(_ShapedPatchHP, _CylinderFields):
    shape: Literal["cuboid", "cylinder", "sphere"] = "cuboid"
    half: IntOrList = Field(1, description="cuboid: p per axis (centred style)")
    half_after: Optional[IntOrList] = Field(None, description="cuboid: p' per axis (default p)")
    size: Optional[IntOrList] = Field(None, description="cuboid, conv style: kernel size (default 2p+1)")

    @model_validator(mode="after")
    def _shape_options(self):
        if self.packing is not None and self.packing not in structure.packing_strategies(self.shape):
            raise ValueError(f"{self.shape} packing is one of {', '.join(structure.packing_strategies(self.shape))}")
        if self.shape != "cuboid" and ({"half", "half_after", "size"} & self.model_fields_set):
            raise ValueError(f"half / half_after / size describe a cuboid; a {self.shape} takes radius (and depth)")
        if self.shape == "cuboid" and ({"radius", "depth", "depth_after"} & self.model_fields_set):
            raise ValueError("radius / depth describe a cylinder or sphere")
        if self.size is not None and self.style != "conv":
            raise ValueError("size is the conv-style kernel; the centred style takes half / half_after")
        for v in (self.half, self.half_after):
            if v is not None and any(x < 0 for x in ([v] if isinstance(v, int) else v)):
                raise ValueError("half extents must be >= 0")
        if self.size is not None and any(x < 1 for x in ([self.size] if isinstance(self.size, int) else self.size)):
            raise ValueError("size must be >= 1 on every axis")
        return self


@register
class GeometricPatch(_PatchBase):
    """Geometric patch ξ (toolkit geometric_interdependence): cuboid | cylinder | sphere patches with a packing strategy, padding or aggregation mode.

    Packing (catalog §3.4): centre distance per axis from the strategy table (cuboid sparse/complete/dense/
    densest square; cylinder square and hexagonal; sphere simple-cubic / FCC / hexagonal), floored to integers
    (min 1, erratum 7: paper values by default), ceil(L/s) patches (erratum 5: the paper's 1 + floor(h/d) is off by
    one). Hexagonal (and face-centred cubic) packings offset every other row of centres by half a stride, as the
    zig-zag of the paper's Figs 15–16 (not the rectangular lattice of eq 70 and the toolkit); the sphere ones also
    put each depth layer in the interstices of the one below (FCC period 3, hexagonal period 2). The packing
    size parameter is p (cuboid; (size − 1)//2 in conv style), r (sphere) or (r, p_d) (cylinder).
    """

    name, family = "geometric_patch", "interdependence"
    HP = _GeometricHP

    @property
    def shape_kind(self):
        return self.hp.shape

    def _cuboid(self, rank):
        hp = self.hp
        if hp.style == "conv" and hp.size is not None:
            k = _per_axis(hp.size, rank, "size")
            return tuple((x - 1) // 2 for x in k), tuple(x - 1 - (x - 1) // 2 for x in k)
        before = _per_axis(hp.half, rank, "half")
        after = _per_axis(hp.half_after, rank, "half_after") if hp.half_after is not None else before
        return before, after

    def extents(self, rank):
        if self.hp.shape == "cylinder":
            return CylinderPatch.extents(self, rank)
        if self.hp.shape == "sphere":
            return SpherePatch.extents(self, rank)
        before, after = self._cuboid(rank)
        return before, after, None

    def _depth(self):
        return CylinderPatch._depth(self)

    def packing_params(self, rank):
        if self.hp.shape == "cylinder":
            return CylinderPatch.packing_params(self, rank)
        if self.hp.shape == "sphere":
            return self.hp.radius
        return self._cuboid(rank)[0]


# ------------------------------------------------------------------------------------------------ chains
class _MultihopChainHP(_ChainHP):
    hops: int = Field(2, ge=0, description="h of A^h (power) or Σ_{k≤h} A^k (accumulate)")


@register
class MultihopChain(Chain):
    """Multi-hop chain ξ: A^h (eq 77) or, accumulate, Σ_{k=0..h} A^k (eq 78); chain with hops = 2 by default.

    The toolkit's (A + I)^h is self_loop = true; its Σ_{k=1..h} is include_identity = false (erratum 12).
    """

    name, family = "multihop_chain", "interdependence"
    HP = _MultihopChainHP


class _InverseChainHP(_ChainHP):
    mode: Literal["power", "accumulate", "inverse", "inverse_approx", "exponential"] = "inverse_approx"


@register
class InverseChain(Chain):
    """Reciprocal chain ξ: (I − A)⁻¹ = Σ_h A^h (eq 79–80; bidirectional: the paper's Σ_{k<n} A^k); mode = "inverse" gives (I − αA)⁻¹ exactly.

    Uni chain: the all-ones lower triangle, applied as a cumulative sum. Bidirectional: I − A may be singular, so
    the paper falls back to eq (78) with h = n − 1 (walk counts grow like 2^n); the toolkit's Σ_{k≥1} with
    column normalisation is not followed.
    """

    name, family = "inverse_chain", "interdependence"
    aliases = ("inverse_approx_chain",)
    HP = _InverseChainHP


class _ExpChainHP(_ChainHP):
    mode: Literal["power", "accumulate", "inverse", "inverse_approx", "exponential"] = "exponential"


@register
class ExponentialChain(Chain):
    """Exponential chain ξ: exp(αA) = Σ_h α^h A^h / h! (eq 79–80), exact: Horner on shifts (uni) or DST-I (bidirectional)."""

    name, family = "exponential_chain", "interdependence"
    aliases = ("exponential_approx_chain",)
    HP = _ExpChainHP


# ------------------------------------------------------------------------------------------------ graphs
class _MultihopGraphHP(_GraphHP):
    hops: int = Field(2, ge=0)


@register
class MultihopGraph(Graph):
    """Multi-hop graph ξ: Â^h or, mode = "accumulate", Σ_{k=0..h} Â^k (eq 83); graph with hops = 2 by default.

    h gather/index_add propagations in the default lowering (never the denser Â^h).
    """

    name, family = "multihop_graph", "interdependence"
    HP = _MultihopGraphHP


MAX_PAGERANK_STEPS = 10_000  # (1 − α)^K ≤ tol: α = 0.15 needs 170, α = 0.003 about 9,200


class _PageRankHP(HP):
    edges: ValueRef
    weight: Optional[ValueRef] = None
    norm: Literal["none", "row", "column", "symmetric"] = Field("column", description="normalisation of Â")
    self_loops: Optional[bool] = Field(None, description="add missing self-loops first; default: symmetric only")
    directed: bool = True
    alpha: float = Field(0.15, gt=0, le=1, description="teleport probability α (toolkit c)")
    method: Literal["power", "solve"] = Field("power", description="power iteration (sparse) or dense solve")
    tol: float = Field(1e-12, gt=0, lt=1, description="power iteration: stop when (1 − α)^{K+1} ≤ tol")
    iters: Optional[int] = Field(None, ge=0, le=MAX_PAGERANK_STEPS,
                                 description="power iteration count (default from tol)")

    @model_validator(mode="after")
    def _converges(self):
        if self.norm == "none" and self.method == "power":
            raise ValueError('the power series of an unnormalised Â need not converge: normalise it or use '
                             'method = "solve"')
        steps = structure.pagerank_iterations(self.alpha, self.tol) if self.iters is None else self.iters
        if self.method == "power" and steps > MAX_PAGERANK_STEPS:
            raise ValueError(f"alpha = {self.alpha:g} with tol = {self.tol:g} needs {steps:,} power steps (at most "
                             f"{MAX_PAGERANK_STEPS:,}): raise alpha or tol, or use method = \"solve\"")
        return self


@register
class PageRank(Interdependence):
    """PageRank graph ξ: M = α (I − (1 − α) Â)⁻¹ (eq 84), Â the normalised adjacency (column = random walk), α = 0.15.

    With norm = "column" (Â[dst, src] = 1/outdeg(src)) and no dangling nodes, M·1/N is networkx.pagerank with
    damping 1 − α. Default lowering: K power steps y ← αz + (1 − α)Ây on the edge list (error ≤ (1 − α)^{K+1}‖z‖
    for a normalised Â), never the dense inverse; method = "solve" builds it (small graphs, or norm = "none").
    """

    name, family = "pagerank", "interdependence"
    example, example_call = graph_example(), "pagerank(edges = edges)"
    aliases = ("pagerank_graph",)
    HP = _PageRankHP

    kernels = (SPMM,)

    def propagates(self) -> bool:
        """The power steps run as SpMMs on the built adjacency (rule graph_spmm); ``method = "solve"`` inverts the
        dense matrix built from the edges, so no SpMM runs and the rule must not claim one."""
        return self.hp.method != "solve"

    def scratch(self, ctx):
        return edge_messages(ctx)

    def steps(self, ctx):
        hp = self.hp
        if hp.method == "solve":
            return 1
        return max(structure.pagerank_iterations(hp.alpha, hp.tol) if hp.iters is None else hp.iters, 1)

    def build(self, ctx):
        from rpn2c.components.impl.xi_structural import _PageRankXi

        return _PageRankXi(self.hp, ctx.axis)


