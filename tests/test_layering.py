"""Imports point one way along the pipeline: parse → check → ir → passes → lower → runtime.

Each package of ``rpn2c`` has a rank; a module may import (at any depth, type-only imports included) only from
its own package or from packages of lower rank, and the stages after the checker read only the IR: ``passes``,
``lower`` and ``train`` never import ``check`` or ``syntax``. A new wrong-way import fails here with file and line.
"""

from __future__ import annotations

import ast
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
