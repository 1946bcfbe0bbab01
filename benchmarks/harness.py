"""Paired ABBA timing of compiled specs against hand-written modules, peak memory, reports.

Method: both modules live in one process; each *round* runs A B B A (A = rpn2c, B = hand-written), every slot
calling the function ``number`` times; the round's ratio is (A1 + A2) / (B1 + B2), which cancels any drift that
is linear over the round. The result is the median of the per-round ratios and their 25–75% range.

Throughput: the FLOPs of one training step (forward + backward) of the hand-written module are counted once per
workload with ``torch.utils.flop_counter.FlopCounterMode``; each side's TFLOP/s is that count over its median
step time, and its share of the device's dense bf16 peak is given where the peak is known (:data:`PEAK_BF16_TFLOPS`
or ``--peak-tflops``). A workload may give its FLOPs by formula instead (the language model: ``6·N·tokens`` plus
attention, :mod:`benchmarks.lm`) and its tokens per step (a tokens/s figure).

Peak memory: on a CPU each side in its own process (``benchmarks.memory``, maximum RSS); on CUDA in this process
after the timing, each side's ``max_memory_allocated`` over a few training steps plus what it holds between steps
(:func:`cuda_step_memory`), which needs no second build or compile.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Callable

import torch

from benchmarks import workloads as W

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}

# Dense (no structured sparsity) bf16 Tensor Core peaks in TFLOP/s, from NVIDIA's H100 / H200 / A100 datasheets, which
# quote them with sparsity (halved here); matched in order against torch.cuda.get_device_name() (e.g. "NVIDIA H100
# 80GB HBM3" is the SXM part). Boost clocks are assumed: a card held at lower clocks reaches less.
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H200", 989.0), ("H100", 989.0), ("A100", 312.0))


# ------------------------------------------------------------------------------------------------ timing core
def quantile(xs: list[float], q: float) -> float:
    """Linear-interpolated quantile of ``xs`` (q in [0, 1])."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _slot(fn: Callable, number: int, timer: Callable[[], float], sync: Callable | None) -> float:
    t0 = timer()
    for _ in range(number):
        fn()
    if sync is not None:
        sync()
    return timer() - t0


def abba(fn_a: Callable, fn_b: Callable, rounds: int, number: int = 1, timer: Callable[[], float] = time.perf_counter,
         sync: Callable | None = None) -> list[tuple[float, float]]:
    """``rounds`` rounds of A B B A; per round the mean seconds per call of A and of B."""
    out = []
    for _ in range(rounds):
        a1 = _slot(fn_a, number, timer, sync)
        b1 = _slot(fn_b, number, timer, sync)
        b2 = _slot(fn_b, number, timer, sync)
        a2 = _slot(fn_a, number, timer, sync)
        out.append(((a1 + a2) / (2 * number), (b1 + b2) / (2 * number)))
    return out


def summarize(pairs: list[tuple[float, float]]) -> dict:
    """Paired-median ratio A/B, its 25–75% range over rounds, and the median ms of each side."""
    ratios = [a / b for a, b in pairs]
    return {"ratio": statistics.median(ratios), "q25": quantile(ratios, 0.25), "q75": quantile(ratios, 0.75),
            "spec_ms": statistics.median(a for a, _ in pairs) * 1e3,
            "hand_ms": statistics.median(b for _, b in pairs) * 1e3, "rounds": len(pairs)}


def calibrate(fn: Callable, min_time: float, timer: Callable[[], float] = time.perf_counter,
              sync: Callable | None = None, limit: int = 10_000) -> int:
    """Calls per slot so that one slot takes at least ``min_time`` seconds (doubling from 1)."""
    number = 1
    while number < limit:
        if _slot(fn, number, timer, sync) >= min_time:
            break
        number *= 2
    return number


