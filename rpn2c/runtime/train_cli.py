"""``rpn2c train / eval / predict``: the training workflow on the command line (``show``: ``runtime/show.py``).

Exit status as for the other commands: 0 ok, 1 spec errors and data/checkpoint mismatches, 2 usage errors
(unknown dataset, missing file, bad option). The training code, the datasets and matplotlib are imported inside
the commands, so registering them costs ``rpn2c check`` nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import io
import json
import math
import os
import re
import shutil
import sys
from pathlib import Path

from rpn2c.runtime.common import EXIT_OK, EXIT_SPEC, _err, _out, _read, _Usage

EXIT_INTERRUPTED = 130


# ------------------------------------------------------------------------------------------------ helpers
def _guard(fn):
    """Turn the user-fixable errors of the training commands into messages and exit codes (no tracebacks)."""

    @functools.wraps(fn)
    def run(args) -> int:
        from rpn2c.train.config import TrainError

        try:
            return fn(args)
        except TrainError as exc:
            _err(f"rpn2c: error: {exc}")
            return EXIT_SPEC
        except FileNotFoundError as exc:
            raise _Usage(f"no such file: {exc.filename or exc}") from None
        except KeyboardInterrupt:
            _err("rpn2c: interrupted")
            return EXIT_INTERRUPTED

    return run


@contextlib.contextmanager
def _threads(n: int | None):
    """Run with ``n`` torch intra-op threads (0/None: leave torch's setting), restoring the previous count."""
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _graph(args, params: dict | None = None):
    """The checked, optimised IR graph of ``args.spec`` (with the model ``params``) and its text (SpecError
    propagates: exit 1; with ``params`` a last line names them)."""
    from rpn2c.api import check_file
    from rpn2c.errors import SpecError
    from rpn2c.passes import optimize
    from rpn2c.train.config import TrainError

    text = _read(args.spec)
    try:
        return optimize(check_file(args.spec, model=args.model, root=args.root, params=params or None)), text
    except SpecError as exc:
        if not params:
            raise
        _err(exc.render(color=sys.stderr.isatty()))
        n = len(exc.diagnostics)
        given = ", ".join(f"{k}={v!r}" for k, v in params.items())
        raise TrainError(f"{n} error{'s' if n != 1 else ''} found with the model parameters {given} "
                         "(--param or the checkpoint)") from None


def _compile(graph, *, reference: bool = False):
    from rpn2c.lower.build import CompiledModel

    return CompiledModel(graph, reference=reference)


def _data_options(items: list[str] | None) -> dict:
    """``KEY=VALUE`` strings -> a dict with int / float / bool values where they parse."""
    out: dict = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _Usage(f"--data-option {item}: expected KEY=VALUE (e.g. window=12)")
        low = value.lower()
        if low in ("true", "false"):
            out[key] = low == "true"
            continue
        for kind in (int, float):
            try:
                out[key] = kind(value)
                break
            except ValueError:
                continue
        else:
            out[key] = value
    return out


def _dataset(name: str, seed: int, options: dict | None = None):
    """A built-in dataset by name, or ``KIND:PATH`` for a user file (mnist, cifar, cora, planetoid, csv, ucr)
    read with the loader's ``options``."""
    from rpn2c import data

    kind, sep, path = name.partition(":")
    try:
        if sep and kind in data.LOADERS:
            opts = dict(options or {})
            if kind == "cora":
                opts.setdefault("seed", seed)
            return data.load_path(kind, os.path.expanduser(path), **opts)
        if options:
            raise _Usage(f"--data-option applies to user files (KIND:PATH), not to the built-in {name!r}")
        return data.load(name, seed=seed)
    except TypeError as exc:  # an option the loader does not take
        raise _Usage(f"--data-option for {kind!r}: {exc}") from None
    except ValueError as exc:
        msg = str(exc)
        if not sep and "unknown dataset" in msg:
            listing = "\n".join(f"  {k:<14} {v}" for k, v in data.available().items())
            msg = (msg.split(" (available")[0] + f"\navailable datasets:\n{listing}\nor KIND:PATH for a user file, "
                   f"KIND one of {', '.join(data.LOADERS)}")
        raise _Usage(msg) from None
    except ImportError as exc:
        raise _Usage(str(exc)) from None
    except FileNotFoundError as exc:
        raise _Usage(f"dataset {name!r}: {exc}") from None


def _device(name: str, env=None):
    from rpn2c.train import distributed

    try:
        return distributed.resolve_device(name, env or distributed.DistEnv())
    except RuntimeError as exc:
        raise _Usage(f"--device {name}: {exc}") from None


def _same_options(name: str, cfg: dict) -> dict:
    """The training run's loader options when evaluating on the same user file."""
    return dict(cfg.get("data_options") or {}) if name == cfg.get("data") else {}


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(text).name if ":" in text else text).strip("_") or "data"


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def _write_csv(path: Path, rows: list[dict]) -> None:
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)


