"""One GPU window, start to end: ``python -m benchmarks.gpu_window --out DIR``.

Three parts, each a subprocess with its own time budget, planned to end within 9 minutes on an H100/H200:

1. ``python -m pytest -m gpu`` over the test files that declare a ``gpu`` mark (junit XML, log, the slowest tests);
2. ``python -m benchmarks --device cuda --profile gpu`` eager;
3. the same with ``--compile`` (training step only: one compile per side; no second equality check).

Each part runs the workloads in :data:`ORDER` (most wanted first) that fit its budget by :data:`SECONDS`, the
seconds each took or is expected to take there; those left out are named in the summary and run with
``--workload``. Each part's output goes to its log in DIR as it comes (and, line by line, to stdout, flushed); the
benchmark rows are appended to a JSON-lines file as each workload finishes (with its ``seconds``, to correct
:data:`SECONDS`), so a part that runs out of time keeps what it measured and is reported as timed out (it gets
SIGINT first, then SIGKILL). ``summary.md`` in DIR, written after every part, holds the section for
``docs/performance.md`` (device, torch version, each part's outcome and tables).

Where DIR comes back from the GPU machine and its checkout does not (a lent card), the section goes into the docs
here: ``python -m benchmarks.gpu_window --docs-only --out DIR`` (DIR: the folder brought back, or its
``summary.md``), which runs nothing; ``--write-docs`` does it at the end of a run on a machine whose checkout
stays. ``--quick`` runs the same pipeline on the CPU at quick sizes, a smoke test of the script itself: the
language-model workloads only (the others' quick sizes are tested in ``tests/test_benchmarks_harness.py``),
float32, the compiled part through dynamo with the ``eager`` backend.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "performance.md"
START, END = "<!-- gpu-window:start -->", "<!-- gpu-window:end -->"
# Seconds per workload on an H200 (eager, compiled): its build, the float64 check (eager), warm-up, timing and
# memory; compiled, one compile per side of the training step. From the windows of 2026-11-28 (docs/performance.md):
# the eager part ran the seven in about 115 s; the first compiled part finished lm, lm-nanogpt and
# transformer-4x1024 in 200 s; first compiled steps, compile included: the LSTM 3.9 s, the GCN 2.6 + 9.7 s,
# ResNet-18 26.0 + 20.1 s; Llama's is taken as the GPT-2 spec's and a little more. lm-nanogpt's spec is lm's graph,
# which torch's compile caches (on disk, on by default) give it mostly without compiling again. In ORDER: the LSTM,
# whose compiled run under autocast has a fix to measure; Llama compiled, never measured; the language model; then
# the figures measured before.
SECONDS = {"lstm-2x512": (10, 15), "llama-12x768": (25, 105), "lm": (25, 95), "gcn-2m": (25, 25),
           "transformer-4x1024": (15, 40), "resnet18-b128": (15, 55), "lm-nanogpt": (20, 50)}
UNKNOWN_S = (30, 120)  # a workload not in SECONDS
ORDER = tuple(SECONDS)
BUDGET_S = {"tests": 120.0, "eager": 140.0, "compile": 235.0}  # with a 10 s grace each: 525 s at the most
GRACE_S = 10.0
WINDOW_S = 9 * 60
QUICK = ("lm", "lm-nanogpt")  # --quick's workloads
T0 = time.monotonic()


def say(msg: str) -> None:
    """One progress line, flushed (the window's output is read from its tail)."""
    sys.stdout.write(f"[gpu_window {time.monotonic() - T0:6.1f}s] {msg}\n")
    sys.stdout.flush()


@dataclass
class Part:
    """One subprocess of the window: its command, budget (seconds) and, once run, its outcome."""

    name: str
    cmd: list[str]
    budget: float
    log: Path
    workloads: list[str] = field(default_factory=list)  # a benchmark part's plan
    left_out: list[str] = field(default_factory=list)  # ...and what its budget left out of it
    rc: int | None = None
    seconds: float = 0.0
    timed_out: bool = False
    tail: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.timed_out:
            return f"timed out after {self.budget:.0f} s (what finished before is kept)"
        return "passed" if self.rc == 0 else f"exit status {self.rc}"


def run_part(part: Part, env: dict, grace: float = GRACE_S) -> Part:
    """Run ``part.cmd`` in its own process group, its output into ``part.log`` and (prefixed) stdout as it comes;
    past ``part.budget`` seconds the group gets SIGINT, and SIGKILL ``grace`` seconds later."""
    say(f"{part.name}: start (budget {part.budget:.0f} s): {' '.join(part.cmd)}")
    t0 = time.monotonic()
    with open(part.log, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(part.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                cwd=ROOT, env=env, start_new_session=True, errors="replace")

        def pump():
            for text in proc.stdout:
                log.write(text)
                log.flush()
                part.tail = (part.tail + [text.rstrip()])[-20:]
                say(f"{part.name}| {text.rstrip()}")

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=part.budget)
        except subprocess.TimeoutExpired:
            part.timed_out = True
            _signal(proc, signal.SIGINT)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _signal(proc, signal.SIGKILL)
                proc.wait()
        reader.join(timeout=5)
        part.rc, part.seconds = proc.returncode, time.monotonic() - t0
        log.write(f"\n# {part.name}: {part.status}, {part.seconds:.1f} s\n")
    say(f"{part.name}: {part.status}, {part.seconds:.1f} s")
    return part


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def gpu_test_files() -> list[str]:
    """The test files that declare a ``gpu`` mark (what ``pytest -m gpu`` selects from, without collecting the
    rest of the suite); the whole ``tests`` folder if none does."""
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                   if re.search(r"mark\.gpu\b", p.read_text(encoding="utf-8", errors="replace")))
    return files or ["tests"]


