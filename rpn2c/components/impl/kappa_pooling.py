"""The ``nn.Module`` implementations of :mod:`rpn2c.components.kappa_pooling` (imported when a model is built)."""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from rpn2c.components.grid import Geometry, ceil_extension, native_pooling
from rpn2c.components.kappa import ignore_fill, literal_patches, pad_pairs
from rpn2c.functional import compression as FC
from rpn2c.functional import structure


class PatchPoolModule(nn.Module):
    """Grid [B, C, *S] -> [B, C, *S']: φ over every patch (eq 90).

    Default lowering: max/min by native max pooling of the explicitly padded grid (pad value 0, or ∓inf when
    out-of-grid taps are ignored), sum/mean by a depthwise convolution with the patch mask (any patch shape);
    every other metric, patch or padding mode by a gather + :func:`rpn2c.functional.compression.patch_reduce`.
    Reference lowering: the paper's padding matrix, ``x A`` (one-hot columns, zero for out-of-grid taps), then φ.
    """

    def __init__(self, geo: Geometry, spatial, metric: str, kw: dict, ignore: bool, reference: bool,
                 ceil_mode: bool = False):
        super().__init__()
        self.metric, self.kw, self.reference = metric, kw, reference
        self.prepad: list[int] = []
        extra = ceil_extension(geo, spatial) if ceil_mode else (0,) * geo.rank
        if any(extra):
            # torch's ceil_mode: the added last windows skip their taps past the padded grid. With zero padding
            # read as 0 (outside = "zero") the grid is padded explicitly first, so that every out-of-grid tap left
            # is one past the padded grid and is skipped.
            if not ignore and (any(geo.pad_before) or any(geo.pad_after)):
                self.prepad = pad_pairs(geo)
                spatial = tuple(n + b + a for n, b, a in zip(spatial, geo.pad_before, geo.pad_after))
                geo = replace(geo, pad_before=(0,) * geo.rank, pad_after=(0,) * geo.rank)
            geo = replace(geo, pad_after=tuple(a + e for a, e in zip(geo.pad_after, extra)))
            ignore = True
        self.geo, self.spatial = geo, tuple(spatial)
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
        if self.prepad:
            x = F.pad(x, self.prepad)
        geo, metric = self.geo, self.metric
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
            y = y / self.count.to(x.dtype).reshape(self.out_spatial) if self.ignore else y / geo.patch_size
        return y

    def forward(self, x, grid=True):
        """φ over every patch by gather + reduce (the reference: by the padding matrix)."""
        if self.prepad:
            x = F.pad(x, self.prepad)
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
                f"ignore_outside={self.ignore}, reference={self.reference}"
                + (f", prepad={self.prepad}" if self.prepad else ""))


class AdaptivePoolModule(nn.Module):
    """Grid [B, C, *S] -> [B, C, *size]: the mean or max of every adaptive bin.

    Default lowering: ``F.adaptive_avg_pool{n}d`` / ``F.adaptive_max_pool{n}d``. Reference lowering: the mean as
    the pooling matrix ``x P`` (:func:`rpn2c.functional.compression.adaptive_pool_matrix`; the bin membership
    product first, then the division by |bin| in x's dtype), the max as the bins
    gathered by a one-hot matrix ``x A`` then reduced, slots past a bin's end ignored.
    """

    def __init__(self, spatial, size, metric: str, reference: bool):
        super().__init__()
        self.spatial, self.size, self.metric, self.reference = tuple(spatial), tuple(size), metric, reference
        self.known = all(isinstance(v, int) for v in self.spatial)  # else the reference builds P per input size
        if reference and self.known:
            matrix, extra = self._literal(self.spatial)
            self.register_buffer("matrix", matrix, persistent=False)
            self.register_buffer("count" if metric == "mean" else "outside", extra, persistent=False)

    def _literal(self, spatial):
        """The reference's matrix for an input grid ``spatial``: (P's membership, |bin|) for the mean, (the one-hot
        gather, the slots past a bin's end) for the max."""
        if self.metric == "mean":  # the pooling matrix P = membership / |bin|, its 1/|bin| applied in x's dtype
            member = FC.adaptive_pool_matrix(spatial, self.size, dtype=torch.float64)
            return (member > 0).to(torch.get_default_dtype()), (member > 0).sum(0)
        index = FC.adaptive_bin_index(spatial, self.size)
        n = 1
        for v in spatial:
            n *= v
        valid = (index >= 0).flatten()
        onehot = torch.zeros(n, index.numel(), dtype=torch.get_default_dtype())
        onehot[index.flatten()[valid], torch.arange(index.numel())[valid]] = 1.0
        return onehot, ~valid.reshape(index.shape)

    def forward(self, x, grid=True):
        b, c = x.shape[:2]
        if not self.reference:
            rank = len(self.size)
            if self.metric == "mean":
                return (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d)[rank - 1](x, self.size)
            return (F.adaptive_max_pool1d, F.adaptive_max_pool2d, F.adaptive_max_pool3d)[rank - 1](x, self.size)
        if self.known:
            matrix, extra = self.matrix, self.count if self.metric == "mean" else self.outside
        else:
            matrix, extra = (t.to(x.device) for t in self._literal(tuple(x.shape[2:])))
        flat = x.flatten(2) @ matrix.to(x.dtype)
        if self.metric == "mean":
            flat = flat / extra.to(x.dtype)
        else:
            taps = flat.unflatten(-1, extra.shape).masked_fill(extra, -math.inf)
            flat = taps.amax(-1)
        return flat.reshape(b, c, *self.size)

    def extra_repr(self):
        return f"{self.metric}, size={self.size}, reference={self.reference}"
