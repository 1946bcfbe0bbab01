"""Fusion of heads (in a layer) or channels (in a head)."""

from __future__ import annotations

from typing import Optional

import torch
from pydantic import Field
from torch import nn

from rpn2c.components.base import Fusion
from rpn2c.components.registry import HP, register


class _SameWidth(Fusion):
    """Elementwise fusions need equal widths."""

    def check(self, dims):
        return None if len(set(dims)) == 1 else f"{self.name} fusion needs equal widths, got {dims}"

    def out_features(self, dims):
        return dims[0]


@register
class Sum(_SameWidth):
    """Summation fusion Σ_i A_i."""

    name, family = "sum", "fusion"

    def build(self, dims):
        return _Reduce("sum")


@register
class Mean(_SameWidth):
    """Average fusion (1/k) Σ_i A_i."""

    name, family = "mean", "fusion"
    aliases = ("average",)

    def build(self, dims):
        return _Reduce("mean")


class _Reduce(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how

    def forward(self, xs):
        if len(xs) == 1:
            return xs[0]
        stacked = torch.stack(list(xs))
        return stacked.sum(0) if self.how == "sum" else stacked.mean(0)


@register
class Concat(Fusion):
    """Concatenation fusion A_1 ⊔ ... ⊔ A_k along the feature axis."""

    name, family = "concat", "fusion"

    def out_features(self, dims):
        return sum(dims)

    def build(self, dims):
        return _Concat()


class _Concat(nn.Module):
    def forward(self, xs):
        return torch.cat(list(xs), dim=-1)


@register
class ConcatLinear(Fusion):
    """Concatenation + linear fusion (⊔ A_i) Wᵀ (+ b), W ∈ R^{n x Σ n_i} (eq 119)."""

    name, family = "concat_linear", "fusion"

    class HP(HP):
        out: Optional[int] = Field(None, ge=1, description="output width n; default Σ n_i")
        bias: bool = True

    def width(self, dims):
        return self.hp.out if self.hp.out is not None else sum(dims)

    def out_features(self, dims):
        return self.width(dims)

    def count(self, dims):
        n = self.width(dims)
        return sum(dims) * n + (n if self.hp.bias else 0)

    def build(self, dims):
        return _ConcatLinear(sum(dims), self.width(dims), self.hp.bias)


class _ConcatLinear(nn.Module):
    def __init__(self, d_in, d_out, bias):
        super().__init__()
        self.linear = nn.Linear(d_in, d_out, bias=bias)

    def forward(self, xs):
        return self.linear(torch.cat(list(xs), dim=-1))


