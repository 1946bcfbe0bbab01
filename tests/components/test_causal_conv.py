"""``causal_conv(x, kernel = k)`` (Mamba's short depthwise convolution) in float64 against hand-written torch:
``nn.Conv1d(C, C, k, groups = C, padding = k − 1)`` on ``xᵀ`` with its last k − 1 outputs dropped, as Mamba writes
it, in both lowerings (the reference builds each channel's banded Toeplitz matrix), values and gradients; the
matrix's closed form, causality, the parameter count and the type rule."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

import rpn2c
from rpn2c.errors import SpecError
from rpn2c.functional.causal_conv import causal_conv_matrix


def _spec(t, c, k, bias):
    return f"""
model m {{
  input x: sequence[B, {t}, {c}]
  y = causal_conv(x, kernel = {k}, bias = {"true" if bias else "false"})
  return y
}}
"""


@given(t=st.integers(1, 9), c=st.integers(1, 4), k=st.integers(1, 5), bias=st.booleans(),
       reference=st.booleans())
@settings(max_examples=25, deadline=None)
def test_causal_conv_is_mambas_padded_conv1d(t, c, k, bias, reference):
    torch.manual_seed(t * 31 + c * 7 + k)
    model = rpn2c.compile(_spec(t, c, k, bias), reference=reference).double()
    conv = torch.nn.Conv1d(c, c, k, groups=c, padding=k - 1, bias=bias).double()
    with torch.no_grad():
        conv.weight.copy_(model.y.weight)
        if bias:
            conv.bias.copy_(model.y.bias)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in conv.parameters())
    x = torch.randn(2, t, c, dtype=torch.float64, requires_grad=True)
    want = conv(x.transpose(1, 2))[..., :t].transpose(1, 2)
    got = model(x)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-13)
    w = torch.randn_like(got)
    grads = torch.autograd.grad((got * w).sum(), [x, model.y.weight])
    want_grads = torch.autograd.grad((want * w).sum(), [x, conv.weight])
    for g, h in zip(grads, want_grads):
        torch.testing.assert_close(g, h, rtol=0, atol=1e-12)


def test_the_reference_matrix_is_the_banded_toeplitz_of_the_taps():
    w = torch.arange(1.0, 7.0, dtype=torch.float64).reshape(2, 1, 3)  # channel 0: taps 1, 2, 3
    m = causal_conv_matrix(w, 5)
    want = torch.tensor([[3, 0, 0, 0, 0], [2, 3, 0, 0, 0], [1, 2, 3, 0, 0], [0, 1, 2, 3, 0], [0, 0, 1, 2, 3]],
                        dtype=torch.float64)
    assert torch.equal(m[0], want) and torch.equal(m[1], want + 3 * (want > 0))


def test_an_item_never_reads_a_later_one():
    model = rpn2c.compile(_spec(8, 3, 4, True)).double()
    x = torch.randn(1, 8, 3, dtype=torch.float64, requires_grad=True)
    (jac,) = torch.autograd.grad(model(x)[0, 4].sum(), [x])
    assert (jac[0, 5:] == 0).all() and (jac[0, 1:5] != 0).all() and (jac[0, 0] == 0).all()


def test_a_symbolic_length_and_the_count():
    text = _spec("T", 6, 4, True)
    assert rpn2c.check(text).param_count == 6 * 4 + 6
    model = rpn2c.compile(text).double()
    for t in (1, 3, 10):
        assert model(torch.randn(2, t, 6, dtype=torch.float64)).shape == (2, t, 6)


@pytest.mark.parametrize("input_type, says", [("vector[B, 4]", "sequence"), ("sequence[B, 5, F]", "channel")])
def test_what_is_not_a_sequence_of_known_width_is_refused(input_type, says):
    text = f"model m {{\n  input x: {input_type}\n  y = causal_conv(x, kernel = 2)\n  return y\n}}\n"
    with pytest.raises(SpecError, match=says) as err:
        rpn2c.check(text)
    assert err.value.diagnostics[0].span.line == 3
