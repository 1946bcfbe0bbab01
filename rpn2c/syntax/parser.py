"""Text -> AST. The grammar lives in ``grammar/rpn.lark``; the transformer only builds AST nodes."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import os
import sys
import tempfile
import threading
from importlib import resources
from pathlib import Path

import lark
from lark import Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from rpn2c.errors import Diagnostic, SpecSyntaxError, Span
from rpn2c.syntax import ast

# Regex terminals in human words (string terminals are shown quoted). A test checks every terminal is covered.
TERMINAL_WORDS = {
    "NAME": "a name",
    "INT": "an integer",
    "FLOAT": "a number",
    "STRING": 'a string like "text"',
    "COMMENT": "a comment",
    "$END": "the end of the file",
}

_lock = threading.Lock()

# Bounds on what one spec may spell (E0105-E0107): deeper syntax trees would exhaust Python's stack in the
# transformer and the checker, longer integers would be slow to convert, larger files slow to parse.
MAX_DEPTH = 100          # levels of the syntax tree (a 5-level expression `((a + b) * c)` is far below)
MAX_INT_DIGITS = 18      # integer literals below 10**18
MAX_SOURCE_CHARS = 1_000_000


def grammar_text() -> str:
    """The grammar file: the wheel's copy if installed, else the repository's ``grammar/rpn.lark``."""
    try:
        packaged = resources.files("rpn2c").joinpath("_grammar/rpn.lark")
        if packaged.is_file():
            return packaged.read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError):  # pragma: no cover - depends on install kind
        pass
    return (Path(__file__).resolve().parents[2] / "grammar" / "rpn.lark").read_text(encoding="utf-8")


_OPTIONS = {"parser": "lalr", "propagate_positions": True, "maybe_placeholders": False}


def parser_cache_file(text: str) -> Path:
    """Where the built parser is kept between runs: the user's cache folder (``$XDG_CACHE_HOME``, else
    ``~/.cache``), named by a hash of the grammar, the options and lark's and Python's versions, so that a file
    built from another grammar is never read."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    key = "\0".join([text, repr(sorted(_OPTIONS.items())), lark.__version__, sys.version])
    return Path(root) / "rpn2c" / f"parser-{hashlib.sha256(key.encode()).hexdigest()[:32]}.lark"


def _load(path: Path) -> lark.Lark | None:
    try:
        with open(path, "rb") as f:
            return lark.Lark.load(f)
    except Exception:  # absent, unreadable or damaged (a pickle fails in many ways): build it again
        return None


