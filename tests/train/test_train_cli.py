"""rpn2c train / eval / predict on the command line: output files, metrics schema, exact reproduction, errors."""

from __future__ import annotations

import csv
import itertools
import json
import math

import numpy as np
import pytest
import torch

from rpn2c.data import load
from tests.train.helpers import IRIS, IRIS_EPOCHS, ROOT, SPECS, run_cli

PNG = b"\x89PNG\r\n\x1a\n"
CKPT_KEYS = {"format", "format_version", "rpn2c_version", "torch_version", "model", "content_hash", "spec_file",
             "spec_text", "spec_sources", "ir", "inputs", "outputs", "param_shapes", "state_dict", "config", "epoch",
             "metrics", "history", "data", "params", "stopped", "train_state"}


def test_train_writes_checkpoint_metrics_and_curves(iris_run):
    out = iris_run["out"]
    assert sorted(p.name for p in out.iterdir()) == ["best.pt", "checkpoint.pt", "curves.png", "metrics.csv",
                                                     "metrics.json", "run.yaml", "spec"]
    assert (out / "curves.png").read_bytes()[:8] == PNG
    ckpt = torch.load(out / "checkpoint.pt", weights_only=True)  # plain containers and tensors only
    assert set(ckpt) == CKPT_KEYS
    assert ckpt["format"] == "rpn2c-checkpoint" and ckpt["model"] == "iris_mlp" and ckpt["epoch"] == IRIS_EPOCHS
    assert ckpt["spec_text"] == IRIS.read_text()
    import rpn2c

    assert ckpt["content_hash"] == rpn2c.check_file(IRIS).content_hash()
    assert ckpt["param_shapes"] == {"h.bias": [16], "h.psi.weight": [16, 4], "y.bias": [3], "y.psi.weight": [3, 16]}
    assert ckpt["inputs"] == {"x": "vector[B, 4]"} and ckpt["data"]["num_classes"] == 3
    assert ckpt["config"]["epochs"] == IRIS_EPOCHS and ckpt["config"]["seed"] == 3 and ckpt["config"]["lr"] == 0.02
    with (out / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == list(range(1, IRIS_EPOCHS + 1))
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["final"] == summary["history"][-1] == ckpt["history"][-1]
    assert summary["params"] == 131 and summary["task"] == "classification"
    assert float(rows[-1]["val_accuracy"]) == summary["final"]["val_accuracy"]
    assert summary["test"] == ckpt["metrics"] and set(ckpt["metrics"]) == {"loss", "accuracy", "macro_f1"}
    assert ckpt["stopped"] == summary["stopped"] and ckpt["stopped"]["reason"] == "completed"
    assert ckpt["params"] == {} and set(ckpt["train_state"]) == {"optimizer", "scheduler", "rng"}
    # the cosine schedule: epoch 1 starts at the peak rate, later epochs start lower
    lrs = [r["lr"] for r in summary["history"]]
    assert lrs[0] == 0.02 and all(a > b for a, b in itertools.pairwise(lrs))


def test_metrics_out_is_one_json_record_per_epoch(iris_run):
    records = iris_run["records"]
    assert [r["epoch"] for r in records] == list(range(1, IRIS_EPOCHS + 1))
    keys = {"epoch", "loss", "lr", "train_accuracy", "val_loss", "val_accuracy", "val_macro_f1", "seconds"}
    for r in records:
        assert set(r) == keys
        assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in r.values())
        assert 0 <= r["val_accuracy"] <= 1 and r["loss"] > 0
    assert [r["seconds"] for r in records] == sorted(r["seconds"] for r in records)
    assert records == json.loads((iris_run["out"] / "metrics.json").read_text())["history"]
    assert records[-1]["loss"] < records[0]["loss"]


def test_eval_reproduces_the_final_test_metrics_exactly(capsys, iris_run):
    code, out, err = run_cli(capsys, "eval", IRIS, iris_run["checkpoint"], "--format", "json")
    assert code == 0, err
    result = json.loads(out)
    final = json.loads((iris_run["out"] / "metrics.json").read_text())["test"]
    assert result["n"] == 30 and result["split"] == "test" and result["seed"] == 3
    assert result["metrics"] == final  # loss, accuracy, macro_f1: bitwise
    code, out, _ = run_cli(capsys, "eval", IRIS, iris_run["checkpoint"])
    assert code == 0 and f"accuracy   {final['accuracy']:.6f}" in out
    best = json.loads((iris_run["out"] / "metrics.json").read_text())["best_test"]
    code, out, _ = run_cli(capsys, "eval", IRIS, iris_run["out"] / "best.pt", "--format", "json")
    assert code == 0 and json.loads(out)["metrics"] == best