def _load_checkpoint(path: str):
    from rpn2c.train import checkpoint

    if not Path(path).is_file():
        raise _Usage(f"no such checkpoint: {path}")
    return checkpoint.load(path)


def _restored_model(args, ckpt, *, reference: bool = False):
    """The spec compiled with the checkpoint's model parameters, its weights loaded (mismatch: exit 1)."""
    from rpn2c.train import checkpoint

    graph, _ = _graph(args, checkpoint.model_params(ckpt))
    model = _compile(graph, reference=reference)
    checkpoint.restore(ckpt, graph, model, path=args.checkpoint)
    return graph, model


# ------------------------------------------------------------------------------------------------ train
# options that decide what a resumed run computes: changing them cannot continue the same run
_FIXED_ON_RESUME = ("data", "data_options", "params", "batch_size", "lr", "weight_decay", "schedule", "seed",
                    "strategy", "eval_batch_size", "val_fraction")
_PATH_KEYS = ("spec", "root", "out", "metrics_out")
RUN_YAML = "run.yaml"


def _param_value(text: str):
    """A ``--param`` value: int, float, true/false, a [list], else the string itself."""
    import yaml

    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.startswith("["):
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = None
        if isinstance(value, list):
            return value
    return text


def _params(items: list[str] | None) -> dict:
    out: dict = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value:
            raise _Usage(f"--param {item}: expected NAME=VALUE (e.g. --param hidden=64)")
        out[key.strip()] = _param_value(value)
    return out


def _data_path(data: str, resolve) -> str:
    """``KIND:PATH`` with ``resolve(PATH)``; a built-in name unchanged."""
    from rpn2c import data as datasets

    kind, sep, path = data.partition(":")
    return f"{kind}:{resolve(os.path.expanduser(path))}" if sep and kind in datasets.LOADERS else data


def _config_errors(exc, where: str | None) -> str:
    import difflib

    from rpn2c.train.config import RunConfig

    parts = []
    for e in exc.errors():
        name = ".".join(map(str, e["loc"]))
        if not e["loc"]:
            parts.append((f"{where}: " if where else "") + e["msg"].removeprefix("Value error, "))
        elif where is None:
            parts.append(f"--{str(e['loc'][0]).replace('_', '-')}: {e['msg']}")
        elif e["type"] == "extra_forbidden":
            near = difflib.get_close_matches(name, list(RunConfig.model_fields), n=1)
            parts.append(f"{where}: unknown option '{name}'" + (f" (did you mean '{near[0]}'?)" if near else "")
                         + f"; the options are: {', '.join(RunConfig.model_fields)}")
        else:
            parts.append(f"{where}: {name or 'the file'}: {e['msg']}")
    return "; ".join(parts)


def _validated(values: dict, where: str | None):
    from pydantic import ValidationError

    from rpn2c.train.config import RunConfig

    try:
        return RunConfig(**values)
    except ValidationError as exc:
        raise _Usage(_config_errors(exc, where)) from None


def _read_config(path: str) -> dict:
    """The options of a config file (a run folder means its run.yaml), relative paths made relative to the file's
    folder; unknown keys and bad values are usage errors naming them."""
    import yaml

    p = Path(path)
    if p.is_dir():
        p = p / RUN_YAML
    if not p.is_file():
        raise _Usage(f"--config {path}: no such file")
    try:
        values = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
        raise _Usage(f"--config {p}: not readable YAML ({str(exc).splitlines()[0]})") from None
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise _Usage(f"--config {p}: expected a mapping of option: value, got {type(values).__name__}")
    _validated(values, str(p))

    def here(v: str) -> str:
        return v if os.path.isabs(v) else os.path.normpath(os.path.join(p.parent, v))

    for key in _PATH_KEYS:
        if isinstance(values.get(key), str):
            values[key] = here(values[key])
    if isinstance(values.get("data"), str):
        values["data"] = _data_path(values["data"], here)
    return values


