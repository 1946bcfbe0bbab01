"""Runs people can leave running: bitwise resume after a stop or an interruption, best checkpoint, early stopping."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from rpn2c.train import loop
from tests.train.helpers import IRIS, ROOT, run_cli

EPOCHS = 5
# iris_mlp has dropout: the resumed run must also continue the RNG streams to match
ARGS = ("--data", "iris", "--epochs", str(EPOCHS), "--batch-size", "16", "--lr", "0.02", "--seed", "4", "--quiet")


def _train(capsys, tmp_path, name, *extra, code=0):
    out = tmp_path / name
    got, stdout, err = run_cli(capsys, "train", IRIS, *ARGS, "--out", out, "--metrics-out", tmp_path / f"{name}.jsonl",
                               *extra)
    assert got == code, err
    return out, stdout, err


def _no_seconds(records):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


def _assert_same_run(a, b, tmp_path):
    """Weights, metrics history, test metrics and the best checkpoint of two run folders are exactly equal."""
    for name in ("checkpoint.pt", "best.pt"):
        x, y = (torch.load(d / name, weights_only=True) for d in (a, b))
        assert x["state_dict"].keys() == y["state_dict"].keys()
        assert all(torch.equal(x["state_dict"][k], y["state_dict"][k]) for k in x["state_dict"])
        assert _no_seconds(x["history"]) == _no_seconds(y["history"]) and x["metrics"] == y["metrics"]
        assert x["epoch"] == y["epoch"] and x["stopped"] == y["stopped"]
    x, y = (torch.load(d / "checkpoint.pt", weights_only=True)["train_state"] for d in (a, b))
    assert x["scheduler"] == y["scheduler"]
    assert all(torch.equal(x["optimizer"]["state"][i]["exp_avg_sq"], y["optimizer"]["state"][i]["exp_avg_sq"])
               for i in x["optimizer"]["state"])
    assert torch.equal(x["rng"]["torch"], y["rng"]["torch"]) and torch.equal(x["rng"]["loader"], y["rng"]["loader"])
    lines = [[json.loads(s) for s in (tmp_path / f"{d.name}.jsonl").read_text().splitlines()] for d in (a, b)]
    assert len(lines[0]) == EPOCHS and _no_seconds(lines[0]) == _no_seconds(lines[1])


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The uninterrupted run."""
    from rpn2c.runtime.cli import main

    folder = tmp_path_factory.mktemp("whole")
    code = main([str(a) for a in ("train", IRIS, *ARGS, "--out", folder / "whole", "--metrics-out",
                                  folder / "whole.jsonl")])
    assert code == 0
    return folder / "whole"


def _copy_reference(whole, tmp_path):
    (tmp_path / "whole.jsonl").write_text((whole.parent / "whole.jsonl").read_text())


def test_stop_and_resume_equals_the_uninterrupted_run_bitwise(capsys, tmp_path, whole):
    _copy_reference(whole, tmp_path)
    out, stdout, _ = _train(capsys, tmp_path, "paused", "--stop-after", "2")
    assert f"stopped after epoch 2 of {EPOCHS}; continue with: rpn2c train --resume {out}" in stdout
    paused = torch.load(out / "checkpoint.pt", weights_only=True)
    assert paused["epoch"] == 2 and paused["metrics"] == {}  # the test split is not read
    assert paused["stopped"]["reason"] == "stop_after"
    assert not (out / "curves.png").exists()
    code, stdout, err = run_cli(capsys, "train", "--resume", out)  # everything else from the run folder
    assert code == 0, err
    assert f"trained iris_mlp (131 parameters) on iris: {EPOCHS} epochs" in stdout
    _assert_same_run(whole, out, tmp_path)