def workload_order() -> list[str]:
    """The GPU profile's workloads, those of :data:`ORDER` first in its order."""
    from benchmarks import workloads as W

    names = [w.name for w in W.WORKLOADS.values() if "gpu" in w.profiles]
    return sorted(names, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER))


def fit(names: list[str], budget: float, part: str) -> tuple[list[str], list[str]]:
    """(``names`` that fit ``budget`` seconds by :data:`SECONDS`, taken in order, each while the sum stays within
    it; those left out) for the ``"eager"`` or ``"compile"`` part."""
    col = 0 if part == "eager" else 1
    taken, left, total = [], [], 0.0
    for name in names:
        cost = SECONDS.get(name, UNKNOWN_S)[col]
        if total + cost <= budget:
            taken.append(name)
            total += cost
        else:
            left.append(name)
    return taken, left


def planned(args, part: str = "eager") -> tuple[list[str], list[str]]:
    """(The benchmark workloads of this part, those the plan leaves out): ``--workload`` (all of them), else
    :data:`QUICK`, else the GPU profile's that fit the part's budget (:func:`fit`)."""
    if args.workload or args.quick:
        return list(args.workload or QUICK), []
    return fit(workload_order(), getattr(args, f"{part}_s"), part)


def parts(args, out: Path) -> list[Part]:
    """The window's three parts for ``args``."""
    py = sys.executable
    tests = [py, "-m", "pytest", "-m", "gpu", "-rfE", "-p", "no:cacheprovider", "--disable-warnings",
             "--durations=15", f"--junitxml={out / 'tests.xml'}", *gpu_test_files()]
    if not args.quick and importlib.util.find_spec("xdist") is not None:
        tests[5:5] = ["-n", str(args.test_workers)]  # the GPU tests compile models: in parallel, as before
    bench = [py, "-m", "benchmarks", "--device", args.device, "--profile", "gpu", "--markdown"]
    if args.quick:
        # float32: CPU bf16 autocast is emulated where the CPU lacks it (slow, and oneDNN's LSTM refuses it)
        bench += ["--quick", "--no-memory", "--no-autocast", "--rounds", "2", "--min-time", "0.001", "--warmup", "1"]
    else:
        bench += ["--rounds", str(args.rounds), "--warmup", str(args.warmup)]
    # the eager part has checked each workload's equality: the compiled one spends its time on compiling
    compiled = [*bench, "--compile", "--train-only", "--no-check", "--backend", "eager" if args.quick else args.backend]
    out_parts = [Part("tests", tests, args.tests_s, out / "tests.log")]
    for name, cmd in (("eager", bench), ("compile", compiled)):
        names, left = planned(args, name)
        out_parts.append(Part(name, [*cmd, "--workload", ",".join(names), "--jsonl", str(out / f"{name}.jsonl")],
                              getattr(args, f"{name}_s"), out / f"{name}.log", workloads=names, left_out=left))
    return out_parts


