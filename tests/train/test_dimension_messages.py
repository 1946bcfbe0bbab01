"""A spec/data size mismatch names the model parameter that sets the dimension and the ``--param`` that fixes it
(rpn2c.runtime.dimension_fit): the suggestion, applied, makes the data bind."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rpn2c
from rpn2c.data import load
from rpn2c.runtime.dimension_fit import fit_dimension
from rpn2c.train.binding import DimMismatch, bind
from tests.train.helpers import ROOT, run_cli

MLP = ROOT / "specs" / "mlp.rpn"


def _input_width(g):
    return g.node("x").type.shape[-1]


@pytest.mark.parametrize("params, message, fixed", [
    ({}, "dimension 'features' is 30 in the spec but 13 in the data (samples of shape [13], spec [30]): "
         "set it with --param features=13", {"features": 13}),
    ({"features": 13}, "output 'y' of {spec} is vector[B, 2], but dataset 'wine' has 3 classes: its last dimension "
                       "'classes' must be 3: set it with --param classes=3", {"features": 13, "classes": 3}),
])
def test_train_names_the_parameter_and_the_param_that_fixes_it(capsys, tmp_path, params, message, fixed):
    given_ = [a for k, v in params.items() for a in ("--param", f"{k}={v}")]
    code, _, err = run_cli(capsys, "train", MLP, "--data", "wine", *given_, "--out", tmp_path / "run", "--quiet")
    assert code == 1 and message.format(spec=MLP) in err and "dimension F" not in err
    try:  # the dimension named binds with the suggested value (the input's fix leaves the output's)
        bind(rpn2c.check_file(MLP, params=fixed), load("wine"))
    except DimMismatch as exc:
        assert "features" in fixed and "classes" not in fixed and exc.value is None


@pytest.mark.parametrize("data, features", [("wine", 13), ("iris", 4)])
def test_every_setting_the_data_needs_is_named_at_once(capsys, tmp_path, data, features):
    """Features and classes both differ from the data: one run names both settings, and with them the data binds
    (before, the second came only from a second run)."""
    code, _, err = run_cli(capsys, "train", MLP, "--data", data, "--out", tmp_path / "run", "--quiet")
    assert code == 1 and f"set it with --param features={features}; the data also needs --param classes=3" in err
    bind(rpn2c.check_file(MLP, params={"features": features, "classes": 3}), load(data))
    code, _, err = run_cli(capsys, "show", MLP, "--data", data)
    assert code == 1 and "the data also needs --param classes=3" in err


def test_a_size_written_without_a_parameter_keeps_its_axis_name(capsys, tmp_path):
    spec = tmp_path / "m.rpn"
    spec.write_text("model m(hidden = 8) {\n  input x: vector[B, 5]\n  y = head(x) { out = 3 }\n  return y\n}\n")
    code, _, err = run_cli(capsys, "train", spec, "--data", "iris", "--out", tmp_path / "run", "--quiet")
    assert code == 1 and "dimension F is 5 in the spec but 4 in the data" in err and "--param" not in err


def test_a_parameter_whose_data_size_does_not_check_says_why(capsys, tmp_path):
    code, _, err = run_cli(capsys, "train", ROOT / "specs" / "transformer.rpn", "--data", "sunspots", "--out",
                           tmp_path / "run", "--quiet")
    assert code == 1 and "dimension 'd' is 32 in the spec but 1 in the data" in err
    assert "--param d=1 does not check: bad value for 'rank' of 'low_rank_bilinear'" in err


def test_eval_says_the_checkpoint_holds_the_parameter(capsys, tmp_path):
    spec = tmp_path / "m.rpn"
    spec.write_text("model m(features = 4, classes = 3) {\n  input x: vector[B, features]\n"
                    "  y = head(x) { out = classes }\n  return y\n}\n")
    code, _, err = run_cli(capsys, "train", spec, "--data", "iris", "--epochs", "1", "--out", tmp_path / "run",
                           "--quiet")
    assert code == 0, err
    code, _, err = run_cli(capsys, "eval", spec, tmp_path / "run" / "checkpoint.pt", "--data", "wine")
    assert code == 1 and "dimension 'features' is 4 in the spec but 13 in the data" in err
    assert "the checkpoint was trained with features = 4 (train one with --param features=13 for this data)" in err


# ------------------------------------------------------------------------------------------------ the fit itself
def _spec(tmp_path, width: str, params: str) -> str:
    path = tmp_path / "w.rpn"
    path.write_text(f"model w({params}) {{\n  input x: vector[B, {width}]\n  y = head(x) {{ out = 2 }}\n"
                    "  return y\n}\n")
    return str(path)


@settings(max_examples=20)
@given(a=st.integers(1, 4), c=st.integers(0, 5), p0=st.integers(1, 6), have=st.integers(1, 40))
def test_a_dimension_linear_in_one_parameter_is_solved(tmp_path_factory, a, c, p0, have):
    """``vector[B, a·p + c]``: p is named; the fix is (have − c)/a where that is a whole number >= 1, else none."""
    want = a * p0 + c
    if want == have:
        return
    spec = _spec(tmp_path_factory.mktemp("fit"), f"{a} * p + {c}", f"p = {p0}, unused = 7")
    fit = fit_dimension(spec, "w", None, {}, _input_width, want, have)
    solvable = (have - c) % a == 0 and (have - c) // a >= 1
    assert fit.param == "p" and fit.value == ((have - c) // a if solvable else None)


def test_a_dimension_two_parameters_set_names_neither(tmp_path):
    spec = _spec(tmp_path, "a + b", "a = 2, b = 3")
    assert fit_dimension(spec, "w", None, {}, _input_width, 5, 9).param is None


def test_the_given_parameters_are_kept_while_one_moves():
    """The transformer's d = 1 leaves no rank for 4 heads; with --param heads=1 given it checks, and is the fix."""
    spec = str(ROOT / "specs" / "transformer.rpn")
    assert fit_dimension(spec, "transformer", None, {"heads": 1}, _input_width, 32, 1).value == 1
    fit = fit_dimension(spec, "transformer", None, {}, _input_width, 32, 1)
    assert (fit.param, fit.value) == ("d", None) and "rank" in fit.why_not


def test_show_names_the_parameter_too(capsys):
    code, _, err = run_cli(capsys, "show", MLP, "--data", "wine")
    assert code == 1 and "dimension 'features' is 30 in the spec but 13 in the data" in err
    assert "set it with --param features=13" in err and "dimension F" not in err