def _given(args) -> dict:
    """The options given on the command line (None: not given)."""
    given = {"spec": args.spec, "model": args.model, "root": args.root, "data": args.data, "epochs": args.epochs,
             "batch_size": args.batch_size, "lr": args.lr, "weight_decay": args.weight_decay,
             "schedule": args.schedule, "seed": args.seed, "device": args.device, "compile": args.compile,
             "strategy": args.strategy, "threads": args.threads, "val_fraction": args.val_fraction,
             "patience": args.patience, "eval_batch_size": args.eval_batch_size, "out": args.out,
             "metrics_out": args.metrics_out, "quiet": args.quiet,
             "data_options": _data_options(args.data_option) or None, "params": _params(args.param) or None}
    return {k: v for k, v in given.items() if v is not None}


def _merge(*layers: dict) -> dict:
    """Later layers win; ``params`` merge by name; a layer naming a spec without a root drops the earlier root."""
    out: dict = {}
    for layer in layers:
        if "spec" in layer and "root" not in layer:
            out.pop("root", None)
        for k, v in layer.items():
            out[k] = {**out.get(k, {}), **v} if k == "params" else v
    return out


def _default_out(cfg) -> Path:
    return Path(cfg.out) if cfg.out else Path("runs") / f"{Path(cfg.spec).stem}-{_slug(cfg.data)}"


def _run_config(args):
    """(RunConfig, checkpoint to resume or None, its path): defaults < the resumed run < --config < command-line
    flags."""
    from rpn2c.train import checkpoint

    given = _given(args)
    _validated(given, None)
    file = _read_config(args.config) if args.config else {}
    ckpt = path = None
    base: dict = {}
    if args.resume is not None:
        target = Path(args.resume) if args.resume else None
        if target is None:
            first = _merge(file, given)
            if "spec" not in first or ("data" not in first and "out" not in first):
                raise _Usage("--resume without a path resumes --out DIR (or runs/<spec-stem>-<data>/): give SPEC "
                             "and --data, --out, or --resume RUN_DIR")
            target = _default_out(_validated(first, None))
        path = target / "checkpoint.pt" if target.is_dir() else target
        if not path.is_file():
            raise _Usage(f"--resume {args.resume or target}: no checkpoint at {path}")
        ckpt = checkpoint.load(path)
        if "train_state" not in ckpt:
            raise _Usage(f"--resume {path}: this checkpoint holds no training state (best.pt keeps only the best "
                         f"weights); resume from {path.parent / 'checkpoint.pt'}")
        recorded = path.parent / RUN_YAML
        base = _read_config(str(recorded)) if recorded.is_file() else {**ckpt["config"], "out": str(path.parent)}
    merged = _merge(base, file, given)
    if "spec" not in merged:
        raise _Usage("give the SPEC to train, --config RUN_YAML or --resume RUN_DIR")
    if "data" not in merged:
        raise _Usage("the following arguments are required: --data (or --config RUN_YAML)")
    merged["data"] = _data_path(merged["data"], os.path.abspath)
    cfg = _validated(merged, None)
    if ckpt is not None:
        trained = ckpt["config"]
        changed = [k for k in _FIXED_ON_RESUME if k in trained and getattr(cfg, k) != trained[k]]
        if changed:
            raise _Usage("--resume continues the run with its own settings; "
                         + ", ".join(f"{k} was {trained[k]!r}, now {getattr(cfg, k)!r}" for k in changed)
                         + " (when resuming, epochs, patience, device, threads, compile and the output options "
                           "may change)")
    return cfg, ckpt, path


def _spec_files(spec: Path, root: Path) -> list[Path]:
    """The spec and every file it imports, recursively (each inside ``root``)."""
    from rpn2c.syntax.parser import parse

    seen: list[Path] = []
    todo = [spec.resolve()]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        for imp in parse(p.read_text(encoding="utf-8"), str(p)).imports:
            target = (p.parent / imp.path).resolve()
            if target.is_file() and target.is_relative_to(root):
                todo.append(target)
    return seen


