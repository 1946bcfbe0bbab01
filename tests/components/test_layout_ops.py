"""The layout ops to_grid, channel_shuffle, slice_positions and the processing functions softmin, l2_normalize and
stochastic_depth: their types, both lowerings against torch (outputs and gradients), channel_shuffle against its
literal permutation matrix, stochastic depth draw for draw against torchvision's rule, located errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

import rpn2c


def _spec(*lines: str, input_type: str) -> str:
    return "model m {\n  input x: " + input_type + "\n" + "".join(f"  {ln}\n" for ln in lines) + "  return y\n}\n"


def _type(text: str, name: str = "y") -> str:
    return str(rpn2c.check(text).node(name).type)


def _agree_with(text: str, x: torch.Tensor, expected):
    """Both lowerings equal ``expected(x)``: outputs and input gradients."""
    for reference in (False, True):
        model = rpn2c.compile(text, reference=reference).double()
        x = x.detach().requires_grad_()
        y, want = model(x), expected(x)
        assert_close(y, want, rtol=1e-12, atol=1e-12)
        w = torch.randn_like(y)
        (g,) = torch.autograd.grad((y * w).sum(), [x])
        (r,) = torch.autograd.grad((want * w).sum(), [x])
        assert_close(g, r)


def _shuffle_matrix(c: int, g: int) -> torch.Tensor:
    """The literal permutation P [C, C]: P[j·g + i, i·C/g + j] = 1."""
    p = torch.zeros(c, c, dtype=torch.float64)
    for i in range(g):
        for j in range(c // g):
            p[j * g + i, i * (c // g) + j] = 1
    return p


@settings(max_examples=20, deadline=None)
@given(g=st.integers(1, 4), per=st.integers(1, 3), h=st.integers(1, 3), w=st.integers(1, 3))
def test_channel_shuffle_is_its_permutation_matrix(g, per, h, w):
    c = g * per
    text = _spec(f"y = channel_shuffle(x, groups = {g})", input_type=f"image[B, {c}, {h}, {w}]")
    assert _type(text) == f"image[B, {c}, {h}, {w}]"
    x = torch.randn(2, c, h, w, dtype=torch.float64)
    p = _shuffle_matrix(c, g)
    _agree_with(text, x, lambda x: torch.einsum("dc,bchw->bdhw", p, x))
    torch_way = x.view(2, g, per, h, w).transpose(1, 2).reshape(2, c, h, w)
    assert torch.equal(rpn2c.compile(text).double()(x), torch_way)


@pytest.mark.parametrize("input_type, size", [("sequence[B, 6, 4]", [2, 3]), ("sequence[B, 5, 2]", [5]),
                                              ("sequence[B, 8, 1]", [2, 2, 2])])
def test_to_grid_inverts_to_items(input_type, size):
    text = _spec(f"y = to_grid(x, size = {size})", input_type=input_type)
    n, c = (int(d) for d in input_type.split("[")[1].rstrip("]").split(", ")[1:])
    assert _type(text) == f"{ {1: 'signal', 2: 'image', 3: 'volume'}[len(size)]}[B, {c}, {', '.join(map(str, size))}]"
    x = torch.randn(2, n, c, dtype=torch.float64)
    _agree_with(text, x, lambda x: x.transpose(1, 2).reshape(2, c, *size))
    back = rpn2c.compile(_spec(f"g = to_grid(x, size = {size})", "y = to_items(g)", input_type=input_type)).double()
    assert torch.equal(back(x), x)


@pytest.mark.parametrize("input_type, axis, start, stop, index", [
    ("signal[B, 2, 7]", 0, 0, -2, (slice(None), slice(None), slice(0, -2))),
    ("image[B, 2, 4, 5]", 1, 1, 3, (slice(None), slice(None), slice(None), slice(1, 3))),
    ("image[B, 1, 4, 5]", 0, -1, None, (slice(None), slice(None), slice(-1, None))),
])
def test_slice_positions_keeps_a_range_of_one_spatial_axis(input_type, axis, start, stop, index):
    bounds = f"axis = {axis}, start = {start}" + ("" if stop is None else f", stop = {stop}")
    text = _spec(f"y = slice_positions(x, {bounds})", input_type=input_type)
    dims = [int(d) for d in input_type.split("[")[1].rstrip("]").split(", ")[1:]]
    x = torch.randn(2, *dims, dtype=torch.float64)
    assert _type(text).endswith(f"{', '.join(map(str, x[index].shape[1:]))}]")
    _agree_with(text, x, lambda x: x[index])


@pytest.mark.parametrize("line, input_type, message", [
    ("y = to_grid(x, size = [2, 2])", "sequence[B, 5, 3]", "needs 4 items"),
    ("y = to_grid(x, size = [2, 2])", "sequence[B, T, 3]", "needs 4 items"),
    ("y = to_grid(x, size = [2])", "vector[B, 2]", "to_grid needs a batched"),
    ("y = channel_shuffle(x, groups = 4)", "image[B, 6, 2, 2]", "divisible by 4"),
    ("y = channel_shuffle(x, groups = 2)", "sequence[B, 3, 4]", "channel_shuffle needs a grid"),
    ("y = slice_positions(x, axis = 1)", "signal[B, 2, 5]", "needs a grid with that spatial axis"),
    ("y = slice_positions(x, start = 5)", "signal[B, 2, 5]", "keeps no position"),
])
def test_layout_op_errors_are_located(line, input_type, message):
    with pytest.raises(rpn2c.SpecError) as exc:
        rpn2c.check(_spec(line, input_type=input_type), "m.rpn")
    d = exc.value.diagnostics[0]
    assert d.code == "E0403" and message in d.message and d.span.line == 3


@pytest.mark.parametrize("input_type, dim", [("vector[B, 5]", -1), ("sequence[B, 3, 4]", -1),
                                             ("image[B, 3, 2, 2]", 1)])
def test_softmin_and_l2_normalize_act_on_the_feature_axis(input_type, dim):
    dims = [int(d) for d in input_type.split("[")[1].rstrip("]").split(", ")[1:]]
    x = torch.randn(2, *dims, dtype=torch.float64)
    _agree_with(_spec("y = softmin(x)", input_type=input_type), x, lambda x: torch.nn.functional.softmin(x, dim))
    _agree_with(_spec("y = l2_normalize(x)", input_type=input_type), x,
                lambda x: torch.nn.functional.normalize(x, dim=dim))
    zero = torch.zeros(2, *dims, dtype=torch.float64)
    assert torch.equal(rpn2c.compile(_spec("y = l2_normalize(x)", input_type=input_type)).double()(zero), zero)


def _torchvision_stochastic_depth(x, p, mode):
    """torchvision.ops.stochastic_depth in training mode, as torchvision writes it."""
    survival = 1.0 - p
    size = [x.shape[0]] + [1] * (x.ndim - 1) if mode == "row" else [1] * x.ndim
    noise = torch.empty(size, dtype=x.dtype).bernoulli_(survival)
    if survival > 0.0:
        noise.div_(survival)
    return x * noise


@pytest.mark.parametrize("mode", ["row", "batch"])
@pytest.mark.parametrize("p", [0.0, 0.5, 1.0])
def test_stochastic_depth_drops_what_torchvision_drops(mode, p):
    text = _spec(f'y = stochastic_depth(x, p = {p}, mode = "{mode}")', input_type="sequence[B, 3, 4]")
    x = torch.randn(16, 3, 4, dtype=torch.float64)
    for reference in (False, True):
        model = rpn2c.compile(text, reference=reference).double()
        assert torch.equal(model.eval()(x), x)  # the identity in eval mode
        model.train()
        torch.manual_seed(5)
        got = model(x)
        torch.manual_seed(5)
        want = x if p == 0.0 else _torchvision_stochastic_depth(x, p, mode)
        assert torch.equal(got, want)
    if p == 0.5 and mode == "row":  # whole samples dropped, the others scaled by 1 / (1 − p)
        kept = (got != 0).flatten(1).all(1)
        assert 0 < kept.sum() < 16 and (got[~kept] == 0).all() and torch.equal(got[kept], 2 * x[kept])
