"""ξ's input pre-processing (paper §5.1.1, eq 29, 35, 37): ``preprocessed(xi = ..., pre = [...])``.

Written from the paper: ξ receives its input batch, X ∈ R^{b x m} (attribute, eq 29) or Xᵀ (instance), normalises
each column over the batch ("input data batch normalization"), applies the activation, and computes its matrix
from that, A(i, j) = kernel(X̂(:, i), X̂(:, j)) (eq 35) with the Pearson kernel of eq 37 (or the linear kernel with a
row softmax as output post-processing); the head then multiplies the raw data, X A (attribute) or A X (instance).
numpy, float64, both lowerings.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

import rpn2c


def _pre(batch, steps, eps=1e-5):
    """The pre-processing of an input batch, column by column (numpy)."""
    for step in steps:
        if step == "batch_norm":
            batch = (batch - batch.mean(0)) / np.sqrt(batch.var(0) + eps)
        else:
            batch = {"sigmoid": lambda v: 1 / (1 + np.exp(-v)), "relu": lambda v: np.maximum(v, 0),
                     "tanh": np.tanh}[step](batch)
    return batch


def _pearson(u, v):
    """eq 37: Σ_i ((u_i − μ_u)/σ_u)((v_i − μ_v)/σ_v) / b."""
    return np.mean((u - u.mean()) / u.std() * (v - v.mean()) / v.std())


def _kernel_matrix(batch, kernel):
    m = batch.shape[1]
    return np.array([[kernel(batch[:, i], batch[:, j]) for j in range(m)] for i in range(m)])


def _softmax_rows(a):
    e = np.exp(a - a.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _spec(slot, xi):
    return (f"model m {{\n  input x: sequence[B, 6, 4]\n  y = head(x) {{\n    {slot} = {xi}\n    psi = eye\n"
            f"    out = 4\n    bias = false\n  }}\n  return y\n}}\n")


@lru_cache(maxsize=None)
def _models(slot, xi):
    return [rpn2c.compile(_spec(slot, xi), reference=r).double() for r in (False, True)]


_steps = st.lists(st.sampled_from(["batch_norm", "sigmoid", "relu", "tanh"]), min_size=1, max_size=2)


@settings(max_examples=25, deadline=None)
@given(steps=_steps.filter(lambda s: s[-1] != "relu"), axis=st.sampled_from(["attribute", "instance"]),
       seed=st.integers(0, 2**16))
def test_pearson_of_the_processed_batch_multiplies_the_raw_data(steps, axis, seed):
    x = np.random.default_rng(seed).standard_normal((2, 6, 4))
    pre = ", ".join(f'"{s}"' for s in steps)
    xi = f'preprocessed(xi = "pearson_correlation", pre = [{pre}])'
    for model in _models(f"xi_{axis}", xi):
        got = model(torch.tensor(x))
        for b in range(2):
            batch = x[b] if axis == "attribute" else x[b].T  # ξ's input batch: X or Xᵀ (eq 29)
            a = _kernel_matrix(_pre(batch, steps), _pearson)
            want = x[b] @ a if axis == "attribute" else a.T @ x[b]
            assert_close(got[b], torch.tensor(want), rtol=1e-9, atol=1e-9)


def test_post_processing_row_softmax_after_pre_processing():
    """§5.1.1's output post-processing (a row normalisation of A) composes with the input pre-processing."""
    x = np.random.default_rng(3).standard_normal((2, 6, 4))
    xi = 'preprocessed(xi = "linear_kernel", pre = ["batch_norm", "tanh"], norm = "softmax")'
    for model in _models("xi_instance", xi):
        got = model(torch.tensor(x))
        for b in range(2):
            batch = _pre(x[b].T, ["batch_norm", "tanh"])
            a = _softmax_rows(_kernel_matrix(batch, np.dot).T)  # row = output item
            assert_close(got[b], torch.tensor(a @ x[b]), rtol=1e-10, atol=1e-10)


def test_pre_processing_changes_the_matrix_not_the_data():
    """Without pre-processing the same head is the plain kernel; with it, the raw data (not the processed copy)
    is what the matrix multiplies: scaling a column scales that output column only through A."""
    x = torch.randn(2, 6, 4, dtype=torch.float64)
    plain = rpn2c.compile(_spec("xi_attribute", "pearson_correlation")).double()
    pre = _models("xi_attribute", 'preprocessed(xi = "pearson_correlation", pre = ["batch_norm"])')[0]
    assert_close(pre(x), plain(x))  # Pearson is invariant to standardising the columns
    sig = _models("xi_attribute", 'preprocessed(xi = "pearson_correlation", pre = ["sigmoid"])')[0]
    assert not torch.allclose(sig(x), plain(x))


