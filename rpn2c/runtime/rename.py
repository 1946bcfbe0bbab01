"""Renaming a value, a parameter, a block, a model or an import alias everywhere it is written: a value or parameter
within its definition, a block parameter also as the keyword argument of every call to its block, a block also where
other files of the workspace call it through their import of its file. Keywords, components, settings,
hyper-parameters, tensor types and heads are refused with the reason; so is a new name that is not a name, is a
keyword, is taken in its scope, or would make the declaring spec, if it checked, fail its check.

Positions are 0-based ``(line, column)`` in characters, as in :mod:`rpn2c.runtime.editor`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rpn2c.runtime import editor
from rpn2c.runtime.roles import Names, keywords, names
from rpn2c.runtime.symbols import Range

RENAMED = ("value", "parameter", "block", "model", "module")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class RenameError(Exception):
    """Why the name under the cursor cannot be renamed, or not to the new name: shown to the user."""


@dataclass(frozen=True)
class Target:
    """What a rename changes: a ``kind`` of :data:`RENAMED` named ``name``, declared in ``file`` (None: the text
    being edited), inside definition ``definition`` for a value or parameter."""

    kind: str
    name: str
    file: Path | None
    definition: str | None = None


class Sources:
    """The other ``.rpn`` files a rename may touch: ``files()`` and each one's ``text(path)`` (None if unreadable)."""

    def files(self) -> list[Path]:
        return []

    def text(self, path: Path) -> str | None:
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None


def _range(t) -> Range:
    return t.line - 1, t.column - 1, t.end_line - 1, t.end_column - 1


def _why_not(n: Names, i: int | None) -> str:
    if i is None:
        return "there is nothing to rename here"
    t = n.tokens[i]
    word = str(t)
    if t.type != "NAME":
        if word in keywords():
            return f"'{word}' is a keyword of the spec language"
        return "there is nothing to rename here: put the cursor on a value, parameter, block, model or import alias"
    role = n.roles[i]
    if role.kind == "component":
        entry = editor.component(word)
        return f"'{word}' is a component of the registry ({entry.family}); components keep their names"
    return {
        "setting": f"'{word}' is a setting of the spec language; settings keep their names",
        "hyper-parameter": f"'{word}' is a hyper-parameter of the component '{role.owner}'; it keeps its name",
        "type": f"'{word}' is a tensor type",
        "dimension": f"'{word}' is a dimension of a tensor type: it is not declared anywhere to rename",
        "head": f"'{word}' names a head of its layer; values, parameters, blocks, models and import aliases are "
                "renamed",
    }.get(role.kind, f"'{word}' is not defined in this file")


def _definition_at(n: Names, scope: int | None) -> str | None:
    return n.definitions[scope][1] if scope in n.definitions else None


def target(text: str, line: int, col: int, path: Path | None = None) -> tuple[Target, Range]:
    """What renaming at ``(line, col)`` changes and the range of the name there; :class:`RenameError` if nothing."""
    n = names(text)
    i = n.at(text, line, col)
    role = n.roles.get(i) if i is not None else None
    if role is None:
        raise RenameError(_why_not(n, i))
    name, here = str(n.tokens[i]), _range(n.tokens[i])
    if role.kind in ("value", "parameter"):
        return Target(role.kind, name, None, _definition_at(n, role.scope)), here
    if role.kind in ("block", "model", "module"):
        return Target(role.kind, name, None), here
    if role.kind == "imported block" or (role.kind == "argument" and "." in role.owner):
        alias = role.owner.split(".")[0]
        declared = editor._imported(path, n.outline.imports[alias][0]) if alias in n.outline.imports else None
        if declared is None:
            raise RenameError(f"the file imported as '{alias}' is not found")
        if role.kind == "imported block":
            return Target("block", name, declared), here
        return Target("parameter", name, declared, role.owner.split(".", 1)[1]), here
    if role.kind == "argument":
        return Target("parameter", name, None, role.owner), here
    raise RenameError(_why_not(n, i))


def _occurrences(n: Names, t: Target, declaring: bool, aliases: list[str]) -> list[int]:
    """Token indices of ``t`` in a text: the declaring file's (``declaring``), or an importer's through
    ``aliases``."""
    out = []
    for k, role in n.roles.items():
        if str(n.tokens[k]) != t.name:
            continue
        if declaring:
            if t.kind in ("value", "parameter"):
                ok = (role.kind in ("value", "parameter") and _definition_at(n, role.scope) == t.definition) or (
                    t.kind == "parameter" and role.kind == "argument" and role.owner == t.definition)
            elif t.kind == "module":
                ok = role.kind == "module" and role.owner == t.name
            else:
                ok = role.kind == t.kind
        elif t.kind == "block":
            ok = role.kind == "imported block" and role.owner in aliases
        else:
            ok = role.kind == "argument" and role.owner in {f"{a}.{t.definition}" for a in aliases}
        if ok:
            out.append(k)
    return out


