"""The `Dataset` record shared by the built-in registry and the on-disk loaders, plus split helpers.

Split conventions (every loader follows them):

* classification / regression: ``train`` and ``test`` are ``(inputs, targets)``; inputs are float32 (int64 ids
  for a ``tokens`` input), class targets int64 in ``[0, num_classes)``, regression targets float32
  ``[n, target_dim]``.
* node_classification: ``train`` and ``test`` are ``(x, edge_index, y, mask)`` over the *same* full graph:
  ``x`` float32 ``[N, F]``, ``edge_index`` int64 ``[2, E]`` (every undirected edge stored in both directions,
  no duplicates, no self loops), ``y`` int64 ``[N]``, ``mask`` bool ``[N]`` (train mask in ``train``, test mask
  in ``test``; the masks are disjoint).

Standardization is always fitted on training rows only: ``z = (v - mean_train) / std_train`` with a zero std
replaced by 1; the statistics are kept in ``Dataset.meta["mean"]`` / ``["std"]`` so predictions can be mapped back
with ``v = z * std + mean``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

import numpy as np
import torch

Task = Literal["classification", "regression", "node_classification"]
TASKS: tuple[str, ...] = ("classification", "regression", "node_classification")


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test pair of tensor tuples with what a trainer needs to size a model's head and loss.

    ``num_classes`` is set for (node) classification, ``target_dim`` for regression; exactly one is not None.
    ``input_spec`` is the input's tensor type written as in a spec (``image[B, 1, 8, 8]``, ``vector[B, 4]``,
    ``sequence[B, 12, 1]``, ``graph[N, 34]``).
    """

    name: str
    task: Task
    train: tuple[torch.Tensor, ...]
    test: tuple[torch.Tensor, ...]
    num_classes: int | None
    target_dim: int | None
    input_spec: str
    description: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"dataset {self.name!r}: task must be one of {TASKS}, got {self.task!r}")
        if (self.num_classes is None) == (self.target_dim is None):
            raise ValueError(f"dataset {self.name!r}: set exactly one of num_classes / target_dim")
        if (self.task == "regression") != (self.target_dim is not None):
            raise ValueError(f"dataset {self.name!r}: regression sets target_dim, classification num_classes")
        object.__setattr__(self, "train", tuple(self.train))
        object.__setattr__(self, "test", tuple(self.test))
        for split_name, split in (("train", self.train), ("test", self.test)):
            if not all(isinstance(t, torch.Tensor) for t in split):
                raise TypeError(f"dataset {self.name!r}: {split_name} must be a tuple of tensors")
            if self.task == "node_classification":
                if len(split) != 4:
                    raise ValueError(f"dataset {self.name!r}: {split_name} must be (x, edge_index, y, mask)")
            elif len(split) < 2 or len({t.shape[0] for t in split}) != 1:
                raise ValueError(f"dataset {self.name!r}: {split_name} tensors need one common leading size")
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))

    @property
    def output_dim(self) -> int:
        """Width of the model output: ``num_classes`` or ``target_dim``."""
        return int(self.num_classes if self.num_classes is not None else self.target_dim)  # type: ignore[arg-type]

    @property
    def num_train(self) -> int:
        """Training examples (labelled training nodes for node classification)."""
        return _count(self.train, self.task)

    @property
    def num_test(self) -> int:
        """Test examples (labelled test nodes for node classification)."""
        return _count(self.test, self.task)

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> Dataset:
        """Copy with every tensor moved to ``device`` and every floating tensor cast to ``dtype``."""

        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device, dtype=dtype if (dtype is not None and t.is_floating_point()) else None)

        return replace(self, train=tuple(map(move, self.train)), test=tuple(map(move, self.test)),
                       meta=dict(self.meta))

    def __repr__(self) -> str:
        shapes = ", ".join(str(tuple(t.shape)) for t in self.train)
        out = f"num_classes={self.num_classes}" if self.num_classes is not None else f"target_dim={self.target_dim}"
        return (f"Dataset(name={self.name!r}, task={self.task!r}, train=[{shapes}], num_train={self.num_train}, "
                f"num_test={self.num_test}, {out}, input_spec={self.input_spec!r})")


def _count(split: tuple[torch.Tensor, ...], task: str) -> int:
    if task == "node_classification":
        return int(split[3].sum())
    return int(split[0].shape[0])


# ----------------------------------------------------------------------------------------------- split helpers


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded stratified split: per class c with n_c items, round(test_fraction * n_c) go to test.

    (clipped to [1, n_c - 1] when n_c >= 2, so every class with two items appears on both sides). Returns sorted
    (train_idx, test_idx); the same (labels, test_fraction, seed) always give the same split.
    """
    labels = np.asarray(labels)
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    rng = np.random.default_rng(seed)
    test_parts = []
    for c in sorted(set(labels.tolist())):  # np.unique's sorted classes, without its import of numpy.ma
        idx = np.flatnonzero(labels == c)
        k = 0 if idx.size < 2 else min(max(int(round(test_fraction * idx.size)), 1), idx.size - 1)
        test_parts.append(rng.permutation(idx)[:k])
    test_idx = np.sort(np.concatenate(test_parts)) if test_parts else np.empty(0, dtype=np.int64)
    keep = np.ones(labels.shape[0], dtype=bool)
    keep[test_idx] = False
    return np.flatnonzero(keep), test_idx


def fit_standardizer(train_rows: np.ndarray, axis: int | tuple[int, ...] = 0) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std over ``axis`` of the training rows (population std; a zero std becomes 1)."""
    mean = train_rows.mean(axis=axis, dtype=np.float64)
    std = train_rows.std(axis=axis, dtype=np.float64)
    return mean, np.where(std > 0, std, 1.0)


