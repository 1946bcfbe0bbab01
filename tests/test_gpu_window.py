"""``python -m benchmarks.gpu_window``: a part past its budget is stopped and reported as timed out with its output
kept, the docs section is replaced rather than repeated, the parts' commands and files; the whole ``--quick``
pipeline on the CPU runs with ``-m slow``."""

import re
import sys

import pytest

pytest.importorskip("torch")

from benchmarks import gpu_window as G  # noqa: E402


def test_a_part_out_of_time_is_stopped_and_keeps_its_output(tmp_path):
    code = "import time; print('measured one', flush=True); time.sleep(60)"
    part = G.run_part(G.Part("eager", [sys.executable, "-c", code], 2.0, tmp_path / "eager.log"), {}, grace=5.0)
    assert part.timed_out and part.seconds < 20 and part.status.startswith("timed out after 2 s")
    log = (tmp_path / "eager.log").read_text()
    assert "measured one" in log and "eager: timed out" in log
    done = G.run_part(G.Part("tests", [sys.executable, "-c", "print('3 passed in 1.0s')"], 30.0,
                             tmp_path / "tests.log"), {})
    assert done.rc == 0 and not done.timed_out and G.test_summary(done) == "3 passed in 1.0s"
    junit = tmp_path / "tests.xml"
    junit.write_text('<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="2" tests="10" '
                     'time="41.5"></testsuite></testsuites>')
    assert G.test_summary(done, junit) == "7 passed, 1 failed, 0 errors, 2 skipped in 42 s (junit)"


def test_rows_and_the_section(tmp_path):
    stat = {"ratio": 0.9, "q25": 0.8, "q75": 1.0, "spec_ms": 9.0, "hand_ms": 10.0}
    row = {"workload": "lm", "title": "gpt2 (B=8)", "mode": "eager", "note": "", "fwd_bwd": stat}
    (tmp_path / "eager.jsonl").write_text(G.json.dumps(row) + "\n")
    eager = G.Part("eager", [], 180.0, tmp_path / "eager.log", rc=None, seconds=181.0, timed_out=True)
    info = {"device_name": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "command": "python -m benchmarks.gpu_window",
            "date": "2026-01-01 00:00 UTC"}
    text = G.section(info, [eager], tmp_path, ["lm", "gcn-2m"])
    assert text.startswith("### GPU window: NVIDIA H100 80GB HBM3 (torch 2.11.0, 2026-01-01 00:00 UTC)")
    assert "| gpt2 (B=8) | — | — | 0.90 | 0.80–1.00 | 9.00 / 10.00 |" in text
    assert "Not measured (out of time): gcn-2m." in text


def test_the_docs_section_is_replaced_not_repeated(tmp_path, monkeypatch):
    doc = tmp_path / "performance.md"
    doc.write_text("# Perf\n\n## GPU profile\n\nold\n\n## Start-up\n\nrest\n")
    G.write_docs("### GPU window: A\n", doc)
    G.write_docs("### GPU window: B\n", doc)
    text = doc.read_text()
    assert text.count(G.START) == 1 and "window: A" not in text and "window: B" in text
    assert text.index("window: B") < text.index("## Start-up") and text.endswith("rest\n")
    (tmp_path / "summary.md").write_text("### GPU window: C\n")
    monkeypatch.setattr(G, "DOCS", doc)  # a summary brought back from the GPU machine, into the docs, nothing run
    assert G.main(["--docs-only", "--out", str(tmp_path)]) == 0
    assert "window: C" in doc.read_text() and "window: B" not in doc.read_text()


def test_the_parts_commands_budgets_and_files(tmp_path):
    args = G.build_parser().parse_args(["--out", str(tmp_path)])
    args.device, args.workload = "cuda", None
    tests, eager, compiled = G.parts(args, tmp_path)
    assert sum(p.budget for p in (tests, eager, compiled)) < 9 * 60
    assert tests.cmd[1:5] == ["-m", "pytest", "-m", "gpu"] and "tests/test_device.py" in tests.cmd
    assert eager.cmd[eager.cmd.index("--device") + 1] == "cuda" and "--compile" not in eager.cmd
    order = eager.cmd[eager.cmd.index("--workload") + 1].split(",")
    assert order[:2] == ["lm", "lm-nanogpt"] and "gcn-2m" in order
    assert {"--compile", "--train-only", "--no-check"} <= set(compiled.cmd) and "inductor" in compiled.cmd
    files = {tests.log.name, eager.log.name, compiled.log.name, "tests.xml", "eager.jsonl", "compile.jsonl",
             "summary.md"}
    assert len(files) <= 8 and all(re.fullmatch(r"[A-Za-z0-9._-]+", f) for f in files)
    quick = G.build_parser().parse_args(["--out", str(tmp_path), "--quick"])
    quick.device, quick.workload = "cpu", None
    _, q_eager, q_compiled = G.parts(quick, tmp_path)
    assert "--quick" in q_eager.cmd and "lm,lm-nanogpt" in q_eager.cmd and "eager" in q_compiled.cmd[q_compiled.cmd.index("--backend") + 1:]


@pytest.mark.slow
def test_the_quick_window_runs_start_to_end(tmp_path):
    assert G.main(["--quick", "--out", str(tmp_path / "w")]) == 0
    names = sorted(p.name for p in (tmp_path / "w").iterdir())
    assert names == ["compile.jsonl", "compile.log", "eager.jsonl", "eager.log", "summary.md", "tests.log",
                     "tests.xml"]
    rows = G.read_rows(tmp_path / "w" / "compile.jsonl")
    assert rows[0]["workload"] == "lm" and rows[0]["fwd_bwd"]["ratio"] > 0
