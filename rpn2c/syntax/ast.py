"""The abstract syntax tree of a `.rpn` file.

Plain frozen dataclasses, one per construct. Every node carries its source ``span``; spans are excluded from
equality, so ``parse(fmt(p)) == p`` compares programs, not positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from rpn2c.errors import UNKNOWN_SPAN, Span


def _span() -> Span:
    return field(default=UNKNOWN_SPAN, compare=False, repr=False)


# ----------------------------------------------------------------------------------------------- expressions
@dataclass(frozen=True)
class Literal:
    """An int, float, string, bool or ``none``."""

    value: int | float | str | bool | None
    span: Span = _span()


@dataclass(frozen=True)
class Name:
    """A (possibly dotted) reference: a parameter, a value, a component or ``alias.block``."""

    parts: tuple[str, ...]
    span: Span = _span()

    @property
    def text(self) -> str:
        return ".".join(self.parts)


@dataclass(frozen=True)
class Kwarg:
    name: str
    value: "Expr"
    span: Span = _span()


@dataclass(frozen=True)
class Call:
    """``f(a, k = v)``: a component with hyper-parameters, an operation, or a block instantiation."""

    func: Name
    args: tuple["Expr", ...] = ()
    kwargs: tuple[Kwarg, ...] = ()
    span: Span = _span()


@dataclass(frozen=True)
class ListExpr:
    items: tuple["Expr", ...]
    span: Span = _span()


@dataclass(frozen=True)
class BinOp:
    """Integer/float arithmetic on hyper-parameters: ``+ - * / // % **``."""

    op: str
    left: "Expr"
    right: "Expr"
    span: Span = _span()


@dataclass(frozen=True)
class Neg:
    operand: "Expr"
    span: Span = _span()


@dataclass(frozen=True)
class Index:
    """``xs[k]``: item k of a list hyper-parameter (negative k counts from the end)."""

    target: "Expr"
    index: "Expr"
    span: Span = _span()


Expr = Union[Literal, Name, Call, ListExpr, BinOp, Neg, Index]


# ----------------------------------------------------------------------------------------------- statements
@dataclass(frozen=True)
class Setting:
    """``key = value`` inside a head, layer or compress body."""

    key: str
    value: Expr
    span: Span = _span()


@dataclass(frozen=True)
class HeadDecl:
    """``head name { settings }`` inside a ``layer``."""

    name: str
    settings: tuple[Setting, ...]
    span: Span = _span()


@dataclass(frozen=True)
class HeadExpr:
    """``head(x, context = y) { ... }`` (one RPN 2 head, or ``heads = H`` copies) or ``compress(x) { ... }``."""

    kind: str  # "head" | "compress"
    args: tuple[Expr, ...]
    kwargs: tuple[Kwarg, ...]
    settings: tuple[Setting, ...]
    span: Span = _span()


@dataclass(frozen=True)
class LayerExpr:
    """``layer(x) { head a {...} head b {...} fusion = ... }``: several different heads fused."""

    args: tuple[Expr, ...]
    kwargs: tuple[Kwarg, ...]
    heads: tuple[HeadDecl, ...]
    settings: tuple[Setting, ...]
    span: Span = _span()


@dataclass(frozen=True)
class RepeatExpr:
    """``repeat(n) block(x, ...)``: n chained instances, each feeding its output to the next one's first input."""

    count: Expr
    call: Call
    span: Span = _span()
    kwargs: tuple[Kwarg, ...] = ()  # ``repeat(n, tie = true)``: the instances after the first use the first's weights;
    #                                 ``repeat(n, index = i)``: the call's parameters read i = 0 … n − 1


Value = Union[HeadExpr, LayerExpr, RepeatExpr, Expr]


@dataclass(frozen=True)
class TensorTypeExpr:
    """``image[B, 1, 28, 28]``: a type constructor and its dimensions."""

    kind: str
    dims: tuple[Expr, ...]
    span: Span = _span()


@dataclass(frozen=True)
class Input:
    name: str
    type: TensorTypeExpr | None
    span: Span = _span()


@dataclass(frozen=True)
class ParamDecl:
    """``param pos: sequence[1, 16, 32] = normal(std = 0.02)``: a free learnable tensor (not a head's ψ)."""

    name: str
    type: TensorTypeExpr
    init: Expr | None
    span: Span = _span()


@dataclass(frozen=True)
class Assign:
    name: str
    value: Value
    span: Span = _span()


@dataclass(frozen=True)
class Return:
    names: tuple[str, ...]
    span: Span = _span()
    name_spans: tuple[Span, ...] = field(default=(), compare=False, repr=False)


Statement = Union[Input, ParamDecl, Assign, Return]


@dataclass(frozen=True)
class Param:
    name: str
    default: Expr | None
    span: Span = _span()


@dataclass(frozen=True)
class Definition:
    """``model name(params) { ... }`` or ``block name(params) { ... }``."""

    kind: str  # "model" | "block"
    name: str
    params: tuple[Param, ...]
    body: tuple[Statement, ...]
    span: Span = _span()
    end_line: int = field(default=0, compare=False, repr=False)


@dataclass(frozen=True)
class Import:
    path: str
    alias: str
    span: Span = _span()


@dataclass(frozen=True)
class Comment:
    line: int
    col: int
    text: str


@dataclass(frozen=True)
class Program:
    """One parsed file."""

    imports: tuple[Import, ...]
    definitions: tuple[Definition, ...]
    file: str = field(default="<string>", compare=False)
    comments: tuple[Comment, ...] = field(default=(), compare=False, repr=False)

    def definition(self, name: str) -> Definition | None:
        return next((d for d in self.definitions if d.name == name), None)