@pytest.mark.parametrize("xi, says", [
    ('preprocessed(xi = "chain", pre = ["sigmoid"])', "does not compute its matrix from the data"),
    ('preprocessed(xi = "pearson_correlation", pre = ["softplus"])', "'batch_norm', 'sigmoid', 'relu' or 'tanh'"),
    ('preprocessed(xi = "pearson_corelation", pre = ["sigmoid"])', "is not a registered interdependence entry"),
    ('preprocessed(xi = "gaussian_rbf_kernel", pre = ["sigmoid"], sigma = -1)', "'gaussian_rbf_kernel'"),
])
def test_bad_settings_are_located_errors(xi, says):
    with pytest.raises(rpn2c.SpecError) as err:
        rpn2c.check(_spec("xi_attribute", xi), "m.rpn")
    d = err.value.diagnostics[0]
    assert d.code == "E0303" and d.span.line == 4, (d.code, d.span, d.message)
    assert says in d.message


@pytest.mark.parametrize("axis", ["attribute", "instance"])
def test_affine_batch_norm_is_torchs_batchnorm1d_on_xis_input_batch(axis):
    """``affine = true``: ξ's input batch through ``torch.nn.BatchNorm1d`` (its γ, β; the batch's statistics), then
    the linear kernel A(i, j) = ⟨X̂(:, i), X̂(:, j)⟩ (eq 35), which a scale per column changes; the raw data is what
    A multiplies. Values and the gradients of γ and β, both lowerings."""
    x = torch.tensor(np.random.default_rng(5).standard_normal((2, 6, 4)))
    xi = 'preprocessed(xi = "linear_kernel", pre = ["batch_norm", "tanh"], affine = true)'
    text = _spec(f"xi_{axis}", xi)
    columns = 4 if axis == "attribute" else 6
    assert rpn2c.check(text).param_count == 2 * columns
    bn = torch.nn.BatchNorm1d(columns, track_running_stats=False).double()
    with torch.no_grad():
        bn.weight.copy_(torch.linspace(0.5, 2.0, columns))
        bn.bias.copy_(torch.linspace(-0.3, 0.4, columns))
    want = []
    for b in range(2):
        batch = x[b] if axis == "attribute" else x[b].T  # ξ's input batch: X or Xᵀ (eq 29), rows the batch
        processed = torch.tanh(bn(batch))
        a = processed.T @ processed
        want.append(x[b] @ a if axis == "attribute" else a.T @ x[b])
    want = torch.stack(want)
    want_grads = torch.autograd.grad(want.square().sum(), [bn.weight, bn.bias])
    for reference in (False, True):
        model = rpn2c.compile(text, reference=reference).double()
        (weight, gamma), (_, beta) = sorted((n, p) for n, p in model.named_parameters())[::-1]
        assert weight.endswith("weight")
        with torch.no_grad():
            gamma.copy_(bn.weight)
            beta.copy_(bn.bias)
        got = model(x)
        assert_close(got, want, rtol=1e-10, atol=1e-10)
        for g, w in zip(torch.autograd.grad(got.square().sum(), [gamma, beta]), want_grads):
            assert_close(g, w, rtol=1e-9, atol=1e-10)
        model.eval()
        assert_close(model(x), want.detach(), rtol=1e-10, atol=1e-10)  # the batch's statistics in eval too


def test_affine_needs_batch_norm_and_known_columns():
    with pytest.raises(rpn2c.SpecError) as err:
        rpn2c.check(_spec("xi_attribute", 'preprocessed(xi = "linear_kernel", pre = ["tanh"], affine = true)'))
    assert err.value.diagnostics[0].code == "E0303" and "add \"batch_norm\" to pre" in str(err.value)
    text = _spec("xi_instance", 'preprocessed(xi = "linear_kernel", pre = ["batch_norm"], affine = true)')
    with pytest.raises(rpn2c.SpecError) as err:
        rpn2c.check(text.replace("sequence[B, 6, 4]", "sequence[B, T, 4]"))
    d = err.value.diagnostics[0]
    assert d.code == "E0402" and d.span.line == 4 and "use affine = false" in d.message, (d.code, d.span, d.message)
