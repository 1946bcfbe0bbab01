"""``rpn2c train``: the training workflow on the command line (``eval`` / ``predict``: ``runtime/predict_cli.py``,
``show``: ``runtime/show.py``; the run's options and folder: ``rpn2c.train.run``).

Exit status as for the other commands: 0 ok, 1 spec errors and data/checkpoint mismatches, 2 usage errors
(unknown dataset, missing file, bad option, a folder holding another run). The training code, the datasets and
matplotlib are imported inside the command, so registering it costs ``rpn2c check`` nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import sys
from pathlib import Path

from rpn2c.runtime.common import EXIT_OK, _err, _out, _Usage, budget_limits, parse_params
from rpn2c.runtime.workflow import (EXIT_INTERRUPTED, _compile, _data_options, _dataset, _device, _graph, _guard,
                                    _jsonable, _named_dims, _threads, _write_csv)


def _given(args) -> dict:
    """The options given on the command line (None: not given)."""
    given = {"spec": args.spec, "model": args.model, "root": args.root, "data": args.data, "epochs": args.epochs,
             "batch_size": args.batch_size, "lr": args.lr, "weight_decay": args.weight_decay,
             "schedule": args.schedule, "seed": args.seed, "device": args.device, "compile": args.compile,
             "strategy": args.strategy, "threads": args.threads, "val_fraction": args.val_fraction,
             "patience": args.patience, "eval_batch_size": args.eval_batch_size, "out": args.out,
             "metrics_out": args.metrics_out, "quiet": args.quiet,
             "data_options": _data_options(args.data_option) or None, "params": parse_params(args.param) or None,
             "objective": args.objective, "mask_rate": args.mask_rate, "mask_id": args.mask_id}
    if args.embedding:
        given["data_options"] = {**(given["data_options"] or {}), "embedding": args.embedding}
    return {k: v for k, v in given.items() if v is not None}


def _spec_files(cfg) -> tuple[list[Path], Path]:
    """The run's spec and every file it imports, recursively (each inside the project root), and that root."""
    from rpn2c.syntax.parser import parse

    spec = Path(cfg.spec)
    root = Path(cfg.root).resolve() if cfg.root else spec.resolve().parent
    if not spec.resolve().is_relative_to(root):  # the checker refuses this; keep the copy beside the spec's name
        root = spec.resolve().parent
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
    return seen, root


@_guard
def cmd_train(args) -> int:
    from rpn2c.train import run

    if args.overwrite and args.resume is not None:
        raise _Usage("--resume continues the run in its folder and --overwrite replaces it: give one of them")
    cfg, ckpt, ckpt_path = run.resolve(_given(args), args.config, args.resume)
    out_dir = run.default_out(cfg)
    # continuing in its own folder keeps the run; anywhere else the folder must hold no other run
    here = ckpt is not None and ckpt_path.parent.resolve() == out_dir.resolve()
    run.claim(out_dir, resume=here, overwrite=args.overwrite, remove=False)  # every rank, before any removes
    from rpn2c.train import distributed  # torch, once the folder is known to take the run: a refusal is quick
    from rpn2c.train.binding import bind

    spec_args = argparse.Namespace(spec=cfg.spec, model=cfg.model, root=cfg.root, **budget_limits(args))
    graph, text = _graph(spec_args, cfg.params)
    cfg = run.text_length(cfg, graph)
    env = distributed.DistEnv.from_env()
    device = _device(cfg.device, env)
    dataset = _dataset(cfg.data, cfg.seed, cfg.data_options)
    def bind_to(g):
        return bind(g, dataset, cfg.spec, cfg.objective, cfg.mask_rate, cfg.mask_id)

    with _named_dims(graph, spec_args, cfg.params, rebind=bind_to):
        binding = bind_to(graph)
    split = run.split_sizes(dataset, cfg.val_fraction, cfg.seed)
    if env.is_main:
        if not cfg.quiet:
            _err(f"split: {run.describe_split(split)}")
        warning = run.split_warning(split, cfg.val_fraction)
        if warning:
            _err(warning)
    with _threads(cfg.threads):
        created = distributed.init(env, device)
        if env.is_main:
            removed = run.claim(out_dir, resume=here, overwrite=args.overwrite)
            if removed:
                _err(f"removed from {out_dir}: {', '.join(removed)}")
        saved: list[int] = []  # epochs checkpointed by this invocation
        try:
            return _train(args, cfg, (ckpt, ckpt_path), graph, text, (dataset, binding, split), env, device, out_dir,
                          saved)
        except KeyboardInterrupt:
            if env.is_main and (saved or ckpt is not None):
                _err(f"rpn2c: interrupted; continue with: rpn2c train --resume {out_dir}")
                return EXIT_INTERRUPTED
            raise
        finally:
            if created:
                distributed.cleanup()


