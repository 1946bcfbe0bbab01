"""The ``nn.Module`` implementations of :mod:`rpn2c.components.ops` (imported when a model is built)."""

from __future__ import annotations

import torch
from torch import nn


class HopfieldModule(nn.Module):
    """``hopfield(x, p)``: ``steps`` sign updates of the state x with the couplings of the patterns p, ``(n W) X``
    applied as ``Pᵀ(P X) − (Σ_t p_ti²) X_i`` (:func:`rpn2c.functional.hopfield.update`), never the n x n matrix."""

    def __init__(self, steps: int, update: str, threshold: float):
        super().__init__()
        self.steps, self.update, self.threshold = steps, update, threshold

    def forward(self, x, p):
        from rpn2c.functional import hopfield

        return hopfield.update(p, x, self.steps, self.update, self.threshold)

    def extra_repr(self) -> str:
        return f"steps={self.steps}, update={self.update}, threshold={self.threshold}"


class _Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


class _Elementwise(nn.Module):
    """``fn`` folded over the operands after each per-sample vector is lifted onto the grid/items axes."""

    def __init__(self, fn, lifts, constant=None, constant_at=0):
        super().__init__()
        self.fn, self.lifts = fn, lifts
        self.constant, self.constant_at = constant, constant_at

    def forward(self, *xs):
        xs = [x if lift is None else x[lift] for x, lift in zip(xs, self.lifts)]
        if self.constant is not None:  # a Python number: torch broadcasts it in the input's dtype
            xs.insert(self.constant_at, self.constant)
        out = xs[0]
        if not isinstance(out, torch.Tensor):  # a leading constant (`sub(1.0, m)`): a 0-d tensor of x's dtype
            out = torch.as_tensor(out, dtype=xs[1].dtype, device=xs[1].device)
        for x in xs[1:]:
            out = self.fn(out, x)
        return out
