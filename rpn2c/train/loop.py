"""fit / evaluate / predict for a compiled spec on a bound dataset.

Loss: cross-entropy on logits for (node) classification, mean squared error for regression, plus the model's own
loss terms (a transform's orthogonality regulariser, `components.impl.feature_transform.regularisation`). Node
classification trains full-batch on the training mask; other tasks draw shuffled mini-batches (a seeded
generator, or a seeded ``DistributedSampler`` under torchrun). The learning rate follows
``lr · ½(1 + cos(π·t/T))`` over the T optimiser steps (``schedule="cosine"``) or stays constant. ``fit`` scores
every epoch on a validation split carved from the training data (:mod:`rpn2c.train.holdout`) and never reads
the test split; it can stop early, hand a resumable state to a callback after every epoch, and continue from one.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from rpn2c.components.impl.feature_transform import regularisation
from rpn2c.data import Dataset, make_loader

from . import distributed, holdout, metrics, mlm
from .binding import Binding

if TYPE_CHECKING:  # the settings' pydantic model: evaluating a checkpoint never builds it
    from .config import TrainConfig


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def loss_fn(task: str, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (classification) or mean squared error (regression) over the items."""
    if task == "regression":
        return F.mse_loss(output, target.reshape(output.shape).to(output.dtype))
    return F.cross_entropy(output, target)


@torch.no_grad()
def predict(model: nn.Module, binding: Binding, features: torch.Tensor, edges: torch.Tensor | None = None, *,
            batch_size: int = 1024) -> torch.Tensor:
    """Model outputs in eval mode: ``[n, K]`` for ``n`` samples (batched), or ``[N, K]`` for a whole graph."""
    was_training = model.training
    model.eval()
    try:
        if binding.task == "node_classification":
            return binding.output(model(**binding.inputs(features, edges)))
        outs = [binding.output(model(**binding.inputs(features[i:i + batch_size])))
                for i in range(0, features.shape[0], batch_size)]
        return torch.cat(outs) if outs else features.new_zeros(0)
    finally:
        model.train(was_training)


def evaluate(model: nn.Module, dataset: Dataset, binding: Binding, split: str = "test", *,
             batch_size: int = 1024) -> tuple[dict[str, float], torch.Tensor, torch.Tensor]:
    """(metrics incl. ``loss``, outputs, targets) on ``split``; for graphs only the split's masked nodes count."""
    tensors = dataset.train if split == "train" else dataset.test
    if binding.mlm is not None:
        return _evaluate_mlm(model, binding, tensors[0], batch_size)
    if dataset.task == "node_classification":
        x, edges, y, mask = tensors
        out = predict(model, binding, x, edges)[mask]
        target = y[mask]
    else:
        out = predict(model, binding, tensors[0], batch_size=batch_size)
        target = tensors[1]
    result = {"loss": float(loss_fn(dataset.task, out.float(), target)) if target.numel() else float("nan")}
    result.update(metrics.compute(dataset.task, out, target, dataset.num_classes))
    return result, out, target


@torch.no_grad()
def _evaluate_mlm(model: nn.Module, binding: Binding, ids: torch.Tensor, batch_size: int):
    """Masked-LM metrics on fixed masks of ``ids`` (``rpn2c.train.mlm``): loss, perplexity, masked accuracy."""
    vocab, mask_id, rate = binding.mlm
    was_training = model.training
    model.eval()
    total, outs, labels = torch.zeros(3, dtype=torch.float64), [], []
    try:
        for inputs, target in mlm.evaluation_batches(ids, rate, mask_id, vocab, batch_size):
            out = binding.output(model(**binding.inputs(inputs)))
            total += mlm.sums(out, target).cpu()
            outs.append(out)
            labels.append(target)
    finally:
        model.train(was_training)
    cat = (lambda xs: torch.cat(xs) if xs else ids.new_zeros(0))
    return mlm.metrics(total), cat(outs), cat(labels)


class History(list):
    """The epoch records (a list), with ``stopped``: why training ended — ``reason`` ("completed",
    "early_stopping" or "stop_after"), ``epoch``, and ``monitor`` / ``best`` / ``best_epoch`` (the validation
    metric that picks the best epoch, its best value and where it was reached; the epochs' last without
    validation)."""

    stopped: dict


def _batches(dataset: Dataset, config: TrainConfig, env: distributed.DistEnv):
    """(iterable of batches, sampler or None, generator of the batch order or None, steps per epoch)."""
    if dataset.task == "node_classification":
        return [dataset.train], None, None, 1
    if env.distributed:
        tensors = TensorDataset(*dataset.train)
        sampler = DistributedSampler(tensors, num_replicas=env.world_size, rank=env.rank, shuffle=True,
                                     seed=config.seed)
        loader = DataLoader(tensors, batch_size=config.batch_size, sampler=sampler)
        return loader, sampler, None, len(loader)
    loader = make_loader(dataset, "train", batch_size=config.batch_size, seed=config.seed)
    return loader, None, loader.generator, len(loader)