def _write_run_yaml(out_dir: Path, cfg) -> None:
    """``out_dir/run.yaml``: every option, with copies of the spec files in ``out_dir/spec/`` so the folder alone
    repeats the run (``rpn2c train --config out_dir/run.yaml``)."""
    import yaml

    spec = Path(cfg.spec)
    root = Path(cfg.root).resolve() if cfg.root else spec.resolve().parent
    if not spec.resolve().is_relative_to(root):  # the checker refuses this; keep the copy beside the spec's name
        root = spec.resolve().parent
    copies = out_dir / "spec"
    for f in _spec_files(spec, root):
        dest = copies / f.relative_to(root)
        if f != dest.resolve():
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(f.read_text(encoding="utf-8"), encoding="utf-8")
    values = cfg.model_dump(mode="json")
    values.update(spec=(Path("spec") / spec.resolve().relative_to(root)).as_posix(), root="spec", out=".",
                  data=_data_path(cfg.data, os.path.abspath))
    if cfg.metrics_out:
        values["metrics_out"] = os.path.abspath(cfg.metrics_out)
    first = ("spec", "model", "root", "params", "data", "data_options")
    ordered = {k: values[k] for k in first} | {k: v for k, v in values.items() if k not in first}
    header = (f"# rpn2c train: every option of this run ({cfg.spec} on {cfg.data}).\n"
              "# Repeat it with `rpn2c train --config run.yaml` (flags override these values); relative paths are\n"
              "# relative to this folder, and spec/ holds copies of the spec files.\n")
    tmp = out_dir / (RUN_YAML + ".tmp")
    tmp.write_text(header + yaml.safe_dump(ordered, sort_keys=False, allow_unicode=True), encoding="utf-8")
    os.replace(tmp, out_dir / RUN_YAML)


@_guard
def cmd_train(args) -> int:
    from rpn2c.train import distributed
    from rpn2c.train.binding import bind

    cfg, ckpt, ckpt_path = _run_config(args)
    spec_args = argparse.Namespace(spec=cfg.spec, model=cfg.model, root=cfg.root)
    graph, text = _graph(spec_args, cfg.params)
    env = distributed.DistEnv.from_env()
    device = _device(cfg.device, env)
    dataset = _dataset(cfg.data, cfg.seed, cfg.data_options)
    binding = bind(graph, dataset, cfg.spec)
    out_dir = _default_out(cfg)
    with _threads(cfg.threads):
        created = distributed.init(env, device)
        saved: list[int] = []  # epochs checkpointed by this invocation
        try:
            return _train(args, cfg, (ckpt, ckpt_path), graph, text, dataset, binding, env, device, out_dir, saved)
        except KeyboardInterrupt:
            if env.is_main and (saved or ckpt is not None):
                _err(f"rpn2c: interrupted; continue with: rpn2c train --resume {out_dir}")
                return EXIT_INTERRUPTED
            raise
        finally:
            if created:
                distributed.cleanup()


