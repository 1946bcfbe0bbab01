"""The ``nn.Module`` implementations of :mod:`rpn2c.components.kappa_patches` (imported when a model is built)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from rpn2c.components.grid import Geometry, pad_pairs
from rpn2c.functional import structure


class PatchGatherModule(nn.Module):
    """Grid [B, C, *S] -> patches as channels [B, C·p, *S'] (channel-major, tap fastest); out-of-grid taps read 0.
    ``forward`` gathers by index (any patch; never the padding matrix); :meth:`im2col` is the kernel op
    ``kappa_unfold`` (rule ``unfold_kappa``, where ``unfolds`` holds)."""

    def __init__(self, geo: Geometry, spatial: tuple[int, ...]):
        super().__init__()
        self.geo, self.spatial = geo, spatial
        self.out_spatial = geo.out_spatial(spatial)
        self.register_buffer("index", geo.patch_index(spatial), persistent=False)

    def im2col(self, x):
        """The patches of a zero-padded box of taps by im2col (``F.unfold`` after padding)."""
        y = structure.im2col(F.pad(x, pad_pairs(self.geo)), self.geo.kernel, self.geo.stride, self.geo.dilation,
                             (0,) * self.geo.rank)
        return y.reshape(x.shape[0], x.shape[1] * self.geo.patch_size, *self.out_spatial)

    def forward(self, x, grid=True):
        t = structure.gather_patches(x.flatten(2), self.index, dim=-1, fill=0.0)  # [B, C, P, p]
        return self.channels(t)

    def channels(self, taps):
        """Taps ``[B, C, P, p]`` as channels ``[B, C·p, *S']``."""
        b, c = taps.shape[:2]
        return taps.transpose(-1, -2).reshape(b, c * self.geo.patch_size, *self.out_spatial)

    def extra_repr(self):
        return f"kernel={self.geo.kernel}, stride={self.geo.stride}, p={self.geo.patch_size}"
