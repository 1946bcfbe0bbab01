"""Declared dependencies cover every import, so a missing install step fails here rather than on a user's machine.

Each third-party import in the project is classified by where it sits:
- *guarded*: inside ``try: ... except ImportError`` (or a ``pytest.importorskip``): a deliberate optional, free;
- otherwise it must come from a distribution that the installed ``rpn2c`` metadata declares: the library
  (``rpn2c/``) from the core dependencies; tests, examples and benchmarks from core plus the ``test`` extra.
Distributions are read from the installed metadata (what ``pip install -e ".[test]"`` actually installed), and
import names are mapped to distributions with ``importlib.metadata.packages_distributions``.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata as md
import pkgutil
import re
import sys
from pathlib import Path

import pytest

import rpn2c

ROOT = Path(__file__).resolve().parents[1]
# local helper modules imported by scripts and tests next to them
LOCAL = {"rpn2c", "tests", "benchmarks", "examples", "_common", "unification_helpers", "convert_checks",
         "catalog_vision", "catalog_vision_layout", "catalog_text_graph"}
# the library imports these only where a user asked for them, and names the package in its error
OPTIONAL_LAZY = {"torch_geometric"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> dict[str | None, set[str]]:
    """Distributions declared by the installed rpn2c: {None: core, extra: ...}."""
    out: dict[str | None, set[str]] = {None: set()}
    for line in md.requires("rpn2c") or []:  # e.g. 'statsmodels>=0.14; extra == "data"'
        name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)[1]
        extra = re.search(r"""extra\s*==\s*['"]([^'"]+)['"]""", line)
        out.setdefault(extra[1] if extra else None, set()).add(_norm(name))
    return out


@functools.cache
def _import_names() -> dict[str, list[str]]:
    return md.packages_distributions()  # scans every installed distribution: once per run


def _distribution_of(module: str) -> set[str]:
    return {_norm(d) for d in _import_names().get(module, ())}


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = {"ImportError", "ModuleNotFoundError", "Exception"}
    t = handler.type
    items = t.elts if isinstance(t, ast.Tuple) else [t]
    return t is None or any(isinstance(i, ast.Name) and i.id in names for i in items)


def _imports(path: Path):
    """Yield (top-level module, line, guarded, in_function) for each absolute import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))

    def walk(node, guarded, in_function):
        for child in ast.iter_child_nodes(node):
            g, f = guarded, in_function
            if isinstance(node, ast.Try) and child in node.body and any(map(_catches_import_error, node.handlers)):
                g = True
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                f = True
            if isinstance(child, ast.Import):
                for a in child.names:
                    yield a.name.split(".")[0], child.lineno, g, f
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                yield child.module.split(".")[0], child.lineno, g, f
            yield from walk(child, g, f)

    yield from walk(tree, False, False)


def _third_party(folder: str):
    for path in sorted((ROOT / folder).rglob("*.py")):
        for module, line, guarded, in_function in _imports(path):
            if module in sys.stdlib_module_names or module in LOCAL or module == "__future__":
                continue
            yield path.relative_to(ROOT), line, module, guarded, in_function


def _undeclared(folder: str, allowed: set[str], lazy_ok: set[str] = frozenset()) -> list[str]:
    bad = []
    for path, line, module, guarded, in_function in _third_party(folder):
        if guarded or (in_function and module in lazy_ok):
            continue
        dists = _distribution_of(module)
        if not dists & allowed:
            bad.append(f"{path}:{line}: imports {module!r} (from {sorted(dists) or 'no installed distribution'}), "
                       f"which the declared dependencies do not provide")
    return bad


def test_the_library_imports_only_core_dependencies():
    core = _declared()[None]
    assert {"torch", "lark", "pydantic", "networkx", "numpy", "scipy", "pyyaml", "scikit-learn"} <= core
    assert _undeclared("rpn2c", core, OPTIONAL_LAZY) == []


@pytest.mark.parametrize("folder", ["tests", "examples", "benchmarks"])
def test_tests_examples_and_benchmarks_import_only_core_and_test_dependencies(folder):
    declared = _declared()
    assert _undeclared(folder, declared[None] | declared.get("test", set())) == []


def test_every_declared_core_and_test_dependency_is_installed():
    """The README's test command installs rpn2c[test]: every declared package of it must be importable metadata."""
    declared = _declared()
    missing = []
    for dist in sorted(declared[None] | declared.get("test", set())):
        try:
            md.version(dist)
        except md.PackageNotFoundError:
            missing.append(dist)
    assert missing == [], f"declared but not installed (the set-up command is incomplete): {missing}"


def test_every_library_module_imports():
    """Importing each module of the installed package catches an import that only fails at run time."""
    failures = []
    for info in pkgutil.walk_packages(rpn2c.__path__, "rpn2c."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except Exception as exc:  # noqa: BLE001 - every failure is reported with its module
            failures.append(f"{info.name}: {type(exc).__name__}: {exc}")
    assert failures == []


def test_the_checker_sees_an_undeclared_import(tmp_path, monkeypatch):
    """The check itself can fail: an unguarded import of a package that no dependency provides is reported."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        "import torch\ntry:\n    import graspologic\nexcept ImportError:\n    graspologic = None\n"
        "import pytest_benchmark\n\ndef f():\n    import torch_geometric\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    bad = _undeclared("pkg", _declared()[None], OPTIONAL_LAZY)
    assert len(bad) == 1 and "pkg/m.py:6: imports 'pytest_benchmark'" in bad[0]
    assert len(_undeclared("pkg", _declared()[None])) == 2  # the lazy torch_geometric import without the allowance


def test_optional_data_packages_name_an_extra_that_declares_them():
    """The data registry imports some packages by name at run time; the extra its error message names must exist."""
    from rpn2c.data.registry import _PIP

    declared = _declared()
    for module, (dist, extra) in _PIP.items():
        if extra is None:
            continue
        assert _norm(dist) in declared.get(extra, set()), f"{module}: extra {extra!r} does not declare {dist}"
        assert _norm(dist) in declared.get("test", set()), f"{module}: the tests would skip the data sets of {dist}"
