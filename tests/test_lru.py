"""The complex-λ linear recurrent unit (``cell = lru``, Orvieto et al. 2023) against a hand-written complex torch LRU.

``h_t = λ ⊙ h_{t−1} + γ ⊙ (B x_t)``, ``y_t = Re(C h_t) + D x_t``, ``λ = exp(−exp(ν) + i·exp(θ))``,
``γ = sqrt(1 − |λ|²)``: float64 values and gradients in the three forms (complex parallel scan, step loop, the
literal complex block lower-triangular matrix), the shipped spec, the stability of the parametrisation.
"""

from __future__ import annotations

from pathlib import Path

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

import rpn2c
from rpn2c.components.cells_selective import LRU
from tests.test_lowering_equivalence import _n, _rand
from tests.test_selective_scan import _equal_to_spec, _forms, _text, assert_same, by_hand

SPECS = Path(__file__).resolve().parents[1] / "examples" / "specs"


def _lru_by(gamma):
    """The LRU paper's forward written with complex tensors, one step at a time; ``gamma(p, λ)`` its γ."""

    def run(x, p, h0):
        lam = torch.exp(-torch.exp(p["nu_log"]) + 1j * torch.exp(p["theta_log"]))
        b = (p["B_re"] + 1j * p["B_im"]) * gamma(p, lam)[:, None]
        c = p["C_re"] + 1j * p["C_im"]
        h = torch.zeros(x.shape[0], lam.shape[0], dtype=lam.dtype)
        outs = []
        for t in range(x.shape[1]):
            h = lam * h + x[:, t].to(b.dtype) @ b.T
            outs.append((h @ c.T).real + x[:, t] @ p["D"].T + p.get("bias", 0))
        return torch.stack(outs, 1)

    return run


_lru = _lru_by(lambda p, lam: torch.sqrt(1 - torch.abs(lam) ** 2))  # eq 7: γ from λ
_lru_learned = _lru_by(lambda p, lam: torch.exp(p["gamma_log"]))  # the paper's code: γ = exp(γ_log), a parameter


@given(F_=st.integers(1, 3), H=st.integers(1, 3), N=st.integers(1, 4), L=st.integers(1, 2), bi=st.booleans(),
       bias=st.booleans(), T=st.sampled_from([1, 2, 3, 5, 8, 9, 16]))
@settings(max_examples=_n(25), deadline=None)
def test_lru_equals_a_hand_written_complex_lru_in_every_form(F_, H, N, L, bi, bias, T):
    text = _text(f"lru(d_state = {N})", F_, H, L, bi, bias, False)
    x = _rand(2, T, F_, seed=1)
    per_layer = [2 * N + 2 * N * d + 2 * H * N + H * d + H * bias for d in [F_] + [H * (2 if bi else 1)] * (L - 1)]
    assert rpn2c.check(text).param_count == sum(per_layer) * (2 if bi else 1)
    for model in _forms(text):
        assert_same(model(x), by_hand(model, "y", _lru, x, None, L, bi), list(model.parameters()))


@given(F_=st.integers(1, 3), H=st.integers(1, 3), N=st.integers(1, 4), bi=st.booleans(), bias=st.booleans(),
       T=st.sampled_from([1, 3, 8]))
@settings(max_examples=_n(10), deadline=None)
def test_a_learned_gamma_equals_the_papers_implementation_in_every_form(F_, H, N, bi, bias, T):
    """``gamma = "learned"``: γ_log is a parameter (N more per direction), initialised to log sqrt(1 − |λ|²), and
    the cell is the paper's code with γ moved away from that value (values and gradients, γ_log's included)."""
    text = _text(f'lru(d_state = {N}, gamma = "learned")', F_, H, 1, bi, bias, False)
    computed = _text(f"lru(d_state = {N})", F_, H, 1, bi, bias, False)
    assert rpn2c.check(text).param_count == rpn2c.check(computed).param_count + N * (2 if bi else 1)
    x = _rand(2, T, F_, seed=1)
    for k, model in enumerate(_forms(text)):
        params = {n[:-3]: v for n, v in model.y.named_parameters() if n.endswith("_l0")}
        lam, _ = LRU.eigenvalues({n: v for n, v in params.items() if n != "gamma_log"})
        if k == 0:
            assert_close(torch.exp(params["gamma_log"]), torch.sqrt(1 - lam.abs() ** 2))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "gamma_log" in name:
                    p.add_(0.3 * _rand(*p.shape, seed=3))
        assert_same(model(x), by_hand(model, "y", _lru_learned, x, None, 1, bi), list(model.parameters()))
    assert any(("gamma_log" in n) for n, _ in model.named_parameters())


