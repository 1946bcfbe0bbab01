"""Remainder functions π: R^m -> R^n."""

from __future__ import annotations

from pydantic import Field
from torch import nn

from rpn2c.components.base import Remainder
from rpn2c.components.registry import HP, register


@register
class Zero(Remainder):
    """Zero remainder π(x) = 0."""

    name, family = "zero", "remainder"

    def build(self, m, n):
        return None


@register
class IdentityPi(Remainder):
    """Identity remainder π(x) = x (needs m = n): a residual connection."""

    name, family = "identity", "remainder"

    def check(self, m, n):
        return None if m == n else f"the identity remainder needs input features m = output features n, got {m} and {n}"

    def build(self, m, n):
        return nn.Identity()


@register
class Linear(Remainder):
    """Linear remainder π(x) = x Wᵀ (+ b), W ∈ R^{n x m}: a projected residual."""

    name, family = "linear", "remainder"

    class HP(HP):
        bias: bool = Field(True, description="learn b ∈ R^n")

    def count(self, m, n):
        return n * m + (n if self.hp.bias else 0)

    def build(self, m, n):
        return nn.Linear(m, n, bias=self.hp.bias)
