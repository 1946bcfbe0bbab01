"""What an editor asks about a spec while it is being typed: every error, hover text, completions, definitions and
the canonical form. Plain Python over the real checker, the registry and the grammar's own lexer;
:mod:`rpn2c.runtime.lsp` serves it over the Language Server Protocol.

Positions are 0-based ``(line, column)`` pairs counted in characters. Completion, hover and definition read the
token stream rather than the syntax tree, so they work on the half-written text the parser refuses.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

import lark
from lark.exceptions import UnexpectedCharacters

import rpn2c.components  # noqa: F401  (registers every component)
from rpn2c.check.elaborate import OP_FAMILIES
from rpn2c.check.heads import DECL_KEYS, LAYER_KEYS, SINGLE_HEAD_KEYS
from rpn2c.check.recurrent import RECURRENT_KEYS
from rpn2c.components.registry import FAMILIES, SLOT_FAMILIES, Entry, lookup, names
from rpn2c.errors import Diagnostic
from rpn2c.ir.types import TYPE_CONSTRUCTORS
from rpn2c.runtime.docgen import docstring, type_text, value_text
from rpn2c.syntax.format import format_program
from rpn2c.syntax.parser import _parser, parse

# the settings each kind of `{ ... }` body accepts (the checker's own tables)
SETTING_KEYS = {"head": SINGLE_HEAD_KEYS, "compress": SINGLE_HEAD_KEYS, "layer": LAYER_KEYS, "decl": DECL_KEYS,
                "recurrent": RECURRENT_KEYS}
HEAD_KINDS = ("head", "compress", "recurrent", "layer")
BODY_KEYWORDS = ("input", "return")
VALUE_KEYWORDS = ("head", "compress", "recurrent", "layer", "repeat")
TOP_KEYWORDS = ("import", "model", "block")
_VALUE_END = {"NAME", "INT", "FLOAT", "STRING", "RPAR", "RSQB", "RBRACE", "TRUE", "FALSE", "NONE"}
_KEYWORD_TYPES = {t.upper() for t in (*TOP_KEYWORDS, *BODY_KEYWORDS, *VALUE_KEYWORDS, "as", "true", "false", "none")}


# ------------------------------------------------------------------------------------------------ diagnostics
def check_text(text: str, file: str = "<string>", *, path: Path | None = None,
               root: Path | None = None) -> list[Diagnostic]:
    """Every diagnostic of ``text``: a parse error, or each model's checker errors in one list (a file of blocks
    only is checked for what the loader sees: imports and duplicate names); see :func:`rpn2c.runtime.analysis.analyse`."""
    from rpn2c.runtime.analysis import analyse

    return analyse(text, file, path=path, root=root).diagnostics


def format_text(text: str, file: str = "<string>") -> str:
    """The canonical form (what ``rpn2c fmt`` prints); raises :class:`rpn2c.SpecSyntaxError` when it does not parse."""
    return format_program(parse(text, file))


# ------------------------------------------------------------------------------------------------ tokens
def _lexer() -> lark.Lark:
    """The checker's own parser: its ``lex`` cuts text into the grammar's tokens without a second grammar build."""
    return _parser()


def tokens(text: str) -> list[lark.Token]:
    """The grammar's tokens (comments dropped); a character the grammar refuses is skipped, not fatal."""
    for _ in range(200):
        out: list[lark.Token] = []
        try:
            out.extend(_lexer().lex(text))
            return out
        except UnexpectedCharacters as exc:
            pos = exc.pos_in_stream
            text = text[:pos] + " " + text[pos + 1:]
    return out


@dataclass
class _Frame:
    """An open bracket: ``(`` of a call (``func``), ``{`` of a body (``kind``) or ``[``; ``key`` is the name of
    the setting or keyword argument being written in it."""

    bracket: str
    kind: str | None = None
    func: str | None = None
    key: str | None = None
    keys: list[str] = field(default_factory=list)


def _dotted_before(toks: list[lark.Token], i: int) -> tuple[str | None, int]:
    """The dotted name ending at token ``i`` and the index of its first token."""
    if i < 0 or toks[i].type != "NAME":
        return None, i
    j = i
    while j >= 2 and toks[j - 1].type == "DOT" and toks[j - 2].type == "NAME":
        j -= 2
    return ".".join(str(t) for t in toks[j:i + 1:2]), j


