"""Geometric patch compression κ (pooling, RPN 2 eq 90): one φ value per patch and channel of a grid.

Every entry builds a :class:`PatchPoolModule`: [C, *S] -> [C, *S'], φ (any metric of
:mod:`rpn2c.functional.compression`) over conv-style, centred cuboid, cylinder or sphere patches
(:mod:`rpn2c.components.grid`). Where :func:`native_pooling` holds, the optimiser runs the module's ``pool`` kernel
op (native max pooling or a depthwise convolution); otherwise a gather + reduce, or the paper's padding matrix for
the reference lowering. The tinyBIG class names are registered as aliases. ``ceil_mode`` adds torch's partial
last windows (:func:`ceil_extension`). :class:`AdaptivePool` pools onto a fixed output grid with torch's adaptive
bins (unequal, overlapping windows): a pooling matrix (mean) or a per-bin max.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from rpn2c.components.base import GRID_VOLUME, Kappa, ShapeRuleError, compress_example
from rpn2c.components.grid import (Geometry, IntOrList, ceil_extension, index_elements, native_pooling, pool_plan,
                                  positive_per_axis)
from rpn2c.components.kappa import (CentredCuboidHP, ConvPatchHP, CylinderHP, PoolHP, SphereHP, cut_exact,
                                    ignore_fill, metric_kwargs)
from rpn2c.components.registry import HP, register
from rpn2c.ir.types import is_known


MAX_PADDED = 2**28  # elements (1 GiB in float32) per sample of the padded grid or of one patch's taps


def _check_extent(name: str, geo: Geometry, feat) -> None:
    """Refuse patches whose padded grid or tap count per sample exceeds :data:`MAX_PADDED` (symbolic axes counted as
    1): pooling over them allocates the padded grid, the reference lowering every tap."""
    channels = feat[0] if is_known(feat[0]) else 1
    padded = math.prod((n if is_known(n) else 1) + b + a for n, b, a in zip(feat[1:], geo.pad_before, geo.pad_after))
    taps = math.prod(geo.kernel)
    if channels * max(padded, taps) > MAX_PADDED:
        raise ShapeRuleError(f"{name}: patches of {' × '.join(map(str, geo.kernel))} cells with pads "
                             f"{list(geo.pad_before)}/{list(geo.pad_after)} make {channels * max(padded, taps):,} "
                             f"elements per sample (at most {MAX_PADDED:,}); a patch wider than the grid only adds "
                             "padding: lower its half-extents or size")


def _skips_taps(metric: str) -> bool:
    try:
        ignore_fill(metric)
    except KeyError:
        return False
    return True


class _PatchPool(Kappa):
    """Geometric patch compression (pooling): grid [C, *S] -> [C, *S'], one φ value per patch and channel."""

    family = "compression"
    grid_only = True
    METRIC: ClassVar[str] = ""

    @property
    def metric(self) -> str:
        return getattr(self.hp, "metric", self.METRIC)

    @property
    def ceil_mode(self) -> bool:
        return getattr(self.hp, "ceil_mode", False)

    def geometry(self, rank: int) -> Geometry:
        return self.hp.to_geometry(rank)

    def features_out(self, feat):
        if len(feat) < 2:
            raise ShapeRuleError(f"{self.name} pools over a grid; the input has flat features {feat}")
        geo, spatial = self.geometry(len(feat) - 1), tuple(feat[1:])
        _check_extent(self.name, geo, feat)
        if self.ceil_mode:
            if geo.padding_mode != "zeros":
                raise ShapeRuleError(f"{self.name}: ceil_mode = true needs padding_mode = \"zeros\" (as torch's "
                                     f"pooling), got {geo.padding_mode!r}")
            if not _skips_taps(self.metric) and any(ceil_extension(geo, spatial)):
                raise ShapeRuleError(f"{self.name}: ceil_mode = true skips the taps of the added windows past the "
                                     f"padded grid, which metric {self.metric!r} cannot skip; use one of "
                                     "max, min, sum, mean, prod or a norm")
            extra = ceil_extension(geo, spatial)
            geo = replace(geo, pad_after=tuple(a + e for a, e in zip(geo.pad_after, extra)))
        return (feat[0], *geo.out_spatial(spatial))

    def native_pooling(self, rank: int) -> bool:
        return native_pooling(self.geometry(rank), self.metric)

    def _ignores(self) -> bool:
        """Out-of-grid taps are skipped (not read as 0)."""
        hp = self.hp
        return hp.ignores_outside() if hasattr(hp, "ignores_outside") else \
            (hp.outside == "ignore" or (hp.outside == "auto" and self.metric in ("max", "min")))

    def _taps(self, feat) -> tuple[Geometry, tuple[int, ...], int]:
        """The geometry and grid the module gathers and natively pools with (:meth:`Geometry.cut` where that is
        exact) and its taps per patch."""
        geo, spatial, _, ignore = pool_plan(self.geometry(len(feat) - 1), tuple(feat[1:]), self._ignores(),
                                            self.ceil_mode)
        if cut_exact(self.metric, ignore):
            geo = geo.cut(spatial)
        return geo, spatial, geo.patch_size

    def scratch(self, feat):
        """Elements per sample the module makes besides its output: the (patch, tap) index and what it is built from
        (:func:`index_elements`), the gathered taps ``C·P·p`` and native pooling's padded grid ``C·Π(L + pads)``."""
        geo, spatial, p = self._taps(feat)
        built = index_elements(geo, spatial, p)[0]
        padded = math.prod(max(1, n + b + a) for n, b, a in zip(spatial, geo.pad_before, geo.pad_after))
        return built + feat[0] * (math.prod(geo.out_spatial(spatial)) * p + padded)

    def literal(self, feat):
        """Elements of the reference lowering's padding matrix ``[N + 1, P·p]`` (eq 67, the taps gathered)."""
        return index_elements(*self._taps(feat))[1]

    def build(self, feat):
        from rpn2c.components.impl.kappa_pooling import PatchPoolModule

        hp = self.hp
        kw = metric_kwargs(hp) if hasattr(hp, "metric") else {}
        self.features_out(tuple(feat))  # the ceil_mode checks
        return PatchPoolModule(self.geometry(len(feat) - 1), tuple(feat[1:]), self.metric, kw, self._ignores(),
                               self.ceil_mode)


class _OutsideHP(HP):
    outside: Literal["auto", "zero", "ignore"] = Field(
        "auto", description="zero: out-of-grid taps read 0 (paper/toolkit); ignore: skipped (MaxPool; AvgPool "
                            "count_include_pad=False); auto: ignore for max/min, zero for mean")


class _CeilHP(HP):
    ceil_mode: bool = Field(
        False, json_schema_extra={"hash": "omit_default"}, description="torch's ceil_mode: windows counted by ceil((L + pads − extent)/stride) + 1, a last "
                           "window kept when it starts inside the grid or its left padding; its taps past the padded "
                           "grid are skipped (not read, not counted in a mean)")


class _ConvPoolHP(PoolHP, ConvPatchHP, _CeilHP):
    pass


class _ConvFixedHP(_OutsideHP, ConvPatchHP, _CeilHP):
    pass


class _CuboidPoolHP(PoolHP, CentredCuboidHP):
    pass


class _CylinderPoolHP(PoolHP, CylinderHP):
    pass


class _SpherePoolHP(PoolHP, SphereHP):
    pass


class _CuboidFixedHP(_OutsideHP, CentredCuboidHP):
    pass


class _CylinderFixedHP(_OutsideHP, CylinderHP):
    pass


class _SphereFixedHP(_OutsideHP, SphereHP):
    pass


@register
class PatchPool(_PatchPool):
    """Patch pooling κ(x)_q = φ(x(patch_q)) over conv-style cuboid patches (size, stride = size, pad, dilation), any φ.

    Out-of-grid taps read 0 (tinyBIG, catalog §3.6) or are ignored (outside = "ignore"; "auto": max/min ignore
    them as MaxPool does). Padding modes circular/reflect/replicate read mirrored/wrapped cells as F.pad.
    """

    name = "patch_pool"
    example_call = "patch_pool(size = 2)"
    aliases = ("geometric_compression",)
    HP = _ConvPoolHP


@register
class PatchMax(_PatchPool):
    """Patch max pooling: κ(x)_q = max_{j ∈ patch(q)} x_j (out-of-grid taps are ignored, as MaxPool)."""

    name, METRIC = "patch_max", "max"
    example_call = "patch_max(size = 2)"
    aliases = ("max_pool",)
    HP = _ConvFixedHP


@register
class PatchMin(_PatchPool):
    """Patch min pooling: κ(x)_q = min_{j ∈ patch(q)} x_j (out-of-grid taps are ignored by default)."""

    name, METRIC = "patch_min", "min"
    example_call = "patch_min(size = 2)"
    aliases = ("min_pool",)
    HP = _ConvFixedHP


@register
class PatchMean(_PatchPool):
    """Patch mean pooling: κ(x)_q = (1/p) Σ_{j ∈ patch(q)} x_j (zero padding counted, as AvgPool)."""

    name, METRIC = "patch_mean", "mean"
    example_call = "patch_mean(size = 2)"
    aliases = ("mean_pool", "avg_pool")
    HP = _ConvFixedHP


_SHAPE_DOC = {
    "cuboid": ("centred cuboids c + [−p, p'] per axis (eq 63)", _CuboidPoolHP, _CuboidFixedHP),
    "cylinder": ("cylinders ∇i² + ∇j² ≤ r², ∇k ∈ [−p_d, p'_d] (eq 65)", _CylinderPoolHP, _CylinderFixedHP),
    "sphere": ("spheres ∇i² + ∇j² + ∇k² ≤ r², 3-D grid (eq 65)", _SpherePoolHP, _SphereFixedHP),
}
_SHAPE_NOTES = (
    "\n\nCentres are c = q·stride (or a named packing, catalog §3.4), ceil(L/stride) per axis (erratum §8.5: the "
    "paper's 1 + floor(L/stride) is off by one). Erratum §8.7: packing convention = \"paper\" (default) or "
    "\"toolkit\" for the strategies where the two disagree. A packing's centres are its real-valued lattice "
    "rounded per centre (centres = \"lattice\", default; ceil((L − ½)/d) per axis), or with the distances floored "
    "to whole cells >= 1 (centres = \"cells\").")


def _shape_entries(shape: str) -> None:
    what, pool_hp, fixed_hp = _SHAPE_DOC[shape]
    example = compress_example(GRID_VOLUME) if shape == "sphere" else ""  # spheres need a 3-D grid
    extra = ("\n\nErratum (catalog §3.2): tinyBIG's cylinder ignores p_d; both depth bounds are honoured here."
             if shape == "cylinder" else "")
    register(type(f"{shape.capitalize()}Pool", (_PatchPool,), {
        "__doc__": f"{shape.capitalize()} pooling κ(x)_c = φ(x(patch(c))), any φ, over {what}."
                   + _SHAPE_NOTES + extra,
        "name": f"{shape}_pool", "HP": pool_hp, "__module__": __name__, "example": example,
        "aliases": (f"{shape}_compression", f"{shape}_patch_based_geometric_compression")}))
    for metric in ("max", "min", "mean"):
        formula = {"max": "max_{patch(c)} x", "min": "min_{patch(c)} x", "mean": "(1/p) Σ_{patch(c)} x"}[metric]
        register(type(f"{shape.capitalize()}{metric.capitalize()}", (_PatchPool,), {
            "__doc__": f"{shape.capitalize()} {metric} pooling κ(x)_c = {formula} over {what}." + _SHAPE_NOTES + extra,
            "name": f"{shape}_{metric}", "METRIC": metric, "HP": fixed_hp, "__module__": __name__, "example": example,
            "aliases": (f"{shape}_{metric}_based_geometric_compression",)}))


for _shape in ("cuboid", "cylinder", "sphere"):
    _shape_entries(_shape)


# ------------------------------------------------------------------------------------------------ adaptive pooling
class _AdaptiveHP(HP):
    size: IntOrList = Field(1, description="output cells per spatial axis (one value for every axis); 1: "
                                                 "global pooling")
    metric: Literal["mean", "max"] = Field("mean", description="φ of every bin: mean (AdaptiveAvgPool) or max "
                                                               "(AdaptiveMaxPool)")

    @field_validator("size")
    @classmethod
    def _positive(cls, v):
        return positive_per_axis(v)


@register
class AdaptivePool(Kappa):
    """Adaptive pooling κ(x)_q = φ_{j ∈ bin(q)} x_j, φ = mean or max, onto a fixed output grid ``size``.

    Per axis (input length L, output size S) bin i is [floor(i·L/S), ceil((i+1)·L/S)), i < S; a cell's bin is the
    product of its axes' bins. Where S does not divide L the bins have unequal sizes and neighbours overlap (torch's
    AdaptiveAvgPool / AdaptiveMaxPool). The mean is the linear compression x·P with the pooling matrix
    P[j, q] = 1/|bin(q)| for j ∈ bin(q), else 0; the max reduces every bin. No parameters.
    """

    name = "adaptive_pool"
    family = "compression"
    grid_only = True
    any_grid_size = True  # its output grid is fixed: the input's may be symbolic (global pooling over time)
    example_call = "adaptive_pool(size = [4, 3])"
    aliases = ("adaptive_compression",)
    HP = _AdaptiveHP

    def out_size(self, rank: int) -> tuple[int, ...]:
        if not 1 <= rank <= 3:
            raise ShapeRuleError(f"{self.name} pools 1-D, 2-D and 3-D grids, not {rank}-D")
        size = self.hp.size
        if isinstance(size, int):
            return (size,) * rank
        if len(size) != rank:
            raise ShapeRuleError(f"{self.name}: size has {len(size)} values but the grid has {rank} spatial axes")
        return tuple(size)

    def features_out(self, feat):
        if len(feat) < 2:
            raise ShapeRuleError(f"{self.name} pools over a grid; the input has flat features {feat}")
        return (feat[0], *self.out_size(len(feat) - 1))

    def build(self, feat):
        from rpn2c.components.impl.kappa_pooling import AdaptivePoolModule

        return AdaptivePoolModule(tuple(feat[1:]), self.out_size(len(feat) - 1), self.hp.metric)
