"""Token-sequence tasks generated from a seed (nothing shipped, nothing downloaded): small problems a
Transformer learns to well above chance in seconds on a CPU.

``majority``: each sample is ``T = 16`` ids drawn uniformly from a vocabulary of ``V = 4``; the label is the id
that occurs most often (samples with a tie are redrawn, so every label is unambiguous; chance is about 1/4). A
bag-of-tokens model can solve it; a causal Transformer must gather every earlier item into the last one.
"""

from __future__ import annotations

import numpy as np
import torch

from .dataset import Dataset

MAJORITY = {"vocab": 4, "length": 16, "train": 2000, "test": 500}


def majority_samples(n: int, vocab: int, length: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` sequences ``[n, length]`` of ids in ``[0, vocab)`` with a unique most frequent id, and that id."""
    xs, ys = [], []
    while sum(len(x) for x in xs) < n:
        x = rng.integers(0, vocab, size=(2 * n, length))
        counts = np.stack([(x == v).sum(1) for v in range(vocab)], axis=1)
        top = np.sort(counts, axis=1)
        keep = top[:, -1] > top[:, -2]  # no tie for the most frequent id
        xs.append(x[keep])
        ys.append(counts[keep].argmax(1))
    return np.concatenate(xs)[:n], np.concatenate(ys)[:n]


def majority(seed: int, description: str) -> Dataset:
    """The ``majority`` task; ``seed`` draws the samples (train and test from one stream)."""
    cfg = MAJORITY
    rng = np.random.default_rng(seed)
    x, y = majority_samples(cfg["train"] + cfg["test"], cfg["vocab"], cfg["length"], rng)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
    n = cfg["train"]
    return Dataset(name="majority", task="classification", train=(t(x[:n]), t(y[:n])), test=(t(x[n:]), t(y[n:])),
                   num_classes=cfg["vocab"], target_dim=None, input_spec=f"tokens[B, {cfg['length']}]",
                   description=description,
                   meta={"seed": seed, "vocab": cfg["vocab"], "class_names": [str(v) for v in range(cfg["vocab"])],
                         "rule": "label = the most frequent id (ties redrawn)"})
