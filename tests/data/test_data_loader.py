"""make_loader: batching, seeded shuffling, whole-graph batches."""

from __future__ import annotations

import pytest
import torch

from rpn2c.data import Dataset, load, make_loader


def _toy(n=10):
    x = torch.arange(n, dtype=torch.float64).unsqueeze(1)
    y = torch.arange(n) % 3
    return Dataset("toy", "classification", (x, y), (x[:4], y[:4]), num_classes=3, target_dim=None,
                   input_spec="vector[B, 1]")


def test_batches_cover_the_split_once():
    ds = _toy()
    batches = list(make_loader(ds, "train", batch_size=4, seed=0))
    assert [b[0].shape[0] for b in batches] == [4, 4, 2]
    seen = torch.cat([b[0][:, 0] for b in batches])
    assert sorted(seen.tolist()) == list(range(10)) and seen.dtype == torch.float64
    assert all(torch.equal(b[1], b[0][:, 0].long() % 3) for b in batches)  # rows stay paired


def test_seeded_shuffle_is_reproducible():
    ds = _toy(50)

    def order(seed):
        return torch.cat([b[0][:, 0] for b in make_loader(ds, batch_size=8, seed=seed)])

    assert torch.equal(order(3), order(3)) and not torch.equal(order(3), order(4))
    assert not torch.equal(order(3), torch.arange(50, dtype=torch.float64))
    loader = make_loader(ds, batch_size=8, seed=3)
    epoch1, epoch2 = (torch.cat([b[0][:, 0] for b in loader]) for _ in range(2))
    assert not torch.equal(epoch1, epoch2)  # the generator advances between epochs


def test_test_split_is_not_shuffled_by_default():
    ds = _toy()
    out = torch.cat([b[0][:, 0] for b in make_loader(ds, "test", batch_size=3)])
    assert out.tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="split"):
        make_loader(ds, "val")


def test_node_classification_is_one_full_graph_batch():
    ds = load("karate")
    batches = list(make_loader(ds, "test", batch_size=4))
    assert len(batches) == 1
    x, edge_index, y, mask = batches[0]
    assert x.shape == (34, 34) and edge_index.shape == (2, 156) and torch.equal(mask, ds.test[3])
    assert torch.equal(y, ds.test[2])
