"""The fuzz harness: every input ends in a graph or a located ``SpecError`` in time, and checks ⇒ compiles and runs.

Inputs come from three generators, drawn in turn from one seeded ``random.Random`` per input:

* ``generate``: grammar-based, mostly valid specs: a model over a random input type whose statements are heads,
  layers, operations, blocks and ``repeat`` built from registry entries in their slots, with hyper-parameter values
  drawn from each schema's field types (small, boundary and absurd values);
* ``mutate``: token and line mutations (delete, duplicate, swap, replace a number by an extreme value, rename,
  nest) of every shipped spec (``specs/``, ``examples/specs/``) and of every registry entry's example;
* ``mutate_bytes``: byte flips, invalid UTF-8, NUL bytes and truncation of the same seeds.

For each input, :func:`run_one` checks (small budgets, so a spec that checks is cheap to build), compiles and runs
one forward pass on small random inputs of the declared types, under a per-input time limit. A failure is any
exception other than ``SpecError``, a ``SpecError`` with a diagnostic that has no line, a time-out, or an
exception while compiling or running a spec that checked.

    python -m rpn2c.runtime.fuzz --inputs 100000 --workers 2 --out fuzz-out
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import re
import signal
import sys
import time
import traceback
import typing
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import rpn2c
from rpn2c.check.budget import Limits
from rpn2c.components.registry import REGISTRY, SLOT_FAMILIES, ValueRef

ROOT = Path(__file__).resolve().parents[2]
FUZZ_LIMITS = Limits(max_params=2_000_000, max_memory=64 * 2**20, max_work=2_000)
MAX_FORWARD_ELEMENTS = 100_000  # the forward pass runs on small inputs; a spec fixing larger ones is only built
DIMS = {"B": 2, "T": 3, "S": 3, "N": 4, "E": 6, "P": 3}
TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*|[A-Za-z_][A-Za-z0-9_]*|[0-9]+(?:\.[0-9]*)?|//|\S')
INTS = ["0", "1", "2", "3", "4", "7", "16", "-1", "1000", "100000", "1000000000", "99999999999999999999", "2.5",
        "0.0", "1e308", "1e999"]


class Timeout(Exception):
    """The per-input time limit passed."""


# ------------------------------------------------------------------------------------------------------- seeds
def seed_specs() -> list[tuple[str, str]]:
    """(name, text) of every shipped spec and every registry entry's example."""
    out = []
    for folder in ("specs", "examples/specs"):
        for p in sorted((ROOT / folder).rglob("*.rpn")):
            out.append((str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")))
    for family, entries in REGISTRY.items():
        seen = set()
        for entry in entries.values():
            if entry.cls in seen:
                continue
            seen.add(entry.cls)
            text = entry.cls.example_spec()
            if text:
                out.append((f"example:{family}:{entry.name}", text))
    return out


# ------------------------------------------------------------------------------------------------------- generate
def _value(rng: random.Random, ann, refs: list[str]) -> str | None:
    """A spec expression for a hyper-parameter of type ``ann`` (None: leave it out)."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        return _value(rng, args[0], refs)
    if ann is ValueRef:
        return rng.choice(refs) if refs else None
    if origin is typing.Literal:
        v = rng.choice(args)
        return f'"{v}"' if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        options = [a for a in args if a is not type(None)]
        return _value(rng, rng.choice(options), refs) if options else None
    if origin is list:
        inner = args[0] if args else int
        return "[" + ", ".join(filter(None, (_value(rng, inner, refs) for _ in range(rng.randint(1, 3))))) + "]"
    if ann is bool:
        return rng.choice(["true", "false"])
    if ann is int:
        return rng.choice(["1", "2", "3", "4", "2", "3", "0", "-1", "8", "64", "100000"])
    if ann is float:
        return rng.choice(["0.5", "1.0", "0.1", "2.0", "0.0", "-1.0", "1e30"])
    if ann is str:
        return rng.choice(['"x"', '"mean"', '"edges"'])
    return rng.choice(["1", "0.5", "true", '"x"'])


def _component(rng: random.Random, slot: str, refs: list[str]) -> str:
    families = SLOT_FAMILIES.get(slot, (slot,))
    family = rng.choice(families)
    entry = REGISTRY[family][rng.choice(sorted(REGISTRY[family]))]
    kwargs = []
    for key, f in entry.schema.model_fields.items():
        if f.is_required() or rng.random() < 0.25:
            v = _value(rng, f.annotation, refs)
            if v is not None:
                kwargs.append(f"{key} = {v}")
    return f"{entry.name}({', '.join(kwargs)})" if kwargs or rng.random() < 0.5 else entry.name


_INPUTS = [
    ("vector", "vector[B, {f}]"), ("sequence", "sequence[B, T, {f}]"), ("sequence", "sequence[B, {n}, {f}]"),
    ("nodes", "nodes[N, {f}]"), ("image", "image[B, {c}, {h}, {h}]"), ("signal", "signal[B, {c}, {h}]"),
    ("set", "set[B, {n}, {f}]"), ("volume", "volume[B, {c}, 4, 4, 4]"),
]


def generate(rng: random.Random) -> str:
    """A grammar-shaped, mostly valid spec built from registry entries."""
    kind, typ = rng.choice(_INPUTS)
    typ = typ.format(f=rng.choice([1, 3, 4, 8]), n=rng.choice([2, 3, 5]), c=rng.choice([1, 2, 3]),
                     h=rng.choice([4, 6, 8]))
    lines = [f"  input x: {typ}"]
    refs = []
    if kind == "nodes" or rng.random() < 0.1:
        lines.append("  input edges: edges[2, E]")
        refs.append("edges")
        if rng.random() < 0.5:  # heads of one layer may name different edge lists
            lines.append("  input edges2: edges[2, F]")
            refs.append("edges2")
    if rng.random() < 0.1:
        lines.append("  input mask: block_mask[T, T]")
        refs.append("mask")
    values = ["x"]
    blocks = []
    for i in range(rng.randint(1, 4)):
        src = rng.choice(values)
        name = f"v{i}"
        r = rng.random()
        if r < 0.55:
            settings = []
            for slot in ("kappa", "psi", "xi_attribute", "xi_instance", "xi_attribute_post", "xi_instance_prior",
                         "pi", "fusion", "channel_fusion"):
                if rng.random() < (0.3 if slot in ("kappa", "psi") else 0.12):
                    settings.append(f"{slot} = {_component(rng, slot, refs)}")
            if rng.random() < 0.8:
                settings.append(f"out = {rng.choice([1, 2, 4, 8])}")
            for key, vals in (("channels", [1, 2, 3]), ("heads", [1, 2, 4]), ("groups", [1, 2]),
                              ("bias", ["true", "false", '"untied"'])):
                if rng.random() < 0.08:
                    settings.append(f"{key} = {rng.choice(vals)}")
            for key in ("pre", "post"):
                if rng.random() < 0.2:
                    settings.append(f"{key} = [{_component(rng, key, refs)}]")
            kw = rng.choice(["head", "head", "compress"])
            lines.append(f"  {name} = {kw}({src}) {{\n    " + "\n    ".join(settings) + "\n  }")
        elif r < 0.7:
            heads = []
            for h in range(rng.randint(1, 3)):
                hs = [f"out = {rng.choice([2, 4])}"]
                if rng.random() < 0.5:
                    slot = rng.choice(["xi_instance", "kappa", "psi"])
                    hs.append(f"{slot} = {_component(rng, slot, refs)}")
                heads.append(f"    head h{h} {{ " + " ".join(hs) + " }")
            tail = f"    fusion = {_component(rng, 'fusion', refs)}" if rng.random() < 0.5 else ""
            lines.append(f"  {name} = layer({src}) {{\n" + "\n".join(heads) + f"\n{tail}\n  }}")
        elif r < 0.88:
            op = rng.choice(sorted(REGISTRY["op"]) + sorted(REGISTRY["processing"]))
            args = [src] + ([rng.choice(values)] if op in ("add", "mul", "sub", "concat") else [])  # add(x, x) too
            lines.append(f"  {name} = {op}({', '.join(args)})")
        else:
            bname = f"blk{i}"
            blocks.append(f"block {bname}(w = {rng.choice([2, 4])}) {{\n  input z\n  y = head(z) {{ out = w "
                          f"post = [{_component(rng, 'post', refs)}] }}\n  return y\n}}\n")
            count = rng.choice(["1", "2", "3", "100000000"])
            call = f"repeat({count}) {bname}({src})" if rng.random() < 0.5 else f"{bname}({src}, w = 4)"
            lines.append(f"  {name} = {call}")
        values.append(name)
    lines.append(f"  return {values[-1]}")
    return "".join(blocks) + "model fuzz {\n" + "\n".join(lines) + "\n}\n"


_EXTRA_SETTINGS = ["channels = 2", "heads = 2", "post = [relu]", "post = [layer_norm]", 'bias = "untied"',
                   "bias = false", "pi = linear", "pi = identity", "pre = [tanh]", "channel_fusion = sum",
                   "fusion = concat", "groups = 2", "channels = 3", "heads = 3"]


def vary(rng: random.Random, text: str) -> str:
    """A valid-leaning variant of a working spec: small integers changed, head settings added (a grammar-level
    edit that keeps the statement structure)."""
    def number(m):
        return rng.choice(["1", "2", "3", "4", "5", "8"]) if rng.random() < 0.3 else m.group()

    lines = []
    for line in text.split("\n"):
        if not line.lstrip().startswith("#"):
            line = re.sub(r"(?<![\w.])[0-9]+(?![\w.])", number, line)
        lines.append(line)
        if re.match(r"\s*out = ", line) and rng.random() < 0.5:
            lines.append("    " + rng.choice(_EXTRA_SETTINGS))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------- mutate
def mutate(rng: random.Random, text: str) -> str:
    """One to three token or line mutations of ``text``."""
    for _ in range(rng.randint(1, 3)):
        op = rng.choice(["del_tok", "dup_tok", "swap_tok", "del_line", "dup_line", "swap_line", "number",
                         "number", "rename", "nest", "insert"])
        if op.endswith("line"):
            lines = text.split("\n")
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            if op == "del_line":
                del lines[i]
            elif op == "dup_line":
                lines.insert(i, lines[i])
            else:
                lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
            continue
        toks = [m for m in TOKEN.finditer(text) if not m.group().startswith("#")]
        if not toks:
            return text
        if op == "number":
            nums = [m for m in toks if m.group()[0].isdigit()] or toks
            m = rng.choice(nums)
            text = text[:m.start()] + rng.choice(INTS) + text[m.end():]
        elif op == "rename":
            idents = sorted({m.group() for m in toks if m.group()[0].isalpha() or m.group()[0] == "_"})
            old = rng.choice(idents)
            new = rng.choice(["x", "y", "head", "relu", "zz", "model", "B", "edges", "none", "heads", old + "2"])
            text = re.sub(rf"\b{re.escape(old)}\b", new, text, count=rng.randint(0, 3))
        elif op == "nest":
            m = rng.choice(toks)
            k = rng.choice([3, 50, 150, 2000])
            wrap = rng.choice([("(", ")"), ("[", "]"), ("-", ""), ("1 + ", "")])
            text = text[:m.start()] + wrap[0] * k + m.group() + wrap[1] * k + text[m.end():]
        elif op == "insert":
            m = rng.choice(toks)
            piece = rng.choice(["heads = 100000", "channels = 1000000", "out = 1000000000", "repeat(1000000)",
                                'import "/dev/zero" as z', 'import "../../x.rpn" as z', "layer", "{", "}", ",",
                                "=", "edges", "x", "head h { out = 2 }"])
            text = text[:m.start()] + piece + " " + text[m.start():]
        else:
            i, j = sorted((rng.randrange(len(toks)), rng.randrange(len(toks))))
            a, b = toks[i], toks[j]
            if op == "del_tok":
                text = text[:a.start()] + text[a.end():]
            elif op == "dup_tok":
                text = text[:a.end()] + " " + a.group() + text[a.end():]
            elif i != j:
                text = text[:a.start()] + b.group() + text[a.end():b.start()] + a.group() + text[b.end():]
    return text


def mutate_bytes(rng: random.Random, text: str) -> bytes:
    """Byte-level damage: flips, invalid UTF-8, NUL bytes, truncation."""
    data = bytearray(text.encode("utf-8"))
    for _ in range(rng.randint(1, 4)):
        if not data:
            break
        i = rng.randrange(len(data))
        op = rng.randrange(5)
        if op == 0:
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[i:i] = rng.choice([b"\xff", b"\xe9", b"\xc3", b"\x00", b"\xed\xa0\x80", b"\xef\xbb\xbf"])
        elif op == 2:
            del data[i:]
        elif op == 3:
            data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
        else:
            data[i] = rng.choice(b"{}()[]=,.#\"\\\n\t ")
    return bytes(data)


def make_input(seed: int, seeds: list[tuple[str, str]]) -> tuple[str, str | bytes]:
    """(origin, input) number ``seed``: generated (free or a variant of a seed) 40%, token-mutated 40%,
    byte-damaged 20%."""
    rng = random.Random(seed)
    which = seed % 5
    if which == 0:
        return "generated", generate(rng)
    name, text = seeds[rng.randrange(len(seeds))]
    if which == 1:
        return f"varied:{name}", vary(rng, text)
    if which in (2, 3):
        return f"mutated:{name}", mutate(rng, text)
    return f"bytes:{name}", mutate_bytes(rng, text)


# ------------------------------------------------------------------------------------------------------- run
@dataclass
class Outcome:
    """What one input ended in: ``ok`` (checked, compiled, ran), ``error`` (a located SpecError) or a failure."""

    status: str  # ok | error | failure
    detail: str = ""  # the first error code, or the failure kind
    trace: str = ""


def _site(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "rpn2c" in f.filename]
    f = frames[-1] if frames else traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__} at {Path(f.filename).name}:{f.lineno} ({f.name})"


def _on_alarm(signum, frame):
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


def random_inputs(graph, gen) -> list:
    """One small tensor per model input, of its declared type (symbols from DIMS; a mask's symbols take the
    first item count, edge indices stay in range)."""
    import torch

    from rpn2c.components.sequence import random_tokens

    dims, low, items = _dims(graph)
    out = []
    for nid in graph.inputs:
        t = graph.node(nid).type
        shape = t.shape if t.batched else t.shape[1:]
        if t.time_major:
            shape = (shape[1], shape[0], *shape[2:])
        symbol = items if t.kind == "mask" and items is not None else None
        shape = [(symbol or dims.get(d, 3)) if isinstance(d, str) else d for d in shape]
        if t.kind == "edges":
            out.append(torch.randint(0, low, shape, generator=gen))
        elif t.kind == "tokens":
            out.append(random_tokens(graph, nid, shape, gen))
        elif t.kind == "mask":
            out.append(torch.rand(shape, generator=gen) > 0.5 if t.mask_mode != "add" else torch.zeros(shape))
        elif t.kind == "edge_weight":
            out.append(torch.rand(shape, generator=gen) + 0.1)
        else:
            out.append(torch.randn(shape, generator=gen))
    return out


def run_one(source: str | bytes, time_limit: float = 10.0, limits: Limits = FUZZ_LIMITS,
            file: str = "fuzz.rpn") -> Outcome:
    """Check, compile and run ``source``; classify what happened (see the module docstring)."""
    import torch

    stage = "check"
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, time_limit)
    try:
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
        inputs = random_inputs(graph, torch.Generator().manual_seed(0))
        if sum(t.numel() for t in inputs) > MAX_FORWARD_ELEMENTS:
            return Outcome("ok", "compiled; inputs too large for a small forward pass")
        if not all(graph.node(i).type.batched for i in graph.inputs):
            model.eval()  # one graph is one sample: batch statistics need more than one
        with torch.no_grad():
            model(*inputs)
        return Outcome("ok")
    except Timeout:
        return Outcome("failure", f"timeout in {stage}")
    except MemoryError:
        return Outcome("failure", f"{stage}: MemoryError")
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - classifying every crash is the point
        return Outcome("failure", f"{stage}: {_site(exc)}", traceback.format_exc(limit=-8))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


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
        report.add(seed, origin, run_one(source, time_limit))
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
