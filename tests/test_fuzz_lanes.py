"""The fuzz lanes over every entry point: export, show and explain on specs that checked, from_torch on generated torch
modules, the language server on edited specs. Small seeded runs: the counts add up per entry point, a planted failure
of each entry point is caught (known ones apart) and minimised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rpn2c.runtime import fuzz_entry, fuzz_lanes, fuzz_lsp, fuzz_torch
from rpn2c.runtime.fuzz import Outcome

SPEC = """model m {
  input x: vector[B, 4]
  a = head(x) { out = 3 post = [tanh] }
  b = head(a) { out = 2 post = [relu] }
  return b
}
"""


def _fake_cli(behaviour):
    """A stand-in for ``rpn2c.runtime.cli.main`` that reads the spec named on the command line."""
    def main(argv):
        return behaviour(argv, Path(argv[1]).read_text(encoding="utf-8"))
    return main


def test_a_planted_export_crash_is_a_failure_and_minimised(monkeypatch):
    def crash_on_relu(argv, text):
        if "relu" in text:
            raise ZeroDivisionError("planted")
        return 0

    monkeypatch.setattr("rpn2c.runtime.cli.main", _fake_cli(crash_on_relu))
    out = fuzz_entry.run_entry("export", SPEC, 7)
    assert out.status == "failure" and out.detail.startswith("export: ZeroDivisionError at ")
    assert out.detail.endswith(": planted") and "crash_on_relu" in out.trace
    small = fuzz_lanes.minimise(SPEC, out.detail, tries=200,
                                fails=lambda t: fuzz_entry.run_entry("export", t, 7).detail == out.detail)
    assert "relu" in small and len(small) < 12, small
    assert fuzz_entry.run_entry("export", SPEC.replace("relu", "gelu"), 7).status == "ok"


@pytest.mark.parametrize("behaviour, status, detail", [
    (lambda argv, text: (_ for _ in ()).throw(AssertionError("Guard failed: args_0.size()[1] % 2 == 0")), "known",
     "Guard failed"),
    (lambda argv, text: print("fuzz.rpn:3:3: error[E0402]: shapes", file=__import__("sys").stderr)
     or Path(argv[argv.index("--out") + 1]).write_text("x") and 1, "known", "file left behind after a refused export"),
    (lambda argv, text: print("rpn2c: error: fuzz.pt2 differs from the module", file=__import__("sys").stderr)
     or Path(argv[argv.index("--out") + 1]).write_text("x") and 1, "failure", "(and its file left behind)"),
    (lambda argv, text: 2, "failure", "usage error"),
    (lambda argv, text: print("rpn2c: error: torch.export cannot trace model 'm': RuntimeError: boom",
                              file=__import__("sys").stderr) or 1, "failure", "export: RuntimeError: boom"),
    (lambda argv, text: print("fuzz.rpn:3:3: error[E0402]: shapes", file=__import__("sys").stderr) or 1, "ok",
     "refused: located spec error"),
])
def test_export_outcomes_are_classified(monkeypatch, behaviour, status, detail):
    """The scan recurrences' guard failure and a failed export's leftover file are another change's (known); a
    usage error or an export torch cannot trace is a failure; a located spec error is a clear refusal."""
    monkeypatch.setattr(fuzz_entry, "_onnx_installed", lambda: False)
    monkeypatch.setattr("rpn2c.runtime.cli.main", _fake_cli(behaviour))
    out = fuzz_entry.run_entry("export", SPEC, 3)
    assert out.status == status and detail in out.detail, out


def test_explain_and_show_run_on_a_spec_that_checked():
    plans = {tuple(fuzz_entry._plan("show", seed, Path("."))[2:4]): seed for seed in range(40)}
    for seed in (plans[("--format", "json")], plans[("--bounds",)]):
        out = fuzz_entry.run_entry("show", SPEC, seed)
        assert out.status == "ok", (seed, out)
    assert fuzz_entry.run_entry("explain", SPEC, 0).status == "ok"
    refused = fuzz_entry.run_entry("explain", SPEC.replace("out = 3", "out = zz"), 0)
    assert refused.status == "failure" and refused.detail.startswith("explain: refuses a spec that checked")


def test_from_torch_inputs_convert_exactly_or_are_refused_by_module():
    outcomes = [fuzz_torch.run_torch(fuzz_torch.recipe(seed)) for seed in range(12)]
    assert all(o.status == "ok" for o in outcomes), [o for o in outcomes if o.status != "ok"]
    assert sum(o.detail == "converted" for o in outcomes) >= 4
    kinds = {fuzz_torch.recipe(s)["input"] for s in range(200)}
    assert kinds == {"vector", "sequence", "grid1", "grid2", "grid3", "graph"}


def test_a_planted_from_torch_failure_is_caught_and_minimised(monkeypatch):
    import rpn2c

    real = rpn2c.from_torch

    def planted(module, args, *rest, **kw):
        if any(isinstance(m, torch.nn.Linear) for m in module.modules()):
            raise ZeroDivisionError("planted")
        return real(module, args, *rest, **kw)

    monkeypatch.setattr(rpn2c, "from_torch", planted)
    r = {"seed": 5, "input": "vector", "features": 4, "form": "class",
         "steps": [{"op": "act", "link": "", "r": 1}, {"op": "dropout", "link": "", "r": 2},
                   {"op": "linear", "link": "", "r": 3}, {"op": "act", "link": "add", "r": 4}]}
    out = fuzz_torch.run_torch(r)
    assert out.status == "failure" and out.detail.startswith("from_torch: from_torch: ZeroDivisionError")
    small = fuzz_torch.minimise_recipe(r, out.detail)
    assert [s["op"] for s in small["steps"]] == ["linear"]


def test_the_language_server_answers_every_request_it_advertises():
    fuzz_lsp.COUNTS.clear()
    fuzz_lsp.NOT_DRIVEN.clear()
    for inp in [fuzz_lsp.lsp_input(seed) for seed in range(2)] + [dict(fuzz_lsp.lsp_input(44), changes=[])]:  # mlp.rpn
        out = fuzz_lsp.run_lsp(inp)
        assert out.status == "ok", (inp, out)
    assert not fuzz_lsp.NOT_DRIVEN, f"advertised but not driven: {dict(fuzz_lsp.NOT_DRIVEN)}"
    from rpn2c.runtime.lsp import CAPABILITIES

    served = {m for cap, value in CAPABILITIES.items() if value and cap in fuzz_lsp.REQUESTS
              for m, _ in fuzz_lsp.REQUESTS[cap]} - {"textDocument/prepareRename", "textDocument/semanticTokens/range"}
    assert served <= set(fuzz_lsp.COUNTS), served - set(fuzz_lsp.COUNTS)
    assert fuzz_lsp.COUNTS["completionItem/resolve"] and fuzz_lsp.COUNTS["workspace/executeCommand"]


def test_a_planted_language_server_failure_is_caught_and_minimised(monkeypatch):
    from rpn2c.runtime import lsp_features

    real = lsp_features.requests

    def planted(server):
        handlers = real(server)
        hover = handlers["textDocument/hover"]

        def broken(params):
            if "BOOM" in server.document(params["textDocument"]["uri"]).text:
                raise KeyError("planted")
            return hover(params)

        return {**handlers, "textDocument/hover": broken}

    monkeypatch.setattr(lsp_features, "requests", planted)
    inp = fuzz_lsp.lsp_input(1)
    start = {"line": 0, "character": 0}
    edit = {"range": {"start": start, "end": start}, "text": "# BOOM\n"}
    inp["changes"] = [*inp["changes"], edit, {"range": {"start": start, "end": start}, "text": "\n"}]
    out = fuzz_lsp.run_lsp(inp)
    assert out.status == "failure" and out.detail == "lsp textDocument/hover: internal error: KeyError", out
    assert fuzz_lsp.run_lsp(dict(inp, changes=inp["changes"][:-2])).status == "ok"
    assert fuzz_lsp.minimise_lsp(inp, out.detail)["changes"] == [edit]


@pytest.mark.slow  # a lane runs for a set time: on a loaded machine an entry point may get no input in it
def test_a_lane_counts_each_entry_point_and_minimises_a_planted_failure(tmp_path, monkeypatch):
    """A short lane reaches every entry point asked for; the counts add up per entry point; a planted failure of
    from_torch is recorded with its entry point, minimised and reported."""
    monkeypatch.setattr(fuzz_lanes, "SHARE", {**{e: 1.0 for e in fuzz_lanes.SHARE}, "lsp": 0.2})

    def planted(r, time_limit=60.0):
        if any(s["op"] == "linear" for s in r["steps"]):
            return Outcome("failure", "from_torch: planted", "trace line")
        return Outcome("ok", "converted")

    monkeypatch.setattr(fuzz_torch, "run_torch", planted)
    entries = ("check", "explain", "from_torch", "lsp")
    data = fuzz_lanes.lane(9_000_006, 4.0, tmp_path, entries=entries)  # 9,000,006 checks and runs
    for e in entries:
        c = data["entries"][e]
        assert c["inputs"] >= 1 and c["inputs"] == sum(v for k, v in c.items() if k != "inputs"), (e, c)
    assert json.loads((tmp_path / "progress.json").read_text())["entries"]["lsp"]["inputs"] >= 1
    recorded = [json.loads(line) for line in (tmp_path / "failures.jsonl").read_text().splitlines()]
    assert recorded and {f["entry"] for f in recorded} == {"from_torch"}
    f = dict(recorded[0], count=1)
    name = fuzz_lanes._minimised(tmp_path, 0, f, None, 5.0)
    saved = json.loads((tmp_path / name).read_text())
    assert saved["entry"] == "from_torch" and [s["op"] for s in saved["input"]["steps"]] == ["linear"]
    report = {"lanes": 1, "seconds_per_lane": 4, "start": 9_000_006, "failures": 1, "distinct": 1, "known": 0,
              "entries": data["entries"], "failure_kinds": {"from_torch: planted": {**f, "minimised": name}}}
    text = fuzz_lanes.summary(report)
    assert "from_torch" in text and "[from_torch] from_torch: planted" in text and name in text


def test_asking_for_a_spec_entry_point_brings_the_check_that_feeds_it():
    """export, show and explain read the specs check accepted: asked for alone they would drive no input."""
    assert fuzz_lanes._entries("export") == ("check", "export")
    assert fuzz_lanes._entries("show,lsp") == ("check", "show", "lsp")
    assert fuzz_lanes._entries("from_torch") == ("from_torch",)
    assert fuzz_lanes._entries("check,export") == ("check", "export")


def test_a_time_out_never_lands_inside_an_import(tmp_path, monkeypatch):
    """A time-out raised while a module is being imported left it half-initialised for every later input (pandas,
    first imported by scikit-learn under a manifold κ's time limit: each later manifold κ failed with an
    AttributeError). The alarm waits for the import to end, then fires."""
    import importlib
    import sys
    import time

    from rpn2c.runtime.fuzz import Timeout, alarm

    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(0.5)\nREADY = True\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_to_import", raising=False)
    started = time.monotonic()
    with pytest.raises(Timeout), alarm(0.05):
        importlib.import_module("slow_to_import")  # a module of this test's own, written above
        while time.monotonic() - started < 30:
            pass
    assert sys.modules["slow_to_import"].READY and time.monotonic() - started < 5


def test_a_lane_killed_before_it_named_its_input_is_recorded_at_its_first_seed(tmp_path, monkeypatch):
    """A lane killed while its ``inflight`` file was empty (written, not yet filled) ended the whole run with a
    ValueError; the input is now the lane's first seed, and the run goes on and reports."""
    import subprocess

    calls = []

    def lane_run(cmd, **kw):
        lane_dir = Path(cmd[cmd.index("--out") + 1])
        calls.append(int(cmd[cmd.index("--start") + 1]))
        if len(calls) == 1:
            (lane_dir / "inflight").write_text("", encoding="utf-8")
            return subprocess.CompletedProcess(cmd, -9, "", "Killed")
        fuzz_lanes._write(lane_dir / "progress.json", {"inputs": 2, "entries": {"check": {"inputs": 2, "ok": 2}}})
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(fuzz_lanes.subprocess, "run", lane_run)
    monkeypatch.setattr(fuzz_lanes, "_minimised", lambda *a: None)
    report = fuzz_lanes.run_lanes(1, 60, 7_000_000, tmp_path, entries=("check",))
    assert calls == [7_000_000, 7_000_001]
    recorded = [json.loads(line) for line in (tmp_path / "lane_0" / "failures.jsonl").read_text().splitlines()]
    assert [(f["seed"], f["entry"]) for f in recorded] == [(7_000_000, "check")]
    assert report["entries"]["check"]["inputs"] == 3 and report["inputs"] == 3


