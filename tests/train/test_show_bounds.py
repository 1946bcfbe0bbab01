"""rpn2c show --bounds: the paper's §10 quantities (rank(A), ‖A‖∞, ‖AX‖₂→∞, eq 189–193) of a layer's literal ξ
matrices, against numpy on the same matrices and on independently built ones."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import rpn2c
from rpn2c.runtime.bounds import C4, C5, layer_bounds, matrix_bounds
from tests.train.helpers import run_cli

SPEC = """model b {
  input x: sequence[B, 6, 4]
  h = head(x) {
    xi_instance = chain(self_loop = true, norm = "row")
    xi_attribute = gaussian_rbf_kernel(sigma = 2.0)
    out = 3
  }
  return h
}
"""


def _numpy_bounds(a, x, d_out, m, delta, lip, omega, beta):
    """Eq 189–193 from numpy, written out."""
    n, d = x.shape
    rank = np.linalg.matrix_rank(a)
    inf = np.abs(a).sum(1).max()
    ax = a @ x
    rows = np.linalg.norm(ax, axis=1).max()  # sup_{|z|=1} |AXz|_inf
    c1, c2, c3 = 2 * lip * beta, 2 * lip * omega, lip * omega * math.sqrt(2 / d)
    rad = c1 * n * n / (m * (n - m)) + c3 * c2 * inf * rows * math.sqrt(math.log(n))
    gen = rad + C4 * n * math.sqrt(min(m, n - m)) / (m * (n - m)) + C5 * math.sqrt(n / (m * (n - m))
                                                                                * math.log(1 / delta))
    d_k_minus_1 = d  # eq 190's d_{K−1}: for one layer (K = 1) the width d_0 of the layer's input X
    vc = math.sqrt(8 / m * (min(rank, d_k_minus_1) * math.log(math.e * m) + math.log(4 / delta)))
    vc_out = math.sqrt(8 / m * (min(rank, d_out) * math.log(math.e * m) + math.log(4 / delta)))
    return {"rank": rank, "norm_inf": inf, "norm_2": np.linalg.norm(a, 2), "ax_2_inf": rows,
            "ax_cols": np.linalg.norm(ax, axis=0).max(),
            "ax_cols_bound": np.linalg.norm(a, 2) * np.linalg.norm(x, axis=0).max(),
            "vc": min(d, rank, d_out), "vc_bound": vc, "vc_bound_out": vc_out, "rademacher": rad, "generalisation": gen}


@pytest.mark.parametrize("shape, rank", [((7, 7), 3), ((5, 7), 5), ((6, 6), 6)])
def test_matrix_bounds_equal_numpy(shape, rank):
    g = np.random.default_rng(rank)
    a = g.standard_normal((shape[0], rank)) @ g.standard_normal((rank, shape[1]))
    x = g.standard_normal((shape[1], 4))
    got = matrix_bounds(torch.tensor(a), torch.tensor(x), d_out=5, labelled=3, delta=0.1, lipschitz=2.0,
                        omega=0.7, beta=1.5)
    want = _numpy_bounds(a, x, 5, 3, 0.1, 2.0, 0.7, 1.5)
    assert got.rank == want["rank"] == rank
    for key, value in want.items():
        assert getattr(got, key) == pytest.approx(value, rel=1e-10), key
    assert got.ax_cols <= got.ax_cols_bound * (1 + 1e-12)  # eq 193's relaxation (column form)
    assert got.ax_2_inf <= got.norm_inf * np.linalg.norm(x, axis=1).max() * (1 + 1e-12)  # row form: ‖A‖∞‖X‖₂→∞


def test_layer_bounds_on_the_literal_matrices():
    """The chain ξ is row-normalised I + shift (built here by hand); the attribute RBF kernel is checked on its
    transpose acting on Xᵀ; ω and β come from the head's ψ and bias."""
    torch.manual_seed(0)
    model = rpn2c.compile(SPEC, reference=True).double()
    with torch.no_grad():
        model.h.bias.copy_(torch.tensor([0.5, -1.0, 2.0]))
    x = torch.randn(2, 6, 4, dtype=torch.float64)
    found = {("instance" if "instance" in b.title else "attribute"): b
             for b in layer_bounds(model, "h", {"x": x}, labelled=4, delta=0.05)}
    chain = np.eye(6) + np.eye(6, k=-1)
    chain /= chain.sum(1, keepdims=True)
    w = model.h.psi.weight.detach().numpy()
    want = _numpy_bounds(chain, x[0].numpy(), 3, 4, 0.05, 1.0, np.abs(w).max(), 3.5)
    got = found["instance"]
    assert (got.omega, got.beta) == (pytest.approx(np.abs(w).max()), pytest.approx(3.5))
    for key, value in want.items():
        assert getattr(got, key) == pytest.approx(value, rel=1e-10), key
    xt = x[0].numpy().T  # [4 features, 6 items]
    d2 = ((xt[:, None, :] - xt[None, :, :]) ** 2).sum(-1)
    rbf = np.exp(-d2 / (2 * 2.0 ** 2))
    att = found["attribute"]
    assert att.shape == (4, 4) and att.rank == np.linalg.matrix_rank(rbf)
    assert att.norm_inf == pytest.approx(np.abs(rbf.T).sum(1).max(), rel=1e-10)
    assert att.ax_2_inf == pytest.approx(np.linalg.norm(rbf.T @ xt, axis=1).max(), rel=1e-10)


