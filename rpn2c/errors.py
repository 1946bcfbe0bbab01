"""Diagnostics: one error type with source spans, collected across a whole pass.

Every stage reports problems as :class:`Diagnostic` records (code, message, span, notes, suggestion).
A stage collects them in a :class:`Diagnostics` bag and raises one :class:`SpecError` subclass holding all of
them, sorted by position, so a user sees every error in a file at once (miniwdl style).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Iterable, Sequence


@dataclass(frozen=True, order=True)
class Span:
    """A half-open source range; lines and columns are 1-based."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


UNKNOWN_SPAN = Span("<unknown>", 0, 0, 0, 0)


@dataclass(frozen=True)
class Diagnostic:
    """One located problem. ``code`` is a stable identifier such as ``E0201``."""

    code: str
    message: str
    span: Span
    notes: tuple[tuple[Span, str], ...] = ()
    suggestion: str | None = None
    severity: str = "error"

    @property
    def kind(self) -> str:
        return CODE_KINDS.get(self.code[:3], "spec")


# Code ranges: E01xx syntax, E02xx names, E03xx types/hyper-parameters, E04xx shapes, E05xx graph/imports,
# E06xx resource budgets.
CODE_KINDS = {"E01": "syntax", "E02": "name", "E03": "type", "E04": "shape", "E05": "graph", "E06": "resource"}


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate to ``name`` (difflib ratio >= 0.6), formatted as a hint."""
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


class SpecError(Exception):
    """A spec could not be compiled. ``diagnostics`` holds every located problem found."""

    def __init__(self, diagnostics: Sequence[Diagnostic], sources: dict[str, str] | None = None):
        # one diagnostic per (code, span, message): a block inlined twice reports its mistake once
        unique = {(d.code, d.span, d.message): d for d in reversed(list(diagnostics))}
        self.diagnostics = tuple(sorted(unique.values(), key=lambda d: (d.span.file, d.span.line, d.span.col, d.code)))
        self.sources = dict(sources or {})
        super().__init__(self.render(color=False))

    def render(self, color: bool = False) -> str:
        return "\n".join(render_diagnostic(d, self.sources, color) for d in self.diagnostics)

    def to_json(self) -> list[dict]:
        """The diagnostics as plain data: code, kind, message, file, line, col, end (line, col), help, notes."""
        return [{"code": d.code, "kind": d.kind, "severity": d.severity, "message": d.message,
                 "file": d.span.file, "line": d.span.line, "col": d.span.col,
                 "end": {"line": d.span.end_line, "col": d.span.end_col}, "help": d.suggestion,
                 "notes": [{"file": s.file, "line": s.line, "col": s.col, "message": m} for s, m in d.notes]}
                for d in self.diagnostics]

    @property
    def codes(self) -> list[str]:
        return [d.code for d in self.diagnostics]


class SpecSyntaxError(SpecError):
    """The text does not parse."""


class SpecNameError(SpecError):
    """An unknown or duplicate name (component, value, block, import, parameter)."""


class SpecTypeError(SpecError):
    """A bad hyper-parameter, a wrong kind of value or a component used in the wrong slot."""


class SpecShapeError(SpecError):
    """Shapes that cannot agree."""


class SpecGraphError(SpecError):
    """Cycles, missing returns, import problems, unused inputs."""


class SpecResourceError(SpecError):
    """A spec whose parameters, activation memory or check work exceed the budgets."""


_CLASS_BY_KIND = {
    "syntax": SpecSyntaxError,
    "name": SpecNameError,
    "type": SpecTypeError,
    "shape": SpecShapeError,
    "graph": SpecGraphError,
    "resource": SpecResourceError,
}


def error_for(diagnostics: Sequence[Diagnostic], sources: dict[str, str] | None = None) -> SpecError:
    """The most specific SpecError subclass for a set of diagnostics (the first one's kind)."""
    ordered = sorted(diagnostics, key=lambda d: (d.span.file, d.span.line, d.span.col))
    cls = _CLASS_BY_KIND.get(ordered[0].kind, SpecError) if ordered else SpecError
    return cls(diagnostics, sources)


@dataclass
class Diagnostics:
    """A bag that collects diagnostics during one pass; :meth:`raise_if_any` ends the pass."""

    sources: dict[str, str] = field(default_factory=dict)
    items: list[Diagnostic] = field(default_factory=list)

    def error(self, code: str, message: str, span: Span, *, notes=(), suggestion: str | None = None) -> None:
        self.items.append(Diagnostic(code, message, span, tuple(notes), suggestion))

    def extend(self, other: Iterable[Diagnostic]) -> None:
        self.items.extend(other)

    def __bool__(self) -> bool:
        return bool(self.items)

    def raise_if_any(self) -> None:
        if self.items:
            raise error_for(self.items, self.sources)


def _line(sources: dict[str, str], span: Span) -> str | None:
    text = sources.get(span.file)
    if text is None or span.line < 1:
        return None
    lines = text.splitlines()
    return lines[span.line - 1] if span.line <= len(lines) else ""


def render_diagnostic(d: Diagnostic, sources: dict[str, str], color: bool = False) -> str:
    """``file:line:col: error[CODE]: message``, the source line, a caret under the span, notes and hints."""
    red, bold, cyan, reset = ("\x1b[31m", "\x1b[1m", "\x1b[36m", "\x1b[0m") if color else ("",) * 4
    out = [f"{bold}{d.span}: {red}{d.severity}[{d.code}]{reset}{bold}: {d.message}{reset}"]
    out += _excerpt(sources, d.span, red, reset)
    for span, note in d.notes:
        out.append(f"{cyan}note{reset}: {span}: {note}")
        out += _excerpt(sources, span, cyan, reset)
    if d.suggestion:
        out.append(f"{cyan}help{reset}: {d.suggestion}")
    return "\n".join(out)


def _excerpt(sources: dict[str, str], span: Span, color: str, reset: str) -> list[str]:
    src = _line(sources, span)
    if src is None:
        return []
    src = src.rstrip()
    start = max(span.col, 1)
    end = span.end_col if span.end_line == span.line and span.end_col > span.col else len(src) + 1
    width = max(1, min(end, len(src) + 1) - start)
    gutter = f"{span.line:>4} | "
    return [gutter + src, " " * (len(gutter) + start - 1) + color + "^" * width + reset]
