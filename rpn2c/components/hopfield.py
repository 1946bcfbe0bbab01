"""The classical Hopfield network (seed 001 §1.4) as an operation on a state and the patterns it stores."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rpn2c.components.base import Op, ShapeRuleError, example_model
from rpn2c.components.registry import HP, register
from rpn2c.ir.types import TensorType


class _HopfieldHP(HP):
    steps: int = Field(1, ge=1, le=1000, description="sweeps of the update")
    update: Literal["synchronous", "asynchronous"] = Field(
        "asynchronous", description="every neuron at once, or neuron i = 1..n in order (never raises the energy)")
    threshold: float = Field(0.0, description="b_i = θ of every neuron")


@register
class Hopfield(Op):
    """hopfield(x, patterns): X ← sgn(W X − b), W = (1/n) Σ_t p_t p_tᵀ with w_ii = 0 (Hebbian), sgn(0) = +1; vector[B, n] × items[B, s, n] → vector[B, n].

    The energy H(X) = −½ Xᵀ W X + Σ_i b_i X_i never rises under asynchronous updates (neuron i = 1..n in turn,
    each reading the states already updated); synchronous updates set every neuron from the same state. States
    and patterns are ±1 (other values are taken as they are). Default lowering: W X = (1/n)(Pᵀ(P X) − (Σ_t p_ti²)
    X_i) without the n x n matrix; reference: W built.
    """

    name, family = "hopfield", "op"
    aliases = ("hopfield_update",)
    HP = _HopfieldHP
    arity = (2, 2)
    example = example_model("input x: vector[B, 8]", "input p: sequence[B, 3, 8]",
                            "y = hopfield(x, p, steps = 2)", "return y")

    def infer(self, ins: list[TensorType]) -> TensorType:
        x, p = ins
        if x.kind != "vector":
            raise ShapeRuleError(f"hopfield's state is one vector of ±1 per sample, vector[B, n]; got {x}", arg=0)
        if p.kind != "items":
            raise ShapeRuleError(f"hopfield stores its patterns as the items of items[B, s, n]; got {p}", arg=1)
        if str(p.features) != str(x.features):
            raise ShapeRuleError(f"hopfield's patterns must have the state's n = {x.features} neurons; "
                                 f"got {p.features}", arg=1)
        if str(p.batch) != str(x.batch) and str(p.batch) != "1":
            raise ShapeRuleError(f"hopfield's patterns have batch {p.batch}, its state {x.batch}: give both "
                                 f"the same batch symbol (or one set of patterns, batch 1)", arg=1)
        return x

    def build(self, inputs: list[TensorType]):
        from rpn2c.components.impl.ops import HopfieldModule

        return HopfieldModule(self.hp.steps, self.hp.update, self.hp.threshold)
