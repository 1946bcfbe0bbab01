"""Seed 004's sparse-matrix view: every layer as ``vec(y) = M·vec(x) + b``, M built from the layer's parameters and
the reference lowering's literal matrices, checked in float64 against the compiled layer (default lowering) and
against hand-written constructions: conv (banded block-Toeplitz), pooling, ψ-only, chain, graph (Â ⊗ Wᵀ),
attention (data-dependent third-order tensor), the unrolled linear RNN and the gated cells' pre-activations."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import rpn2c
from rpn2c.data import load
from rpn2c.runtime.layer_matrix import ViewError, layer_matrix
from rpn2c.train.binding import bind
from tests.train.helpers import ROOT, run_cli

SPECS = ROOT / "specs"
PNG = b"\x89PNG\r\n\x1a\n"
D = torch.float64


def _compiled(text_or_name, **kw):
    torch.manual_seed(0)
    if text_or_name.endswith(".rpn"):
        model = rpn2c.compile_file(SPECS / text_or_name, **kw)
    else:
        model = rpn2c.compile(text_or_name, **kw)
    model.emit(inline=False)  # the program calls the layer modules, so hooks see the layers' own outputs
    return model.double().eval()


def _module(model, layer):
    for part in layer.split("."):
        model = getattr(model, part)
    return model


def _layer_output(model, layer, inputs, sample=0):
    """What the compiled layer itself returns for sample ``sample`` (a forward hook on its module)."""
    got = {}
    handle = _module(model, layer).register_forward_hook(lambda m, a, o: got.setdefault("y", o))
    with torch.no_grad():
        model(**inputs)
    handle.remove()
    return got["y"][sample]


def _reproduces(model, layer, inputs, sample=0):
    """post(M u + b) == the layer's output; returns the view."""
    view = layer_matrix(model, layer, inputs, sample=sample)
    y = view.output()
    for p in getattr(_module(model, layer), "post", ()):
        y = p(y.unsqueeze(0)).squeeze(0)
    want = _layer_output(model, layer, inputs, sample)
    torch.testing.assert_close(y.reshape(want.shape), want, rtol=1e-10, atol=1e-10)
    return view


def _karate(model):
    ds = load("karate", seed=0)
    return ds, bind(model.graph, ds).inputs(ds.test[0].double(), ds.test[1])


@pytest.mark.parametrize("spec, shape", [("cnn.rpn", (2, 1, 8, 8)), ("mlp.rpn", (2, 30)),
                                         ("rnn_chain.rpn", (2, 6, 8)), ("transformer.rpn", (2, 5, 32))])
def test_every_layer_of_a_backbone_is_its_matrix(spec, shape):
    model = _compiled(spec)
    x = torch.randn(*shape, dtype=D)
    for node in model.graph.nodes():
        if node.kind == "layer":
            for sample in (0, 1):
                view = _reproduces(model, node.id, {"x": x}, sample)
                if node.layer.heads[0].kappa.name == "identity" and not node.trace["heads"][0].grid_kappa:
                    assert torch.equal(view.u, _layer_input(model, node.id, {"x": x})[sample].flatten())


def _layer_input(model, layer, inputs):
    got = {}
    handle = _module(model, layer).register_forward_pre_hook(lambda m, a: got.setdefault("x", a[0]))
    with torch.no_grad():
        model(**inputs)
    handle.remove()
    return got["x"]


def test_gcn_layers_are_the_kronecker_product_of_the_adjacency_and_the_weights():
    model = _compiled("gcn.rpn")
    ds, inputs = _karate(model)
    adj = torch.zeros(34, 34, dtype=D)
    adj[ds.test[1][1], ds.test[1][0]] = 1
    adj += torch.eye(34, dtype=D)
    d = adj.sum(1).rsqrt()
    a_hat = d[:, None] * adj * d[None, :]
    for layer in ("h", "y"):
        view = _reproduces(model, layer, inputs)
        w_t = _module(model, layer).psi.matrix()  # Ψ = Wᵀ, W ∈ R^{D×n}
        torch.testing.assert_close(view.matrix, torch.kron(a_hat, w_t))
        assert view.kind == "graph convolution" and view.summary()["structure"] == "Kronecker Â ⊗ Wᵀ"


