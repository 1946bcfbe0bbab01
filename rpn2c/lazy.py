"""Names a module exports but imports on first access (they need torch, which checking a spec does not)."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, table: dict[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for the module ``package``: a name in ``table`` is read from the module
    ``table[name]`` (absolute, or relative to ``package`` with a leading dot) when first accessed, then kept in
    ``namespace`` (the module's globals)."""

    def __getattr__(name: str):
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
