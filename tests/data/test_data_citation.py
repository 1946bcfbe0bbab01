"""``cora:`` / ``citeseer:`` / ``pubmed:`` data: either release format, the paper's per-class split, aliases."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rpn2c.data import LOADERS, load_path, per_class_split
from tests.data.test_data_formats import _cifar_batch, _write_cora, _write_planetoid


def test_cora_kind_reads_planetoid_files(tmp_path):
    allx, tx, _, _, test_ids = _write_planetoid(tmp_path, name="cora")
    _write_planetoid(tmp_path, name="citeseer")  # a Planetoid data/ folder holds several sets
    ds = load_path("cora", tmp_path)
    assert ds.name == "cora" and ds.meta["features"] == "Planetoid feature rows (allx + tx)"
    np.testing.assert_array_equal(ds.train[0][:5].numpy(), allx)
    assert ds.train[3].nonzero().flatten().tolist() == [0, 1]  # the public split: the first len(y) nodes
    assert ds.test[3].nonzero().flatten().tolist() == sorted(test_ids)
    assert load_path("citeseer", tmp_path).name == "citeseer"
    with pytest.raises(TypeError, match="public split"):
        load_path("cora", tmp_path, per_class=1)


def test_cora_kind_reads_the_linqs_pair(tmp_path):
    _write_cora(tmp_path)
    ds = load_path("cora", tmp_path, seed=0, per_class=1, test_nodes=2)
    y, train, test = ds.train[2], ds.train[3], ds.test[3]
    assert torch.bincount(y[train], minlength=3).tolist() == [1, 1, 1]
    assert int(test.sum()) == 2 and not (train & test).any()


def test_missing_citation_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"ind.pubmed.x.*pubmed.content"):
        load_path("pubmed", tmp_path)


@settings(max_examples=40, deadline=None)
@given(counts=st.lists(st.integers(3, 12), min_size=1, max_size=5), per_class=st.integers(1, 3),
       extra=st.integers(0, 5), seed=st.integers(0, 1000))
def test_per_class_split(counts, per_class, extra, seed):
    labels = np.repeat(np.arange(len(counts)), counts)
    np.random.default_rng(seed).shuffle(labels)
    rest = labels.size - per_class * len(counts)
    test_nodes = min(extra, rest)
    train, test = per_class_split(labels, per_class, test_nodes, seed)
    assert np.bincount(labels[train], minlength=len(counts)).tolist() == [per_class] * len(counts)
    assert test.size == test_nodes and not np.intersect1d(train, test).size
    assert list(train) == sorted(train) and list(test) == sorted(test)
    again = per_class_split(labels, per_class, test_nodes, seed)
    assert np.array_equal(again[0], train) and np.array_equal(again[1], test)
    with pytest.raises(ValueError, match="fewer than test_nodes"):
        per_class_split(labels, per_class, rest + 1, seed)


def test_cifar10_is_an_alias(tmp_path):
    rng = np.random.default_rng(0)
    for name in ("data_batch_1", "test_batch"):
        (tmp_path / name).write_bytes(pickle.dumps(_cifar_batch(rng, 2, True)[0], protocol=2))
    assert LOADERS["cifar10"] is LOADERS["cifar"]
    ds = load_path("cifar10", tmp_path)
    assert ds.name == "cifar10" and ds.train[0].shape == (2, 3, 32, 32)
