"""from_torch converts every elementwise activation of torch.nn, as a module and as a functional call or tensor
method inside a traced model: the spec carries its parameters (slopes, bounds, alpha, beta, lambd) as the processing
function's hyper-parameters, and the compiled model equals torch in float64 (outputs, input and parameter gradients,
both lowerings)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close
from unification_helpers import assert_matches_torch, rand

import rpn2c
from rpn2c.frontends.torch_import import TorchImportError

# (module, the processing it becomes as the spec writes it)
MODULES = [
    (nn.ReLU(), "relu"), (nn.Tanh(), "tanh"), (nn.Sigmoid(), "sigmoid"), (nn.SiLU(), "silu"),
    (nn.ReLU6(), "relu6"), (nn.Hardswish(), "hardswish"), (nn.Hardsigmoid(), "hardsigmoid"),
    (nn.Hardtanh(), "hardtanh"), (nn.Hardtanh(-0.5, 0.7), "hardtanh(min_val = -0.5, max_val = 0.7)"),
    (nn.SELU(), "selu"), (nn.CELU(), "celu"), (nn.CELU(0.6), "celu(alpha = 0.6)"), (nn.Mish(), "mish"),
    (nn.Softsign(), "softsign"), (nn.Tanhshrink(), "tanhshrink"), (nn.LogSigmoid(), "log_sigmoid"),
    (nn.Hardshrink(), "hardshrink"), (nn.Hardshrink(0.3), "hardshrink(lambd = 0.3)"),
    (nn.Softshrink(0.4), "softshrink(lambd = 0.4)"), (nn.Threshold(0.1, -2.0), "threshold(threshold = 0.1"),
    (nn.GELU(), "gelu"), (nn.GELU(approximate="tanh"), 'gelu(approximate = "tanh")'),
    (nn.ELU(), "elu"), (nn.ELU(0.3), "elu(alpha = 0.3)"),
    (nn.LeakyReLU(), "leaky_relu"), (nn.LeakyReLU(0.2), "leaky_relu(negative_slope = 0.2)"),
    (nn.Softplus(), "softplus"), (nn.Softplus(beta=2.0, threshold=5.0), "softplus(beta = 2.0, threshold = 5.0)"),
    (nn.RReLU(0.1, 0.3), "rrelu(lower = 0.1, upper = 0.3)"),
    (nn.PReLU(), "prelu"),
]


def _ids(cases):
    return [repr(m) for m, _ in cases]


def _input_grads_match(module, spec, x):
    """d/dx of a random linear functional: torch and the compiled spec (default and reference lowerings)."""
    w = None
    x1 = x.clone().requires_grad_()
    y = module(x1)
    w = rand(*y.shape, seed=3)
    (gx,) = torch.autograd.grad((y * w).sum(), x1)
    for reference in (False, True):
        model = spec.compile(reference=reference)
        x2 = x.clone().requires_grad_()
        (got,) = torch.autograd.grad((model(x2) * w).sum(), x2)
        assert_close(got, gx, rtol=1e-8, atol=1e-9, msg=lambda m, r=reference: f"{m}\nreference={r}\n{spec.text}")


@pytest.mark.parametrize(("act", "spec_form"), MODULES, ids=_ids(MODULES))
def test_activation_after_linear_equals_torch(act, spec_form):
    """Linear then the activation: folded into the head's post list, parameters written out."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(5, 4), act).double()
    x = rand(3, 5, scale=2.0)
    spec = assert_matches_torch(module, (x,))
    assert spec_form in spec.text, spec.text
    _input_grads_match(module.eval(), spec, x)


@pytest.mark.parametrize(("act", "spec_form"), MODULES, ids=_ids(MODULES))
def test_activation_alone_on_an_image_equals_torch(act, spec_form):
    """The activation as a standalone processing op on a grid (no head to fold into)."""
    module = nn.Sequential(act).double() if not isinstance(act, nn.PReLU) else nn.Sequential(nn.PReLU()).double()
    x = rand(2, 3, 4, 4, scale=2.0)
    spec = assert_matches_torch(module, (x,))
    _input_grads_match(module.eval(), spec, x)


def test_prelu_per_channel_on_an_image_equals_torch():
    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(2, 3, 3), nn.PReLU(3)).double()
    with torch.no_grad():
        module[1].weight.copy_(torch.tensor([0.1, -0.3, 0.7]))
    x = rand(2, 2, 5, 5)
    spec = assert_matches_torch(module, (x,))
    assert "prelu(num_parameters = 3)" in spec.text
    _input_grads_match(module.eval(), spec, x)


