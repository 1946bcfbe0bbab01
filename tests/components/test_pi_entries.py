"""π registry entries: tinyBIG's 5 remainders (+ RPN v1's expansion remainder), closed forms, counts, gradchecks,
lowerings, and the pinned placement decision (π added once, after channel and head fusion: erratum 3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rpn2c
from rpn2c.components.registry import REGISTRY
from tests.test_lowering_equivalence import _rand, assert_equivalent

F64 = torch.float64

# tinyBIG's 5 remainder classes (tinybig_notes §1.3.4) -> rpn2c
TINYBIG = {
    "constant_remainder": "constant(c = 0.5)",
    "zero_remainder": "zero",
    "one_remainder": "one",
    "identity_remainder": "identity",
    "linear_remainder": "linear",
}


def _model(pi: str, m: int = 4, n: int = 4, extra: str = "") -> str:
    return f"model m {{ input x: vector[B, {m}]  y = head(x) {{ out = {n}  {extra}  pi = {pi} }} return y }}"


def _pi_module(pi: str, m: int = 4, n: int = 4):
    torch.manual_seed(0)
    model = rpn2c.compile(_model(pi, m, n)).double()
    return model, [mod for name, mod in model.named_modules() if name.endswith(".pi") or name == "pi"]


def test_every_tinybig_remainder_has_an_entry():
    assert len(TINYBIG) == 5
    for text in TINYBIG.values():
        assert text.split("(")[0] in REGISTRY["remainder"]
    assert "expansion" in REGISTRY["remainder"]


@pytest.mark.parametrize("pi", [*TINYBIG.values(), "constant(c = -2.0, learnable = true)", "linear(bias = false)",
                                "identity(activation = \"tanh\")", "linear(activation = \"relu\")",
                                "expansion(kappa = \"chebyshev(d = 2)\")"])
def test_lowerings_agree_and_counts_match(pi):
    assert_equivalent(_model(pi), {"x": _rand(3, 4)})
    assert_equivalent(f"model m {{ input x: sequence[B, 5, 4]  y = head(x) {{ out = 4  pi = {pi} }} return y }}",
                      {"x": _rand(2, 5, 4)})


def test_closed_forms():
    x = _rand(3, 4)
    base = rpn2c.compile(_model("zero")).double()
    for pi, ref in [("constant(c = 2.5)", lambda x: 2.5 * np.ones((3, 4))), ("one", lambda x: np.ones((3, 4))),
                    ("identity", lambda x: x), ("identity(activation = \"relu\")", lambda x: np.maximum(x, 0))]:
        model = rpn2c.compile(_model(pi)).double()
        model.load_state_dict(base.state_dict(), strict=False)
        got = (model(x) - base(x)).detach().numpy()
        np.testing.assert_allclose(got, ref(x.numpy()), rtol=1e-12, atol=1e-12)


def test_linear_and_expansion_remainders_are_their_formulas():
    x = _rand(3, 4)
    _, (lin,) = _pi_module("linear", 4, 3)
    W, b = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    np.testing.assert_allclose(lin(x).detach().numpy(), x.numpy() @ W.T + b, rtol=1e-12)
    _, (exp,) = _pi_module("expansion(kappa = \"chebyshev(d = 2)\")", 4, 3)
    X = x.numpy()
    kappa = np.stack([X, 2 * X**2 - 1], axis=-1).reshape(3, 8)  # [T1(x_j), T2(x_j)] attribute-major
    W, b = exp.linear.weight.detach().numpy(), exp.linear.bias.detach().numpy()
    np.testing.assert_allclose(exp(x).detach().numpy(), kappa @ W.T + b, rtol=1e-12)


@pytest.mark.parametrize("pi,m,n,count", [("zero", 4, 3, 0), ("constant", 4, 3, 0), ("one", 4, 3, 0),
                                          ("constant(learnable = true)", 4, 3, 1), ("identity", 3, 3, 0),
                                          ("linear", 4, 3, 15), ("linear(bias = false)", 4, 3, 12),
                                          ("expansion(kappa = \"chebyshev(d = 3)\")", 4, 3, 3 * 12 + 3),
                                          ("expansion", 2, 3, 3 * (2 + 4) + 3)])
def test_counts(pi, m, n, count):
    head = n * m + n  # identity ψ + tied bias
    assert rpn2c.check(_model(pi, m, n)).param_count == head + count
    model = rpn2c.compile(_model(pi, m, n))
    assert sum(p.numel() for p in model.parameters()) == head + count


@pytest.mark.parametrize("pi", ["constant(c = 0.3, learnable = true)", "linear", "expansion(kappa = \"chebyshev\")",
                                "identity(activation = \"tanh\")"])
def test_gradcheck(pi):
    _, (mod,) = _pi_module(pi, 4, 4)
    names = [k for k, _ in mod.named_parameters()]
    leaves = [p.detach().clone().requires_grad_() for p in mod.parameters()]
    x = _rand(2, 4).requires_grad_()

    def f(x, *ws):
        return torch.func.functional_call(mod, dict(zip(names, ws)), (x,))

    assert torch.autograd.gradcheck(f, (x, *leaves))


def test_remainder_is_added_once_after_channel_and_head_fusion():
    """Erratum 3: eq (30) adds π inside the per-(head, channel) fusion; rpn2c adds it once (the toolkit's order).

    With ψ = eye and no bias each channel outputs x: two channels summed + π(x) = x give 3x (4x if per channel).
    """
    x = _rand(3, 4)
    head = rpn2c.compile(_model("identity", extra="psi = eye  bias = false  channels = 2  channel_fusion = sum"))
    torch.testing.assert_close(head.double()(x), 3 * x)
    layer = rpn2c.compile("model m { input x: vector[B, 4]  y = layer(x) { head a { psi = eye  bias = false } "
                          "head b { psi = eye  bias = false }  fusion = sum  pi = identity } return y }")
    torch.testing.assert_close(layer.double()(x), 3 * x)


def test_remainder_on_images_acts_on_channels():
    spec = ("model m { input x: image[B, 3, 5, 5]  y = head(x) { xi_attribute = grid_patch(size = 3, pad = 1) "
            "out = 3  pi = REM } return y }")
    assert_equivalent(spec.replace("REM", "identity"), {"x": _rand(2, 3, 5, 5)})
    assert_equivalent(spec.replace("REM", "constant(c = 1.5)"), {"x": _rand(2, 3, 5, 5)})
    assert_equivalent(spec.replace("out = 3", "out = 2").replace("REM", "linear"), {"x": _rand(2, 3, 5, 5)})


def test_shape_rule_errors():
    for pi, msg in [("identity", "needs input features m = output features n"),
                    ("identity(activation = \"softmax\")", "not an elementwise activation"),
                    ("expansion(kappa = \"nope\")", "unknown inner κ 'nope'"),
                    ("expansion(kappa = \"chebyshev(degree = 2)\")", "chebyshev"),
                    ("expansion(kappa = \"flatten\")", "unknown inner κ")]:
        with pytest.raises(rpn2c.SpecError) as exc:
            rpn2c.check(_model(pi, 4, 3 if pi == "identity" else 4))
        code = "E0303" if pi.startswith("expansion") else "E0402"  # a bad κ' is a schema error
        assert exc.value.diagnostics[0].code == code and msg in exc.value.diagnostics[0].message, exc.value
