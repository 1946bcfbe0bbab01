"""What each name of a spec is, in one pass over the grammar's tokens: a model or block (declared or called), a
parameter or value of its definition (declared or used), an import alias and the blocks reached through it, a
component, a setting, a hyper-parameter or keyword argument (and whose), a tensor type and its dimensions, a layer's
head. Rename, semantic tokens and workspace symbols read it; like :mod:`rpn2c.runtime.editor` it works on
half-written text.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import lark

from rpn2c.ir.types import TYPE_CONSTRUCTORS
from rpn2c.runtime import editor
from rpn2c.syntax.parser import _parser

_OPEN, _CLOSE = ("LPAR", "LBRACE", "LSQB"), ("RPAR", "RBRACE", "RSQB")
_HEAD_WORDS = ("HEAD", "COMPRESS", "RECURRENT", "LAYER", "REPEAT")


@functools.lru_cache(maxsize=1)
def keywords() -> frozenset[str]:
    """The grammar's keywords (``model``, ``head``, ``true``, ...), read from its terminals."""
    return frozenset(t.pattern.value for t in _parser().terminals
                     if t.pattern.type == "str" and t.pattern.value.isidentifier())


@dataclass(frozen=True)
class Role:
    """A name token's role. ``kind``: model | block | parameter | value | module | imported block | argument |
    hyper-parameter | setting | component | type | dimension | head | unknown. ``scope``: the token index of the
    ``model``/``block`` keyword of the definition a parameter or value belongs to; ``owner``: the call a key is
    written in (``argument``: a block's name, dotted when imported; ``hyper-parameter``: a component's) or the
    alias an imported block is reached through."""

    kind: str
    declaration: bool = False
    scope: int | None = None
    owner: str | None = None


@dataclass
class Names:
    """The tokens of a text, the role of each name token (by index) and the outline."""

    tokens: list[lark.Token]
    roles: dict[int, Role]
    outline: editor.Outline
    definitions: dict[int, tuple[str, str, int]]  # keyword index -> (kind, name, end token index)

    def at(self, text: str, line: int, col: int) -> int | None:
        """The index of the token under ``(line, col)`` (0-based)."""
        return editor._at(self.tokens, editor.offset_of(text, line, col))


def names(text: str) -> Names:
    """Every name token's :class:`Role`."""
    toks = editor.tokens(text)
    here = editor.outline(text)
    definitions = _definitions(toks)
    bindings = {start: _bindings(toks, start, end) for start, (_, _, end) in definitions.items()}
    roles: dict[int, Role] = {}
    stack: list[tuple[str, str | None]] = []  # open brackets: (type, the call or "type" or "params")
    scope = None
    for i, t in enumerate(toks):
        if t.type in ("MODEL", "BLOCK") and not stack:
            scope = i
        if t.type in _OPEN:
            stack.append((t.type, _opener(toks, i)))
        elif t.type in _CLOSE:
            if stack:
                stack.pop()
            if not stack:
                scope = None if t.type == "RBRACE" else scope
        elif t.type == "NAME":
            roles[i] = _role(toks, i, stack, scope, bindings.get(scope, {}), here)
    return Names(toks, roles, here, definitions)


def _opener(toks: list[lark.Token], i: int) -> str | None:
    prev = toks[i - 1] if i else None
    if prev is None:
        return None
    if toks[i].type == "LSQB":
        return "type" if prev.type == "NAME" and str(prev) in TYPE_CONSTRUCTORS else None
    if toks[i].type == "LBRACE":
        return None
    if prev.type in _HEAD_WORDS:
        return str(prev)
    func, j = editor._dotted_before(toks, i - 1)
    if func is not None and j >= 1 and toks[j - 1].type in ("MODEL", "BLOCK"):
        return "params"
    return func


def _definitions(toks: list[lark.Token]) -> dict[int, tuple[str, str, int]]:
    """Each top-level ``model``/``block`` keyword's index: its kind, name and the index past its closing brace."""
    out, depth = {}, 0
    start = None
    for i, t in enumerate(toks):
        if depth == 0 and t.type in ("MODEL", "BLOCK") and i + 1 < len(toks) and toks[i + 1].type == "NAME":
            start = i
            out[i] = (str(t), str(toks[i + 1]), len(toks))
        depth += t.type in _OPEN
        depth -= t.type in _CLOSE
        depth = max(depth, 0)
        if depth == 0 and t.type == "RBRACE" and start is not None:
            out[start] = (*out[start][:2], i + 1)
            start = None
    return out


def _bindings(toks: list[lark.Token], start: int, end: int) -> dict[str, tuple[int, str]]:
    """The names a definition binds: name -> (token index, "parameter" or "value"); the first binding wins."""
    out: dict[str, tuple[int, str]] = {}
    depth, in_params = 0, False
    for k in range(start, end):
        t = toks[k]
        if t.type == "NAME" and depth == 1:
            prev, nxt = toks[k - 1].type, toks[k + 1].type if k + 1 < end else None
            if in_params and prev in ("LPAR", "COMMA"):
                out.setdefault(str(t), (k, "parameter"))
            elif not in_params and (prev in ("INPUT", "PARAM") or (nxt == "EQUAL" and prev != "DOT")):
                out.setdefault(str(t), (k, "value"))
        if t.type in _OPEN:
            depth += 1
            in_params = in_params or (depth == 1 and t.type == "LPAR" and k == start + 2)
        elif t.type in _CLOSE:
            depth -= 1
            in_params = in_params and depth > 0
    return out


def _role(toks, i: int, stack, scope: int | None, bound: dict, here: editor.Outline) -> Role:
    name = str(toks[i])
    prev = toks[i - 1].type if i else None
    nxt = toks[i + 1].type if i + 1 < len(toks) else None
    if prev in ("MODEL", "BLOCK") and not stack:
        return Role(prev.lower(), True)
    if prev == "AS":
        return Role("module", True, owner=name)
    if prev == "DOT":
        alias = toks[i - 2] if i >= 2 else None
        if alias is not None and alias.type == "NAME" and str(alias) in here.imports and (
                i < 3 or toks[i - 3].type != "DOT"):
            return Role("imported block", owner=str(alias))
        return Role("unknown")
    if nxt == "DOT" and name in here.imports:
        return Role("module", owner=name)
    if prev == "HEAD" and nxt == "LBRACE":
        return Role("head")
    binding = bound.get(name)
    if binding is not None and binding[0] == i:
        return Role(binding[1], True, scope)
    top, func = stack[-1] if stack else (None, None)
    if nxt == "EQUAL":
        if top == "LPAR" and func not in (None, "params", *(w.lower() for w in _HEAD_WORDS)):
            if editor._block(func, here, None) is not None or "." in func:
                return Role("argument", owner=func)
            return Role("hyper-parameter", owner=func)
        return Role("setting")
    if nxt == "LPAR":
        if name in here.definitions:
            return Role(here.definitions[name].kind)
        return Role("component" if editor.component(name) is not None else "unknown")
    if nxt == "LSQB" and name in TYPE_CONSTRUCTORS:
        return Role("type")
    if binding is not None:
        return Role(binding[1], False, scope)
    if any(f == "type" for _, f in stack):
        return Role("dimension")
    return Role("component" if editor.component(name) is not None else "unknown")
