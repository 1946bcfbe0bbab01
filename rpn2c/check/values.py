"""Evaluate hyper-parameter expressions: literals, arithmetic on block parameters, lists, value names."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rpn2c.components.registry import ValueRef
from rpn2c.errors import Diagnostics, did_you_mean
from rpn2c.syntax import ast


class Invalid:
    """Marks an expression that already produced a diagnostic (stops cascades)."""

    def __repr__(self) -> str:
        return "<invalid>"


INVALID = Invalid()


@dataclass
class Scope:
    """Names visible in a block body: parameters (Python values) and dataflow values (IR node ids)."""

    params: dict[str, Any] = field(default_factory=dict)
    values: dict[str, str] = field(default_factory=dict)
    prefix: str = ""

    def known(self) -> list[str]:
        return [*self.params, *self.values]


def evaluate(e: ast.Expr, scope: Scope, diags: Diagnostics, *, allow_values: bool = True) -> Any:
    """The Python value of ``e``; dataflow names become :class:`ValueRef` (node id)."""
    if isinstance(e, ast.Literal):
        return e.value
    if isinstance(e, ast.Name):
        key = e.text
        if key in scope.params:
            return scope.params[key]
        if key in scope.values and allow_values:
            return ValueRef(scope.values[key])
        diags.error("E0202", f"unknown name '{key}'", e.span, suggestion=did_you_mean(key, scope.known()))
        return INVALID
    if isinstance(e, ast.ListExpr):
        items = [evaluate(i, scope, diags, allow_values=allow_values) for i in e.items]
        return INVALID if any(i is INVALID for i in items) else items
    if isinstance(e, ast.Neg):
        v = evaluate(e.operand, scope, diags, allow_values=False)
        if v is INVALID:
            return v
        if not _number(v):
            diags.error("E0306", f"cannot negate {_describe(v)}", e.span)
            return INVALID
        return -v
    if isinstance(e, ast.BinOp):
        a = evaluate(e.left, scope, diags, allow_values=False)
        b = evaluate(e.right, scope, diags, allow_values=False)
        if a is INVALID or b is INVALID:
            return INVALID
        if not (_number(a) and _number(b)):
            diags.error("E0306", f"'{e.op}' needs numbers, got {_describe(a)} and {_describe(b)}", e.span)
            return INVALID
        if e.op in ("/", "//") and b == 0:
            diags.error("E0307", "division by zero", e.span)
            return INVALID
        try:
            v = _arith(e.op, a, b)
        except OverflowError:
            v = math.inf
        if isinstance(v, float) and not math.isfinite(v) or isinstance(v, int) and abs(v) >= MAX_INT:
            diags.error("E0314", f"'{e.op}' gives a value out of range (integers stay below 10**18, numbers "
                                 "finite)", e.span)
            return INVALID
        return v
    if isinstance(e, ast.Call):
        diags.error("E0306", f"a call to '{e.func.text}' is not allowed in a value here", e.span)
        return INVALID
    raise TypeError(e)  # pragma: no cover


MAX_INT = 10**18  # as for integer literals (rpn2c.syntax.parser.MAX_INT_DIGITS)


def _arith(op: str, a, b):
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "//":
        return a // b
    if isinstance(a, int) and isinstance(b, int) and a % b == 0:
        return a // b
    return a / b


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _describe(v) -> str:
    if isinstance(v, ValueRef):
        return f"the value '{v.name}'"
    return f"{type(v).__name__} {v!r}"
