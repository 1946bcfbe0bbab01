"""Device kernels launched per training step, rpn2c against the hand-written module (deterministic, not timed).

``python -m benchmarks.kernels --device cuda [--compile] [--workload NAME ...]`` builds each workload's pair
(:mod:`benchmarks.workloads`), runs warm-up steps, then profiles one training step (forward, ``.float().square()
.mean()`` loss, backward) of each side with ``torch.profiler`` and counts the events the device ran: kernels,
memcpys and memsets. On CUDA this is the launch count a step pays; on a CPU (a smoke run) it counts the profiler's
top-level operator events instead, which for a compiled module are its generated kernels' calls.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks import harness as H
from benchmarks import workloads as W

DEFAULT = ("transformer", "causal-attn", "lstm", "lenet", "gcn-20k")


def _device_events(prof, device: str) -> Counter:
    """Names of the kernels (CUDA) or top-level operators (CPU) the profiled step ran, with their counts."""
    names: Counter = Counter()
    for evt in prof.events():
        if device.startswith("cuda"):
            if evt.device_type == torch.autograd.DeviceType.CUDA:
                names[evt.name] += 1
        elif evt.cpu_parent is None and evt.device_type == torch.autograd.DeviceType.CPU:
            names[evt.name] += 1
    return names


def count_step(module, inputs, device: str, amp=None, warmup: int = 3) -> Counter:
    """Kernels of one training step of ``module`` on ``inputs`` after ``warmup`` untimed steps."""
    _, step = H.step_fns(module, inputs, amp, device)
    module.train()
    for _ in range(warmup):
        step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities) as prof:
        step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    return _device_events(prof, device)


def count_workload(w: W.Workload, sizes: dict, args) -> dict:
    """The row of workload ``w``: kernels per training step of each side, and their ratio."""
    pair = w.build(sizes)
    amp = H.amp_dtype(w, args)
    spec, hand, ins = H._prepare(pair, args.device, H.DTYPES[args.dtype])
    row = {"workload": w.name, "title": pair.title, "mode": "compile" if args.compile else "eager"}
    for side, module in (("rpn2c", spec), ("hand", hand)):
        if args.compile:
            torch._dynamo.reset()
            module = torch.compile(module)
        names = count_step(module, ins, args.device, amp)
        row[side] = sum(names.values())
        row[f"{side}_top"] = names.most_common(args.top)
    row["ratio"] = row["rpn2c"] / row["hand"] if row["hand"] else None
    return row


def markdown(rows: list[dict], device: str) -> str:
    unit = "CUDA kernels" if device.startswith("cuda") else "top-level CPU operators"
    out = [f"| workload | mode | rpn2c | hand-written | rpn2c / hand | ({unit} per training step)",
           "|---|---|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['workload']} | {r.get('mode', '')} | error: {r['error']} | | |")
            continue
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else ""
        out.append(f"| {r['title']} | {r['mode']} | {r['rpn2c']} | {r['hand']} | {ratio} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.kernels", description=__doc__.splitlines()[0])
    p.add_argument("--workload", action="append", help="repeatable or comma-separated (default: %(default)s)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=sorted(H.DTYPES))
    p.add_argument("--compile", action="store_true", help="torch.compile both sides (default backend)")
    p.add_argument("--quick", action="store_true", help="the workloads' tiny sizes")
    p.add_argument("--size", action="append", metavar="KEY=VALUE")
    p.add_argument("--top", type=int, default=8, help="most frequent kernels listed per side in --json")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    args.no_autocast, args.profile, args.peak_tflops = False, "kernels", None
    names = [n for item in (args.workload or DEFAULT) for n in item.split(",") if n]
    unknown = [n for n in names if n not in W.WORKLOADS]
    if unknown:
        p.error(f"unknown workload(s) {unknown}; see python -m benchmarks --list")
    rows = []
    for name in names:
        w = W.WORKLOADS[name]
        try:
            rows.append(count_workload(w, W.sizes_for(w, args.quick, H.parse_sizes(args.size)), args))
        except Exception as exc:  # one failing workload leaves the others' rows
            rows.append({"workload": name, "mode": "compile" if args.compile else "eager", "error": H._short(exc)})
    print(markdown(rows, args.device))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"machine": H.machine(args), "rows": rows}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
