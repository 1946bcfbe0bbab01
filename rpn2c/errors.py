"""Diagnostics: one error type with source spans, collected across a whole pass.

Every stage reports problems as :class:`Diagnostic` records (code, message, span, notes, suggestion).
A stage collects them in a :class:`Diagnostics` bag and raises one :class:`SpecError` subclass holding all of
them, sorted by position, so a user sees every error in a file at once (miniwdl style).
"""

from __future__ import annotations

import difflib
import re
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


@dataclass(frozen=True)
class ErrorCode:
    """One entry of the error catalog: a stable code, a short title, the message's shape and what fixes it.

    ``template`` names the variable parts in braces (``'{name}' is defined twice``; other braces are literal); a
    diagnostic's message has that shape, possibly with more detail. ``fix`` says the editor offers a quick fix (replace the name with the
    diagnostic's did-you-mean suggestion).
    """

    code: str
    title: str
    template: str
    help: str
    fix: bool = False

    @property
    def kind(self) -> str:
        return CODE_KINDS[self.code[:3]]


def _codes(*entries: ErrorCode) -> dict[str, ErrorCode]:
    return {e.code: e for e in entries}


E = ErrorCode
#: Every error code rpn2c reports, declared once (``docs/errors.md`` is generated from it).
CATALOG: dict[str, ErrorCode] = _codes(
    # ---- E01xx syntax
    E("E0101", "unexpected character", "unexpected character '{char}'",
      "delete the character, or type the ASCII one meant (a typographic quote or dash is a common cause)"),
    E("E0102", "unexpected token", "unexpected {token}",
      "the help line lists what the grammar accepts here; a missing `=`, `,` or bracket just before is common"),
    E("E0103", "unexpected end of file", "unexpected end of file (an unclosed '{', '(' or '['?)",
      "close the open brace, parenthesis or bracket"),
    E("E0104", "not UTF-8", "the file is not valid UTF-8: byte 0x{byte} at offset {offset}", "save the spec as UTF-8"),
    E("E0105", "literal out of range", "{literal} is out of range ({bound})",
      "integers have at most 18 digits and numbers are finite 64-bit floats"),
    E("E0106", "nesting too deep", "the spec nests more than {depth} levels deep here {detail}",
      "split the expression into named values or parameters"),
    E("E0107", "spec too long", "the spec is longer than {chars} characters", "split the spec into imported files"),
    # ---- E02xx names
    E("E0201", "unknown component, operation or block", "unknown {family} component '{name}'",
      "use a registry entry (`rpn2c components`) or a block defined in the file; the help line names the closest, "
      "or how rpn2c writes what other libraries call so (`gelu_tanh`: `gelu(approximate = \"tanh\")`)", True),
    E("E0202", "unknown name", "unknown value '{name}'",
      "define the value, parameter or import before using it; the help line names the closest", True),
    E("E0203", "duplicate definition", "'{name}' is defined twice", "rename one of the models or blocks"),
    E("E0204", "unknown tensor type", "unknown tensor type '{kind}'",
      "use vector, sequence, image, signal, volume, set, nodes, edges, tokens, block_mask, …", True),
    E("E0205", "duplicate import alias", "import alias '{alias}' is used twice", "give each import its own alias"),
    E("E0206", "duplicate name", "'{name}' is already defined", "rename the value, parameter or head"),
    E("E0207", "used before definition", "'{name}' is used before it is defined {detail}",
      "define values in dataflow order; a head's `tie` names an earlier head"),
    E("E0208", "reserved name", "'{name}' is {why}, so {what} cannot take it as its name",
      "rename the head or input: a layer's heads are the entries of a torch `nn.ModuleDict` (not its attributes "
      "`keys`, `values`, `train`, …) and Python names in an exported program (no keywords); a model is called with "
      "its inputs by name, and `self` is torch's own; a value may take any name"),
    # ---- E03xx types and hyper-parameters
    E("E0301", "component in the wrong slot", "'{name}' is {a_family} component; '{slot}' takes {families}",
      "move the component to a slot of its family (`rpn2c components` shows each family)", True),
    E("E0302", "unknown hyper-parameter or parameter", "'{name}' has no hyper-parameter '{key}' (it takes: {known})",
      "spell the key as the component, block or model declares it; the help line names the closest", True),
    E("E0303", "bad hyper-parameter value", "bad value for '{key}' of '{name}': {why}",
      "give a value of the type and range the message names (`rpn2c components NAME` shows each hyper-parameter); "
      "the help line names the closest allowed value, or the operation that does what the value asks"),
    E("E0304", "unknown setting", "unknown {kind} setting '{key}'",
      "use a setting the head, layer or recurrent layer declares; the help line names the closest", True),
    E("E0305", "positional hyper-parameter", "hyper-parameters of '{name}' are keyword arguments (`key = value`)",
      "write `name(key = value)`"),
    E("E0306", "value of the wrong kind", "'{op}' needs numbers, got {left} and {right}",
      "arithmetic and negation take numbers; calls are not values in settings"),
    E("E0307", "division by zero", "division by zero", "make the divisor non-zero"),
    E("E0308", "given twice", "setting '{key}' is given twice", "keep one of the two"),
    E("E0309", "bad tensor type", "'{kind}' takes {n} dimensions, got {m}",
      "give the declared number of dimensions, each a positive integer or a symbol; an edge list has 2 rows"),
    E("E0310", "expected a tensor value", "expected a tensor value (a name or a call)",
      "pass a value defined by a head, layer, operation, block call or input; literals go in settings"),
    E("E0311", "wrong number of inputs", "'{name}' takes {n} input value(s), got {m}",
      "pass as many positional inputs as the operation or block declares"),
    E("E0312", "missing parameter", "'{name}' needs a value for its parameter '{param}'",
      "pass the parameter at the call (`block(x, p = 1)`) or give it a default"),
    E("E0313", "layer without heads", "a layer needs at least one `head name { ... }`",
      "declare the layer's heads inside its braces"),
    E("E0314", "arithmetic out of range", "'{op}' gives a value out of range {detail}",
      "keep integers below 10**18 and numbers finite"),
    E("E0315", "unexpected keyword input", "a {kind} takes one input and an optional `context = value`, not '{key}'",
      "pass one positional input; a layer's context is `context = value`, a recurrent layer's initial states are "
      "the settings `state = h0` / `cell_state = c0`"),
    E("E0345", "kv_heads does not divide heads", "kv_heads = {g} must divide heads = {h}",
      "give kv_heads a divisor of heads: 1 is multi-query attention, heads is plain multi-head attention"),
    E("E0346", "kv_heads on heads that are not attention", "kv_heads = {g} shares the key and value projections of "
      "a group's query heads, but {why}",
      "grouped key/value heads are identical softmax-attention heads with a learned key projection: `heads = H  "
      "kv_heads = G  xi_instance = attention(rank = r)  out = n  fusion = concat_linear(out = d)`"),
    E("E0349", "a per-head bias for another number of heads", "attn_mask {bias} holds one bias per head for "
      "heads = {h}, but the layer has heads = {n}",
      "make the bias for the layer's heads (`relative_bias(x, heads = H)`, `alibi(x, heads = H)`) or give the layer "
      "`heads = H`: head h adds slice h of the bias to its scores"),
    E("E0350", "a grid not divisible by its window", "{op}: the grid [{gh}, {gw}] is not divisible into {w} x {w} "
      "windows", "give a window size that divides both grid sides (window_attention(size = w)), or pad the grid to "
      "whole windows first, as the libraries' Swin do: `p = pad_grid(x, grid = [gh, gw], to = [ph, pw])` with ph, "
      "pw the next multiples of w (`(gh + w - 1) // w * w`), the attention on grid = [ph, pw], then "
      "`crop_grid(y, grid = [ph, pw], to = [gh, gw])`; patch_merge takes a grid of even sides (pad_grid to them)"),
    E("E0351", "a grid that does not hold the items", "{op} on grid = [{gh}, {gw}] reads {n} items (row-major "
      "positions), got {m}", "give grid = [gh, gw] with gh·gw the sequence's items: the patch grid's sides, halved "
      "after each patch_merge"),
    E("E0352", "a window bias for another window size", "attn_mask {bias} is made for windows of {n} items, but "
      "size = {w} windows hold {m}", "make the bias for the attention's windows: window_bias(x, heads = H, size = w) "
      "with the w of window_attention(size = w)"),
    E("E0353", "a window shift not smaller than the window", "window_attention(shift = {s}) must roll the grid by less "
      "than a window: 0 <= shift < size = {w}", "shift the windows by less than their size (Swin: shift = size // 2 "
      "every other block, 0 in the others)"),
    E("E0355", "position outside the axis it reads", "{call} reads position {index}, outside the {n} {unit} of "
      "{value}: the index must lie in [{low}, {high}]",
      "give an index within the axis (negative counts from the end: -1 is the last item or step), or lengthen the "
      "input; with a symbolic length the same is checked when the model runs"),
    E("E0356", "list index out of range", "index {k} is outside the {n} items of {list}: it must lie in "
      "[{low}, {high}]", "index a list hyper-parameter within its items (`depths[0]` is the first, `depths[-1]` the "
      "last), or give the list more items"),
    E("E0357", "an index of the wrong kind", "'[ ]' takes an item of a list by an integer, got {target} and {index}",
      "index a list (a parameter such as `depths = [2, 2, 6, 2]`) with an integer expression: `depths[i]`"),
    E("E0358", "a repeat index that is not a new name", "index = {name} must be a new name{detail}",
      "write `repeat(n, index = i) block(x, k = f(i))` with a name not yet taken by a parameter or value; the "
      "call's parameters read i = 0, 1, …, n − 1"),
    E("E0359", "a builtin given the wrong arguments", "'{func}' takes {what}, got {got}",
      "`min(a, b, …)` and `max(a, b, …)` take numbers (parameters, literals, arithmetic) as positional arguments, "
      "`len(xs)` one list: `min(window, grid)`, `len(depths)`"),
    E("E0360", "a vector that is not the matrix asked for", "{why}",
      "as_matrix(v, rows = k) reads k rows of equal length: give v k·c features (a k x k T-net predicts k·k); "
      "identity = true needs c = k"),
    E("E0361", "a transform for other features", "{why}",
      "transform(x, t) multiplies each item's k features by T ∈ R^{k x c}: make t with rows = the features of x "
      "(as_matrix(v, rows = k) of a head with out = k·c)"),
    E("E0362", "an orthogonality regulariser on a non-square transform", "{why}",
      "‖I − T Tᵀ‖ regularises a square transform: give as_matrix columns = rows (out = k·k), or drop orthogonality"),
    E("E0377", "a grid padded smaller or cropped larger", "{why}",
      "pad_grid(x, grid = [gh, gw], to = [ph, pw]) places the grid in a larger one (ph >= gh, pw >= gw), "
      "crop_grid(x, grid = [ph, pw], to = [gh, gw]) keeps its top-left part (gh <= ph, gw <= pw)"),
    E("E0390", "cannot import a torch module", "{path} {cls}: {why}",
      "the message names the module and option; rewrite it as a spec or use a supported option"),
    # ---- E04xx shapes
    E("E0401", "block input type mismatch", "input '{name}' expects {want}, but the call passes {have}",
      "pass a value of the declared type, or declare the block input without a type"),
    E("E0402", "shapes do not agree in a head or layer", "{why}",
      "the message names the component and the shapes; the note shows the head's input"),
    E("E0403", "operation input shapes do not agree", "{why}",
      "make the operation's inputs agree as the message says (only the sample axis and size-1 axes broadcast)"),
    # ---- E05xx graph and imports
    E("E0501", "import without a file", "imports need a file: compile with rpn2c.compile_file(path)",
      "check the spec from a file (`rpn2c check FILE`, `rpn2c.check_file`)"),
    E("E0502", "import outside the project root", "import '{path}' leaves the project root {root}",
      "keep imported files under the project root, or pass another root"),
    E("E0503", "import cycle", "import cycle: {chain}", "break the cycle by moving shared blocks to a third file"),
    E("E0504", "missing import", "cannot find imported file '{path}'", "fix the path (relative to the importing file)"),
    E("E0505", "no model", "the file defines no `model`", "add a `model name { ... }` or name the model to check"),
    E("E0506", "two returns", "more than one `return`", "return several values from one `return a, b`"),
    E("E0507", "missing return", "{kind} '{name}' has no `return`", "end the model or block with `return value`"),
    E("E0508", "recursive block", "'{name}' instantiates itself (recursive blocks are not allowed)",
      "use `repeat(n) block(x)` for a stack of copies"),
    E("E0509", "block returns several values", "a block returns exactly one value", "return one value"),
    E("E0510", "import path too long", "import path is {n} characters long (at most {limit})", "shorten the path"),
    E("E0511", "NUL in import path", "import path contains a NUL character", "remove the NUL character"),
    E("E0512", "import path cannot be resolved", "cannot resolve import '{path}': {why}",
      "fix the path: it loops through symbolic links or the file system refuses it"),
    E("E0513", "import is a directory", "import '{path}' is a directory, not a spec file", "name a .rpn file"),
    E("E0514", "import is not a regular file", "import '{path}' is not a regular file (a device, FIFO or socket)",
      "name a .rpn file"),
    E("E0515", "imported file too large", "imported file '{path}' is {size} bytes (at most {limit})",
      "split the imported file"),
    # ---- E06xx resource budgets
    E("E0601", "parameter budget", "'{node}' brings the model to {count} parameters ({here} here); the budget is "
      "{budget}", "shrink the layer, or raise the budget with --max-params / limits={'max_params': n}"),
    E("E0602", "activation memory budget", "'{node}' brings the activations to {bytes} per sample ({here} here); "
      "the budget is {budget}", "shrink the layer, or raise the budget with --max-memory / limits={'max_memory': n}"),
    E("E0603", "check work budget", "{what} expands to about {count} nodes or heads; the check allows {budget} in "
      "all ({used} used before it)", "repeat fewer times, or raise the budget with --max-work / "
      "limits={'max_work': n}"),
    E("E0604", "forward step budget", "{what} runs {count} steps one after another in each forward pass; the budget "
      "allows {budget} nodes and steps in all ({used} used before it)",
      "lower the step count (a graph ξ's hops, a chain's hops), or raise the budget with --max-work / "
      "limits={'max_work': n}"),
    E("E0605", "activation memory budget at run time", "'{node}' brings the activations to {bytes} per sample "
      "with {sizes}; the budget is {budget}",
      "feed smaller inputs (fewer items, nodes or steps), or raise the budget with --max-memory / "
      "limits={'max_memory': n} when checking"),
    E("E0606", "reference lowering memory budget", "'{node}' in the reference lowering builds its literal matrices "
      "of {bytes} with {sizes}; the budget is {budget}",
      "the default lowering never builds them: compile without reference (rpn2c show draws the reference "
      "lowering), feed fewer steps, shrink the layer, or raise the budget with --max-memory / "
      "limits={'max_memory': n} when checking"),
)
del E


