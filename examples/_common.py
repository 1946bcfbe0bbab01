"""Shared harness of the example comparisons: one training loop, one summary, one table, one JSON layout.

Every model of a script is trained by :func:`fit_eval` with the same optimiser (Adam), epochs, batch size and data
split; a run is seeded by ``seed`` (``torch.manual_seed(seed)`` before the model is built, and the same seed
drives the mini-batch order). Results are ``mean ± std`` over seeds (sample std, ddof = 1; 0 for one seed).

The scripts import this module as ``_common`` (``python examples/<name>.py`` puts ``examples/`` on sys.path);
it also puts the repository root on sys.path so ``import rpn2c`` finds this checkout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

EXAMPLES = Path(__file__).resolve().parent
REPO = EXAMPLES.parent
SPECS = EXAMPLES / "specs"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import rpn2c  # noqa: E402
import rpn2c.data  # noqa: E402,F401


# ----------------------------------------------------------------------------------------------------- data


@dataclass
class Split:
    """Model inputs (keyword name -> tensor) and targets.

    Without ``mask`` every input is batched along dim 0 together with ``target`` (mini-batches index all of
    them). With ``mask`` the split is one full graph: the model sees every input whole and only the masked rows
    of its output count (transductive node classification).
    """

    inputs: dict[str, torch.Tensor]
    target: torch.Tensor
    mask: torch.Tensor | None = None

    @property
    def size(self) -> int:
        return int(self.mask.sum()) if self.mask is not None else int(self.target.shape[0])


@dataclass
class Experiment:
    """One data set and the models compared on it (``models``: name -> (factory, role, description))."""

    dataset: str
    task: str  # "classification" | "regression"
    train: Split
    test: Split
    models: dict[str, tuple[Callable[[], nn.Module], str, str]]
    epochs: int
    lr: float = 1e-3
    batch_size: int | None = 64  # None: full batch
    weight_decay: float = 0.0
    notes: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def metric(self) -> str:
        return "accuracy" if self.task == "classification" else "mse"


def spec_model(spec: str, model: str | None = None, **params) -> Callable[[], nn.Module]:
    """A factory compiling ``examples/specs/<spec>`` (model ``model``) with its model parameters set to ``params``."""
    path = SPECS / spec

    def build() -> nn.Module:
        return rpn2c.compile_file(path, model=model, params=params or None)

    return build


def dataset_names(p: argparse.ArgumentParser, args: argparse.Namespace, known) -> list[str]:
    """The comma-separated ``--datasets`` choice, each checked against ``known`` (a usage error otherwise)."""
    names = [n.strip() for n in args.datasets.split(",") if n.strip()]
    for name in names:
        if name not in known:
            p.error(f"unknown data set {name!r} (choose from {', '.join(known)})")
    return names


def count_params(model: nn.Module) -> int:
    """Trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# ------------------------------------------------------------------------------------------------- training


def _loss_fn(task: str) -> nn.Module:
    return nn.CrossEntropyLoss() if task == "classification" else nn.MSELoss()


def _metric(task: str, out: torch.Tensor, target: torch.Tensor) -> float:
    if task == "classification":
        return float((out.argmax(-1) == target).float().mean())
    return float(((out - target) ** 2).mean())


def _forward(model: nn.Module, split: Split, idx: torch.Tensor | None):
    """Call ``model`` on the split's inputs (rows ``idx``); a compiled spec gets only the inputs it declares."""
    names = getattr(model, "input_names", None)
    inputs = split.inputs if names is None else {k: split.inputs[k] for k in names}
    if idx is None:
        return model(**inputs), split.target
    return model(**{k: v[idx] for k, v in inputs.items()}), split.target[idx]


