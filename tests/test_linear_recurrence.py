"""Linear recurrences: the ``linear`` / ``diagonal`` cells, the parallel scan and seed 004's recurrence matrix.

Every form is checked in float64 against a hand-written step-by-step loop, outputs and gradients: the scan kernel
over T (1, 2, odd, powers of two ± 1) and transition magnitudes from 1e-3 to past 1; the recurrent construct in both
lowerings (default = parallel scan, reference = the literal block lower-triangular matrix); the recurrence chain ξ
as a head, alone and as H single-output heads (diagonal transition).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

import rpn2c
from rpn2c.functional.scan import linear_scan, recurrence_matrix
from rpn2c.lower.build import CompiledModel
from rpn2c.passes import optimize
from tests.test_lowering_equivalence import _n, _rand

LENGTHS = st.sampled_from([1, 2, 3, 5, 7, 8, 9, 16, 17, 31])
MAGNITUDES = st.sampled_from([1e-3, 0.1, 0.5, 0.9, 0.999, 1.0, 1.2])


def _loop(u, a, h0=None):
    """h_t = A h_{t−1} + u_t, one step at a time (A scalar, vector λ or matrix)."""
    h = torch.zeros_like(u[..., 0, :]) if h0 is None else h0
    outs = []
    for t in range(u.shape[-2]):
        h = (h @ a.T if a.dim() == 2 else a * h) + u[..., t, :]
        outs.append(h)
    return torch.stack(outs, dim=-2)


def _grads(loss, leaves):
    """Gradients of ``loss``; zero for a leaf the graph does not reach (λ when T = 1)."""
    return torch.autograd.grad(loss, leaves, allow_unused=True, materialize_grads=True)


def _transition(kind, H, mag, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "scalar":
        return torch.tensor(mag, dtype=torch.float64)
    if kind == "diagonal":
        signs = torch.where(torch.rand(H, generator=g) < 0.3, -1.0, 1.0).double()
        return signs * mag * (0.5 + 0.5 * torch.rand(H, generator=g, dtype=torch.float64))
    q, _ = torch.linalg.qr(torch.randn(H, H, generator=g, dtype=torch.float64))
    return mag * q  # spectral radius = mag


@given(kind=st.sampled_from(["scalar", "diagonal", "dense"]), T=LENGTHS, H=st.integers(1, 4), mag=MAGNITUDES,
       with_h0=st.booleans(), seed=st.integers(0, 99))
@settings(max_examples=_n(40), deadline=None)
def test_parallel_scan_equals_the_step_loop(kind, T, H, mag, with_h0, seed):
    u = _rand(2, T, H, seed=seed).requires_grad_()
    a = _transition(kind, H, mag, seed).requires_grad_()
    h0 = _rand(2, H, seed=seed + 1).requires_grad_() if with_h0 else None
    w = _rand(2, T, H, seed=seed + 2)
    leaves = [u, a] + ([h0] if with_h0 else [])
    got, want = linear_scan(u, a, h0), _loop(u, a, h0)
    assert_close(got, want, rtol=1e-10, atol=1e-10)
    for x, y in zip(_grads((got * w).sum(), leaves), _grads((want * w).sum(), leaves)):
        assert_close(x, y, rtol=1e-9, atol=1e-9)


def test_scan_stays_finite_where_the_cumulative_product_form_overflows():
    """λ^t·cumsum(u_j/λ^j) divides by λ^j (1e-3^200 underflows to 0); the scan never divides."""
    u, lam = _rand(1, 200, 2), torch.tensor([1e-3, 0.5], dtype=torch.float64)
    got = linear_scan(u, lam)
    assert torch.isfinite(got).all()
    assert_close(got, _loop(u, lam), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reverse", [False, True])
def test_recurrence_matrix_is_seed_004s_block_toeplitz_matrix(reverse):
    """W_RNN = L (I ⊗ U): block (i, j) = V^{i−j} U for j ≤ i, zero above; the diagonal blocks are U, so it is lower-
    but not strictly lower-triangular (seed 004 App. A.2 says "strictly")."""
    T, H, D = 4, 3, 2
    v, u = _rand(H, H, seed=1) * 0.5, _rand(H, D, seed=2)
    w_rnn = recurrence_matrix(v, T, reverse) @ torch.kron(torch.eye(T, dtype=torch.float64), u)
    for i in range(T):
        for j in range(T):
            lag = j - i if reverse else i - j
            want = torch.linalg.matrix_power(v, lag) @ u if lag >= 0 else torch.zeros(H, D, dtype=torch.float64)
            assert_close(w_rnn[i * H:(i + 1) * H, j * D:(j + 1) * D], want)
    x = _rand(2, T, D, seed=3)
    xs = x.flip(1) if reverse else x
    h = _loop(xs @ u.T, v)
    assert_close((x.reshape(2, -1) @ w_rnn.T).reshape(2, T, H), h.flip(1) if reverse else h)


# ------------------------------------------------------------------------------------------------ the cells
def _bias(bias):
    return f'"{bias}"' if isinstance(bias, str) else str(bias).lower()


def _cell_text(cell, F, H, L, bi, bias, with_state):
    S = L * (2 if bi else 1)
    state = f"  input h0: state[{S}, B, {H}]\n" if with_state else ""
    return (f"model m {{\n  input x: sequence[B, T, {F}]\n{state}  y = recurrent(x) {{ cell = {cell}  out = {H}"
            f"  layers = {L}  bidirectional = {str(bi).lower()}  bias = {_bias(bias)}"
            f"{'  state = h0' if with_state else ''} }}\n  return y\n}}\n")


def _cell_by_hand(model, cell, x, h0, L, bi):
    """The stacked (bi)directional linear recurrence as plain loops over the compiled model's parameters."""
    p = dict(model.named_parameters())
    dirs = 2 if bi else 1
    out = x
    for i in range(L):
        outs = []
        for d, sfx in enumerate(("", "_reverse")[:dirs]):
            w_ih, w_hh = p[f"y.weight_ih_l{i}{sfx}"], p[f"y.weight_hh_l{i}{sfx}"]
            b = sum(p[k] for k in (f"y.bias_ih_l{i}{sfx}", f"y.bias_hh_l{i}{sfx}") if k in p)
            u = out @ w_ih.T + b
            init = None if h0 is None else h0[i * dirs + d]
            steps = u.flip(1) if d else u
            h = _loop(steps, w_hh, init)
            outs.append(h.flip(1) if d else h)
        out = torch.cat(outs, dim=-1)
    return out