# ------------------------------------------------------------------------------------------------ RNG states
def rng_state(generator: torch.Generator | None = None) -> dict:
    """Python, NumPy, torch (CPU and CUDA) and ``generator`` states as plain lists, ints and tensors (loadable
    with ``torch.load(weights_only=True)``)."""
    version, words, gauss = random.getstate()
    _, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": [version, list(words), gauss],
            "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss),
                      "cached": float(cached)},
            "torch": torch.get_rng_state(),
            "cuda": [torch.cuda.get_rng_state(i) for i in range(torch.cuda.device_count())]
            if torch.cuda.is_available() else [],
            "loader": generator.get_state() if generator is not None else None}


def set_rng_state(state: dict, generator: torch.Generator | None = None) -> None:
    """Restore what :func:`rng_state` captured."""
    version, words, gauss = state["python"]
    random.setstate((version, tuple(words), gauss))
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    torch.set_rng_state(state["torch"])
    for i, s in enumerate(state.get("cuda") or []):
        if i < torch.cuda.device_count():
            torch.cuda.set_rng_state(s, i)
    if generator is not None and state.get("loader") is not None:
        generator.set_state(state["loader"])


# ------------------------------------------------------------------------------------------------ fit
def _monitor(task: str) -> tuple[str, bool]:
    key, higher = metrics.PRIMARY[task]
    return f"val_{key}", higher


def _best(history: list[dict], task: str) -> tuple[int | None, float | None]:
    """(epoch, value) of the first best validation metric in ``history`` (None, None without validation)."""
    key, higher = _monitor(task)
    best_epoch, best = None, None
    for r in history:
        v = r.get(key)
        if v is None or not math.isfinite(v):
            continue
        if best is None or (v > best if higher else v < best):
            best_epoch, best = r["epoch"], v
    return best_epoch, best


def _stopped(reason: str, history: list[dict], task: str, patience: int | None) -> dict:
    best_epoch, best = _best(history, task)
    last = history[-1]["epoch"] if history else 0
    return {"reason": reason, "epoch": last, "monitor": _monitor(task)[0] if best_epoch else None, "best": best,
            "best_epoch": best_epoch if best_epoch else last, "patience": patience}


def _schedule(opt: torch.optim.Optimizer, config: TrainConfig, total: int):
    if config.schedule == "cosine":
        return torch.optim.lr_scheduler.LambdaLR(
            opt, lambda t: 0.5 * (1 + math.cos(math.pi * min(t, total) / total)))
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0)


