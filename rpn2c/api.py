"""The public entry points: check a spec into an IR graph, compile it into a torch module."""

from __future__ import annotations

import contextlib
import gc
from pathlib import Path

import rpn2c.components  # noqa: F401  (the registry: each family module is imported when first read)
from rpn2c.check.budget import Limits
from rpn2c.check.elaborate import elaborate
from rpn2c.check.loader import load, read_spec
from rpn2c.ir.graph import Graph


@contextlib.contextmanager
def _collector_paused():
    """Pause the cyclic garbage collector while the compiler allocates (parse trees, validated hyper-parameters,
    terms, modules): otherwise full collections, each walking every object torch and the caller hold, run
    several times per build of a large spec. The collector resumes afterwards, as it was."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def check(text: str | bytes, file: str = "<string>", *, model: str | None = None, path: str | Path | None = None,
          root: str | Path | None = None, params: dict | None = None, limits: Limits | dict | None = None) -> Graph:
    """Parse and check ``text``: the IR graph with every shape inferred, or a :class:`rpn2c.SpecError`.

    ``params`` overrides the model's parameter defaults, e.g. ``params={"hidden": 64}``; ``limits`` raises or
    lowers the resource budgets, e.g. ``limits={"max_params": 4 * 10**9, "max_memory": 16 * 2**30}``
    (:class:`rpn2c.Limits`). ``bytes`` are decoded as UTF-8 (a bad byte is a located error).
    """
    with _collector_paused():
        unit, sources = load(text, file, path=Path(path) if path else None, root=Path(root) if root else None)
        return elaborate(unit, sources, model, params, limits)


def check_file(path: str | Path, *, model: str | None = None, root: str | Path | None = None,
               params: dict | None = None, limits: Limits | dict | None = None) -> Graph:
    """Check a spec file; its imports resolve relative to it and must stay inside ``root`` (default: its folder)."""
    p = Path(path)
    return check(read_spec(p), str(path), model=model, path=p, root=root, params=params, limits=limits)


def compile(text: str, file: str = "<string>", *, model: str | None = None, reference: bool = False,
            torch_compile: bool | dict = False, path: str | Path | None = None,
            root: str | Path | None = None, params: dict | None = None, limits: Limits | dict | None = None):
    """Compile spec text into a ``torch.nn.Module``.

    ``reference=True`` selects the literal lowering that materialises the paper's matrices (the oracle);
    ``torch_compile=True`` (or a dict of ``torch.compile`` options) wraps the module with ``torch.compile``;
    ``params`` overrides the model's parameter defaults; ``limits`` the resource budgets (see :func:`check`).
    """
    from rpn2c.lower.build import CompiledModel
    from rpn2c.passes import optimize

    with _collector_paused():
        graph = optimize(check(text, file, model=model, path=path, root=root, params=params, limits=limits))
        module = CompiledModel(graph, reference=reference)
    if torch_compile:
        import torch

        opts = torch_compile if isinstance(torch_compile, dict) else {}
        return torch.compile(module, **opts)
    return module


def compile_file(path: str | Path, *, model: str | None = None, reference: bool = False,
                 torch_compile: bool | dict = False, root: str | Path | None = None, params: dict | None = None,
                 limits: Limits | dict | None = None):
    """Compile a spec file (imports resolved relative to it, confined to ``root``)."""
    p = Path(path)
    return compile(read_spec(p), str(path), model=model, reference=reference, torch_compile=torch_compile,
                   path=p, root=root, params=params, limits=limits)
