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
    row = {"workload": "lm", "title": "gpt2 (B=8)", "mode": "eager", "note": "", "fwd_bwd": stat, "seconds": 24.6}
    (tmp_path / "eager.jsonl").write_text(G.json.dumps(row) + "\n")
    eager = G.Part("eager", [], 180.0, tmp_path / "eager.log", workloads=["lm", "gcn-2m"], left_out=["resnet18-b128"],
                   rc=None, seconds=181.0, timed_out=True)
    info = {"device_name": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "command": "python -m benchmarks.gpu_window",
            "date": "2026-01-01 00:00 UTC"}
    text = G.section(info, [eager], tmp_path)
    assert text.startswith("### GPU window: NVIDIA H100 80GB HBM3 (torch 2.11.0, 2026-01-01 00:00 UTC)")
    assert "| gpt2 (B=8) | — | — | 0.90 | 0.80–1.00 | 9.00 / 10.00 |" in text
    assert "Seconds per workload: lm 25." in text
    assert "Not measured (out of time): gcn-2m." in text
    assert "Left out of this part's plan (over its 180 s budget; `--workload` runs them): resnet18-b128." in text


def test_the_docs_section_is_replaced_not_repeated(tmp_path, monkeypatch):
    doc = tmp_path / "performance.md"
    doc.write_text("# Perf\n\n## GPU profile\n\nold\n\n## Start-up\n\nrest\n")
    G.write_docs("### GPU window: A\n", doc)
    G.write_docs("### GPU window: B\n", doc)
    text = doc.read_text()
    assert text.count(G.START) == 1 and "window: A" not in text and "window: B" in text
    assert text.index("window: B") < text.index("## Start-up") and text.endswith("rest\n")
    back = tmp_path / "back"  # the folder brought back from the GPU machine
    back.mkdir()
    (back / "summary.md").write_text("### GPU window: C\n")
    monkeypatch.setattr(G, "DOCS", doc)  # a summary brought back from the GPU machine, into the docs, nothing run
    assert G.main(["--docs-only", "--out", str(back)]) == 0
    assert "window: C" in doc.read_text() and "window: B" not in doc.read_text()
    (back / "summary.md").write_text("### GPU window: D\n")
    assert G.main(["--docs-only", "--out", str(back / "summary.md")]) == 0  # or the summary itself
    assert "window: D" in doc.read_text() and "window: C" not in doc.read_text()
    assert G.main(["--docs-only", "--out", str(tmp_path / "nowhere")]) == 2  # nothing there: said, nothing written
    assert sorted(p.name for p in back.iterdir()) == ["summary.md"]


def test_the_default_plan_ends_within_nine_minutes_by_the_recorded_seconds():
    """The default parts' budgets, each with its grace after a time-out, stay under 9 minutes; each benchmark part
    plans the workloads that fit its budget by the recorded seconds, most wanted first, and names the rest."""
    args = G.build_parser().parse_args(["--out", "w"])
    args.device = "cuda"
    assert sum(G.BUDGET_S.values()) + 3 * G.GRACE_S < G.WINDOW_S
    for part in ("eager", "compile"):
        names, left = G.planned(args, part)
        col = 0 if part == "eager" else 1
        assert sum(G.SECONDS[n][col] for n in names) <= G.BUDGET_S[part]
        assert set(names) | set(left) == set(G.workload_order()) and not set(names) & set(left)
        assert names == [n for n in G.workload_order() if n in names]  # in the order of value
    eager, _ = G.planned(args, "eager")
    compiled, left = G.planned(args, "compile")
    assert eager == list(G.ORDER)  # the eager part measures every workload
    assert compiled[:3] == ["lstm-2x512", "llama-12x768", "lm"]  # the cast fix, Llama never compiled, the LM
    assert G.fit(["a", "b", "c"], 250, "compile") == (["a", "b"], ["c"])  # unknown: 120 s each...
    assert G.fit(["lm", "lstm-2x512"], 20, "compile") == (["lstm-2x512"], ["lm"])  # ...a smaller one still fits
    args = G.build_parser().parse_args(["--out", "w", "--workload", "gcn-2m,lm"])
    args.workload = ["gcn-2m", "lm"]
    assert G.planned(args, "compile") == (["gcn-2m", "lm"], [])  # named: all of them, in the order given


def test_the_parts_commands_budgets_and_files(tmp_path):
    args = G.build_parser().parse_args(["--out", str(tmp_path)])
    args.device, args.workload = "cuda", None
    tests, eager, compiled = G.parts(args, tmp_path)
    assert sum(p.budget for p in (tests, eager, compiled)) < 9 * 60
    assert tests.cmd[1:5] == ["-m", "pytest", "-m", "gpu"] and "tests/test_device.py" in tests.cmd
    assert eager.cmd[eager.cmd.index("--device") + 1] == "cuda" and "--compile" not in eager.cmd
    order = eager.cmd[eager.cmd.index("--workload") + 1].split(",")
    assert order == eager.workloads and order[0] == "lstm-2x512" and "gcn-2m" in order
    assert compiled.cmd[compiled.cmd.index("--workload") + 1].split(",") == compiled.workloads
    assert {"--compile", "--train-only", "--no-check"} <= set(compiled.cmd) and "inductor" in compiled.cmd
    assert eager.cmd[eager.cmd.index("--rounds") + 1] == "7" and eager.cmd[eager.cmd.index("--warmup") + 1] == "2"
    assert (tests.budget, eager.budget, compiled.budget) == (G.BUDGET_S["tests"], G.BUDGET_S["eager"],
                                                              G.BUDGET_S["compile"])
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