def _train(args, cfg, resume, graph, text, dataset, binding, env, device, out_dir: Path, saved: list) -> int:
    import time

    from rpn2c.train import checkpoint, distributed
    from rpn2c.train.loop import fit, seed_everything

    resumed, resumed_path = resume
    seed_everything(cfg.seed)
    model = _compile(graph).to(device)
    state = None  # the last epoch's resumable state
    if resumed is not None:
        checkpoint.restore(resumed, graph, model, path=resumed_path)
        state = {**resumed["train_state"], "model": resumed["state_dict"], "history": resumed["history"],
                 "epoch": resumed["epoch"], "stopped": resumed.get("stopped")}
    dataset = dataset.to(device)
    config = cfg.model_dump(mode="json")
    common = {"graph": graph, "spec_file": cfg.spec, "spec_text": text, "config": config, "dataset": dataset,
              "params": cfg.params}
    if env.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        best = out_dir / "best.pt"
        if resumed is None:  # a new run in an old folder: no best.pt of the earlier run may stay
            best.unlink(missing_ok=True)
        elif (resumed_path.parent / "best.pt").is_file() and not best.is_file():  # resumed into a new folder
            shutil.copyfile(resumed_path.parent / "best.pt", best)
        _write_run_yaml(out_dir, cfg)
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        lines = None
        if env.is_main and cfg.metrics_out:
            Path(cfg.metrics_out).parent.mkdir(parents=True, exist_ok=True)
            lines = stack.enter_context(open(cfg.metrics_out, "w", encoding="utf-8"))
            for record in (resumed or {}).get("history", []):
                lines.write(json.dumps(_jsonable(record)) + "\n")

        def on_epoch(record: dict) -> None:
            if lines is not None:
                lines.write(json.dumps(_jsonable(record)) + "\n")
                lines.flush()

        def on_checkpoint(s: dict) -> None:
            nonlocal state
            state = s
            saved.append(s["epoch"])
            if not env.is_main:
                return
            checkpoint.save(_last(checkpoint, common, s, {}), out_dir / "checkpoint.pt")
            if s["improved"]:
                checkpoint.save(checkpoint.build(**common, state_dict=s["model"], epoch=s["epoch"], metrics={},
                                                 history=s["history"], stopped=None), out_dir / "best.pt")

        trained, history = fit(model, dataset, binding, cfg.train_config(), device=device, env=env,
                               progress=not cfg.quiet and sys.stderr.isatty(), log=None if cfg.quiet else _err,
                               on_epoch=on_epoch, on_checkpoint=on_checkpoint, resume=state,
                               stop_after=args.stop_after)
    seconds = time.perf_counter() - start
    distributed.save_rank_state(distributed.full_state_dict(trained), env)  # every rank takes part (FSDP)
    if env.is_main:
        _write_run(out_dir, cfg, common, graph, dataset, history, state, seconds, device, env)
    distributed.barrier()
    return EXIT_OK


def _last(checkpoint, common: dict, s: dict, metrics: dict) -> dict:
    """The last checkpoint: weights, history and the state ``--resume`` continues from."""
    train_state = {k: s[k] for k in ("optimizer", "scheduler", "rng")}
    return checkpoint.build(**common, state_dict=s["model"], epoch=s["epoch"], metrics=metrics,
                            history=s["history"], stopped=s["stopped"], train_state=train_state)


def _test_metrics(graph, state_dict, dataset, binding, cfg, device) -> dict:
    """Test metrics of ``state_dict`` in a fresh model, as ``rpn2c eval`` computes them."""
    from rpn2c.train.loop import evaluate

    model = _compile(graph).to(device)
    model.load_state_dict(state_dict)
    result, _, _ = evaluate(model, dataset, binding, "test", batch_size=cfg.eval_batch_size)
    return result


