"""Side-by-side speed of compiled specs and the hand-written PyTorch modules they equal.

For each shipped backbone spec (CNN, GRU classifier, GCN, Transformer encoder) this builds the hand-written torch
module, copies its weights into the compiled spec (so both compute the same function — checked before timing),
then times forward and forward+backward of: the hand-written module, the default lowering, the reference
lowering (literal matrices) and optionally ``torch.compile`` of the default lowering. All in one process,
interleaved, medians of ``torch.utils.benchmark`` blocked autorange; ratios are relative to the hand-written module.

    python benchmarks/bench_backbones.py                       # CPU, markdown table
    python benchmarks/bench_backbones.py --device cuda --compile --json out.json

Kept for the reference-lowering column and the figures recorded with it; the paired ABBA harness with the issue's
workloads, peak memory and ``torch.compile`` of both sides is ``python -m benchmarks`` (``benchmarks/harness.py``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils import benchmark

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import rpn2c  # noqa: E402


# ------------------------------------------------------------------------------------------------ hand-written
class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 16, 3, padding=1), nn.Conv2d(16, 32, 3, padding=1)
        self.h, self.y = nn.Linear(128, 64), nn.Linear(64, 10)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.c1(x)), 2)
        x = nn.functional.max_pool2d(torch.relu(self.c2(x)), 2)
        return self.y(torch.relu(self.h(x.flatten(1))))

    def weights(self):
        return {"c1.psi.weight": self.c1.weight.flatten(1), "c1.bias": self.c1.bias,
                "c2.psi.weight": self.c2.weight.flatten(1), "c2.bias": self.c2.bias,
                "h.psi.weight": self.h.weight, "h.bias": self.h.bias, "y.psi.weight": self.y.weight,
                "y.bias": self.y.bias}


class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.e, self.gru, self.y = nn.Linear(8, 32), nn.GRU(32, 32, 2, batch_first=True), nn.Linear(32, 4)

    def forward(self, x):
        return self.y(self.gru(self.e(x))[0].mean(1))

    def weights(self):
        return {"e.psi.weight": self.e.weight, "e.bias": self.e.bias, "y.psi.weight": self.y.weight,
                "y.bias": self.y.bias, **{f"r.{k}": v for k, v in self.gru.state_dict().items()}}


class GCN(nn.Module):
    """Two GCN layers with D^-1/2 (A+I) D^-1/2 by index_add_ (what torch_geometric's GCNConv computes)."""

    def __init__(self):
        super().__init__()
        self.h, self.y = nn.Linear(34, 16, bias=False), nn.Linear(16, 2, bias=False)
        self.bh, self.by = nn.Parameter(torch.zeros(16)), nn.Parameter(torch.zeros(2))

    @staticmethod
    def propagate(x, edges):
        n = x.shape[0]
        loops = torch.arange(n, device=x.device)
        src = torch.cat([edges[0], loops])
        dst = torch.cat([edges[1], loops])
        deg = torch.zeros(n, dtype=x.dtype, device=x.device).index_add_(0, dst, torch.ones_like(dst, dtype=x.dtype))
        w = deg[src].rsqrt() * deg[dst].rsqrt()
        return torch.zeros_like(x).index_add_(0, dst, x[src] * w[:, None])

    def forward(self, x, edges):
        h = torch.relu(self.propagate(self.h(x), edges) + self.bh)
        return self.propagate(self.y(h), edges) + self.by

    def weights(self):
        return {"h.psi.weight": self.h.weight, "h.bias": self.bh, "y.psi.weight": self.y.weight, "y.bias": self.by}


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.layer(x)

    def weights(self):
        L, d, hd = self.layer, 32, 8
        w, b = L.self_attn.in_proj_weight, L.self_attn.in_proj_bias
        out = {"y.attn.fusion.linear.weight": L.self_attn.out_proj.weight,
               "y.attn.fusion.linear.bias": L.self_attn.out_proj.bias,
               "y.attn.post.0.weight": L.norm1.weight, "y.attn.post.0.bias": L.norm1.bias,
               "y.ff.psi.weight": L.linear1.weight, "y.ff.bias": L.linear1.bias,
               "y.ff2.psi.weight": L.linear2.weight, "y.ff2.bias": L.linear2.bias,
               "y.y.weight": L.norm2.weight, "y.y.bias": L.norm2.bias}
        for h in range(4):
            rows = slice(h * hd, (h + 1) * hd)
            p = f"y.attn.heads.h{h}."
            out[p + "xi_instance.w_q"], out[p + "xi_instance.b_q"] = w[:d][rows].T, b[:d][rows]
            out[p + "xi_instance.w_k"], out[p + "xi_instance.b_k"] = w[d:2 * d][rows].T, b[d:2 * d][rows]
            out[p + "psi.weight"], out[p + "bias"] = w[2 * d:][rows], b[2 * d:][rows]
        return out


def cases(device):
    g = torch.Generator().manual_seed(0)
    n, e = 2000, 10000
    edges = torch.randint(0, n, (2, e), generator=g)
    edges = torch.cat([edges, edges.flip(0)], dim=1)
    edges = torch.unique(edges[:, edges[0] != edges[1]], dim=1)  # simple graph: no loops, no duplicates
    return [
        ("cnn (digits 8x8, B=256)", "specs/cnn.rpn", CNN, (torch.randn(256, 1, 8, 8, generator=g),)),
        ("gru classifier (B=64, T=50)", "specs/rnn.rpn", GRUClassifier, (torch.randn(64, 50, 8, generator=g),)),
        (f"gcn (N={n}, E={edges.shape[1]})", "specs/gcn.rpn", GCN, (torch.randn(n, 34, generator=g), edges)),
        ("transformer block (B=32, T=64, d=32)", "specs/transformer.rpn", Encoder,
         (torch.randn(32, 64, 32, generator=g),)),
    ]


def _load(model, weights):
    state = model.state_dict()
    missing = set(state) - set(weights)
    if missing:
        raise SystemExit(f"benchmark weight map is missing {sorted(missing)}")
    model.load_state_dict({k: v.detach().reshape(state[k].shape) for k, v in weights.items()})


def _time(fn, min_run_time):
    t = benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time)
    return t.median


