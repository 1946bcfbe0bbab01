"""Every model of every shipped spec (``specs/``, ``specs/paper/``, ``examples/specs/``, found by glob: a new spec
is covered with no change here) exports in both formats: ``rpn2c export --random-init`` succeeds, leaves exactly
the file it names, keeps every symbolic dim dynamic (``STATIC`` would list the exceptions, each with its reason
printed: none today), and the written program runs and equals the module (the same seed's weights) on inputs of a
batch size and dynamic lengths it was never traced or checked at. The CI suite runs the pt2 export of every model
but the heavy ones (ONNX in CI: ``test_export.py``); the rest, the ONNX export of every model included, is
marked ``slow``."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

import rpn2c
from rpn2c.runtime.cli import main
from rpn2c.runtime.export_cli import ONNX_DISABLED_RULES, _without_rules, example_inputs
from rpn2c.runtime.export_write import TOLERANCE, difference
from rpn2c.syntax.parser import parse

ROOT = Path(__file__).resolve().parents[1]
SPEC_FILES = sorted(p for pattern in ("specs/*.rpn", "specs/paper/*.rpn", "examples/specs/*.rpn")
                    for p in ROOT.glob(pattern))
HAS_ONNX = all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript", "onnxruntime"))
needs_onnx = pytest.mark.skipif(not HAS_ONNX, reason="onnx, onnxscript and onnxruntime not installed "
                                                     "(pip install 'rpn2c[export]')")


def _models(path: Path) -> list[str]:
    return [d.name for d in parse(path.read_text(encoding="utf-8"), str(path)).definitions if d.kind == "model"]


# models whose pt2 export and check take over ~4 s of CPU (docs/export.md): in the slow matrix only. The scan-based
# recurrences (gla, linear_rnn, lru, mamba, mingru) stay in CI whatever they cost: their symbolic T is the point.
HEAVY = {"cifar10_cylinder4_densest_4x256", "cifar10_cylinder4_compress_every2", "cifar10_cuboid3_densest", "drrt",
         "drrt_regions",
         "cora_hybrid", "rnn", "recurrent_mean", "gat", "chain_mean", "rnn_chain", "transformer",
         "llama_tied", "qwen2", "qwen3", "bert_classifier", "t5_encoder_gated",  # variants: the spec's first model runs
         "swin_model",
         "hopfield_classical", "chebnet"}  # the asynchronous update's loop over neurons (16 s); K propagations
# the symbolic dims a model may export static (with its reason printed); none today: every shipped model exports
# each symbolic dim dynamic in both formats, so a fallback to static shapes is a regression here
STATIC: dict[str, set[str]] = {}


def _cases():
    out = []
    for path in SPEC_FILES:
        for model in _models(path):
            for fmt in ("pt2", "onnx"):
                ci = fmt == "pt2" and model not in HEAVY
                marks = ([] if ci else [pytest.mark.slow]) + ([needs_onnx] if fmt == "onnx" else [])
                out.append(pytest.param(path, model, fmt, marks=marks,
                                        id=f"{path.relative_to(ROOT).as_posix()}:{model}:{fmt}"))
    return out


def test_the_glob_finds_every_shipped_spec():
    assert len(SPEC_FILES) >= 41 and {"lru.rpn", "mamba.rpn", "mlp.rpn", "mnist_grid.rpn"} <= {
        p.name for p in SPEC_FILES}
    assert HEAVY | set(STATIC) <= {m for p in SPEC_FILES for m in _models(p)}  # no stale name


def _summary(out: str) -> tuple[dict[str, tuple[int, int | None]], set[str], set[str]]:
    """(dynamic dim -> bounds, every symbolic dim, the dims a ``static`` line explains) from the summary."""
    dynamic, named, explained = {}, set(), set()
    for line in out.splitlines():
        m = re.match(r"  input \w+: \S+\[(.*?)\](?: \((.*)\))?$", line)
        if m:
            named |= {d.strip() for d in m.group(1).split(",") if not d.strip().isdigit()}
            for part in re.findall(r"dynamic (.*?)(?=, fixed |$)", m.group(2) or ""):
                for item in part.split(", "):
                    name, _, rng = item.partition(" in ")
                    low, _, high = rng.partition("..")
                    dynamic[name] = (int(low), int(high)) if rng else (0, None)
        m = re.match(r"  static (.*?): ", line)
        if m:
            explained |= {d.split("=")[0] for d in m.group(1).split(", ")}
    return dynamic, named, explained


def _run(fmt: str, path: Path, inputs):
    if fmt == "pt2":
        return torch.export.load(path).module()(*inputs)
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}
    return tuple(torch.from_numpy(o) for o in session.run(None, feed))


@pytest.mark.parametrize("path,model,fmt", _cases())
def test_a_shipped_model_exports_and_its_program_equals_the_module(path, model, fmt, tmp_path, capsys):
    target = tmp_path / f"{model}.{fmt}"
    code = main(["export", str(path), "--model", model, "--random-init", "--format", fmt, "--out", str(target)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temporary file beside it
    assert "checked: equals the module" in out
    dynamic, named, explained = _summary(out)
    assert named - set(dynamic) <= explained  # every static dim has its reason printed
    assert named - set(dynamic) <= STATIC.get(model, set())  # and is one the model is known to fix

    torch.manual_seed(0)  # --random-init's weights: the same seed, the same construction
    module = rpn2c.compile_file(path, model=model)
    module = (_without_rules(module, ONNX_DISABLED_RULES) if fmt == "onnx" else module).eval()
    sizes = {d: (3 if d == "B" else 11) for d in dynamic}  # traced at B = 4, others 8; checked at 5 and 9
    sizes = {d: v if dynamic[d][1] is None else max(dynamic[d][0], min(v, dynamic[d][1])) for d, v in sizes.items()}
    inputs, _ = example_inputs(module.graph, sizes, seed=7)
    with torch.no_grad():
        want = module(*inputs)
    got = _run(fmt, target, inputs)
    assert difference(want, got) <= TOLERANCE["float32"]
