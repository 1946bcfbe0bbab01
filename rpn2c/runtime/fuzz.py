"""The fuzz harness: every input ends in a graph or a located ``SpecError`` in time, and checks ⇒ compiles and runs.

Inputs come from :mod:`rpn2c.runtime.fuzz_inputs` (grammar-based generation, valid-leaning variants, token and
byte mutations of the shipped specs and of every registry entry's example), one seeded input per number.

For each input, :func:`run_one` checks (small budgets, so a spec that checks is cheap to build), compiles and runs
one forward pass on small random inputs of the declared types, under a per-input time limit; every seventh input's
forward pass gets ids out of range (``is_hostile``). A failure is any exception other than ``SpecError``, a
``SpecError`` with a diagnostic that has no line, a time-out, or an exception while compiling or running a spec
that checked, other than a clear refusal of the inputs (:class:`rpn2c.errors.InputError`, which names the input).

    python -m rpn2c.runtime.fuzz --inputs 100000 --workers 2 --out fuzz-out
    python -m rpn2c.runtime.fuzz_lanes --lanes 3 --seconds 300 --start 40000000   # long lanes under `timeout`
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing as mp
import signal
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import rpn2c
from rpn2c.check.budget import Limits
from rpn2c.runtime.fuzz_inputs import make_input, seed_specs

ROOT = Path(__file__).resolve().parents[2]
FUZZ_LIMITS = Limits(max_params=2_000_000, max_memory=64 * 2**20, max_work=2_000)
MAX_FORWARD_ELEMENTS = 100_000  # the forward pass runs on small inputs; a spec fixing larger ones is only built
DIMS = {"B": 2, "T": 3, "S": 3, "N": 4, "E": 6, "P": 3}


class Timeout(BaseException):
    """The per-input time limit passed (a BaseException: code that catches every Exception does not swallow it)."""


# ------------------------------------------------------------------------------------------------------- run
@dataclass
class Outcome:
    """What one input ended in: ``ok`` (checked, compiled, ran, or refused hostile inputs with an
    :class:`~rpn2c.errors.InputError`), ``error`` (a located SpecError) or a failure."""

    status: str  # ok | error | failure
    detail: str = ""  # the first error code, or the failure kind
    trace: str = ""


def _site(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "rpn2c" in f.filename]
    f = frames[-1] if frames else traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__} at {Path(f.filename).name}:{f.lineno} ({f.name})"


def _on_alarm(signum, frame):
    """Raise :class:`Timeout`, but never inside a module's import: a module left half-initialised in
    ``sys.modules`` breaks every later input that imports it (a time-out during scikit-learn's first import
    left pandas without its attributes); the alarm is re-armed until the import is over."""
    f = frame
    while f is not None:
        if f.f_code.co_filename.startswith("<frozen importlib"):
            signal.setitimer(signal.ITIMER_REAL, 0.25)
            return
        f = f.f_back
    raise Timeout()


def _dims(graph) -> tuple[dict, int, int | None]:
    """Symbol sizes, the bound on edge indices and the item count masks take: edges index nodes (or features,
    for an attribute-axis graph ξ, of any layer), so they stay below every per-sample dimension of every value."""
    dims, low, items = dict(DIMS), DIMS["N"], None
    for node in graph.nodes():
        t = node.type
        if t is None or t.kind in ("edges", "mask", "edge_weight"):
            continue
        sizes = [dims.get(d, 3) if isinstance(d, str) else d for d in t.shape[1:]]
        low = min([low, *(s for s in sizes if isinstance(s, int))])
        if node.kind == "input" and t.kind == "items" and items is None:
            items = sizes[0]
    return dims, max(low, 1), items


def random_inputs(graph, gen, hostile: bool = False) -> list | None:
    """One small tensor per model input, of its declared type (symbols from DIMS; a mask's symbols take the
    first item count, edge indices stay in range). ``hostile``: edge and token ids may lie beyond the axis they
    index, which the model must refuse with an ``InputError``. None: more than MAX_FORWARD_ELEMENTS in all."""
    import torch

    from rpn2c.components.sequence import random_tokens

    dims, low, items = _dims(graph)
    out, total = [], 0
    for nid in graph.inputs:
        t = graph.node(nid).type
        shape = t.shape if t.batched else t.shape[1:]
        if t.time_major:
            shape = (shape[1], shape[0], *shape[2:])
        symbol = items if t.kind == "mask" and items is not None else None  # not the batch axis B
        shape = [((symbol if d != "B" else None) or dims.get(d, 3)) if isinstance(d, str) else d for d in shape]
        total += math.prod(shape)
        if total > MAX_FORWARD_ELEMENTS:
            return None  # too large for a small forward pass: the spec is only built
        if t.kind == "edges":
            out.append(torch.randint(0, low + 3 if hostile else low, shape, generator=gen))
        elif t.kind == "tokens":
            ids = random_tokens(graph, nid, shape, gen)
            out.append(ids + 2 * (torch.rand(ids.shape, generator=gen) < 0.2) if hostile else ids)
        elif t.kind == "mask":
            out.append(torch.rand(shape, generator=gen) > 0.5 if t.mask_mode != "add" else torch.zeros(shape))
        elif t.kind == "edge_weight":
            out.append(torch.rand(shape, generator=gen) + 0.1)
        else:
            out.append(torch.randn(shape, generator=gen))
    return out


@contextlib.contextmanager
def alarm(seconds: float):
    """Raise :class:`Timeout` in this (the main) thread once ``seconds`` have passed inside the block."""
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def crashed(exc: BaseException, stage: str) -> Outcome:
    """The failure an exception escaping ``stage`` is: a time-out, memory, or a crash at its place (with trace)."""
    if isinstance(exc, Timeout):
        return Outcome("failure", f"timeout in {stage}")
    if isinstance(exc, MemoryError):
        return Outcome("failure", f"{stage}: MemoryError")
    return Outcome("failure", f"{stage}: {_site(exc)}", "".join(traceback.format_exception(exc, limit=-8)))


def _refused_at_run_time(exc: rpn2c.SpecError) -> bool:
    """A resource budget the compiled model holds its inputs to (E06xx), located in the spec."""
    return bool(exc.diagnostics) and all(d.code.startswith("E06") and d.span.line >= 1 for d in exc.diagnostics)


def run_one(source: str | bytes, time_limit: float = 10.0, limits: Limits = FUZZ_LIMITS,
            file: str = "fuzz.rpn", hostile: bool = False) -> Outcome:
    """Check, compile and run ``source``; classify what happened (see the module docstring). A clear refusal of
    the inputs (``InputError``, naming the input, or a located E06xx: inputs too large for the budgets) counts as
    success; ``hostile``: ids may also be out of range."""
    import torch

    from rpn2c.errors import InputError

    stage = "check"
    try:
        with alarm(time_limit):
            try:
                graph = rpn2c.check(source, file, limits=limits)
            except rpn2c.SpecError as exc:
                bad = [d for d in exc.diagnostics if d.span.line < 1 or d.span.col < 1 or d.span.file != file]
                if not exc.diagnostics or bad:
                    return Outcome("failure", f"unlocated {bad[0].code if bad else 'empty'}", exc.render())
                return Outcome("error", exc.diagnostics[0].code)
            stage = "compile"
            signal.setitimer(signal.ITIMER_REAL, time_limit * 6)  # building and running get longer than checking
            from rpn2c.lower.build import CompiledModel
            from rpn2c.passes import optimize

            torch.manual_seed(0)
            model = CompiledModel(optimize(graph))
            stage = "forward"
            inputs = random_inputs(graph, torch.Generator().manual_seed(0), hostile)
            if inputs is None:
                return Outcome("ok", "compiled; inputs too large for a small forward pass")
            if not all(graph.node(i).type.batched for i in graph.inputs):
                model.eval()  # one graph is one sample: batch statistics need more than one
            with torch.no_grad():
                try:
                    model(*inputs)
                except InputError:  # a clear refusal, e.g. edge ids beyond a compressed feature axis
                    return Outcome("ok", "refused hostile inputs" if hostile else "refused inputs")
                except rpn2c.SpecError as exc:
                    if not _refused_at_run_time(exc):
                        raise
                    return Outcome("ok", f"refused at run time ({exc.diagnostics[0].code})")
            return Outcome("ok")
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - classifying every crash is the point
        return crashed(exc, stage)


@dataclass
class Report:
    inputs: int = 0
    seconds: float = 0.0
    outcomes: Counter = field(default_factory=Counter)
    failures: dict = field(default_factory=dict)  # kind -> {"count", "seed", "origin", "trace"}

    def add(self, seed: int, origin: str, out: Outcome) -> None:
        self.inputs += 1
        self.outcomes[f"{out.status} {out.detail}".strip()] += 1
        if out.status == "failure":
            f = self.failures.setdefault(out.detail, {"count": 0, "seed": seed, "origin": origin,
                                                      "trace": out.trace[-3000:]})
            f["count"] += 1

    def merge(self, other: "Report") -> None:
        self.inputs += other.inputs
        self.outcomes.update(other.outcomes)
        for k, v in other.failures.items():
            mine = self.failures.setdefault(k, dict(v, count=0))
            mine["count"] += v["count"]

    def to_json(self) -> dict:
        return {"inputs": self.inputs, "seconds": round(self.seconds, 1),
                "inputs_per_second": round(self.inputs / self.seconds, 1) if self.seconds else None,
                "failures": sum(v["count"] for v in self.failures.values()),
                "outcomes": dict(sorted(self.outcomes.items())), "failure_kinds": self.failures}


def is_hostile(seed: int) -> bool:
    """Every seventh input's forward pass gets ids out of range."""
    return seed % 7 == 3


