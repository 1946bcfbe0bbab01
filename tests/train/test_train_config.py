"""run.yaml (every option, repeatable from the run folder alone), --param, and the validation split."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
import yaml

import rpn2c
from rpn2c.data import load
from rpn2c.train import TrainConfig, bind, fit, holdout, loop, seed_everything
from rpn2c.train.config import RunConfig
from tests.train.helpers import IRIS, run_cli

ARGS = ("--data", "iris", "--epochs", "2", "--batch-size", "16", "--lr", "0.02", "--seed", "2", "--quiet")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from rpn2c.runtime.cli import main

    out = tmp_path_factory.mktemp("config") / "run"
    assert main([str(a) for a in ("train", IRIS, *ARGS, "--param", "hidden=8", "--out", out)]) == 0
    return out


def test_the_parsers_defaults_are_the_configs():
    """``rpn2c train --help`` reads the defaults without pydantic; ``TrainConfig`` declares its fields with them."""
    from rpn2c.train.defaults import DEFAULTS

    assert {k: TrainConfig.model_fields[k].default for k in DEFAULTS} == DEFAULTS
    assert {k for k, f in TrainConfig.model_fields.items() if f.default_factory is None} == set(DEFAULTS)


def _weights(folder):
    return torch.load(folder / "checkpoint.pt", weights_only=True)["state_dict"]


def _equal(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_run_yaml_records_every_option_and_repeats_the_run_from_the_folder_alone(capsys, tmp_path, run,
                                                                                 monkeypatch):
    recorded = yaml.safe_load((run / "run.yaml").read_text())
    assert set(recorded) == set(RunConfig.model_fields)
    assert recorded["params"] == {"hidden": 8} and recorded["spec"] == "spec/iris_mlp.rpn" and recorded["out"] == "."
    assert (run / "spec" / "iris_mlp.rpn").read_text() == IRIS.read_text()
    moved = tmp_path / "elsewhere" / "run"
    shutil.copytree(run, moved)
    monkeypatch.chdir(tmp_path)  # neither the spec's folder nor the first run's working directory
    code, out, err = run_cli(capsys, "train", "--config", moved / "run.yaml", "--out", tmp_path / "again")
    assert code == 0, err
    assert _equal(_weights(run), _weights(tmp_path / "again"))
    first, again = (json.loads((d / "metrics.json").read_text()) for d in (run, tmp_path / "again"))
    assert first["test"] == again["test"] and first["best_test"] == again["best_test"]
    # flags override the file's values; the run folder's own run.yaml then records the new value
    code, _, err = run_cli(capsys, "train", "--config", moved, "--epochs", "1", "--out", tmp_path / "one")
    assert code == 0, err
    one = yaml.safe_load((tmp_path / "one" / "run.yaml").read_text())
    assert one["epochs"] == 1 and one["lr"] == 0.02 and one["params"] == {"hidden": 8}


@pytest.mark.parametrize("text, message", [
    ("lrr: 0.1\n", "unknown option 'lrr' (did you mean 'lr'?)"),
    ("epochs: zero\n", "epochs: Input should be a valid integer"),
    ("- 1\n", "expected a mapping of option: value"),
    ("patience: 2\nval_fraction: 0\n", "patience (early stopping) needs a validation split"),
])
def test_a_bad_config_file_is_a_usage_error_naming_the_key(capsys, tmp_path, text, message):
    (tmp_path / "bad.yaml").write_text(text)
    code, out, err = run_cli(capsys, "train", IRIS, "--config", tmp_path / "bad.yaml", "--data", "iris")
    assert code == 2 and out == "" and message in err and "Traceback" not in err


def test_param_builds_the_same_model_as_python_params(capsys, tmp_path, run):
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    assert ckpt["params"] == {"hidden": 8} and ckpt["config"]["params"] == {"hidden": 8}
    assert ckpt["content_hash"] == rpn2c.check_file(IRIS, params={"hidden": 8}).content_hash()
    assert ckpt["param_shapes"]["h.psi.weight"] == [8, 4]
    code, out, err = run_cli(capsys, "eval", IRIS, run / "checkpoint.pt", "--format", "json")  # rebuilt with hidden=8
    assert code == 0, err
    assert json.loads(out)["metrics"] == json.loads((run / "metrics.json").read_text())["test"]
    code, out, err = run_cli(capsys, "predict", IRIS, run / "best.pt", "--data", "iris")
    assert code == 0 and len(out.splitlines()) == 31, err


@pytest.mark.parametrize("param, code, messages", [
    ("hiden=8", 1, ["error[E0302]: 'iris_mlp' has no parameter 'hiden'", "did you mean 'hidden'?",
                    "with the model parameters hiden=8"]),
    ("hidden=abc", 1, ["'out' must be an integer >= 1, got 'abc'", "with the model parameters hidden='abc'"]),
    ("hidden", 2, ["--param hidden: expected NAME=VALUE"]),
])
def test_a_bad_param_names_the_parameter(capsys, tmp_path, param, code, messages):
    got, out, err = run_cli(capsys, "train", IRIS, "--data", "iris", "--param", param, "--out", tmp_path / "r")
    assert got == code and out == "" and "Traceback" not in err
    assert all(m in err for m in messages), err
    assert not (tmp_path / "r").exists()


def test_param_values_parse_as_in_python():
    from rpn2c.runtime.common import parse_params

    assert parse_params(["a=64", "b=0.5", "c=true", "d=relu", "e=[1, 2]", "f=1e-3"]) == {
        "a": 64, "b": 0.5, "c": True, "d": "relu", "e": [1, 2], "f": 1e-3}


# ------------------------------------------------------------------------------------------- validation split
@pytest.mark.parametrize("name", ["iris", "sunspots", "karate"])
def test_the_validation_split_is_carved_from_training_data_only(name):
    ds = load(name, seed=0)
    part = holdout.split(ds, 0.2, seed=0)
    train, val = set(part.train_idx.tolist()), set(part.val_idx.tolist())
    assert train and val and not train & val
    if ds.task == "node_classification":
        test_nodes = set(ds.test[3].nonzero().squeeze(1).tolist())
        assert train | val == set(ds.train[3].nonzero().squeeze(1).tolist()) and not (train | val) & test_nodes
        assert torch.equal(part.view.test[3].nonzero().squeeze(1), torch.from_numpy(part.val_idx))
        return
    assert train | val == set(range(ds.train[0].shape[0]))
    assert torch.equal(part.view.test[0], ds.train[0][torch.from_numpy(part.val_idx)])
    if ds.task == "classification":  # stratified: every class on both sides
        labels = ds.train[1].numpy()
        assert set(labels[part.val_idx]) == set(labels[part.train_idx]) == set(labels)
    else:  # windows of a series: validation targets come after the training targets
        assert part.train_idx.max() < part.val_idx.min()
    again = holdout.split(ds, 0.2, seed=0)
    assert np.array_equal(again.val_idx, part.val_idx)


def _fit_iris(ds):
    seed_everything(0)
    model = rpn2c.compile_file(IRIS)
    model, history = fit(model, ds, bind(model.graph, ds), TrainConfig(data="iris", epochs=2, batch_size=16))
    return model, history


def test_test_data_is_never_seen_before_the_final_evaluation(capsys, tmp_path, monkeypatch):
    ds = load("iris", seed=0)
    poisoned = replace(ds, test=(torch.full_like(ds.test[0], float("nan")), torch.zeros_like(ds.test[1])))
    (m1, h1), (m2, h2) = _fit_iris(ds), _fit_iris(poisoned)
    assert _equal(m1.state_dict(), m2.state_dict())
    drop = lambda h: [{k: v for k, v in r.items() if k != "seconds"} for r in h]  # noqa: E731
    assert drop(h1) == drop(h2) and all(np.isfinite(r["val_loss"]) for r in h1)
    # the command: every evaluation during training scores the 12 validation rows; the 30 test rows come last
    sizes = []
    real = loop.evaluate

    def spy(model, dataset, binding, split="test", **kw):
        result = real(model, dataset, binding, split, **kw)
        sizes.append(int(result[2].shape[0]))
        return result

    monkeypatch.setattr(loop, "evaluate", spy)
    code, _, err = run_cli(capsys, "train", IRIS, *ARGS, "--epochs", "3", "--out", tmp_path / "r")
    assert code == 0, err
    assert sizes == [12, 12, 12, 30, 30]  # 3 epochs, then the last and the best checkpoint on the test split


def test_no_validation_split_trains_on_all_training_rows(capsys, tmp_path):
    code, out, err = run_cli(capsys, "train", IRIS, *ARGS, "--val-fraction", "0", "--out", tmp_path / "r")
    assert code == 0, err
    summary = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert not (tmp_path / "r" / "best.pt").exists() and "val_loss" not in summary["history"][-1]
    assert summary["stopped"]["reason"] == "completed" and summary["stopped"]["monitor"] is None
    assert "best epoch" not in out