@given(cell=st.sampled_from(["linear", "diagonal"]), F=st.integers(1, 3), H=st.integers(1, 4), L=st.integers(1, 2),
       bi=st.booleans(), bias=st.sampled_from([True, False, "single"]), with_state=st.booleans(), T=LENGTHS)
@settings(max_examples=_n(30), deadline=None)
def test_linear_cells_equal_hand_written_loops_in_both_lowerings(cell, F, H, L, bi, bias, with_state, T):
    """``bias = "single"`` (linear cell): ``h_t = A h_{t−1} + W_ih x_t + b``, one b; the diagonal cell has one."""
    if cell == "diagonal" and bias == "single":
        bias = True
    text = _cell_text(cell, F, H, L, bi, bias, with_state)
    S, G = L * (2 if bi else 1), H if cell == "diagonal" else H * H
    b = 0 if not bias else H if cell == "diagonal" or bias == "single" else 2 * H
    per_layer = [H * F + G + b] + [H * H * (2 if bi else 1) + G + b] * (L - 1)
    assert rpn2c.check(text).param_count == sum(per_layer) * (2 if bi else 1)
    x = _rand(2, T, F, seed=1)
    h0 = _rand(S, 2, H, seed=2) if with_state else None
    args = (x, h0) if with_state else (x,)
    torch.manual_seed(0)
    fast = rpn2c.compile(text).double()
    assert fast.graph.node("y").plan == ["parallel_scan"]
    for reference in (False, True):
        model = rpn2c.compile(text, reference=reference).double()
        model.load_state_dict(fast.state_dict())
        got, want = model(*args), _cell_by_hand(model, cell, x, h0, L, bi)
        assert_close(got, want, rtol=1e-9, atol=1e-9)
        w = _rand(*got.shape, seed=5)
        params = list(model.parameters())
        for g1, g2 in zip(_grads((got * w).sum(), params), _grads((want * w).sum(), params)):
            assert_close(g1, g2, rtol=1e-9, atol=1e-9)