def _read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_predict_on_the_test_split(capsys, tmp_path, iris_run):
    preds = tmp_path / "preds.csv"
    code, _, err = run_cli(capsys, "predict", IRIS, iris_run["checkpoint"], "--data", "iris", "--out", preds)
    assert code == 0, err
    rows = _read_csv(preds)
    assert len(rows) == load("iris", seed=3).num_test == 30
    assert list(rows[0]) == ["index", "target", "prediction", "prob_0", "prob_1", "prob_2"]
    for r in rows:
        probs = [float(r[f"prob_{k}"]) for k in range(3)]
        assert abs(sum(probs) - 1) < 1e-6 and int(r["prediction"]) == int(np.argmax(probs))
    acc = np.mean([r["target"] == r["prediction"] for r in rows])
    test = json.loads((iris_run["out"] / "metrics.json").read_text())["test"]
    assert acc == pytest.approx(test["accuracy"], abs=1e-12)
    code, out, _ = run_cli(capsys, "predict", IRIS, iris_run["checkpoint"], "--data", "iris", "--split", "train")
    assert code == 0 and len(out.strip().splitlines()) == 1 + 120  # to stdout: header + the training rows


def test_predict_from_npy_and_csv_files(capsys, tmp_path, iris_run):
    x = load("iris", seed=3).test[0].numpy()
    np.save(tmp_path / "x.npy", x)
    np.savetxt(tmp_path / "x.csv", x, delimiter=",", header="a,b,c,d", comments="")
    ref = _read_csv(_predict(capsys, tmp_path, iris_run, "--data", "iris"))
    for name in ("x.npy", "x.csv"):
        rows = _read_csv(_predict(capsys, tmp_path, iris_run, "--input", tmp_path / name))
        assert "target" not in rows[0]
        assert [r["prediction"] for r in rows] == [r["prediction"] for r in ref]
        assert [float(r["prob_1"]) for r in rows] == pytest.approx([float(r["prob_1"]) for r in ref], abs=1e-6)
    np.save(tmp_path / "bad.npy", np.zeros((5, 3), dtype=np.float32))
    code, _, err = run_cli(capsys, "predict", IRIS, iris_run["checkpoint"], "--input", tmp_path / "bad.npy")
    assert code == 1 and "Traceback" not in err
    assert "input 'x'" in err and "dimension 'features' is 4 in the spec but 3 in the data" in err
    assert "the checkpoint was trained with features = 4 (train one with --param features=3 for this data)" in err


def _predict(capsys, tmp_path, iris_run, *source):
    path = tmp_path / "p.csv"
    code, _, err = run_cli(capsys, "predict", IRIS, iris_run["checkpoint"], *source, "--out", path)
    assert code == 0, err
    return path


@pytest.mark.parametrize("spec, message", [
    ("iris_mlp_wide.rpn", "parameter h.psi.weight: [16, 4] in the checkpoint, [24, 4] in the spec"),
    ("iris_mlp_tanh.rpn", ("inputs and parameter shapes agree; the programs differ in: node 'h' (layer.post[0].name: "
                          '"relu" vs "tanh")')),
])
def test_checkpoint_into_a_different_spec_is_refused(capsys, iris_run, spec, message):
    for command in (["eval"], ["predict", "--data", "iris"]):
        code, out, err = run_cli(capsys, command[0], SPECS / spec, iris_run["checkpoint"], *command[1:])
        assert code == 1 and out == ""
        assert "was trained on a different spec; refusing to load it" in err and "content hash differs" in err
        assert message in err and "Traceback" not in err


def test_checkpoint_errors(capsys, tmp_path, iris_run):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    code, _, err = run_cli(capsys, "eval", IRIS, junk)
    assert code == 1 and "not a loadable rpn2c checkpoint" in err
    code, _, err = run_cli(capsys, "eval", IRIS, tmp_path / "missing.pt")
    assert code == 2 and "no such checkpoint" in err


