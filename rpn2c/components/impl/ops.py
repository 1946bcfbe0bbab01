"""The ``nn.Module`` implementations of :mod:`rpn2c.components.ops` (imported when a model is built)."""

from __future__ import annotations

from torch import nn


class _Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


class _Elementwise(nn.Module):
    """``fn`` folded over the operands after each per-sample vector is lifted onto the grid/items axes."""

    def __init__(self, fn, lifts):
        super().__init__()
        self.fn, self.lifts = fn, lifts

    def forward(self, *xs):
        xs = [x if lift is None else x[lift] for x, lift in zip(xs, self.lifts)]
        out = xs[0]
        for x in xs[1:]:
            out = self.fn(out, x)
        return out