def run(device: str, compile_: bool, min_run_time: float, threads: int | None):
    if threads:
        torch.set_num_threads(threads)
    rows = []
    for title, spec, cls, inputs in cases(device):
        torch.manual_seed(0)
        hand = cls().to(device).eval()
        inputs = tuple(i.to(device) for i in inputs)
        variants = {"hand-written": hand}
        for name, kw in (("rpn2c default", {}), ("rpn2c reference", {"reference": True})):
            m = rpn2c.compile_file(ROOT / spec, **kw).to(device).eval()
            _load(m, hand.weights())
            variants[name] = m
        if compile_:
            variants["rpn2c default + torch.compile"] = torch.compile(variants["rpn2c default"])
        with torch.no_grad():
            want = hand(*inputs)
            for name, m in variants.items():
                err = (m(*inputs) - want).abs().max().item()
                if err > 1e-3:
                    raise SystemExit(f"{title}: {name} differs from the hand-written module by {err}")
        for name, m in variants.items():
            params = [p for p in m.parameters()]

            def fwd(m=m):
                with torch.no_grad():
                    m(*inputs)

            def fwd_bwd(m=m, params=params):
                m(*inputs).square().mean().backward()
                for p in params:
                    p.grad = None

            fwd()
            fwd_bwd()
            rows.append({"case": title, "variant": name, "forward_ms": _time(fwd, min_run_time) * 1e3,
                         "train_step_ms": _time(fwd_bwd, min_run_time) * 1e3})
        base = next(r for r in rows if r["case"] == title and r["variant"] == "hand-written")
        for r in rows:
            if r["case"] == title:
                r["forward_ratio"] = r["forward_ms"] / base["forward_ms"]
                r["train_step_ratio"] = r["train_step_ms"] / base["train_step_ms"]
    return rows


def markdown(rows) -> str:
    out = ["| case | variant | forward ms | ratio | fwd+bwd ms | ratio |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['case']} | {r['variant']} | {r['forward_ms']:.3f} | {r['forward_ratio']:.2f} | "
                   f"{r['train_step_ms']:.3f} | {r['train_step_ratio']:.2f} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile of the default lowering")
    ap.add_argument("--min-run-time", type=float, default=1.0, help="seconds per measurement")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = run(args.device, args.compile, args.min_run_time, args.threads)
    machine = {"python": platform.python_version(), "torch": torch.__version__, "device": args.device,
               "threads": torch.get_num_threads(), "processor": platform.processor() or platform.machine()}
    if args.device.startswith("cuda"):
        machine["gpu"] = torch.cuda.get_device_name()
    sys.stdout.write(markdown(rows) + "\n\n" + json.dumps(machine) + "\n")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