def test_train_cnn_on_digits_in_a_few_epochs(capsys, tmp_path):
    lines = tmp_path / "m.jsonl"
    code, out, err = run_cli(capsys, "train", ROOT / "specs" / "cnn.rpn", "--data", "digits", "--epochs", "3",
                             "--out", tmp_path / "run", "--metrics-out", lines, "--quiet")
    assert code == 0, err
    assert err == ""  # --quiet: no progress output
    assert "trained cnn (13,706 parameters) on digits: 3 epochs" in out
    records = [json.loads(line) for line in lines.read_text().splitlines()]
    test = json.loads((tmp_path / "run" / "metrics.json").read_text())["test"]
    assert len(records) == 3 and records[-1]["val_accuracy"] > 0.85 and test["accuracy"] > 0.85


def test_node_classification_trains_full_batch_on_karate(capsys, tmp_path):
    lines = tmp_path / "m.jsonl"
    code, _, err = run_cli(capsys, "train", ROOT / "specs" / "gcn.rpn", "--data", "karate", "--epochs", "40",
                           "--lr", "0.02", "--out", tmp_path / "run", "--metrics-out", lines, "--quiet")
    assert code == 0, err
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["test"]["accuracy"] >= 0.8
    preds = tmp_path / "p.csv"
    code, _, err = run_cli(capsys, "predict", ROOT / "specs" / "gcn.rpn", tmp_path / "run" / "checkpoint.pt",
                           "--data", "karate", "--out", preds)
    assert code == 0, err
    ds = load("karate", seed=0)
    assert [int(r["index"]) for r in _read_csv(preds)] == ds.test[3].nonzero().squeeze(1).tolist()


def test_regression_records_mse_mae_r2(capsys, tmp_path):
    lines = tmp_path / "m.jsonl"
    code, _, err = run_cli(capsys, "train", SPECS / "sunspots_chain.rpn", "--data", "sunspots", "--epochs", "8",
                           "--lr", "0.01", "--out", tmp_path / "run", "--metrics-out", lines, "--quiet")
    assert code == 0, err
    last = json.loads(lines.read_text().splitlines()[-1])
    assert set(last) == {"epoch", "loss", "lr", "val_loss", "val_mse", "val_mae", "val_r2", "seconds"}
    assert last["val_loss"] == pytest.approx(last["val_mse"], rel=1e-6)
    test = json.loads((tmp_path / "run" / "metrics.json").read_text())["test"]
    assert test["loss"] == pytest.approx(test["mse"], rel=1e-6) and test["r2"] > 0.3
    code, out, _ = run_cli(capsys, "predict", SPECS / "sunspots_chain.rpn", tmp_path / "run" / "checkpoint.pt",
                           "--data", "sunspots")
    header = out.splitlines()[0]
    assert code == 0 and header == "index,target_0,prediction_0"


# ----------------------------------------------------------------------------------------------------- errors
def test_unknown_dataset_lists_the_available_ones(capsys, tmp_path):
    code, out, err = run_cli(capsys, "train", IRIS, "--data", "irsi", "--out", tmp_path)
    assert code == 2 and out == ""
    assert "unknown dataset 'irsi'; did you mean 'iris'?" in err
    assert "available datasets:" in err and "digits" in err and "karate" in err and "Traceback" not in err


def test_a_file_format_without_its_path_says_how_to_give_it(capsys, tmp_path):
    """``--data mnist`` (the README writes ``--data mnist:PATH``) names the missing path, not an unknown dataset."""
    code, out, err = run_cli(capsys, "train", IRIS, "--data", "mnist", "--out", tmp_path)
    assert code == 2 and out == ""
    assert "--data mnist reads your own files: give its path, --data mnist:PATH" in err
    assert "unknown dataset" not in err


def test_a_spec_named_without_its_suffix_names_the_file(capsys, tmp_path):
    spec = str(IRIS)[:-len(".rpn")]
    for command in (["check", spec], ["train", spec, "--data", "iris", "--out", str(tmp_path)]):
        code, _, err = run_cli(capsys, *command)
        assert code == 2 and f"cannot read {spec}: No such file or directory; did you mean {spec}.rpn?" in err


def test_bad_spec_is_reported_located(capsys, tmp_path):
    bad = tmp_path / "bad.rpn"
    bad.write_text("model m {\n  input x: vector[B, 4]\n  y = head(x) { kappa = chebishev(d = 2)  out = 3 }\n"
                   "  return y\n}\n")
    code, _, err = run_cli(capsys, "train", bad, "--data", "iris", "--out", tmp_path / "run")
    assert code == 1 and f"{bad}:3:25: error[E0201]" in err and "did you mean 'chebyshev'?" in err
    assert not (tmp_path / "run").exists()


