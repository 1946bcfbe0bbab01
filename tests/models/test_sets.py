"""Deep Sets and PointNet (seed 001 §7.2–7.3) as shipped specs (``examples/specs/deep_sets.rpn``, ``pointnet.rpn``).

Each model equals a torch module written from the seed's equations, f = ρ(Σ_m φ(x_m)) (Deep Sets), ρ(max_m φ(x_m))
(PointNet), and the equivariant forms (ρ(x_m, Σ φ) for every element; PointNet's segmentation network on [local;
global]) with the weights copied over: outputs and parameter gradients in float64, both lowerings. Invariance
(f(PX) = f(X)) and equivariance (f(PX) = P f(X)) hold for every permutation P of every set size (hypothesis).
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

SPECS = Path(__file__).resolve().parents[2] / "examples" / "specs"


def _mlp(*widths):
    return nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))


class DeepSets(nn.Module):
    """ρ(Σ_m φ(x_m)): φ and ρ two-layer ReLU MLPs (ρ's last layer linear)."""

    def __init__(self, d=3, h=32, k=4):
        super().__init__()
        self.phi, self.rho = _mlp(d, h, h), _mlp(h, h, k)

    def forward(self, x):
        for lin in self.phi:
            x = torch.relu(lin(x))
        s = x.sum(1)  # the sum over the set's elements
        return self.rho[1](torch.relu(self.rho[0](s)))


class DeepSetsEquivariant(nn.Module):
    """y_m = ρ(x_m, Σ_n φ(x_n)) for every m, ρ(x, s) = W₂ relu(W₁ [x; s] + b₁) + b₂."""

    def __init__(self, d=3, h=32, k=4):
        super().__init__()
        self.phi, self.rho1, self.rho2 = nn.Linear(d, h), nn.Linear(d + h, h), nn.Linear(h, k)

    def forward(self, x):
        s = torch.relu(self.phi(x)).sum(1, keepdim=True).expand(-1, x.shape[1], -1)
        return self.rho2(torch.relu(self.rho1(torch.cat([x, s], -1))))


class PointNet(nn.Module):
    """ρ(max_m φ(x_m)) with φ = 3 → 16 → 16 → 64 shared per point (no T-net) and ρ = 64 → 32 → 5."""

    def __init__(self):
        super().__init__()
        self.phi, self.rho = _mlp(3, 16, 16, 64), _mlp(64, 32, 5)

    def forward(self, x):
        for lin in self.phi:
            x = torch.relu(lin(x))
        g = x.amax(1)  # max pooling over the points
        return self.rho[1](torch.relu(self.rho[0](g)))


class PointNetSeg(nn.Module):
    """Per point: l = φ₁(x_m) (16 wide), g = max_m φ₂(l_m) (64 wide), y_m = W₂ relu(W₁ [l_m; g] + b₁) + b₂."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.s, self.y = nn.Linear(3, 16), nn.Linear(16, 64), nn.Linear(16 + 64, 32), nn.Linear(32, 4)

    def forward(self, x):
        local = torch.relu(self.l1(x))
        g = torch.relu(self.l2(local)).amax(1, keepdim=True).expand(-1, x.shape[1], -1)
        return self.y(torch.relu(self.s(torch.cat([local, g], -1))))


def _deep_sets_state(m):
    return {"p1": m.phi[0], "p2": m.phi[1], "r": m.rho[0], "y": m.rho[1]}


def _split(lin, first):
    """ρ's first layer on a concatenation [a; b] as the two heads W_a a + b and W_b b (no bias)."""
    return {"a.psi.weight": lin.weight[:, :first], "a.bias": lin.bias, "b.psi.weight": lin.weight[:, first:]}


def _state(name, module):
    """The compiled spec's state dict holding the torch module's weights."""
    linears = {}
    if name == "deep_sets":
        linears = _deep_sets_state(module)
    elif name == "pointnet":
        linears = {"l1": module.phi[0], "l2": module.phi[1], "l3": module.phi[2], "h": module.rho[0],
                   "y": module.rho[1]}
    elif name == "deep_sets_equivariant":
        linears = {"p1": module.phi, "y": module.rho2}
    else:
        linears = {"l1": module.l1, "l2": module.l2, "y": module.y}
    state = {}
    for head, lin in linears.items():
        state[f"{head}.psi.weight"], state[f"{head}.bias"] = lin.weight, lin.bias
    split = {"deep_sets_equivariant": (module.rho1 if name == "deep_sets_equivariant" else None, 3, "rx", "rs"),
             "pointnet_seg": (getattr(module, "s", None), 16, "sl", "sg")}.get(name)
    if split is not None:
        lin, first, a, b = split
        for key, value in _split(lin, first).items():
            state[key.replace("a.", f"{a}.").replace("b.", f"{b}.")] = value
    return {k: v.detach().clone() for k, v in state.items()}


CASES = {"deep_sets": ("deep_sets.rpn", DeepSets), "deep_sets_equivariant": ("deep_sets.rpn", DeepSetsEquivariant),
         "pointnet": ("pointnet.rpn", PointNet), "pointnet_seg": ("pointnet.rpn", PointNetSeg)}
EQUIVARIANT = {"deep_sets_equivariant", "pointnet_seg"}


@lru_cache(maxsize=None)
def _model(name, reference=False):
    """The compiled model (weights copied again by each test)."""
    file, _ = CASES[name]
    return rpn2c.compile_file(SPECS / file, model=name, reference=reference).double()


def _pair(name, reference=False):
    file, cls = CASES[name]
    torch.manual_seed(0)
    module = cls().double()
    model = _model(name, reference)
    model.load_state_dict(_state(name, module), strict=True)
    return model, module


@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
@pytest.mark.parametrize("name", list(CASES))
def test_spec_equals_the_seeds_construction(name, reference):
    model, module = _pair(name, reference)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in module.parameters())
    x = torch.randn(3, 7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got, want = model(x), module(x)
    assert_close(got, want, rtol=1e-12, atol=1e-12)
    w = torch.randn_like(want)
    names = [n for n, _ in model.named_parameters()]
    mine = dict(zip(names, torch.autograd.grad((got * w).sum(), list(model.parameters()))))
    theirs = torch.autograd.grad((want * w).sum(), list(module.parameters()))
    with torch.no_grad():  # torch's gradients in the spec's layout (a split head's gradient: its column block)
        for p, g in zip(module.parameters(), theirs):
            p.copy_(g)
    want_grads = _state(name, module)
    assert mine.keys() == want_grads.keys()
    for n in names:
        assert_close(mine[n], want_grads[n], rtol=1e-12, atol=1e-12)


def test_pooling_is_the_sum_and_the_max_not_a_mean():
    """A wrong symmetric function (the mean) would still be invariant: pin the seed's sum and PointNet's max."""
    model, _ = _pair("deep_sets")
    x = torch.randn(2, 4, 3, dtype=torch.float64)
    doubled = torch.cat([x, x], 1)  # every element twice: the sum doubles, the mean would not move
    s1 = torch.relu(model.p2.psi.weight @ torch.relu(model.p1.psi.weight @ x[0].T + model.p1.bias[:, None])
                    + model.p2.bias[:, None]).sum(1)
    s2 = torch.relu(model.p2.psi.weight @ torch.relu(model.p1.psi.weight @ doubled[0].T + model.p1.bias[:, None])
                    + model.p2.bias[:, None]).sum(1)
    assert_close(s2, 2 * s1)
    assert not torch.allclose(model(doubled), model(x))
    pn, _ = _pair("pointnet")
    assert_close(pn(doubled), pn(x))  # max ignores repeated points


@settings(max_examples=15, deadline=None)
@given(name=st.sampled_from(list(CASES)), size=st.integers(1, 9), reference=st.booleans(), data=st.data())
def test_permuting_the_set_permutes_or_keeps_the_output(name, size, reference, data):
    """f(PX) = f(X) for the invariant models and f(PX) = P f(X) for the equivariant ones, any permutation P."""
    perm = torch.tensor(data.draw(st.permutations(range(size))))
    model, _ = _pair(name, reference)
    x = torch.randn(2, size, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(size))
    y, yp = model(x), model(x[:, perm])
    assert_close(yp, y[:, perm] if name in EQUIVARIANT else y, rtol=1e-12, atol=1e-12)


def test_a_set_pooled_twice_is_a_located_error():
    text = ("model m {\n  input x: set[B, M, 3]\n  s = pool_items(x, how = \"sum\")\n"
            "  t = pool_items(s, how = \"sum\")\n  return t\n}\n")
    with pytest.raises(rpn2c.SpecError) as err:
        rpn2c.check(text, "m.rpn")
    [d] = err.value.diagnostics
    assert d.code == "E0403" and (d.span.line, d.span.col) == (4, 7)
    assert "pool_items needs items or a grid, got vector[B, 3]" in d.message