def test_attention_is_the_data_dependent_tensor_times_the_value_output_maps():
    model = _compiled("transformer.rpn")
    x = torch.randn(3, 5, 32, dtype=D)
    view = _reproduces(model, "y.attn", {"x": x}, sample=2)
    attn = model.y.attn
    w_o = attn.fusion.linear.weight.split(8, dim=1)  # [32, 8] per head
    want = torch.eye(5 * 32, dtype=D)  # π = identity
    for h, name in enumerate(["h0", "h1", "h2", "h3"]):
        xi = attn.heads[name].xi_instance
        q, k = x[2] @ xi.w_q + xi.b_q, x[2] @ xi.w_k + xi.b_k
        a = torch.softmax(q @ k.T / math.sqrt(8), -1)
        torch.testing.assert_close(view.factors["tensor"][h], a)
        want += torch.kron(a, w_o[h] @ attn.heads[name].psi.matrix())
    torch.testing.assert_close(view.matrix, want)
    assert view.data_dependent and view.factors["tensor"].shape == (4, 5, 5)
    factored = sum(torch.kron(t, v) for t, v in zip(view.factors["tensor"], view.factors["value_output"]))
    torch.testing.assert_close(factored + torch.eye(5 * 32, dtype=D), view.matrix)  # M = Σ_h 𝒯[h] ⊗ V[h] + I


def test_a_perceptron_is_its_weight_matrix_and_a_chain_layer_is_block_lower_triangular():
    model = _compiled("cnn.rpn")
    view = _reproduces(model, "h", {"x": torch.randn(1, 1, 8, 8, dtype=D)})
    assert torch.equal(view.matrix, model.h.psi.matrix()) and torch.equal(view.bias, model.h.bias)
    chain = _compiled("rnn_chain.rpn")
    view = _reproduces(chain, "h1", {"x": torch.randn(1, 6, 8, dtype=D)})
    u = chain.h1.psi.matrix()
    want = torch.kron(torch.diag(torch.ones(5, dtype=D), -1), u) + torch.eye(6 * 32, dtype=D)  # A ⊗ Ψ + I (π)
    torch.testing.assert_close(view.matrix, want)
    assert view.summary()["upper_bandwidth"] == 0 and view.summary()["blocks"]["lower_bandwidth"] == 1


def test_an_expansion_head_acts_on_the_lifted_input():
    model = _compiled("mlp.rpn")
    x = torch.randn(1, 30, dtype=D)
    view = _reproduces(model, "h2", {"x": x})
    h1 = _layer_input(model, "h2", {"x": x})[0]
    kappa = torch.cat([h1, 2 * h1 ** 2 - 1, 4 * h1 ** 3 - 3 * h1])  # Chebyshev T1..T3, degree-major
    assert view.matrix.shape == (32, 3 * 32 + 32)
    torch.testing.assert_close(view.u[96:], h1)
    assert torch.allclose(torch.sort(view.u[:96]).values, torch.sort(kappa).values)


# ------------------------------------------------------------------------------------------------ convolution
def _conv_spec(cin, n, size, stride, pad, dilation, groups, mode, patches):
    return (f"model m {{\n  input x: image[B, {cin}, 7, 6]\n  y = head(x) {{\n"
            f"    xi_attribute = grid_patch(size = {size}, stride = {stride}, pad = {pad}, dilation = {dilation}, "
            f"padding_mode = \"{mode}\", mode = \"{patches}\")\n"
            f"    out = {n}\n    groups = {groups}\n  }}\n  return y\n}}\n")


@settings(max_examples=12, deadline=None)
@given(g=st.sampled_from([1, 2]), size=st.integers(1, 3), stride=st.integers(1, 2), pad=st.integers(0, 2),
       dilation=st.integers(1, 2), mode=st.sampled_from(["zeros", "circular"]),
       patches=st.sampled_from(["padding", "padding", "aggregation"]))
