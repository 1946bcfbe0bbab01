"""Selective (input-dependent) linear recurrences: the per-step scan, the ``mingru``, ``mamba`` and ``gla`` cells,
their shipped specs, and the recurrent matrix view of every linear cell.

Each cell is checked in float64 against a hand-written step-by-step torch loop (values and gradients) in every form
the compiler runs it: the parallel scan (default), the step loop (scan rule disabled) and the literal
lower-triangular matrix (reference). The matrix view is checked by ``matrix @ u + bias`` = the layer's output.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

import rpn2c
from rpn2c.functional.scan import varying_matrix, varying_scan
from rpn2c.lower.build import CompiledModel
from rpn2c.passes import optimize
from rpn2c.runtime.layer_matrix import layer_matrix
from tests.test_linear_recurrence import _cell_text
from tests.test_lowering_equivalence import _n, _rand

SPECS = Path(__file__).resolve().parents[1] / "examples" / "specs"
LENGTHS = st.sampled_from([1, 2, 3, 5, 8, 9, 16, 17])


def _grads(loss, leaves):
    return torch.autograd.grad(loss, leaves, allow_unused=True, materialize_grads=True)


def _steps(a, u, h0=None):
    """h_t = a_t ⊙ h_{t−1} + u_t, one step at a time."""
    h = torch.zeros_like(u[..., 0, :]) if h0 is None else h0
    outs = []
    for t in range(u.shape[-2]):
        h = a[..., t, :] * h + u[..., t, :]
        outs.append(h)
    return torch.stack(outs, dim=-2)


# ------------------------------------------------------------------------------------------------ the scan
@given(T=LENGTHS, S=st.integers(1, 4), low=st.sampled_from([1e-3, 0.3, 0.9]), with_h0=st.booleans(),
       complex_=st.booleans(), seed=st.integers(0, 99))
@settings(max_examples=_n(30), deadline=None)
def test_varying_scan_and_matrix_equal_the_step_loop(T, S, low, with_h0, complex_, seed):
    """The scan and the literal matrix L[t, s] = a_t ⊙ … ⊙ a_{s+1} give the loop's states and gradients."""
    g = torch.Generator().manual_seed(seed)
    a = low + (1.05 - low) * torch.rand(2, T, S, generator=g, dtype=torch.float64)
    u = _rand(2, T, S, seed=seed)
    if complex_:
        a = torch.polar(a, _rand(2, T, S, seed=seed + 3))
        u = torch.complex(u, _rand(2, T, S, seed=seed + 4))
    a, u = a.requires_grad_(), u.requires_grad_()
    h0 = _rand(2, S, seed=seed + 1).to(u.dtype).requires_grad_() if with_h0 else None
    leaves = [a, u] + ([h0] if with_h0 else [])
    want = _steps(a, u, h0)
    by_matrix = torch.einsum("btsk,bsk->btk", varying_matrix(a), u)
    assert_close(by_matrix, _steps(a, u), rtol=1e-10, atol=1e-10)
    got = varying_scan(u, a, h0)
    assert_close(got, want, rtol=1e-10, atol=1e-10)
    w = _rand(*got.shape, seed=5)
    for x, y in zip(_grads((got * w).real.sum(), leaves), _grads((want * w).real.sum(), leaves)):
        assert_close(x, y, rtol=1e-9, atol=1e-9)


def test_varying_matrix_is_lower_triangular_with_unit_diagonal():
    a = torch.rand(1, 5, 2, dtype=torch.float64) + 0.5
    low = varying_matrix(a)[0]
    assert torch.equal(low[torch.arange(5), torch.arange(5)], torch.ones(5, 2, dtype=torch.float64))
    assert (low[torch.triu_indices(5, 5, 1).unbind()] == 0).all()
    assert_close(low[4, 1], a[0, 2] * a[0, 3] * a[0, 4])


# ------------------------------------------------------------------------------------------------ by hand
def _mingru(x, p, h0):
    w_z, w_h = p["weight_ih"].chunk(2)
    b_z, b_h = p["bias_ih"].chunk(2) if "bias_ih" in p else (0, 0)
    h = torch.zeros(x.shape[0], w_h.shape[0], dtype=x.dtype) if h0 is None else h0
    outs = []
    for t in range(x.shape[1]):
        z = torch.sigmoid(x[:, t] @ w_z.T + b_z)
        h = (1 - z) * h + z * (x[:, t] @ w_h.T + b_h)
        outs.append(h)
    return torch.stack(outs, 1)