def fit(model: nn.Module, dataset: Dataset, binding: Binding, config: TrainConfig, *,
        device: torch.device | None = None, env: distributed.DistEnv | None = None, progress: bool = False,
        log: Callable[[str], None] | None = None, on_epoch: Callable[[dict], None] | None = None,
        on_checkpoint: Callable[[dict], None] | None = None, resume: dict | None = None,
        stop_after: int | None = None) -> tuple[nn.Module, History]:
    """Train ``model`` for ``config.epochs`` epochs, scoring each on the validation split (``config.val_fraction``
    of the training data) and stopping early after ``config.patience`` epochs without a better validation metric.

    Returns ``model`` (trained in place; FSDP leaves it sharded) and the :class:`History`: one record per epoch
    ``{"epoch", "loss", "lr", "train_accuracy", "val_loss", "val_<metric>"..., "seconds"}``. ``dataset.test`` is
    never read. ``dataset`` must already be on ``device``; seed the global RNG (:func:`seed_everything`) before
    building the model for reproducible runs. ``on_epoch`` receives each record; ``on_checkpoint`` (on every rank:
    FSDP gathers the weights) receives after each epoch the state to save — ``epoch``, ``history``, ``model`` (CPU
    weights), ``optimizer``, ``scheduler``, ``rng``, ``improved`` (a new best validation metric) and ``stopped``
    (None while training goes on). ``resume`` is such a state (without ``model``: load the weights into ``model``
    first): training continues after its epoch exactly as if it had not stopped. ``stop_after`` ends this call
    after that epoch (a pause that ``resume`` continues).
    """
    env = env or distributed.DistEnv()
    device = device or next(model.parameters()).device
    part = holdout.split(dataset, config.val_fraction, config.seed)
    view, validate = part.view, config.val_fraction > 0
    train_module = distributed.wrap(model, config.strategy, device)
    if config.compile:
        train_module = torch.compile(train_module)
    opt = torch.optim.AdamW(train_module.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    batches, sampler, order, steps = _batches(view, config, env)
    sched = _schedule(opt, config, config.epochs * steps)
    history = History()
    first = 1
    if resume is not None:
        distributed.load_optimizer_state(model, opt, resume["optimizer"])
        sched.load_state_dict(resume["scheduler"])
        history.extend(dict(r) for r in resume["history"])
        first = int(resume["epoch"]) + 1
        set_rng_state(resume["rng"], order)
    node = dataset.task == "node_classification"
    classify = dataset.task != "regression"
    monitor, higher = _monitor(dataset.task)
    eval_model = model  # not compiled nor DDP-wrapped (FSDP shards it in place): as `rpn2c eval` runs it
    bar = None
    last = min(config.epochs, stop_after) if stop_after is not None else config.epochs
    if progress and env.is_main:
        from tqdm.auto import tqdm

        bar = tqdm(total=max(last - first + 1, 0) * steps, unit="step", dynamic_ncols=True, leave=True,
                   file=sys.stderr)
    best_epoch, best = _best(history, dataset.task)
    reason = _finished(history, config, best_epoch)
    start = time.perf_counter() - (history[-1]["seconds"] if history else 0.0)
    epoch = first
    while reason is None and epoch <= last:
        if sampler is not None:
            sampler.set_epoch(epoch)
        train_module.train()
        stats = torch.zeros(3, dtype=torch.float64, device=device)  # loss·n, correct, n
        lr = opt.param_groups[0]["lr"]
        for batch in batches:
            if node:
                x, edges, y, mask = batch
                out = binding.output(train_module(**binding.inputs(x, edges)))[mask]
                y = y[mask]
            else:
                x, y = (t.to(device, non_blocking=True) for t in batch)
                if binding.mlm is not None:  # the masked-LM objective: corrupt x, predict the chosen ids
                    x, y = mlm.mask_tokens(x, binding.mlm[2], binding.mlm[1], binding.mlm[0])
                out = binding.output(train_module(**binding.inputs(x)))
            if binding.mlm is not None:
                loss = mlm.loss(out, y)
                with torch.no_grad():
                    stats += mlm.sums(out.detach(), y).to(stats.device)
                opt.zero_grad(set_to_none=True)
                _with_penalties(loss, train_module).backward()
                opt.step()
                sched.step()
                if bar is not None:
                    bar.update(1)
                continue
            loss = loss_fn(dataset.task, out, y)
            opt.zero_grad(set_to_none=True)
            _with_penalties(loss, train_module).backward()
            opt.step()
            sched.step()
            with torch.no_grad():
                n = y.shape[0]
                correct = (out.argmax(-1) == y).sum() if classify else out.new_zeros(())
                stats += torch.stack([loss.detach().double() * n, correct.double(), out.new_tensor(n).double()])
            if bar is not None:
                bar.update(1)
        stats = distributed.all_reduce_sum(stats).cpu()
        record = {"epoch": epoch, "loss": float(stats[0] / stats[2]), "lr": lr}
        if classify:
            record["train_accuracy"] = float(stats[1] / stats[2])
        if validate:
            val, _, _ = evaluate(eval_model, view, binding, "test", batch_size=config.eval_batch_size)
            record.update({f"val_{k}": v for k, v in val.items()})
        record["seconds"] = round(time.perf_counter() - start, 4)
        history.append(record)
        value = record.get(monitor)
        improved = value is not None and math.isfinite(value) and (
            best is None or (value > best if higher else value < best))
        if improved:
            best_epoch, best = epoch, value
        reason = _finished(history, config, best_epoch) or ("stop_after" if epoch == last else None)
        shown = monitor if validate else "loss"
        if bar is not None:
            bar.set_description(f"epoch {epoch}/{config.epochs}")
            bar.set_postfix(loss=f"{record['loss']:.4f}", **({monitor: f"{record[monitor]:.4f}"} if validate else {}))
        elif log is not None and env.is_main:
            log(f"epoch {epoch}/{config.epochs}  loss {record['loss']:.4f}  "
                + (f"{shown} {record[shown]:.4f}  " if validate else "") + f"({record['seconds']:.1f}s)")
        if on_epoch is not None:
            on_epoch(record)
        if on_checkpoint is not None:
            on_checkpoint({"epoch": epoch, "history": [dict(r) for r in history],
                           "model": distributed.full_state_dict(train_module),
                           "optimizer": distributed.optimizer_state(model, opt),
                           "scheduler": sched.state_dict(), "rng": rng_state(order), "improved": improved,
                           "stopped": _stopped(reason, history, dataset.task, config.patience) if reason else None})
        epoch += 1
    if bar is not None:
        bar.close()
    history.stopped = _stopped(reason or "stop_after", history, dataset.task, config.patience)
    return model, history


def _with_penalties(loss: torch.Tensor, model: nn.Module) -> torch.Tensor:
    """The loss to differentiate: the task's loss plus the model's loss terms of this forward (a transform's
    orthogonality regulariser); the epoch's reported loss is the task's alone."""
    extra = regularisation(model)
    return loss if extra is None else loss + extra.to(loss.dtype)


def _finished(history: list[dict], config: TrainConfig, best_epoch: int | None) -> str | None:
    """"completed" or "early_stopping" when the run has nothing left to do after ``history``, else None."""
    done = history[-1]["epoch"] if history else 0
    if config.patience is not None and best_epoch is not None and done - best_epoch >= config.patience:
        return "early_stopping"
    if done >= config.epochs:
        return "completed"
    return None
