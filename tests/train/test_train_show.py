"""rpn2c show: the pictured matrices are the literal ξ matrices (checked against independent constructions)."""

from __future__ import annotations

import math

import pytest
import torch

import rpn2c
from rpn2c.data import load
from rpn2c.train.binding import bind
from rpn2c.train.interdependence import layer_matrices
from tests.train.helpers import ROOT, run_cli

PNG = b"\x89PNG\r\n\x1a\n"
SPECS = ROOT / "specs"


def _reference(name):
    torch.manual_seed(0)
    return rpn2c.compile_file(SPECS / f"{name}.rpn", reference=True).double()


def test_grid_patch_matrix_is_im2col():
    mats = layer_matrices(_reference("cnn"), "c1", {"x": torch.randn(1, 1, 8, 8, dtype=torch.float64)})
    (m,) = mats
    a = m.matrix
    assert a.shape == (64, 64 * 9) and m.slot == "xi_attribute"
    assert set(a.unique().tolist()) == {0.0, 1.0} and (a.sum(0) <= 1).all()  # each (patch, tap) reads one cell
    for q in range(64):  # tap j of the patch centred on cell (r, c) reads cell (r + dr, c + dc), or padding
        r, c = divmod(q, 8)
        for j in range(9):
            dr, dc = divmod(j, 3)
            rr, cc = r + dr - 1, c + dc - 1
            col = a[:, q * 9 + j]
            if 0 <= rr < 8 and 0 <= cc < 8:
                assert col[rr * 8 + cc] == 1
            else:
                assert col.sum() == 0


def test_chain_matrix_is_the_shift():
    (m,) = layer_matrices(_reference("rnn_chain"), "h1", {"x": torch.randn(2, 7, 8, dtype=torch.float64)})
    assert torch.equal(m.matrix, torch.diag(torch.ones(6, dtype=torch.float64), -1))  # A[t, t-1] = 1
    (m2,) = layer_matrices(_reference("rnn_chain"), "h2", {"x": torch.randn(2, 7, 8, dtype=torch.float64)})
    a = torch.eye(7) + torch.diag(torch.ones(6), -1) + torch.diag(torch.ones(5), -2)
    assert torch.allclose(m2.matrix, (a / a.sum(1, keepdim=True)).double())  # I + A + A², row-normalised


def test_a_recurrent_layer_shows_the_chain_that_feeds_back_its_state():
    (m,) = layer_matrices(_reference("rnn"), "r", {"x": torch.randn(2, 5, 8, dtype=torch.float64)})
    assert torch.equal(m.matrix, torch.diag(torch.ones(4, dtype=torch.float64), -1))


def test_graph_matrix_is_the_normalised_adjacency():
    ds = load("karate", seed=0)
    model = _reference("gcn")
    (m,) = layer_matrices(model, "h", bind(model.graph, ds).inputs(ds.test[0].double(), ds.test[1]))
    adj = torch.zeros(34, 34, dtype=torch.float64)
    adj[ds.test[1][1], ds.test[1][0]] = 1
    adj += torch.eye(34, dtype=torch.float64)
    d = adj.sum(1).rsqrt()
    assert torch.allclose(m.matrix, d[:, None] * adj * d[None, :])


def test_attention_matrices_are_the_softmax_of_the_bilinear_form():
    model = _reference("transformer")
    x = torch.randn(3, 5, 32, dtype=torch.float64)
    mats = layer_matrices(model, "y.attn", {"x": x}, sample=1)
    assert [m.head for m in mats] == ["h0", "h1", "h2", "h3"]
    for m in mats:
        xi = model.y.attn.heads[m.head].xi_instance
        q = x[1] @ xi.w_q + xi.b_q
        k = x[1] @ xi.w_k + xi.b_k
        assert torch.allclose(m.matrix, torch.softmax(q @ k.T / math.sqrt(8), -1))
        assert torch.allclose(m.matrix.sum(1), torch.ones(5, dtype=torch.float64))