def _keep(parser: lark.Lark, path: Path) -> None:
    """Write ``parser`` to ``path`` whole or not at all (a temporary file renamed over it); a cache folder that
    cannot be written is skipped."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            parser.save(f)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


@functools.lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    """The LALR parser. Building its tables takes about 0.2 s, which every command that reads a spec (and the
    editor's first diagnostic) would pay; the built parser is kept in the user's cache folder and read back in
    about 0.02 s."""
    with _lock:
        text = grammar_text()
        path = parser_cache_file(text)
        parser = _load(path)
        if parser is None:
            parser = build_parser(text)
            _keep(parser, path)
        return parser


def build_parser(text: str | None = None) -> lark.Lark:
    """A parser built from the grammar (``text``, else the grammar file), not the cached one: it keeps the grammar's
    rules (``.grammar``), which generators of sentences (hypothesis's ``from_lark``) read."""
    return lark.Lark(grammar_text() if text is None else text, **_OPTIONS)


def terminal_word(name: str) -> str:
    """A terminal's name in words: ``'{'`` for punctuation and keywords, a phrase for regex terminals."""
    if name in TERMINAL_WORDS:
        return TERMINAL_WORDS[name]
    term = next((t for t in _parser().terminals if t.name == name), None)
    if term is not None and term.pattern.type == "str":
        return f"'{term.pattern.value}'"
    return name.lower()


def _span(file: str, meta) -> Span:
    if getattr(meta, "empty", False):
        return Span(file, 0, 0, 0, 0)
    return Span(file, meta.line, meta.column, meta.end_line, meta.end_column)


def _tok_span(file: str, tok: Token) -> Span:
    return Span(file, tok.line, tok.column, tok.end_line or tok.line, tok.end_column or tok.column + len(tok))


class _ToAst(Transformer):
    """Syntax -> AST, nothing more (semantic checks live in ``rpn2c.check``)."""

    def __init__(self, file: str):
        super().__init__()
        self.file = file

    def _s(self, meta) -> Span:
        return _span(self.file, meta)

    # expressions
    @v_args(meta=True)
    def int_lit(self, meta, c):
        digits = str(c[0]).lstrip("0")
        if len(digits) > MAX_INT_DIGITS:
            raise _Located(Diagnostic("E0105", f"integer literal with {len(digits)} digits is out of range "
                                               f"(at most {MAX_INT_DIGITS} digits)", self._s(meta)))
        return ast.Literal(int(c[0]), self._s(meta))

    @v_args(meta=True)
    def float_lit(self, meta, c):
        value = float(c[0])
        if not math.isfinite(value):
            raise _Located(Diagnostic("E0105", f"number literal {str(c[0])[:20]} is out of range (not finite "
                                               "as a 64-bit float)", self._s(meta)))
        return ast.Literal(value, self._s(meta))

    @v_args(meta=True)
    def str_lit(self, meta, c):
        return ast.Literal(_unescape(str(c[0])[1:-1]), self._s(meta))

    @v_args(meta=True)
    def true_lit(self, meta, c):
        return ast.Literal(True, self._s(meta))

    @v_args(meta=True)
    def false_lit(self, meta, c):
        return ast.Literal(False, self._s(meta))

    @v_args(meta=True)
    def none_lit(self, meta, c):
        return ast.Literal(None, self._s(meta))

    @v_args(meta=True)
    def dotted(self, meta, c):
        return ast.Name(tuple(str(t) for t in c), self._s(meta))

    @v_args(meta=True)
    def name_ref(self, meta, c):
        return c[0]

    @v_args(meta=True)
    def list_lit(self, meta, c):
        return ast.ListExpr(tuple(c), self._s(meta))

    @v_args(meta=True)
    def binop(self, meta, c):
        return ast.BinOp(str(c[1]), c[0], c[2], self._s(meta))

    @v_args(meta=True)
    def index(self, meta, c):
        return ast.Index(c[0], c[1], self._s(meta))

    @v_args(meta=True)
    def neg(self, meta, c):
        return ast.Neg(c[1], self._s(meta))

    @v_args(meta=True)
    def kwarg(self, meta, c):
        return ast.Kwarg(str(c[0]), c[1], self._s(meta))

    def args(self, c):
        return c

    @staticmethod
    def _split_args(items):
        args = tuple(a for a in items if not isinstance(a, ast.Kwarg))
        kwargs = tuple(a for a in items if isinstance(a, ast.Kwarg))
        return args, kwargs

    @v_args(meta=True)
    def call(self, meta, c):
        args, kwargs = self._split_args(c[1])
        return ast.Call(c[0], args, kwargs, self._s(meta))

    # settings and heads
    @v_args(meta=True)
    def setting(self, meta, c):
        return ast.Setting(str(c[0]), c[1], self._s(meta))

    def head_kind(self, c):
        return str(c[0])

    @v_args(meta=True)
    def head_expr(self, meta, c):
        kind, arglist, *rest = c
        args, kwargs = self._split_args(arglist)
        settings = tuple(s for s in rest if isinstance(s, ast.Setting))
        return ast.HeadExpr(kind, args, kwargs, settings, self._s(meta))

    @v_args(meta=True)
    def head_decl(self, meta, c):
        settings = tuple(s for s in c[1:] if isinstance(s, ast.Setting))
        return ast.HeadDecl(str(c[0]), settings, self._s(meta))

    @v_args(meta=True)
    def layer_expr(self, meta, c):
        args, kwargs = self._split_args(c[0])
        heads = tuple(x for x in c[1:] if isinstance(x, ast.HeadDecl))
        settings = tuple(x for x in c[1:] if isinstance(x, ast.Setting))
        return ast.LayerExpr(args, kwargs, heads, settings, self._s(meta))

    @v_args(meta=True)
    def repeat_expr(self, meta, c):
        kwargs = tuple(x for x in c[1:-1] if isinstance(x, ast.Kwarg))
        return ast.RepeatExpr(c[0], c[-1], self._s(meta), kwargs)

    # statements
    @v_args(meta=True)
    def tensor_type(self, meta, c):
        return ast.TensorTypeExpr(str(c[0]), tuple(c[1:]), self._s(meta))

    @v_args(meta=True)
    def input_stmt(self, meta, c):
        return ast.Input(str(c[0]), c[1] if len(c) > 1 else None, self._s(meta))

    @v_args(meta=True)
    def param_stmt(self, meta, c):
        return ast.ParamDecl(str(c[0]), c[1], c[2] if len(c) > 2 else None, self._s(meta))

    @v_args(meta=True)
    def assign_stmt(self, meta, c):
        return ast.Assign(str(c[0]), c[1], self._s(meta))

    @v_args(meta=True)
    def return_stmt(self, meta, c):
        return ast.Return(tuple(str(t) for t in c), self._s(meta), tuple(_tok_span(self.file, t) for t in c))

    @v_args(meta=True)
    def param(self, meta, c):
        return ast.Param(str(c[0]), c[1] if len(c) > 1 else None, self._s(meta))

    def params(self, c):
        return tuple(c)

    def body(self, c):
        return tuple(s for s in c if not isinstance(s, Token))

    def _definition(self, kind, meta, c):
        name = str(c[0])
        params = c[1] if len(c) == 3 else ()
        return ast.Definition(kind, name, params, c[-1], self._s(meta), getattr(meta, "end_line", 0))

    @v_args(meta=True)
    def model_def(self, meta, c):
        return self._definition("model", meta, c)

    @v_args(meta=True)
    def block_def(self, meta, c):
        return self._definition("block", meta, c)

    @v_args(meta=True)
    def import_stmt(self, meta, c):
        return ast.Import(_unescape(str(c[0])[1:-1]), str(c[1]), self._s(meta))

    def start(self, c):
        imports = tuple(x for x in c if isinstance(x, ast.Import))
        defs = tuple(x for x in c if isinstance(x, ast.Definition))
        return ast.Program(imports, defs, self.file)


class _Located(Exception):
    """A located problem found while building the AST (a literal out of range)."""

    def __init__(self, diagnostic: Diagnostic):
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def _too_deep(tree: lark.Tree, file: str) -> Diagnostic | None:
    """The first (in the text) subtree at depth MAX_DEPTH + 1, as a diagnostic; walked with a stack, never
    recursion, and never below that depth."""
    stack, deep = [(tree, 1)], []
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            deep.append(_span(file, node.meta))
            continue
        stack.extend((c, depth + 1) for c in node.children if isinstance(c, lark.Tree))
    if not deep:
        return None
    return Diagnostic("E0106", f"the spec nests more than {MAX_DEPTH} levels deep here (expressions, lists and "
                               "calls); split it into named values or parameters", min(deep))


def _unescape(s: str) -> str:
    return s.replace('\\"', '"').replace("\\\\", "\\")


def _comments(text: str) -> tuple[ast.Comment, ...]:
    """Comments with their positions, from the lexer (so '#' inside strings is not a comment)."""
    out = []
    try:
        for tok in _parser().lex(text, dont_ignore=True):
            if tok.type == "COMMENT":
                out.append(ast.Comment(tok.line, tok.column, str(tok)))
    except UnexpectedInput:
        pass
    return tuple(out)


def parse(text: str, file: str = "<string>") -> ast.Program:
    """Parse ``text``; raise :class:`SpecSyntaxError` with a located diagnostic when it does not parse."""
    if len(text) > MAX_SOURCE_CHARS:
        lines = text[:MAX_SOURCE_CHARS].split("\n")
        span = Span(file, len(lines), len(lines[-1]) + 1, len(lines), len(lines[-1]) + 2)
        raise SpecSyntaxError([Diagnostic("E0107", f"the spec is longer than {MAX_SOURCE_CHARS:,} characters",
                                          span)], {file: text})
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as exc:
        raise SpecSyntaxError([_syntax_diagnostic(exc, text, file)], {file: text}) from None
    deep = _too_deep(tree, file)
    if deep is not None:
        raise SpecSyntaxError([deep], {file: text})
    try:
        program = _ToAst(file).transform(tree)
    except VisitError as exc:  # literals out of range; anything else is a bug in rpn2c
        if isinstance(exc.orig_exc, _Located):
            raise SpecSyntaxError([exc.orig_exc.diagnostic], {file: text}) from None
        raise exc.orig_exc from None
    return ast.Program(program.imports, program.definitions, file, _comments(text))


def _syntax_diagnostic(exc: UnexpectedInput, text: str, file: str) -> Diagnostic:
    line, col = max(exc.line, 1), max(exc.column, 1)
    if isinstance(exc, UnexpectedCharacters):
        ch = text[exc.pos_in_stream] if 0 <= exc.pos_in_stream < len(text) else "?"
        msg = f"unexpected character {ch!r}"
        span = Span(file, line, col, line, col + 1)
        return Diagnostic("E0101", msg, span, suggestion=_char_hint(ch))
    if isinstance(exc, UnexpectedToken) and exc.token.type != "$END":
        tok = exc.token
        expected = sorted({terminal_word(t) for t in exc.accepts or exc.expected if t != "COMMENT"})
        msg = f"unexpected {terminal_word(tok.type) if tok.type in TERMINAL_WORDS else repr(str(tok))}"
        hint = "expected something like " + ", ".join(expected[:8]) if expected else None
        hint = _char_hint(str(tok)) or hint
        end = (tok.end_column or col + len(str(tok))) if (tok.end_line or line) == line else col + 1
        return Diagnostic("E0102", msg, Span(file, line, col, line, end), suggestion=hint)
    # end of input: point at the end of the last non-blank line
    lines = text.rstrip().splitlines() or [""]
    expected = sorted({terminal_word(t) for t in getattr(exc, "expected", ()) or ()})
    last = len(lines)
    span = Span(file, last, len(lines[-1]) + 1, last, len(lines[-1]) + 2)
    hint = "expected " + ", ".join(expected[:8]) if expected else None
    return Diagnostic("E0103", "unexpected end of file (an unclosed '{', '(' or '['?)", span, suggestion=hint)


def _char_hint(ch: str) -> str | None:
    return {
        "'": "strings use double quotes",
        ":": "hyper-parameters are written `key = value`",
        "%": "only + - * / // are allowed in expressions",
    }.get(ch)


__all__ = ["parse", "grammar_text", "terminal_word", "UnexpectedEOF"]
