"""Relations as values (``rpn2c/components/relation.py``): ``relation`` makes ``matrix[B, N, M]``, ``apply`` multiplies
it with values, ``given`` makes it a head's instance ξ, ``rows``/``as_matrix`` read it as a sequence and back, and
``tie = r0, swap = true`` scores with r0's factors swapped. Each equals the formula written in torch, in float64, in
both lowerings; bad shapes and kinds are located errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

import rpn2c
from rpn2c.errors import SpecError


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _band(n, m, window):
    i, j = torch.arange(n).unsqueeze(-1), torch.arange(m)
    return (i - j).abs() <= window


def _softmax_map(q, k, scale, keep=None):
    logits = (q @ k.transpose(-1, -2)) * scale
    if keep is None:
        return torch.softmax(logits, -1)
    # a query with no key left has a zero row (as the attention kernels give)
    return torch.softmax(logits.masked_fill(~keep, -math.inf), -1).nan_to_num(0.0) * keep.any(-1, keepdim=True)


def _compile_both(text):
    torch.manual_seed(0)
    default = rpn2c.compile(text).double()
    reference = rpn2c.compile(text, reference=True).double()
    reference.load_state_dict(default.state_dict())
    return default, reference


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 5), m=st.integers(1, 5), fq=st.integers(1, 4), fc=st.integers(1, 4), r=st.integers(1, 3),
       window=st.one_of(st.none(), st.integers(0, 2)))
def test_relation_apply_and_its_swapped_tie_equal_the_formulas(n, m, fq, fc, r, window):
    """R = softmax(X W_q (C W_k)ᵀ/√r [+ band]), apply(R, C) = R C, Rᵀ X; the swapped tie is softmax of Ψᵀ."""
    win = "" if window is None else f", window = {window}"
    text = f"""model t {{
  input x: sequence[B, {n}, {fq}]
  input c: sequence[B, {m}, {fc}]
  r = relation(x, c, xi = attention(rank = {r}{win}))
  s = relation(c, x, xi = attention(rank = {r}{win}), tie = r, swap = true)
  y = apply(r, c)
  z = apply(r, x, transpose = true)
  return r, s, y, z
}}"""
    x, c = _rand(2, n, fq), _rand(2, m, fc, seed=1)
    for model in _compile_both(text):
        w_q, w_k = model.r.xi.w_q, model.r.xi.w_k
        keep = None if window is None else _band(n, m, window)
        want_r = _softmax_map(x @ w_q, c @ w_k, 1 / math.sqrt(r), keep)
        want_s = _softmax_map(c @ w_k, x @ w_q, 1 / math.sqrt(r), None if keep is None else keep.T)
        rel, swapped, y, z = model(x, c)
        assert_close(rel, want_r)
        assert_close(swapped, want_s)
        assert_close(y, want_r @ c)
        assert_close(z, want_r.transpose(1, 2) @ x)


def test_given_relation_is_a_heads_instance_xi_with_gradients():
    """head(x, context = c) { xi_instance = given(r) } = (R C) ψᵀ + b; given(r, transpose = true) = (Rᵀ X) ψᵀ + b;
    the relation's W_q, W_k get the gradient through it, alike in both lowerings."""
    text = """model t {
  input x: sequence[B, 4, 3]
  input c: sequence[B, 6, 2]
  r = relation(x, c, xi = attention(rank = 2, causal = true))
  y = head(x, context = c) { xi_instance = given(r)  out = 5 }
  z = head(c, context = x) { xi_instance = given(r, transpose = true)  out = 5 }
  return y, z
}"""
    x, c = _rand(3, 4, 3), _rand(3, 6, 2, seed=1)
    grads = []
    for model in _compile_both(text):
        keep = torch.arange(6) <= torch.arange(4).unsqueeze(-1)
        rel = _softmax_map(x @ model.r.xi.w_q, c @ model.r.xi.w_k, 1 / math.sqrt(2), keep)
        y, z = model(x, c)
        assert_close(y, (rel @ c) @ model.y.psi.weight.T + model.y.bias)
        assert_close(z, (rel.transpose(1, 2) @ x) @ model.z.psi.weight.T + model.z.bias)
        (y.sum() + (z * z).sum()).backward()
        grads.append([model.r.xi.w_q.grad, model.r.xi.w_k.grad])
        assert grads[-1][0].abs().sum() > 0
    assert_close(grads[0], grads[1])