def test_prelu_per_channel_on_a_sequence_is_refused():
    """torch's PReLU(n) slopes axis 1, the items of [B, T, F]: no per-feature form."""
    with pytest.raises(TorchImportError, match="num_parameters=4"):
        rpn2c.from_torch(nn.Sequential(nn.Linear(3, 4), nn.PReLU(4)).double(), (rand(2, 4, 3),))


def test_rrelu_is_random_in_training_and_the_mean_slope_in_eval():
    model = rpn2c.from_torch(nn.Sequential(nn.Linear(3, 4), nn.RReLU()).double(), (rand(2, 3),)).compile()
    x = -rand(64, 3).abs()
    model.train()
    torch.manual_seed(1)
    a = model(x)
    torch.manual_seed(2)
    assert not torch.equal(a, model(x))


# ------------------------------------------------------------------------------------------------ functional, traced
FUNCTIONAL = [
    ("F.relu6", lambda x: F.relu6(x), "relu6"), ("F.hardswish", lambda x: F.hardswish(x), "hardswish"),
    ("F.hardsigmoid", lambda x: F.hardsigmoid(x), "hardsigmoid"),
    ("F.hardtanh", lambda x: F.hardtanh(x, -0.5, 2.0), "hardtanh(min_val = -0.5, max_val = 2.0)"),
    ("F.selu", lambda x: F.selu(x), "selu"), ("torch.selu", lambda x: torch.selu(x), "selu"),
    ("F.celu", lambda x: F.celu(x, alpha=0.5), "celu(alpha = 0.5)"), ("F.mish", lambda x: F.mish(x), "mish"),
    ("F.softsign", lambda x: F.softsign(x), "softsign"), ("F.tanhshrink", lambda x: F.tanhshrink(x), "tanhshrink"),
    ("F.logsigmoid", lambda x: F.logsigmoid(x), "log_sigmoid"),
    ("F.hardshrink", lambda x: F.hardshrink(x, 0.3), "hardshrink(lambd = 0.3)"),
    ("x.hardshrink", lambda x: x.hardshrink(0.3), "hardshrink(lambd = 0.3)"),
    ("F.softshrink", lambda x: F.softshrink(x, lambd=0.2), "softshrink(lambd = 0.2)"),
    ("F.threshold", lambda x: F.threshold(x, 0.2, 5.0), "threshold(threshold = 0.2, value = 5.0)"),
    ("F.gelu(tanh)", lambda x: F.gelu(x, approximate="tanh"), 'gelu(approximate = "tanh")'),
    ("F.elu", lambda x: F.elu(x, 0.4), "elu(alpha = 0.4)"),
    ("F.leaky_relu", lambda x: F.leaky_relu(x, 0.1), "leaky_relu(negative_slope = 0.1)"),
    ("F.softplus", lambda x: F.softplus(x, beta=3.0), "softplus(beta = 3.0)"),
    ("F.rrelu(eval)", lambda x: F.rrelu(x, 0.1, 0.3), "leaky_relu(negative_slope = 0.2)"),
    ("x.sigmoid", lambda x: x.sigmoid(), "sigmoid"), ("x.tanh", lambda x: x.tanh(), "tanh"),
    ("x.relu", lambda x: x.relu(), "relu"), ("F.silu", lambda x: F.silu(x), "silu"),
]


class _Traced(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fc, self.fn, self.out = nn.Linear(5, 4), fn, nn.Linear(4, 2)

    def forward(self, x):
        return self.out(self.fn(self.fc(x)))


@pytest.mark.parametrize(("label", "fn", "spec_form"), FUNCTIONAL, ids=[c[0] for c in FUNCTIONAL])
def test_functional_activation_in_a_traced_model_equals_torch(label, fn, spec_form):
    torch.manual_seed(0)
    module = _Traced(fn).double()
    x = rand(3, 5, scale=2.0)
    spec = assert_matches_torch(module, (x,))
    assert spec_form in spec.text, spec.text
    _input_grads_match(module.eval(), spec, x)


def test_rrelu_with_training_true_is_a_located_error():
    with pytest.raises(TorchImportError, match="training=True"):
        rpn2c.from_torch(_Traced(lambda x: F.rrelu(x, training=True)).double(), (rand(3, 5),))
