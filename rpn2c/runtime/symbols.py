"""The structure of a spec for an editor: the outline (models, blocks, their parameters, inputs, values and a
layer's heads), every reference to a name, and the signature of the call being written with its active parameter.

Positions are 0-based ``(line, column)`` in characters, as in :mod:`rpn2c.runtime.editor`. References and
signatures read the token stream, so they work on half-written text; the outline reads the syntax tree (or, when
the text does not parse, the definitions the token stream shows).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rpn2c.errors import SpecError, Span
from rpn2c.runtime import editor
from rpn2c.runtime.docgen import type_text
from rpn2c.syntax import ast
from rpn2c.syntax.parser import parse

Range = tuple[int, int, int, int]  # line, col, end line, end col (0-based, end exclusive)


# ------------------------------------------------------------------------------------------------ outline
@dataclass
class Symbol:
    name: str
    kind: str  # model | block | parameter | input | head | compress | recurrent | layer | op | block use | ...
    range: Range
    selection: Range
    detail: str = ""
    children: list[Symbol] = field(default_factory=list)


def _span_range(span: Span, lines: list[str]) -> Range:
    end_line = max(span.end_line, span.line) - 1
    end_col = span.end_col - 1 if span.end_line >= span.line else len(lines[end_line]) if end_line < len(lines) else 0
    return span.line - 1, span.col - 1, end_line, end_col


def _name_range(span: Span, name: str, lines: list[str], after: str = "") -> Range:
    """The range of ``name`` at or after ``span``'s start (past the keyword ``after``)."""
    line = span.line - 1
    text = lines[line] if line < len(lines) else ""
    col = text.find(name, span.col - 1 + len(after))
    col = span.col - 1 if col < 0 else col
    return line, col, line, col + len(name)


def _value_kind(v) -> str:
    if isinstance(v, ast.HeadExpr):
        return v.kind
    if isinstance(v, ast.LayerExpr):
        return "layer"
    if isinstance(v, ast.RepeatExpr):
        return "repeat"
    if isinstance(v, ast.Name):
        return "alias"
    if isinstance(v, ast.Call):
        return "call"
    return "value"  # a literal or arithmetic the checker refuses: still outlined while it is being typed


def document_symbols(text: str, file: str = "<string>", types: dict[tuple[int, int], str] | None = None
                     ) -> list[Symbol]:
    """Models and blocks with their parameters, inputs and values (a layer's heads below it); ``types`` maps a
    value's name position to its inferred type, shown as the detail."""
    types = types or {}
    lines = text.splitlines()
    try:
        program = parse(text, file)
    except SpecError:
        return [Symbol(d.name, d.kind, (d.line, 0, d.line, len(lines[d.line]) if d.line < len(lines) else 0),
                       (d.line, d.col, d.line, d.col + len(d.name)), d.signature())
                for d in editor.outline(text).definitions.values()]
    out = []
    for d in program.definitions:
        end_line = max(d.end_line, d.span.line) - 1
        whole = (d.span.line - 1, d.span.col - 1, end_line, len(lines[end_line]) if end_line < len(lines) else 0)
        sym = Symbol(d.name, d.kind, whole, _name_range(d.span, d.name, lines, d.kind), d.kind)
        for p in d.params:
            r = _span_range(p.span, lines)
            sym.children.append(Symbol(p.name, "parameter", r, (r[0], r[1], r[0], r[1] + len(p.name)),
                                       "parameter"))
        for stmt in d.body:
            if isinstance(stmt, ast.Input):
                sel = _name_range(stmt.span, stmt.name, lines, "input")
                kind = "input"
            elif isinstance(stmt, ast.Assign):
                sel = _name_range(stmt.span, stmt.name, lines)
                kind = _value_kind(stmt.value)
                if kind == "call":
                    func = stmt.value.func.text
                    kind = "block use" if func in {x.name for x in program.definitions} or "." in func else "op"
            else:
                continue
            detail = types.get((sel[0], sel[1]), "")
            child = Symbol(stmt.name, kind, _span_range(stmt.span, lines), sel, f"{kind} {detail}".strip())
            for h in getattr(stmt.value, "heads", ()) if isinstance(stmt, ast.Assign) else ():
                r = _span_range(h.span, lines)
                child.children.append(Symbol(h.name, "head", r, _name_range(h.span, h.name, lines, "head"), "head"))
            sym.children.append(child)
        out.append(sym)
    return out


