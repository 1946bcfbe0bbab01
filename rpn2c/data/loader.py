"""``torch.utils.data.DataLoader`` construction for a `Dataset` split."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data import Dataset as TorchDataset

from .dataset import Dataset


class _WholeGraph(TorchDataset):
    """One item: the full graph tuple (x, edge_index, y, mask)."""

    def __init__(self, tensors: tuple[torch.Tensor, ...]) -> None:
        self.tensors = tensors

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        if index != 0:
            raise IndexError(index)
        return self.tensors


def make_loader(dataset: Dataset, split: str = "train", *, batch_size: int = 64, shuffle: bool | None = None,
                seed: int = 0, drop_last: bool = False, **loader_options: Any) -> DataLoader:
    """DataLoader over ``dataset.train`` or ``dataset.test``.

    Tensor splits yield tuples of ``batch_size`` rows; ``shuffle`` (default: True for train, False for test)
    draws its order from a ``torch.Generator`` seeded with ``seed``, so the same seed gives the same batches.
    Node-classification splits yield the whole graph ``(x, edge_index, y, mask)`` as a single batch per epoch
    (``batch_size``/``shuffle`` are ignored there). ``loader_options`` go to DataLoader (e.g. ``num_workers``).
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    tensors = dataset.train if split == "train" else dataset.test
    if dataset.task == "node_classification":
        return DataLoader(_WholeGraph(tensors), batch_size=None, shuffle=False, **loader_options)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    shuffle = (split == "train") if shuffle is None else shuffle
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(TensorDataset(*tensors), batch_size=batch_size, shuffle=shuffle, generator=generator,
                      drop_last=drop_last, **loader_options)
