"""``param name: type[1, ...] = init``: a free learnable tensor (positions, a class token, a layer scale, a decoder
bias) that is not a head's ψ. It is a value of the model like any other; operations (``add``, ``mul``,
``concat_items`` …) broadcast its size-1 sample axis. ``y = P`` with P ∈ R^{shape}, P₀ = init."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator

from rpn2c.components.base import Op, ShapeRuleError, example_model
from rpn2c.components.registry import HP, register
from rpn2c.ir.types import MASK_MODES, TYPE_CONSTRUCTORS, TensorType

INITS = ("zeros", "ones", "constant", "normal", "trunc_normal", "uniform")
_BOUND = 1e6


class _ParamHP(HP):
    kind: str
    shape: list[int]
    init: Literal["zeros", "ones", "constant", "normal", "trunc_normal", "uniform"] = "zeros"
    std: float = Field(0.02, gt=0, le=_BOUND)
    mean: float = Field(0.0, ge=-_BOUND, le=_BOUND)
    low: float = Field(-0.02, ge=-_BOUND, le=_BOUND)
    high: float = Field(0.02, ge=-_BOUND, le=_BOUND)
    value: float = Field(0.0, ge=-_BOUND, le=_BOUND)

    @field_validator("kind")
    @classmethod
    def _kind(cls, v):
        if v not in TYPE_CONSTRUCTORS or TYPE_CONSTRUCTORS[v][0] in ("edges", "tokens") or v in MASK_MODES:
            raise ValueError(f"a parameter holds features: a vector, sequence, items or grid type, not '{v}'")
        return v

    @field_validator("shape")
    @classmethod
    def _shape(cls, v):
        if not v or any(d < 1 for d in v):
            raise ValueError(f"a parameter's dimensions are integers >= 1, got {v}")
        if math.prod(v) > 1 << 28:
            raise ValueError(f"a parameter of shape {v} is too large")
        return v


def type_of(kind: str, shape: list[int]) -> TensorType:
    """The value type of a parameter declared ``kind[shape]`` (its sample axis is the first, of size 1)."""
    base, ranks = TYPE_CONSTRUCTORS[kind]
    if len(shape) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ShapeRuleError(f"'{kind}' takes {want} dimensions, got {len(shape)}")
    if kind == "nodes" and len(shape) == 2:
        raise ShapeRuleError("a parameter over nodes is written nodes[1, N, F] (its sample axis first)")
    if shape[0] != 1:
        raise ShapeRuleError(f"a parameter has one copy for every sample: its first (sample) axis is 1, got "
                             f"{shape[0]} (write {kind}[1, {', '.join(map(str, shape[1:]))}])")
    time_major = kind in ("time_major", "state")
    dims = [shape[1], shape[0], *shape[2:]] if time_major else list(shape)
    return TensorType(base, tuple(dims), True, None, kind, time_major)


@register
class Parameter(Op):
    """param name: type[1, ...] = init: a free learnable tensor P (positions, class token, layer scale); y = P."""

    name, family = "parameter", "op"
    HP = _ParamHP
    arity = (0, 0)
    example = example_model("input x: sequence[B, 5, 4]", "param pos: sequence[1, 5, 4] = normal(std = 0.02)",
                            "y = add(x, pos)", "return y")

    def infer(self, ins):
        return type_of(self.hp.kind, self.hp.shape)

    def count(self, ins):
        return math.prod(self.hp.shape)

    def build(self, ins):
        from rpn2c.components.impl.params import FreeParameter, initial

        hp = self.hp
        return FreeParameter(initial(tuple(hp.shape), hp.init, hp.std, hp.mean, hp.low, hp.high, hp.value))
