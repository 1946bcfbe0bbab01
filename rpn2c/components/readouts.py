"""Readouts of one position: item k of a sequence or set, step k of a signal (a vector per sample).

``item(x, index = k)`` reads ``x[:, k]`` of items ``[B, N, d]`` (DeiT's distillation token ``x[:, 1]``) and
``x[:, :, k]`` of a signal ``[B, C, T]`` (a TCN's last step ``x[:, :, -1]``); ``last(x)`` and ``first(x)`` are
``k = −1`` and ``k = 0``. In RPN 2 terms it is the instance ξ with one row, the unit row ``e_kᵀ ∈ R^{1×N}`` (a
structural selection matrix), with ψ = identity: ``y = e_kᵀ X``. The reference lowering multiplies by ``e_k``; the
default lowering indexes. A negative k counts from the end (Python's reading); an index outside a known length is
E0355, outside a symbolic one a runtime error naming the length it needs.
"""

from __future__ import annotations

from pydantic import Field

from rpn2c.components.base import Op, ShapeRuleError, example_model
from rpn2c.components.registry import HP, register
from rpn2c.ir.types import Dim, TensorType, is_known, vector


def read_axis(t: TensorType, what: str) -> tuple[int, Dim]:
    """``(axis, length)`` of the axis a readout selects on: the items of ``[B, N, d]`` (axis 1) or the time steps
    of a signal ``[B, C, T]`` (axis 2); a ShapeRuleError for any other value."""
    if t.kind == "items":
        return 1, t.items
    if t.kind == "grid" and len(t.spatial) == 1:
        return 2, t.spatial[0]
    raise ShapeRuleError(f"{what} reads the item axis of a sequence or set [B, N, d] or the time axis of a signal "
                         f"[B, C, T], got {t}", arg=0)


def needed(index: int) -> int:
    """The fewest positions ``index`` needs: ``k + 1`` from the start, ``|k|`` from the end."""
    return index + 1 if index >= 0 else -index


def read_type(t: TensorType, index: int, what: str) -> TensorType:
    """The type of position ``index`` of ``t``: ``vector[B, d]`` of items, ``vector[B, C]`` of a signal; E0355 for
    an index outside a known length."""
    _, n = read_axis(t, what)
    if is_known(n) and needed(index) > n:
        unit = "items" if t.kind == "items" else "steps"
        raise ShapeRuleError(f"{what} reads position {index}, outside the {n} {unit} of {t}: the index must lie in "
                             f"[{-n}, {n - 1}]", code="E0355")
    return vector(t.batch, t.features)


class _ItemHP(HP):
    index: int = Field(ge=-(2 ** 31), lt=2 ** 31, description="k: the position read (negative: counted from the end)")


@register
class Item(Op):
    """item(x, index = k): sequence [B, N, d] -> vector [B, d], y = x[:, k]; signal [B, C, T] -> vector [B, C], y = x[:, :, k].

    One position as a vector per sample: DeiT's distillation token is ``item(x, index = 1)``, a TCN's readout of
    the last step ``item(x, index = -1)`` (also ``last(x)``). A negative k counts from the end; k outside a known
    length is E0355.
    """

    name, family = "item", "op"
    HP = _ItemHP
    example = example_model("input x: sequence[B, 5, 4]", "y = item(x, index = 1)", "return y")

    def infer(self, ins):
        return read_type(ins[0], self.hp.index, f"item(index = {self.hp.index})")

    def axis_limits(self, ins):
        return [(read_axis(ins[0], self.name)[1], needed(self.hp.index), None)]

    def build(self, ins):
        from rpn2c.components.impl.readouts import ItemModule

        axis, _ = read_axis(ins[0], self.name)
        return ItemModule(self.hp.index, axis, f"item(index = {self.hp.index})", needed(self.hp.index))
