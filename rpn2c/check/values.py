"""Evaluate hyper-parameter expressions: literals, arithmetic on block parameters (``+ - * / // % **``), lists and
their items (``depths[2]``), ``min``/``max`` of numbers and ``len`` of a list, value names."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rpn2c.components.registry import ValueRef
from rpn2c.errors import Diagnostics, did_you_mean
from rpn2c.syntax import ast
from rpn2c.syntax.format import format_expr


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
        if e.op in ("/", "//", "%") and b == 0:
            diags.error("E0307", "division by zero", e.span)
            return INVALID
        if e.op == "**" and (b < 0 and a == 0):
            diags.error("E0307", "division by zero (0 to a negative power)", e.span)
            return INVALID
        if e.op == "**" and a < 0 and not float(b).is_integer():
            diags.error("E0314", f"'**' gives a value out of range (a negative number to the fractional power {b} "
                                 "has no real value)", e.span)
            return INVALID
        try:
            v = math.inf if e.op == "**" and _too_large(a, b) else _arith(e.op, a, b)
        except OverflowError:
            v = math.inf
        if isinstance(v, float) and not math.isfinite(v) or isinstance(v, int) and abs(v) >= MAX_INT:
            diags.error("E0314", f"'{e.op}' gives a value out of range (integers stay below 10**18, numbers "
                                 "finite)", e.span)
            return INVALID
        return v
    if isinstance(e, ast.Index):
        return _item(e, scope, diags)
    if isinstance(e, ast.Call):
        if e.func.text in BUILTINS:
            return _builtin(e, scope, diags)
        diags.error("E0306", f"a call to '{e.func.text}' is not allowed in a value here", e.span)
        return INVALID
    raise TypeError(e)  # pragma: no cover


BUILTINS = {"min": min, "max": max, "len": len}  # the functions a hyper-parameter expression may call


def _builtin(e: ast.Call, scope: Scope, diags: Diagnostics):
    """``min(a, b, …)`` / ``max(a, b, …)`` of one or more numbers; ``len(xs)``: a list's number of items."""
    args = [evaluate(a, scope, diags, allow_values=False) for a in e.args]
    if any(a is INVALID for a in args):
        return INVALID
    if e.func.text == "len":
        fits, what = len(args) == 1 and isinstance(args[0], list), "one list"
    else:
        fits, what = bool(args) and all(_number(a) for a in args), "one or more numbers"
    if e.kwargs or not fits:
        got = ", ".join([*(_describe(a) for a in args), *(f"{k.name} = …" for k in e.kwargs)]) or "nothing"
        diags.error("E0359", f"'{e.func.text}' takes {what}, got {got}", e.span)
        return INVALID
    return BUILTINS[e.func.text](args[0] if e.func.text == "len" else args)


def _item(e: ast.Index, scope: Scope, diags: Diagnostics):
    """``xs[k]``: item k of a list (k < 0 counts from the end)."""
    xs = evaluate(e.target, scope, diags, allow_values=False)
    k = evaluate(e.index, scope, diags, allow_values=False)
    if xs is INVALID or k is INVALID:
        return INVALID
    if not isinstance(xs, list) or not isinstance(k, int) or isinstance(k, bool):
        diags.error("E0357", f"'[ ]' takes an item of a list by an integer, got {_describe(xs)} and {_describe(k)}",
                    e.span)
        return INVALID
    if not -len(xs) <= k < len(xs):
        diags.error("E0356", f"index {k} is outside the {len(xs)} items of {_text(e.target)}: it must lie in "
                             f"[{-len(xs)}, {len(xs) - 1}]", e.index.span)
        return INVALID
    return xs[k]


def _text(e) -> str:
    return f"'{format_expr(e)}'"


MAX_INT = 10**18  # as for integer literals (rpn2c.syntax.parser.MAX_INT_DIGITS)


def _too_large(a, b) -> bool:
    """Whether ``a ** b`` is past 10**18 (or a float's range), judged before computing it (2 ** 10**17 would
    take the checker's time, not its memory)."""
    if abs(a) <= 1 or b <= 0:
        return False
    return b * math.log10(abs(a)) > (18 if isinstance(a, int) and isinstance(b, int) else 308)


def _arith(op: str, a, b):
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "//":
        return a // b
    if op == "%":
        return a % b
    if op == "**":
        return a**b
    if isinstance(a, int) and isinstance(b, int) and a % b == 0:
        return a // b
    return a / b


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _describe(v) -> str:
    if isinstance(v, ValueRef):
        return f"the value '{v.name}'"
    return f"{type(v).__name__} {v!r}"