def test_without_the_scan_rule_the_time_loop_computes_the_same():
    text = _cell_text("linear", 2, 3, 2, True, True, False)
    torch.manual_seed(0)
    scan = rpn2c.compile(text).double()
    graph = optimize(rpn2c.check(text), disable={"parallel_scan"})
    assert "parallel_scan" not in graph.node("y").plan
    loop = CompiledModel(graph).double()
    loop.load_state_dict(scan.state_dict())
    assert "lowering=time_loop" in repr(loop.y)
    x = _rand(3, 9, 2)
    assert_close(scan(x), loop(x), rtol=1e-10, atol=1e-10)


def test_a_state_expansion_makes_the_linear_cell_a_time_loop_and_the_diagonal_cell_an_error():
    text = _cell_text("linear", 2, 3, 1, False, True, False).replace("bias = true", "kappa_state = chebyshev(d = 2)")
    graph = rpn2c.compile(text).graph
    assert graph.node("y").plan == ["time_loop"]
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(text.replace("cell = linear", "cell = diagonal"))
    diag = info.value.diagnostics[0]
    assert (diag.code, diag.span.line) == ("E0303", 3) and "kappa_state" in str(info.value)


# ------------------------------------------------------------------------------------------------ the ξ form
def _chain_text(decay, learnable, direction, heads=1, out=3):
    xi = (f"recurrence_chain(decay = {decay}, learnable = {str(learnable).lower()}, "
          f'direction = "{direction}")')
    fusion = "  fusion = concat" if heads > 1 else ""
    return (f"model m {{\n  input x: sequence[B, T, 2]\n  y = head(x) {{ heads = {heads}  xi_instance = {xi}"
            f"  out = {out}{fusion} }}\n  return y\n}}\n")


@given(decay=st.sampled_from([-0.9, 1e-3, 0.5, 0.99, 1.1]), learnable=st.booleans(),
       direction=st.sampled_from(["forward", "backward"]), T=LENGTHS)
@settings(max_examples=_n(20), deadline=None)
def test_recurrence_chain_head_is_the_scalar_linear_rnn(decay, learnable, direction, T):
    """``Y = M X Uᵀ + b``, M[t, s] = λ^{t−s}: h_t = λ h_{t−1} + U x_t (seed 004 main text), bias after ξ."""
    text = _chain_text(decay, learnable, direction)
    assert rpn2c.check(text).param_count == 2 * 3 + 3 + int(learnable)
    x = _rand(2, T, 2, seed=4)
    torch.manual_seed(0)
    fast = rpn2c.compile(text).double()
    for reference in (False, True):
        model = rpn2c.compile(text, reference=reference).double()
        model.load_state_dict(fast.state_dict())
        p = dict(model.named_parameters())
        lam = p["y.xi_instance.decay"] if learnable else torch.tensor(decay, dtype=torch.float64)
        u = x @ p["y.psi.weight"].T
        h = _loop(u.flip(1), lam).flip(1) if direction == "backward" else _loop(u, lam)
        want, got = h + p["y.bias"], model(x)
        assert_close(got, want, rtol=1e-9, atol=1e-9)
        params = list(p.values())
        for g1, g2 in zip(_grads(got.sum(), params), _grads(want.sum(), params)):
            assert_close(g1, g2, rtol=1e-9, atol=1e-9)