def _frames(toks: list[lark.Token], stop: int) -> list[_Frame]:
    """The stack of open brackets before token ``stop``."""
    stack: list[_Frame] = []
    closed: _Frame | None = None
    for i in range(stop):
        t = toks[i]
        prev = toks[i - 1] if i else None
        if t.type == "LPAR":
            func, j = _dotted_before(toks, i - 1)
            if prev is not None and prev.type in ("HEAD", "COMPRESS", "RECURRENT", "LAYER", "REPEAT"):
                func = str(prev)
            elif func is not None and j >= 1 and toks[j - 1].type in ("MODEL", "BLOCK"):
                func = "(params)"
            stack.append(_Frame("(", func=func))
        elif t.type == "LBRACE":
            kind = "body"
            if prev is not None and prev.type == "RPAR" and closed is not None and closed.func in HEAD_KINDS:
                kind = closed.func
            elif prev is not None and prev.type == "NAME" and i >= 2 and toks[i - 2].type == "HEAD":
                kind = "decl"
            stack.append(_Frame("{", kind=kind))
        elif t.type == "LSQB":
            stack.append(_Frame("["))
        elif t.type in ("RPAR", "RBRACE", "RSQB"):
            if stack:
                closed = stack.pop()
        elif t.type == "EQUAL" and stack and prev is not None and prev.type == "NAME" and (
                i < 2 or toks[i - 2].type != "DOT"):
            stack[-1].key = str(prev)
            stack[-1].keys.append(str(prev))
        elif t.type == "COMMA" and stack and stack[-1].bracket == "(":
            stack[-1].key = None
    return stack


def _at(toks: list[lark.Token], offset: int) -> int | None:
    """The index of the token under ``offset``; a token also owns the position right after its last character,
    and between two tokens a name wins."""
    found = None
    for i, t in enumerate(toks):
        if t.start_pos > offset:
            break
        if offset <= t.end_pos:
            if found is None or t.type == "NAME" or t.type in _KEYWORD_TYPES:
                found = i
    return found


def offset_of(text: str, line: int, col: int) -> int:
    """A 0-based (line, column) position as an index into ``text``."""
    lines = text.splitlines(keepends=True)
    return sum(len(ln) for ln in lines[:line]) + col


def _slot_families(stack: list[_Frame]) -> tuple[str, ...] | None:
    """The families allowed where the innermost open bracket sits, read from the enclosing setting."""
    for frame in reversed(stack):
        if frame.bracket == "{":
            if frame.kind in SETTING_KEYS and frame.key in SLOT_FAMILIES:
                return SLOT_FAMILIES[frame.key]
            return OP_FAMILIES if frame.kind == "body" else None
    return None


def component(name: str, families: tuple[str, ...] | None = None) -> Entry | None:
    """The registry entry of ``name`` in ``families`` if given and found, else in any family."""
    return (lookup(name, families) if families else None) or lookup(name, tuple(FAMILIES))


# ------------------------------------------------------------------------------------------------ outlines
@dataclass(frozen=True)
class Definition:
    """A ``model``/``block`` as the editor sees it: its name's position and its parameters with default text."""

    kind: str
    name: str
    line: int
    col: int
    params: tuple[tuple[str, str | None], ...]

    def signature(self) -> str:
        ps = ", ".join(p if d is None else f"{p} = {d}" for p, d in self.params)
        return f"{self.kind} {self.name}({ps})" if self.params else f"{self.kind} {self.name}"


@dataclass(frozen=True)
class Outline:
    definitions: dict[str, Definition]
    imports: dict[str, tuple[str, lark.Token]]  # alias -> (path text, path token)


