"""Shared fixture for the training tests: one short iris run reused by the CLI, eval and predict tests."""

from __future__ import annotations

import json

import pytest

from rpn2c.runtime.cli import main
from tests.train.helpers import IRIS, IRIS_EPOCHS


@pytest.fixture(scope="session")
def iris_run(tmp_path_factory):
    """``rpn2c train iris_mlp.rpn --data iris`` with --metrics-out; returns the paths and the JSON lines."""
    folder = tmp_path_factory.mktemp("iris_run")
    out, lines = folder / "run", folder / "epochs.jsonl"
    code = main(["train", str(IRIS), "--data", "iris", "--epochs", str(IRIS_EPOCHS), "--lr", "0.02",
                 "--batch-size", "16", "--seed", "3", "--out", str(out), "--metrics-out", str(lines), "--quiet"])
    assert code == 0
    records = [json.loads(line) for line in lines.read_text().splitlines()]
    return {"out": out, "checkpoint": out / "checkpoint.pt", "jsonl": lines, "records": records}