def _write_run(out_dir: Path, cfg, common, graph, dataset, history, state, seconds, device, env) -> None:
    """checkpoint.pt, best.pt, metrics.csv, metrics.json and curves.png in ``out_dir``, and a summary line; the
    test split is evaluated here, once training has ended."""
    from rpn2c.train import checkpoint, plots
    from rpn2c.train.binding import bind
    from rpn2c.train.metrics import PRIMARY

    stopped = history.stopped
    final = history[-1] if history else {}
    key = PRIMARY[dataset.task][0]
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_csv(out_dir / "metrics.csv", list(history))
    summary = {"model": graph.name, "spec": cfg.spec, "content_hash": graph.content_hash(), "data": cfg.data,
               "task": dataset.task, "params": graph.param_count, "model_params": cfg.params,
               "device": str(device), "world_size": env.world_size, "seconds": round(seconds, 3),
               "config": common["config"], "stopped": stopped, "final": final,
               "best": next((r for r in history if r["epoch"] == stopped["best_epoch"]), final),
               "history": list(history)}
    files = ["checkpoint.pt"]
    if stopped["reason"] == "stop_after":
        (out_dir / "metrics.json").write_text(json.dumps(_jsonable(summary), indent=2) + "\n", encoding="utf-8")
        _out(f"stopped after epoch {stopped['epoch']} of {cfg.epochs}; continue with: rpn2c train --resume {out_dir}")
        return
    binding = bind(graph, dataset, cfg.spec)
    test = _test_metrics(graph, state["model"], dataset, binding, cfg, device)
    checkpoint.save(_last(checkpoint, common, {**state, "stopped": stopped}, test), out_dir / "checkpoint.pt")
    summary["test"] = test
    best_path = out_dir / "best.pt"
    if stopped["monitor"] and best_path.is_file():
        best = checkpoint.load(best_path)
        best_test = _test_metrics(graph, best["state_dict"], dataset, binding, cfg, device)
        best.update(metrics=best_test, stopped=stopped)
        checkpoint.save(best, best_path)
        summary["best_test"] = best_test
        files.append("best.pt")
    (out_dir / "metrics.json").write_text(json.dumps(_jsonable(summary), indent=2) + "\n", encoding="utf-8")
    plots.training_curves(list(history), out_dir / "curves.png", dataset.task,
                          title=f"{graph.name} on {cfg.data} ({Path(cfg.spec).name})")
    _out(f"trained {graph.name} ({graph.param_count:,} parameters) on {cfg.data}: {stopped['epoch']} epochs in "
         f"{seconds:.1f}s, test {key} {test.get(key, math.nan):.4f}, test loss {test['loss']:.4f}")
    if "best_test" in summary:
        why = (f"; stopped early: no better val {key} in {cfg.patience} epochs"
               if stopped["reason"] == "early_stopping" else "")
        _out(f"best epoch {stopped['best_epoch']} (val {key} {stopped['best']:.4f}): test {key} "
             f"{summary['best_test'].get(key, math.nan):.4f}{why}")
    _out(f"wrote {out_dir}/{', '.join(files)}, {RUN_YAML}, metrics.csv, metrics.json, curves.png")


# ------------------------------------------------------------------------------------------------ eval
@_guard
def cmd_eval(args) -> int:

    from rpn2c.train.binding import bind
    from rpn2c.train.loop import evaluate

    ckpt = _load_checkpoint(args.checkpoint)
    graph, model = _restored_model(args, ckpt)
    cfg = ckpt["config"]
    name = args.data or cfg["data"]
    seed = cfg["seed"] if args.seed is None else args.seed
    dataset = _dataset(name, seed, _data_options(args.data_option) or _same_options(name, cfg))
    binding = bind(graph, dataset, args.spec)
    device = _device(args.device)
    model.to(device)
    with _threads(cfg.get("threads", 1)):
        result, _, target = evaluate(model, dataset.to(device), binding, args.split,
                                     batch_size=args.batch_size or cfg.get("eval_batch_size", 1024))
    if args.format == "json":
        _out(json.dumps(_jsonable({"model": graph.name, "checkpoint": args.checkpoint, "data": name, "seed": seed,
                                   "split": args.split, "n": int(target.shape[0]), "metrics": result}), indent=2))
    else:
        _out(f"{graph.name} on {name} ({args.split} split, {int(target.shape[0])} items, seed {seed}):")
        for k, v in result.items():
            _out(f"  {k:<10} {v:.6f}")
    return EXIT_OK


# ------------------------------------------------------------------------------------------------ predict
def _read_array(path: str):
    import numpy as np
    import torch

    p = Path(path)
    if not p.is_file():
        raise _Usage(f"no such input file: {path}")
    suffix = p.suffix.lower()
    try:
        if suffix == ".npy":
            arr = np.load(p, allow_pickle=False)
        elif suffix in (".csv", ".txt", ".tsv"):
            delim = "\t" if suffix == ".tsv" else ","
            try:
                arr = np.loadtxt(p, delimiter=delim, dtype=np.float64, ndmin=2)
            except ValueError:  # a header row
                arr = np.loadtxt(p, delimiter=delim, dtype=np.float64, ndmin=2, skiprows=1)
        else:
            raise _Usage(f"--input {path}: expected a .npy or .csv file")
    except (ValueError, OSError) as exc:
        raise _Usage(f"--input {path}: cannot read it ({exc})") from None
    if not np.issubdtype(arr.dtype, np.number):
        raise _Usage(f"--input {path}: array of {arr.dtype}, expected numbers")
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))