def _mamba(x, p, h0):
    """Mamba's selective_scan_ref: Ā = exp(ΔA), B̄x = ΔBx per channel, y = C h + D x."""
    a = -torch.exp(p["A_log"])  # [D, N]
    h = x.new_zeros(x.shape[0], *a.shape)
    outs = []
    for t in range(x.shape[1]):
        xt = x[:, t]
        dt = F.softplus(xt @ p["weight_dt"].T + p.get("bias_dt", 0))
        b, c = xt @ p["weight_B"].T, xt @ p["weight_C"].T
        h = torch.exp(dt[:, :, None] * a) * h + (dt * xt)[:, :, None] * b[:, None, :]
        outs.append(torch.einsum("bdn,bn->bd", h, c) + p["D"] * xt)
    return torch.stack(outs, 1)


def _mamba_low_rank(rank, n):
    """Mamba's own layout: x_proj packs Δ's rank-R input, B and C; dt_proj lifts the R values to D."""
    def run(x, p, h0):
        return _mamba(x, {"A_log": p["A_log"], "weight_dt": p["weight_dt"] @ p["weight_x"][:rank],
                          "weight_B": p["weight_x"][rank:rank + n], "weight_C": p["weight_x"][rank + n:],
                          "D": p["D"]} | ({"bias_dt": p["bias_dt"]} if "bias_dt" in p else {}), h0)
    return run


def _gla(tied):
    def run(x, p, h0):
        s = None
        outs = []
        for t in range(x.shape[1]):
            xt = x[:, t]
            alpha = torch.sigmoid(xt @ p["weight_alpha"].T + p.get("bias_alpha", 0))
            k = 1 - alpha if tied else xt @ p["weight_k"].T
            q, v = xt @ p["weight_q"].T, xt @ p["weight_v"].T
            kv = k[:, :, None] * v[:, None, :]  # [B, K, H]
            s = kv if s is None else alpha[:, :, None] * s + kv
            outs.append(torch.einsum("bkh,bk->bh", s, q))
        return torch.stack(outs, 1)
    return run


CELLS = {"mingru": (_mingru, True), "mamba(d_state = 3)": (_mamba, False),
         "mamba(d_state = 2, dt_rank = 2)": (_mamba_low_rank(2, 2), False), "gla(d_key = 2)": (_gla(False), False),
         "gla(d_key = 3, tied = true)": (_gla(True), False)}


def by_hand(model, layer, run, x, h0, L, bi):
    """The stacked (bi)directional cell as loops over the compiled model's parameters (backward: reversed time)."""
    params = dict(model.named_parameters())
    dirs = 2 if bi else 1
    out = x
    for i in range(L):
        outs = []
        for d, sfx in enumerate(("", "_reverse")[:dirs]):
            p = {k[len(layer) + 1:-len(f"_l{i}{sfx}")]: v for k, v in params.items()
                 if k.startswith(layer + ".") and k.endswith(f"_l{i}{sfx}")}
            init = None if h0 is None else h0[i * dirs + d]
            y = run(out.flip(1) if d else out, p, init)
            outs.append(y.flip(1) if d else y)
        out = torch.cat(outs, -1)
    return out


def assert_same(got, want, params):
    """Equal values, and equal gradients of a random projection of them with respect to ``params``."""
    assert_close(got, want, rtol=1e-9, atol=1e-9)
    w = _rand(*got.shape, seed=5)
    for g1, g2 in zip(_grads((got * w).sum(), params), _grads((want * w).sum(), params)):
        assert_close(g1, g2, rtol=1e-8, atol=1e-9)


_text = _cell_text


def _forms(text):
    """The model in its three forms: parallel scan, step loop (scan rule off), literal matrix; one set of weights."""
    torch.manual_seed(0)
    scan = rpn2c.compile(text).double()
    assert scan.graph.node("y").plan == ["parallel_scan"]
    loop = CompiledModel(optimize(rpn2c.check(text), disable={"parallel_scan"})).double()
    ref = rpn2c.compile(text, reference=True).double()
    for m in (loop, ref):
        m.load_state_dict(scan.state_dict())
    assert "lowering=time_loop" in repr(loop.y) and "lowering=parallel_scan" in repr(scan.y)
    return scan, loop, ref


