"""The ``.rpn`` files of an editor's workspace: found under its folders (hidden folders, virtual environments and
build output skipped), read once per change on disk (an open document's text wins), each cut into its names once
per text. Workspace symbols and cross-file renames read it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rpn2c.runtime.rename import Sources
from rpn2c.runtime.roles import Names, names

MAX_FILES = 5000  # a workspace larger than this is searched in its first MAX_FILES spec files
MAX_SYMBOLS = 500
_SKIPPED = {"node_modules", "__pycache__", "site-packages", "build", "dist", "venv", "env"}


@dataclass(frozen=True)
class WorkspaceSymbol:
    """A model, block, parameter or value of a file: its name's place (0-based, characters)."""

    name: str
    kind: str  # model | block | parameter | value
    path: Path
    line: int
    col: int
    container: str | None


class Workspace(Sources):
    """The workspace's spec files; ``open_texts()`` gives the open documents' texts by path."""

    def __init__(self, roots: list[Path], open_texts=dict):
        self.roots, self.open_texts = roots, open_texts
        self._disk: dict[Path, tuple[tuple[int, int], str]] = {}  # path -> ((mtime, size), text)
        self._names: dict[Path, tuple[str, Names]] = {}

    def files(self) -> list[Path]:
        """Every ``.rpn`` file under the roots, and the open ones."""
        found: list[Path] = []
        for root in self.roots:
            for folder, dirs, files in os.walk(root):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED)
                found += [Path(folder, f).resolve() for f in sorted(files) if f.endswith(".rpn")]
                if len(found) >= MAX_FILES:
                    break
        found = list(dict.fromkeys(found[:MAX_FILES]))
        seen = set(found)
        return found + [p for p in self.open_texts() if p not in seen]

    def text(self, path: Path) -> str | None:
        opened = self.open_texts().get(path)
        if opened is not None:
            return opened
        try:
            st = path.stat()
        except OSError:
            return None
        stamp = (st.st_mtime_ns, st.st_size)
        cached = self._disk.get(path)
        if cached is None or cached[0] != stamp:
            text = super().text(path)
            if text is None:
                return None
            cached = self._disk[path] = (stamp, text)
        return cached[1]

    def names(self, path: Path) -> Names | None:
        text = self.text(path)
        if text is None:
            return None
        cached = self._names.get(path)
        if cached is None or cached[0] != text:
            cached = self._names[path] = (text, names(text))
        return cached[1]

    def index(self) -> None:
        """Read and cut every file now (what the first workspace symbol search would otherwise wait for)."""
        for path in self.files():
            self.names(path)

    def symbols(self, query: str) -> list[WorkspaceSymbol]:
        """Models and blocks whose name holds ``query``'s letters in order (any case); with a query also the
        parameters and values; best matches first, at most :data:`MAX_SYMBOLS`."""
        q = query.lower()
        found = []
        for path in self.files():
            n = self.names(path)
            for sym in _symbols(n, path) if n is not None else ():
                if (q or sym.kind in ("model", "block")) and _matches(q, sym.name.lower()):
                    found.append(sym)
        found.sort(key=lambda s: (_rank(q, s.name.lower()), s.kind not in ("model", "block"), s.name, str(s.path),
                                  s.line))
        return found[:MAX_SYMBOLS]


def _symbols(n: Names, path: Path) -> list[WorkspaceSymbol]:
    out = []
    for i, role in n.roles.items():
        if role.declaration and role.kind in ("model", "block", "parameter", "value"):
            t = n.tokens[i]
            container = n.definitions[role.scope][1] if role.scope in n.definitions else None
            out.append(WorkspaceSymbol(str(t), role.kind, path, t.line - 1, t.column - 1, container))
    return out


def _matches(q: str, name: str) -> bool:
    it = iter(name)
    return all(ch in it for ch in q)


def _rank(q: str, name: str) -> int:
    return 0 if name == q else 1 if name.startswith(q) else 2 if q in name else 3