def test_a_run_interrupted_mid_epoch_resumes_to_the_same_result(capsys, tmp_path, whole, monkeypatch):
    _copy_reference(whole, tmp_path)
    calls = {"n": 0}
    real = loop.loss_fn

    def interrupted(task, output, target):  # Ctrl-C in the middle of epoch 4 (7 steps per epoch)
        calls["n"] += output.requires_grad  # training steps only, not evaluations
        if calls["n"] == 3 * 7 + 3:
            raise KeyboardInterrupt
        return real(task, output, target)

    monkeypatch.setattr(loop, "loss_fn", interrupted)
    out, _, err = _train(capsys, tmp_path, "killed", code=130)
    assert f"interrupted; continue with: rpn2c train --resume {out}" in err
    assert torch.load(out / "checkpoint.pt", weights_only=True)["epoch"] == 3
    monkeypatch.setattr(loop, "loss_fn", real)
    code, _, err = run_cli(capsys, "train", IRIS, *ARGS, "--out", out, "--metrics-out", tmp_path / "killed.jsonl",
                           "--resume")
    assert code == 0, err
    _assert_same_run(whole, out, tmp_path)


def test_best_checkpoint_is_the_best_validation_epoch(whole):
    summary = json.loads((whole / "metrics.json").read_text())
    history = summary["history"]
    best = max(history, key=lambda r: r["val_accuracy"])  # max keeps the first of equal values
    ckpt = torch.load(whole / "best.pt", weights_only=True)
    assert ckpt["epoch"] == best["epoch"] == summary["stopped"]["best_epoch"] == summary["best"]["epoch"]
    assert "train_state" not in ckpt and ckpt["history"] == history[:best["epoch"]]
    assert ckpt["metrics"] == summary["best_test"]


def test_early_stopping_records_why(capsys, tmp_path):
    # a learning rate too small to change a prediction: the validation accuracy of epoch 1 is never beaten
    out, stdout, _ = _train(capsys, tmp_path, "early", "--lr", "1e-9", "--epochs", "30", "--patience", "2")
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["stopped"] == {"reason": "early_stopping", "epoch": 3, "monitor": "val_accuracy",
                                  "best": summary["history"][0]["val_accuracy"], "best_epoch": 1, "patience": 2}
    assert len(summary["history"]) == 3 and "stopped early: no better val accuracy in 2 epochs" in stdout
    assert torch.load(out / "best.pt", weights_only=True)["epoch"] == 1
    assert torch.load(out / "checkpoint.pt", weights_only=True)["stopped"]["reason"] == "early_stopping"


def test_resume_refuses_changed_settings_and_checkpoints_without_state(capsys, tmp_path, whole):
    code, _, err = run_cli(capsys, "train", "--resume", whole, "--lr", "0.5", "--out", tmp_path / "x")
    assert code == 2 and "lr was 0.02, now 0.5" in err
    code, _, err = run_cli(capsys, "train", "--resume", whole / "best.pt", "--out", tmp_path / "x")
    assert code == 2 and "holds no training state" in err
    code, _, err = run_cli(capsys, "train", "--resume", tmp_path / "nothing")
    assert code == 2 and "no checkpoint at" in err
    code, _, err = run_cli(capsys, "train", IRIS, "--data", "iris", "--patience", "2", "--val-fraction", "0")
    assert code == 2 and "patience (early stopping) needs a validation split" in err


@pytest.mark.slow
def test_a_killed_process_resumes_to_the_same_result(capsys, tmp_path):
    """SIGKILL a training process once it has written a checkpoint; the resumed run equals an uninterrupted one."""
    args = [*ARGS, "--epochs", "150"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "rpn2c", "train", str(IRIS), *args, "--out", str(tmp_path / "k")],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "k" / "checkpoint.pt").is_file() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    epoch = torch.load(tmp_path / "k" / "checkpoint.pt", weights_only=True)["epoch"]
    assert 1 <= epoch < 150
    assert run_cli(capsys, "train", "--resume", tmp_path / "k")[0] == 0
    assert run_cli(capsys, "train", IRIS, *args, "--out", tmp_path / "w")[0] == 0
    a, b = (torch.load(tmp_path / d / "checkpoint.pt", weights_only=True) for d in ("k", "w"))
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    assert _no_seconds(a["history"]) == _no_seconds(b["history"]) and a["metrics"] == b["metrics"]
