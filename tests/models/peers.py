"""What the tests of the shipped specs of today's models share: weights away from the libraries' initialisation,
and a model's outputs with every parameter's gradient."""

from __future__ import annotations

import torch


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


def assert_grads_equal(name: str, spec_grads: dict, library_grads: dict, layers: int, shapes) -> None:
    """Each library parameter's gradient equals the spec's moved through the weight map ``name``."""
    from rpn2c.frontends import weights

    mapped = weights.to_library(name, spec_grads, layers, shapes)
    assert set(mapped) == set(library_grads)
    for key, grad in mapped.items():
        torch.testing.assert_close(grad, library_grads[key], rtol=0, atol=1e-11, msg=key)
