"""Remainder functions π: R^m -> R^n (catalog §2.4; tinyBIG's 5 remainder classes plus RPN v1's expansion remainder).

π acts on the head's raw main input (before `pre` processing) and is added once per layer, after channel and head
fusion (semantics.md; the toolkit's order, erratum 3: eq (30) adds it per channel). On image layers it acts on the
channel axis. Every non-zero π takes an optional elementwise `activation` (a registered activation name), applied
to π's output as the toolkit's `activation_functions`: π(x) = σ(π₀(x)).
"""

from __future__ import annotations

from typing import Optional, TYPE_CHECKING

from pydantic import Field, field_validator

from rpn2c.components.base import Remainder, head_example
from rpn2c.components.registry import HP, REGISTRY, register

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    from torch import nn


def _activation_error(name: str | None) -> str | None:
    if name is None:
        return None
    from rpn2c.components.processing import _Activation

    entry = REGISTRY["processing"].get(name)
    if entry is None or not issubclass(entry.cls, _Activation):
        known = sorted(n for n, e in REGISTRY["processing"].items() if issubclass(e.cls, _Activation))
        return f"activation '{name}' is not an elementwise activation (known: {', '.join(known)})"
    return None


def _activation(name: str | None) -> nn.Module | None:
    if name is None:
        return None
    entry = REGISTRY["processing"][name]
    return entry.cls(entry.schema()).build(None)  # elementwise: the type is not consulted


def _activation_field():
    return Field(None, description="elementwise activation applied to π's output")


class _ActivatedHP(HP):
    activation: Optional[str] = _activation_field()


class _Activated(Remainder):
    """Shared by the non-zero remainders: the shape check plus the activation check, the module plus σ."""

    family = "remainder"
    HP = _ActivatedHP

    def check(self, m, n):
        return self.shape_error(m, n) or _activation_error(self.hp.activation)

    def shape_error(self, m, n) -> str | None:
        return None

    def build(self, m, n):
        from torch import nn

        core = self.module(m, n)
        act = _activation(self.hp.activation)
        return core if act is None else nn.Sequential(core, act)

    def module(self, m, n) -> nn.Module:
        raise NotImplementedError


@register
class Zero(Remainder):
    """Zero remainder π(x) = 0 (skipped: nothing is added)."""

    name, family = "zero", "remainder"

    def build(self, m, n):
        return None


@register
class Constant(_Activated):
    """Constant remainder π(x) = c·1_n (any m, n); `learnable = true` makes c one learnable scalar (l = 1)."""

    name = "constant"

    class HP(HP):
        c: float = Field(1.0, description="the constant (its initial value when learnable)")
        learnable: bool = Field(False, description="learn c (one parameter)")
        activation: Optional[str] = _activation_field()

    def count(self, m, n):
        return 1 if self.hp.learnable else 0

    def module(self, m, n):
        from rpn2c.components.impl.pi import _ConstantModule

        return _ConstantModule(n, self.hp.c, self.hp.learnable)


@register
class One(_Activated):
    """One remainder π(x) = 1_n (any m, n; no parameters)."""

    name = "one"

    def module(self, m, n):
        from rpn2c.components.impl.pi import _ConstantModule

        return _ConstantModule(n, 1.0, False)


@register
class IdentityPi(_Activated):
    """Identity remainder π(x) = x (needs m = n): a residual connection.

    m ≠ n is an error (the toolkit also refuses it for non-parametric remainders); use `linear` to project.
    """

    name = "identity"
    example = head_example("vector[B, 3]", "pi = identity")  # m = n

    def shape_error(self, m, n):
        return None if m == n else f"the identity remainder needs input features m = output features n, got {m} and {n}"

    def module(self, m, n):
        from torch import nn

        return nn.Identity()


@register
class Linear(_Activated):
    """Linear remainder π(x) = x Wᵀ (+ b), W ∈ R^{n x m}: a projected residual; l = n·m (+ n)."""

    name = "linear"

    class HP(HP):
        bias: bool = Field(True, description="learn b ∈ R^n")
        activation: Optional[str] = _activation_field()

    def count(self, m, n):
        return n * m + (n if self.hp.bias else 0)

    def module(self, m, n):
        from torch import nn

        return nn.Linear(m, n, bias=self.hp.bias)


@register
class ExpansionRemainder(_Activated):
    """Expansion remainder π(x) = κ'(x) Wᵀ (+ b), κ' a registered expansion with D' outputs; l = n·D' (+ n) + l_κ'.

    RPN v1's complementary expansion remainder, deleted from tinyBIG v0.2.0 as redundant with a second head (paper
    §7); kept for RPN v1 specs. `kappa` names the expansion as the inner κ of `extended`/`nested` do:
    "name" or "name(key = value, ...)".
    """

    name = "expansion"

    class HP(HP):
        kappa: str = Field("taylor(d = 2)", description='the expansion κ\': "name" or "name(key = value, ...)"')
        bias: bool = Field(True, description="learn b ∈ R^n")
        activation: Optional[str] = _activation_field()

        @field_validator("kappa")
        @classmethod
        def _known(cls, v):
            _part(v)  # unknown names and bad options are schema errors
            return v

    def _kappa(self):
        return _part(self.hp.kappa).component

    def shape_error(self, m, n):
        try:
            self._kappa().features_out((m,))
        except ValueError as exc:  # ShapeRuleError: κ' cannot take m flat features
            return f"expansion remainder: {exc}"
        return None

    def count(self, m, n):
        kappa = self._kappa()
        return n * kappa.features_out((m,))[0] + (n if self.hp.bias else 0) + kappa.count((m,))

    def scratch(self, m, n):
        kappa = self._kappa()
        return kappa.features_out((m,))[0] + kappa.scratch((m,))

    def module(self, m, n):
        from rpn2c.components.impl.pi import _ExpansionRemainder

        kappa = self._kappa()
        return _ExpansionRemainder(kappa.build((m,)), kappa.features_out((m,))[0], n, self.hp.bias)


def _part(text: str):
    from rpn2c.components.kappa import parse_part

    return parse_part(text, ("expansion",))
