"""Load a spec and the files it imports. Imports resolve relative to the importing file and must stay
inside the project root; cycles and missing files are located errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rpn2c.errors import Diagnostics, SpecError
from rpn2c.syntax import ast
from rpn2c.syntax.parser import parse


@dataclass
class Unit:
    """A parsed file and the units its aliases point at."""

    program: ast.Program
    path: Path | None
    imports: dict[str, "Unit"] = field(default_factory=dict)


def load(text: str, file: str = "<string>", *, path: Path | None = None, root: Path | None = None,
         sources: dict[str, str] | None = None) -> tuple[Unit, dict[str, str]]:
    """Parse ``text`` and, recursively, its imports. Returns the root unit and every source text by file name."""
    sources = {} if sources is None else sources
    sources[file] = text
    if path is not None:
        path = path.resolve()
        root = (root or path.parent).resolve()
    return _load(text, file, path, root, sources, stack=()), sources


def _load(text, file, path, root, sources, stack) -> Unit:
    program = parse(text, file)
    unit = Unit(program, path)
    diags = Diagnostics(sources)
    seen: set[str] = set()
    for imp in program.imports:
        if imp.alias in seen:
            diags.error("E0205", f"import alias '{imp.alias}' is used twice", imp.span)
            continue
        seen.add(imp.alias)
        if path is None:
            diags.error("E0501", "imports need a file: compile with rpn2c.compile_file(path)", imp.span)
            continue
        target = (path.parent / imp.path).resolve()
        if root is not None and not target.is_relative_to(root):
            diags.error("E0502", f"import '{imp.path}' leaves the project root {root}", imp.span)
            continue
        if target in stack or target == path:
            chain = " -> ".join(p.name for p in (*stack, path, target))
            diags.error("E0503", f"import cycle: {chain}", imp.span)
            continue
        if not target.is_file():
            diags.error("E0504", f"cannot find imported file '{imp.path}'", imp.span)
            continue
        try:
            sub_text = target.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            diags.error("E0504", f"cannot read '{imp.path}': {exc}", imp.span)
            continue
        sub_file = _display(target, root)
        sources[sub_file] = sub_text
        try:
            unit.imports[imp.alias] = _load(sub_text, sub_file, target, root, sources, (*stack, path))
        except SpecError as exc:
            diags.extend(exc.diagnostics)
    diags.raise_if_any()
    return unit


def _display(target: Path, root: Path | None) -> str:
    try:
        return str(target.relative_to(root.parent if root else target.parent))
    except ValueError:
        return str(target)
