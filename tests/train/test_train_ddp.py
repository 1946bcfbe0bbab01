"""torchrun with two CPU processes (gloo): DDP keeps every rank's weights bitwise identical; only rank 0 writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.train.helpers import IRIS, ROOT


def torchrun(tmp_path, *extra, epochs=3):
    env = dict(os.environ, RPN2C_RANK_STATE_DIR=str(tmp_path / "ranks"), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "rpn2c",
           "train", str(IRIS), "--data", "iris", "--epochs", str(epochs), "--batch-size", "16", "--lr", "0.02",
           "--quiet", "--out", str(tmp_path / "run"), "--metrics-out", str(tmp_path / "epochs.jsonl"), *extra]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    ranks = [torch.load(tmp_path / "ranks" / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    return proc, ranks


def test_ddp_ranks_end_with_bitwise_identical_weights(tmp_path):
    proc, (r0, r1) = torchrun(tmp_path)
    assert r0.keys() == r1.keys() == {"h.bias", "h.psi.weight", "y.bias", "y.psi.weight"}
    assert all(torch.equal(r0[k], r1[k]) for k in r0)
    ckpt = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert all(torch.equal(ckpt["state_dict"][k], r0[k]) for k in r0)
    summary = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert summary["world_size"] == 2 and len(summary["history"]) == 3
    assert len((tmp_path / "epochs.jsonl").read_text().splitlines()) == 3  # rank 0 alone writes
    assert proc.stdout.count("trained iris_mlp") == 1
    # each rank saw half of the 108 training rows left by the validation split: 54 / 16 -> 4 steps per epoch
    assert summary["history"][1]["lr"] < summary["history"][0]["lr"] == 0.02
    assert summary["history"][-1]["loss"] < summary["history"][0]["loss"]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_torchrun_resume_equals_the_uninterrupted_run(tmp_path, strategy):
    """Two processes stopped after epoch 1 and resumed end with rank 0's weights and history of one whole run."""
    torchrun(tmp_path / "whole", "--strategy", strategy)
    torchrun(tmp_path / "part", "--strategy", strategy, "--stop-after", "1")
    torchrun(tmp_path / "part", "--strategy", strategy, "--resume")
    a, b = (torch.load(tmp_path / d / "run" / "checkpoint.pt", weights_only=True) for d in ("whole", "part"))
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    drop = lambda h: [{k: v for k, v in r.items() if k != "seconds"} for r in h]  # noqa: E731
    assert drop(a["history"]) == drop(b["history"]) and a["metrics"] == b["metrics"]