def test_a_recurrence_over_a_relations_rows():
    """rows(r) is R as the sequence of its rows; as_matrix reads the recurrence's output back as a relation."""
    text = """model t {
  input x: sequence[B, 5, 3]
  r = relation(x, xi = attention(rank = 2))
  h = recurrent(rows(r)) { cell = rnn  out = 5 }
  y = apply(as_matrix(h), x)
  return y
}"""
    x = _rand(2, 5, 3)
    for model in _compile_both(text):
        rel = _softmax_map(x @ model.r.xi.w_q, x @ model.r.xi.w_k, 1 / math.sqrt(2))
        h, states = torch.zeros(2, 5, dtype=torch.float64), []
        for t in range(5):  # h_t = tanh(W_ih r_t + b_ih + W_hh h_{t−1} + b_hh), row t of R as step t
            h = torch.tanh(rel[:, t] @ model.h.weight_ih_l0.T + model.h.bias_ih_l0 + h @ model.h.weight_hh_l0.T
                           + model.h.bias_hh_l0)
            states.append(h)
        assert_close(model(x), torch.stack(states, 1) @ x)
    graph = rpn2c.check(text)
    assert str(graph.node("r").type) == "matrix[B, 5, 5]" and str(graph.node("h").type) == "sequence[B, 5, 5]"


def test_a_matrix_input_and_its_type_text():
    graph = rpn2c.check("model t {\n  input a: matrix[B, 4, 3]\n  input v: sequence[B, 3, 2]\n"
                        "  y = apply(a, v)\n  return y\n}")
    assert str(graph.node("a").type) == "matrix[B, 4, 3]" and str(graph.node("y").type) == "sequence[B, 4, 2]"


def _error(body: str) -> str:
    text = ("model m {\n  input x: sequence[B, 4, 3]\n  input c: sequence[B, 6, 2]\n  input v: vector[B, 3]\n  "
            + body + "\n  return " + body.split("\n")[-1].split("=")[0].strip() + "\n}")
    with pytest.raises(SpecError) as err:
        rpn2c.check(text)
    return str(err.value)


R = "r = relation(x, c, xi = attention(rank = 2))\n  "


@pytest.mark.parametrize("body, code, words, line", [
    (R + "y = apply(r, x)", "E0403", "reads 6 items", 6),
    (R + "y = apply(r, c, transpose = true)", "E0403", "transposed", 6),
    (R + "y = apply(x, c)", "E0403", "expected a relation", 6),
    (R + "y = head(r) { out = 2 }", "E0402", "rows(r)", 6),
    (R + "y = recurrent(r) { out = 2 }", "E0402", "rows(r)", 6),
    (R + "y = head(x) { xi_instance = given(r)  out = 2 }", "E0402", "reads 6 items", 6),
    (R + "y = head(c, context = x) { xi_instance = given(r)  out = 2 }", "E0402", "reads 6 items", 6),
    ("y = head(x) { xi_instance = given(c)  out = 2 }", "E0402", "takes a relation", 5),
    ("y = relation(x, c)", "E0303", "xi = attention", 5),
    ("y = relation(v, c, xi = attention(rank = 2))", "E0403", "items of two sequences", 5),
    ("y = relation(x, c, xi = grid_patch(size = 3))", "E0403", "not an instance", 5),
    ("y = relation(x, c, xi = attention(rank = 2), swap = true)", "E0303", "tie = r0", 5),
    ("r = relation(x, c, xi = bilinear)\n  y = relation(c, x, xi = bilinear, tie = r, swap = true)", "E0402",
     "factors", 6),
    (R + "y = relation(x, c, xi = attention(rank = 3), tie = r)", "E0402", "rank: 2 vs 3", 6),
    (R + "y = relation(x, c, xi = attention(rank = 2), tie = r, swap = true)", "E0402", "swapped", 6),
    ("h = head(x) { out = 2 }\n  y = relation(x, c, xi = attention(rank = 2), tie = h)", "E0402",
     "not one", 6),
    ("y = as_matrix(v)", "E0403", "batched sequence", 5),
])
def test_bad_relations_are_located_errors(body, code, words, line):
    message = _error(body)
    assert f"error[{code}]" in message and words in message, message
    assert f"<string>:{line}:" in message, message