def test_missing_spec_is_a_usage_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "train", tmp_path / "nope.rpn", "--data", "iris")
    assert code == 2 and "cannot read" in err and "Traceback" not in err


def test_bad_option_value_is_a_usage_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "train", IRIS, "--data", "iris", "--epochs", "0", "--out", tmp_path)
    assert code == 2 and "--epochs" in err


@pytest.mark.parametrize("spec, data, message", [
    (ROOT / "specs" / "cnn.rpn", "iris",
     ("input 'x' of {spec} is image[B, 1, 8, 8], but dataset 'iris' gives vector[B, 4]: the spec expects 3 dims per "
     "sample [1, 8, 8], the data has 1 (samples of shape [4])")),
    (ROOT / "specs" / "mlp.rpn", "digits --param features=64",
     "both hold 64 values: declare `input x: image[B, 1, 8, 8]` and flatten() it in the spec"),
    (IRIS, "wine", "[4]): set it with --param features=13"),
    (ROOT / "specs" / "mlp.rpn", "wine", "dimension 'features' is 30 in the spec but 13 in the data"),
    (ROOT / "specs" / "gcn.rpn", "iris", "that dataset 'iris' cannot provide"),
    (IRIS, "karate", "must have one nodes input and one edges input"),
    (ROOT / "specs" / "transformer.rpn", "sunspots", "dimension 'd' is 32 in the spec but 1 in the data"),
])
def test_data_that_does_not_fit_the_spec_says_which_input_and_dims(capsys, tmp_path, spec, data, message):
    code, out, err = run_cli(capsys, "train", spec, "--data", *data.split(), "--out", tmp_path / "run", "--quiet")
    assert code == 1 and out == "" and "Traceback" not in err
    assert message.format(spec=spec) in err
    assert not (tmp_path / "run").exists()


def test_output_width_must_match_the_classes(capsys, tmp_path):
    spec = tmp_path / "m.rpn"
    spec.write_text("model m {\n  input x: vector[B, 4]\n  y = head(x) { out = 5 }\n  return y\n}\n")
    code, _, err = run_cli(capsys, "train", spec, "--data", "iris", "--out", tmp_path / "run")
    assert code == 1
    assert f"output 'y' of {spec} is vector[B, 5], but dataset 'iris' has 3 classes" in err


def test_help_lists_the_training_commands(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    for name in ("train", "eval", "predict", "show"):
        assert name in out


def test_a_user_csv_series_with_loader_options(capsys, tmp_path):
    t = np.arange(240)
    np.savetxt(tmp_path / "series.csv", np.sin(t / 6)[:, None], delimiter=",", header="value", comments="")
    data = f"csv:{tmp_path / 'series.csv'}"
    spec = SPECS / "sunspots_chain.rpn"  # sequence[B, 12, 1]: the loader's default window is 16
    code, _, err = run_cli(capsys, "train", spec, "--data", data, "--epochs", "2", "--out", tmp_path / "r", "--quiet")
    assert code == 1 and "dimension 'window' is 12 in the spec but 16 in the data" in err
    code, _, err = run_cli(capsys, "train", spec, "--data", data, "--data-option", "window=12", "--epochs", "4",
                           "--out", tmp_path / "run", "--quiet")
    assert code == 0, err
    ckpt = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert ckpt["config"]["data_options"] == {"window": 12}
    code, out, err = run_cli(capsys, "eval", spec, tmp_path / "run" / "checkpoint.pt", "--format", "json")
    assert code == 0, err  # the training run's loader options are reused
    assert json.loads(out)["metrics"]["mse"] == ckpt["metrics"]["mse"]
    code, _, err = run_cli(capsys, "train", spec, "--data", "iris", "--data-option", "window=12", "--out", tmp_path)
    assert code == 2 and "applies to user files" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_an_unavailable_device_is_a_usage_error(capsys, tmp_path):
    code, _, err = run_cli(capsys, "train", IRIS, "--data", "iris", "--device", "cuda", "--out", tmp_path)
    assert code == 2 and "--device cuda: CUDA is not available" in err and "Traceback" not in err