def run_range(start: int, stop: int, time_limit: float = 10.0) -> Report:
    """Inputs ``start .. stop-1`` in this process."""
    import warnings

    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")  # scikit-learn's and torch's advice is not a result
    seeds = seed_specs()
    report = Report()
    for seed in range(start, stop):
        origin, source = make_input(seed, seeds)
        report.add(seed, origin, run_one(source, time_limit, hostile=is_hostile(seed)))
    return report


def _chunk(args) -> Report:
    return run_range(*args)


def fuzz(inputs: int, workers: int = 1, start: int = 0, time_limit: float = 10.0, chunk: int = 500) -> Report:
    """Run ``inputs`` inputs from seed ``start`` on ``workers`` processes."""
    t0 = time.perf_counter()
    jobs = [(s, min(s + chunk, start + inputs), time_limit) for s in range(start, start + inputs, chunk)]
    report = Report()
    if workers <= 1:
        for job in jobs:
            report.merge(_chunk(job))
    else:
        with mp.get_context("fork").Pool(workers, maxtasksperchild=20) as pool:
            for part in pool.imap_unordered(_chunk, jobs):
                report.merge(part)
    report.seconds = time.perf_counter() - t0
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rpn2c.runtime.fuzz", description=__doc__.splitlines()[0])
    p.add_argument("--inputs", type=int, default=1000)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--start", type=int, default=0, help="first seed")
    p.add_argument("--time-limit", type=float, default=10.0, help="seconds per input")
    p.add_argument("--out", type=Path, help="write report.json and one input file per failure kind here")
    p.add_argument("--show", type=int, help="print input number SEED and exit")
    args = p.parse_args(argv)
    if args.show is not None:
        origin, source = make_input(args.show, seed_specs())
        sys.stdout.write(f"# {origin}\n")
        sys.stdout.buffer.write(source if isinstance(source, bytes) else source.encode("utf-8"))
        return 0
    report = fuzz(args.inputs, args.workers, args.start, args.time_limit)
    data = report.to_json()
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "report.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
        seeds = seed_specs()
        for i, (kind, f) in enumerate(sorted(report.failures.items())):
            source = make_input(f["seed"], seeds)[1]
            (args.out / f"failure_{i:03d}.rpn").write_bytes(source if isinstance(source, bytes)
                                                           else source.encode("utf-8"))
    summary = {k: v for k, v in data.items() if k != "failure_kinds"}
    summary["failure_kinds"] = {k: v["count"] for k, v in data["failure_kinds"].items()}
    sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    return 1 if report.failures else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