@pytest.mark.parametrize("spec, layer, extra, lines", [
    ("cnn", "c1", [], ["c1: xi_attribute = grid_patch(size=3, pad=1): 64×576, 484 non-zero"]),
    ("rnn_chain", "h1", ["--dim", "T=10"], ["h1: xi_instance = chain: 10×10, 9 non-zero"]),
    ("rnn", "r", [], ['r: state chain = chain(direction = "forward") feeding the gru cell: 8×8, 7 non-zero']),
    ("gcn", "y", ["--data", "karate"], [("y: xi_instance = graph(edges=edges, norm=symmetric, self_loops=True): "
                                       "34×34, 190 non-zero")]),
    ("transformer", "y.attn", [], [f"y.attn: h{i}: xi_instance = low_rank_bilinear(bias=True, rank=8): 8×8, 64 "
                                   "non-zero" for i in range(4)]),
])
def test_show_writes_a_png(capsys, tmp_path, spec, layer, extra, lines):
    out = tmp_path / "m.png"
    code, stdout, err = run_cli(capsys, "show", SPECS / f"{spec}.rpn", "--layer", layer, "--out", out, *extra)
    assert code == 0, err
    assert stdout.splitlines() == lines + [f"wrote {out}"]
    assert out.read_bytes()[:8] == PNG and out.stat().st_size > 5000


def test_show_with_trained_weights_and_a_data_sample(capsys, tmp_path):
    code, _, err = run_cli(capsys, "train", SPECS / "cnn.rpn", "--data", "digits", "--epochs", "1",
                           "--out", tmp_path / "run", "--quiet")
    assert code == 0, err
    code, out, err = run_cli(capsys, "show", SPECS / "cnn.rpn", "--layer", "c2", "--data", "digits", "--index", "5",
                             "--checkpoint", tmp_path / "run" / "checkpoint.pt", "--out", tmp_path / "c2.png")
    assert code == 0, err
    assert "c2: xi_attribute = grid_patch(size=3, pad=1): 16×144" in out


@pytest.mark.parametrize("spec, argv, message", [
    ("transformer", ["--layer", "y.atn"], "model 'transformer' has no layer 'y.atn'; did you mean 'y.attn'?"),
    ("cnn", ["--layer", "conv1"], "model 'cnn' has no layer 'conv1' (layers: c1, p1, c2, p2, h, y)"),
    ("cnn", ["--layer", "c11"], "has no layer 'c11'; did you mean 'c1'?"),
    ("cnn", ["--layer", "h", "--view", "xi"], "layer 'h' of model 'cnn' has no interdependence function"),
    ("cnn", ["--layer", "x"], "'x' is an input node of model 'cnn', not a head layer"),
    ("gcn", ["--layer", "h"], "pass --data with a graph dataset (e.g. --data karate)"),
])
def test_show_refuses_what_it_cannot_draw(capsys, tmp_path, spec, argv, message):
    code, out, err = run_cli(capsys, "show", SPECS / f"{spec}.rpn", *argv, "--out", tmp_path / "m.png")
    assert code == 1 and out == "" and message in err and "Traceback" not in err
    assert not (tmp_path / "m.png").exists()


def test_show_of_a_checkpoint_sizes_random_input_by_its_training_data(capsys, tmp_path):
    """Without --data, the random input takes the symbolic sizes of the data the checkpoint was trained on
    (sunspots: T = 12), not the defaults (8); --dim still overrides them."""
    code, _, err = run_cli(capsys, "train", SPECS / "rnn_chain.rpn", "--data", "sunspots", "--param", "features=1",
                           "--param", "classes=1", "--epochs", "1", "--out", tmp_path / "run", "--quiet")
    assert code == 0, err
    ckpt = tmp_path / "run" / "checkpoint.pt"
    for extra, n in (([], 12), (["--dim", "T=5"], 5)):
        code, out, err = run_cli(capsys, "show", SPECS / "rnn_chain.rpn", "--layer", "h1", "--checkpoint", ckpt,
                                 "--out", tmp_path / "h1.png", *extra)
        assert code == 0, err
        assert out.splitlines()[0] == f"h1: xi_instance = chain: {n}×{n}, {n - 1} non-zero"


GAT = ROOT / "examples" / "specs" / "gat_nodes.rpn"
KARATE_ENTRIES = 2 * 78 + 34  # each undirected edge both ways, and one self-loop per node


def _gat_in_training_mode():
    """gat_nodes (dropout 0.6 on the attention and on each layer's input) on karate, left in training mode."""
    torch.manual_seed(0)
    model = rpn2c.compile_file(GAT, reference=True).double().train()
    ds = load("karate", seed=0)
    return model, bind(model.graph, ds).inputs(ds.test[0].double(), ds.test[1])


