"""Long fuzz lanes: seeded runs of the fuzz harness, each bounded by the ``timeout`` command (which also ends a hang
in C code that the per-input alarm cannot interrupt), with every distinct failure minimised and saved.

A lane is one process running inputs ``start, start+1, ...`` for ``--seconds``; it streams its counts to
``progress.json`` and each failure to ``failures.jsonl`` as it happens, and names the input in flight in
``inflight``, so a lane killed by ``timeout`` still reports the input that hung. Lanes run one after another (one
core). Afterwards each distinct failure (exception type and place) is minimised (lines, then tokens, keeping the
same failure) and saved as ``failure_NNN.rpn`` with its seed, origin and trace in a comment.

    python -m rpn2c.runtime.fuzz_lanes --lanes 3 --seconds 300 --start 40000000 --out fuzz-lanes
    python -m rpn2c.runtime.fuzz_lanes --minimise FILE.rpn      # shrink one failing input
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from rpn2c.runtime.fuzz import Outcome, is_hostile, make_input, run_one, seed_specs
from rpn2c.runtime.fuzz_inputs import TOKEN

GRACE = 90.0  # seconds a lane may overrun its budget (one input's build and forward) before ``timeout`` kills it


def _write(path: Path, data) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def lane(start: int, seconds: float, out: Path, time_limit: float = 10.0) -> dict:
    """Run inputs from seed ``start`` until ``seconds`` have passed, streaming to ``out`` (see the module doc)."""
    import warnings

    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    out.mkdir(parents=True, exist_ok=True)
    seeds = seed_specs()
    counts: Counter = Counter()
    t0, seed, n = time.monotonic(), start, 0
    inflight = out / "inflight"
    with open(out / "failures.jsonl", "a", encoding="utf-8") as failures:
        while time.monotonic() - t0 < seconds:
            origin, source = make_input(seed, seeds)
            inflight.write_text(f"{seed} {origin}", encoding="utf-8")
            o = run_one(source, time_limit, hostile=is_hostile(seed))
            counts[o.status] += 1
            if o.status == "failure":
                failures.write(json.dumps({"seed": seed, "origin": origin, "kind": o.detail,
                                           "trace": o.trace[-3000:]}) + "\n")
                failures.flush()
            seed, n = seed + 1, n + 1
            if n % 200 == 0:
                _write(out / "progress.json", {"start": start, "next": seed, "inputs": n, "counts": counts,
                                               "seconds": round(time.monotonic() - t0, 1)})
    inflight.unlink(missing_ok=True)
    data = {"start": start, "next": seed, "inputs": n, "counts": counts, "seconds": round(time.monotonic() - t0, 1)}
    _write(out / "progress.json", data)
    return data


def run_lanes(lanes: int, seconds: float, start: int, out: Path, time_limit: float = 10.0,
              stride: int = 10_000_000) -> dict:
    """``lanes`` lanes of ``seconds`` each from seeds ``start + k * stride``, each under ``timeout``; a lane
    killed mid-input records that input as a hang and goes on after it while its time lasts."""
    out.mkdir(parents=True, exist_ok=True)
    total: Counter = Counter()
    inputs = 0
    for k in range(lanes):
        lane_dir, first, left = out / f"lane_{k}", start + k * stride, seconds
        lane_dir.mkdir(exist_ok=True)
        while left > 1:
            t0 = time.monotonic()
            cmd = ["timeout", "-s", "KILL", str(max(1, int(left + GRACE))), sys.executable, "-m",
                   "rpn2c.runtime.fuzz_lanes", "--lane", "--start", str(first), "--seconds", str(left),
                   "--time-limit", str(time_limit), "--out", str(lane_dir)]
            proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            left -= time.monotonic() - t0
            progress_file, hung = lane_dir / "progress.json", lane_dir / "inflight"
            progress = json.loads(progress_file.read_text()) if progress_file.exists() else {"counts": {}}
            progress_file.unlink(missing_ok=True)
            if proc.returncode == 0 and not hung.exists():
                inputs += progress["inputs"]
                total.update(progress["counts"])
                break
            # killed (a hang in C code, memory) or crashed: the input in flight is the failure; go on after it
            # (the counts are those of the last progress write, every 200 inputs)
            seed, origin = hung.read_text().split(" ", 1) if hung.exists() else (str(first), "?")
            with open(lane_dir / "failures.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps({"seed": int(seed), "origin": origin, "kind": f"lane killed (exit "
                                    f"{proc.returncode}): hang or crash in C code", "trace": proc.stderr[-3000:]}))
                f.write("\n")
            inputs += int(seed) - first + 1
            total.update(progress["counts"])
            total["failure"] += 1
            hung.unlink(missing_ok=True)
            first = int(seed) + 1
    failures = [json.loads(line) for p in sorted(out.glob("lane_*/failures.jsonl"))
                for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    kinds: dict[str, dict] = {}
    for f in failures:
        kinds.setdefault(f["kind"], dict(f, count=0))["count"] += 1
    seeds = seed_specs()
    for i, (kind, f) in enumerate(sorted(kinds.items())):
        source = make_input(f["seed"], seeds)[1]
        small = minimise(source, kind, hostile=is_hostile(f["seed"])) if "lane killed" not in kind else source
        f["minimised"] = f"failure_{i:03d}.rpn"
        _save(out / f["minimised"], small, f)
    report = {"lanes": lanes, "seconds_per_lane": seconds, "start": start, "inputs": inputs,
              "outcomes": dict(total), "failures": len(failures), "distinct": len(kinds),
              "failure_kinds": {k: {x: v[x] for x in ("count", "seed", "origin", "minimised")}
                                for k, v in sorted(kinds.items())}}
    _write(out / "report.json", report)
    return report


def _save(path: Path, source: str | bytes, f: dict) -> None:
    head = "".join(f"# {line}\n" for line in [f"fuzz failure: {f['kind']}", f"seed {f['seed']} ({f['origin']})",
                                              *f["trace"].strip().splitlines()[-6:]])
    body = source if isinstance(source, bytes) else source.encode("utf-8")
    path.write_bytes(head.encode("utf-8", "replace") + body)


def _same(kind: str, hostile: bool, time_limit: float):
    def fails(text: str | bytes) -> bool:
        return run_one(text, time_limit, hostile=hostile).detail == kind
    return fails


def _shrink(parts: list, fails, join, budget: list[int]) -> list:
    """Delta debugging: drop chunks of ``parts`` (halves, quarters, ... single parts) while ``fails`` holds."""
    n = 2
    while len(parts) >= 2 and budget[0] > 0:
        size = max(1, len(parts) // n)
        for i in range(0, len(parts), size):
            trial = parts[:i] + parts[i + size:]
            budget[0] -= 1
            if trial and fails(join(trial)):
                parts, n = trial, max(n - 1, 2)
                break
            if budget[0] <= 0:
                return parts
        else:
            if size == 1:
                return parts
            n = min(n * 2, len(parts))
    return parts


def minimise(source: str | bytes, kind: str, hostile: bool = False, time_limit: float = 5.0,
             tries: int = 400) -> str | bytes:
    """A smaller input that fails with the same ``kind``: lines dropped, then tokens (at most ``tries`` runs)."""
    fails = _same(kind, hostile, time_limit)
    if isinstance(source, bytes):
        try:
            source = source.decode("utf-8")
        except UnicodeDecodeError:
            return source
    if not fails(source):
        return source  # not reproducible in isolation (e.g. state left by an earlier input)
    budget = [tries]
    lines = _shrink(source.split("\n"), fails, "\n".join, budget)
    text = "\n".join(lines)
    spans = [m.span() for m in TOKEN.finditer(text)]
    pieces, last = [], 0
    for a, b in spans:  # a token with the blank before it
        pieces.append(text[last:b])
        last = b
    tail = text[last:]
    pieces = _shrink(pieces, lambda t: fails(t + tail), "".join, budget)
    return "".join(pieces) + tail


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rpn2c.runtime.fuzz_lanes", description=__doc__.splitlines()[0])
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--seconds", type=float, default=300.0, help="budget of each lane")
    p.add_argument("--start", type=int, default=0, help="first seed (lane k starts at start + k * 10,000,000)")
    p.add_argument("--time-limit", type=float, default=10.0, help="seconds per input to check (6x to build and run)")
    p.add_argument("--out", type=Path, default=Path("fuzz-lanes"))
    p.add_argument("--lane", action="store_true", help=argparse.SUPPRESS)  # one lane, as run_lanes starts it
    p.add_argument("--minimise", type=Path, help="shrink this failing input and print it")
    args = p.parse_args(argv)
    if args.minimise is not None:
        source = args.minimise.read_bytes()
        o: Outcome = run_one(source, args.time_limit)
        small = minimise(source, o.detail) if o.status == "failure" else source
        sys.stdout.write(f"# {o.status} {o.detail}\n")
        sys.stdout.buffer.write(small if isinstance(small, bytes) else small.encode("utf-8"))
        return 1 if o.status == "failure" else 0
    if args.lane:
        lane(args.start, args.seconds, args.out, args.time_limit)
        return 0
    report = run_lanes(args.lanes, args.seconds, args.start, args.out, args.time_limit)
    sys.stdout.write(json.dumps({k: v for k, v in report.items() if k != "failure_kinds"}, indent=1) + "\n")
    for kind, f in report["failure_kinds"].items():
        sys.stdout.write(f"{f['count']:>5}  {kind}  -> {f['minimised']}\n")
    return 1 if report["failures"] else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
