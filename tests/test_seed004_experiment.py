"""Seed 004's experiment command (examples/seed004_matrix_forms.py) on a small fixture: the first 48 training and
test samples of each shipped set, two epochs. The two forms (reference lowering = the sparse matrices, default
lowering = the native kernels) start from the same weights, so they score the same before training, and they follow
the same batches; the JSON holds both forms' figures side by side; the convergence rule is the stated one."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tests.test_examples import _load


def test_converged_is_the_first_epoch_near_the_best():
    module = _load("seed004_matrix_forms")
    assert module.converged([0.5, 0.80, 0.905, 0.91, 0.90], True) == 3  # within 0.01 of 0.91
    assert module.converged([3.0, 1.04, 1.2, 1.0], False) == 2  # within 5 % of 1.0
    assert module.converged([0.7], True) == 1


def test_both_forms_side_by_side_on_a_fixture(tmp_path):
    module = _load("seed004_matrix_forms")
    out = tmp_path / "seed004.json"
    threads = torch.get_num_threads()
    try:
        result = module.main(["--seeds", "1", "--epochs", "2", "--limit", "48", "--out", str(out)])
    except ImportError as err:  # an optional data package (scikit-learn, statsmodels) is missing
        pytest.skip(str(err))
    finally:
        torch.set_num_threads(threads)
    assert json.loads(out.read_text(encoding="utf-8"))["backbones"] == json.loads(json.dumps(result["backbones"]))
    assert [b["backbone"] for b in result["backbones"]] == ["cnn", "rnn", "transformer"]
    for b in result["backbones"]:
        assert b["n_train"] == b["n_test"] == 48 and b["epochs"] == 2
        native, matrix = b["runs"][0]["native"], b["runs"][0]["matrix"]
        assert native["params"] == matrix["params"] == b["forms"]["native"]["params"]
        assert len(native["history"]) == len(matrix["history"]) == 3
        # the same function before training (float32: the matrices and the kernels round differently)
        assert matrix["history"][0] == pytest.approx(native["history"][0], rel=1e-4, abs=1e-6)
        for form in (native, matrix):
            assert 1 <= form["epochs_to_converge"] <= 2 and math.isfinite(form["metric"])
            if b["metric"] == "accuracy":
                assert 0 <= form["metric"] <= 1
        # the same batches from the same start: after two epochs the forms are still close
        assert matrix["metric"] == pytest.approx(native["metric"], rel=0.05, abs=0.05)
