"""Readouts of one position against hand-written torch in float64, both lowerings, values and gradients:
``item(x, index = k)`` is ``x[:, k]`` of a sequence (DeiT's distillation token ``x[:, 1]``) and ``x[:, :, k]`` of a
signal ``[B, C, T]``, ``last``/``first`` read a signal's last/first step (a TCN's ``x[:, :, -1]``); negative indices
count from the end; an index outside a known length is the located E0355, outside a symbolic one a runtime
InputError."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.testing import assert_close

import rpn2c
from rpn2c.errors import InputError, SpecError


def _spec(input_type: str, *lines: str) -> str:
    return "model m {\n  input x: " + input_type + "\n" + "".join(f"  {ln}\n" for ln in lines) + "  return y\n}\n"


def _both(text):
    torch.manual_seed(0)
    fast = rpn2c.compile(text).double()
    ref = rpn2c.compile(text, reference=True).double()
    ref.load_state_dict(fast.state_dict())
    assert "ItemModule(" in repr(fast) and "LiteralItem(" in repr(ref)  # the oracle's own form
    return fast, ref


def _agree(model, x, want_fn):
    x = x.detach().requires_grad_()
    got, want = model(x), want_fn(x)
    assert_close(got, want, rtol=0, atol=0)
    w = torch.randn_like(got)
    (g,), (h,) = torch.autograd.grad((got * w).sum(), [x]), torch.autograd.grad((want * w).sum(), [x])
    assert_close(g, h, rtol=0, atol=0)


@given(n=st.integers(1, 7), d=st.integers(1, 4), data=st.data(), signal=st.booleans(), symbolic=st.booleans())
@settings(max_examples=25, deadline=None)
def test_item_reads_position_k_of_a_sequence_or_a_signal(n, d, data, signal, symbolic):
    k = data.draw(st.integers(-n, n - 1))
    length = "T" if symbolic else n
    typ = f"signal[B, {d}, {length}]" if signal else f"sequence[B, {length}, {d}]"
    text = _spec(typ, f"y = item(x, index = {k})")
    assert str(rpn2c.check(text).node("y").type) == f"vector[B, {d}]"
    x = torch.randn(3, *((d, n) if signal else (n, d)), dtype=torch.float64)
    for model in _both(text):
        _agree(model, x, (lambda v: v[:, :, k]) if signal else (lambda v: v[:, k]))


@pytest.mark.parametrize("op, index", [("last", -1), ("first", 0)])
def test_last_and_first_read_a_signals_steps(op, index):
    """A TCN's readout ``x[:, :, -1]`` of a ``[B, C, T]`` signal, over a symbolic T."""
    text = _spec("signal[B, 4, T]", f"y = {op}(x)")
    assert str(rpn2c.check(text).node("y").type) == "vector[B, 4]"
    for model in _both(text):
        for t in (1, 6):
            _agree(model, torch.randn(2, 4, t, dtype=torch.float64), lambda v: v[:, :, index])


def test_deits_class_and_distillation_readouts():
    """DeiT: two learned tokens put first, the prediction the mean of a head on x[:, 0] and one on x[:, 1]."""
    text = _spec("sequence[B, T, 6]", "p = prepend_token(prepend_token(x))",
                 "c = head(first(p)) {", "  out = 3", "}",
                 "dist = head(item(p, index = 1)) {", "  out = 3", "}",
                 "y = mul(add(c, dist), 0.5)")
    for model in _both(text):
        st_ = dict(model.named_parameters())
        cls_token, dist_token = st_["p.token"], st_["p_prepend_token.token"]  # the outer one is put first

        def deit(v):
            tokens = torch.cat([cls_token.expand(v.shape[0], 1, -1), dist_token.expand(v.shape[0], 1, -1), v], 1)
            cls_out = tokens[:, 0] @ st_["c.psi.weight"].T + st_["c.bias"]
            dist_out = tokens[:, 1] @ st_["dist.psi.weight"].T + st_["dist.bias"]
            return (cls_out + dist_out) / 2

        x = torch.randn(2, 5, 6, dtype=torch.float64)
        assert_close(model(x), deit(x), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("typ, index, says", [
    ("sequence[B, 3, 8]", 3,
     r"position 3, outside the 3 items of sequence\[B, 3, 8\]: the index must lie in \[-3, 2\]"),
    ("sequence[B, 3, 8]", -4, r"position -4, outside the 3 items"),
    ("signal[B, 2, 5]", 5, r"outside the 5 steps of signal\[B, 2, 5\]"),
])
def test_an_index_outside_a_known_length_is_e0355_at_the_call(typ, index, says):
    with pytest.raises(SpecError, match=says) as err:
        rpn2c.check(_spec(typ, f"y = item(x, index = {index})"))
    d = err.value.diagnostics[0]
    assert d.code == "E0355" and (d.span.line, d.span.col) == (3, 7)


@pytest.mark.parametrize("typ", ["vector[B, 4]", "image[B, 2, 4, 4]"])
def test_what_has_no_item_or_time_axis_is_refused(typ):
    with pytest.raises(SpecError, match="reads the item axis of a sequence or set") as err:
        rpn2c.check(_spec(typ, "y = item(x, index = 0)"))
    assert err.value.diagnostics[0].code == "E0403"


@pytest.mark.parametrize("index, need", [(2, 3), (-4, 4)])
def test_a_symbolic_length_too_short_is_an_input_error(index, need):
    model = rpn2c.compile(_spec("sequence[B, T, 2]", f"y = item(x, index = {index})"))
    with pytest.raises(InputError, match=f"needs at least {need} items, got an input of 2"):
        model(torch.randn(1, 2, 2))