def test_lanes_run_at_once_with_jobs_and_their_counts_add_up(monkeypatch, tmp_path):
    """``jobs=2``: both lanes are in flight together (each waits for the other at a barrier, which one lane at a
    time would never pass), from their own seeds, and the report sums them."""
    import subprocess
    import threading

    together = threading.Barrier(2, timeout=20)
    starts = []

    def lane_run(cmd, **kw):
        lane_dir = Path(cmd[cmd.index("--out") + 1])
        starts.append(int(cmd[cmd.index("--start") + 1]))
        together.wait()
        n = 3 if lane_dir.name == "lane_0" else 5
        fuzz_lanes._write(lane_dir / "progress.json", {"inputs": n, "entries": {"check": {"inputs": n, "ok": n}}})
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(fuzz_lanes.subprocess, "run", lane_run)
    report = fuzz_lanes.run_lanes(2, 60, 9_000_000, tmp_path, entries=("check",), jobs=2)
    assert sorted(starts) == [9_000_000, 19_000_000]
    assert report["inputs"] == 8 and report["inputs_per_lane"] == [3, 5] and report["jobs"] == 2
    assert report["entries"]["check"] == {"inputs": 8, "ok": 8} and report["failures"] == 0
    assert "2 lane(s) of 60 s, 2 at a time from seed 9,000,000: 0 failure(s)" in fuzz_lanes.summary(report)