def _train(args, cfg, resume, graph, text, data, env, device, out_dir: Path, saved: list) -> int:
    import time

    from rpn2c.train import checkpoint, distributed, run
    from rpn2c.train.loop import fit, seed_everything

    resumed, resumed_path = resume
    dataset, binding, split = data
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
              "params": cfg.params, "dims": binding.dims}
    if env.is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        best = out_dir / "best.pt"
        if resumed is not None and (resumed_path.parent / "best.pt").is_file() and not best.is_file():
            shutil.copyfile(resumed_path.parent / "best.pt", best)  # resumed into a new folder
        run.write_run_yaml(out_dir, cfg, *_spec_files(cfg), split=split)
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
        _write_run(out_dir, cfg, common, graph, dataset, history, state, seconds, device, env, split)
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


def _write_run(out_dir: Path, cfg, common, graph, dataset, history, state, seconds, device, env, split) -> None:
    """checkpoint.pt, best.pt, metrics.csv, metrics.json (with the ``split`` sizes) and curves.png in ``out_dir``,
    and a summary line; the test split is evaluated here, once training has ended."""
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
               "config": common["config"], "split": split, "stopped": stopped, "final": final,
               "best": next((r for r in history if r["epoch"] == stopped["best_epoch"]), final),
               "history": list(history)}
    files = ["checkpoint.pt"]
    if stopped["reason"] == "stop_after":
        (out_dir / "metrics.json").write_text(json.dumps(_jsonable(summary), indent=2) + "\n", encoding="utf-8")
        _out(f"stopped after epoch {stopped['epoch']} of {cfg.epochs}; continue with: rpn2c train --resume {out_dir}")
        return
    binding = bind(graph, dataset, cfg.spec, cfg.objective, cfg.mask_rate, cfg.mask_id)
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
    _out(f"wrote {out_dir}/{', '.join(files)}, run.yaml, metrics.csv, metrics.json, curves.png")



def register(sub) -> None:
    """Add ``train`` to the ``rpn2c`` sub-command parser."""
    from rpn2c.runtime.common import add_spec_options
    from rpn2c.train.defaults import DEFAULTS as d  # not TrainConfig: building the parser needs no pydantic
    help_ = ("train a spec on a dataset; writes the last and the best checkpoint, run.yaml, metrics (CSV, JSON) "
             "and a curves PNG")
    s = sub.add_parser("train", help=help_, description=help_)
    s.add_argument("spec", nargs="?", help="path to a .rpn file (default: the --config or --resume run's)")
    add_spec_options(s)
    s.set_defaults(fn=cmd_train)
    s.add_argument("--data", metavar="NAME",
                   help="built-in dataset (digits, iris, karate, ...; `rpn2c data` lists them) or KIND:PATH")
    s.add_argument("--data-option", action="append", metavar="KEY=VALUE",
                   help="loader option for KIND:PATH data (csv: window=12, horizon=1, ...); repeatable")
    s.add_argument("--embedding", metavar="glove:FILE",
                   help="text:PATH data: look the tokens up in this frozen pretrained table (a GloVe text file, "
                        "a word then its floats per line); the same as --data-option embedding=glove:FILE")
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
    s.add_argument("--out", metavar="DIR", help="output folder (default runs/<spec-stem>-<data>/); a folder that "
                   "holds another run is refused unless --resume or --overwrite")
    s.add_argument("--overwrite", action="store_true",
                   help="replace the run already in the output folder (its checkpoints, metrics, run.yaml and "
                        "exported programs are removed first)")
    s.add_argument("--metrics-out", metavar="FILE", help="also write one JSON record per epoch (JSON lines)")
    s.add_argument("--threads", type=int,
                   help=f"torch CPU threads per process (default {d['threads']}; 0 = torch's default)")
    s.add_argument("--quiet", action="store_true", default=None, help="no progress bar or per-epoch lines")
    s.add_argument("--objective", choices=["task", "mlm"],
                   help="the dataset's task (default), or mlm: the masked-LM objective on its token ids, for a spec "
                        "returning logits sequence[B, T, V] (perplexity reported)")
    s.add_argument("--mask-rate", type=float, help=f"mlm: share of the positions predicted (default {d['mask_rate']})")
    s.add_argument("--mask-id", type=int, help="mlm: the [MASK] id (default: the last output id, V - 1)")

