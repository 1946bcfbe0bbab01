"""An export takes its example sizes and the bounds of its dynamic dims from what the model allows: a learned
position table of ``max_len`` rows bounds the time axis from above (seed 7300031576 of the fuzz lanes: ``gpt2`` with
``learned_position(max_len = 4)`` was traced on 8 steps and refused), a readout of item k or a convolution
without padding from below (``rpn2c.runtime.axis_limits``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

import rpn2c
from rpn2c.runtime.axis_limits import axis_limits
from rpn2c.runtime.cli import main
from rpn2c.runtime.export_cli import example_inputs, example_sizes

ROOT = Path(__file__).resolve().parents[1]
HAS_ONNX = all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript", "onnxruntime"))
GPT2 = (ROOT / "specs" / "gpt2.rpn").read_text(encoding="utf-8").replace("positions = 32", "positions = 4") \
    .replace("layers = 2", "layers = 1")

LIMITED = """model m {{
  input x: sequence[B, T, 4]
  p = prepend_token(x)
  e = learned_position(p, max_len = {max_len})
  y = item(e, index = {index})
  return y
}}
"""
SIGNAL = """model s {
  input x: signal[B, 2, T]
  c = head(x) {
    xi_attribute = grid_patch(size = 11)
    out = 3
  }
  return c
}
"""


@settings(deadline=None, max_examples=25)
@given(max_len=st.integers(2, 40), index=st.integers(-12, 12))
def test_the_example_sizes_meet_what_the_ops_need(max_len, index):
    """``learned_position`` after ``prepend_token`` reads T + 1 items (T <= max_len - 1), ``item(index = k)`` needs
    k + 1 of them (|k| from the end): the example T is 8 where that holds, else the nearest size that does, and
    the model runs on it."""
    needed = index + 1 if index >= 0 else -index
    if needed > max_len:
        return  # the check refuses the readout outside the table's rows... or the model can run on no T
    graph = rpn2c.check(LIMITED.format(max_len=max_len, index=index))
    limit = axis_limits(graph, {"B": 4, "T": 8})["T"]
    assert (limit.fewest, limit.most) == (max(1, needed - 1), max_len - 1)
    t = example_sizes(graph)["T"]
    assert t == min(max(8, needed - 1), max_len - 1)
    (x,), _ = example_inputs(graph)
    assert x.shape == (4, t, 4)
    assert rpn2c.compile(LIMITED.format(max_len=max_len, index=index))(x).shape == (4, 4)


def test_a_convolution_without_padding_needs_its_window():
    """A window of 11 steps without padding needs T >= 11: the example signal has 11 steps, not 8."""
    graph = rpn2c.check(SIGNAL)
    assert axis_limits(graph, {"B": 4, "T": 8})["T"].fewest == 11
    (x,), _ = example_inputs(graph, {"B": 1})
    assert x.shape == (1, 2, 11)


def test_a_dim_outside_what_the_model_takes_is_a_usage_error(tmp_path, capsys):
    spec = tmp_path / "gpt2.rpn"
    spec.write_text(GPT2, encoding="utf-8")
    code = main(["export", str(spec), "--random-init", "--dim", "T=8", "--out", str(tmp_path / "g.pt2")])
    err = capsys.readouterr().err
    assert code == 2 and "--dim T=8" in err and "at most 4" in err and f"learned_position at {spec}:" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpt2.rpn"]


def _runner(fmt: str, path: Path):
    if fmt == "pt2":
        module = torch.export.load(path).module()
        return lambda x: module(x)
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda x: torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])


@pytest.mark.parametrize("fmt", ["pt2", pytest.param("onnx", marks=pytest.mark.skipif(
    not HAS_ONNX, reason="onnx, onnxscript and onnxruntime not installed"))])
def test_a_learned_position_table_bounds_the_exported_time_axis(tmp_path, capsys, fmt):
    """GPT-2 with 4 learned positions exports with T dynamic up to 4: the program equals the module at every
    length up to 4 and refuses 5 (a failed shape guard; in onnxruntime the table's addition)."""
    spec, out = tmp_path / "gpt2.rpn", tmp_path / f"gpt2.{fmt}"
    spec.write_text(GPT2, encoding="utf-8")
    assert main(["export", str(spec), "--random-init", "--format", fmt, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "dynamic B, T in 2..4" in text, text
    torch.manual_seed(0)  # the weights --random-init gives (seed 0)
    model = rpn2c.compile(GPT2, file=str(spec)).eval()
    run = _runner(fmt, out)
    for t in range(1, 5):
        x = torch.randint(0, 64, (3, t))
        with torch.no_grad():
            assert torch.allclose(run(x), model(x), atol=1e-4), t
    with pytest.raises(Exception):  # noqa: B017 - a shape guard (pt2) or onnxruntime's failed node (ONNX)
        run(torch.randint(0, 64, (3, 5)))