def outline(text: str) -> Outline:
    toks = tokens(text)
    defs: dict[str, Definition] = {}
    imports: dict[str, tuple[str, lark.Token]] = {}
    for i, t in enumerate(toks):
        if t.type == "IMPORT" and i + 3 < len(toks) and toks[i + 1].type == "STRING" and toks[i + 3].type == "NAME":
            imports[str(toks[i + 3])] = (str(toks[i + 1])[1:-1], toks[i + 1])
        if t.type in ("MODEL", "BLOCK") and i + 1 < len(toks) and toks[i + 1].type == "NAME":
            name = toks[i + 1]
            params = []
            if i + 2 < len(toks) and toks[i + 2].type == "LPAR":
                params = _params(text, toks, i + 2)
            defs.setdefault(str(name), Definition(str(t), str(name), name.line - 1, name.column - 1, tuple(params)))
    return Outline(defs, imports)


def _params(text: str, toks: list[lark.Token], lpar: int) -> list[tuple[str, str | None]]:
    out, depth, j = [], 0, lpar
    while j < len(toks):
        t = toks[j]
        depth += t.type in ("LPAR", "LSQB")
        depth -= t.type in ("RPAR", "RSQB")
        if depth == 0:
            break
        if depth == 1 and t.type == "NAME" and toks[j - 1].type in ("LPAR", "COMMA"):
            default = None
            if j + 1 < len(toks) and toks[j + 1].type == "EQUAL":
                k, d = j + 2, 0
                while k < len(toks) and not (d == 0 and toks[k].type in ("COMMA", "RPAR")):
                    d += toks[k].type in ("LPAR", "LSQB")
                    d -= toks[k].type in ("RPAR", "RSQB")
                    k += 1
                if k > j + 2:
                    default = text[toks[j + 2].start_pos:toks[k - 1].end_pos]
            out.append((str(t), default))
        j += 1
    return out


def _imported(path: Path | None, import_path: str) -> Path | None:
    if path is None:
        return None
    target = (path.parent / import_path).resolve()
    return target if target.is_file() else None