def test_views_of_a_model_in_training_mode_are_drawn_in_eval_mode():
    """ξ matrices, the layer's matrix and the §10 bounds draw no dropout: whatever the random state they equal the
    eval-mode model's, every attention matrix has all its entries, and the model keeps its mode."""
    from rpn2c.runtime.bounds import layer_bounds
    from rpn2c.runtime.layer_matrix import layer_matrix

    model, inputs = _gat_in_training_mode()

    def views():
        mats = layer_matrices(model, "h", inputs)
        return ([m.matrix for m in mats], layer_matrix(model, "h", inputs).matrix,
                [b.summary() for b in layer_bounds(model, "h", inputs)])

    drawn = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        drawn.append(views())
        assert model.training
    model.eval()
    want = views()
    for mats, matrix, bounds in drawn:
        assert [int((m != 0).sum()) for m in mats] == [KARATE_ENTRIES] * 4
        assert all(torch.equal(m, w) for m, w in zip(mats, want[0]))
        assert torch.equal(matrix, want[1]) and int((matrix != 0).sum()) == KARATE_ENTRIES * 34 * 32
        assert bounds == want[2]


def test_show_of_a_dropout_spec_is_the_same_picture_for_every_seed(capsys, tmp_path):
    """With trained weights and a data sample the seed draws nothing: the same matrices for --seed 0 and 1, every
    attention entry present."""
    import numpy as np

    code, _, err = run_cli(capsys, "train", GAT, "--data", "karate", "--epochs", "1", "--out", tmp_path / "run",
                           "--quiet")
    assert code == 0, err
    ckpt, arrays, lines = tmp_path / "run" / "checkpoint.pt", [], []
    for seed in (0, 1):
        out = tmp_path / f"s{seed}.npz"
        code, _, err = run_cli(capsys, "show", GAT, "--data", "karate", "--checkpoint", ckpt, "--seed", seed,
                               "--format", "npz", "--out", out)
        assert code == 0, err
        arrays.append(dict(np.load(out)))
        code, stdout, err = run_cli(capsys, "show", GAT, "--data", "karate", "--checkpoint", ckpt, "--seed", seed,
                                    "--out", tmp_path / f"s{seed}")
        assert code == 0, err
        lines.append([line for line in stdout.splitlines() if "non-zero" in line])
    assert arrays[0].keys() == arrays[1].keys() and all(np.array_equal(arrays[0][k], arrays[1][k]) for k in arrays[0])
    assert lines[0] == lines[1] and len(lines[0]) == 5
    assert all(line.endswith(f"34×34, {KARATE_ENTRIES} non-zero") for line in lines[0])


def test_show_refuses_a_dim_the_spec_does_not_have_and_a_dim_beside_data(capsys, tmp_path):
    """``--dim`` sizes the random input: a name the inputs lack is refused with the closest, and so is ``--dim``
    with ``--data`` (the sample has its own sizes); neither is silently ignored."""
    code, _, err = run_cli(capsys, "show", SPECS / "rnn_chain.rpn", "--dim", "t=5", "--out", tmp_path / "a.png")
    assert code == 2 and "has no dimension 't' (its inputs' symbolic dimensions: B, T); did you mean 'T'?" in err
    code, _, err = run_cli(capsys, "show", SPECS / "gcn.rpn", "--data", "karate", "--dim", "N=5",
                           "--out", tmp_path / "b.png")
    assert code == 2 and "with --data the sample has its own sizes" in err
    assert not (tmp_path / "a.png").exists() and not (tmp_path / "b.png").exists()


def test_show_draws_a_matrix_with_non_finite_entries_blank(capsys, tmp_path):
    """A bilinear form whose scale overflows (1e308) gives inf entries: the picture leaves them blank and says how
    many, instead of failing in matplotlib's colour bar."""
    spec = tmp_path / "m.rpn"
    spec.write_text("model m {\n  input x: sequence[B, T, 6]\n  y = head(x) {\n"
                    "    xi_instance = low_rank_bilinear(rank = 4, softmax = false, causal = true, scale = 1e308)\n"
                    "    out = 5\n  }\n  return y\n}\n")
    out = tmp_path / "view"
    code, _, err = run_cli(capsys, "show", spec, "--out", out)
    assert code == 0, err
    pictures = sorted(out.glob("*.png"))
    assert pictures and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pictures)

    from rpn2c.train import plots

    m = torch.tensor([[float("inf"), 1.0], [0.0, float("nan")]])
    path = plots.matrices([{"matrix": m, "title": "t"}], tmp_path / "p.png")
    assert path.exists()
    path = plots.matrices([{"matrix": torch.full((2, 2), float("inf")), "title": "all"}], tmp_path / "q.png")
    assert path.exists()
