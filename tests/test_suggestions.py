"""Did-you-mean and synonym help: what a misspelt or foreign name most likely meant, for every unknown-name
diagnostic of the checker and the command line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rpn2c
from rpn2c.components.registry import REGISTRY, SLOT_FAMILIES, SYNONYMS, unknown_hint
from rpn2c.errors import SpecError, close_names, did_you_mean
from rpn2c.runtime.cli import main

ROOT = Path(__file__).resolve().parents[1]
QUICK_FIX = re.compile(r"did you mean '([A-Za-z_][A-Za-z0-9_.]*)'\?")  # the editor's quick-fix reading


def diagnostics(text: str) -> list:
    with pytest.raises(SpecError) as info:
        rpn2c.check(text, "t.rpn")
    return list(info.value.diagnostics)


def only(text: str):
    (d,) = diagnostics(text)
    return d


# ------------------------------------------------------------------------------------------------ the matcher
@pytest.mark.parametrize("name, candidates, want", [
    ("h3", ["h1", "h2", "x"], ["h1", "h2"]),            # short names: one edit, both equally close
    ("hiden", ["hidden", "x"], ["hidden"]),
    ("wien", ["wine", "iris"], ["wine"]),              # two neighbours swapped is one edit
    ("Hid", ["hid", "h"], ["hid"]),                     # case first
    ("attn", ["y.attn", "y.ff"], ["y.attn"]),           # a block layer by its last part
    ("relu6x", ["relu6", "relu", "elu"], ["relu6"]),    # fewest edits wins over more
    ("y", ["x", "z"], []),                              # one letter: any other letter is no evidence
    ("zzzz", ["hidden", "out"], []),
])
def test_close_names(name, candidates, want):
    assert close_names(name, candidates) == want


IDENT = st.from_regex(r"[a-z][a-z0-9_]{2,11}", fullmatch=True)


@given(IDENT, st.data())
def test_one_edit_of_a_name_finds_it(name, data):
    """Delete, insert, substitute or swap one character: the original is the suggestion (a quick fix)."""
    i = data.draw(st.integers(0, len(name) - 1))
    c = data.draw(st.sampled_from("abcxyz_9"))
    kind = data.draw(st.sampled_from(["delete", "insert", "substitute", "swap"]))
    edited = {"delete": name[:i] + name[i + 1:], "insert": name[:i] + c + name[i:],
              "substitute": name[:i] + c + name[i + 1:],
              "swap": name[:i] + name[i + 1:i + 2] + name[i:i + 1] + name[i + 2:]}[kind]
    if edited == name:
        return
    hint = did_you_mean(edited, [name, "completely_different_name"])
    assert QUICK_FIX.fullmatch(hint)[1] == name


def test_names_tied_for_best_are_listed_and_offer_no_quick_fix():
    hint = did_you_mean("h3", ["h1", "h2"])
    assert hint == "did you mean 'h1' or 'h2'?" and QUICK_FIX.search(hint) is None


# ------------------------------------------------------------------------------------------------ in specs
def test_a_short_value_name_gets_a_suggestion():
    d = only("model m { input x: vector[B, 4]\n h1 = head(x) { out = 4 }\n h2 = head(h1) { out = 4 }\n"
             " y = head(h3) { out = 2 }\n return y }")
    assert d.code == "E0202" and d.suggestion == "did you mean 'h1' or 'h2'?"


def test_a_misspelt_tie_target_is_suggested():
    d = only("model m { input x: vector[B, 4]\n a1 = head(x) { out = 4 }\n a2 = head(a1) { out = 4 tie = a11 }\n"
             " return a2 }")
    assert d.code == "E0202" and d.suggestion == "did you mean 'a1'?"


def test_a_misspelt_repeat_keyword_is_suggested():
    d = only("block enc(w = 4) { input x\n y = head(x) { out = w }\n return y }\n"
             "model m { input x: vector[B, 4]\n y = repeat(2, tei = true) enc(x)\n return y }")
    assert d.code == "E0302" and d.suggestion == "did you mean 'tie'?"


def test_swish_is_silu():
    """swish (TensorFlow, Keras, JAX, Hugging Face) is exactly x·σ(x): an alias, the same program as silu."""
    spec = "model m {{ input x: vector[B, 4]\n y = head(x) {{ out = 4 post = [{}] }}\n return y }}"
    swish, silu = rpn2c.check(spec.format("swish")), rpn2c.check(spec.format("silu"))
    assert swish.content_hash() == silu.content_hash()
    assert swish.node("y").layer.post[0].name == "silu"


@pytest.mark.parametrize("name, help_", [
    ("sigmoid_linear_unit", "did you mean 'silu'? ('sigmoid_linear_unit' is its name in other libraries)"),
    ("gelu_tanh", "rpn2c writes 'gelu_tanh' as gelu(approximate = \"tanh\")"),
    ("gelu_new", "rpn2c writes 'gelu_new' as gelu(approximate = \"tanh\")"),
    ("hsigmoid", "did you mean 'hardsigmoid'? ('hsigmoid' is its name in other libraries)"),  # not 'sigmoid'
    ("drop_path", "did you mean 'stochastic_depth'? ('drop_path' is its name in other libraries)"),
    ("lrelu", "did you mean 'leaky_relu'? ('lrelu' is its name in other libraries)"),  # not 'relu'
    ("leakyrelu", "did you mean 'leaky_relu'?"),
])
def test_other_libraries_names_of_an_activation(name, help_):
    d = only(f"model m {{ input x: vector[B, 4]\n y = head(x) {{ out = 4 post = [{name}] }}\n return y }}")
    assert d.code == "E0201" and d.suggestion == help_


def test_an_attention_by_another_name_is_not_graph_attention():
    d = only("model m { input x: sequence[B, T, 4]\n y = head(x) { xi_instance = multihead_attention out = 4 }\n"
             " return y }")
    assert d.code == "E0201" and "attention(rank = r)" in d.suggestion and "graph" not in d.suggestion


def test_sum_as_an_operation_is_add():
    """'sum' is a fusion (E0301 in an operation's place); the help names the operation that sums: add."""
    d = only("model m { input x: vector[B, 4]\n y = sum(x, x)\n return y }")
    assert d.code == "E0301" and QUICK_FIX.search(d.suggestion)[1] == "add"


def test_every_synonym_is_written_with_a_registered_entry_and_shadows_none():
    for fam, table in SYNONYMS.items():
        for other, how in table.items():
            head = re.match(r"[A-Za-z_][A-Za-z0-9_]*", how)[0]
            assert head in REGISTRY[fam], (fam, other, how)
            assert other not in REGISTRY[fam] and other == other.lower(), (fam, other)


@pytest.mark.parametrize("fam, other", [(f, o) for f, t in SYNONYMS.items() for o in t
                                        if f in ("processing", "cell", "interdependence")])
def test_the_written_form_of_a_synonym_checks(fam, other):
    """The text the help offers is a spec that checks, in the slot the foreign name was written in."""
    how = re.match(r"\w+(\([^)]*\))?", SYNONYMS[fam][other])[0]  # the call, without the words after it
    for symbol, value in (("rank = r", "rank = 2"), ("edges = E", "edges = e"), ("order = k", "order = 1"),
                          ("grid = [gh, gw]", "grid = [2, 2]"), ("size = w", "size = 2"), ("shift = s", "shift = 1")):
        how = how.replace(symbol, value)
    body = {"processing": f"y = head(x) {{ out = 4 post = [{how}] }}",
            "cell": f"y = recurrent(x) {{ cell = {how} out = 4 }}",
            "interdependence": f"y = head(x) {{ xi_instance = {how} out = 4 }}"}[fam]
    inputs = "input x: nodes[N, 4]\n input e: edges[2, E]" if "edges = e" in how else \
        "input x: sequence[B, 4, 4]" if "grid = " in how else "input x: sequence[B, T, 4]"
    rpn2c.check(f"model m {{ {inputs}\n {body}\n return y }}")
    assert unknown_hint(other, SLOT_FAMILIES["post"] if fam == "processing" else (fam,)) is not None


def test_pool_items_how_last_points_to_last():
    d = only('model m { input x: sequence[B, T, 4]\n y = pool_items(x, how = "last")\n return y }')
    assert d.code == "E0303" and "`last(x)`" in d.suggestion
    rpn2c.check("model m { input x: sequence[B, T, 4]\n y = last(x)\n return y }")  # and that checks


def test_a_misspelt_literal_value_is_suggested_in_the_spec_quotes():
    d = only('model m { input x: sequence[B, T, 4]\n y = pool_items(x, how = "maen")\n return y }')
    assert d.suggestion == 'did you mean "mean"?' and QUICK_FIX.search(d.suggestion) is None  # not a name


# ------------------------------------------------------------------------------------------------ command line
def test_components_cli_names_the_synonym(capsys):
    assert main(["components", "gelu_tanh"]) == 2
    assert "gelu(approximate = \"tanh\")" in capsys.readouterr().err
    assert main(["components", "swish"]) == 0
    assert capsys.readouterr().out.startswith("silu — processing")


def test_show_finds_a_block_layer_by_its_own_name():
    from rpn2c.runtime.layer_matrix import ViewError, check_matrix_layer
    from rpn2c.train.config import TrainError
    from rpn2c.train.interdependence import check_layer

    graph = rpn2c.check_file(ROOT / "specs" / "transformer.rpn")
    with pytest.raises(ViewError, match=r"has no layer 'attn'; did you mean 'y\.attn'\?"):
        check_matrix_layer(graph, "attn")
    with pytest.raises(TrainError, match=r"has no layer 'ff'; did you mean 'y\.ff'\?"):
        check_layer(graph, "ff")


def test_param_names_on_the_command_line_are_suggested():
    with pytest.raises(SpecError) as info:
        rpn2c.check_file(ROOT / "specs" / "mlp.rpn", params={"hiden": 3})
    assert info.value.diagnostics[0].suggestion == "did you mean 'hidden'?"


@pytest.mark.parametrize("setting, name, message, hint", [
    ("kappa = relu", "relu", "'relu' is a processing component; 'kappa' takes expansion or compression",
     "'relu' goes in `pre` or `post`, e.g. `post = [relu]`"),
    ("kappa = grid_patch(size = 3)", "grid_patch",
     "'grid_patch' is an interdependence component; 'kappa' takes expansion or compression",
     "e.g. `xi_attribute = grid_patch`"),
    ("psi = concat", "concat", "'concat' is a fusion component; 'psi' takes reconciliation",
     "'concat' goes in `fusion`, e.g. `fusion = concat`"),
])
def test_a_component_in_the_wrong_slot_names_the_slots_that_take_it(setting, name, message, hint):
    """E0301 reads as English (an interdependence) and its help names the settings that take the component."""
    d = only(f"model m {{ input x: vector[B, 4]\n y = head(x) {{ {setting}  out = 4 }}\n return y }}")
    assert d.code == "E0301" and d.message == message
    assert hint in d.suggestion and name in d.suggestion


def test_a_recurrent_setting_in_a_head_points_to_recurrent():
    d = only("model m { input x: sequence[B, T, 4]\n y = head(x) { cell = gru  out = 4 }\n return y }")
    assert d.code == "E0304" and "is a setting of a recurrent layer: `h = recurrent(x)" in d.suggestion


def test_a_block_compiled_as_the_model_says_its_inputs_come_from_calls():
    """``--model enc`` (``model="enc"``) on a block with untyped inputs: the help names the file's model."""
    text = ("block enc(d = 4) {\n  input x\n  y = head(x) { out = d }\n  return y\n}\n"
            "model m {\n  input x: vector[B, 4]\n  y = enc(x)\n  return y\n}\n")
    with pytest.raises(SpecError) as info:
        rpn2c.check(text, "t.rpn", model="enc")
    (d,) = info.value.diagnostics
    assert (d.code, d.span.line) == ("E0311", 2)
    assert d.suggestion == "'enc' is a block: its inputs take their types from each call; compile a model instead ('m')"
