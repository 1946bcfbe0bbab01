"""Modules for the layout ops and the extra processing functions (rpn2c/components/layout.py, processing_more.py)."""

from __future__ import annotations

import torch
from torch import nn


class ToGrid(nn.Module):
    """items [B, ΠS, C] -> grid [B, C, *S] (row-major positions): the inverse of to_items."""

    def __init__(self, size: tuple[int, ...]):
        super().__init__()
        self.size = tuple(size)

    def forward(self, x):
        return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], *self.size)


class ChannelShuffle(nn.Module):
    """y[:, j·g + i] = x[:, i·(C/g) + j]: torch's ``view(B, g, C/g, *S).transpose(1, 2).reshape(B, C, *S)``."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, x):
        b, c, *s = x.shape
        return x.reshape(b, self.groups, c // self.groups, *s).transpose(1, 2).reshape(b, c, *s)


class SlicePositions(nn.Module):
    """The positions start..stop−1 of one spatial axis of a grid [B, C, *S]."""

    def __init__(self, axis: int, start: int, stop: int | None):
        super().__init__()
        self.index = (slice(None),) * (2 + axis) + (slice(start, stop),)

    def forward(self, x):
        return x[self.index]


class Softmin(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.softmax(-x, self.dim)


class L2Normalize(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x):
        return nn.functional.normalize(x, p=2.0, dim=self.dim, eps=self.eps)


class StochasticDepth(nn.Module):
    """torchvision's stochastic depth, draw for draw: in training, ``x · m / (1 − p)`` with ``m ~ Bernoulli(1 − p)``
    of shape ``[B, 1, ...]`` (mode "row": one draw per sample) or ``[1, ...]`` ("batch": one draw for all);
    the identity in eval mode or for p = 0."""

    def __init__(self, p: float, mode: str):
        super().__init__()
        self.p, self.mode = p, mode

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        survival = 1.0 - self.p
        size = [x.shape[0]] + [1] * (x.ndim - 1) if self.mode == "row" else [1] * x.ndim
        noise = torch.empty(size, dtype=x.dtype, device=x.device).bernoulli_(survival)
        if survival > 0.0:
            noise.div_(survival)
        return x * noise

    def extra_repr(self):
        return f"p={self.p}, mode={self.mode}"


class ScaledIdentity(nn.Module):
    """π(x) = (offset + eps)·x, eps one scalar (a parameter when learnable)."""

    def __init__(self, offset: float, init: float, learnable: bool):
        super().__init__()
        self.offset = offset
        if learnable:
            self.eps = nn.Parameter(torch.tensor(float(init)))
        else:
            self.register_buffer("eps", torch.tensor(float(init)), persistent=False)

    def forward(self, x):
        return (self.offset + self.eps) * x

    def extra_repr(self):
        return f"offset={self.offset}"