def _imported_outline(target: Path) -> Outline | None:
    try:
        return outline(target.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def _block(name: str, text_outline: Outline, path: Path | None) -> tuple[Definition, Path | None] | None:
    """A local definition, or ``alias.block`` from an imported file."""
    if "." not in name:
        d = text_outline.definitions.get(name)
        return (d, path) if d else None
    alias, _, rest = name.partition(".")
    if alias not in text_outline.imports or "." in rest:
        return None
    target = _imported(path, text_outline.imports[alias][0])
    sub = _imported_outline(target) if target else None
    d = sub.definitions.get(rest) if sub else None
    return (d, target) if d else None


# ------------------------------------------------------------------------------------------------ completion
@dataclass(frozen=True)
class Completion:
    label: str
    kind: str  # "component" | "hyper-parameter" | "setting" | "keyword" | "block" | "module" | "parameter"
    detail: str = ""
    documentation: str = ""
    family: str = ""  # of a component: its documentation is ``component_markdown(lookup(label, (family,)))``


# words the paper's long names add to a component's name, meaning nothing more (an interdependence function's
# ``canberra_distance`` is its ``canberra_kernel``)
_FAMILY_WORDS = {"expansion", "compression", "based", "geometric", "incremental", "parameterized", "kernel",
                 "distance"}


def _words(name: str, other: str = "") -> set[str]:
    """The words of ``name`` that say what it is, an acronym of ``other``'s words spelt out (``rma``: random matrix
    adaption)."""
    words, others = ([w for w in n.lower().split("_") if w and w not in _FAMILY_WORDS] for n in (name, other))
    out: set[str] = set()
    for w in words:
        runs = [others[i:j] for i in range(len(others)) for j in range(i + 2, len(others) + 1)
                if "".join(x[0] for x in others[i:j]) == w]
        out |= set(runs[0]) if runs else {w}
    return out


def distinct_alias(alias: str, name: str) -> bool:
    """Whether ``alias`` of component ``name`` is worth its own completion: not the name with words added or dropped
    (``chebyshev_expansion``, ``dog`` for ``dog_wavelet``) nor a misspelling or abbreviation of it (``harr_wavelet``,
    ``concat_low_rank``, ``product`` for ``prod``), but another name a user may know it by (``max_pool`` for
    ``patch_max``, ``gat`` for ``graph_attention``)."""
    a, n = _words(alias, name), _words(name, alias)
    if not a or a <= n or n <= a or _near("".join(sorted(a)), "".join(sorted(n))):
        return False
    return not all(any(_near(w, v) for v in n) for w in a)


def _near(a: str, b: str) -> bool:
    """The same word misspelt, abbreviated or run together (``harr``, ``prod``, ``lowrank``)."""
    return a.startswith(b) or b.startswith(a) or difflib.SequenceMatcher(None, a, b).ratio() >= 0.75


def _component_item(e: Entry) -> Completion:
    detail = f"{e.family}: {e.doc}" if e.name == e.cls.name else f"{e.family}: {e.cls.name} — {e.doc}"
    return Completion(e.name, "component", detail, family=e.family)


def _family_items(families: tuple[str, ...]) -> list[Completion]:
    """Each component of ``families`` once by its name, and its aliases that are names of their own."""
    entries = [component(n, families) for n in names(families)]
    return [_component_item(e) for e in entries if e.name == e.cls.name or distinct_alias(e.name, e.cls.name)]


def complete(text: str, line: int, col: int, *, path: Path | None = None) -> list[Completion]:
    """What may be written at ``(line, col)``: components of the slot being set, hyper-parameters of the call
    being written, setting keys of a head body, blocks, keywords."""
    offset = offset_of(text, line, col)
    toks = tokens(text)
    i = _at(toks, offset)
    partial = i is not None and (toks[i].type == "NAME" or toks[i].type in _KEYWORD_TYPES) and (
        toks[i].start_pos < offset)
    stop = i if partial else _first_after(toks, offset)
    before = toks[:stop]
    stack = _frames(toks, stop)
    last = before[-1] if before else None
    frame = stack[-1] if stack else None
    here = outline(text)

    if last is not None and last.type == "DOT" and len(before) >= 2 and before[-2].type == "NAME":
        alias = str(before[-2])
        if alias in here.imports:
            target = _imported(path, here.imports[alias][0])
            sub = _imported_outline(target) if target else None
            return [Completion(d.name, "block", d.signature()) for d in (sub.definitions.values() if sub else ())]
        return []
    if frame is None:  # between definitions, or after an import
        after_import = len(before) >= 2 and before[-2].type == "AS"
        return [Completion(k, "keyword") for k in TOP_KEYWORDS] if last is None or last.type == "RBRACE" or (
            after_import) else []
    if frame.bracket == "(" and last is not None and last.type in ("LPAR", "COMMA"):
        return _kwarg_items(frame, stack, here, path)
    if frame.bracket == "[" and last is not None and last.type in ("LSQB", "COMMA"):
        fams = _slot_families(stack)
        return _family_items(fams) if fams and fams != OP_FAMILIES else []
    if frame.bracket != "{" or last is None:
        return []
    if last.type == "EQUAL":
        if frame.kind in SETTING_KEYS:
            fams = SLOT_FAMILIES.get(frame.key or "")
            return _family_items(fams) if fams else []
        if frame.kind == "body":
            items = [Completion(k, "keyword") for k in VALUE_KEYWORDS]
            items += [Completion(d.name, "block", d.signature()) for d in here.definitions.values()
                      if d.kind == "block"]
            items += [Completion(a, "module", f'import "{p}"') for a, (p, _) in here.imports.items()]
            return items + _family_items(OP_FAMILIES)
        return []
    at_start = last.type in ("LBRACE", "RBRACE", "SEMI") or (
        last.type in _VALUE_END and last.end_line < line + 1)
    if not at_start:
        return []
    if frame.kind in SETTING_KEYS:
        given = set(frame.keys)
        items = [Completion(k, "setting", _setting_doc(k)) for k in SETTING_KEYS[frame.kind] if k not in given]
        return items + ([Completion("head", "keyword")] if frame.kind == "layer" else [])
    if frame.kind == "body":
        return [Completion(k, "keyword") for k in BODY_KEYWORDS]
    return []


def _first_after(toks: list[lark.Token], offset: int) -> int:
    return next((k for k, t in enumerate(toks) if t.start_pos >= offset), len(toks))


def _kwarg_items(frame: _Frame, stack: list[_Frame], here: Outline, path: Path | None) -> list[Completion]:
    func = frame.func
    if func is None or func in (*HEAD_KINDS, "repeat", "(params)"):
        return []
    given = set(frame.keys)
    block = _block(func, here, path)
    if block is not None:
        return [Completion(p, "parameter", f"{block[0].name}: {p}" + (f" = {d}" if d else ""))
                for p, d in block[0].params if p not in given]
    entry = component(func, _slot_families(stack[:-1]))
    if entry is None:
        return []
    return [Completion(key, "hyper-parameter", f"{type_text(f.annotation)} = {_default(f)}", f.description or "")
            for key, f in entry.schema.model_fields.items() if key not in given]


def _default(f) -> str:
    return value_text(... if f.is_required() else f.default)


def _setting_doc(key: str) -> str:
    fams = SLOT_FAMILIES.get(key)
    return " or ".join(FAMILIES[f] for f in fams) if fams else ""


# ------------------------------------------------------------------------------------------------ hover
def component_markdown(e: Entry) -> str:
    """A registry entry as Markdown: family, formula and docs, and its hyper-parameters with defaults."""
    lines = [f"**{e.name}** — {e.family} ({FAMILIES[e.family]})", "", docstring(e), ""]
    if e.cls.aliases or e.name != e.cls.name:
        lines += ["Also: " + ", ".join(f"`{a}`" for a in sorted({e.cls.name, *e.cls.aliases} - {e.name})), ""]
    fields = e.schema.model_fields
    if fields:
        lines += ["| hyper-parameter | type | default |", "|---|---|---|"]
        lines += [f"| `{k}` | {type_text(f.annotation).replace('|', chr(92) + '|')} | `{_default(f)}` |"
                  for k, f in fields.items()]
    else:
        lines.append("No hyper-parameters.")
    return "\n".join(lines)


@dataclass(frozen=True)
class Hover:
    markdown: str
    line: int
    col: int
    end_col: int


def hover(text: str, line: int, col: int, *, path: Path | None = None) -> Hover | None:
    """Documentation for the name under ``(line, col)``: a component, a hyper-parameter, a slot, a block or a
    tensor type."""
    toks = tokens(text)
    i = _at(toks, offset_of(text, line, col))
    if i is None or toks[i].type != "NAME":
        return None
    t = toks[i]
    md = _hover_text(text, toks, i, path)
    return Hover(md, t.line - 1, t.column - 1, t.end_column - 1) if md else None


def _hover_text(text: str, toks: list[lark.Token], i: int, path: Path | None) -> str | None:
    name = str(toks[i])
    nxt = toks[i + 1] if i + 1 < len(toks) else None
    stack = _frames(toks, i)
    frame = stack[-1] if stack else None
    here = outline(text)
    if nxt is not None and nxt.type == "EQUAL" and frame is not None:
        if frame.bracket == "(" and frame.func:
            block = _block(frame.func, here, path)
            if block is not None:
                default = dict(block[0].params).get(name)
                return f"parameter `{name}` of `{block[0].signature()}`" + (f", default `{default}`" if default else "")
            entry = component(frame.func, _slot_families(stack[:-1]))
            f = entry.schema.model_fields.get(name) if entry else None
            if f is None:
                return None
            out = f"**{name}**: `{type_text(f.annotation)}` = `{_default(f)}` — hyper-parameter of `{entry.name}`"
            return out + (f"\n\n{f.description}" if f.description else "") + f"\n\n`{entry.name}`: {entry.doc}"
        if frame.bracket == "{" and frame.kind in SETTING_KEYS and name in SLOT_FAMILIES:
            fams = SLOT_FAMILIES[name]
            return f"**{name}**: " + " or ".join(FAMILIES[f] for f in fams) + \
                f" ({len(names(fams))} components: " + ", ".join(fams) + ")"
        return None
    dotted, j = _dotted_before(toks, i)
    end = i
    while end + 2 < len(toks) and toks[end + 1].type == "DOT" and toks[end + 2].type == "NAME":
        end += 2
    full, _ = _dotted_before(toks, end)
    if "." in full:  # alias.block
        if end == i:
            block = _block(full, here, path)
            return f"`{block[0].signature()}` in `{block[1].name}`" if block and block[1] else None
        if j == i and name in here.imports:
            return f'module `{name}`: `import "{here.imports[name][0]}"`'
        return None
    if j >= 1 and toks[j - 1].type in ("MODEL", "BLOCK"):
        d = here.definitions.get(name)
        return f"`{d.signature()}`" if d else None
    if nxt is not None and nxt.type == "LSQB" and name in TYPE_CONSTRUCTORS:
        layout, ranks = TYPE_CONSTRUCTORS[name]
        return f"tensor type `{name}`: {layout} layout, rank " + " or ".join(map(str, ranks))
    if name in here.definitions:
        return f"`{here.definitions[name].signature()}`"
    entry = component(name, _slot_families(stack))
    if entry is not None:
        return component_markdown(entry)
    local = _local_binding(toks, i)
    if local is None:
        return None
    for d in here.definitions.values():
        if d.line == local.line and name in dict(d.params):
            default = dict(d.params)[name]
            return f"parameter `{name}`" + (f" = `{default}`" if default else "") + f" of `{d.signature()}`"
    return "`" + text.splitlines()[local.line].strip().rstrip("{").rstrip() + "`"


# ------------------------------------------------------------------------------------------------ definition
@dataclass(frozen=True)
class Location:
    path: Path | None  # None: the file being edited
    line: int
    col: int
    end_col: int


def definition(text: str, line: int, col: int, *, path: Path | None = None) -> list[Location]:
    """Where the name under ``(line, col)`` is defined: a block or model (here or in an imported file), an
    imported file (from its alias or path), a value or a parameter of the enclosing definition."""
    toks = tokens(text)
    i = _at(toks, offset_of(text, line, col))
    if i is None:
        return []
    t = toks[i]
    here = outline(text)
    if t.type == "STRING" and i >= 1 and toks[i - 1].type == "IMPORT":
        target = _imported(path, str(t)[1:-1])
        return [Location(target, 0, 0, 0)] if target else []
    if t.type != "NAME":
        return []
    name = str(t)
    dotted, _ = _dotted_before(toks, i)
    if dotted and "." in dotted:
        block = _block(dotted, here, path)
        return [Location(block[1], block[0].line, block[0].col, block[0].col + len(block[0].name))] if block else []
    prev = toks[i - 1].type if i else None
    nxt = toks[i + 1].type if i + 1 < len(toks) else None
    if name in here.imports and (nxt == "DOT" or prev == "AS"):
        target = _imported(path, here.imports[name][0])
        return [Location(target, 0, 0, 0)] if target else []
    if name in here.definitions and (nxt in ("LPAR", "LBRACE") or prev in ("MODEL", "BLOCK")):
        d = here.definitions[name]
        return [Location(None, d.line, d.col, d.col + len(d.name))]
    local = _local_binding(toks, i)
    return [local] if local else []


def _local_binding(toks: list[lark.Token], i: int) -> Location | None:
    """The input, assignment or parameter that binds the value name at ``i``, in its enclosing definition."""
    name = str(toks[i])
    start = max((k for k in range(i) if toks[k].type in ("MODEL", "BLOCK")), default=None)
    if start is None:
        return None
    depth, k = 0, start
    while k < len(toks):
        t = toks[k]
        prev = toks[k - 1]
        if str(t) == name and t.type == "NAME":
            binds = (depth == 1 and (prev.type == "INPUT" or (
                k + 1 < len(toks) and toks[k + 1].type == "EQUAL" and prev.type != "DOT"))) or (
                depth == 1 and prev.type in ("LPAR", "COMMA") and _in_params(toks, start, k))
            if binds:
                return Location(None, t.line - 1, t.column - 1, t.end_column - 1)
        depth += t.type in ("LPAR", "LBRACE", "LSQB")
        depth -= t.type in ("RPAR", "RBRACE", "RSQB")
        if depth == 0 and t.type == "RBRACE":
            break
        k += 1
    return None


def _in_params(toks: list[lark.Token], start: int, k: int) -> bool:
    return start + 2 < len(toks) and toks[start + 2].type == "LPAR" and all(
        toks[j].type != "LBRACE" for j in range(start + 2, k))
