"""Long fuzz lanes: seeded runs of the fuzz harness over every entry point, each lane bounded by the ``timeout`` command
(which also ends a hang in C code that the per-input alarm cannot interrupt), every distinct failure minimised.

A lane is one process running spec inputs ``start, start+1, ...`` for ``--seconds`` through the checker, the
compiler and a forward pass (entry point ``check``, :mod:`rpn2c.runtime.fuzz`); a spec that checked and ran goes on
to ``export``, ``show`` and ``explain`` (:mod:`rpn2c.runtime.fuzz_entry`), and the lane interleaves ``from_torch``
inputs (:mod:`rpn2c.runtime.fuzz_torch`) and language-server sessions (``lsp``, :mod:`rpn2c.runtime.fuzz_lsp`), each
drawn from the seed in hand. The slower entry points run while their share of the lane's time (:data:`SHARE`) is not
spent, so every one is reached in a short lane; each input keeps its time limit. The lane streams its counts per
entry point to ``progress.json`` and each failure to ``failures.jsonl``, and names the input in flight in
``inflight`` (a lane killed by ``timeout`` still reports it); it runs with its address space capped
(``--memory-headroom``), so an allocation past what a clean check promises is a failure, not a machine out of memory.
Lanes run one after another (one core), or ``--jobs`` of them at a time. Afterwards each distinct failure (entry point, exception type and place) is
minimised (spec lines and tokens, recipe steps, editor edits, keeping the same failure) and saved as
``failure_NNN.rpn`` (``.json`` for a from_torch recipe or an editor session) with its seed, origin and trace;
failures another change is fixing are ``known`` (:data:`rpn2c.runtime.fuzz_entry.KNOWN`), counted apart.

    python -m rpn2c.runtime.fuzz_lanes --lanes 3 --seconds 300 --start 40000000 --out fuzz-lanes
    python -m rpn2c.runtime.fuzz_lanes --lanes 2 --jobs 2 --seconds 900 --start 40000000   # both cores, 15 min
    python -m rpn2c.runtime.fuzz_lanes --minimise FILE.rpn      # shrink one failing input
    python -m rpn2c.runtime.fuzz_lanes --show SEED --entry lsp  # print one input of an entry point
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from rpn2c.runtime.fuzz import Outcome, is_hostile, make_input, run_one, seed_specs
from rpn2c.runtime.fuzz_inputs import TOKEN

GRACE = 90.0  # seconds a lane may overrun its budget (one input's build and forward) before ``timeout`` kills it
ENTRIES = ("check", "export", "show", "explain", "from_torch", "lsp")
#: the share of a lane's time each slower entry point may take (the rest goes to check, compile and forward)
SHARE = {"export": 0.25, "show": 0.08, "explain": 0.04, "from_torch": 0.15, "lsp": 0.12}
MEMORY_HEADROOM = 4.0  # GiB of address space a lane may take beyond what it holds when it starts


def _write(path: Path, data) -> None:
    """``data`` (a string, else as JSON) written whole or not at all: a lane killed mid-write leaves the old file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(data if isinstance(data, str) else json.dumps(data, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def cap_memory(headroom_gib: float) -> None:
    """Cap this process's address space at what it holds now plus ``headroom_gib``: an allocation beyond it fails
    (``MemoryError``, or torch's "can't allocate memory") instead of taking the machine."""
    with open("/proc/self/status", encoding="ascii") as f:
        held = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    limit = held + int(headroom_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))


def run_input(entry: str, seed: int, time_limit: float, seeds=None, source=None) -> tuple[str, Outcome]:
    """(origin, outcome) of input ``seed`` of ``entry``; ``source``: the spec (export, show, explain)."""
    if entry == "check":
        origin, source = make_input(seed, seeds or seed_specs())
        return origin, run_one(source, time_limit, hostile=is_hostile(seed))
    if entry in ("export", "show", "explain"):
        from rpn2c.runtime.fuzz_entry import run_entry

        origin = ""
        if source is None:
            origin, source = make_input(seed, seeds or seed_specs())
        return origin, run_entry(entry, source, seed, time_limit * (18 if entry == "export" else 6))
    if entry == "from_torch":
        from rpn2c.runtime.fuzz_torch import recipe, run_torch

        r = recipe(seed)
        return f"recipe:{r['input']}/{r['form']}", run_torch(r, time_limit * 6)
    from rpn2c.runtime.fuzz_lsp import lsp_input, run_lsp

    inp = lsp_input(seed)
    return f"edits:{inp['spec']}", run_lsp(inp, time_limit * 3)


def lane(start: int, seconds: float, out: Path, time_limit: float = 10.0, entries=ENTRIES) -> dict:
    """Run inputs from seed ``start`` until ``seconds`` have passed, streaming to ``out`` (see the module doc)."""
    import warnings

    import sklearn.manifold  # noqa: F401  (what manifold κ import on first use: not charged to an input's time)
    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    out.mkdir(parents=True, exist_ok=True)
    seeds = seed_specs()
    per_entry = {e: Counter() for e in entries}
    spent: Counter = Counter()
    t0, seed, n, last = time.monotonic(), start, 0, 0.0
    inflight = out / "inflight"

    def progress() -> dict:
        counts = {k: v for k, v in per_entry.get("check", {}).items() if k != "inputs"}
        lsp = sys.modules.get("rpn2c.runtime.fuzz_lsp")
        return {"start": start, "next": seed, "inputs": n, "counts": counts,
                "lsp_requests": dict(lsp.COUNTS) if lsp else {}, "lsp_not_driven": dict(lsp.NOT_DRIVEN) if lsp else {},
                "entries": per_entry, "entry_seconds": {e: round(v, 1) for e, v in spent.items()},
                "seconds": round(time.monotonic() - t0, 1)}

    with open(out / "failures.jsonl", "a", encoding="utf-8") as failures:
        def run(entry: str, source=None) -> Outcome:
            _write(inflight, f"{seed} {entry} {'spec' if source is not None else '?'}")
            t1 = time.monotonic()
            if entry == "check":
                origin, o = "", run_one(source, time_limit, hostile=is_hostile(seed))
            else:
                origin, o = run_input(entry, seed, time_limit, seeds, source)
            spent[entry] += time.monotonic() - t1
            per_entry[entry]["inputs"] += 1
            per_entry[entry][o.status] += 1
            if o.status in ("failure", "known"):
                failures.write(json.dumps({"entry": entry, "seed": seed, "origin": origin or spec_origin,
                                           "kind": o.detail, "known": o.status == "known",
                                           "trace": o.trace[-3000:]}) + "\n")
                failures.flush()
            return o

        while time.monotonic() - t0 < seconds:
            spec_origin, source = make_input(seed, seeds)
            elapsed = time.monotonic() - t0
            if "check" in entries:
                o = run("check", source)
                ran = o.status == "ok" and o.detail == ""  # checked, compiled and ran
                for entry in ("export", "show", "explain"):
                    if ran and entry in entries and spent[entry] <= SHARE[entry] * elapsed:
                        run(entry, source)
            for entry in ("from_torch", "lsp"):
                if entry in entries and spent[entry] <= SHARE[entry] * max(elapsed, 1.0):
                    run(entry)
            seed, n = seed + 1, n + 1
            if time.monotonic() - last > 5:
                _write(out / "progress.json", progress())
                last = time.monotonic()
    inflight.unlink(missing_ok=True)
    data = progress()
    _write(out / "progress.json", data)
    return data


def _run_lane(lane_dir: Path, first: int, seconds: float, time_limit: float, entries, headroom: float) -> dict:
    """One lane from seed ``first`` for ``seconds``, restarted after the input in flight when ``timeout`` kills it:
    its counts per entry point, editor requests and inputs."""
    totals: dict[str, Counter] = {e: Counter() for e in entries}
    requests, not_driven = Counter(), Counter()
    inputs, left = 0, seconds
    lane_dir.mkdir(exist_ok=True)
    while left > 1:
        t0 = time.monotonic()
        cmd = ["timeout", "-s", "KILL", str(max(1, int(left + GRACE))), sys.executable, "-m",
               "rpn2c.runtime.fuzz_lanes", "--lane", "--start", str(first), "--seconds", str(left),
               "--time-limit", str(time_limit), "--out", str(lane_dir), "--entries", ",".join(entries),
               "--memory-headroom", str(headroom)]
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "MALLOC_ARENA_MAX": "2"})
        left -= time.monotonic() - t0
        progress_file, hung = lane_dir / "progress.json", lane_dir / "inflight"
        progress = json.loads(progress_file.read_text()) if progress_file.exists() else {}
        progress_file.unlink(missing_ok=True)
        for e, c in progress.get("entries", {}).items():
            totals.setdefault(e, Counter()).update(c)
        requests.update(progress.get("lsp_requests", {}))
        not_driven.update(progress.get("lsp_not_driven", {}))
        if proc.returncode == 0 and not hung.exists():
            inputs += progress["inputs"]
            break
        # killed (a hang in C code, memory) or crashed: the input in flight is the failure; go on after it
        # (the counts are those of the last progress write, every few seconds)
        said = hung.read_text().split(" ", 2) if hung.exists() else []
        seed, entry, origin = said if len(said) == 3 else (str(first), "check", "?")
        with open(lane_dir / "failures.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps({"entry": entry, "seed": int(seed), "origin": origin, "known": False,
                                "kind": f"lane killed (exit {proc.returncode}): hang or crash in C code",
                                "trace": proc.stderr[-3000:]}))
            f.write("\n")
        inputs += int(seed) - first + 1
        totals.setdefault(entry, Counter())["inputs"] += 1
        totals[entry]["failure"] += 1
        hung.unlink(missing_ok=True)
        first = int(seed) + 1
    return {"totals": totals, "requests": requests, "not_driven": not_driven, "inputs": inputs}