# ------------------------------------------------------------------------------------------------ references
def references(text: str, line: int, col: int, include_declaration: bool = True) -> list[Range]:
    """Every place the name under ``(line, col)`` is written: a value or parameter within its definition, a model
    or block (its declaration and calls), an import alias, a component (each use); in text order."""
    toks = editor.tokens(text)
    i = editor._at(toks, editor.offset_of(text, line, col))
    if i is None or toks[i].type != "NAME" or (i and toks[i - 1].type == "DOT"):
        return []
    name = str(toks[i])

    def key(k: int) -> bool:  # a setting, hyper-parameter or keyword-argument name
        return k + 1 < len(toks) and toks[k + 1].type == "EQUAL"

    def dotted(k: int) -> bool:
        return k >= 1 and toks[k - 1].type == "DOT"

    def rng(t) -> Range:
        return t.line - 1, t.column - 1, t.end_line - 1, t.end_column - 1

    here = editor.outline(text)
    binding = editor._local_binding(toks, i)
    if binding is not None and not (name in here.definitions and not key(i) and (
            i + 1 < len(toks) and toks[i + 1].type == "LPAR")):
        start, end = _definition_extent(toks, i)
        decl = (binding.line, binding.col)
        out = [rng(t) for k, t in enumerate(toks[start:end], start) if t.type == "NAME" and str(t) == name
               and not dotted(k) and not (k + 1 < len(toks) and toks[k + 1].type in ("LPAR", "LSQB"))  # a call, a type
               and (not key(k) or (t.line - 1, t.column - 1) == decl)]
        return [r for r in out if include_declaration or (r[0], r[1]) != decl]
    if name in here.definitions:
        out = []
        for k, t in enumerate(toks):
            if t.type != "NAME" or str(t) != name or dotted(k):
                continue
            declaration = k >= 1 and toks[k - 1].type in ("MODEL", "BLOCK")
            call = k + 1 < len(toks) and toks[k + 1].type == "LPAR"
            if (declaration and include_declaration) or (call and not declaration):
                out.append(rng(t))
        return out
    if name in here.imports:
        return [rng(t) for k, t in enumerate(toks) if t.type == "NAME" and str(t) == name and not dotted(k) and (
            (k + 1 < len(toks) and toks[k + 1].type == "DOT") or (include_declaration and toks[k - 1].type == "AS"))]
    if editor.component(name) is not None and not key(i):
        return [rng(t) for k, t in enumerate(toks) if t.type == "NAME" and str(t) == name and not dotted(k)
                and not key(k)]
    return []


def _definition_extent(toks, i: int) -> tuple[int, int]:
    """Token indices ``[start, end)`` of the model or block around token ``i``."""
    start = max((k for k in range(i) if toks[k].type in ("MODEL", "BLOCK")), default=0)
    depth, k = 0, start
    while k < len(toks):
        depth += toks[k].type == "LBRACE"
        depth -= toks[k].type == "RBRACE"
        k += 1
        if depth == 0 and toks[k - 1].type == "RBRACE":
            break
    return start, k


# ------------------------------------------------------------------------------------------------ signatures
@dataclass(frozen=True)
class Signature:
    label: str
    documentation: str
    parameters: tuple[tuple[int, int, str], ...]  # (start, end) of each parameter in ``label``, its doc
    active: int | None


def signature_help(text: str, line: int, col: int, *, path=None) -> Signature | None:
    """The signature of the innermost call being written at ``(line, col)``: a component's hyper-parameters with
    their types and defaults (from the registry schema), or a block's parameters; the active parameter is the
    one whose value is being written, else the first not yet given."""
    offset = editor.offset_of(text, line, col)
    toks = editor.tokens(text)
    stop = editor._first_after(toks, offset)
    stack = editor._frames(toks, stop)
    if not stack or stack[-1].bracket != "(" or stack[-1].func in (None, *editor.HEAD_KINDS, "repeat", "(params)"):
        return None
    frame = stack[-1]
    block = editor._block(frame.func, editor.outline(text), path)
    if block is not None:
        d = block[0]
        params = [(p, f"{p} = {v}" if v else p, "") for p, v in d.params]
        head, doc = f"{d.kind} {d.name}(", f"`{d.signature()}`"
    else:
        families = editor._slot_families(stack[:-1])
        entry = editor.component(frame.func, families)
        if entry is None:
            return None
        inputs = []
        if entry.family in editor.OP_FAMILIES:  # an operation on values: its inputs come first
            lo, _ = entry.cls.arity
            inputs = [(f"x{k + 1}", f"x{k + 1}", "input value") for k in range(min(max(lo, 1), 3))]
        params = inputs + [(k, f"{k}: {type_text(f.annotation)} = {editor._default(f)}", f.description or "")
                           for k, f in entry.schema.model_fields.items()]
        head, doc = f"{entry.name}(", f"{entry.family}: {entry.doc}"
    label, spans = head, []
    for k, (_, text_, pdoc) in enumerate(params):
        if k:
            label += ", "
        spans.append((len(label), len(label) + len(text_), pdoc))
        label += text_
    label += ")"
    names = [p for p, _, _ in params]
    active = None
    if frame.key in names:
        active = names.index(frame.key)
    else:
        commas = sum(1 for k in range(_open_paren(toks, stop), stop) if toks[k].type == "COMMA" and _depth_one(
            toks, _open_paren(toks, stop), k))
        given = set(frame.keys)
        positional = [k for k, p in enumerate(names) if p.startswith("x") and p[1:].isdigit()]
        if commas < len(positional) and not frame.keys:
            active = positional[commas]
        else:
            active = next((k for k, p in enumerate(names) if p not in given and k not in positional), None)
    return Signature(label, doc, tuple(spans), active)


def _open_paren(toks, stop: int) -> int:
    depth = 0
    for k in range(stop - 1, -1, -1):
        depth += toks[k].type in ("RPAR", "RSQB", "RBRACE")
        depth -= toks[k].type in ("LPAR", "LSQB", "LBRACE")
        if depth < 0:
            return k
    return 0


def _depth_one(toks, start: int, k: int) -> bool:
    depth = 0
    for t in toks[start:k]:
        depth += t.type in ("LPAR", "LSQB", "LBRACE")
        depth -= t.type in ("RPAR", "RSQB", "RBRACE")
    return depth == 1
