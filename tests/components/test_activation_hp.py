"""Activation hyper-parameters a kernel would refuse are located spec errors, never a run-time traceback (found by
the fuzzer: hardtanh with min_val > max_val, rrelu with lower > upper, a slope beyond float32, a negative lambd)."""

import pytest
import torch

import rpn2c

TEXT = "model m {\n  input x: vector[B, 4]\n  y = head(x) { out = 3  post = [%s] }\n  return y\n}\n"


@pytest.mark.parametrize("act, says", [
    ("hardtanh(min_val = 2.0, max_val = 1.0)", "min_val"),
    ("rrelu(lower = 0.5, upper = 0.1)", "lower"),
    ("leaky_relu(negative_slope = 1e300)", "negative_slope"),
    ("elu(alpha = -1e9)", "alpha"),
    ("hardshrink(lambd = -1.0)", "lambd"),
    ("softshrink(lambd = 2e7)", "lambd"),
    ("threshold(threshold = 0.5, value = 1e40)", "value"),
    ("prelu(init = 1e12)", "init"),
])
def test_bad_activation_settings_are_located_errors(act, says):
    with pytest.raises(rpn2c.SpecError, match=says) as err:
        rpn2c.compile(TEXT % act)
    assert "3:" in str(err.value).splitlines()[0]  # at the activation, line 3


@pytest.mark.parametrize("act", ["hardtanh(min_val = -2.0, max_val = 2.0)", "rrelu(lower = 0.1, upper = 0.1)",
                                 "leaky_relu(negative_slope = -3.0)", "hardshrink(lambd = 0.0)"])
def test_edge_settings_still_run(act):
    y = rpn2c.compile(TEXT % act).eval()(torch.randn(2, 4))
    assert torch.isfinite(y).all()
