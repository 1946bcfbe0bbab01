"""Checkpoints: a plain dict of strings, numbers, lists, dicts and tensors, saved with ``torch.save`` and read
back with ``torch.load(weights_only=True)`` (no pickled objects, so loading cannot run code).

Keys: ``format`` ("rpn2c-checkpoint"), ``format_version``, ``rpn2c_version``, ``torch_version``, ``model``,
``content_hash`` (the IR hash of the spec), ``spec_file``, ``spec_text``, ``spec_sources`` (file -> text, imports
included), ``ir`` (canonical IR JSON), ``inputs`` / ``outputs`` (name -> type), ``param_shapes``, ``state_dict``,
``config`` (the run's settings as a dict), ``params`` (the model parameters the spec was checked with, as
``rpn2c.compile``'s ``params=``), ``epoch``, ``metrics`` (test metrics once training has ended, else empty),
``history`` (every epoch's record), ``data`` (dataset name, task, classes / target width, input type, the size of
each symbolic input dim in that data, normalisation statistics) and ``stopped`` (why training ended, None while it goes on). The last checkpoint of a run also holds
``train_state`` (optimiser, schedule, RNG states: what ``rpn2c train --resume`` continues from).
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rpn2c.data import Dataset
from rpn2c.ir.graph import Graph

from .errors import CheckpointMismatch, TrainError

FORMAT, FORMAT_VERSION = "rpn2c-checkpoint", 1
_MAX_LINES = 12


def build(*, graph: Graph, state_dict: dict[str, torch.Tensor], spec_file: str | os.PathLike, spec_text: str,
          config: dict, epoch: int, metrics: dict, history: list[dict], dataset: Dataset, params: dict | None = None,
          stopped: dict | None = None, train_state: dict | None = None,
          dims: dict[str, int] | None = None) -> dict[str, Any]:
    """The checkpoint dict for a trained model (``state_dict`` on CPU, unwrapped/unsharded); ``dims``: the data's
    size of each symbolic input dim (what ``rpn2c export`` sizes its example inputs by)."""
    from rpn2c import __version__

    data = {"name": dataset.name, "task": dataset.task, "num_classes": dataset.num_classes,
            "target_dim": dataset.target_dim, "input_spec": dataset.input_spec, "dims": dict(dims or {})}
    for key in ("mean", "std"):
        if isinstance(dataset.meta.get(key), torch.Tensor):
            data[key] = dataset.meta[key].detach().cpu().clone()
    ckpt = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "rpn2c_version": __version__,
        "torch_version": str(torch.__version__), "model": graph.name, "content_hash": graph.content_hash(),
        "spec_file": str(spec_file), "spec_text": spec_text, "spec_sources": dict(graph.sources),
        "ir": graph.to_json(), "inputs": {n: str(graph.node(n).type) for n in graph.inputs},
        "outputs": {n: str(graph.node(n).type) for n in graph.outputs},
        "param_shapes": {k: list(v.shape) for k, v in state_dict.items()},
        "state_dict": {k: v.detach().cpu().contiguous() for k, v in state_dict.items()},
        "config": dict(config), "epoch": int(epoch), "metrics": dict(metrics), "history": [dict(r) for r in history],
        "data": data, "params": dict(params or {}), "stopped": dict(stopped) if stopped else None,
    }
    if train_state is not None:
        ckpt["train_state"] = train_state
    return ckpt


def model_params(ckpt: dict[str, Any]) -> dict:
    """The model parameters a checkpoint's spec was checked with (``{}`` for the defaults)."""
    return dict(ckpt.get("params") or {})


def save(ckpt: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write atomically (a temporary file renamed over ``path``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(ckpt, tmp)
    os.replace(tmp, path)
    return path


def load(path: str | os.PathLike) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True``; TrainError when it is not an rpn2c checkpoint."""
    path = Path(path)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError) as exc:  # not a torch.save zip
        raise TrainError(f"{path}: not a loadable rpn2c checkpoint ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise TrainError(f"{path}: not an rpn2c checkpoint (no format '{FORMAT}' key)")
    if ckpt.get("format_version", 0) > FORMAT_VERSION:
        raise TrainError(f"{path}: checkpoint format {ckpt['format_version']} is newer than this rpn2c reads "
                         f"({FORMAT_VERSION})")
    return ckpt


def differences(ckpt: dict[str, Any], graph: Graph, state_dict: dict[str, torch.Tensor]) -> list[str]:
    """What differs between the checkpoint's spec and ``graph`` (empty when the content hashes agree)."""
    mine = graph.content_hash()
    if ckpt["content_hash"] == mine:
        return []
    lines = [(f"content hash differs: checkpoint {ckpt['content_hash'][:12]} (model '{ckpt['model']}' from "
              f"{ckpt['spec_file']}), spec {mine[:12]} (model '{graph.name}')")]
    inputs = {n: str(graph.node(n).type) for n in graph.inputs}
    for name in sorted(set(inputs) | set(ckpt["inputs"])):
        a, b = ckpt["inputs"].get(name), inputs.get(name)
        if a != b:
            lines.append(f"input '{name}': {a or 'absent'} in the checkpoint, {b or 'absent'} in the spec")
    theirs = {k: tuple(v) for k, v in ckpt["param_shapes"].items()}
    ours = {k: tuple(v.shape) for k, v in state_dict.items()}
    param_lines = []
    for name in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(name), ours.get(name)
        if a != b:
            param_lines.append(f"parameter {name}: {_dims(a)} in the checkpoint, {_dims(b)} in the spec")
    if len(param_lines) > _MAX_LINES:
        param_lines = param_lines[:_MAX_LINES] + [f"... and {len(param_lines) - _MAX_LINES} more parameters"]
    lines += param_lines
    if len(lines) == 1:  # same inputs and parameters: say which layers were changed
        lines.append("inputs and parameter shapes agree; the programs differ in: "
                     + ", ".join(_ir_differences(ckpt.get("ir", "{}"), graph.to_json())))
    return lines


def _dims(shape: tuple[int, ...] | None) -> str:
    return "absent" if shape is None else "[" + ", ".join(map(str, shape)) + "]"


def _ir_differences(a_json: str, b_json: str) -> list[str]:
    a, b = json.loads(a_json), json.loads(b_json)
    an = {n["id"]: n for n in a.get("nodes", [])}
    bn = {n["id"]: n for n in b.get("nodes", [])}
    out = []
    for nid in sorted(set(an) | set(bn)):
        if an.get(nid) != bn.get(nid):
            path = _first_difference(an.get(nid), bn.get(nid))
            out.append(f"node '{nid}'" + (f" ({path})" if path else ""))
    if a.get("edges") != b.get("edges"):
        out.append("the dataflow edges")
    return out[:_MAX_LINES] or ["the model name or outputs"]


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path}: {json.dumps(a, default=str)} vs {json.dumps(b, default=str)}"


def restore(ckpt: dict[str, Any], graph: Graph, model: nn.Module, *, path: str | os.PathLike = "checkpoint") -> None:
    """Load the checkpoint's weights into ``model`` compiled from ``graph``, refusing a different spec with
    :class:`CheckpointMismatch` listing what differs."""
    diffs = differences(ckpt, graph, model.state_dict())
    if diffs:
        raise CheckpointMismatch(f"{path} was trained on a different spec; refusing to load it:\n  "
                                 + "\n  ".join(diffs))
    model.load_state_dict(ckpt["state_dict"], strict=True)
