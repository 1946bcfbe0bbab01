"""``rpn2c eval / predict``: a checkpoint scored on a dataset split, or its predictions as CSV.

Exit status as for the other commands: 0 ok, 1 spec errors and data/checkpoint mismatches, 2 usage errors.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

from rpn2c.runtime.common import EXIT_OK, _err, _out, _Usage, parse_params
from rpn2c.runtime.workflow import (_data_options, _dataset, _device, _guard, _jsonable, _load_checkpoint,
                                    _named_dims, _restored_model, _same_options, _threads)


def _trained_params(args, ckpt) -> dict:
    """The model parameters the spec was checked with: the checkpoint's, overridden by ``--param``."""
    from rpn2c.train import checkpoint

    return {**checkpoint.model_params(ckpt), **parse_params(getattr(args, "param", None))}


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
    with _named_dims(graph, args, _trained_params(args, ckpt), trained=True):
        binding = bind(graph, dataset, args.spec, cfg.get("objective", "task"), cfg.get("mask_rate", 0.15),
                       cfg.get("mask_id"))
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
    if (args.data is None) == (args.input is None):
        raise _Usage("give exactly one of --data NAME or --input FILE")
    ckpt = _load_checkpoint(args.checkpoint)
    graph, model = _restored_model(args, ckpt)
    info = ckpt["data"]
    task = info["task"]
    device = _device(args.device)
    model.to(device)
    if ckpt["config"].get("objective") == "mlm":
        rows = _mlm_rows(args, ckpt, graph, model, device)
    else:
        rows = _task_rows(args, ckpt, graph, model, device, task, info)
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


def _task_rows(args, ckpt, graph, model, device, task, info) -> list[dict]:
    """The CSV rows of a task checkpoint: one per sample (or masked node)."""
    import torch

    from rpn2c.train.binding import Binding, bind, samples_from_array
    from rpn2c.train.loop import predict

    targets = index = None
    if args.input is not None:
        if task == "node_classification":
            raise _Usage("a graph model predicts from a graph dataset: use --data")
        with _named_dims(graph, args, _trained_params(args, ckpt), trained=True):
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
        with _named_dims(graph, args, _trained_params(args, ckpt), trained=True):
            binding = bind(graph, dataset, args.spec)
        split = dataset.train if args.split == "train" else dataset.test
        if task == "node_classification":
            x, edges, y, mask = split
            out = predict(model, binding, x, edges)[mask]
            targets, index = y[mask], mask.nonzero().squeeze(1)
        else:
            out = predict(model, binding, split[0])
            targets, index = split[1], torch.arange(out.shape[0])
    return _prediction_rows(task, out.cpu(), index.cpu(), None if targets is None else targets.cpu())


def _mlm_rows(args, ckpt, graph, model, device) -> list[dict]:
    """The CSV rows of a masked-LM checkpoint: one per filled token — ``index`` (the sample), ``position``, the
    ``input`` id there, the ``target`` (with --data), the ``prediction`` and its ``probability``. With --data the
    split is masked as ``rpn2c eval`` masks it (rpn2c.train.mlm); with --input the positions holding the [MASK]
    id are filled."""
    from dataclasses import replace

    from rpn2c.train import mlm
    from rpn2c.train.binding import Binding, bind, feature_input, samples_from_array
    from rpn2c.train.loop import predict

    cfg = ckpt["config"]
    rate = cfg.get("mask_rate", 0.15)
    with _named_dims(graph, args, _trained_params(args, ckpt), trained=True):
        if args.input is not None:
            vocab = graph.node(graph.outputs[0]).type.shape[-1]
            mask_id = vocab - 1 if cfg.get("mask_id") is None else cfg["mask_id"]
            inputs = samples_from_array(_read_array(args.input), graph, f"--input {args.input}", args.spec)
            binding = replace(Binding(ckpt["data"]["task"], feature_input(graph, args.spec)[0]),
                              mlm=(vocab, mask_id, rate))
            labels = None
        else:
            seed = cfg["seed"] if args.seed is None else args.seed
            dataset = _dataset(args.data, seed, _data_options(args.data_option) or _same_options(args.data, cfg))
            binding = bind(graph, dataset, args.spec, "mlm", rate, cfg.get("mask_id"))
            vocab, mask_id, _ = binding.mlm
            ids = (dataset.train if args.split == "train" else dataset.test)[0]
            inputs, labels = mlm.evaluation_split(ids, rate, mask_id, vocab, cfg.get("eval_batch_size", 1024))
    logits = predict(model, binding, inputs.to(device)).cpu()
    filled = mlm.fill(logits, inputs == mask_id if labels is None else labels != mlm.IGNORE)
    rows = []
    for k, (i, t) in enumerate(zip(filled["sample"].tolist(), filled["position"].tolist())):
        row = {"index": i, "position": t, "input": int(inputs[i, t])}
        if labels is not None:
            row["target"] = int(labels[i, t])
        row.update(prediction=int(filled["prediction"][k]), probability=round(float(filled["probability"][k]), 8))
        rows.append(row)
    return rows


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



def register(sub) -> None:
    """Add ``eval`` and ``predict`` to the ``rpn2c`` sub-command parser."""
    from rpn2c.runtime.common import add_spec_command

    def checkpoint_cmd(name, help_, fn, data_help):
        """A command reading a checkpoint and (optionally) a dataset split."""
        s = add_spec_command(sub, name, help_, fn)
        s.add_argument("checkpoint", metavar="CKPT", help="checkpoint.pt written by rpn2c train")
        s.add_argument("--data", metavar="NAME", help=data_help)
        s.add_argument("--data-option", action="append", metavar="KEY=VALUE",
                       help="loader option for KIND:PATH data (default: the training run's)")
        s.add_argument("--split", choices=["test", "train"], default="test")
        s.add_argument("--seed", type=int, help="split seed (default: the training seed)")
        s.add_argument("--device", default="cpu")
        return s

    s = checkpoint_cmd("eval", "evaluate a checkpoint of this spec on a dataset split", cmd_eval,
                       "dataset (default: the one it was trained on)")
    s.add_argument("--batch-size", type=int)
    s.add_argument("--format", choices=["table", "json"], default="table")
    s = checkpoint_cmd("predict", "predict with a checkpoint on a dataset split or a .npy/.csv file (CSV out)",
                       cmd_predict, "dataset whose split to predict")
    s.add_argument("--input", metavar="FILE", help=".npy array [n, *sample] or .csv rows (flattened samples)")
    s.add_argument("--out", metavar="FILE", help="CSV file (default: standard output)")
