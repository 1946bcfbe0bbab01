"""The full equality check for a converted model: ``from_torch(module)`` compiles (both lowerings) to a model equal to
``module`` in float64 — outputs, parameter gradients (``assert_matches_torch``), gradients with respect to every
floating-point input, and the number of free parameters."""

from __future__ import annotations

import torch
from torch.testing import assert_close
from unification_helpers import assert_matches_torch, compile_or_skip, flat_arguments, primary, rand


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def assert_same_model(module, args, kwargs=None, *, rtol=1e-8, atol=1e-9, references=(False, True)):
    """``module`` and its converted spec agree: outputs, parameter and input gradients, free-parameter count."""
    kwargs = kwargs or {}
    spec = assert_matches_torch(module, args, kwargs, rtol=rtol, atol=atol, references=references)
    module = module.double().eval()
    for reference in references:
        model = compile_or_skip(spec, reference)
        assert n_params(model) == n_params(module), spec.text
        xs = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
        kws = {k: (v.detach().clone().requires_grad_(v.is_floating_point()) if isinstance(v, torch.Tensor) else v)
               for k, v in kwargs.items()}
        out = primary(module(*xs, **kws))
        w = rand(*out.shape, seed=11)
        (out * w).sum().backward()
        inputs = flat_arguments(module, xs, kws)
        ys = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
        (model(*ys) * w).sum().backward()
        for i, (a, b) in enumerate(zip(inputs, ys)):
            if a.is_floating_point() and a.grad is not None:
                assert b.grad is not None, f"input {i} gets no gradient in the spec (reference={reference})"
                assert_close(b.grad, a.grad, rtol=rtol, atol=atol,
                             msg=lambda m, i=i, r=reference: f"input {i} gradient (reference={r}): {m}\n{spec.text}")
    return spec
