"""``rpn2c train SPEC --compile`` end to end (inductor, float32): a recurrent LSTM spec and a graph spec train one
epoch through torch.compile, write their checkpoint, and the checkpoint evaluates eagerly."""

from __future__ import annotations

import json
import math

import pytest

from tests.train.helpers import ROOT, run_cli

pytestmark = pytest.mark.compile

LSTM_SPEC = """\
model sunspots_lstm(window = 12, hidden = 4) {
  input x: sequence[B, window, 1]
  h = recurrent(x) {
    cell = lstm
    out = hidden
    layers = 2
    bidirectional = true
  }
  p = pool_items(h, how = "mean")
  y = head(p) {
    out = 1
  }
  return y
}
"""


def _train(capsys, tmp_path, spec, data, *extra):
    """One compiled epoch; the compiled run's test metrics equal an eager ``rpn2c eval`` of its checkpoint."""
    lines = tmp_path / "m.jsonl"
    code, out, err = run_cli(capsys, "train", spec, "--data", data, "--epochs", "1", "--compile", "--seed", "0",
                             "--out", tmp_path / "run", "--metrics-out", lines, "--quiet", *extra)
    assert code == 0, err
    (record,) = [json.loads(line) for line in lines.read_text().splitlines()]
    assert math.isfinite(record["loss"])
    summary = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert summary["config"]["compile"] is True
    code, out, err = run_cli(capsys, "eval", spec, tmp_path / "run" / "checkpoint.pt", "--format", "json")
    assert code == 0, err
    evaluated = json.loads(out)["metrics"]
    assert set(evaluated) == set(summary["test"])
    for key, value in summary["test"].items():
        assert evaluated[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


@pytest.mark.slow
def test_train_compile_recurrent_lstm_spec(capsys, tmp_path):
    """The LSTM under inductor on CPU (oneDNN's kernel as the opaque op rpn2c::lstm, whose backward recomputes)."""
    spec = tmp_path / "sunspots_lstm.rpn"
    spec.write_text(LSTM_SPEC, encoding="utf-8")
    _train(capsys, tmp_path, spec, "sunspots", "--batch-size", "64")


@pytest.mark.slow
def test_train_compile_graph_spec(capsys, tmp_path):
    _train(capsys, tmp_path, ROOT / "specs" / "gcn.rpn", "karate")