@given(cell=st.sampled_from(sorted(CELLS)), F_=st.integers(1, 3), H=st.integers(1, 3), L=st.integers(1, 2),
       bi=st.booleans(), bias=st.booleans(), with_state=st.booleans(), T=LENGTHS)
@settings(max_examples=_n(30), deadline=None)
def test_selective_cells_equal_hand_written_loops_in_every_form(cell, F_, H, L, bi, bias, with_state, T):
    run, takes_state = CELLS[cell]
    if cell.startswith("mamba"):
        H, L = F_, 1 if bi else L  # channel-wise: out = input width (a second bidirectional layer is 2F wide)
    with_state = with_state and takes_state
    text = _text(cell, F_, H, L, bi, bias, with_state)
    x = _rand(2, T, F_, seed=1)
    h0 = _rand(L * (2 if bi else 1), 2, H, seed=2) if with_state else None
    args = (x, h0) if with_state else (x,)
    for model in _forms(text):
        assert sum(p.numel() for p in model.parameters()) == rpn2c.check(text).param_count
        assert_same(model(*args), by_hand(model, "y", run, x, h0, L, bi), list(model.parameters()))


def test_mingru_parameter_count_is_two_gate_heads():
    assert rpn2c.check(_text("mingru", 3, 4, 1, False, True, False)).param_count == 2 * 4 * 3 + 2 * 4
    assert rpn2c.check(_text("mamba(d_state = 5)", 3, 3, 1, False, True, False)).param_count == \
        3 * 5 + 3 * 3 + 3 + 2 * 5 * 3 + 3


@pytest.mark.parametrize("change, code, says", [
    ("out = 3", "E0402", "set `out = 2`"),  # mamba is channel-wise: out is the input width
    ("out = 2  kappa_state = chebyshev(d = 2)", "E0303", "'kappa_state' must be the identity"),
])
def test_selective_cells_refuse_what_they_cannot_compute(change, code, says):
    text = _text("mamba(d_state = 2)", 2, 2, 1, False, True, False).replace("out = 2", change)
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(text)
    diag = info.value.diagnostics[0]
    assert (diag.code, diag.span.line) == (code, 3) and says in str(info.value)


def test_a_cell_whose_state_is_not_b_h_refuses_an_initial_state():
    text = _text("gla(d_key = 2)", 2, 3, 1, False, True, True).replace("cell = gla(d_key = 2)", "cell = mamba")
    text = text.replace("out = 3", "out = 2").replace("state[1, B, 3]", "state[1, B, 2]")
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(text)
    assert info.value.diagnostics[0].code == "E0303" and "starts from zero" in str(info.value)


# ------------------------------------------------------------------------------------------------ shipped specs
class _MinGRUNet(nn.Module):
    """examples/specs/mingru.rpn by hand: two minGRU layers (nn.Linear gates), mean over time, classifier."""

    def __init__(self, features=1, hidden=32, out=2):
        super().__init__()
        self.z = nn.ModuleList([nn.Linear(features, hidden), nn.Linear(hidden, hidden)])
        self.h = nn.ModuleList([nn.Linear(features, hidden), nn.Linear(hidden, hidden)])
        self.y = nn.Linear(hidden, out)

    def forward(self, x):
        for z_proj, h_proj in zip(self.z, self.h):
            h, outs = x.new_zeros(x.shape[0], z_proj.out_features), []
            for t in range(x.shape[1]):
                z = torch.sigmoid(z_proj(x[:, t]))
                h = (1 - z) * h + z * h_proj(x[:, t])
                outs.append(h)
            x = torch.stack(outs, 1)
        return self.y(x.mean(1))


class _MambaNet(nn.Module):
    """examples/specs/mamba.rpn by hand: e = Wx + b, the S6 scan (Mamba's parametrisation), residual, mean,
    classifier."""

    def __init__(self, features=1, hidden=16, state=8, out=2):
        super().__init__()
        self.e, self.y = nn.Linear(features, hidden), nn.Linear(hidden, out)
        self.dt = nn.Linear(hidden, hidden)
        self.x_proj = nn.Linear(hidden, 2 * state, bias=False)  # [B; C], as Mamba's x_proj
        self.A_log = nn.Parameter(torch.log(torch.arange(1.0, state + 1)).repeat(hidden, 1))
        self.D = nn.Parameter(torch.ones(hidden))

    def forward(self, x):
        e = self.e(x)
        a = -torch.exp(self.A_log)
        b, c = self.x_proj(e).chunk(2, -1)
        dt = F.softplus(self.dt(e))
        h, outs = e.new_zeros(e.shape[0], *a.shape), []
        for t in range(e.shape[1]):
            h = torch.exp(dt[:, t, :, None] * a) * h + dt[:, t, :, None] * b[:, t, None, :] * e[:, t, :, None]
            outs.append((h * c[:, t, None, :]).sum(-1) + self.D * e[:, t])
        return self.y((torch.stack(outs, 1) + e).mean(1))