def fit_eval(factory: Callable[[], nn.Module], exp: Experiment, seed: int) -> dict:
    """Build a model under ``torch.manual_seed(seed)``, train it with Adam for ``exp.epochs`` epochs, evaluate.

    Returns the test metric (accuracy or MSE, at the last epoch: there is no early stopping and no
    model selection on the test split), the final training loss, the parameter count and the wall time.
    """
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    model = factory()
    opt = torch.optim.Adam(model.parameters(), lr=exp.lr, weight_decay=exp.weight_decay)
    loss_fn = _loss_fn(exp.task)
    gen = torch.Generator().manual_seed(seed)
    train, test = exp.train, exp.test
    last = math.nan
    for _ in range(exp.epochs):
        model.train()
        if train.mask is not None or exp.batch_size is None:
            batches = [None]
        else:
            order = torch.randperm(train.size, generator=gen)
            batches = list(order.split(exp.batch_size))
        total, seen = 0.0, 0
        for idx in batches:
            out, target = _forward(model, train, idx)
            if train.mask is not None:
                out, target = out[train.mask], target[train.mask]
            loss = loss_fn(out, target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * target.shape[0]
            seen += target.shape[0]
        last = total / max(seen, 1)
    model.eval()
    with torch.no_grad():
        out, target = _forward(model, test, None)
        if test.mask is not None:
            out, target = out[test.mask], target[test.mask]
        metric = _metric(exp.task, out, target)
    return {"seed": seed, "metric": metric, "train_loss": last, "params": count_params(model),
            "seconds": time.perf_counter() - t0}


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    vals = list(values)
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def run_experiment(make: Callable[[int], Experiment], seeds: Sequence[int], epochs: int | None,
                   log: Callable[[str], None] = print) -> dict:
    """Run every model of ``make(seed)`` for every seed (the split may depend on the seed; all models of one
    seed share it) and summarise them."""
    runs: dict[str, list[dict]] = {}
    exp = None
    for seed in seeds:
        exp = make(seed)
        if epochs is not None:
            exp.epochs = epochs
        for name, (factory, _, _) in exp.models.items():
            r = fit_eval(factory, exp, seed)
            runs.setdefault(name, []).append(r)
            log(f"  [{exp.dataset}] seed {seed} {name:<12} {exp.metric} {r['metric']:.4f}  "
                f"({r['params']:,} params, {r['seconds']:.1f} s)")
    assert exp is not None
    models = {}
    for name, rs in runs.items():
        _, role, desc = exp.models[name]
        m, s = _mean_std([r["metric"] for r in rs])
        sec, _ = _mean_std([r["seconds"] for r in rs])
        models[name] = {"role": role, "description": desc, "params": rs[0]["params"], "metric_mean": m,
                        "metric_std": s, "seconds_mean": sec, "runs": rs}
    return {"dataset": exp.dataset, "task": exp.task, "metric": exp.metric,
            "higher_is_better": exp.task == "classification", "n_train": exp.train.size, "n_test": exp.test.size,
            "epochs": exp.epochs, "lr": exp.lr, "batch_size": exp.batch_size, "weight_decay": exp.weight_decay,
            "seeds": list(seeds), "notes": exp.notes, "meta": exp.meta, "models": models}


# ------------------------------------------------------------------------------------------------ reporting


def machine() -> dict:
    """CPU model, core count, torch version and the thread setting."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "python": platform.python_version()}


def _fmt(metric: str, v: float) -> str:
    return f"{v:.4f}" if metric == "accuracy" else f"{v:.4g}"


def markdown_table(exp: dict) -> str:
    """The experiment as a markdown table: model, role, params, metric mean ± std, seconds per run."""
    arrow = "↑" if exp["higher_is_better"] else "↓"
    lines = [f"| model | role | params | test {exp['metric']} {arrow} (mean ± std, n={len(exp['seeds'])}) "
             f"| seconds / run |", "|---|---|---:|---|---:|"]
    for name, m in exp["models"].items():
        lines.append(f"| {name} | {m['role']} | {m['params']:,} | {_fmt(exp['metric'], m['metric_mean'])} ± "
                     f"{_fmt(exp['metric'], m['metric_std'])} | {m['seconds_mean']:.1f} |")
    return "\n".join(lines)


def parser(description: str, epochs_help: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--seeds", type=int, default=3, help="number of seeds (0 .. N-1); default 3")
    p.add_argument("--epochs", type=int, default=None, help=epochs_help)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    return p


def report(script: str, argv: Sequence[str] | None, args: argparse.Namespace,
           experiments: list[dict], started: float, log: Callable[[str], None] = print) -> dict:
    """Print one markdown table per experiment, write the JSON (if ``--out``) and return the results dict."""
    result = {"script": script, "command": "python examples/" + script + ".py" +
              "".join(" " + shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)),
              "machine": machine(), "total_seconds": time.perf_counter() - started, "experiments": experiments}
    for exp in experiments:
        log(f"\n### {exp['dataset']} ({exp['task']}, {exp['n_train']} train / {exp['n_test']} test, "
            f"{exp['epochs']} epochs)\n")
        log(markdown_table(exp))
        if exp.get("notes"):
            log(f"\n{exp['notes']}")
    m = result["machine"]
    log(f"\nmachine: {m['cpu']}, {m['cores']} cores, torch {m['torch']}, {m['threads']} thread(s); "
        f"total {result['total_seconds']:.1f} s")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=_json_default) + "\n", encoding="utf-8")
        log(f"wrote {args.out}")
    return result


def _json_default(o):
    if isinstance(o, torch.Tensor):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def sinusoidal_positions(steps: int, d: int) -> torch.Tensor:
    """The Transformer's fixed positional table PE[t, 2i] = sin(t / 10000^(2i/d)), PE[t, 2i+1] = cos(...)."""
    t = torch.arange(steps, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float32) / d)
    pe = torch.zeros(steps, d)
    pe[:, 0::2] = torch.sin(t * freq)
    pe[:, 1::2] = torch.cos(t * freq[: d // 2])
    return pe


class MLP(nn.Module):
    """Flatten the keyword input ``x`` and apply Linear-ReLU layers: sizes [in, *hidden, out]."""

    def __init__(self, sizes: Sequence[int], dropout: float = 0.0):
        super().__init__()
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
                if dropout:
                    layers.append(nn.Dropout(dropout))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, **_: torch.Tensor) -> torch.Tensor:
        return self.net(x.flatten(1) if x.dim() > 2 else x)
