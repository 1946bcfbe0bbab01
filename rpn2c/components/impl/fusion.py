"""The ``nn.Module`` implementations of :mod:`rpn2c.components.fusion` (imported when a model is built)."""

from __future__ import annotations

import torch
from torch import nn

from rpn2c.functional import fusion as F


def _uniform(shape, fan_in):
    bound = 1.0 / max(fan_in, 1) ** 0.5
    return nn.Parameter(torch.empty(shape).uniform_(-bound, bound))


class _FnModule(nn.Module):
    """Applies a parameter-free functional fusion to the list of inputs."""

    def __init__(self, fn, label: str, **kw):
        super().__init__()
        self.fn, self.label, self.kw = fn, label, kw

    def forward(self, xs):
        return self.fn(list(xs), **self.kw)

    def extra_repr(self):
        return self.label


class _Weighted(nn.Module):
    def __init__(self, weights, learnable):
        super().__init__()
        if learnable:
            self.weights = nn.Parameter(weights)
        else:
            self.register_buffer("weights", weights, persistent=False)

    def forward(self, xs):
        return F.weighted_fusion(list(xs), self.weights)


class _ConcatLinear(nn.Module):
    """Keeps nn.Linear's layout (`linear.weight` ∈ R^{n x Σ n_i}, the checkpoint names importers map onto);
    eq (119)'s W is its transpose."""

    def __init__(self, d_in, d_out, bias):
        super().__init__()
        self.linear = nn.Linear(d_in, d_out, bias=bias)

    def forward(self, xs):
        return F.concat_linear_fusion(list(xs), self.linear.weight.mT, self.linear.bias)


class _ConcatLowRank(nn.Module):
    def __init__(self, d_in, d_out, r, bias):
        super().__init__()
        self.P = _uniform((d_in, r), d_in)
        self.Q = _uniform((d_out, r), r)
        self.bias = _uniform((d_out,), d_in) if bias else None

    def forward(self, xs):
        return F.concat_lowrank_fusion(list(xs), self.P, self.Q, self.bias)


class _ReconciledConcat(nn.Module):
    def __init__(self, psi, n, bias):
        super().__init__()
        self.psi = psi
        d_in = psi.D
        self.bias = _uniform((n,), d_in) if bias else None

    def forward(self, xs):
        y = self.psi.apply(F.concat_fusion(list(xs)))
        return y if self.bias is None else y + self.bias
