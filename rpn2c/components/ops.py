"""Dataflow operations: reshaping between layouts, residual sums, concatenation, item pooling."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from rpn2c.components.base import Op, ShapeRuleError, binary_example, example_model
from rpn2c.components.registry import HP, register
from rpn2c.ir.types import TensorType, items, numel, vector


@register
class FlattenOp(Op):
    """flatten(x): a grid [B, C, *S] or items [B, N, F] becomes a vector [B, C·ΠS] (channel-major)."""

    name, family = "flatten", "op"

    def infer(self, ins):
        t = ins[0]
        if t.kind == "vector":
            return t
        if t.kind not in ("grid", "items"):
            raise ShapeRuleError(f"flatten needs a grid or items value, got {t}")
        return vector(t.batch, numel(t.shape[1:]))

    def build(self, ins):
        return _Lambda(lambda x: x.flatten(1))


class _Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _same_types(ins, what):
    first = ins[0]
    for t in ins[1:]:
        if t.kind != first.kind or tuple(t.shape) != tuple(first.shape):
            raise ShapeRuleError(f"{what} needs equal shapes, got {first} and {t}")
    return first


@register
class Add(Op):
    """add(a, b, ...): elementwise sum (residual connections)."""

    name, family = "add", "op"
    arity = (2, 64)
    example = binary_example()

    def infer(self, ins):
        return _same_types(ins, "add")

    def build(self, ins):
        return _Lambda(lambda *xs: sum(xs[1:], xs[0]))


@register
class Multiply(Op):
    """mul(a, b, ...): elementwise (Hadamard) product."""

    name, family = "mul", "op"
    arity = (2, 64)
    example = binary_example()

    def infer(self, ins):
        return _same_types(ins, "mul")

    def build(self, ins):
        return _Lambda(lambda *xs: math.prod(xs[1:], start=xs[0]))


@register
class ConcatOp(Op):
    """concat(a, b, ...): concatenation along the feature axis (channels for grids)."""

    name, family = "concat", "op"
    arity = (2, 64)
    example = binary_example()

    def infer(self, ins):
        first = ins[0]
        for t in ins[1:]:
            if t.kind != first.kind or len(t.shape) != len(first.shape):
                raise ShapeRuleError(f"concat needs values of one layout, got {first} and {t}")
            fa = 1 if first.kind == "grid" else len(first.shape) - 1
            rest_a = [d for i, d in enumerate(first.shape) if i != fa]
            rest_b = [d for i, d in enumerate(t.shape) if i != fa]
            if rest_a != rest_b:
                raise ShapeRuleError(f"concat needs equal shapes outside the feature axis, got {first} and {t}")
        fa = 1 if first.kind == "grid" else len(first.shape) - 1
        total = 0
        for t in ins:
            total = total + t.shape[fa] if isinstance(total, int) and isinstance(t.shape[fa], int) else "?"
        shape = list(first.shape)
        shape[fa] = total
        return first.with_shape(shape)

    def build(self, ins):
        dim = 1 if ins[0].kind == "grid" else -1
        return _Lambda(lambda *xs: torch.cat(xs, dim=dim))


@register
class ToItems(Op):
    """to_items(x): a grid [B, C, *S] becomes items [B, ΠS, C] (one item per position, row-major)."""

    name, family = "to_items", "op"
    aliases = ("to_sequence",)
    example = example_model("input x: image[B, 2, 3, 3]", "y = to_items(x)", "return y")

    def infer(self, ins):
        t = ins[0]
        if t.kind != "grid":
            raise ShapeRuleError(f"to_items needs a grid, got {t}")
        return items(t.batch, numel(t.spatial), t.features, role="sequence")

    def build(self, ins):
        return _Lambda(lambda x: x.flatten(2).transpose(1, 2))


@register
class TimeMajor(Op):
    """time_major(y): y unchanged, but returned time-first ([T, B, F] instead of [B, T, F]) by the model."""

    name, family = "time_major", "op"

    def infer(self, ins):
        t = ins[0]
        if t.kind != "items" or not t.batched:
            raise ShapeRuleError(f"time_major needs a batched sequence, got {t}")
        return TensorType("items", t.shape, True, None, "time_major", True)

    def build(self, ins):
        return _Lambda(lambda x: x)


class _PoolHP(HP):
    how: Literal["mean", "sum", "max"] = "mean"


@register
class PoolItems(Op):
    """pool_items(x, how = "mean"|"sum"|"max"): items [B, N, F] or a grid [B, C, *S] to a vector over the item/spatial axes."""

    name, family = "pool_items", "op"
    aliases = ("readout",)
    HP = _PoolHP

    def infer(self, ins):
        t = ins[0]
        if t.kind not in ("items", "grid"):
            raise ShapeRuleError(f"pool_items needs items or a grid, got {t}")
        return vector(t.batch, t.features)

    def build(self, ins):
        how, is_grid = self.hp.how, ins[0].kind == "grid"

        def pool(x):
            x = x.flatten(2) if is_grid else x.transpose(1, 2)
            return x.amax(-1) if how == "max" else (x.sum(-1) if how == "sum" else x.mean(-1))

        return _Lambda(pool)