def window_series(values: np.ndarray, window: int, horizon: int = 1,
                  target_columns: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sliding windows over a series ``values[t, f]``.

    Sample i is ``x_i = values[i : i + window]`` ([window, F]) with target ``y_i = values[i + window + horizon - 1,
    target_columns]``. Returns (x [n, window, F], y [n, F_t], target_time [n]) with
    n = T - window - horizon + 1.
    """
    if values.ndim != 2:
        raise ValueError(f"series must be [time, features], got shape {values.shape}")
    if window < 1 or horizon < 1:
        raise ValueError(f"window and horizon must be >= 1, got window={window}, horizon={horizon}")
    n = values.shape[0] - window - horizon + 1
    if n < 1:
        raise ValueError(f"series of length {values.shape[0]} is too short for window={window}, horizon={horizon}")
    cols = np.arange(values.shape[1]) if target_columns is None else np.asarray(target_columns)
    x = np.lib.stride_tricks.sliding_window_view(values[: n + window - 1], window, axis=0)  # [n, F, window]
    x = np.ascontiguousarray(np.swapaxes(x, 1, 2))
    target_time = np.arange(n) + window + horizon - 1
    y = values[target_time][:, cols]
    return x, y, target_time


def forecasting_dataset(name: str, series: np.ndarray, *, window: int, horizon: int = 1,
                        test_fraction: float = 0.2, target_columns: np.ndarray | None = None,
                        standardize: bool = True, description: str = "",
                        meta: Mapping[str, Any] | None = None) -> Dataset:
    """Chronological forecasting split of a [time, features] series.

    The first ``floor((1 - test_fraction) * T)`` steps are the training period: a sample is a training sample when
    its target step lies in it and a test sample otherwise (test inputs may look back into the training period,
    test targets never overlap training targets). With ``standardize`` each feature is z-scored with the mean/std
    of the training period only.
    """
    series = np.asarray(series, dtype=np.float64)
    if series.ndim == 1:
        series = series[:, None]
    if not np.isfinite(series).all():
        raise ValueError(f"{name}: series contains NaN or inf values")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    t_train = int(np.floor((1.0 - test_fraction) * series.shape[0]))
    extra = dict(meta or {})
    if standardize:
        mean, std = fit_standardizer(series[:t_train])
        series = (series - mean) / std
        extra.update(mean=torch.from_numpy(mean.astype(np.float32)), std=torch.from_numpy(std.astype(np.float32)))
    x, y, target_time = window_series(series, window, horizon, target_columns)
    is_train = target_time < t_train
    if not is_train.any() or is_train.all():
        raise ValueError(f"{name}: test_fraction={test_fraction} leaves no train or no test windows "
                         f"(T={series.shape[0]}, window={window})")
    extra.update(window=window, horizon=horizon, train_steps=t_train, standardized=standardize)
    xt, yt = torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.float32))
    mask = torch.from_numpy(is_train)
    return Dataset(name=name, task="regression", train=(xt[mask], yt[mask]), test=(xt[~mask], yt[~mask]),
                   num_classes=None, target_dim=int(y.shape[1]),
                   input_spec=f"sequence[B, {window}, {series.shape[1]}]", description=description, meta=extra)


def undirected_edge_index(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> torch.Tensor:
    """[2, E] int64 edge index holding every pair in both directions, deduplicated, self loops dropped,
    sorted by (source, target)."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= num_nodes):
        raise ValueError(f"edge endpoints must lie in [0, {num_nodes})")
    pairs = np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])])
    pairs = pairs[:, pairs[0] != pairs[1]]
    key = np.unique(pairs[0] * num_nodes + pairs[1])
    return torch.from_numpy(np.stack([key // num_nodes, key % num_nodes]))


def node_dataset(name: str, x: np.ndarray, edge_index: torch.Tensor, labels: np.ndarray, *,
                 train_idx: np.ndarray, test_idx: np.ndarray, num_classes: int | None = None,
                 description: str = "", meta: Mapping[str, Any] | None = None) -> Dataset:
    """Assemble a node-classification Dataset from full-graph arrays and index sets."""
    n = x.shape[0]
    train_mask, test_mask = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    train_mask[train_idx], test_mask[test_idx] = True, True
    if (train_mask & test_mask).any():
        raise ValueError(f"{name}: train and test nodes overlap")
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    yt = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    k = int(num_classes if num_classes is not None else (yt.max() + 1 if n else 0))
    return Dataset(name=name, task="node_classification",
                   train=(xt, edge_index, yt, torch.from_numpy(train_mask)),
                   test=(xt, edge_index, yt, torch.from_numpy(test_mask)),
                   num_classes=k, target_dim=None, input_spec=f"graph[N, {x.shape[1]}]",
                   description=description, meta=dict(meta or {}, num_nodes=n, num_edges=int(edge_index.shape[1])))
