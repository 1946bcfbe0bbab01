"""Hopfield networks (seed 001 §1.4) as shipped specs (``examples/specs/hopfield.rpn``).

The classical network is checked against the seed's own rule, written here in numpy: W from the Hebbian outer
products with w_ii = 0, and each asynchronous step choosing the X_i of lower energy H (not the sign of the local
field the implementation uses); the energy never rises under it, and stored orthogonal patterns are fixed points
that pull corrupted copies back. The modern update ξ_new = X softmax(β Xᵀ ξ) equals its numpy formula and is
attention: ``scaled_dot_product_attention`` with the state as queries, the memory as keys and values and β as the
scale, and with one map W tied for queries, keys and values ``nn.MultiheadAttention`` (in_proj = [W; W; W], out_proj
= I, β = 1/√r). Both lowerings, float64.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import hadamard
from torch import nn
from torch.testing import assert_close

import rpn2c

SPEC = Path(__file__).resolve().parents[2] / "examples" / "specs" / "hopfield.rpn"


def _seed_weights(patterns):
    """n·w_ij = Σ_t x_ti x_tj, then w_ii = 0 (seed 001 §1.4), by loops. Kept as the integer sums n·W, so that the
    energy comparisons below are exact (n·H = −½ Xᵀ(nW)X + n bᵀX)."""
    s, n = patterns.shape
    w = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i != j:
                w[i, j] = sum(patterns[t, i] * patterns[t, j] for t in range(s))
    return w


def _seed_energy(w, x, b):
    """n·H(X) for the scaled couplings n·W and thresholds b."""
    return -0.5 * x @ w @ x + len(x) * (b @ x)


def _seed_async_sweep(w, x, b):
    """X_i ← +1 if H(…, +1, …) ≤ H(…, −1, …) else −1, for i = 1..n in turn (the seed's update, by energies)."""
    x = x.copy()
    for i in range(len(x)):
        up, down = x.copy(), x.copy()
        up[i], down[i] = 1.0, -1.0
        x[i] = 1.0 if _seed_energy(w, up, b) <= _seed_energy(w, down, b) else -1.0
    return x


def _seed_sync_sweep(w, x, b):
    return np.where(w @ x - len(x) * b >= 0, 1.0, -1.0)


def _classical_text(steps, update, threshold):
    return ("model m(n = 10, s = 3) {\n  input x: vector[B, n]\n  input p: sequence[B, s, n]\n"
            f"  y = hopfield(x, p, steps = {steps}, update = \"{update}\", threshold = {threshold})\n"
            "  return y\n}\n")


@lru_cache(maxsize=None)
def _classical(steps, update, threshold, reference):
    return rpn2c.compile(_classical_text(steps, update, threshold), reference=reference).double()


_signs = st.lists(st.sampled_from([-1.0, 1.0]), min_size=10, max_size=10)


@settings(max_examples=30, deadline=None)
@given(patterns=st.lists(_signs, min_size=3, max_size=3), state=_signs, steps=st.integers(1, 3),
       update=st.sampled_from(["asynchronous", "synchronous"]), threshold=st.sampled_from([0.0, 0.25, -0.5]))
def test_classical_update_equals_the_seeds_rule_in_both_lowerings(patterns, state, steps, update, threshold):
    p, x = np.array(patterns), np.array(state)
    w, b = _seed_weights(p), np.full(10, threshold)
    want = x
    for _ in range(steps):
        want = (_seed_async_sweep if update == "asynchronous" else _seed_sync_sweep)(w, want, b)
    for reference in (False, True):
        got = _classical(steps, update, threshold, reference)(torch.tensor(x)[None], torch.tensor(p)[None])
        assert_close(got[0], torch.tensor(want))


@settings(max_examples=20, deadline=None)
@given(patterns=st.lists(_signs, min_size=3, max_size=3), state=_signs)
def test_asynchronous_sweeps_never_raise_the_energy(patterns, state):
    p, x = np.array(patterns), np.array(state)
    w, b = _seed_weights(p), np.zeros(10)
    model = _classical(1, "asynchronous", 0.0, False)
    energies = [_seed_energy(w, x, b)]
    for _ in range(4):
        x = model(torch.tensor(x)[None], torch.tensor(p)[None])[0].numpy()
        energies.append(_seed_energy(w, x, b))
    assert all(e1 <= e0 + 1e-12 for e0, e1 in zip(energies, energies[1:])), energies


def test_stored_patterns_are_fixed_points_and_attract_corrupted_copies():
    """Orthogonal patterns (rows of a Hadamard matrix): no cross-talk, C_ti = 0, so each is meta-stable, and a copy
    with 3 of 16 signs flipped returns to it in one sweep."""
    p = torch.tensor(hadamard(16)[[1, 2]], dtype=torch.float64)[None]
    for reference in (False, True):
        model = rpn2c.compile_file(SPEC, model="hopfield_classical", reference=reference).double()
        for t in range(2):
            assert_close(model(p[:, t], p), p[:, t])
            noisy = p[:, t].clone()
            noisy[:, [0, 5, 11]] *= -1
            assert_close(model(noisy, p), p[:, t])


def _softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_modern_update_is_its_formula_and_attention(reference):
    model = rpn2c.compile_file(SPEC, model="hopfield_modern", reference=reference).double()
    g = torch.Generator().manual_seed(0)
    state, memory = torch.randn(2, 3, 8, generator=g, dtype=torch.float64), torch.randn(2, 5, 8, generator=g,
                                                                                          dtype=torch.float64)
    got = model(state, memory)
    for b in range(2):  # ξ_new = X softmax(β Xᵀ ξ), X = [x_1 … x_N] the stored patterns as columns
        xm, xi = memory[b].numpy().T, state[b].numpy().T
        want = xm @ _softmax(2.0 * (xm.T @ xi).T).T
        assert_close(got[b], torch.tensor(want.T))
    assert_close(got, F.scaled_dot_product_attention(state, memory, memory, scale=2.0))
    # one update from a stored pattern with a large β retrieves it (the new energy's fixed point)
    sharp = rpn2c.compile_file(SPEC, model="hopfield_modern", params={"beta": 50.0}, reference=reference).double()
    assert_close(sharp(memory[:, :2], memory), memory[:, :2], atol=1e-6, rtol=0)


@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_tied_projection_layer_is_multihead_attention_with_tied_maps(reference):
    model = rpn2c.compile_file(SPEC, model="hopfield_layer", params={"d": 4, "r": 4},
                               reference=reference).double()
    torch.manual_seed(0)
    w = model.q.psi.weight.detach()  # [r, d]: q = ξ Wᵀ
    mha = nn.MultiheadAttention(4, 1, bias=False, batch_first=True).double()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([w, w, w]))
        mha.out_proj.weight.copy_(torch.eye(4))
    state, memory = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 6, 4, dtype=torch.float64)
    assert_close(model(state, memory), mha(state, memory, memory, need_weights=False)[0])
    assert sum(p.numel() for p in model.parameters()) == w.numel()  # one map, counted once


@pytest.mark.parametrize("text, at, says", [
    ("input x: sequence[B, 4, 8]\n  input p: sequence[B, 3, 8]\n  y = hopfield(x, p)", "4:16",
     "hopfield's state is one vector of ±1 per sample"),
    ("input x: vector[B, 8]\n  input p: sequence[B, 3, 6]\n  y = hopfield(x, p)", "4:19",
     "must have the state's n = 8 neurons; got 6"),
    ("input x: vector[B, 8]\n  input p: vector[B, 8]\n  y = hopfield(x, p)", "4:19", "items[B, s, n]"),
])
def test_bad_inputs_are_located_errors(text, at, says):
    with pytest.raises(rpn2c.SpecError) as err:
        rpn2c.check(f"model m {{\n  {text}\n  return y\n}}\n", "m.rpn")
    d = err.value.diagnostics[0]
    assert d.code == "E0403" and f"{d.span.line}:{d.span.col}" == at, (d.span, d.message)
    assert says in d.message
