"""Where a layer's parts live and which axis a fusion reads: plain bookkeeping both lowerings share (no kernel, no
matrix), so that neither the default lowering (``lower/emitters.py``) nor the oracle (``lower/reference.py``)
imports the other."""

from __future__ import annotations

import torch


def channel(mod, c):
    """Channel ``c``'s module of a per-channel part (a ModuleList), or the part itself when shared."""
    return mod[c] if isinstance(mod, torch.nn.ModuleList) else mod


def fuse(fusion, ys, grid):
    """Fusions act on the feature axis: the last one for items/vectors, the channel axis (1) for grids."""
    if not grid:
        return fusion(ys)
    return fusion([y.movedim(1, -1) for y in ys]).movedim(-1, 1)


def fuse_channels(hd, ys, grid):
    """A head's channel outputs fused (one channel: itself)."""
    return ys[0] if len(ys) == 1 else fuse(hd.channel_fusion, ys, grid)