def template_pattern(code: str) -> "re.Pattern[str]":
    """A regular expression for messages of ``code``: the template's text with each ``{part}`` any text; a
    message may add detail after it."""
    parts = re.split(r"\{[a-z_]+\}", CATALOG[code].template)
    body = "(.+?)".join(re.escape(p) for p in parts)
    return re.compile(body + "(.*)", re.S)


def _edits(a: str, b: str, limit: int) -> int:
    """Single-character edits (insert, delete, substitute, swap two neighbours) from ``a`` to ``b``; ``limit + 1``
    once more than ``limit`` are needed."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2, prev = [], list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            d = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                d = min(d, prev2[j - 2] + 1)
            cur.append(d)
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[-1]


def close_names(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """The candidates a misspelt ``name`` most likely meant, best first: the same name in another case; else the
    fewest single-character edits, when at most one per three characters (one for a name of two to five
    characters: ``h3`` for ``h2``); else the same last part of a dotted name (``attn`` for ``y.attn``); else
    difflib's closest (ratio >= 0.6). Candidates tied for best are all returned, at most ``n``."""
    cands = sorted(set(candidates) - {name})
    low = name.lower()
    same = [c for c in cands if c.lower() == low]
    if same:
        return same[:n]
    limit = max(1, len(name) // 3) if len(name) >= 2 else 0
    scored = [(d, c) for c in cands if (d := _edits(low, c.lower(), limit)) <= limit]
    if scored:
        best = min(d for d, _ in scored)
        ratio = lambda c: difflib.SequenceMatcher(None, low, c.lower()).ratio()  # noqa: E731
        return sorted((c for d, c in scored if d == best), key=lambda c: (-ratio(c), c))[:n]
    tail = [c for c in cands if "." in c and c.rsplit(".", 1)[1] == name]
    if tail:
        return tail[:n]
    return difflib.get_close_matches(name, cands, n=1, cutoff=0.6)


def quoted_choice(names: Sequence[str], quote: str = "'") -> str:
    """``'a'``, ``'a' or 'b'``, ``'a', 'b' or 'c'``."""
    q = [f"{quote}{x}{quote}" for x in names]
    return q[0] if len(q) == 1 else ", ".join(q[:-1]) + " or " + q[-1]


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """The hint naming what a misspelt ``name`` most likely meant (:func:`close_names`), or None. One name reads
    ``did you mean 'x'?`` (the editor offers it as a quick fix); names tied for best are all listed."""
    close = close_names(name, candidates)
    return f"did you mean {quoted_choice(close)}?" if close else None


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


class InputError(ValueError, TypeError):
    """A compiled model refused a runtime input: a wrong shape or dtype, or ids outside the axis they index. The
    message names the input and what it must be. (Both a ``ValueError`` and a ``TypeError``, as the checks it
    replaces raised one or the other.)"""


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


_KIND_TITLES = {"syntax": "Syntax (E01xx)", "name": "Names (E02xx)", "type": "Types and hyper-parameters (E03xx)",
                "shape": "Shapes (E04xx)", "graph": "Graph and imports (E05xx)", "resource": "Resource budgets (E06xx)"}


def render_error_codes_markdown() -> str:
    """``docs/errors.md``: one table row per code of :data:`CATALOG`, grouped by kind."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    out = ["# Error codes", "",
           "Generated from `rpn2c.errors.CATALOG` (`python -c \"from rpn2c.errors import render_error_codes_markdown as r; "
           "print(r(), end='')\" > docs/errors.md`); "
           "`tests/test_error_catalog.py` fails while it is stale.", "",
           "Every diagnostic is `file:line:col: error[CODE]: message`, with the source line, a caret, notes and a "
           "`help:` line. *Quick fix*: the editor offers to replace the name with the did-you-mean suggestion.", ""]
    for kind, title in _KIND_TITLES.items():
        out += [f"## {title}", "", "| code | title | message | what fixes it | quick fix |", "|---|---|---|---|---|"]
        out += [f"| {e.code} | {cell(e.title)} | `{cell(e.template)}` | {cell(e.help)} | {'yes' if e.fix else ''} |"
                for e in CATALOG.values() if e.kind == kind]
        out.append("")
    return "\n".join(out)

