"""Interdependence functions ξ of the compiler's core set: none (identity), grid patches, chain.

The graph ξ is :mod:`rpn2c.components.xi_graph`, the bilinear / attention ξ :mod:`rpn2c.components.xi_attention`.
Instance matrices are stored with row = output item (``Y = A @ Z``); attribute matrices act as ``Z @ A``.
"""

from __future__ import annotations

from typing import Literal, TYPE_CHECKING

from pydantic import Field, model_validator

from rpn2c.components.base import Interdependence, ShapeRuleError
from rpn2c.components.grid import CentredPatchHP, Geometry, PatchHP, index_elements
from rpn2c.components.registry import HP, register
from rpn2c.functional import structure
from rpn2c.ir.types import Dim, dim_mul

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    import torch


@register
class NoneXi(Interdependence):
    """Identity interdependence A = I (skipped entirely): RPN 2 reduces to RPN v1."""

    name, family = "identity", "interdependence"
    aliases = ("none", "eye")

    def build(self, ctx):
        from rpn2c.components.impl.xi import _IdentityXi

        return _IdentityXi(ctx.axis)


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

    def scratch_on(self, spatial: tuple[Dim, ...]) -> Dim:
        """Elements building the (patch, tap) index on a grid of ``spatial`` makes (:func:`index_elements`): the
        gathered patches' index, and the reference lowering's, which its matrix is made from."""
        geo = self.geometry(len(spatial))
        return index_elements(geo, spatial, geo.patch_size)[0]

    def literal(self, spatial: tuple[Dim, ...]) -> Dim:
        """Elements of the patch matrix only the reference lowering builds (``rpn2c/lower/reference.py``): the
        padding-mode ``[N + 1, P·p]`` (eq 67) or the aggregation-mode ``[N + 1, P]`` (eq 69), N = Π spatial."""
        geo = self.geometry(len(spatial))
        return index_elements(geo, spatial, geo.patch_size if self.mode == "padding" else 1)[1]

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

    def steps(self, ctx):
        """Shifts one after another: a hop each (one shift for a plain forward power), n − 1 for the bidirectional
        eq (80) sum, the Horner terms of exp(αA); a normalised chain runs M twice (degrees)."""
        hp, mode = self.hp, self.hp.effective_mode
        plain = hp.direction != "bidirectional" and not hp.self_loop
        if mode == "power":
            n = 1 if plain else max(hp.hops, 1)
        elif mode == "accumulate":
            n = max(hp.hops, 1)
        elif mode == "inverse_approx":
            n = ctx.size if hp.direction == "bidirectional" else 1
        elif mode == "exponential":
            n = 32
        else:
            n = 1
        return n if hp.norm == "none" else dim_mul(2, n)

    def build(self, ctx):
        from rpn2c.components.impl.xi import _ChainXi

        return _ChainXi(self.hp, ctx.axis)
