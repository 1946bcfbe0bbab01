"""A free learnable tensor of a spec (``param name: type[...] = init``)."""

from __future__ import annotations

import math

import torch
from torch import nn


def initial(shape: tuple[int, ...], init: str, std: float, mean: float, low: float, high: float,
            value: float) -> torch.Tensor:
    """The initial value drawn with the global torch RNG (as ``nn.init`` does)."""
    t = torch.empty(shape)
    if init == "zeros":
        return t.zero_()
    if init == "ones":
        return t.fill_(1.0)
    if init == "constant":
        return t.fill_(value)
    if init == "normal":
        return t.normal_(mean, std)
    if init == "trunc_normal":
        return nn.init.trunc_normal_(t, mean, std, mean - 2 * std, mean + 2 * std)
    if init == "uniform":
        return t.uniform_(low, high)
    raise ValueError(f"unknown init {init!r}")  # the schema admits none other


class FreeParameter(nn.Module):
    """``forward() = value``: a learnable tensor with the value's full shape (the sample axis of size 1)."""

    def __init__(self, value: torch.Tensor):
        super().__init__()
        self.value = nn.Parameter(value)

    def forward(self) -> torch.Tensor:
        return self.value

    def extra_repr(self) -> str:
        return "x".join(map(str, self.value.shape)) + (f" ({math.prod(self.value.shape):,} parameters)")