@_guard
def cmd_predict(args) -> int:
    import torch

    from rpn2c.train.binding import Binding, bind, samples_from_array
    from rpn2c.train.loop import predict

    if (args.data is None) == (args.input is None):
        raise _Usage("give exactly one of --data NAME or --input FILE")
    ckpt = _load_checkpoint(args.checkpoint)
    graph, model = _restored_model(args, ckpt)
    info = ckpt["data"]
    task = info["task"]
    device = _device(args.device)
    model.to(device)
    targets = index = None
    if args.input is not None:
        if task == "node_classification":
            raise _Usage("a graph model predicts from a graph dataset: use --data")
        x = samples_from_array(_read_array(args.input), graph, f"--input {args.input}", args.spec)
        from rpn2c.train.binding import feature_input

        binding = Binding(task, feature_input(graph, args.spec)[0], num_classes=info["num_classes"],
                          target_dim=info["target_dim"])
        out = predict(model, binding, x.to(device))
        index = torch.arange(out.shape[0])
    else:
        cfg = ckpt["config"]
        seed = cfg["seed"] if args.seed is None else args.seed
        dataset = _dataset(args.data, seed, _data_options(args.data_option) or _same_options(args.data, cfg)).to(device)
        binding = bind(graph, dataset, args.spec)
        split = dataset.train if args.split == "train" else dataset.test
        if task == "node_classification":
            x, edges, y, mask = split
            out = predict(model, binding, x, edges)[mask]
            targets, index = y[mask], mask.nonzero().squeeze(1)
        else:
            out = predict(model, binding, split[0])
            targets, index = split[1], torch.arange(out.shape[0])
    rows = _prediction_rows(task, out.cpu(), index.cpu(), None if targets is None else targets.cpu())
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["index"], lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    if args.out is None:
        sys.stdout.write(buf.getvalue())
    else:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(buf.getvalue(), encoding="utf-8")
        _err(f"wrote {len(rows)} predictions to {args.out}")
    return EXIT_OK


def _prediction_rows(task, out, index, targets) -> list[dict]:
    """CSV rows: index, target (when known), prediction and class probabilities (softmax of the logits), or
    target_j / prediction_j for regression."""
    import torch

    rows = []
    if task == "regression":
        vals = out.reshape(out.shape[0], -1).double().tolist()
        tgt = targets.reshape(targets.shape[0], -1).double().tolist() if targets is not None else None
        for i, row in enumerate(vals):
            r = {"index": int(index[i])}
            if tgt is not None:
                r.update({f"target_{j}": v for j, v in enumerate(tgt[i])})
            r.update({f"prediction_{j}": v for j, v in enumerate(row)})
            rows.append(r)
        return rows
    prob = torch.softmax(out.double(), dim=-1)
    pred = prob.argmax(-1).tolist()
    probs = prob.tolist()
    tgt = targets.tolist() if targets is not None else None
    for i in range(len(pred)):
        r = {"index": int(index[i])}
        if tgt is not None:
            r["target"] = tgt[i]
        r["prediction"] = pred[i]
        r.update({f"prob_{k}": round(p, 8) for k, p in enumerate(probs[i])})
        rows.append(r)
    return rows


