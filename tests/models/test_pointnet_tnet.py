"""PointNet with its T-nets (Qi et al. 2017; seed 001 §7.3): ``pointnet_tnet`` of ``examples/specs/pointnet.rpn``.

Equal to a torch PointNet written from the paper — an input T-net predicting a 3 x 3 matrix, a feature T-net
predicting a 16 x 16 one, each ``fc(·) + I`` applied as ``bmm(x, T)`` — with the weights copied over: outputs and
parameter gradients in float64, both lowerings. The orthogonality regulariser 0.001·‖I − A Aᵀ‖²_F of the feature
transform is the training loss's extra term and is absent in evaluation; the transform keeps the model invariant
to the order of the points.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

import rpn2c
from rpn2c.components.impl.feature_transform import regularisation

SPEC = Path(__file__).resolve().parents[2] / "examples" / "specs" / "pointnet.rpn"


class TNet(nn.Module):
    """A small PointNet predicting a k x k matrix: per point k → w → w, max over points, → h → k², plus I."""

    def __init__(self, k, w=32, h=32):
        super().__init__()
        self.k = k
        self.a1, self.a2, self.f1, self.v = nn.Linear(k, w), nn.Linear(w, w), nn.Linear(w, h), nn.Linear(h, k * k)

    def forward(self, x):
        g = torch.relu(self.a2(torch.relu(self.a1(x)))).max(dim=1).values
        return self.v(torch.relu(self.f1(g))).view(-1, self.k, self.k) + torch.eye(self.k, dtype=x.dtype)


class PointNetTNet(nn.Module):
    """The classification PointNet: input T-net, φ₁ (3 → 16 → 16), feature T-net, φ₂ (16 → 64), max, ρ."""

    def __init__(self):
        super().__init__()
        self.t1, self.t2 = TNet(3), TNet(16)
        self.l1, self.l2, self.l3 = nn.Linear(3, 16), nn.Linear(16, 16), nn.Linear(16, 64)
        self.h, self.y = nn.Linear(64, 32), nn.Linear(32, 5)
        self.feature_transform = None

    def forward(self, x):
        x = torch.bmm(x, self.t1(x))
        l2 = torch.relu(self.l2(torch.relu(self.l1(x))))
        self.feature_transform = self.t2(l2)
        f = torch.bmm(l2, self.feature_transform)
        g = torch.relu(self.l3(f)).max(dim=1).values
        return self.y(torch.relu(self.h(g)))


def _state(module):
    """The compiled spec's state dict holding the torch module's weights."""
    linears = {"l1": module.l1, "l2": module.l2, "l3": module.l3, "h": module.h, "y": module.y}
    for t in ("t1", "t2"):
        for part in ("a1", "a2", "f1", "v"):
            linears[f"{t}.{part}"] = getattr(getattr(module, t), part)
    state = {}
    for name, lin in linears.items():
        state[f"{name}.psi.weight"], state[f"{name}.bias"] = lin.weight, lin.bias
    return {k: v.detach().clone() for k, v in state.items()}


@lru_cache(maxsize=None)
def _model(reference):
    return rpn2c.compile_file(SPEC, model="pointnet_tnet", reference=reference).double()


def _pair(reference, seed=0):
    torch.manual_seed(seed)
    module = PointNetTNet().double()
    model = _model(reference)
    model.load_state_dict(_state(module), strict=True)
    return model, module


def _points(b=3, m=7, seed=1):
    return torch.randn(b, m, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_spec_equals_a_torch_pointnet_with_t_nets(reference):
    model, module = _pair(reference)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in module.parameters()) == 17310
    model.train(), module.train()
    x = _points()
    got, want = model(x), module(x)
    assert_close(got, want, rtol=1e-12, atol=1e-12)
    a = module.feature_transform
    want_reg = 0.001 * (torch.eye(16, dtype=a.dtype) - a @ a.transpose(1, 2)).square().sum((1, 2)).mean()
    reg = regularisation(model)
    assert_close(reg, want_reg, rtol=1e-12, atol=1e-15)
    w = torch.randn_like(want)
    names = [n for n, _ in model.named_parameters()]
    mine = dict(zip(names, torch.autograd.grad((got * w).sum() + reg, list(model.parameters()))))
    theirs = torch.autograd.grad((want * w).sum() + want_reg, list(module.parameters()))
    with torch.no_grad():
        for p, g in zip(module.parameters(), theirs):
            p.copy_(g)
    want_grads = _state(module)
    assert mine.keys() == want_grads.keys()
    for n in names:
        assert_close(mine[n], want_grads[n], rtol=1e-12, atol=1e-12)


def test_the_transforms_are_applied_and_start_at_the_identity():
    """With the T-nets' last layers zero, T = I: the network is the plain PointNet on the same weights; with them
    random, the output moves (a transform that was dropped or applied as Tᵀ would break one of the two)."""
    model, module = _pair(False)
    x = _points()
    with torch.no_grad():
        for t in (module.t1, module.t2):
            t.v.weight.zero_(), t.v.bias.zero_()
    model.load_state_dict(_state(module))
    plain = rpn2c.compile_file(SPEC, model="pointnet").double()
    plain.load_state_dict({k: v for k, v in _state(module).items() if not k.startswith("t")})
    assert_close(model(x), plain(x), rtol=1e-12, atol=1e-12)
    module2 = PointNetTNet().double()
    with torch.no_grad():
        module2.load_state_dict(module.state_dict())
        module2.t1.v.bias.copy_(torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]))  # T = I + E_01
    model.load_state_dict(_state(module2))
    assert_close(model(x), module2(x), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(model(x), plain(x))


def test_the_regulariser_is_a_training_term_only():
    model, _ = _pair(False)
    model.eval()
    model(_points())
    assert regularisation(model) is None
    model.train()
    with torch.no_grad():
        model(_points())
    assert regularisation(model) is None  # no gradient to follow: nothing for the loss
    plain = rpn2c.compile_file(SPEC, model="pointnet").double().train()
    plain(_points())
    assert regularisation(plain) is None


@settings(max_examples=10, deadline=None)
@given(size=st.integers(1, 9), reference=st.booleans(), data=st.data())
def test_permuting_the_points_keeps_the_output(size, reference, data):
    perm = torch.tensor(data.draw(st.permutations(range(size))))
    model, _ = _pair(reference)
    x = _points(2, size, seed=size)
    assert_close(model(x[:, perm]), model(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("inputs", "line", "code", "col"), [
    ("input v: vector[B, 9]", "t = as_matrix(v, rows = 4)", "E0360", 17),
    ("input v: vector[B, 8]", "t = as_matrix(v, rows = 2, identity = true)", "E0360", 17),
    ("input x: set[B, M, 3]\n  input s: sequence[B, 4, 4]", "t = transform(x, as_matrix(s))", "E0361", 20),
    ("input x: set[B, M, 4]\n  input v: vector[B, 8]",
     "t = transform(x, as_matrix(v, rows = 4), orthogonality = 0.1)", "E0362", 20),
])
def test_a_matrix_that_does_not_fit_is_located(inputs, line, code, col):
    text = f"model m {{\n  {inputs}\n  {line}\n  return t\n}}\n"
    with pytest.raises(rpn2c.SpecError) as err:
        rpn2c.check(text, "m.rpn")
    [d] = err.value.diagnostics
    assert d.code == code and (d.span.line, d.span.col) == (2 + inputs.count("\n") + 1, col)


def test_training_differentiates_the_loss_plus_the_regulariser():
    from rpn2c.train.loop import _with_penalties

    model, _ = _pair(False)
    model.train()
    loss = model(_points()).square().mean()
    total = _with_penalties(loss, model)
    assert_close(total - loss, regularisation(model))
    assert float((total - loss).detach()) > 0