def run_lanes(lanes: int, seconds: float, start: int, out: Path, time_limit: float = 10.0,
              stride: int = 10_000_000, entries=ENTRIES, headroom: float = MEMORY_HEADROOM, jobs: int = 1) -> dict:
    """``lanes`` lanes of ``seconds`` each from seeds ``start + k * stride``, ``jobs`` of them at a time, each under
    ``timeout``; a lane killed mid-input records that input as a hang and goes on after it while its time lasts."""
    from concurrent.futures import ThreadPoolExecutor

    out.mkdir(parents=True, exist_ok=True)
    jobs = max(1, min(jobs, lanes))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        done = list(pool.map(lambda k: _run_lane(out / f"lane_{k}", start + k * stride, seconds, time_limit,
                                                 entries, headroom), range(lanes)))
    totals = {e: Counter() for e in entries}
    requests, not_driven = Counter(), Counter()
    inputs = 0
    for lane_counts in done:
        for e, c in lane_counts["totals"].items():
            totals.setdefault(e, Counter()).update(c)
        requests.update(lane_counts["requests"])
        not_driven.update(lane_counts["not_driven"])
        inputs += lane_counts["inputs"]
    failures = [json.loads(line) for p in sorted(out.glob("lane_*/failures.jsonl"))
                for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    kinds: dict[str, dict] = {}
    for f in failures:
        kinds.setdefault(f["kind"], dict(f, count=0))["count"] += 1
    seeds = seed_specs()
    for i, (kind, f) in enumerate(sorted(kinds.items())):
        f["minimised"] = _minimised(out, i, f, seeds, time_limit)
    real = [f for f in failures if not f.get("known")]
    report = {"lanes": lanes, "jobs": jobs, "seconds_per_lane": seconds, "start": start,
              "inputs": inputs, "inputs_per_lane": [d["inputs"] for d in done],
              "outcomes": {k: v for k, v in totals.get("check", {}).items() if k != "inputs"},
              "entries": {e: dict(c) for e, c in totals.items()},
              "lsp_requests": dict(sorted(requests.items())), "lsp_not_driven": dict(not_driven),
              "failures": len(real), "known": len(failures) - len(real),
              "distinct": len({f["kind"] for f in real}),
              "failure_kinds": {k: {x: v.get(x) for x in ("entry", "count", "seed", "origin", "minimised", "known")}
                                for k, v in sorted(kinds.items())}}
    _write(out / "report.json", report)
    return report


def _minimised(out: Path, i: int, f: dict, seeds, time_limit: float) -> str | None:
    """Shrink failure ``f`` of its entry point and save it as ``failure_NNN.*``; known failures are not shrunk."""
    entry, kind, seed = f.get("entry", "check"), f["kind"], f["seed"]
    killed = "lane killed" in kind or "timeout" in kind  # shrinking a hang costs a time limit per try
    if entry in ("from_torch", "lsp"):
        if entry == "from_torch":
            from rpn2c.runtime.fuzz_torch import minimise_recipe, recipe

            data = recipe(seed) if killed or f.get("known") else minimise_recipe(recipe(seed), kind, time_limit * 3)
        else:
            from rpn2c.runtime.fuzz_lsp import lsp_input, minimise_lsp

            data = lsp_input(seed) if killed or f.get("known") else minimise_lsp(lsp_input(seed), kind, time_limit * 3)
        name = f"failure_{i:03d}.json"
        _write(out / name, {"failure": kind, "entry": entry, "seed": seed, "origin": f["origin"],
                            "trace": f["trace"].strip().splitlines()[-6:], "input": data})
        return name
    source = make_input(seed, seeds)[1]
    if not killed and not f.get("known"):
        if entry == "check":
            source = minimise(source, kind, hostile=is_hostile(seed))
        else:
            from rpn2c.runtime.fuzz_entry import run_entry

            source = minimise(source, kind, tries=60,
                              fails=lambda text: run_entry(entry, text, seed, time_limit * 6).detail == kind)
    name = f"failure_{i:03d}.rpn"
    _save(out / name, source, f)
    return name


def _save(path: Path, source: str | bytes, f: dict) -> None:
    entry = f.get("entry", "check")
    head = "".join(f"# {line}\n" for line in [f"fuzz failure: {f['kind']}",
                                              f"entry point {entry}, seed {f['seed']} ({f['origin']})",
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
             tries: int = 400, fails=None) -> str | bytes:
    """A smaller input that fails with the same ``kind``: lines dropped, then tokens (at most ``tries`` runs);
    ``fails`` (text -> bool) says whether a text still fails (default: :func:`run_one` gives ``kind``)."""
    fails = fails or _same(kind, hostile, time_limit)
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


def _entries(text: str) -> tuple[str, ...]:
    chosen = tuple(e.strip() for e in text.split(",") if e.strip())
    bad = [e for e in chosen if e not in ENTRIES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown entry points {bad} (choose from {', '.join(ENTRIES)})")
    return with_sources(chosen)


def with_sources(entries: tuple[str, ...]) -> tuple[str, ...]:
    """``entries`` with ``check`` added where export, show or explain is asked for: those read the generated specs
    that check accepts and runs, so without check they would get no input."""
    if "check" in entries or not {"export", "show", "explain"} & set(entries):
        return entries
    return ("check", *entries)


def show(entry: str, seed: int) -> str:
    """Input ``seed`` of ``entry``, printable."""
    if entry == "from_torch":
        from rpn2c.runtime.fuzz_torch import describe, recipe

        return describe(recipe(seed))
    if entry == "lsp":
        from rpn2c.runtime.fuzz_lsp import lsp_input

        return json.dumps(lsp_input(seed), indent=1, ensure_ascii=False) + "\n"
    origin, source = make_input(seed, seed_specs())
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    return f"# {origin}\n{text}"


def summary(report: dict) -> str:
    """The lanes' counts per entry point and their failures, as the command prints them."""
    at_once = f", {report['jobs']} at a time" if report.get("jobs", 1) > 1 else ""
    lines = [f"{report['lanes']} lane(s) of {report['seconds_per_lane']:g} s{at_once} from seed {report['start']:,}: "
             f"{report['failures']} failure(s) ({report['distinct']} distinct), {report['known']} known"]
    lines.append(f"  {'entry point':<12} {'inputs':>8} {'ok':>8} {'refused':>8} {'failures':>8} {'known':>6}")
    for e, c in report["entries"].items():
        lines.append(f"  {e:<12} {c.get('inputs', 0):>8,} {c.get('ok', 0):>8,} {c.get('error', 0):>8,} "
                     f"{c.get('failure', 0):>8,} {c.get('known', 0):>6,}")
    if report.get("lsp_requests"):
        lines.append("  editor requests: " + ", ".join(f"{m.removeprefix('textDocument/')} {n:,}"
                                                       for m, n in report["lsp_requests"].items()))
    if report.get("lsp_not_driven"):
        lines.append(f"  advertised but not driven: {', '.join(report['lsp_not_driven'])}")
    for kind, f in report["failure_kinds"].items():
        tag = " (known)" if f.get("known") else ""
        lines.append(f"{f['count']:>5}  [{f.get('entry') or 'check'}] {kind}{tag}  -> {f['minimised']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rpn2c.runtime.fuzz_lanes", description=__doc__.splitlines()[0])
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--seconds", type=float, default=300.0, help="budget of each lane")
    p.add_argument("--jobs", type=int, default=1, help="lanes run at a time (default 1: one after another)")
    p.add_argument("--start", type=int, default=0, help="first seed (lane k starts at start + k * 10,000,000)")
    p.add_argument("--time-limit", type=float, default=10.0,
                   help="seconds per input to check (6x to build and run, export, show, from_torch; 3x an editor "
                        "session's answer)")
    p.add_argument("--entries", type=_entries, default=ENTRIES,
                   help=f"entry points to drive, comma-separated (default all: {','.join(ENTRIES)}); export, show "
                        "and explain bring check, whose accepted specs they read")
    p.add_argument("--memory-headroom", type=float, default=MEMORY_HEADROOM,
                   help="GiB of address space a lane may take beyond what it holds when it starts")
    p.add_argument("--out", type=Path, default=Path("fuzz-lanes"))
    p.add_argument("--lane", action="store_true", help=argparse.SUPPRESS)  # one lane, as run_lanes starts it
    p.add_argument("--minimise", type=Path, help="shrink this failing spec and print it")
    p.add_argument("--show", type=int, metavar="SEED", help="print input SEED of --entry and exit")
    p.add_argument("--entry", choices=ENTRIES, default="check", help="the entry point of --show")
    args = p.parse_args(argv)
    if args.show is not None:
        sys.stdout.write(show(args.entry, args.show))
        return 0
    if args.minimise is not None:
        source = args.minimise.read_bytes()
        o: Outcome = run_one(source, args.time_limit)
        small = minimise(source, o.detail) if o.status == "failure" else source
        sys.stdout.write(f"# {o.status} {o.detail}\n")
        sys.stdout.buffer.write(small if isinstance(small, bytes) else small.encode("utf-8"))
        return 1 if o.status == "failure" else 0
    if args.lane:
        if args.memory_headroom > 0:
            cap_memory(args.memory_headroom)
        lane(args.start, args.seconds, args.out, args.time_limit, args.entries)
        return 0
    report = run_lanes(args.lanes, args.seconds, args.start, args.out, args.time_limit, entries=args.entries,
                       headroom=args.memory_headroom, jobs=args.jobs)
    sys.stdout.write(summary(report))
    return 1 if report["failures"] else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
