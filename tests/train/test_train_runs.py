"""No run is lost: a folder holding a run is refused without --resume or --overwrite, --overwrite leaves none of the
earlier run's files, the split sizes are printed and recorded, and an export accepts its own training data."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from rpn2c.data import load
from tests.train.helpers import IRIS, run_cli

TINY_RNN = """model tiny(classes = 4) {
  input x: sequence[B, T, 6]
  r = recurrent(x) {
    cell = rnn
    out = 4
  }
  p = pool_items(r, how = "mean")
  y = head(p) {
    out = classes
  }
  return y
}
"""


def _train(capsys, out, *extra, epochs=2):
    return run_cli(capsys, "train", IRIS, "--data", "iris", "--epochs", epochs, "--out", out, "--quiet", *extra)


@pytest.fixture
def first_run(capsys, tmp_path):
    out = tmp_path / "run"
    code, _, err = _train(capsys, out, epochs=3)
    assert code == 0, err
    (out / "checkpoint.pt2").write_bytes(b"an exported program of the 3-epoch weights")
    return out


def test_training_into_a_folder_holding_a_run_is_refused(capsys, first_run):
    before = {p.name: p.read_bytes() for p in first_run.iterdir() if p.is_file()}
    code, out, err = _train(capsys, first_run)
    assert code == 2 and out == ""
    assert f"{first_run} already holds a 3-epoch run of model 'iris_mlp' on iris" in err
    assert f"rpn2c train --resume {first_run}" in err and "--overwrite" in err and "--out DIR" in err
    assert {p.name: p.read_bytes() for p in first_run.iterdir() if p.is_file()} == before  # nothing touched


def test_overwrite_replaces_the_run_and_leaves_no_stale_file(capsys, first_run):
    (first_run / "notes.txt").write_text("mine")
    code, _, err = _train(capsys, first_run, "--overwrite")
    assert code == 0, err
    assert "checkpoint.pt2" in err.split("removed from")[1].splitlines()[0]
    assert not (first_run / "checkpoint.pt2").exists()  # the export of the old weights is gone
    assert (first_run / "notes.txt").read_text() == "mine"  # files that are not the run's stay
    summary = json.loads((first_run / "metrics.json").read_text())
    assert summary["stopped"]["epoch"] == 2 and [r["epoch"] for r in summary["history"]] == [1, 2]
    assert torch.load(first_run / "checkpoint.pt", weights_only=True)["epoch"] == 2


def test_resume_keeps_the_run_and_drops_its_stale_export(capsys, first_run):
    code, _, err = run_cli(capsys, "train", "--resume", first_run, "--epochs", "4", "--quiet")
    assert code == 0, err
    assert not (first_run / "checkpoint.pt2").exists()
    assert [r["epoch"] for r in json.loads((first_run / "metrics.json").read_text())["history"]] == [1, 2, 3, 4]


def test_resume_and_overwrite_together_are_a_usage_error(capsys, first_run):
    code, _, err = run_cli(capsys, "train", "--resume", first_run, "--overwrite", "--quiet")
    assert code == 2 and "give one of them" in err and (first_run / "checkpoint.pt2").exists()


def test_resume_into_another_folder_holding_a_run_is_refused(capsys, first_run, tmp_path):
    other = tmp_path / "other"
    assert _train(capsys, other)[0] == 0
    code, _, err = run_cli(capsys, "train", "--resume", first_run, "--epochs", "4", "--out", other, "--quiet")
    assert code == 2 and f"{other} already holds a 2-epoch run" in err


def test_split_sizes_are_printed_and_recorded(capsys, tmp_path):
    out = tmp_path / "run"
    code, _, err = run_cli(capsys, "train", IRIS, "--data", "iris", "--epochs", "1", "--out", out,
                           "--val-fraction", "0.25", "--seed", "3")
    assert code == 0, err
    ds = load("iris", seed=3)
    n_val = 30  # stratified: a quarter of each class of the 120 training items
    want = {"train": ds.num_train - n_val, "validation": n_val, "test": ds.num_test}
    assert f"split: {want['train']} training, {n_val} validation, {ds.num_test} test items" in err
    assert "warning" not in err
    assert json.loads((out / "metrics.json").read_text())["split"] == want
    text = (out / "run.yaml").read_text()
    assert f"# split: {want['train']} training, {n_val} validation" in text
    assert yaml.safe_load(text)["val_fraction"] == 0.25  # the comment leaves the options as they were


def test_a_validation_split_too_small_to_choose_an_epoch_warns(capsys, tmp_path):
    code, _, err = _train(capsys, tmp_path / "run", "--val-fraction", "0.05", epochs=1)
    assert code == 0, err  # --quiet keeps the warning
    assert "warning: the validation split holds only 6 items (--val-fraction 0.05)" in err
    code, _, err = _train(capsys, tmp_path / "none", "--val-fraction", "0", epochs=1)
    assert code == 0 and "warning" not in err


def test_export_defaults_to_the_sizes_of_the_training_data(capsys, tmp_path):
    """A model trained on 100-step sequences exports a program that accepts them (no `--dim T=100`)."""
    spec = tmp_path / "tiny.rpn"
    spec.write_text(TINY_RNN)
    out = tmp_path / "run"
    code, _, err = run_cli(capsys, "train", spec, "--data", "basic_motions", "--epochs", "1", "--out", out, "--quiet")
    assert code == 0, err
    assert "validation split holds only 4 items" in err  # 10% of 40 series
    assert torch.load(out / "checkpoint.pt", weights_only=True)["data"]["dims"] == {"T": 100}
    code, stdout, err = run_cli(capsys, "export", spec, out / "checkpoint.pt")
    assert code == 0, err
    assert "example sizes from the training data: T=100" in stdout
    program = torch.export.load(out / "checkpoint.pt2").module()
    x = load("basic_motions").train[0][:3]
    assert program(x).shape == (3, 4)