def test_a_convolution_is_a_banded_block_toeplitz_matrix(g, size, stride, pad, dilation, mode, patches):
    assume(6 + 2 * pad - dilation * (size - 1) >= 1)
    cin, n = 2 * g, 2 * g
    model = _compiled(_conv_spec(cin, n, size, stride, pad, dilation, g, mode, patches))
    with torch.no_grad():
        model.y.bias.normal_()
    x = torch.randn(1, cin, 7, 6, dtype=D)
    view = _reproduces(model, "y", {"x": x})
    psi = model.y.psi.matrix()
    if patches == "padding":  # the kernel, channel-major taps
        weight = psi.reshape(n, cin // g, size, size)
    else:  # every tap of a patch summed first: the kernel is Ψ[o, c] at every tap
        weight = psi[:, :, None, None].expand(n, cin // g, size, size)
    padded = F.pad(x, [pad] * 4, mode="circular") if mode == "circular" else F.pad(x, [pad] * 4)
    want = F.conv2d(padded, weight, model.y.bias, stride=stride, dilation=dilation, groups=g)
    torch.testing.assert_close(view.output(), want[0])
    nnz_per_row = (view.matrix != 0).sum(1)
    assert int(nnz_per_row.max()) <= cin // g * size * size  # one patch of one group per row
    h_out, w_out = view.out_shape[1:]
    if stride == 1 and pad == 0 and w_out > 1:  # Toeplitz: the next output column reads the next input column
        m = view.matrix.reshape(n, h_out, w_out, cin, 7, 6)
        assert torch.equal(m[:, :, 0, :, :, :-1], m[:, :, 1, :, :, 1:])


# ------------------------------------------------------------------------------------------------ pooling
def _pool_spec(kappa):
    return f"model m {{\n  input x: image[B, 3, 6, 5]\n  y = compress(x) {{ kappa = {kappa} }}\n  return y\n}}\n"


@settings(max_examples=10, deadline=None)
@given(metric=st.sampled_from(["patch_mean", "patch_max", "patch_min", "patch_pool"]), size=st.integers(1, 3),
       stride=st.integers(1, 3), pad=st.integers(0, 1))
def test_pooling_is_an_averaging_or_a_selection_matrix(metric, size, stride, pad):
    assume(pad * 2 <= size)
    how = 'metric = "sum", ' if metric == "patch_pool" else ""
    model = _compiled(_pool_spec(f"{metric}({how}size = {size}, stride = {stride}, pad = {pad})"))
    x = torch.randn(2, 3, 6, 5, dtype=D)
    view = _reproduces(model, "y", {"x": x}, sample=1)
    m = view.matrix
    if metric in ("patch_max", "patch_min"):
        assert view.data_dependent and set(m.unique().tolist()) <= {0.0, 1.0} and (m.sum(1) <= 1).all()
        want = {"patch_max": F.max_pool2d, "patch_min": lambda t, *a: -F.max_pool2d(-t, *a)}[metric](
            x[1:], size, stride, pad)
        torch.testing.assert_close(view.output(), want[0])
    else:
        other = layer_matrix(model, "y", {"x": torch.randn(2, 3, 6, 5, dtype=D)})
        assert torch.equal(m, other.matrix) and not view.data_dependent  # the same matrix for every input
        if metric == "patch_mean" and pad == 0:
            torch.testing.assert_close(m.sum(1), torch.ones(len(m), dtype=D))
    assert (m.reshape(3, -1, 3, 30)[[0, 0, 1, 1, 2, 2], :, [1, 2, 0, 2, 0, 1]] == 0).all()  # I_C ⊗ S


@settings(max_examples=10, deadline=None)
@given(how=st.sampled_from(["mean", "max"]), h=st.integers(1, 6), w=st.integers(1, 5))
def test_adaptive_pooling_is_its_bins_averaging_or_selection_matrix(how, h, w):
    """Adaptive bins (unequal and overlapping where the size does not divide the grid): the mean as one matrix for
    every input, rows summing to 1; the max as the input's one-hot winners; both reproduce the layer (found by
    the fuzz lanes: `show` took adaptive pooling for patch pooling)."""
    model = _compiled(_pool_spec(f'adaptive_pool(size = [{h}, {w}], metric = "{how}")'))
    x = torch.randn(2, 3, 6, 5, dtype=D)
    view = _reproduces(model, "y", {"x": x}, sample=1)
    m = view.matrix
    want = (F.adaptive_avg_pool2d if how == "mean" else F.adaptive_max_pool2d)(x[1:], (h, w))
    torch.testing.assert_close(view.output(), want[0])
    if how == "mean":
        other = layer_matrix(model, "y", {"x": torch.randn(2, 3, 6, 5, dtype=D)})
        assert torch.equal(m, other.matrix) and not view.data_dependent
        torch.testing.assert_close(m.sum(1), torch.ones(len(m), dtype=D))
    else:
        assert view.data_dependent and set(m.unique().tolist()) <= {0.0, 1.0} and (m.sum(1) == 1).all()
    assert (m.reshape(3, -1, 3, 30)[[0, 0, 1, 1, 2, 2], :, [1, 2, 0, 2, 0, 1]] == 0).all()  # I_C ⊗ P


# ------------------------------------------------------------------------------------------------ recurrence
def _rnn_spec(cell, layers=1, bidirectional="false"):
    return (f"model m {{\n  input x: sequence[B, T, 3]\n  y = recurrent(x) {{\n    cell = {cell}\n    out = 4\n"
            f"    layers = {layers}\n    bidirectional = {bidirectional}\n  }}\n  return y\n}}\n")


@pytest.mark.parametrize("layers, bidirectional", [(1, "false"), (2, "true")])
def test_a_relu_rnn_in_its_linear_region_is_the_block_lower_triangular_matrix(layers, bidirectional):
    model = _compiled(_rnn_spec('rnn(nonlinearity = "relu")', layers, bidirectional))
    with torch.no_grad():
        for p in model.y.parameters():
            p.abs_().mul_(0.3)  # non-negative weights and inputs: every pre-activation >= 0, relu = identity
    x = torch.rand(1, 5, 3, dtype=D)
    view = _reproduces(model, "y", {"x": x})
    if layers == 1:
        u, v = model.y.weight_ih_l0, model.y.weight_hh_l0
        blocks = view.matrix.reshape(5, 4, 5, 3)
        for t in range(5):
            for s in range(5):
                want = torch.linalg.matrix_power(v, t - s) @ u if s <= t else torch.zeros(4, 3, dtype=D)
                torch.testing.assert_close(blocks[t, :, s], want)


def test_a_tanh_rnn_matrix_is_the_recurrence_with_sigma_removed():
    model = _compiled(_rnn_spec("rnn"))
    x = torch.randn(1, 6, 3, dtype=D)
    view = layer_matrix(model, "y", {"x": x})
    w = model.y
    h, outs = torch.zeros(4, dtype=D), []
    for t in range(6):  # the linear recurrence written by hand
        h = w.weight_ih_l0 @ x[0, t] + w.bias_ih_l0 + w.weight_hh_l0 @ h + w.bias_hh_l0
        outs.append(h)
    torch.testing.assert_close(view.output(), torch.stack(outs).detach())
    assert view.summary()["blocks"]["upper_bandwidth"] == 0  # block lower-triangular over time


def test_gated_cells_are_their_exact_pre_activation_map_over_time():
    model = _compiled("rnn.rpn")
    x = torch.randn(2, 5, 8, dtype=D)
    view = layer_matrix(model, "r", {"x": x}, sample=1)
    pre = view.output()  # [layers·directions, T, 2, G]: [W_ih x_t + b_ih; W_hh h_{t-1} + b_hh]
    cell = model.graph.node("r").layer.cell.component
    h = torch.zeros(32, dtype=D)
    for t in range(5):  # the cell driven by the matrix's pre-activations reproduces the first layer's states
        (h,) = cell.step(pre[0, t, 0], pre[0, t, 1], (h,))
        torch.testing.assert_close(h, view.factors["H_0"][t])
    torch.testing.assert_close(view.factors["H_1"], _layer_output(model, "r", {"x": x}, 1))
    blocks = (view.matrix != 0).reshape(2, 5, 2 * 96, -1)[0, :, :, 5 * 32:2 * 5 * 32].reshape(5, 192, 5, 32)
    # the state columns of the first layer: strictly lower-triangular over time (step t reads h_{t−1})
    assert torch.equal(blocks.any(dim=(1, 3)), torch.diag(torch.ones(4, dtype=torch.bool), -1))


def test_errors_name_the_layer():
    model = _compiled("cnn.rpn")
    with pytest.raises(ViewError, match="has no layer 'c11'; did you mean 'c1'"):
        layer_matrix(model, "c11", {"x": torch.randn(1, 1, 8, 8, dtype=D)})


# ------------------------------------------------------------------------------------------------ CLI
@pytest.mark.parametrize("layer, line", [("p1", "p1: pooling (max): M: 256×1024, 256 non-zero"),
                                         ("h", "h: perceptron: M: 64×128, 8192 non-zero")])
def test_show_draws_pooling_and_psi_only_layers(capsys, tmp_path, layer, line):
    out = tmp_path / "m.png"
    code, stdout, err = run_cli(capsys, "show", SPECS / "cnn.rpn", "--layer", layer, "--out", out)
    assert code == 0, err
    assert stdout.splitlines() == [line, f"wrote {out}"]
    assert out.read_bytes()[:8] == PNG and out.stat().st_size > 5000


def test_show_writes_the_matrix_as_data(capsys, tmp_path):
    code, stdout, err = run_cli(capsys, "show", SPECS / "cnn.rpn", "--layer", "c1", "--format", "json")
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["shape"] == [1024, 64] and summary["nnz"] == 16 * 484 and summary["kind"] == "convolution"
    assert summary["blocks"]["lower_bandwidth"] == summary["blocks"]["upper_bandwidth"] == 8 + 1  # bW + b
    assert summary["output_shape"] == [16, 8, 8] and summary["blocks"]["shape"] == [64, 64]
    code, _, err = run_cli(capsys, "show", SPECS / "cnn.rpn", "--format", "npz", "--out", tmp_path / "all.npz")
    assert code == 0, err
    arrays = np.load(tmp_path / "all.npz")
    assert arrays["c1/M"].shape == (1024, 64) and arrays["p2/M"].shape == (128, 512) and "y/b" in arrays
    code, _, err = run_cli(capsys, "show", SPECS / "cnn.rpn", "--layer", "y", "--format", "npy",
                           "--out", tmp_path / "y.npy")
    assert code == 0 and np.load(tmp_path / "y.npy").shape == (10, 64)
    code, _, err = run_cli(capsys, "show", SPECS / "cnn.rpn", "--format", "npy")
    assert code == 2 and "name a --layer" in err


def test_show_draws_every_layer_into_a_folder(capsys, tmp_path):
    code, stdout, err = run_cli(capsys, "show", SPECS / "rnn_chain.rpn", "--view", "matrix", "--out", tmp_path / "pics")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "pics").iterdir()) == ["e.png", "h1.png", "h2.png", "y.png"]
    assert "h1: chain recurrence: M: 256×256, " in stdout  # T = 8 steps of 32 features


