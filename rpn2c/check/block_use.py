"""Notes that say which use of a block an error inside it came from: a block used twice (``pool(x, d = 2)`` and
``pool(a, d = 8)``) is checked once per use, and an error in its body is located in the block, so the note points
at the call (with its parameters) that caused it."""

from __future__ import annotations

import dataclasses

from rpn2c.errors import Diagnostics, Span
from rpn2c.syntax import ast


def note_use(diags: Diagnostics, first: int, defn: ast.Definition, call: ast.Call) -> None:
    """Errors found inside this use of block ``defn`` (``diags.items[first:]``, those outside the call itself)
    get a note at ``call``: "in this use of block 'pool' (d = 8)". Nested uses add one note each, innermost
    first."""
    given = ", ".join(f"{kw.name} = {_source(diags.sources, kw.value.span)}" for kw in call.kwargs)
    note = (call.span, f"in this use of block '{defn.name}'" + (f" ({given})" if given else ""))
    items = diags.items
    for i in range(first, len(items)):
        if not _within(items[i].span, call.span):
            items[i] = dataclasses.replace(items[i], notes=(*items[i].notes, note))


def _within(inner: Span, outer: Span) -> bool:
    """Whether ``inner`` lies inside ``outer`` (same file)."""
    return (inner.file == outer.file and (inner.line, inner.col) >= (outer.line, outer.col)
            and (inner.end_line, inner.end_col) <= (outer.end_line, outer.end_col))


def _source(sources: dict[str, str], span: Span) -> str:
    """The source text of a one-line ``span`` ('...' when it spans lines or its file is unknown)."""
    lines = sources.get(span.file, "").splitlines()
    if span.line != span.end_line or not 0 < span.line <= len(lines):
        return "..."
    return lines[span.line - 1][span.col - 1:span.end_col - 1]
