"""Geometric patch compression κ (pooling, RPN 2 eq 90): one φ value per patch and channel of a grid.

Every entry builds a :class:`PatchPoolModule`: [C, *S] -> [C, *S'], φ (any metric of
:mod:`rpn2c.functional.compression`) over conv-style, centred cuboid, cylinder or sphere patches
(:mod:`rpn2c.components.grid`). Where :func:`native_pooling` holds, the optimiser runs the module's ``pool`` kernel
op (native max pooling or a depthwise convolution); otherwise a gather + reduce, or the paper's padding matrix for
the reference lowering. The tinyBIG class names are registered as aliases.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from rpn2c.components.base import GRID_VOLUME, Kappa, ShapeRuleError, compress_example
from rpn2c.components.grid import Geometry
from rpn2c.components.kappa import (
    CentredCuboidHP,
    ConvPatchHP,
    CylinderHP,
    PoolHP,
    SphereHP,
    ignore_fill,
    literal_patches,
    metric_kwargs,
    pad_pairs,
)
from rpn2c.components.registry import HP, register
from rpn2c.functional import compression as FC


def native_pooling(geo: Geometry, metric: str) -> bool:
    """Whether a patch compression is a native pooling kernel: zero padding, rank 1-3, max/min over full boxes
    (max_pool), or sum/mean over any patch mask (a depthwise convolution)."""
    return (geo.padding_mode == "zeros" and 1 <= geo.rank <= 3
            and (metric in ("sum", "mean") or (metric in ("max", "min") and geo.taps is None)))


class PatchPoolModule(nn.Module):
    """Grid [B, C, *S] -> [B, C, *S']: φ over every patch (eq 90).

    Default lowering: max/min by native max pooling of the explicitly padded grid (pad value 0, or ∓inf when
    out-of-grid taps are ignored), sum/mean by a depthwise convolution with the patch mask (any patch shape);
    every other metric, patch or padding mode by a gather + :func:`rpn2c.functional.compression.patch_reduce`.
    Reference lowering: the paper's padding matrix, ``x A`` (one-hot columns, zero for out-of-grid taps), then φ.
    """

    def __init__(self, geo: Geometry, spatial, metric: str, kw: dict, ignore: bool, reference: bool):
        super().__init__()
        self.geo, self.spatial, self.metric, self.kw, self.reference = geo, tuple(spatial), metric, kw, reference
        self.out_spatial = geo.out_spatial(self.spatial)
        index = geo.patch_index(self.spatial)
        valid = index >= 0
        self.ignore = ignore and geo.padding_mode == "zeros"
        self.fill = ignore_fill(metric) if self.ignore else 0.0
        self.register_buffer("index", index, persistent=False)
        self.register_buffer("outside", ~valid, persistent=False)
        self.register_buffer("count", valid.sum(-1).clamp(min=1), persistent=False)
        if not reference and native_pooling(geo, metric) and metric in ("sum", "mean"):
            self.register_buffer("mask", geo.kernel_mask().to(torch.get_default_dtype()), persistent=False)

    def _mean_ignoring(self, s):
        return s / self.count.to(s.dtype)

    def pool(self, x):
        """Kernel op ``pool`` (rule ``pool``, where ``native_pooling`` holds): max/min by native max pooling of
        the explicitly padded grid, sum/mean by a depthwise convolution with the patch mask."""
        c = x.shape[1]
        geo, metric = self.geo, self.metric
        pads = pad_pairs(geo)
        padded = any(pads)  # F.pad copies even when every pad is zero
        pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[geo.rank - 1]
        if metric == "max":
            return pool(F.pad(x, pads, value=self.fill) if padded else x, geo.kernel, geo.stride, 0, geo.dilation)
        if metric == "min":
            return -pool(F.pad(-x, pads, value=-self.fill) if padded else -x, geo.kernel, geo.stride, 0,
                         geo.dilation)
        conv = (F.conv1d, F.conv2d, F.conv3d)[geo.rank - 1]
        w = self.mask.to(x.dtype).expand(c, 1, *geo.kernel)
        y = conv(F.pad(x, pads) if padded else x, w, stride=geo.stride, dilation=geo.dilation, groups=c)
        if metric == "mean":
            y = y / self.count.to(x.dtype).reshape(self.out_spatial) if self.ignore else y / geo.patch_size
        return y

    def forward(self, x, grid=True):
        """φ over every patch by gather + reduce (the reference: by the padding matrix)."""
        b, c = x.shape[:2]
        geo, metric = self.geo, self.metric
        mean_ignore = metric == "mean" and self.ignore
        if self.reference:
            taps = literal_patches(x, geo, self.spatial)  # [B, C, P, p]
            if self.ignore and self.fill != 0.0:
                taps = taps.masked_fill(self.outside, self.fill)
            y = FC.reduce(taps, "sum" if mean_ignore else metric, -1, **self.kw)
        else:
            y = FC.patch_reduce(x.flatten(2), self.index, "sum" if mean_ignore else metric, pad_value=self.fill,
                                **self.kw)
        if mean_ignore:
            y = self._mean_ignoring(y)
        return y.reshape(b, c, *self.out_spatial)

    def extra_repr(self):
        return (f"{self.metric}, kernel={self.geo.kernel}, p={self.geo.patch_size}, stride={self.geo.stride}, "
                f"ignore_outside={self.ignore}, reference={self.reference}")


class _PatchPool(Kappa):
    """Geometric patch compression (pooling): grid [C, *S] -> [C, *S'], one φ value per patch and channel."""

    family = "compression"
    grid_only = True
    METRIC: ClassVar[str] = ""

    @property
    def metric(self) -> str:
        return getattr(self.hp, "metric", self.METRIC)

    def geometry(self, rank: int) -> Geometry:
        return self.hp.to_geometry(rank)

    def features_out(self, feat):
        if len(feat) < 2:
            raise ShapeRuleError(f"{self.name} pools over a grid; the input has flat features {feat}")
        return (feat[0], *self.geometry(len(feat) - 1).out_spatial(tuple(feat[1:])))

    def native_pooling(self, rank: int) -> bool:
        return native_pooling(self.geometry(rank), self.metric)

    def build(self, feat, reference=False):
        hp = self.hp
        kw = metric_kwargs(hp) if hasattr(hp, "metric") else {}
        ignore = hp.ignores_outside() if hasattr(hp, "ignores_outside") else \
            (hp.outside == "ignore" or (hp.outside == "auto" and self.metric in ("max", "min")))
        return PatchPoolModule(self.geometry(len(feat) - 1), tuple(feat[1:]), self.metric, kw, ignore, reference)


class _OutsideHP(HP):
    outside: Literal["auto", "zero", "ignore"] = Field(
        "auto", description="zero: out-of-grid taps read 0 (paper/toolkit); ignore: skipped (MaxPool; AvgPool "
                            "count_include_pad=False); auto: ignore for max/min, zero for mean")


class _ConvPoolHP(PoolHP, ConvPatchHP):
    pass


class _ConvFixedHP(_OutsideHP, ConvPatchHP):
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
    "\"toolkit\" for the strategies where the two disagree; strides are floored to integers >= 1.")


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
