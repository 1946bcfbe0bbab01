"""More remainder functions π: a scaled identity with a learnable scale."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from rpn2c.components.base import head_example
from rpn2c.components.pi import _Activated, _activation_field
from rpn2c.components.registry import HP, register


@register
class ScaledIdentity(_Activated):
    """Scaled identity remainder π(x) = (offset + eps)·x (needs m = n), eps one scalar, learnable by default (l = 1).

    GIN's self term (1 + ε)·x_i with a trained ε (PyG's ``GINConv(train_eps=True)``): offset = 1, eps = ε.
    """

    name = "scaled_identity"
    example = head_example("vector[B, 3]", "pi = scaled_identity(offset = 1.0)")

    class HP(HP):
        offset: float = Field(1.0, allow_inf_nan=False, description="the fixed part of the scale")
        init: float = Field(0.0, allow_inf_nan=False, description="eps's initial value")
        learnable: bool = Field(True, description="learn eps (one parameter)")
        activation: Optional[str] = _activation_field()

    def shape_error(self, m, n):
        return None if m == n else f"the scaled identity remainder needs m = n, got {m} and {n}"

    def count(self, m, n):
        return 1 if self.hp.learnable else 0

    def module(self, m, n):
        from rpn2c.components.impl.layout import ScaledIdentity as Module

        return Module(self.hp.offset, self.hp.init, self.hp.learnable)
