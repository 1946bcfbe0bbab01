"""fit / evaluate / predict for a compiled spec on a bound dataset.

Loss: cross-entropy on logits for (node) classification, mean squared error for regression. Node
classification trains full-batch on the training mask and evaluates on the test mask; other tasks draw shuffled
mini-batches (a seeded generator, or a seeded ``DistributedSampler`` under torchrun). The learning rate follows
``lr · ½(1 + cos(π·t/T))`` over the T optimiser steps (``schedule="cosine"``) or stays constant.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from rpn2c.data import Dataset, make_loader

from . import distributed, metrics
from .binding import Binding
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


def _forward(model: nn.Module, binding: Binding, split: tuple[torch.Tensor, ...]) -> torch.Tensor:
    if binding.task == "node_classification":
        return binding.output(model(**binding.inputs(split[0], split[1])))
    return binding.output(model(**binding.inputs(split[0])))


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


def _batches(dataset: Dataset, config: TrainConfig, env: distributed.DistEnv):
    """(iterable of batches, sampler or None, steps per epoch)."""
    if dataset.task == "node_classification":
        return [dataset.train], None, 1
    if env.distributed:
        tensors = TensorDataset(*dataset.train)
        sampler = DistributedSampler(tensors, num_replicas=env.world_size, rank=env.rank, shuffle=True,
                                     seed=config.seed)
        loader = DataLoader(tensors, batch_size=config.batch_size, sampler=sampler)
        return loader, sampler, len(loader)
    loader = make_loader(dataset, "train", batch_size=config.batch_size, seed=config.seed)
    return loader, None, len(loader)


def fit(model: nn.Module, dataset: Dataset, binding: Binding, config: TrainConfig, *,
        device: torch.device | None = None, env: distributed.DistEnv | None = None, progress: bool = False,
        log: Callable[[str], None] | None = None,
        on_epoch: Callable[[dict], None] | None = None) -> tuple[nn.Module, list[dict]]:
    """Train ``model`` for ``config.epochs`` epochs, evaluating on the test split after each one.

    Returns (``model`` — trained in place; FSDP leaves it sharded — and the history: one record per epoch
    ``{"epoch", "loss", "lr", "train_accuracy", "test_loss", "test_<metric>"..., "seconds"}``).
    ``dataset`` must already be on ``device``; seed the global RNG (:func:`seed_everything`) before building
    the model for reproducible runs. ``on_epoch`` receives each record (on every rank).
    """
    env = env or distributed.DistEnv()
    device = device or next(model.parameters()).device
    train_module = distributed.wrap(model, config.strategy, device)
    if config.compile:
        train_module = torch.compile(train_module)
    opt = torch.optim.AdamW(train_module.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    batches, sampler, steps = _batches(dataset, config, env)
    total = config.epochs * steps
    if config.schedule == "cosine":
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 0.5 * (1 + math.cos(math.pi * min(t, total) / total)))
    else:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0)
    node = dataset.task == "node_classification"
    classify = dataset.task != "regression"
    eval_model = model  # not compiled nor DDP-wrapped (FSDP shards it in place): as `rpn2c eval` runs it
    bar = None
    if progress and env.is_main:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, unit="step", dynamic_ncols=True, leave=True, file=sys.stderr)
    history: list[dict] = []
    start = time.perf_counter()
    for epoch in range(1, config.epochs + 1):
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
                out = binding.output(train_module(**binding.inputs(x)))
            loss = loss_fn(dataset.task, out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            with torch.no_grad():
                n = y.shape[0]
                correct = (out.argmax(-1) == y).sum() if classify else out.new_zeros(())
                stats += torch.stack([loss.detach().double() * n, correct.double(), out.new_tensor(n).double()])
            if bar is not None:
                bar.update(1)
        stats = distributed.all_reduce_sum(stats).cpu()
        test, _, _ = evaluate(eval_model, dataset, binding, "test", batch_size=config.eval_batch_size)
        record = {"epoch": epoch, "loss": float(stats[0] / stats[2]), "lr": lr}
        if classify:
            record["train_accuracy"] = float(stats[1] / stats[2])
        record.update({f"test_{k}": v for k, v in test.items()})
        record["seconds"] = round(time.perf_counter() - start, 4)
        history.append(record)
        key = "test_" + metrics.PRIMARY[dataset.task][0]
        if bar is not None:
            bar.set_description(f"epoch {epoch}/{config.epochs}")
            bar.set_postfix(loss=f"{record['loss']:.4f}", **{key[5:]: f"{record[key]:.4f}"})
        elif log is not None and env.is_main:
            log(f"epoch {epoch}/{config.epochs}  loss {record['loss']:.4f}  {key} {record[key]:.4f}  "
                f"({record['seconds']:.1f}s)")
        if on_epoch is not None:
            on_epoch(record)
    if bar is not None:
        bar.close()
    return model, history
