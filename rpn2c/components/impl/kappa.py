"""The ``nn.Module`` implementations of :mod:`rpn2c.components.kappa` (imported when a model is built)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class CallModule(nn.Module):
    """``forward(x) = fn(x, **kwargs)`` on the last axis; tensor keyword arguments are (non-persistent) buffers,
    so they follow ``.to(device/dtype)`` without a per-forward copy."""

    def __init__(self, fn: Callable[..., torch.Tensor], kwargs: dict[str, Any], label: str = ""):
        super().__init__()
        self.fn, self.label = fn, label or getattr(fn, "__name__", "κ")
        self._plain = {k: v for k, v in kwargs.items() if not isinstance(v, torch.Tensor)}
        self._tensors = [k for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
        for k in self._tensors:
            self.register_buffer(k, kwargs[k], persistent=False)

    def forward(self, x, grid=False):
        return self.fn(x, **self._plain, **{k: getattr(self, k) for k in self._tensors})

    def extra_repr(self):
        return self.label


class _Chain(nn.Module):
    def __init__(self, mods, concat: bool):
        super().__init__()
        self.parts, self.concat = nn.ModuleList(mods), concat

    def forward(self, x, grid=False):
        if self.concat:
            return torch.cat([m(x) for m in self.parts], dim=-1)
        for m in self.parts:
            x = m(x)
        return x
