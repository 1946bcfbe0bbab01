"""The validation split: a seeded part of the training data held out to score epochs, never the test split.

* classification: stratified by class (``rpn2c.data.dataset.stratified_split``: every class with two or more
  training items gives at least one);
* regression on windows of a series (the loader recorded a ``window``): the last ``fraction`` of the training
  windows, so validation targets follow training targets in time, as the test targets do;
* other regression: a seeded random subset;
* node classification: a stratified subset of the training mask's nodes (the test mask is not read).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from rpn2c.data import Dataset
from rpn2c.data.dataset import stratified_split

from .errors import TrainError


@dataclass(frozen=True)
class Holdout:
    """``view``: a Dataset whose ``train`` is what the model trains on and whose ``test`` is the validation split
    (the original test split is not in it). ``train_idx`` / ``val_idx``: rows of ``dataset.train`` (node ids for
    graphs), sorted and disjoint."""

    view: Dataset
    train_idx: np.ndarray
    val_idx: np.ndarray


def split(dataset: Dataset, fraction: float, seed: int) -> Holdout:
    """Carve ``fraction`` of ``dataset.train`` out as the validation split (``fraction == 0``: no split, the
    view's test split is empty). TrainError when the training data is too small to leave both parts."""
    node = dataset.task == "node_classification"
    if node:
        x, edges, y, mask = dataset.train
        rows = mask.nonzero().squeeze(1).cpu().numpy()
        labels = y.cpu().numpy()[rows]
    else:
        rows = np.arange(dataset.train[0].shape[0])
        labels = dataset.train[1].cpu().numpy() if dataset.task == "classification" else None
    n = rows.size
    if fraction == 0:
        train_pos, val_pos = np.arange(n), np.empty(0, dtype=np.int64)
    elif labels is not None:
        train_pos, val_pos = stratified_split(labels, fraction, seed)
    else:
        k = int(round(fraction * n))
        if "window" in dataset.meta:  # chronological windows: hold out the latest
            train_pos, val_pos = np.arange(n - k), np.arange(n - k, n)
        else:
            perm = np.random.default_rng(seed).permutation(n)
            train_pos, val_pos = np.sort(perm[k:]), np.sort(perm[:k])
    if fraction and (val_pos.size == 0 or train_pos.size == 0):
        raise TrainError(f"--val-fraction {fraction} of the {n} training items of '{dataset.name}' leaves "
                         f"{val_pos.size} for validation and {train_pos.size} for training; change it "
                         "(or 0 for no validation)")
    train_idx, val_idx = rows[train_pos], rows[val_pos]
    if node:
        train_mask = torch.zeros_like(mask)
        val_mask = torch.zeros_like(mask)
        train_mask[torch.from_numpy(train_idx).to(mask.device)] = True
        val_mask[torch.from_numpy(val_idx).to(mask.device)] = True
        view = replace(dataset, train=(x, edges, y, train_mask), test=(x, edges, y, val_mask), meta=dict(dataset.meta))
    else:
        t = torch.from_numpy(train_idx).to(dataset.train[0].device)
        v = torch.from_numpy(val_idx).to(dataset.train[0].device)
        view = replace(dataset, train=tuple(a[t] for a in dataset.train), test=tuple(a[v] for a in dataset.train),
                       meta=dict(dataset.meta))
    return Holdout(view, train_idx, val_idx)
