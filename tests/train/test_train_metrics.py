"""Metric functions against scikit-learn, including the edge cases (absent classes, constant targets)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as skm

from rpn2c.train import metrics

labels = st.integers(1, 60).flatmap(lambda n: st.tuples(
    st.integers(2, 6).flatmap(lambda k: st.tuples(st.just(k), st.lists(st.integers(0, k - 1), min_size=n, max_size=n),
                                                  st.lists(st.integers(0, k - 1), min_size=n, max_size=n)))))


@settings(max_examples=50, deadline=None)
@given(labels)
def test_accuracy_and_macro_f1_match_sklearn(case):
    (k, y, p), = case
    y_t, p_t = torch.tensor(y), torch.tensor(p)
    assert metrics.accuracy(p_t, y_t) == pytest.approx(skm.accuracy_score(y, p), abs=1e-12)
    expected = skm.f1_score(y, p, average="macro", zero_division=0)
    assert metrics.macro_f1(p_t, y_t, k) == pytest.approx(expected, abs=1e-12)
    logits = torch.nn.functional.one_hot(p_t, k).double() * 3 + 0.1  # argmax = p
    got = metrics.compute("classification", logits, y_t, k)
    assert got == pytest.approx({"accuracy": skm.accuracy_score(y, p), "macro_f1": expected}, abs=1e-12)


def test_macro_f1_counts_only_classes_that_occur():
    # class 2 never occurs: sklearn averages over {0, 1} only
    y, p = [0, 0, 1, 1], [0, 1, 1, 1]
    f1 = metrics.macro_f1(torch.tensor(p), torch.tensor(y), num_classes=3)
    assert f1 == pytest.approx(skm.f1_score(y, p, average="macro")) == pytest.approx((2 / 3 + 0.8) / 2)
    # a class predicted but absent from the targets counts with F1 = 0
    y, p = [0, 0, 0], [0, 2, 0]
    assert metrics.macro_f1(torch.tensor(p), torch.tensor(y), 3) == pytest.approx(
        skm.f1_score(y, p, average="macro", zero_division=0)) == pytest.approx(0.4)


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 40), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_regression_metrics_match_sklearn(n, k, seed):
    rng = np.random.default_rng(seed)
    y = rng.normal(size=(n, k))
    p = y + rng.normal(scale=0.5, size=(n, k))
    got = metrics.compute("regression", torch.from_numpy(p), torch.from_numpy(y))
    assert got["mse"] == pytest.approx(skm.mean_squared_error(y, p), rel=1e-12)
    assert got["mae"] == pytest.approx(skm.mean_absolute_error(y, p), rel=1e-12)
    assert got["r2"] == pytest.approx(skm.r2_score(y, p), rel=1e-10, abs=1e-12)


def test_r2_with_a_constant_target_follows_sklearn():
    y = np.array([[2.0, 1.0], [2.0, 2.0], [2.0, 3.0]])
    for p in (y.copy(), y + np.array([[0.5, 0.0]])):
        assert metrics.r2(torch.from_numpy(p), torch.from_numpy(y)) == pytest.approx(skm.r2_score(y, p))
    assert metrics.r2(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0])) == 1.0


def test_confusion_matrix_rows_are_targets():
    cm = metrics.confusion_matrix(torch.tensor([1, 1, 0, 2]), torch.tensor([0, 1, 0, 2]), 3)
    assert cm.tolist() == skm.confusion_matrix([0, 1, 0, 2], [1, 1, 0, 2], labels=[0, 1, 2]).tolist()
