"""Peak memory of one side of one workload, in a fresh process: ``python -m benchmarks.memory WORKLOAD SIDE``.

SIDE is ``spec`` (the compiled rpn2c module) or ``hand`` (the hand-written one). This launcher re-runs itself with
``--child`` in a subprocess that builds the workload, keeps only SIDE, records its post-build baseline, then runs a
few training steps (with the workload's loss and optimizer). On CPU the peak is the child's ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``, read
here after it exits (a fresh launcher per measurement, so no other child shares the maximum); on CUDA it is
``torch.cuda.max_memory_allocated`` inside the child. Prints one JSON line: peak, baseline and delta bytes.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__.splitlines()[0])
    ap.add_argument("workload")
    ap.add_argument("side", choices=["spec", "hand"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-autocast", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--size", action="append")
    ap.add_argument("--steps", type=int, default=3, help="forward+backward steps measured")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return ap


def _maxrss_bytes(who: int) -> int:
    kb = resource.getrusage(who).ru_maxrss
    return kb if sys.platform == "darwin" else kb * 1024  # bytes on macOS, KiB on Linux


def child(args) -> dict:
    """Build, keep one side, run ``steps`` forward+backward steps; the baseline (and CUDA peak) in bytes."""
    import torch

    from benchmarks import harness
    from benchmarks import workloads as W

    torch.set_num_threads(args.threads)
    w = W.WORKLOADS[args.workload]
    pair = w.build(W.sizes_for(w, args.quick, harness.parse_sizes(args.size)))
    module = pair.spec if args.side == "spec" else pair.hand
    pair.spec = pair.hand = None
    loss, optimizer = pair.loss, pair.optimizer
    module, _, ins = harness._prepare(W.Pair(module, module, pair.inputs, pair.title), args.device,
                                      harness.DTYPES[args.dtype])
    if args.compile:
        module = torch.compile(module, backend=args.backend)
    module.train()
    del pair
    gc.collect()
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _maxrss_bytes(resource.RUSAGE_SELF)
    _, fwd_bwd = harness.step_fns(module, ins, harness.amp_dtype(w, args), args.device, loss, optimizer)
    for _ in range(args.steps):
        fwd_bwd()
    out = {"baseline_bytes": base}
    if cuda:
        torch.cuda.synchronize()
        out["peak_bytes"] = torch.cuda.max_memory_allocated()
    return out


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.child:
        sys.stdout.write(json.dumps(child(args)) + "\n")
        return 0
    cmd = [sys.executable, "-m", "benchmarks.memory", *(argv if argv is not None else sys.argv[1:]), "--child"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stderr)
        return res.returncode
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if "peak_bytes" not in out:
        out["peak_bytes"] = _maxrss_bytes(resource.RUSAGE_CHILDREN)
    out["delta_bytes"] = out["peak_bytes"] - out["baseline_bytes"]
    out.update(workload=args.workload, side=args.side, device=args.device)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
