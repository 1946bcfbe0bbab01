"""The ``nn.Module`` implementations of :mod:`rpn2c.components.pi` (imported when a model is built)."""

from __future__ import annotations

import torch
from torch import nn


class _ConstantModule(nn.Module):
    """c·1_n for every sample (and item, and grid cell) of x; c a fixed float or a learnable scalar parameter."""

    def __init__(self, n: int, c: float, learnable: bool):
        super().__init__()
        self.n = n
        if learnable:
            self.c = nn.Parameter(torch.tensor(float(c)))
        else:
            self.register_buffer("c", torch.tensor(float(c)), persistent=False)

    def forward(self, x):
        return (x.new_ones(()) * self.c).expand(*x.shape[:-1], self.n)

    def extra_repr(self):
        return f"n={self.n}"


class _ExpansionRemainder(nn.Module):
    def __init__(self, kappa: nn.Module, d: int, n: int, bias: bool):
        super().__init__()
        self.kappa = kappa
        self.linear = nn.Linear(d, n, bias=bias)

    def forward(self, x):
        return self.linear(self.kappa(x))
