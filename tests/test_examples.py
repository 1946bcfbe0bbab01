"""The example comparisons (examples/*.py) still run: one seed, one epoch, in-process.

Each script's ``main`` writes its JSON; we check that every experiment has an RPN 2 spec, a backbone and an MLP
with finite metrics in range, and that the parameter counts are the ones the specs and modules imply (the RPN 2
rewrites of CNN, GCN, Transformer and RNN have exactly their backbone's parameter count).
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _load(name: str):
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(f"rpn2c_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(name: str, tmp_path: Path, *extra: str) -> dict:
    module = _load(name)
    out = tmp_path / f"{name}.json"
    threads = torch.get_num_threads()
    try:
        module.main(["--seeds", "1", "--epochs", "1", "--out", str(out), *extra])
    except ImportError as err:  # an optional data package (scikit-learn, statsmodels, sktime) is missing
        pytest.skip(f"{name}: {err}")
    finally:
        torch.set_num_threads(threads)
    result = json.loads(out.read_text())
    assert result["script"] == name
    assert result["machine"]["torch"] == torch.__version__
    assert result["experiments"], "no experiment ran"
    for exp in result["experiments"]:
        roles = {m["role"] for m in exp["models"].values()}
        assert {"RPN 2 spec", "backbone", "MLP"} <= roles, (exp["dataset"], roles)
        assert exp["epochs"] == 1 and exp["seeds"] == [0]
        assert exp["n_train"] > 0 and exp["n_test"] > 0
        for model_name, m in exp["models"].items():
            assert len(m["runs"]) == 1 and m["metric_std"] == 0.0
            v = m["metric_mean"]
            assert math.isfinite(v), (exp["dataset"], model_name, v)
            if exp["metric"] == "accuracy":
                assert 0.0 <= v <= 1.0
            else:
                assert v >= 0.0
            assert 10 <= m["params"] <= 200_000, (exp["dataset"], model_name, m["params"])
            assert m["seconds_mean"] > 0
    return result


def _params(exp: dict) -> dict[str, int]:
    return {k: m["params"] for k, m in exp["models"].items()}


def test_cnn_digits(tmp_path):
    (exp,) = _run("cnn_digits", tmp_path)["experiments"]
    p = _params(exp)
    # conv 1->16 (160) + conv 16->32 (4,640) + fc 128->64 (8,256) + fc 64->10 (650)
    assert p["rpn2"] == p["cnn"] == 13_706
    assert p["mlp"] == 64 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10
    assert exp["n_train"] + exp["n_test"] == 1797


def test_chain_timeseries(tmp_path):
    result = _run("chain_timeseries", tmp_path)
    by_name = {e["dataset"]: e for e in result["experiments"]}
    assert set(by_name) == {"sunspots", "italy_power"}
    assert by_name["sunspots"]["metric"] == "mse" and by_name["italy_power"]["metric"] == "accuracy"
    for exp in result["experiments"]:
        p = _params(exp)
        assert p["rpn2_rec"] == p["rnn"]  # the exact recurrent layer has nn.RNN's weights
        assert p["gru"] > p["rnn"]
    # italy_power, hidden 32: embed 64 + 3 heads of 32x32+32 + output 33*2
    assert _params(by_name["italy_power"])["rpn2_mean"] == 64 + 3 * 1056 + 66


def test_graph_nodes(tmp_path):
    result = _run("graph_nodes", tmp_path, "--datasets", "karate")
    (exp,) = result["experiments"]
    p = _params(exp)
    assert p["rpn2"] == p["gcn"] == p["mlp"] == 34 * 16 + 16 + 16 * 2 + 2
    assert p["rpn2_gat"] == 34 * 16 + 16 + 2 * 16 * 8 + 16 * 2 + 2  # + W_q, W_k of rank 8
    assert exp["n_train"] + exp["n_test"] == 34


def test_graph_rpn2_equals_gcn(tmp_path):
    """Same seed, same init order, same maths: the compiled GCN spec and the plain-torch GCN agree exactly."""
    module = _load("graph_nodes")
    exp = module.experiment_factory("karate", None)(0)
    out = {}
    for name in ("rpn2", "gcn"):
        torch.manual_seed(0)
        model = exp.models[name][0]().eval()
        names = getattr(model, "input_names", None) or ["x", "edges"]
        out[name] = model(**{k: exp.train.inputs[k] for k in names})
    torch.testing.assert_close(out["rpn2"], out["gcn"], rtol=1e-5, atol=1e-6)


def test_attention_sequence(tmp_path):
    result = _run("attention_sequence", tmp_path)
    assert {e["dataset"] for e in result["experiments"]} == {"italy_power", "basic_motions"}
    for exp in result["experiments"]:
        p = _params(exp)
        assert p["rpn2"] == p["transformer"]  # the encoder block written as heads = nn.TransformerEncoderLayer


def test_spec_override_rejects_unknown_parameter():
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    import _common

    with pytest.raises(_common.rpn2c.SpecError, match="no parameter"):
        _common.spec_model("cnn_digits.rpn", nope=3)()
    assert _common.count_params(_common.spec_model("cnn_digits.rpn", classes=3)()) == 13_706 - 7 * 65
