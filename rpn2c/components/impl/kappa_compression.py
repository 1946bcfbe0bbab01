"""The ``nn.Module`` implementations of :mod:`rpn2c.components.kappa_compression` (imported when a model is built)."""

from __future__ import annotations

from torch import nn


class _FlattenModule(nn.Module):
    def forward(self, x, grid=False):
        return x.flatten(1) if grid else x
