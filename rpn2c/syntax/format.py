"""AST -> canonical text (``rpn2c fmt``). Idempotent, keeps comments, and ``parse(fmt(p)) == p``."""

from __future__ import annotations

from rpn2c.syntax import ast

INDENT = "  "
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2, "**": 4}


def format_expr(e: ast.Expr, parent_prec: int = 0, right: bool = False) -> str:
    """One expression in canonical form: ``k = v`` keyword spacing, minimal parentheses."""
    if isinstance(e, ast.Literal):
        return literal(e.value)
    if isinstance(e, ast.Name):
        return e.text
    if isinstance(e, ast.Call):
        return f"{e.func.text}({_args(e.args, e.kwargs)})"
    if isinstance(e, ast.ListExpr):
        return "[" + ", ".join(format_expr(i) for i in e.items) + "]"
    if isinstance(e, ast.Neg):
        text = "-" + format_expr(e.operand, 3)
        return f"({text})" if parent_prec > 3 else text
    if isinstance(e, ast.Index):
        return f"{format_expr(e.target, 5)}[{format_expr(e.index)}]"
    if isinstance(e, ast.BinOp):
        prec = _PRECEDENCE[e.op]
        if e.op == "**":  # right-associative, binding tighter than a sign on its left: -a ** -b is -(a ** (-b))
            text = f"{format_expr(e.left, 5)} ** {format_expr(e.right, 3)}"
            return f"({text})" if prec < parent_prec else text
        text = f"{format_expr(e.left, prec)} {e.op} {format_expr(e.right, prec, right=True)}"
        needs = prec < parent_prec or (right and prec == parent_prec)
        return f"({text})" if needs else text
    raise TypeError(f"not an expression: {e!r}")


def literal(v) -> str:
    """A Python value (none, bool, int, float, str, or a list/tuple of them) as spec source text."""
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        text = repr(v)
        return text if any(c in text for c in ".e") else text + ".0"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(literal(x) for x in v) + "]"
    raise TypeError(f"no spec literal for {v!r}")


def _args(args, kwargs) -> str:
    parts = [format_expr(a) for a in args] + [f"{k.name} = {format_expr(k.value)}" for k in kwargs]
    return ", ".join(parts)


class _Printer:
    def __init__(self, comments: tuple[ast.Comment, ...]):
        self.pending = sorted(comments, key=lambda c: (c.line, c.col))
        self.lines: list[str] = []

    def lead(self, line: int, depth: int) -> None:
        """Emit comments that stand before ``line`` on their own lines."""
        while self.pending and self.pending[0].line < line:
            self.lines.append(INDENT * depth + self.pending.pop(0).text)

    def trail(self, line: int) -> None:
        """Append comments that sit on ``line`` to the last emitted line."""
        while self.pending and self.pending[0].line == line:
            self.lines[-1] += "  " + self.pending.pop(0).text

    def emit(self, node_line: int, depth: int, text: str) -> None:
        self.lead(node_line, depth)
        self.lines.append(INDENT * depth + text)
        self.trail(node_line)

    def close(self, end_line: int, depth: int) -> None:
        self.lead(end_line, depth + 1)
        self.lines.append(INDENT * depth + "}")
        self.trail(end_line)

    # -- structure
    def settings(self, settings, depth: int) -> None:
        for s in settings:
            self.emit(s.span.line, depth, f"{s.key} = {format_expr(s.value)}")

    def value(self, name: str, v: ast.Value, span, depth: int) -> None:
        head = f"{name} = "
        if isinstance(v, ast.HeadExpr):
            self.emit(span.line, depth, f"{head}{v.kind}({_args(v.args, v.kwargs)}) {{")
            self.settings(v.settings, depth + 1)
            self.close(v.span.end_line, depth)
        elif isinstance(v, ast.LayerExpr):
            self.emit(span.line, depth, f"{head}layer({_args(v.args, v.kwargs)}) {{")
            items = sorted([*v.heads, *v.settings], key=lambda n: (n.span.line, n.span.col))
            for it in items:
                if isinstance(it, ast.HeadDecl):
                    self.emit(it.span.line, depth + 1, f"head {it.name} {{")
                    self.settings(it.settings, depth + 2)
                    self.close(it.span.end_line, depth + 1)
                else:
                    self.settings((it,), depth + 1)
            self.close(v.span.end_line, depth)
        elif isinstance(v, ast.RepeatExpr):
            extra = "".join(f", {k.name} = {format_expr(k.value)}" for k in v.kwargs)
            self.emit(span.line, depth, f"{head}repeat({format_expr(v.count)}{extra}) {format_expr(v.call)}")
        else:
            self.emit(span.line, depth, head + format_expr(v))

    def statement(self, s: ast.Statement, depth: int) -> None:
        if isinstance(s, ast.Input):
            typ = ""
            if s.type is not None:
                typ = f": {s.type.kind}[{', '.join(format_expr(d) for d in s.type.dims)}]"
            self.emit(s.span.line, depth, f"input {s.name}{typ}")
        elif isinstance(s, ast.ParamDecl):
            init = f" = {format_expr(s.init)}" if s.init is not None else ""
            dims = ", ".join(format_expr(d) for d in s.type.dims)
            self.emit(s.span.line, depth, f"param {s.name}: {s.type.kind}[{dims}]{init}")
        elif isinstance(s, ast.Assign):
            self.value(s.name, s.value, s.span, depth)
        elif isinstance(s, ast.Return):
            self.emit(s.span.line, depth, "return " + ", ".join(s.names))

    def program(self, p: ast.Program) -> str:
        for imp in p.imports:
            self.emit(imp.span.line, 0, f'import {literal(imp.path)} as {imp.alias}')
        for d in p.definitions:
            if self.lines:
                self.lines.append("")
            params = ""
            if d.params:
                params = "(" + ", ".join(
                    prm.name + (f" = {format_expr(prm.default)}" if prm.default is not None else "")
                    for prm in d.params) + ")"
            self.emit(d.span.line, 0, f"{d.kind} {d.name}{params} {{")
            for s in d.body:
                self.statement(s, 1)
            self.close(d.end_line or d.span.end_line, 0)
        self.lead(10**9, 0)
        return "\n".join(_squeeze_blank(self.lines)) + "\n"


def _squeeze_blank(lines: list[str]) -> list[str]:
    out: list[str] = []
    for ln in lines:
        if ln == "" and (not out or out[-1] == ""):
            continue
        out.append(ln)
    while out and out[-1] == "":
        out.pop()
    return out


def format_program(program: ast.Program) -> str:
    """The canonical text of a parsed file."""
    return _Printer(program.comments).program(program)
