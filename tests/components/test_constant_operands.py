"""A number among the operands of add, sub and mul is a constant operand (`+ eps`, GELU's 0.044715, `1 − m`,
scale factors): the same function as hand-written torch in both lowerings, one tensor op per call, and a located
error where numbers cannot stand."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

import rpn2c

OPS = {"add": torch.add, "sub": torch.sub, "mul": torch.mul}


@settings(deadline=None, max_examples=30)
@given(op=st.sampled_from(sorted(OPS)), value=st.floats(-4, 4, allow_nan=False), first=st.booleans(),
       reference=st.booleans())
def test_a_number_operand_is_the_constant_of_the_torch_op(op, value, first, reference):
    args = f"{value!r}, x" if first else f"x, {value!r}"
    text = f"model m {{\n  input x: sequence[B, T, 3]\n  y = {op}({args})\n  return y\n}}\n"
    model = rpn2c.compile(text, reference=reference).double()
    x = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    c = torch.tensor(value, dtype=torch.float64)
    want = OPS[op](c, x) if first else OPS[op](x, c)
    got = model(x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    (g,) = torch.autograd.grad(got.sum(), x)
    (h,) = torch.autograd.grad(want.sum(), x)
    torch.testing.assert_close(g, h, rtol=0, atol=0)


def test_the_tanh_gelu_written_out_with_its_constants_is_torchs():
    """GPT-2's ``gelu_new`` as the library writes it: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))."""
    text = ("model m(c = 0.7978845608028654) {\n  input x: sequence[B, T, 4]\n"
            "  cube = mul(x, mul(x, mul(x, 0.044715)))\n  inner = mul(add(x, cube), c)\n"
            "  y = mul(mul(x, 0.5), add(tanh(inner), 1.0))\n  return y\n}\n")
    model = rpn2c.compile(text).double()
    x = torch.randn(3, 7, 4, dtype=torch.float64)
    want = torch.nn.functional.gelu(x, approximate="tanh")
    torch.testing.assert_close(model(x), want, rtol=0, atol=1e-15)
    assert math.isclose(0.7978845608028654, math.sqrt(2 / math.pi))


def test_a_parameter_expression_is_a_constant_and_spec_hashes_without_numbers_are_unchanged():
    base = "model m(d = 16) {\n  input x: sequence[B, T, 4]\n  y = mul(x, %s)\n  return y\n}\n"
    model = rpn2c.compile(base % "1.0 / d").double()
    x = torch.randn(1, 2, 4, dtype=torch.float64)
    torch.testing.assert_close(model(x), x / 16, rtol=0, atol=0)
    plain = rpn2c.check("model m {\n  input x: sequence[B, T, 4]\n  y = add(x, x)\n  return y\n}\n")
    assert "constant" not in str(plain.canonical())


@pytest.mark.parametrize("call, message", [
    ("mul(1.0, 2.0)", "at most one number"),
    ("mul(x, 1.0, 2.0)", "at most one number"),
    ('add(x, "a")', "takes a number or a tensor value"),
    ("sub(x, true)", "takes a number or a tensor value"),
])
def test_numbers_that_cannot_be_operands_are_located_errors(call, message):
    text = f"model m {{\n  input x: sequence[B, T, 4]\n  y = {call}\n  return y\n}}\n"
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(text)
    d = info.value.diagnostics[0]
    assert d.code == "E0310" and message in d.message and d.span.line == 3