def _aliases_of(n: Names, path: Path | None, declared: Path) -> list[str]:
    """The aliases under which the text at ``path`` imports ``declared``."""
    return [a for a, (p, _) in n.outline.imports.items() if editor._imported(path, p) == declared]


def rename(text: str, line: int, col: int, new: str, path: Path | None = None,
           sources: Sources | None = None) -> dict[Path | None, list[tuple[Range, str]]]:
    """The edits renaming what is at ``(line, col)`` to ``new``, by file (None: the text being edited); raises
    :class:`RenameError` with the reason when it cannot."""
    sources = sources or Sources()
    t, _ = target(text, line, col, path)
    _check_new_name(new)
    here = path.resolve() if path is not None else None
    declared = t.file.resolve() if t.file is not None else here
    texts: dict[Path | None, str] = {None: text}
    if declared is not None and declared != here:
        declaring_text = sources.text(declared)
        if declaring_text is None:
            raise RenameError(f"cannot read {declared}")
        texts[declared] = declaring_text
    edits: dict[Path | None, list[tuple[Range, str]]] = {}
    for key, src in list(texts.items()):
        n = names(src)
        is_declaring = (key is None and declared == here) or (key is not None and key == declared)
        if is_declaring:
            _check_free(n, t, new)
        aliases = [] if is_declaring else _aliases_of(n, path, declared)
        found = _occurrences(n, t, is_declaring, aliases)
        if found:
            edits[key] = [(_range(n.tokens[k]), new) for k in found]
    if t.kind in ("block", "parameter") and declared is not None:
        for other in sources.files():
            other = other.resolve()
            if other in (here, declared):
                continue
            src = sources.text(other)
            if src is None or declared.name not in src:
                continue
            n = names(src)
            found = _occurrences(n, t, False, _aliases_of(n, other, declared))
            if found:
                texts[other] = src
                edits[other] = [(_range(n.tokens[k]), new) for k in found]
    key = None if declared == here else declared  # the declaring file: the importers' checks read it from disk
    if key in edits:
        _check_still_checks(texts[key], edits[key], key if key is not None else path)
    return edits


def _check_new_name(new: str) -> None:
    if not _NAME.fullmatch(new):
        raise RenameError(f"'{new}' is not a name (a letter or '_', then letters, digits or '_')")
    if new in keywords():
        raise RenameError(f"'{new}' is a keyword of the spec language")


def _check_free(n: Names, t: Target, new: str) -> None:
    """``new`` is not already taken where ``t`` lives."""
    if new == t.name:
        return
    if t.kind in ("value", "parameter"):
        taken = [r for k, r in n.roles.items() if r.declaration and r.kind in ("value", "parameter")
                 and str(n.tokens[k]) == new and _definition_at(n, r.scope) == t.definition]
        if taken:
            raise RenameError(f"'{new}' is already a {taken[0].kind} of {t.definition}")
    elif t.kind in ("block", "model"):
        if new in n.outline.definitions:
            raise RenameError(f"'{new}' is already a {n.outline.definitions[new].kind} of this file")
        if editor.component(new) is not None:
            raise RenameError(f"'{new}' is a component of the registry: a {t.kind} of that name would hide it")
    elif new in n.outline.imports:
        raise RenameError(f"'{new}' is already an import alias of this file")


def _check_still_checks(text: str, edits: list[tuple[Range, str]], path: Path | None) -> None:
    """A text that checked must still check once renamed: the checker's first new error is the reason."""
    file = str(path) if path is not None else "<editor>"
    if editor.check_text(text, file, path=path):
        return  # it had errors already: the rename cannot make that worse in a way worth refusing
    after = editor.check_text(apply(text, edits), file, path=path)
    if after:
        raise RenameError(f"the renamed spec would not check: {after[0].message}")


def apply(text: str, edits: list[tuple[Range, str]]) -> str:
    """``text`` with each single-line range replaced (ranges do not overlap)."""
    lines = text.split("\n")
    for (line, col, _, end_col), new in sorted(edits, reverse=True):
        lines[line] = lines[line][:col] + new + lines[line][end_col:]
    return "\n".join(lines)
