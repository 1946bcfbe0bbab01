"""Load a spec and the files it imports. Imports resolve relative to the importing file and must stay
inside the project root (after resolving symlinks); cycles, missing files, directories, devices, FIFOs, paths
the file system refuses and bytes that are not UTF-8 are located errors. Only regular files are ever opened."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from rpn2c.errors import Diagnostic, Diagnostics, SpecError, SpecSyntaxError, Span, error_for
from rpn2c.syntax import ast
from rpn2c.syntax.parser import MAX_SOURCE_CHARS, parse

MAX_PATH_CHARS = 1024  # an import path longer than this is refused before the file system sees it
MAX_FILE_BYTES = 4 * MAX_SOURCE_CHARS


def decode(data: bytes, file: str) -> str:
    """UTF-8 text of ``data`` or a :class:`SpecSyntaxError` (E0104) at the line and column of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[:exc.start].decode("utf-8", errors="replace")
        line = before.count("\n") + 1
        col = len(before) - (before.rfind("\n") + 1) + 1
        text = data.decode("utf-8", errors="replace")
        bad = data[exc.start:exc.start + 1].hex()
        d = Diagnostic("E0104", f"the file is not valid UTF-8: byte 0x{bad} at offset {exc.start}",
                       Span(file, line, col, line, col + 1), suggestion="save the spec as UTF-8")
        raise SpecSyntaxError([d], {file: text}) from None


def read_spec(path: Path, file: str | None = None) -> str:
    """The text of the spec at ``path`` (a regular file of at most MAX_FILE_BYTES, UTF-8) or a located
    :class:`SpecSyntaxError`; ``OSError`` when the file system cannot open it."""
    file = str(path) if file is None else file
    mode = os.stat(path).st_mode  # before opening: opening a FIFO would block
    if not stat.S_ISREG(mode):
        what = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a device, FIFO or socket)"
        raise error_for([Diagnostic("E0513" if stat.S_ISDIR(mode) else "E0514", f"'{file}' is {what}",
                                    Span(file, 1, 1, 1, 2))])
    with open(path, "rb") as fh:
        data = fh.read(MAX_FILE_BYTES + 1)
    return decode(data, file)


def _problem(imp: ast.Import, path: Path, root: Path | None) -> tuple[str, str] | Path:
    """The resolved target of ``imp`` or (code, message) saying why it cannot be read."""
    if len(imp.path) > MAX_PATH_CHARS:
        return "E0510", f"import path is {len(imp.path):,} characters long (at most {MAX_PATH_CHARS})"
    if "\x00" in imp.path:
        return "E0511", "import path contains a NUL character"
    if not imp.path:
        return "E0504", "import path is empty"
    try:
        target = (path.parent / imp.path).resolve(strict=False)
    except (OSError, RuntimeError, ValueError) as exc:  # symlink loops, names the file system refuses
        return "E0512", f"cannot resolve import '{_short(imp.path)}': {type(exc).__name__}: {exc.args[-1]}"
    if root is not None and not target.is_relative_to(root):
        return "E0502", f"import '{_short(imp.path)}' leaves the project root {root}"
    try:
        info = os.stat(target)
    except FileNotFoundError:
        return "E0504", f"cannot find imported file '{_short(imp.path)}'"
    except (OSError, ValueError) as exc:
        return "E0512", f"cannot resolve import '{_short(imp.path)}': {type(exc).__name__}: {exc.args[-1]}"
    if stat.S_ISDIR(info.st_mode):
        return "E0513", f"import '{_short(imp.path)}' is a directory, not a spec file"
    if not stat.S_ISREG(info.st_mode):
        return "E0514", f"import '{_short(imp.path)}' is not a regular file (a device, FIFO or socket)"
    if info.st_size > MAX_FILE_BYTES:
        return "E0515", f"imported file '{_short(imp.path)}' is {info.st_size:,} bytes (at most {MAX_FILE_BYTES:,})"
    return target


def _short(p: str, n: int = 60) -> str:
    return p if len(p) <= n else p[:n] + "..."


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
    if isinstance(text, bytes):
        text = decode(text, file)
    sources[file] = text
    if path is not None:
        try:
            path = path.resolve()
            root = (root or path.parent).resolve()
        except (OSError, RuntimeError, ValueError) as exc:
            d = Diagnostic("E0512", f"cannot resolve '{file}': {type(exc).__name__}", Span(file, 1, 1, 1, 2))
            raise error_for([d], {file: text}) from None
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
        target = _problem(imp, path, root)
        if not isinstance(target, Path):
            diags.error(*target, imp.span)
            continue
        if target in stack or target == path:
            chain = " -> ".join(p.name for p in (*stack, path, target))
            diags.error("E0503", f"import cycle: {chain}", imp.span)
            continue
        sub_file = _display(target, root)
        try:
            sub_text = read_spec(target, sub_file)
        except OSError as exc:
            diags.error("E0504", f"cannot read '{_short(imp.path)}': {exc.strerror or exc}", imp.span)
            continue
        except SpecError as exc:
            sources.update(exc.sources)
            diags.extend(exc.diagnostics)
            continue
        sources[sub_file] = sub_text
        try:
            unit.imports[imp.alias] = _load(sub_text, sub_file, target, root, sources, (*stack, path))
        except SpecError as exc:
            sources.update(exc.sources)
            diags.extend(exc.diagnostics)
    diags.raise_if_any()
    return unit


def _display(target: Path, root: Path | None) -> str:
    try:
        return str(target.relative_to(root.parent if root else target.parent))
    except ValueError:
        return str(target)