def read_rows(path: Path) -> list[dict]:
    """The benchmark rows a part appended to ``path`` (none if it wrote none)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_summary(part: Part, junit: Path | None = None) -> str:
    """The counts of pytest's junit XML ``junit`` where it was written, else pytest's last summary line ("12 passed,
    3 skipped in 40.1s"), else the part's status."""
    if junit is not None and junit.exists():
        import xml.etree.ElementTree as ET

        try:
            root = ET.parse(junit).getroot()
            suite = root if root.tag == "testsuite" else root.find("testsuite")
            n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
            passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
            return (f"{passed} passed, {n['failures']} failed, {n['errors']} errors, {n['skipped']} skipped "
                    f"in {float(suite.get('time', 0)):.0f} s (junit)")
        except (ET.ParseError, AttributeError, ValueError):
            pass
    for text in reversed(part.tail):
        if re.search(r"\b(passed|failed|error|skipped|deselected|no tests ran)\b", text):
            return text.strip("= ")
    return part.status


def section(info: dict, done: list[Part], out: Path) -> str:
    """The markdown section of this window: device, torch, each part's outcome and the benchmark tables."""
    from benchmarks import harness

    lines = [f"### GPU window: {info['device_name']} (torch {info['torch']}, {info['date']})", "",
             f"`{info['command']}`: {sum(p.seconds for p in done):.0f} s in all.", ""]
    for p in done:
        if p.name == "tests":
            lines += [f"**GPU tests** ({p.seconds:.0f} s, {p.status}): {test_summary(p, out / 'tests.xml')}", ""]
            continue
        rows = read_rows(out / f"{p.name}.jsonl")
        missing = [n for n in p.workloads if n not in {r["workload"] for r in rows}]
        lines += [f"**GPU profile, {p.name}** ({p.seconds:.0f} s, {p.status}):", ""]
        lines += [harness.markdown(rows), ""] if rows else ["no workload finished", ""]
        took = [f"{r['workload']} {r['seconds']:.0f}" for r in rows if "seconds" in r]
        if took:
            lines += [f"Seconds per workload: {', '.join(took)}.", ""]
        if missing:
            lines += [f"Not measured ({'out of time' if p.timed_out else 'not reached'}): {', '.join(missing)}.", ""]
        if p.left_out:
            lines += [f"Left out of this part's plan (over its {p.budget:.0f} s budget; `--workload` runs them): "
                      f"{', '.join(p.left_out)}.", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_docs(text: str, path: Path | None = None) -> None:
    """Put ``text`` between the window markers of ``path`` (replacing an earlier window's), else before the
    "## Start-up" section, else at the end."""
    path = path or DOCS
    doc = path.read_text(encoding="utf-8")
    block = f"{START}\n{text.rstrip()}\n{END}\n"
    if START in doc and END in doc:
        doc = doc[:doc.index(START)] + block + doc[doc.index(END) + len(END) + 1:]
    elif "\n## Start-up" in doc:
        i = doc.index("\n## Start-up") + 1
        doc = doc[:i] + block + "\n" + doc[i:]
    else:
        doc = doc.rstrip() + "\n\n" + block
    path.write_text(doc, encoding="utf-8")


def device_info(device: str, argv: list[str]) -> dict:
    import torch

    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "CPU"
    return {"device_name": name, "torch": torch.__version__, "command": "python -m benchmarks.gpu_window "
            + " ".join(argv), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_window", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path,
                    help="folder for the logs, junit XML, rows and summary (with --docs-only: that folder brought "
                         "back from the GPU machine, or its summary.md)")
    ap.add_argument("--quick", action="store_true", help="the same pipeline on the CPU at quick sizes (a smoke run)")
    ap.add_argument("--write-docs", action="store_true",
                    help="put the summary into docs/performance.md at the end (where this checkout stays)")
    ap.add_argument("--docs-only", action="store_true",
                    help="run nothing: put OUT's summary.md (of a window run on another machine) into "
                         "docs/performance.md")
    ap.add_argument("--device", default=None, help="default cuda (cpu with --quick)")
    ap.add_argument("--workload", action="append",
                    help="the benchmark workloads of both benchmark parts (default: the GPU profile's that fit)")
    ap.add_argument("--rounds", type=int, default=7, help="ABBA rounds per measurement (default 7)")
    ap.add_argument("--warmup", type=int, default=2, help="calls of each side before timing (default 2)")
    ap.add_argument("--backend", default="inductor", help="torch.compile backend of part 3 (quick: eager)")
    for part, what in (("tests", "the GPU tests"), ("eager", "the eager benchmarks"),
                       ("compile", "the compiled benchmarks")):
        ap.add_argument(f"--{part}-s", type=float, default=BUDGET_S[part],
                        help=f"budget of {what} in seconds (default {BUDGET_S[part]:.0f})")
    ap.add_argument("--test-workers", type=int, default=8, help="pytest-xdist workers for the GPU tests (default 8)")
    ap.add_argument("--skip", action="append", default=[], choices=["tests", "eager", "compile"],
                    help="leave a part out (repeatable)")
    return ap


def summary_path(out: Path) -> Path:
    """The summary of a window: ``out`` itself where it is a file, else ``out/summary.md``."""
    return out if out.is_file() else out / "summary.md"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.device = args.device or ("cpu" if args.quick else "cuda")
    if args.workload:
        args.workload = [n for item in args.workload for n in item.split(",") if n]
    out = args.out
    if args.docs_only:
        summary = summary_path(out)
        if not summary.is_file():
            sys.stderr.write(f"no window summary at {summary}: give the folder the window wrote (its summary.md)\n")
            return 2
        write_docs(summary.read_text(encoding="utf-8"))
        say(f"wrote {summary} into {DOCS}")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("eager.jsonl", "compile.jsonl"):
        (out / stale).unlink(missing_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    info = device_info(args.device, argv)
    say(f"device {info['device_name']}, torch {info['torch']}, out {out}")
    done = []
    text = section(info, done, out)
    for part in parts(args, out):
        if part.name in args.skip:
            continue
        if part.workloads or part.name == "tests":
            done.append(run_part(part, env))
        text = section(info, done, out)
        (out / "summary.md").write_text(text, encoding="utf-8")  # after every part: a later kill keeps it
    if args.write_docs:
        write_docs(text)
        say(f"wrote the section into {DOCS}")
    sys.stdout.write("\n" + text)
    sys.stdout.flush()
    return 0 if all(p.rc == 0 and not p.timed_out for p in done) else 1


if __name__ == "__main__":
    sys.exit(main())