def compare(fn_a: Callable, fn_b: Callable, *, rounds: int, min_time: float, warmup: int,
            sync: Callable | None = None) -> dict:
    """Warm up both, calibrate on the slower one, then :func:`abba` and :func:`summarize`. ``first_s``: the
    seconds of each one's first call (a compiled module's compile and first step)."""
    first = []
    for fn in (fn_a, fn_b):
        t0 = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        first.append(time.perf_counter() - t0)
    for _ in range(max(warmup - 1, 0)):
        fn_a()
        fn_b()
    number = max(calibrate(fn_a, min_time, sync=sync), calibrate(fn_b, min_time, sync=sync))
    out = summarize(abba(fn_a, fn_b, rounds, number, sync=sync))
    out["number"], out["first_s"] = number, first
    return out


# ------------------------------------------------------------------------------------------------ one workload
def _prepare(pair: W.Pair, device: str, dtype: torch.dtype):
    spec = pair.spec.to(device=device, dtype=dtype)
    hand = pair.hand.to(device=device, dtype=dtype)
    ins = tuple(i.to(device=device, dtype=dtype) if i.is_floating_point() else i.to(device)
                for i in pair.inputs(False))
    return spec, hand, ins


def step_fns(module, inputs, amp: torch.dtype | None = None, device: str = "cpu", loss: Callable | None = None,
             optimizer: bool = False):
    """(forward without grad, training step) closures for ``module`` on ``inputs``; with ``amp`` the forward
    runs under ``torch.autocast(device, amp)`` (the loss and the backward outside it, as in mixed-precision
    training). The training step is forward, ``loss(output, inputs)`` (default: the mean of the output's squares)
    and backward, with ``optimizer`` also an AdamW step (``fused=True`` on CUDA)."""
    params = [p for p in module.parameters() if p.requires_grad]
    opt = None
    if optimizer:
        opt = torch.optim.AdamW(params, lr=1e-4, **({"fused": True} if device.startswith("cuda") else {}))

    def cast():
        return torch.autocast(device.split(":")[0], amp) if amp is not None else contextlib.nullcontext()

    def fwd():
        with torch.no_grad(), cast():
            module(*inputs)

    def fwd_bwd():
        with cast():
            out = module(*inputs)
        (out.float().square().mean() if loss is None else loss(out, inputs)).backward()
        if opt is not None:
            opt.step()
        for p in params:
            p.grad = None

    fwd_bwd.optimizer = opt
    return fwd, fwd_bwd


def cuda_step_memory(module, step: Callable, steps: int = 3) -> dict:
    """Peak CUDA memory of training ``module`` by ``step`` (from :func:`step_fns`), measured in this process.

    ``delta_bytes``: ``torch.cuda.max_memory_allocated`` over ``steps`` steps above what was allocated before
    them (gradients, activations, temporaries); ``peak_bytes``: that plus the bytes the module holds between steps
    (its parameters, buffers and optimizer state), what the side alone would peak at in its own process."""
    held = sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])
    opt = getattr(step, "optimizer", None)
    if opt is not None:
        held += sum(t.numel() * t.element_size() for st in opt.state.values() for t in st.values()
                    if isinstance(t, torch.Tensor))
    gc.collect()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    delta = torch.cuda.max_memory_allocated() - base
    return {"baseline_bytes": held, "delta_bytes": delta, "peak_bytes": held + delta}


def memory_ratios(spec: dict, hand: dict) -> dict:
    """Both sides' measurements with the ratio of their increases and of their peaks."""
    return {"spec": spec, "hand": hand, "peak_ratio": spec["peak_bytes"] / hand["peak_bytes"],
            "ratio": spec["delta_bytes"] / hand["delta_bytes"] if hand["delta_bytes"] > 0 else float("nan")}


def amp_dtype(w: W.Workload, args) -> torch.dtype | None:
    """The autocast dtype of workload ``w`` in this run (None: no autocast)."""
    return torch.bfloat16 if w.autocast and not getattr(args, "no_autocast", False) else None


