"""The paper's runs through the real CLI on tiny files written here: text with a frozen GloVe table (the language
specs), Planetoid Cora (the graph spec), MNIST IDX (the image spec)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import torch
import yaml

import rpn2c
from rpn2c.data import load_path
from rpn2c.train import bind
from tests.data.test_data_formats import _write_planetoid
from tests.train.helpers import ROOT, run_cli

PAPER = ROOT / "specs" / "paper"
POS, NEG = ["good", "great", "fun"], ["bad", "awful", "dull"]
VECTORS = {"good": [1.0, 0.5, 0.0], "great": [0.75, 0.25, 0.5], "fun": [0.5, 0.0, 0.25],
           "bad": [-1.0, 0.5, 0.0], "awful": [-0.75, 0.0, 0.5], "dull": [-0.5, 0.25, 0.0], "movie": [0.0, 1.0, 1.0]}


def _texts(rng, n):
    rows = []
    for i in range(n):
        label, words = ("pos", POS) if i % 2 == 0 else ("neg", NEG)
        rows.append(f"{label},the movie " + " ".join(rng.choice(words, size=3)) + " xyz\n")
    return "label,text\n" + "".join(rows)


@pytest.fixture(scope="module")
def text_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    rng = np.random.default_rng(0)
    (root / "data").mkdir()
    (root / "data" / "train.csv").write_text(_texts(rng, 40))
    (root / "data" / "test.csv").write_text(_texts(rng, 10))
    (root / "glove.txt").write_text("".join(f"{w} " + " ".join(map(str, v)) + "\n" for w, v in VECTORS.items()))
    return root


CHAIN = ["--param", "tokens=6", "--param", "features=3", "--param", "hidden=4", "--param", "classes=2"]


def test_text_run_with_a_frozen_glove_table(capsys, text_data, monkeypatch):
    monkeypatch.chdir(text_data)  # relative paths on the command line become absolute in run.yaml
    out = text_data / "run"
    code, stdout, err = run_cli(capsys, "train", PAPER / "agnews_chain.rpn", "--data", "text:data", "--embedding",
                                "glove:glove.txt", *CHAIN, "--epochs", "25", "--lr", "0.05", "--batch-size", "8",
                                "--val-fraction", "0", "--out", out, "--quiet")
    assert code == 0, err
    recorded = yaml.safe_load((out / "run.yaml").read_text())
    assert recorded["data"] == f"text:{text_data / 'data'}"
    assert recorded["data_options"] == {"embedding": f"glove:{text_data / 'glove.txt'}", "length": 6}
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["test"]["accuracy"] == 1.0  # the two classes' words point opposite ways in the table

    # the table is data, not a parameter: the checkpoint holds exactly the spec's parameters
    graph = rpn2c.check_file(PAPER / "agnews_chain.rpn", params={"tokens": 6, "features": 3, "hidden": 4,
                                                                 "classes": 2})
    state = torch.load(out / "checkpoint.pt", weights_only=False)["state_dict"]
    assert sum(v.numel() for v in state.values()) == graph.param_count
    ds = load_path("text", text_data / "data", **recorded["data_options"])
    table = ds.meta["embedding"]
    assert not any(v.shape == table.shape for v in state.values())
    for i, w in enumerate(ds.meta["vocab"], 2):  # the rows are the file's vectors, after training too
        np.testing.assert_array_equal(table[i].numpy(), np.float32(VECTORS[w]))
    assert "xyz" not in ds.meta["vocab"]  # no vector: the zero unknown row

    # rpn2c eval reuses the run's loader options (embedding, length) and reproduces the test accuracy
    code, stdout, err = run_cli(capsys, "eval", PAPER / "agnews_chain.rpn", out / "checkpoint.pt",
                                "--data", f"text:{text_data / 'data'}")
    assert code == 0, err
    assert any(line.split()[:2] == ["accuracy", "1"] or line.split()[:2] == ["accuracy", "1.000000"]
               for line in stdout.splitlines()), stdout


def test_no_gradient_reaches_the_table(text_data):
    ds = load_path("text", text_data / "data", length=6, embedding=f"glove:{text_data / 'glove.txt'}")
    params = {"tokens": 6, "features": 3, "hidden": 4, "classes": 2}
    graph = rpn2c.check_file(PAPER / "agnews_chain.rpn", params=params)
    model = rpn2c.compile_file(PAPER / "agnews_chain.rpn", params=params)
    binding = bind(graph, ds)
    ids = ds.train[0][:4]
    inputs = binding.inputs(ids)
    torch.testing.assert_close(inputs["x"], ds.meta["embedding"][ids], rtol=0, atol=0)
    model(**inputs).sum().backward()
    table = binding.embedding
    assert not table.requires_grad and table.grad is None
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    assert not any(p.shape == table.shape for p in model.parameters())


def test_text_without_or_with_a_needless_embedding(capsys, text_data, tmp_path):
    code, _, err = run_cli(capsys, "train", PAPER / "agnews_chain.rpn", "--data", f"text:{text_data / 'data'}",
                           *CHAIN, "--epochs", "1", "--out", tmp_path / "a", "--quiet")
    assert code == 1 and "gives token ids (tokens[B, 6]): give the vectors with --embedding glove:FILE" in err
    tokens_spec = tmp_path / "tok.rpn"
    tokens_spec.write_text("model tok {\n  input x: tokens[B, 6]\n  e = embedding(x, vocab = 16, dim = 4)\n"
                           "  s = pool_items(e, how = \"mean\")\n  y = head(s) {\n    out = 2\n  }\n  return y\n}\n")
    code, _, err = run_cli(capsys, "train", tokens_spec, "--data", f"text:{text_data / 'data'}", "--embedding",
                           f"glove:{text_data / 'glove.txt'}", "--epochs", "1", "--out", tmp_path / "b", "--quiet")
    assert code == 1 and "drop --embedding" in err, err
    code, _, err = run_cli(capsys, "train", PAPER / "agnews_chain.rpn", "--data", f"text:{text_data / 'data'}",
                           "--embedding", f"glove:{tmp_path / 'none.txt'}", *CHAIN, "--out", tmp_path / "c")
    assert code == 2 and "none.txt: no such embedding file" in err


def test_config_file_embedding_is_relative_to_the_file(capsys, text_data, tmp_path):
    cfg = text_data / "paper.yaml"
    cfg.write_text(yaml.safe_dump({"spec": str(PAPER / "agnews_chain.rpn"), "data": "text:data",
                                   "data_options": {"embedding": "glove:glove.txt"}, "epochs": 1,
                                   "params": {"tokens": 6, "features": 3, "hidden": 4, "classes": 2}}))
    code, _, err = run_cli(capsys, "train", "--config", cfg, "--out", tmp_path / "run", "--quiet")
    assert code == 0, err
    recorded = yaml.safe_load((tmp_path / "run" / "run.yaml").read_text())
    assert recorded["data_options"]["embedding"] == f"glove:{text_data / 'glove.txt'}"


def test_cora_graph_spec_on_planetoid_files(capsys, tmp_path):
    _write_planetoid(tmp_path, name="cora")
    code, _, err = run_cli(capsys, "train", PAPER / "cora_graph.rpn", "--data", f"cora:{tmp_path}",
                           "--param", "features=3", "--param", "classes=3", "--epochs", "3", "--lr", "0.01",
                           "--val-fraction", "0", "--out", tmp_path / "run", "--quiet")
    assert code == 0, err
    summary = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert summary["split"] == {"train": 2, "validation": 0, "test": 3}  # Planetoid's public split
    assert summary["params"] == 3 * 16 + 16 + 16 * 3 + 3


def _idx(arr: np.ndarray) -> bytes:
    code = {np.uint8: 0x08}[arr.dtype.type]
    return bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


def test_mnist_spec_on_idx_files(capsys, tmp_path):
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 12), ("t10k", 4)):
        (tmp_path / f"{prefix}-images-idx3-ubyte").write_bytes(_idx(rng.integers(0, 256, (n, 28, 28), np.uint8)))
        (tmp_path / f"{prefix}-labels-idx1-ubyte").write_bytes(_idx(np.arange(n, dtype=np.uint8) % 10))
    ds = load_path("mnist", tmp_path, standardize=True)
    assert abs(float(ds.train[0].mean())) < 1e-5 and abs(float(ds.train[0].std(unbiased=False)) - 1) < 1e-4
    code, _, err = run_cli(capsys, "train", PAPER / "mnist_grid.rpn", "--data", f"mnist:{tmp_path}",
                           "--data-option", "standardize=true", "--param", "c1=2", "--param", "c2=2",
                           "--param", "hidden=4", "--epochs", "1", "--val-fraction", "0", "--out", tmp_path / "run",
                           "--quiet")
    assert code == 0, err
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["split"]["test"] == 4


def test_stock_spec_on_a_price_file(capsys, tmp_path):
    """Table 4's command: a Kaggle-style price file, the Open column as target (given by name on the command
    line), the date column dropped, 10-day windows."""
    rng = np.random.default_rng(0)
    price = 10 + np.cumsum(rng.standard_normal(60)) * 0.1
    rows = "".join(f"2017-02-{i % 28 + 1:02d},{v:.3f},{v + .2:.3f},{v - .2:.3f},{v + .05:.3f},{1000 + i},0\n"
                   for i, v in enumerate(price))
    (tmp_path / "aapl.us.txt").write_text("Date,Open,High,Low,Close,Volume,OpenInt\n" + rows)
    code, _, err = run_cli(capsys, "train", PAPER / "stock_chain.rpn", "--data", f"csv:{tmp_path / 'aapl.us.txt'}",
                           "--data-option", "window=10", "--data-option", "target=Open", "--epochs", "1",
                           "--out", tmp_path / "run", "--quiet")
    assert code == 0, err
    ds = load_path("csv", tmp_path / "aapl.us.txt", window=10, target="Open")
    assert ds.meta["target_columns"] == ["Open"] and ds.train[0].shape[1:] == (10, 6)


def _documented_runs():
    """(spec, argv) for the first command of each paper spec's ``# run`` comment."""
    import shlex

    for path in sorted(PAPER.glob("*.rpn")):
        lines = path.read_text().splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("# run "))
        command = [lines[start + 1].removeprefix("#   ")]
        command += [line.removeprefix("#     ") for line in lines[start + 2:] if line.startswith("#     ")][:1]
        yield path.name, shlex.split(" ".join(command))


@pytest.mark.parametrize("name, argv", list(_documented_runs()))
def test_documented_paper_commands_parse_and_their_data_kind_exists(name, argv):
    """Each spec's documented command is accepted by ``rpn2c train``'s parser, names a known data kind, and its
    spec checks with its --param values (the data itself is not here)."""
    from rpn2c.data import LOADERS
    from rpn2c.runtime.cli import build_parser
    from rpn2c.runtime.common import parse_params

    assert argv[:3] == ["rpn2c", "train", f"specs/paper/{name}"]
    args = build_parser().parse_args(argv[1:])
    assert args.data.partition(":")[0] in LOADERS
    assert rpn2c.check_file(ROOT / args.spec, params=parse_params(args.param) or None).param_count > 0
