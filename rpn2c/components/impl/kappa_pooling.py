"""The ``nn.Module`` implementations of :mod:`rpn2c.components.kappa_pooling` (imported when a model is built)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rpn2c.components.grid import Geometry, pad_pairs, pool_plan
from rpn2c.components.kappa import cut_exact, ignore_fill
from rpn2c.functional import compression as FC
from rpn2c.functional import structure


class PatchPoolModule(nn.Module):
    """Grid [B, C, *S] -> [B, C, *S']: φ over every patch (eq 90).

    Default lowering: max/min by native max pooling of the explicitly padded grid (pad value 0, or ∓inf when
    out-of-grid taps are ignored), sum/mean by a depthwise convolution with the patch mask (any patch shape);
    every other metric, patch or padding mode by a gather + :func:`rpn2c.functional.compression.patch_reduce`.
    (The reference lowering's form, the paper's padding matrix ``x A`` then φ, is ``lower/literal_forms.py``'s.)
    """

    def __init__(self, geo: Geometry, spatial, metric: str, kw: dict, ignore: bool, ceil_mode: bool = False):
        super().__init__()
        self.metric, self.kw = metric, kw
        geo, spatial, self.prepad, self.ignore = pool_plan(geo, tuple(spatial), ignore, ceil_mode)
        self.geo, self.spatial = geo, spatial
        self.out_spatial = geo.out_spatial(self.spatial)
        self.fill = ignore_fill(metric) if self.ignore else 0.0
        # the gathered taps: those that land inside the grid for some patch, when every other one reads the
        # reduction's neutral element (cut_exact); a patch wider than the grid never enumerates its kernel box
        self.taps = geo.cut(self.spatial) if cut_exact(metric, self.ignore) else geo
        index = self.taps.patch_index(self.spatial)
        valid = index >= 0
        self.register_buffer("index", index, persistent=False)
        self.register_buffer("outside", ~valid, persistent=False)
        self.register_buffer("count", valid.sum(-1).clamp(min=1), persistent=False)
        if metric in ("sum", "mean"):  # the box-sum convolution's kernel, should the rule ``pool`` choose it
            self.register_buffer("mask", self.taps.kernel_mask().to(torch.get_default_dtype()), persistent=False)

    def _mean_ignoring(self, s):
        return s / self.count.to(s.dtype)

    def pool(self, x):
        """Kernel op ``pool`` (rule ``pool``, where ``native_pooling`` holds): max/min by native max pooling of
        the explicitly padded grid, sum/mean by a depthwise convolution with the patch mask."""
        if self.prepad:
            x = F.pad(x, self.prepad)
        geo, metric = self.taps, self.metric  # the window cut to the grid where that is exact
        pads = pad_pairs(geo)
        padded = any(pads)  # F.pad copies even when every pad is zero
        pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[geo.rank - 1]
        if metric == "max":
            return pool(F.pad(x, pads, value=self.fill) if padded else x, geo.kernel, geo.stride, 0, geo.dilation)
        if metric == "min":
            return -pool(F.pad(-x, pads, value=-self.fill) if padded else -x, geo.kernel, geo.stride, 0,
                         geo.dilation)
        y = structure.box_sum(F.pad(x, pads) if padded else x, self.mask, geo.stride, geo.dilation)
        if metric == "mean":
            y = y / self.count.to(x.dtype).reshape(self.out_spatial) if self.ignore else y / self.geo.patch_size
        return y

    def forward(self, x, grid=True):
        """φ over every patch by gather + reduce."""
        if self.prepad:
            x = F.pad(x, self.prepad)
        y = FC.patch_reduce(x.flatten(2), self.index, self.reduction, pad_value=self.fill, **self.kw)
        return self.finish(y, x.shape[:2])

    @property
    def reduction(self) -> str:
        """The φ each patch is reduced by: a mean that ignores out-of-grid taps, or whose taps were cut, sums, then
        divides by the count (or by the whole patch's size)."""
        return "sum" if self.metric == "mean" and (self.ignore or self.taps is not self.geo) else self.metric

    def finish(self, y, batch_channels):
        """The reduced patches ``[B, C, P]`` on the output grid (the ignoring mean divided by each count, the mean of
        a cut patch by the whole patch's size: its cut taps read 0)."""
        if self.metric == "mean" and self.ignore:
            y = self._mean_ignoring(y)
        elif self.metric == "mean" and self.taps is not self.geo:
            y = y / self.geo.patch_size
        return y.reshape(*batch_channels, *self.out_spatial)

    def extra_repr(self):
        return (f"{self.metric}, kernel={self.geo.kernel}, p={self.geo.patch_size}, stride={self.geo.stride}, "
                f"ignore_outside={self.ignore}"
                + (f", prepad={self.prepad}" if self.prepad else ""))


class AdaptivePoolModule(nn.Module):
    """Grid [B, C, *S] -> [B, C, *size]: the mean or max of every adaptive bin.

    ``F.adaptive_avg_pool{n}d`` / ``F.adaptive_max_pool{n}d`` (the reference lowering's pooling matrix is
    ``lower/literal_forms.py``'s).
    """

    def __init__(self, spatial, size, metric: str):
        super().__init__()
        self.spatial, self.size, self.metric = tuple(spatial), tuple(size), metric

    def forward(self, x, grid=True):
        rank = len(self.size)
        if self.metric == "mean":
            return (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d)[rank - 1](x, self.size)
        return (F.adaptive_max_pool1d, F.adaptive_max_pool2d, F.adaptive_max_pool3d)[rank - 1](x, self.size)

    def extra_repr(self):
        return f"{self.metric}, size={self.size}"
