"""Broadcasting in the elementwise ops add / mul / sub: the type rule (size-1 sample, item and spatial axes broadcast,
the channel/feature axis does not; per-sample vectors over grids and items), both lowerings against torch's
broadcasting in float64 (outputs and input gradients), and the located error for shapes that do not broadcast."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import rpn2c
from rpn2c.components.base import ShapeRuleError
from rpn2c.components.ops import _elementwise_type
from rpn2c.ir.types import broadcast_dim, grid, items, vector


def test_broadcast_dim():
    assert broadcast_dim(1, "H") == "H" and broadcast_dim(7, 1) == 7 and broadcast_dim("T", "T") == "T"
    assert broadcast_dim("T", "N") is None and broadcast_dim(3, 4) is None


@pytest.mark.parametrize("ins, out", [
    ([grid("B", 8, (5, 6)), grid("B", 8, (1, 1))], grid("B", 8, (5, 6))),  # squeeze-and-excitation gate
    ([grid("B", 8, (1, 1)), grid("B", 8, ("H", "W"))], grid("B", 8, ("H", "W"))),
    ([grid("B", 8, (1, 6)), grid("B", 8, (5, 1))], grid("B", 8, (5, 6))),
    ([items(1, "T", 4), items("B", "T", 4)], items("B", "T", 4)),  # a [1, T, d] value added to [B, T, d]
    ([items("B", "T", 4), items("B", 1, 4)], items("B", "T", 4)),
    ([grid("B", 3, (4, 4)), vector("B", 3)], grid("B", 3, (4, 4))),
    ([vector("B", 3), grid("B", 3, (1, 1)), grid("B", 3, (4, 4))], grid("B", 3, (4, 4))),
    ([vector(1, 5), vector("B", 5)], vector("B", 5)),
])
def test_broadcast_type(ins, out):
    for what in ("add", "mul", "sub"):
        t = _elementwise_type(ins, what)
        assert (t.kind, tuple(t.shape), t.role) == (out.kind, tuple(out.shape), out.role)


@pytest.mark.parametrize("ins, arg, words", [  # arg: located at the call (None) or at the disagreeing argument
    ([grid("B", 8, (5, 6)), grid("B", 8, (2, 1))], None, "axis 2 is 5 against 2"),
    ([grid("B", 8, (5, 6)), grid("B", 1, (5, 6))], None, "channel axis equal"),  # channels never broadcast
    ([items("B", "T", 4), items("B", "N", 4)], None, "axis 1 is T against N"),
    ([items("B", "T", 4), grid("B", 4, (3,))], None, "equal shapes"),
    ([grid("B", 4, (3, 3)), grid("B", 4, (3,))], None, "equal shapes"),
    ([grid("B", 4, (3, 3)), vector("B", 5)], 1, "vector[B, 4]"),
    ([grid("B", 4, (3, 3)), grid("B", 4, (1, 2)), vector("B", 4)], 1, "axis 3 is 3 against 2"),
])
def test_shapes_that_do_not_broadcast(ins, arg, words):
    with pytest.raises(ShapeRuleError) as err:
        _elementwise_type(ins, "mul")
    assert words in str(err.value) and err.value.arg == arg
    assert str(ins[0]) in str(err.value) or "vector" in words


def _spec(*inputs: str, expr: str) -> str:
    return ("model m {\n" + "".join(f"  input {i}\n" for i in inputs) + f"  y = {expr}\n  return y\n}}\n")


@pytest.mark.parametrize("a, b, sa, sb", [
    ("image[B, 3, 4, 5]", "image[B, 3, 1, 1]", (2, 3, 4, 5), (2, 3, 1, 1)),
    ("image[B, 3, 1, 1]", "image[B, 3, 4, 5]", (2, 3, 1, 1), (2, 3, 4, 5)),
    ("signal[B, 3, 1]", "signal[B, 3, 6]", (2, 3, 1), (2, 3, 6)),
    ("sequence[1, T, 4]", "sequence[B, T, 4]", (1, 5, 4), (3, 5, 4)),
    ("sequence[B, T, 4]", "sequence[B, 1, 4]", (3, 5, 4), (3, 1, 4)),
])
@pytest.mark.parametrize("op, fn", [("mul", torch.mul), ("add", torch.add), ("sub", torch.sub)])
def test_both_lowerings_equal_torch_broadcasting(a, b, sa, sb, op, fn):
    text = _spec(f"a: {a}", f"b: {b}", expr=f"{op}(a, b)")
    g = torch.Generator().manual_seed(0)
    for reference in (False, True):
        model = rpn2c.compile(text, reference=reference).double()
        xa = torch.randn(*sa, generator=g, dtype=torch.float64, requires_grad=True)
        xb = torch.randn(*sb, generator=g, dtype=torch.float64, requires_grad=True)
        y, want = model(xa, xb), fn(xa, xb)
        assert_close(y, want, rtol=1e-12, atol=1e-12)
        w = torch.randn(want.shape, generator=g, dtype=torch.float64)
        got = torch.autograd.grad((y * w).sum(), [xa, xb])
        ref = torch.autograd.grad((want * w).sum(), [xa, xb])
        for u, v in zip(got, ref):
            assert_close(u, v)


def test_a_non_broadcasting_pair_is_located_with_both_shapes():
    text = _spec("x: sequence[B, T, 4]", "p: sequence[1, N, 4]", expr="add(x, p)")
    with pytest.raises(rpn2c.SpecError) as err:
        rpn2c.compile(text)
    msg = str(err.value)
    assert "E0403" in err.value.codes, msg
    assert "sequence[B, T, 4]" in msg and "sequence[1, N, 4]" in msg and "<string>:4:7" in msg, msg
