"""The ``nn.Module`` implementations of :mod:`rpn2c.components.kappa_patches` (imported when a model is built)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from rpn2c.components.grid import Geometry
from rpn2c.components.kappa import literal_patches, pad_pairs
from rpn2c.functional import structure


class PatchGatherModule(nn.Module):
    """Grid [B, C, *S] -> patches as channels [B, C·p, *S'] (channel-major, tap fastest); out-of-grid taps read 0."""

    def __init__(self, geo: Geometry, spatial: tuple[int, ...], reference: bool):
        super().__init__()
        self.geo, self.spatial, self.reference = geo, spatial, reference
        self.out_spatial = geo.out_spatial(spatial)
        self.register_buffer("index", geo.patch_index(spatial), persistent=False)
        self.unfold = (not reference and geo.rank == 2 and geo.taps is None and geo.padding_mode == "zeros")

    def forward(self, x, grid=True):
        b, c = x.shape[:2]
        p = self.geo.patch_size
        if self.unfold:
            y = structure.im2col(F.pad(x, pad_pairs(self.geo)), self.geo.kernel, self.geo.stride, self.geo.dilation,
                                 (0,) * self.geo.rank)
            return y.reshape(b, c * p, *self.out_spatial)
        if self.reference:
            t = literal_patches(x, self.geo, self.spatial)
        else:
            t = structure.gather_patches(x.flatten(2), self.index, dim=-1, fill=0.0)  # [B, C, P, p]
        return t.transpose(-1, -2).reshape(b, c * p, *self.out_spatial)

    def extra_repr(self):
        return f"kernel={self.geo.kernel}, stride={self.geo.stride}, p={self.geo.patch_size}"