# ------------------------------------------------------------------------------------------------ parser
def register(sub) -> None:
    """Add ``train``, ``eval`` and ``predict`` to the ``rpn2c`` sub-command parser."""

    from rpn2c.runtime.common import add_spec_command

    def spec_cmd(name, help_, fn):
        return add_spec_command(sub, name, help_, fn)

    from rpn2c.train.config import TrainConfig

    d = {k: f.default for k, f in TrainConfig.model_fields.items()}
    help_ = ("train a spec on a dataset; writes the last and the best checkpoint, run.yaml, metrics (CSV, JSON) "
             "and a curves PNG")
    s = sub.add_parser("train", help=help_, description=help_)
    s.add_argument("spec", nargs="?", help="path to a .rpn file (default: the --config or --resume run's)")
    s.add_argument("--model", help="which model of the file (default: the last one)")
    s.add_argument("--root", help="project root that imports may not leave (default: the spec's folder)")
    s.set_defaults(fn=cmd_train)
    s.add_argument("--data", metavar="NAME",
                   help="built-in dataset (digits, iris, karate, ...; see rpn2c.data.available()) or KIND:PATH")
    s.add_argument("--data-option", action="append", metavar="KEY=VALUE",
                   help="loader option for KIND:PATH data (csv: window=12, horizon=1, ...); repeatable")
    s.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="model parameter, as rpn2c.compile's params= (e.g. hidden=64); repeatable")
    s.add_argument("--config", metavar="RUN_YAML",
                   help="read the options from this YAML file (a run folder's run.yaml repeats that run); "
                        "flags override it")
    s.add_argument("--resume", nargs="?", const="", metavar="RUN_DIR|CKPT",
                   help="continue a stopped or killed run from its last checkpoint (default: the --out folder)")
    s.add_argument("--stop-after", type=int, metavar="EPOCH",
                   help="end this invocation after that epoch; --resume continues (not recorded in run.yaml)")
    s.add_argument("--epochs", type=int, help=f"passes over the training set (default {d['epochs']})")
    s.add_argument("--batch-size", type=int, help=f"samples per step and process (default {d['batch_size']})")
    s.add_argument("--lr", type=float, help=f"AdamW peak learning rate (default {d['lr']})")
    s.add_argument("--weight-decay", type=float, help=f"AdamW weight decay (default {d['weight_decay']})")
    s.add_argument("--schedule", choices=["cosine", "constant"], help="learning-rate schedule (default cosine)")
    s.add_argument("--seed", type=int,
                   help=f"seeds the split, the initial weights, batch order, dropout (default {d['seed']})")
    s.add_argument("--val-fraction", type=float,
                   help=f"share of the training data held out to score epochs (default {d['val_fraction']}; 0: none)")
    s.add_argument("--patience", type=int,
                   help="stop after this many epochs without a better validation metric (default: never)")
    s.add_argument("--eval-batch-size", type=int, help=f"batch of evaluations (default {d['eval_batch_size']})")
    s.add_argument("--device", help="auto (default: cuda when available), cpu, cuda, cuda:1")
    s.add_argument("--compile", action="store_true", default=None, help="train through torch.compile")
    s.add_argument("--strategy", choices=["auto", "ddp", "fsdp"],
                   help="under torchrun: DDP (auto) or FSDP2 parameter sharding")
    s.add_argument("--out", metavar="DIR", help="output folder (default runs/<spec-stem>-<data>/)")
    s.add_argument("--metrics-out", metavar="FILE", help="also write one JSON record per epoch (JSON lines)")
    s.add_argument("--threads", type=int,
                   help=f"torch CPU threads per process (default {d['threads']}; 0 = torch's default)")
    s.add_argument("--quiet", action="store_true", default=None, help="no progress bar or per-epoch lines")

    s = spec_cmd("eval", "evaluate a checkpoint of this spec on a dataset split", cmd_eval)
    s.add_argument("checkpoint", metavar="CKPT", help="checkpoint.pt written by rpn2c train")
    s.add_argument("--data", metavar="NAME", help="dataset (default: the one it was trained on)")
    s.add_argument("--data-option", action="append", metavar="KEY=VALUE",
                   help="loader option for KIND:PATH data (default: the training run's)")
    s.add_argument("--split", choices=["test", "train"], default="test")
    s.add_argument("--seed", type=int, help="split seed (default: the training seed)")
    s.add_argument("--device", default="cpu")
    s.add_argument("--batch-size", type=int)
    s.add_argument("--format", choices=["table", "json"], default="table")

    s = spec_cmd("predict", "predict with a checkpoint on a dataset split or a .npy/.csv file (CSV out)",
                 cmd_predict)
    s.add_argument("checkpoint", metavar="CKPT", help="checkpoint.pt written by rpn2c train")
    s.add_argument("--data", metavar="NAME", help="dataset whose split to predict")
    s.add_argument("--data-option", action="append", metavar="KEY=VALUE",
                   help="loader option for KIND:PATH data (default: the training run's)")
    s.add_argument("--split", choices=["test", "train"], default="test")
    s.add_argument("--seed", type=int, help="split seed (default: the training seed)")
    s.add_argument("--input", metavar="FILE", help=".npy array [n, *sample] or .csv rows (flattened samples)")
    s.add_argument("--out", metavar="FILE", help="CSV file (default: standard output)")
    s.add_argument("--device", default="cpu")