@given(nu=st.floats(-30, 5), theta=st.floats(-30, 5))
def test_every_nu_gives_a_stable_eigenvalue_and_gamma_normalises_it(nu, theta):
    w = {"nu_log": torch.tensor([nu], dtype=torch.float64), "theta_log": torch.tensor([theta], dtype=torch.float64)}
    lam, gamma = LRU.eigenvalues(w)
    assert lam.dtype == torch.complex128 and lam.abs().item() <= 1
    assert_close(lam.abs(), torch.exp(-torch.exp(w["nu_log"])))
    assert_close(lam.angle(), torch.remainder(torch.exp(w["theta_log"]) + torch.pi, 2 * torch.pi) - torch.pi)
    assert_close(gamma ** 2 + lam.abs() ** 2, torch.ones(1, dtype=torch.float64))


def test_the_ring_init_puts_every_eigenvalue_in_the_ring():
    model = rpn2c.compile(_text("lru(d_state = 200, r_min = 0.6, r_max = 0.8, max_phase = 0.5)", 2, 2, 1, False,
                                True, False))
    lam, _ = LRU.eigenvalues({k[:-3]: v for k, v in model.y.named_parameters()})
    assert ((lam.abs() >= 0.6 - 1e-6) & (lam.abs() <= 0.8 + 1e-6)).all()
    assert ((lam.angle() >= 0) & (lam.angle() <= 0.5 + 1e-6)).all()


class _Complex(TorchDispatchMode):
    """Records ``(op, shape)`` of every complex tensor an op returns."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.is_complex():
            self.seen.add((str(func), tuple(out.shape)))
        return out


def test_the_default_lowering_scans_in_complex_arithmetic_and_the_reference_builds_the_complex_matrix():
    """Default: complex products inside the scan, no [T·N, T·N] matrix; reference: a complex matrix of that size."""
    scan, _, ref = _forms(_text("lru(d_state = 3)", 2, 2, 1, False, True, False))
    x = _rand(1, 8, 2)
    with _Complex() as fast:
        scan(x)
    with _Complex() as literal:
        ref(x)
    assert any("mul" in op for op, _ in fast.seen)
    assert not any(shape == (24, 24) for _, shape in fast.seen)
    assert any(shape == (24, 24) for _, shape in literal.seen)


class _LRUNet(nn.Module):
    """examples/specs/lru.rpn by hand: e = Wx + b, the LRU (complex parameters as in the paper), GELU, residual,
    mean over time, classifier."""

    def __init__(self, features=1, hidden=32, state=64, out=2):
        super().__init__()
        self.e, self.y = nn.Linear(features, hidden), nn.Linear(hidden, out)
        self.nu_log, self.theta_log = nn.Parameter(torch.rand(state) - 1), nn.Parameter(torch.rand(state))
        self.B = nn.Parameter(torch.randn(state, hidden, dtype=torch.complex64) / 8)
        self.C = nn.Parameter(torch.randn(hidden, state, dtype=torch.complex64) / 8)
        self.D = nn.Linear(hidden, hidden)

    def forward(self, x):
        e = self.e(x)
        lam = torch.exp(-torch.exp(self.nu_log) + 1j * torch.exp(self.theta_log))
        b = self.B * torch.sqrt(1 - lam.abs() ** 2)[:, None]
        h, outs = torch.zeros(e.shape[0], lam.shape[0], dtype=lam.dtype), []
        for t in range(e.shape[1]):
            h = lam * h + e[:, t].to(b.dtype) @ b.T
            outs.append((h @ self.C.T).real + self.D(e[:, t]))
        s = torch.stack(outs, 1)
        return self.y((torch.nn.functional.gelu(s) + e).mean(1))


def test_lru_spec_equals_hand_written_torch():
    torch.manual_seed(0)
    net = _LRUNet()
    net.B.data, net.C.data = net.B.data.to(torch.complex128), net.C.data.to(torch.complex128)

    def state(n):
        return {"e.psi.weight": n.e.weight, "e.bias": n.e.bias, "s.nu_log_l0": n.nu_log, "s.theta_log_l0": n.theta_log,
                "s.B_re_l0": n.B.real, "s.B_im_l0": n.B.imag, "s.C_re_l0": n.C.real, "s.C_im_l0": n.C.imag,
                "s.D_l0": n.D.weight, "s.bias_l0": n.D.bias, "y.psi.weight": n.y.weight, "y.bias": n.y.bias}

    # a complex parameter counts twice in the spec (real and imaginary parts)
    assert sum(p.numel() * (2 if p.is_complex() else 1) for p in net.parameters()) == \
        rpn2c.check_file(SPECS / "lru.rpn").param_count
    _equal_to_spec(SPECS / "lru.rpn", net, state, _rand(3, 11, 1), count=False)