def sdpa_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of a fused attention forward: the scores and their weighted sum, ``2·b·h·s_q·s_k·(d + d_v)``, ``h``
    the query's heads, over which grouped-query keys and values (fewer heads) are broadcast; causal masking not
    halved (torch's own count, which before torch 2.13 refuses grouped-query shapes)."""
    b, h, s_q, d = query_shape
    return 2 * b * h * s_q * key_shape[-2] * (d + value_shape[-1])


def sdpa_backward_flops(grad_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of a fused attention backward, torch's count with the query's heads: the scores recomputed and the
    gradients of the scores, of v, of q and of k, ``2·b·h·s_q·s_k·(3·d + 2·d_v)``."""
    b, h, s_q, d = query_shape
    return 2 * b * h * s_q * key_shape[-2] * (3 * d + 2 * value_shape[-1])


# torch's fused attention kernels (CUDA's flash, memory-efficient and cuDNN ones; the CPU's flash kernel, which torch
# does not count at all): q, k, v (backward: the output's gradient first) lead their arguments
SDPA_FLOPS = {getattr(torch.ops.aten, name): fn for names, fn in (
    (("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
      "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu"), sdpa_flops),
    (("_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention_backward",
      "_scaled_dot_product_cudnn_attention_backward", "_scaled_dot_product_flash_attention_for_cpu_backward"),
     sdpa_backward_flops)) for name in names if hasattr(torch.ops.aten, name)}


def count_flops(module, inputs, device: str = "cpu", amp: torch.dtype | None = None) -> int:
    """FLOPs of one forward + backward step of ``module`` (``FlopCounterMode``; matrix products and convolutions).

    Counted on a copy on the meta device, where nothing is computed and recurrent layers and attention run as
    their decomposed matrix products (fused cuDNN / oneDNN RNN kernels have no FLOP formula); where the meta
    device cannot run the module (data-dependent shapes, e.g. PyG's graph normalisation), one real step on
    ``device`` is counted. Fused attention kernels count by :func:`sdpa_flops` (grouped-query shapes included).
    """
    from torch.utils.flop_counter import FlopCounterMode

    def counted(m, ins, amp, dev):
        counter = FlopCounterMode(display=False, custom_mapping=SDPA_FLOPS)
        with counter:
            step_fns(m, ins, amp, dev)[1]()
        return counter.get_total_flops()

    try:
        meta = copy.deepcopy(module).to("meta")
        ins = tuple(i.detach().to("meta").requires_grad_(i.requires_grad) if i.is_floating_point() else i.to("meta")
                    for i in inputs)
        return counted(meta.train(module.training), ins, None, "cpu")
    except Exception:
        return counted(module, inputs, amp, device)


def throughput(row: dict, peak_tflops: float | None) -> None:
    """Add ``tflops`` (each side's FLOPs over its median training-step time) and, with a peak, ``peak_pct``."""
    fb = row.get("fwd_bwd")
    if not row.get("flops") or not isinstance(fb, dict) or "error" in fb:
        return
    row["tflops"] = {side: row["flops"] / (fb[f"{side}_ms"] * 1e-3) / 1e12 for side in ("spec", "hand")}
    if row.get("tokens"):
        row["tokens_per_s"] = {side: row["tokens"] / (fb[f"{side}_ms"] * 1e-3) for side in ("spec", "hand")}
    if peak_tflops:
        row["peak_pct"] = {side: 100 * t / peak_tflops for side, t in row["tflops"].items()}


def peak_for(device_name: str) -> float | None:
    """The dense bf16 peak (TFLOP/s) of a GPU by its name, from :data:`PEAK_BF16_TFLOPS`; None if unknown."""
    return next((peak for key, peak in PEAK_BF16_TFLOPS if key.lower() in device_name.lower()), None)


def peak_tflops(args) -> float | None:
    """``--peak-tflops``, else the dense bf16 peak of the CUDA device by name, else None (CPU, unknown GPU)."""
    if args.peak_tflops:
        return args.peak_tflops
    if not args.device.startswith("cuda"):
        return None
    return peak_for(torch.cuda.get_device_name(torch.device(args.device)))


def time_workload(w: W.Workload, sizes: dict, args) -> dict:
    """Build, check equality in float64, then time forward and forward+backward (ABBA)."""
    pair = w.build(sizes)
    err = None if args.no_check else W.check_equal(pair, w.tol)
    dtype, device, amp = DTYPES[args.dtype], args.device, amp_dtype(w, args)
    spec, hand, ins = _prepare(pair, device, dtype)
    row = {"workload": w.name, "title": pair.title, "check_max_abs_err": err, "note": pair.note,
           "mode": (f"compile ({args.backend})" if args.compile else "eager") + (" + autocast bf16" if amp else ""),
           "tokens": pair.tokens}
    hand.train()
    try:
        row["flops"] = pair.flops or count_flops(hand, ins, device, amp)
    except Exception as exc:  # the timings stand without it
        row["flops"], row["flops_error"] = None, _short(exc)
    if args.compile:
        # every compiled spec shares CompiledModel.forward's code object: without a reset, the recompiles of
        # earlier workloads use up dynamo's recompile limit and later specs silently run eagerly
        torch._dynamo.reset()
        spec = torch.compile(spec, backend=args.backend)
        hand = torch.compile(hand, backend=args.backend)
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    sf, sfb = step_fns(spec, ins, amp, device, pair.loss, pair.optimizer)
    hf, hfb = step_fns(hand, ins, amp, device, pair.loss, pair.optimizer)
    kw = {"rounds": args.rounds, "min_time": args.min_time, "warmup": args.warmup, "sync": sync}
    steps = (("fwd", sf, hf, False),) * (not args.train_only) + (("fwd_bwd", sfb, hfb, True),)
    for key, fa, fb, train in steps:
        spec.train(train), hand.train(train)
        try:
            row[key] = compare(fa, fb, **kw)
        except Exception as exc:  # e.g. one side fails under torch.compile: keep the other column
            row[key] = {"error": _short(exc)}
    if device.startswith("cuda") and not args.no_memory:  # in this process: no second build or compile
        try:
            spec.train(), hand.train()
            row["memory"] = memory_ratios(cuda_step_memory(spec, sfb), cuda_step_memory(hand, hfb))
            row["memory"]["how"] = "in-process"
        except Exception as exc:
            row["memory"] = {"error": _short(exc)}
    return row


def _short(exc: BaseException) -> str:
    return (f"{type(exc).__name__}: {exc}".splitlines() or [""])[0][:300]


def build_workload(w: W.Workload, sizes: dict) -> dict:
    """Milliseconds (median of ``repeats``) for ``rpn2c.check`` and ``rpn2c.compile`` of the workload's spec."""
    import rpn2c

    text = w.build(sizes)
    times = {"check": [], "compile": []}
    for _ in range(sizes["repeats"]):
        for name, fn in (("check", rpn2c.check), ("compile", rpn2c.compile)):
            t0 = time.perf_counter()
            fn(text)
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {"workload": w.name, "title": f"build of a {sizes['layers']}-layer spec", "mode": "-",
            "check_ms": statistics.median(times["check"]), "compile_ms": statistics.median(times["compile"]),
            "check_ms_all": times["check"], "compile_ms_all": times["compile"], "note": ""}


# ------------------------------------------------------------------------------------------------ memory
def memory_args(w: W.Workload, side: str, args) -> list[str]:
    """The command line of one peak-memory measurement (``python -m benchmarks.memory WORKLOAD SIDE ...``)."""
    cmd = [sys.executable, "-m", "benchmarks.memory", w.name, side, "--device", args.device, "--dtype", args.dtype,
           "--threads", str(args.threads)]
    if args.quick:
        cmd.append("--quick")
    if args.no_autocast:
        cmd.append("--no-autocast")
    if args.compile:
        cmd += ["--compile", "--backend", args.backend]
    for s in args.size or []:
        cmd += ["--size", s]
    return cmd


def measure_memory(w: W.Workload, args) -> dict:
    """Peak memory of the spec and the hand-written side, each in its own process; ratio of the increases
    above the post-build baseline (also the ratio of raw peaks)."""
    out = {}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for side in ("spec", "hand"):
        res = subprocess.run(memory_args(w, side, args), capture_output=True, text=True, cwd=root)
        if res.returncode != 0:
            return {"error": (res.stderr.strip().splitlines() or ["failed"])[-1]}
        out[side] = json.loads(res.stdout.strip().splitlines()[-1])
    return memory_ratios(out["spec"], out["hand"])


# ------------------------------------------------------------------------------------------------ driver
def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (None where unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def parse_sizes(items: list[str] | None) -> dict:
    """``["batch=4", "T=32"]`` -> ``{"batch": 4, "T": 32}``."""
    out = {}
    for item in items or []:
        k, _, v = item.partition("=")
        if not _ or not k:
            raise argparse.ArgumentTypeError(f"--size wants KEY=VALUE, got {item!r}")
        out[k] = int(v)
    return out


def selected(args) -> list[W.Workload]:
    """``--workload`` names, else the workloads of ``--profile`` (the CPU profile's ``--quick`` run leaves out
    those not ``in_quick``; the GPU profile's runs all of its workloads at their quick sizes)."""
    names = [n for item in (args.workload or []) for n in item.split(",") if n]
    if not names:
        return [w for w in W.WORKLOADS.values() if args.profile in w.profiles
                and (w.in_quick or not args.quick or args.profile != "cpu")]
    unknown = [n for n in names if n not in W.WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; known: {', '.join(W.WORKLOADS)}")
    return [W.WORKLOADS[n] for n in names]


def run(args, report: Callable[[dict], None] = lambda row: None) -> list[dict]:
    """Every selected workload: a row dict each (``report`` is called as each finishes), with the ``seconds`` it
    took in all."""
    torch.set_num_threads(args.threads)
    overrides = parse_sizes(args.size)
    peak = peak_tflops(args)
    rows = []
    for w in selected(args):
        sizes = W.sizes_for(w, args.quick, overrides)
        row = {"workload": w.name, "title": w.description, "mode": "-", "note": "", "sizes": sizes}
        t0 = time.perf_counter()
        try:
            if w.kind == "build":
                row.update(build_workload(w, sizes))
            else:
                need, have = (w.needs_bytes(sizes) if w.needs_bytes else 0), available_bytes()
                if args.device == "cpu" and have is not None and need > have:
                    row["skipped"] = f"needs about {need / 2**30:.1f} GiB, {have / 2**30:.1f} GiB available"
                else:
                    row.update(time_workload(w, sizes, args))
                    throughput(row, peak)
                    if not args.no_memory and "memory" not in row:
                        row["memory"] = measure_memory(w, args)
        except Exception as exc:  # one broken workload must not stop the others
            row["error"] = _short(exc)
        gc.collect()
        row["seconds"] = time.perf_counter() - t0  # build, check, compile, timing and memory: what a plan budgets
        rows.append(row)
        report(row)
    return rows


def machine(args) -> dict:
    m = {"python": platform.python_version(), "torch": torch.__version__, "device": args.device,
         "dtype": args.dtype, "threads": torch.get_num_threads(),
         "processor": platform.processor() or platform.machine(),
         "cpus": os.cpu_count(), "quick": bool(args.quick), "profile": args.profile,
         "peak_bf16_tflops": peak_tflops(args)}
    if args.device.startswith("cuda"):
        m["gpu"] = torch.cuda.get_device_name()
    try:
        m["load_avg"] = os.getloadavg()[0]
    except OSError:
        pass
    return m


def _r(x: dict | None) -> str:
    return "—" if not x else "error" if "error" in x else f"{x['ratio']:.2f}"


def _spread(x: dict | None) -> str:
    return "—" if not x or "error" in x else f"{x['q25']:.2f}–{x['q75']:.2f}"


def _ms(x: dict | None) -> str:
    return "—" if not x or "error" in x else f"{x['spec_ms']:.2f} / {x['hand_ms']:.2f}"


def _pair(x: dict | None, fmt: str) -> str:
    return "—" if not x else f"{x['spec']:{fmt}} / {x['hand']:{fmt}}"


def _gib(mem: dict) -> str:
    return f"{mem['spec']['peak_bytes'] / 2**30:.2f} / {mem['hand']['peak_bytes'] / 2**30:.2f} GiB"


def markdown(rows: list[dict]) -> str:
    """The results table (ratios are rpn2c / hand-written; lower is better) and the build-time table."""
    out = ["| workload | fwd ratio | fwd spread | fwd+bwd ratio | fwd+bwd spread | fwd+bwd ms (rpn2c / hand) "
           "| fwd+bwd TFLOP/s (rpn2c / hand) | % of bf16 peak (rpn2c / hand) | peak-memory ratio | mode |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    builds = []
    for r in rows:
        if "check_ms" in r:
            builds.append(r)
            continue
        if "error" in r or "skipped" in r:
            out.append(f"| {r['title']} | {'skipped: ' + r['skipped'] if 'skipped' in r else 'error: ' + r['error']} "
                       "| | | | | | | | |")
            continue
        mem = r.get("memory") or {}
        mem_s = f"{mem['ratio']:.2f}" if "ratio" in mem else ("error" if "error" in mem else "—")
        fb = r["fwd_bwd"]
        out.append(f"| {r['title']} | {_r(r.get('fwd'))} | {_spread(r.get('fwd'))} | {_r(fb)} | {_spread(fb)} "
                   f"| {_ms(fb)} | {_pair(r.get('tflops'), '.3g')} | {_pair(r.get('peak_pct'), '.1f')} | {mem_s} "
                   f"| {r['mode']} |")
    if builds:
        out += ["", "| build | rpn2c.check ms | rpn2c.compile ms |", "|---|---:|---:|"]
        for r in builds:
            if "error" in r:
                out.append(f"| {r['title']} | error: {r['error']} | |")
            else:
                out.append(f"| {r['title']} | {r['check_ms']:.1f} | {r['compile_ms']:.1f} |")
    notes = [f"- {r['workload']}: {r['note']}" for r in rows if r.get("note")]
    notes += [f"- {r['workload']} ({r['mode']}) {k}: {r[k]['error']}" for r in rows for k in ("fwd", "fwd_bwd")
              if isinstance(r.get(k), dict) and "error" in r[k]]
    notes += [f"- {r['workload']} memory: {r['memory']['error']}" for r in rows
              if isinstance(r.get("memory"), dict) and "error" in r["memory"]]
    notes += [f"- {r['workload']} FLOP count: {r['flops_error']}" for r in rows if r.get("flops_error")]
    notes += [f"- {r['workload']} ({r['mode']}): tokens/s {_pair(r['tokens_per_s'], ',.0f')} (rpn2c / hand)"
              + (f", peak memory {_gib(r['memory'])}" if "spec" in r.get("memory", {}) else "")
              for r in rows if r.get("tokens_per_s")]
    notes += [f"- {r['workload']} ({r['mode']}): first training step "
              + " / ".join(f"{s:.1f}" for s in r["fwd_bwd"]["first_s"]) + " s "
              "(rpn2c / hand; the compile included)" for r in rows
              if r.get("mode", "").startswith("compile") and "first_s" in (r.get("fwd_bwd") or {})]
    return "\n".join(out + ([""] + notes if notes else []))


def line(row: dict) -> str:
    """One plain-text progress line for ``row``."""
    if "error" in row:
        return f"{row['workload']}: error: {row['error']}"
    if "skipped" in row:
        return f"{row['workload']}: skipped: {row['skipped']}"
    if "check_ms" in row:
        return f"{row['workload']}: check {row['check_ms']:.1f} ms, compile {row['compile_ms']:.1f} ms"
    mem = row.get("memory")
    mem_s = "" if mem is None else f", memory {mem['ratio']:.2f}" if "ratio" in mem else ", memory error"
    tf = row.get("tflops")
    tf_s = "" if not tf else f", TFLOP/s {_pair(tf, '.3g')}" + (
        f" ({_pair(row['peak_pct'], '.1f')} % of peak)" if row.get("peak_pct") else "")
    tok = row.get("tokens_per_s")
    tf_s += f", tokens/s {_pair(tok, '.4g')}" if tok else ""
    return (f"{row['workload']}: fwd {_r(row.get('fwd'))} [{_spread(row.get('fwd'))}], fwd+bwd {_r(row['fwd_bwd'])} "
            f"[{_spread(row['fwd_bwd'])}]{tf_s}{mem_s} ({row['mode']})")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks",
                                 description="rpn2c specs against hand-written torch/PyG modules (paired ABBA ratios)")
    ap.add_argument("--workload", action="append", metavar="NAME",
                    help=f"repeatable or comma-separated; default those of --profile ({', '.join(W.WORKLOADS)})")
    ap.add_argument("--profile", default="cpu", choices=["cpu", "gpu"],
                    help="default workload set: cpu (default) or gpu (training sizes for a GPU; with --quick: tiny "
                         "sizes, a smoke run that also works on a CPU)")
    ap.add_argument("--peak-tflops", type=float, default=None, metavar="TFLOPS",
                    help="the device's peak for the %% column (default: dense bf16 peak by GPU name; none on CPU)")
    ap.add_argument("--no-autocast", action="store_true",
                    help="run the workloads marked bf16 autocast (GPU profile) without autocast")
    ap.add_argument("--compile", action="store_true", help="torch.compile both sides")
    ap.add_argument("--backend", default="inductor", help="torch.compile backend (with --compile)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--quick", action="store_true", help="much smaller sizes: a smoke run")
    ap.add_argument("--json", metavar="FILE", help="write machine info and every row as JSON")
    ap.add_argument("--markdown", action="store_true", help="print the markdown tables at the end")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--rounds", type=int, default=None, help="ABBA rounds per measurement (default 15; quick 4)")
    ap.add_argument("--min-time", type=float, default=None,
                    help="seconds per timed slot (default 0.05; quick 0.002)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls of each side first")
    ap.add_argument("--size", action="append", metavar="KEY=VALUE",
                    help="override a size key (batch, T, H, d, nodes, edges, ...) in every workload that has it")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    ap.add_argument("--train-only", action="store_true",
                    help="time the training step only (no forward-only comparison; under --compile: half the compiles)")
    ap.add_argument("--no-check", action="store_true",
                    help="skip the float64 equality check (a run that repeats one already checked, e.g. compiled)")
    ap.add_argument("--jsonl", metavar="FILE", help="append each row as one JSON line as soon as it is measured")
    ap.add_argument("--list", action="store_true", help="list the workloads and exit")
    return ap


def parse_args(argv=None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.rounds is None:
        args.rounds = 4 if args.quick else 15
    if args.min_time is None:
        args.min_time = 0.002 if args.quick else 0.05
    parse_sizes(args.size)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        for w in W.WORKLOADS.values():
            sys.stdout.write(f"{w.name:18s} [{','.join(w.profiles)}] {w.description}\n")
        return 0
    def report(row):
        sys.stdout.write(line(row) + "\n")
        sys.stdout.flush()
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(row, default=str) + "\n")

    rows = run(args, report=report)
    info = machine(args)
    if args.markdown:
        sys.stdout.write("\n" + markdown(rows) + "\n\n" + json.dumps(info) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "rows": rows}, f, indent=2, default=str)
    return 1 if any("error" in r for r in rows) else 0


__all__ = ["abba", "summarize", "calibrate", "compare", "quantile", "run", "markdown", "main", "parse_args",
           "build_parser", "count_flops", "throughput", "peak_for", "peak_tflops", "PEAK_BF16_TFLOPS"]
