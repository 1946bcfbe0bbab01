"""The affine learned ξ ``parameterized(bias = true)`` (MLP-Mixer's token mixing: a Linear across the items) in
float64 against hand-written torch: ``fc(x.transpose(1, 2)).transpose(1, 2)`` on the instance axis, ``fc(x)`` on
the attribute axis, with a learned ψ after it (which an affine ξ does not commute with), channels, both lowerings,
gradients; the reference lowering's literal ``[A | b]`` on the items with a constant item of ones; the counts and
the places a matrix is required (relation, hybrid part)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import rpn2c
from rpn2c.errors import SpecError
from rpn2c.lower import reference


def _spec(t, f, out, width, axis, psi, channels, head_bias):
    return f"""
model m {{
  input x: sequence[B, {t}, {f}]
  y = head(x) {{
    xi_{axis} = parameterized(out = {out}, bias = true)
    psi = {psi}
    out = {width}
    channels = {channels}
    fusion = mean
    bias = {"true" if head_bias else "false"}
    post = [gelu]
  }}
  return y
}}
"""


def _hand(x, state, axis, channels, head_bias, psi):
    """Each channel: ``fc`` across the axis (torch's Linear on the transposed sequence for the items), ψ, bias; the
    channels' mean; GELU."""
    ys = []
    for c in range(channels):
        at = "" if channels == 1 else f".{c}"  # a channel's ξ and ψ: y.xi_instance.0, y.psi.0 (one bias, tied)
        w, b = state[f"y.xi_{axis}{at}.fab.W"], state[f"y.xi_{axis}{at}.bias"]
        z = F.linear(x.transpose(1, 2), w, b).transpose(1, 2) if axis == "instance" else F.linear(x, w, b)
        if psi == "identity":
            z = z @ state[f"y.psi{at}.weight"].T
        else:  # eye: the rectangular identity, torch.eye(n, D)
            z = z @ torch.eye(state["width"], z.shape[-1], dtype=z.dtype).T
        if head_bias:
            z = z + state["y.bias"]
        ys.append(z)
    return F.gelu(torch.stack(ys).mean(0))


@settings(deadline=None, max_examples=25)
@given(t=st.integers(1, 7), f=st.integers(1, 6), out=st.integers(1, 7), axis=st.sampled_from(["instance",
       "attribute"]), psi=st.sampled_from(["eye", "identity"]), width=st.integers(1, 5), channels=st.integers(1, 2),
       head_bias=st.booleans())
def test_the_affine_xi_is_a_linear_across_its_axis(t, f, out, axis, psi, width, channels, head_bias):
    src = _spec(t, f, out, width, axis, psi, channels, head_bias)
    torch.manual_seed(0)
    fast = rpn2c.compile(src, "m.rpn").double()
    ref = rpn2c.compile(src, "m.rpn", reference=True).double()
    state = {k: torch.randn_like(v) for k, v in fast.state_dict().items()}
    fast.load_state_dict(state)
    ref.load_state_dict(state)
    x = torch.randn(3, t, f, dtype=torch.float64)
    want = _hand(x, dict(state, width=width), axis, channels, head_bias, psi)
    w = torch.randn_like(want)
    grads = []
    for model in (fast, ref):
        y = model(x)
        torch.testing.assert_close(y, want, rtol=0, atol=1e-12)
        (y * w).sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    leaves = {n: v.clone().requires_grad_() for n, v in state.items()}
    (_hand(x, dict(leaves, width=width), axis, channels, head_bias, psi) * w).sum().backward()
    for name, leaf in leaves.items():
        for g in grads:
            torch.testing.assert_close(g[name], leaf.grad, rtol=0, atol=1e-12, msg=name)
    n_xi = out * (t if axis == "instance" else f) + out
    n_psi = width * (out if axis == "attribute" else f) if psi == "identity" else 0
    assert sum(p.numel() for p in fast.parameters()) == channels * (n_xi + n_psi) + (width if head_bias else 0)


def test_the_reference_applies_the_literal_augmented_matrix():
    """``[A | b]`` times the items with a row of ones appended: the matrix the reference builds, checked by hand."""
    src = _spec(4, 3, 5, 3, "instance", "eye", 1, False)
    model = rpn2c.compile(src, "m.rpn", reference=True).double()
    xi = next(m for m in model.modules() if hasattr(m, "offset") and m.offset() is not None)
    z = torch.randn(2, 4, 3, dtype=torch.float64)
    a, b = xi.fab.W, xi.bias
    literal = torch.cat([a, b[:, None]], 1) @ torch.cat([z, torch.ones(2, 1, 3, dtype=torch.float64)], 1)
    torch.testing.assert_close(reference.interdependence(xi, z, z, z, {}), literal, rtol=0, atol=1e-14)
    torch.testing.assert_close(xi.apply(z, z, z, {}), literal, rtol=0, atol=1e-14)


@pytest.mark.parametrize("line, message", [
    ("r = relation(x, xi = parameterized(bias = true))", "a relation is a matrix"),
    ("r = head(x) {\n    xi_instance = hybrid(parts = [\"parameterized\", \"chain\"], p1_bias = true)\n  }",
     "a hybrid fuses matrices"),
])
def test_a_matrix_slot_refuses_the_affine_xi(line, message):
    src = f"model m {{\n  input x: sequence[B, 4, 3]\n  {line}\n  return x\n}}\n"
    with pytest.raises(SpecError, match=message):
        rpn2c.check(src, "m.rpn")