def test_a_fixed_recurrence_chain_is_the_inverse_chain():
    """(I − λA)⁻¹ = Σ_k λ^k A^k for the shift A: the chain ξ in inverse mode with α = λ is the same matrix."""
    fixed = _chain_text(0.7, False, "forward")
    inverse = fixed.replace('recurrence_chain(decay = 0.7, learnable = false, direction = "forward")',
                            'chain(mode = "inverse", alpha = 0.7)')
    torch.manual_seed(0)
    a = rpn2c.compile(fixed).double()
    b = rpn2c.compile(inverse).double()
    b.load_state_dict(a.state_dict())
    x = _rand(2, 9, 2)
    assert_close(a(x), b(x), rtol=1e-10, atol=1e-10)


def test_single_output_recurrence_chain_heads_are_the_diagonal_cell():
    """H heads with out = 1, each its own λ_h, concatenated: V = diag(λ), the ``diagonal`` cell without bias."""
    H = 3
    heads = _chain_text(0.5, True, "forward", heads=H, out=1).replace("fusion = concat", 'fusion = concat  bias = "none"')
    cell = _cell_text("diagonal", 2, H, 1, False, False, False)
    assert rpn2c.check(heads).param_count == rpn2c.check(cell).param_count == H * 2 + H
    torch.manual_seed(0)
    a, b = rpn2c.compile(heads).double(), rpn2c.compile(cell).double()
    with torch.no_grad():
        for h in range(H):
            a.get_parameter(f"y.heads.h{h}.xi_instance.decay").fill_(0.3 * h - 0.4)
            b.y.weight_ih_l0[h] = a.get_parameter(f"y.heads.h{h}.psi.weight")[0]
            b.y.weight_hh_l0[h] = a.get_parameter(f"y.heads.h{h}.xi_instance.decay")
    x = _rand(2, 7, 2)
    assert_close(a(x), b(x), rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------------------------------------ a shipped block
class _LinearRNNBlock(torch.nn.Module):
    """examples/specs/linear_rnn.rpn by hand: e = Wx + b, h_t = λ ⊙ h_{t−1} + B e_t + b', y_t = GELU(C h_t + c),
    residual, mean over time, classifier."""

    def __init__(self, features=1, hidden=32, state=64, out=2):
        super().__init__()
        self.e, self.b = torch.nn.Linear(features, hidden), torch.nn.Linear(hidden, state)
        self.lam = torch.nn.Parameter(torch.rand(state) * 0.5 + 0.45)
        self.c, self.y = torch.nn.Linear(state, hidden), torch.nn.Linear(hidden, out)

    def forward(self, x):
        e = self.e(x)
        h = _loop(self.b(e), self.lam)
        return self.y((torch.nn.functional.gelu(self.c(h)) + e).mean(1))


def test_linear_rnn_example_equals_hand_written_torch():
    path = Path(__file__).resolve().parents[1] / "examples" / "specs" / "linear_rnn.rpn"
    torch.manual_seed(0)
    net = _LinearRNNBlock().double()
    state = {"e.psi.weight": net.e.weight, "e.bias": net.e.bias, "s.weight_ih_l0": net.b.weight,
             "s.weight_hh_l0": net.lam, "s.bias_ih_l0": net.b.bias, "c.psi.weight": net.c.weight,
             "c.bias": net.c.bias, "y.psi.weight": net.y.weight, "y.bias": net.y.bias}
    x = _rand(3, 13, 1)
    want = net(x)
    theirs = _grads(want.sum(), list(state.values()))
    for reference in (False, True):
        model = rpn2c.compile_file(path, reference=reference).double()
        model.load_state_dict({k: v.detach() for k, v in state.items()})
        got = model(x)
        assert_close(got, want, rtol=1e-10, atol=1e-10)
        for g1, g2 in zip(_grads(got.sum(), [model.get_parameter(k) for k in state]), theirs):
            assert_close(g1, g2, rtol=1e-9, atol=1e-9)
