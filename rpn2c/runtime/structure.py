"""The shape of a spec for an editor's display: semantic tokens (every token coloured by what it is, from
:mod:`rpn2c.runtime.roles`: a block's call apart from a component's, a parameter apart from a value) and folding
ranges (bodies, calls and lists over several lines, runs of comments and of imports). Token types and modifiers
are the LSP's standard names (the server's legend, :data:`rpn2c.runtime.lsp.SEMANTIC_LEGEND`).

Positions are 0-based ``(line, column)`` in characters, as in :mod:`rpn2c.runtime.editor`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rpn2c.runtime import editor
from rpn2c.runtime.roles import keywords, names

_BY_ROLE = {"model": "class", "block": "function", "imported block": "function", "parameter": "parameter",
            "argument": "parameter", "value": "variable", "module": "namespace", "hyper-parameter": "property",
            "setting": "property", "head": "property", "component": "function", "type": "type",
            "dimension": "typeParameter"}
_BY_TOKEN = {"STRING": "string", "INT": "number", "FLOAT": "number", "PLUS": "operator", "MINUS": "operator",
             "STAR": "operator", "SLASH": "operator", "DSLASH": "operator", "PERCENT": "operator",
             "POW": "operator"}
_COMMENT = re.compile(r"#[^\n]*")


@dataclass(frozen=True)
class SemanticToken:
    line: int
    col: int
    length: int
    type: str
    modifiers: tuple[str, ...] = ()


def comments(text: str, toks) -> list[tuple[int, int]]:
    """``(start, end)`` offsets of each comment: a ``#`` in the space between two tokens runs to the line's end."""
    out, pos = [], 0
    for t in [*toks, None]:
        gap_end = t.start_pos if t is not None else len(text)
        out += [(m.start(), m.end()) for m in _COMMENT.finditer(text, pos, gap_end)]
        if t is not None:
            pos = t.end_pos
    return out


def semantic_tokens(text: str) -> list[SemanticToken]:
    """Every token with a colour of its own, in text order (names the checker does not know are left out)."""
    n = names(text)
    words = keywords()
    out = []
    for i, t in enumerate(n.tokens):
        role = n.roles.get(i)
        if role is not None:
            kind = _BY_ROLE.get(role.kind)
            modifiers = (("declaration",) if role.declaration else ()) + (
                ("defaultLibrary",) if role.kind == "component" else ())
        else:
            kind, modifiers = ("keyword" if str(t) in words else _BY_TOKEN.get(t.type)), ()
        if kind is not None:
            out.append(SemanticToken(t.line - 1, t.column - 1, len(t), kind, modifiers))
    starts = _line_starts(text)
    for a, b in comments(text, n.tokens):
        line = _line_of(starts, a)
        out.append(SemanticToken(line, a - starts[line], b - a, "comment"))
    return sorted(out, key=lambda s: (s.line, s.col))


def _line_starts(text: str) -> list[int]:
    return [0] + [m.end() for m in re.finditer("\n", text)]


def _line_of(starts: list[int], offset: int) -> int:
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ------------------------------------------------------------------------------------------------ folding
@dataclass(frozen=True)
class Fold:
    start: int
    end: int
    kind: str | None = None  # "comment" | "imports" | None (code)


def folding_ranges(text: str) -> list[Fold]:
    """Brackets whose contents span lines (the closing line stays shown when it holds only the bracket), runs of
    two or more comment lines, and of import lines."""
    toks = editor.tokens(text)
    lines = text.split("\n")
    out: set[Fold] = set()
    stack = []
    for t in toks:
        if t.type in ("LPAR", "LBRACE", "LSQB"):
            stack.append(t)
        elif t.type in ("RPAR", "RBRACE", "RSQB") and stack:
            opened = stack.pop()
            start, close = opened.line - 1, t.line - 1
            end = close - 1 if lines[close][:t.column - 1].strip() == "" else close
            if end > start:
                out.add(Fold(start, end))
    starts = _line_starts(text)
    comment_lines = {_line_of(starts, a) for a, _ in comments(text, toks)
                     if lines[_line_of(starts, a)].lstrip().startswith("#")}
    import_lines = {t.line - 1 for t in toks if t.type == "IMPORT"}
    for found, kind in ((comment_lines, "comment"), (import_lines, "imports")):
        for start in sorted(k for k in found if k - 1 not in found):
            end = start
            while end + 1 in found:
                end += 1
            if end > start:
                out.add(Fold(start, end, kind))
    return sorted(out, key=lambda f: (f.start, f.end, f.kind or ""))
