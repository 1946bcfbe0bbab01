"""Imports point one way along the pipeline: parse → check → ir → passes → lower → runtime.

Each package of ``rpn2c`` has a rank; a module may import (at any depth, type-only imports included) only from
its own package or from packages of lower rank, and the stages after the checker read only the IR: ``passes``,
``lower`` and ``train`` never import ``check`` or ``syntax``. A new wrong-way import fails here with file and line.
Inside a package imports form no circle either: a module's shared helpers sit one layer below both of its users,
never in one of them (``frontends``: the converter kit below the converters, recognisers and the driver).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rpn2c"
RANK = {
    "errors": 0, "lazy": 0,  # located errors; names a module imports on first access
    "functional": 1, "syntax": 1, "data": 1,  # pure maths, the parser, data sets: no other stage
    "ir": 2,  # types, the IR graph, shape traces
    "components": 3,  # the registry: schema, shape rule, parameters, implementation
    "check": 4,  # names, blocks, hyper-parameters, shapes -> IR
    "passes": 5,  # the optimiser
    "lower": 6,  # IR -> torch modules
    "train": 7,
    "api": 8,
    "frontends": 9, "runtime": 9,
    "__init__": 10, "__main__": 10,
}


# stages that consume the checked IR and must not reach back into the checker or the parser
IR_ONLY = {"passes": {"check", "syntax"}, "lower": {"check", "syntax"}, "train": {"check", "syntax"},
           "ir": {"components"}}


def _stage(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _internal_imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("rpn2c"):
            names = [node.module] if node.module != "rpn2c" else [f"rpn2c.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("rpn2c")]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if len(parts) > 1:
                yield parts[1], node.lineno


def test_every_module_belongs_to_a_ranked_stage():
    assert {_stage(p) for p in PACKAGE.rglob("*.py")} <= set(RANK) | {"_version"}


def test_imports_point_down_the_pipeline():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        stage = _stage(path)
        for target, line in _internal_imports(path):
            wrong_way = target in RANK and RANK[target] >= RANK.get(stage, 99)
            if target != stage and (wrong_way or target in IR_ONLY.get(stage, ())):
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {stage} imports {target}")
    assert upward == []


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports, at any depth (function-level and type-only imports included);
    ``from p import n`` names module ``p.n`` where there is one, else ``p``; relative imports are resolved."""
    files = {_module(p): p for p in PACKAGE.rglob("*.py")}
    out: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets = out.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                wanted = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""] if node.level
                                else [node.module or ""]).strip(".")
                wanted = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            for target in wanted:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
    return out


def import_cycles() -> list[list[str]]:
    """The strongly connected groups of more than one module in the import graph, each sorted."""
    import networkx as nx

    g = nx.DiGraph([(a, b) for a, targets in import_graph().items() for b in targets])
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def test_no_import_cycles_inside_the_package():
    assert import_cycles() == []


def test_the_cycle_count_sees_function_level_and_relative_imports(tmp_path, monkeypatch):
    """A circle closed only by an import inside a function, or by a relative import, is still a circle."""
    pkg = tmp_path / "rpn2c"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from rpn2c.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from rpn2c.sub.c import g\n")
    (pkg / "sub" / "c.py").write_text("from . import a\n")
    (pkg / "sub" / "d.py").write_text("from .a import x\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    assert import_cycles() == [["rpn2c.sub.a", "rpn2c.sub.b", "rpn2c.sub.c"]]
