"""Chain ξ on sequences no longer than the hop count: A^h = 0 (or a partial sum) must stay in the autograd graph.

A shift by k ≥ T is the zero matrix; the reference lowering computes ``0 @ z``, which keeps ``requires_grad`` and
gives zero gradients. A default lowering that returned a fresh zeros tensor detached the whole head output (found
by the large hypothesis profile with ``chain(hops = 2)``, T ≤ 2, no bias and π = zero).
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.testing import assert_close

import rpn2c
from rpn2c.functional import structure
from tests.test_lowering_equivalence import _compile_pair, _rand


def _check(text, x):
    fast, ref = _compile_pair(text)
    y_fast, y_ref = fast(x=x), ref(x=x)
    assert y_ref.requires_grad and y_fast.requires_grad, text
    assert_close(y_fast, y_ref, rtol=1e-10, atol=1e-12, msg=lambda m: f"{m}\n{text}")
    w = torch.randn(y_ref.shape, generator=torch.Generator().manual_seed(2), dtype=y_ref.dtype)
    (y_fast * w).sum().backward()
    (y_ref * w).sum().backward()
    grads_ref = dict(ref.named_parameters())
    for name, p in fast.named_parameters():
        assert (p.grad is None) == (grads_ref[name].grad is None), f"grad of {name}\n{text}"
        if p.grad is not None:
            assert_close(p.grad, grads_ref[name].grad, rtol=1e-9, atol=1e-12, msg=lambda m: f"{name}: {m}\n{text}")


@pytest.mark.parametrize("t, hops, accumulate, bidirectional",
                         list(itertools.product([1, 2, 3], [1, 2, 3, 4], [False, True], [False, True])))
def test_short_chain_default_equals_reference_with_gradients(t, hops, accumulate, bidirectional):
    # bias = false, pi = zero: the ξ output is the head's only route to its parameters
    for include_identity in ((True, False) if accumulate else (True,)):
        xi = (f'chain(hops = {hops}, accumulate = {str(accumulate).lower()}, include_identity = '
              f'{str(include_identity).lower()}, direction = "{"bidirectional" if bidirectional else "forward"}")')
        text = f"model c {{ input x: sequence[B, {t}, 3] y = head(x) {{ xi_instance = {xi}  out = 2  bias = false  pi = zero }} return y }}"
        _check(text, _rand(2, t, 3))


@pytest.mark.parametrize("t", [1, 2, 3])
@pytest.mark.parametrize("xi", [
    'chain(direction = "backward", hops = 3, norm = "row")',
    'multihop_chain(direction = "backward")',
    "multihop_chain(accumulate = true, include_identity = false, hops = 0)",
    'inverse_chain()', 'inverse_chain(direction = "bidirectional", norm = "symmetric")',
    'chain(mode = "inverse", alpha = 0.7, self_loop = true, self_scaling = 0.5)',
    'chain(mode = "inverse", alpha = 0.2, direction = "bidirectional", norm = "column")',
    "exponential_chain(alpha = -1.5)", 'exponential_chain(direction = "bidirectional", self_loop = true)',
])
def test_short_chain_variants_default_equals_reference(t, xi):
    text = f"model c {{ input x: sequence[B, {t}, 2] y = head(x) {{ xi_instance = {xi}  out = 2  bias = false  pi = zero }} return y }}"
    _check(text, _rand(2, t, 2))


@pytest.mark.parametrize("k", [-5, -3, 3, 4])
def test_shift_past_the_end_is_zero_but_attached(k):
    x = _rand(2, 3, 4).requires_grad_()
    y = structure.shift(x, k, dim=1)
    assert y.requires_grad and y.shape == x.shape and not y.any()
    (y * 2).sum().backward()
    assert x.grad is not None and not x.grad.any()
    z = structure.chain_apply(x, 1, 0, mode="accumulate", include_identity=False)
    assert z.requires_grad and not z.any()


def test_zero_interdependence_output_stays_attached_to_the_parameters():
    """A zero ξ gives zeros, but the default lowering must keep the graph as the reference (0 @ z) does."""
    text = ("model m {\n  input x: sequence[B, 3, 2]\n  y = head(x) { kappa = chebyshev(d = 2)  "
            "xi_instance = zero()  bias = false  out = 2 }\n  return y\n}\n")
    for reference in (False, True):
        model = rpn2c.compile(text, reference=reference).double()
        y = model(torch.randn(2, 3, 2, dtype=torch.float64))
        assert y.requires_grad and torch.count_nonzero(y) == 0
        y.sum().backward()
        assert all(p.grad is not None for p in model.parameters())
