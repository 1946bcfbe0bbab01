"""fit / evaluate / predict and the dataset binding through the Python API; reproducibility of CLI runs."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

import rpn2c
from rpn2c.data import load
from rpn2c.train import TrainConfig, bind, evaluate, fit, predict, seed_everything
from tests.train.helpers import IRIS, ROOT, run_cli

GCN = ROOT / "specs" / "gcn.rpn"


def _train_run(capsys, tmp_path, name, *extra):
    code, _, err = run_cli(capsys, "train", IRIS, "--data", "iris", "--epochs", "3", "--batch-size", "16",
                           "--out", tmp_path / name, "--quiet", *extra)
    assert code == 0, err
    ckpt = torch.load(tmp_path / name / "checkpoint.pt", weights_only=True)
    return ckpt["state_dict"], [{k: v for k, v in r.items() if k != "seconds"} for r in ckpt["history"]]


def test_training_is_deterministic_given_the_seed(capsys, tmp_path):
    a, ha = _train_run(capsys, tmp_path, "a", "--seed", "7")
    b, hb = _train_run(capsys, tmp_path, "b", "--seed", "7")
    c, _ = _train_run(capsys, tmp_path, "c", "--seed", "8")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # bitwise, dropout included
    assert ha == hb
    assert not all(torch.equal(a[k], c[k]) for k in a)


def _fit_gcn(dataset, epochs=15):
    seed_everything(0)
    model = rpn2c.compile_file(GCN)
    binding = bind(model.graph, dataset, "gcn.rpn")
    model, history = fit(model, dataset, binding, TrainConfig(data="karate", epochs=epochs, lr=0.02))
    return model, binding, history


def test_node_classification_never_reads_the_test_labels():
    ds = load("karate", seed=0)
    x, edges, y, test_mask = ds.test
    flipped = torch.where(test_mask, 1 - y, y)  # every test label changed
    other = replace(ds, train=(x, edges, flipped, ds.train[3]), test=(x, edges, flipped, test_mask))
    m1, b1, h1 = _fit_gcn(ds)
    m2, b2, h2 = _fit_gcn(other)
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert all(torch.equal(s1[k], s2[k]) for k in s1)
    drop = lambda h: [{k: v for k, v in r.items() if k != "seconds"} for r in h]  # noqa: E731
    assert drop(h1) == drop(h2)  # losses and validation scores
    t1, t2 = evaluate(m1, ds, b1)[0], evaluate(m2, other, b2)[0]
    assert t1["accuracy"] == pytest.approx(1 - t2["accuracy"])  # same predictions, flipped truth


def test_a_batched_nodes_input_gets_the_graph_as_one_sample():
    spec = GCN.read_text().replace("input x: nodes[N, features]", "input x: nodes[B, N, features]")
    model = rpn2c.compile(spec)
    ds = load("karate", seed=0)
    binding = bind(model.graph, ds)
    assert binding.batched_nodes and binding.inputs(ds.test[0], ds.test[1])["x"].shape == (1, 34, 34)
    assert predict(model, binding, ds.test[0], ds.test[1]).shape == (34, 2)
    result, out, target = evaluate(model, ds, binding, "test")
    assert out.shape == (16, 2) and target.shape == (16,) and set(result) == {"loss", "accuracy", "macro_f1"}


def test_an_edge_weight_input_is_fed_ones():
    spec = GCN.read_text().replace("input edges: edges[2, E]", "input edges: edges[2, E]\n  input w: edge_weight[E]")
    spec = spec.replace("graph(edges = edges,", "graph(edges = edges, weight = w,")
    weighted, plain = rpn2c.compile(spec), rpn2c.compile_file(GCN)
    weighted.load_state_dict(plain.state_dict())
    ds = load("karate", seed=0)
    binding = bind(weighted.graph, ds)
    assert binding.weight_input == "w"
    inputs = binding.inputs(ds.test[0], ds.test[1])
    assert torch.equal(inputs["w"], torch.ones(ds.test[1].shape[1]))
    plain.eval(), weighted.eval()
    assert torch.allclose(weighted(**inputs), plain(x=ds.test[0], edges=ds.test[1]), atol=1e-6)


def test_predict_does_not_depend_on_the_batch_size():
    seed_everything(0)
    model = rpn2c.compile_file(ROOT / "specs" / "cnn.rpn")
    ds = load("digits", seed=0)
    binding = bind(model.graph, ds)
    model.train()
    a = predict(model, binding, ds.test[0], batch_size=1024)
    b = predict(model, binding, ds.test[0], batch_size=37)
    assert model.training  # restored
    assert a.shape == (359, 10) and torch.allclose(a, b, atol=1e-5)


def test_progress_bar_and_epoch_lines(capsys, tmp_path):
    ds = load("iris", seed=0)
    seed_everything(0)
    model = rpn2c.compile_file(IRIS)
    fit(model, ds, bind(model.graph, ds), TrainConfig(data="iris", epochs=2), progress=True)
    assert "epoch 2/2" in capsys.readouterr().err
    code, _, err = run_cli(capsys, "train", IRIS, "--data", "iris", "--epochs", "2", "--out", tmp_path)
    assert code == 0
    lines = [line.split("  ")[0] for line in err.splitlines()]
    assert lines[0] == "split: 108 training, 12 validation, 30 test items"
    assert lines[1].startswith("warning: the validation split holds only 12 items")
    assert lines[2:] == ["epoch 1/2", "epoch 2/2"]
    assert "val_accuracy" in err


def test_history_records_are_json_serialisable():
    ds = load("iris", seed=0)
    seed_everything(0)
    model = rpn2c.compile_file(IRIS)
    _, history = fit(model, ds, bind(model.graph, ds), TrainConfig(data="iris", epochs=1, schedule="constant"))
    assert json.loads(json.dumps(history)) == history
    assert history[0]["lr"] == TrainConfig().lr