def _equal_to_spec(path, net, state, x, count=True):
    """The compiled spec (both lowerings) with ``net``'s weights copied across equals ``net``: values and the
    gradients of every parameter (``state`` maps the net, or its gradients, to the spec's parameter names)."""
    net = net.double()
    assert not count or sum(p.numel() for p in net.parameters()) == rpn2c.check_file(path).param_count
    want = net(x)
    net.zero_grad()
    want.square().sum().backward()
    grads = copy.deepcopy(net)
    with torch.no_grad():
        for p, g in zip(net.parameters(), grads.parameters()):
            g.copy_(p.grad)
    weights, want_grads = state(net), state(grads)
    for reference in (False, True):
        model = rpn2c.compile_file(path, reference=reference).double()
        model.load_state_dict({k: v.detach() for k, v in weights.items()})
        got = model(x)
        assert_close(got, want, rtol=1e-9, atol=1e-10)
        got_grads = _grads(got.square().sum(), [model.get_parameter(k) for k in weights])
        for name, g in zip(weights, got_grads):
            assert_close(g, want_grads[name], rtol=1e-8, atol=1e-10, msg=name)


def test_mingru_spec_equals_hand_written_torch():
    torch.manual_seed(0)

    def state(n):
        out = {}
        for i in range(2):
            out[f"h.weight_ih_l{i}"] = torch.cat([n.z[i].weight, n.h[i].weight])
            out[f"h.bias_ih_l{i}"] = torch.cat([n.z[i].bias, n.h[i].bias])
        return out | {"y.psi.weight": n.y.weight, "y.bias": n.y.bias}

    _equal_to_spec(SPECS / "mingru.rpn", _MinGRUNet(), state, _rand(3, 11, 1))


def test_mamba_spec_equals_hand_written_torch():
    torch.manual_seed(0)

    def state(n):
        b, c = n.x_proj.weight.chunk(2)
        return {"e.psi.weight": n.e.weight, "e.bias": n.e.bias, "s.A_log_l0": n.A_log, "s.weight_dt_l0": n.dt.weight,
                "s.bias_dt_l0": n.dt.bias, "s.weight_B_l0": b, "s.weight_C_l0": c, "s.D_l0": n.D,
                "y.psi.weight": n.y.weight, "y.bias": n.y.bias}

    _equal_to_spec(SPECS / "mamba.rpn", _MambaNet(), state, _rand(3, 11, 1))


def test_mamba_init_is_mambas():
    model = rpn2c.compile_file(SPECS / "mamba.rpn")
    assert_close(model.s.A_log_l0[3], torch.log(torch.arange(1.0, 9)))
    assert torch.equal(model.s.D_l0, torch.ones(16))
    dt = F.softplus(model.s.bias_dt_l0)
    assert ((dt >= 1e-3 - 1e-7) & (dt <= 0.1 + 1e-7)).all()


# ------------------------------------------------------------------------------------------------ matrix view
def _view_text(cell, F_, H, L, bi):
    return _text(cell, F_, H, L, bi, True, False)


@given(cell=st.sampled_from(["linear", "diagonal", "mingru", "mamba(d_state = 2)", "mamba(d_state = 2, dt_rank = 1)",
                             "gla(d_key = 2)",
                             "lru(d_state = 3)"]),
       F_=st.integers(1, 3), L=st.integers(1, 2), bi=st.booleans(), T=st.integers(1, 6), reference=st.booleans())