def test_show_a_missing_layer_says_did_you_mean(capsys, tmp_path):
    code, out, err = run_cli(capsys, "show", SPECS / "cnn.rpn", "--layer", "p11", "--view", "matrix")
    assert code == 1 and "model 'cnn' has no layer 'p11'; did you mean 'p1'?" in err and "Traceback" not in err


def test_layers_without_a_matrix_are_named_and_skipped(capsys, tmp_path, monkeypatch):
    spec = tmp_path / "m.rpn"
    spec.write_text("model m {\n  input x: image[B, 2, 4, 4]\n  p = compress(x) { kappa = patch_pool(size = 2, "
                    "metric = \"median\") }\n  f = flatten(p)\n  y = head(f) { out = 3 }\n  return y\n}\n")
    code, out, err = run_cli(capsys, "show", spec, "--format", "json")
    assert code == 0, err
    assert "p: no matrix view: layer 'p': pooling by median is not a matrix" in err
    assert [s["layer"] for s in json.loads(out)["layers"]] == ["y"]
    code, out, err = run_cli(capsys, "show", spec, "--layer", "p", "--view", "matrix", "--out", tmp_path / "p.png")
    assert code == 1 and "pooling by median is not a matrix" in err and not (tmp_path / "p.png").exists()
    monkeypatch.setattr("rpn2c.runtime.layer_matrix.MAX_ENTRIES", 10)
    with pytest.raises(ViewError, match=r"its matrix would have 8 × 3 entries \(at most 10\)"):
        layer_matrix(_compiled(spec.read_text()), "y", {"x": torch.randn(1, 2, 4, 4, dtype=D)})


def test_show_makes_up_valid_token_ids_and_keeps_data_ids_integer(capsys):
    """A tokens input gets random ids below the embedding's vocabulary (not floats), with or without --data."""
    spec = ROOT / "examples" / "specs" / "token_transformer.rpn"
    for extra, items in (((), 8), (("--data", "majority"), 16)):  # made-up T = 8; the data set's T = 16
        code, stdout, err = run_cli(capsys, "show", spec, "--layer", "h.ff", "--format", "json", *extra)
        assert code == 0, err
        summary = json.loads(stdout)
        assert summary["layer"] == "h.ff" and summary["structure"] == "dense W" and summary["shape"] == [64 * items, 32 * items]