def test_eq_190_uses_the_input_width_as_printed_and_keeps_the_output_width_reading():
    """Eq 190 written from the paper with K = 1: min{rank A, d_{K−1}} = min{rank A, d_0}. On a rank-3 A with 2 input
    features and 5 outputs the two readings differ (min = 2 against 3); both are reported."""
    g = np.random.default_rng(7)
    a = g.standard_normal((6, 3)) @ g.standard_normal((3, 6))
    x = g.standard_normal((6, 2))
    m, delta = 3, 0.05
    got = matrix_bounds(torch.tensor(a), torch.tensor(x), d_out=5, labelled=m, delta=delta)
    paper = math.sqrt(8 / 3 * (2 * math.log(math.e * 3) + math.log(4 / 0.05)))  # min{3, d_0 = 2} = 2
    output_reading = math.sqrt(8 / 3 * (3 * math.log(math.e * 3) + math.log(4 / 0.05)))  # min{3, d_1 = 5} = 3
    assert got.vc_bound == pytest.approx(paper, rel=1e-12)
    assert got.vc_bound_out == pytest.approx(output_reading, rel=1e-12)
    assert got.vc_bound_out - got.vc_bound > 0.4
    x_wide = g.standard_normal((6, 4))  # rank 3 below both widths: the readings agree
    wide = matrix_bounds(torch.tensor(a), torch.tensor(x_wide), d_out=5, labelled=m, delta=delta)
    assert wide.vc_bound == pytest.approx(wide.vc_bound_out, rel=1e-12) == pytest.approx(output_reading)


def test_show_bounds_cli_prints_and_writes_json(capsys, tmp_path):
    spec = tmp_path / "b.rpn"
    spec.write_text(SPEC, encoding="utf-8")
    code, out, err = run_cli(capsys, "show", spec, "--bounds", "--layer", "h", "--labelled", "4")
    assert code == 0, err
    assert "rank(A) = 6   ‖A‖∞ = 1 " in out and "eq 191" in out and "eq 193" in out and "VC (eq 189)" in out
    code, out, err = run_cli(capsys, "show", spec, "--bounds", "--format", "json", "--labelled", "4")
    assert code == 0, err
    data = json.loads(out)
    chain = next(m for m in data["matrices"] if "instance" in m["title"])
    assert chain["rank"] == 6 and chain["norm_inf"] == pytest.approx(1.0) and chain["m"] == 4


@pytest.mark.parametrize("argv, message", [
    (["--labelled", "6"], "1 <= m < n = 6"),
    (["--delta", "1.5"], "δ must lie in (0, 1)"),
    (["--format", "npz"], "--bounds prints text, or JSON with --format json"),
])
def test_show_bounds_refuses_bad_settings(capsys, tmp_path, argv, message):
    spec = tmp_path / "b.rpn"
    spec.write_text(SPEC, encoding="utf-8")
    code, out, err = run_cli(capsys, "show", spec, "--bounds", "--layer", "h", *argv)
    assert code != 0 and message in err and "Traceback" not in err