@settings(max_examples=_n(25), deadline=None)
def test_the_matrix_view_of_a_linear_cell_is_its_output(cell, F_, L, bi, T, reference):
    """``matrix @ vec(x) + bias`` = the layer's output (float64), ``u`` = the input itself; the matrix is block
    lower-triangular (upper for a backward direction: only bidirectional layers fill both sides)."""
    H = F_ if cell.startswith("mamba") else 3
    L = 1 if cell.startswith("mamba") and bi else L
    torch.manual_seed(0)
    model = rpn2c.compile(_view_text(cell, F_, H, L, bi), reference=reference).double()
    x = _rand(2, T, F_, seed=7)
    view = layer_matrix(model, "y", {"x": x}, sample=1)
    assert view.matrix.shape == (T * H * (2 if bi else 1), T * F_)
    assert torch.equal(view.u, x[1].flatten())
    assert_close(view.output(), model(x)[1], rtol=1e-10, atol=1e-10)
    if not bi:
        blocks = view.matrix.reshape(T, H, T, F_).abs().sum((1, 3))
        assert (blocks[torch.triu_indices(T, T, 1).unbind()] == 0).all()


def test_the_diagonal_cell_matrix_is_seed_004s_block_toeplitz_w_rnn():
    """``W_RNN`` block (t, s) = diag(λ)^{t−s} W_ih for s ≤ t: the Toeplitz blocks, not the pre-activation map."""
    torch.manual_seed(0)
    model = rpn2c.compile(_text("diagonal", 2, 3, 1, False, False, False)).double()
    view = layer_matrix(model, "y", {"x": _rand(1, 4, 2)})
    assert view.kind == "recurrence" and view.matrix.shape == (12, 8)
    lam, u = model.y.weight_hh_l0.detach(), model.y.weight_ih_l0.detach()
    for t in range(4):
        for s in range(4):
            want = torch.diag(lam ** (t - s)) @ u if s <= t else torch.zeros(3, 2, dtype=torch.float64)
            assert_close(view.matrix[t * 3:(t + 1) * 3, s * 2:(s + 1) * 2], want)


def test_show_gives_the_diagonal_layer_as_w_rnn(capsys, tmp_path):
    """``rpn2c show --view matrix`` on examples/specs/linear_rnn.rpn's diagonal layer: the exact T·64 × T·32
    block lower-triangular W_RNN (8 steps), not the 8·2·64 × … pre-activation map."""
    import numpy as np

    from tests.train.helpers import run_cli

    code, stdout, err = run_cli(capsys, "show", SPECS / "linear_rnn.rpn", "--layer", "s", "--view", "matrix",
                                "--format", "npy", "--out", tmp_path / "s.npy")
    assert code == 0, err
    m = np.load(tmp_path / "s.npy")
    assert m.shape == (512, 256)
    assert not np.triu(m.reshape(8, 64, 8, 32).any(axis=(1, 3)), 1).any() and m[:64, :32].any()


class _GLANet(nn.Module):
    """examples/specs/gla.rpn by hand: e = Wx + b, S_t = diag(α_t) S_{t−1} + k_t v_tᵀ, y_t = S_tᵀ q_t, residual,
    mean, classifier."""

    def __init__(self, features=1, hidden=32, key=16, out=2):
        super().__init__()
        self.e, self.y = nn.Linear(features, hidden), nn.Linear(hidden, out)
        self.alpha, self.q = nn.Linear(hidden, key), nn.Linear(hidden, key, bias=False)
        self.k, self.v = nn.Linear(hidden, key, bias=False), nn.Linear(hidden, hidden, bias=False)

    def forward(self, x):
        e = self.e(x)
        alpha, q, k, v = torch.sigmoid(self.alpha(e)), self.q(e), self.k(e), self.v(e)
        s, outs = e.new_zeros(e.shape[0], k.shape[-1], v.shape[-1]), []
        for t in range(e.shape[1]):
            s = alpha[:, t, :, None] * s + k[:, t, :, None] * v[:, t, None, :]
            outs.append(torch.einsum("bkh,bk->bh", s, q[:, t]))
        return self.y((torch.stack(outs, 1) + e).mean(1))


def test_gla_spec_equals_hand_written_torch():
    torch.manual_seed(0)

    def state(n):
        return {"e.psi.weight": n.e.weight, "e.bias": n.e.bias, "s.weight_alpha_l0": n.alpha.weight,
                "s.bias_alpha_l0": n.alpha.bias, "s.weight_q_l0": n.q.weight, "s.weight_k_l0": n.k.weight,
                "s.weight_v_l0": n.v.weight, "y.psi.weight": n.y.weight, "y.bias": n.y.bias}

    _equal_to_spec(SPECS / "gla.rpn", _GLANet(), state, _rand(3, 11, 1))
