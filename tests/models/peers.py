"""What the tests of the shipped specs of today's models share: the compiled spec in float64, weights away from
the libraries' initialisation, a model's outputs with every parameter's gradient, and the two directions of a
weight map (the library's weights into the spec give the library's outputs and gradients; the spec's into the
library give the spec's outputs)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch

import rpn2c

SPECS = Path(__file__).resolve().parents[2] / "specs"
EXACT = 1e-12  # float64: outputs agree to this absolute difference


@lru_cache(maxsize=None)
def _optimized(spec: str, model: str, params: tuple):
    """The checked and optimised graph of ``specs/{spec}.rpn``'s ``model`` (both passes are pure: one run per
    configuration serves every test and both lowerings, as ``rpn2c.compile`` would build them)."""
    from rpn2c.passes import optimize

    path = SPECS / f"{spec}.rpn"
    return optimize(rpn2c.check(path.read_text(encoding="utf-8"), str(path), model=model,
                                 params={k: _thawed(v) for k, v in params}))


def compiled(spec: str, model: str, params: dict, reference: bool = False) -> torch.nn.Module:
    """``specs/{spec}.rpn``'s ``model`` with ``params``, built by the default (or the reference) lowering, in
    float64 and eval mode."""
    from rpn2c.lower.build import CompiledModel

    graph = _optimized(spec, model, tuple(sorted((k, _frozen(v)) for k, v in params.items())))
    return CompiledModel(graph, reference=reference).double().eval()


def _frozen(v):
    return tuple(_frozen(x) for x in v) if isinstance(v, (list, tuple)) else v


def _thawed(v):
    return [_thawed(x) for x in v] if isinstance(v, tuple) else v


def randomise(model: torch.nn.Module, norms: tuple[str, ...] = ()) -> torch.nn.Module:
    """Every parameter drawn afresh (matrices N(0, 0.2²), vectors N(0, 0.5²), the vectors whose name holds one of
    ``norms`` U(0.5, 1.5)): the libraries start biases at 0 and norm weights at 1, where a bias or a norm weight
    mapped to the wrong place, or a q, k, v block to another's, would not show."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.normal_(0, 0.2)
            elif any(n in name for n in norms):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0, 0.5)
    return model


def outputs_and_grads(model: torch.nn.Module, run) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
    """``run(model)``'s outputs (a tensor or a tuple) and each parameter's gradient of a loss that weighs every
    output feature differently (duplicated names kept: a tied tensor appears under each)."""
    model.zero_grad()
    out = run(model)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o * torch.linspace(-1, 1, o.shape[-1], dtype=o.dtype)).sum() for o in outs)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters(remove_duplicate=False)}
    return tuple(o.detach() for o in outs), grads


def assert_grads_equal(name: str, spec_grads: dict, library_grads: dict, layers, shapes, atol: float = 1e-11) -> None:
    """Each library parameter's gradient equals the spec's moved through the weight map ``name``."""
    from rpn2c.frontends import weights

    mapped = weights.to_library(name, spec_grads, layers, shapes)
    assert set(mapped) == set(library_grads)
    for key, grad in mapped.items():
        torch.testing.assert_close(grad, library_grads[key], rtol=0, atol=atol, msg=key)


def parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def assert_library_into_spec(name: str, library: torch.nn.Module, spec: torch.nn.Module, layers, run_library,
                             run_spec=None, *, count: int | None = None, grad_atol: float = 1e-11) -> tuple:
    """The spec has the library's parameter count (``count`` when given); the library's weights moved in by the
    map ``name`` give the library's outputs (``run_library(library)`` against ``run_spec(spec)``; by default the
    spec is run as the library is) to 1e-12 and every library parameter's gradient to ``grad_atol``. Returns the
    spec's outputs."""
    from rpn2c.frontends import weights

    assert parameters(spec) == parameters(library)
    if count is not None:
        assert parameters(spec) == count
    spec.load_state_dict(weights.to_spec(name, library.state_dict(), layers, spec.state_dict()))
    want, library_grads = outputs_and_grads(library, run_library)
    got, spec_grads = outputs_and_grads(spec, run_spec or run_library)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=EXACT)
    assert_grads_equal(name, spec_grads, library_grads, layers, library.state_dict(), grad_atol)
    return got


def assert_spec_into_library(name: str, spec: torch.nn.Module, library: torch.nn.Module, layers, run_spec,
                             run_library) -> None:
    """The spec's weights moved into the library by the map ``name`` give the spec's outputs to 1e-12."""
    from rpn2c.frontends import weights

    library.load_state_dict(weights.to_library(name, spec.state_dict(), layers, library.state_dict()))
    with torch.no_grad():
        got, want = run_library(library), run_spec(spec)
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=EXACT)
