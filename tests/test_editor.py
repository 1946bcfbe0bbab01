"""The analysis behind the language server, on half-written text: completion per slot and body kind (derived from
the registry's and the checker's own tables), every model's errors at once, hover and definition."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rpn2c.check.elaborate import OP_FAMILIES
from rpn2c.components.registry import REGISTRY, SLOT_FAMILIES, lookup
from rpn2c.runtime import analysis, editor, symbols

ROOT = Path(__file__).resolve().parents[1]

BODIES = {  # a spec with the cursor at `|` inside each kind of body
    "head": "model m {\n  input x: vector[B, 4]\n  y = head(x) {\n    |\n  }\n  return y\n}\n",
    "compress": "model m {\n  input x: vector[B, 4]\n  y = compress(x) {\n    |\n  }\n  return y\n}\n",
    "layer": ("model m {\n  input x: vector[B, 4]\n  y = layer(x) {\n    head a { out = 2 }\n    |\n  }\n"
              "  return y\n}\n"),
    "decl": "model m {\n  input x: vector[B, 4]\n  y = layer(x) {\n    head a {\n      |\n    }\n  }\n  return y\n}\n",
    "recurrent": "model m {\n  input x: sequence[B, T, 4]\n  y = recurrent(x) {\n    |\n  }\n  return y\n}\n",
}


def canonical(families: tuple[str, ...]) -> set[str]:
    """Every component of ``families`` by its own name (aliases left out)."""
    return {e.cls.name for f in families for e in REGISTRY[f].values()}


def assert_each_component_once(labels: list[str], families: tuple[str, ...]) -> None:
    """Each component once under its name; an alias only when it is a name of its own (``max_pool``), never the
    name with words added (``chebyshev_expansion``) or misspelt (``harr``); no label twice."""
    assert len(labels) == len(set(labels)) and canonical(families) <= set(labels)
    for label in labels:
        entry = lookup(label, families)
        assert entry is not None and (label == entry.cls.name or editor.distinct_alias(label, entry.cls.name))


def complete(text: str) -> list[str]:
    before = text[:text.index("|")]
    line, col = before.count("\n"), len(before) - (before.rfind("\n") + 1)
    return [c.label for c in editor.complete(text.replace("|", "", 1), line, col)]


@pytest.mark.parametrize("slot", sorted(SLOT_FAMILIES))
def test_every_slot_completes_to_exactly_its_families_components(slot):
    kind = next(k for k, keys in editor.SETTING_KEYS.items() if slot in keys)
    labels = complete(BODIES[kind].replace("|", f"{slot} = |"))
    assert_each_component_once(labels, SLOT_FAMILIES[slot])
    other = {n for f in REGISTRY if f not in SLOT_FAMILIES[slot] for n in REGISTRY[f]} - set(labels)
    assert other  # a component of another family is left out
    partial = complete(BODIES[kind].replace("|", f"{slot} = {labels[0][:2]}|"))
    assert partial == labels  # the client filters by the word being typed


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_each_body_completes_its_setting_keys(kind):
    labels = complete(BODIES[kind])
    assert set(labels) - {"head"} == set(editor.SETTING_KEYS[kind])
    assert ("head" in labels) == (kind == "layer")  # a layer declares heads
    first = editor.SETTING_KEYS[kind][0]
    given = complete(BODIES[kind].replace("|", f"{first} = identity\n    |"))
    assert first not in given and len(given) == len(labels) - 1


def test_list_settings_complete_processing_and_calls_complete_their_hyper_parameters():
    text = BODIES["head"].replace("|", "post = [relu, |]")
    assert_each_component_once(complete(text), SLOT_FAMILIES["post"])
    text = BODIES["head"].replace("|", "kappa = chebyshev(|)")
    assert complete(text) == list(REGISTRY["expansion"]["chebyshev"].schema.model_fields)
    text = BODIES["head"].replace("|", "post = [dropout(|)]")
    assert complete(text) == list(REGISTRY["processing"]["dropout"].schema.model_fields)


def test_body_top_level_and_value_positions():
    lib = "block enc(d = 4, heads) {\n  input x\n  return x\n}\n"
    assert complete("|") == list(editor.TOP_KEYWORDS)
    assert complete(lib + "model m {\n  |\n}\n") == list(editor.BODY_KEYWORDS)
    value = complete(lib + "model m {\n  input x: vector[B, 4]\n  y = |\n}\n")
    assert value[:len(editor.VALUE_KEYWORDS)] == list(editor.VALUE_KEYWORDS) and "enc" in value
    assert canonical(OP_FAMILIES) <= set(value) and len(value) == len(set(value))
    assert complete(lib + "model m {\n  input x: vector[B, 4]\n  y = enc(x, |)\n}\n") == ["d", "heads"]


def test_check_text_reports_every_models_errors_and_accepts_a_block_library():
    two = ("model a {\n  input x: vector[B, 4]\n  y = head(x) { kappa = chebyshevv }\n  return y\n}\n"
           "model b {\n  input x: vector[B, 4]\n  y = head(x) { out = 2  psi = nope }\n  return y\n}\n")
    diags = editor.check_text(two, "two.rpn")
    assert [(d.code, d.span.line) for d in diags] == [("E0201", 3), ("E0201", 8)]
    assert diags[0].suggestion == "did you mean 'chebyshev'?"
    library = "block enc {\n  input x\n  return x\n}\n"
    assert editor.check_text(library, "lib.rpn") == []
    assert [d.code for d in editor.check_text(library + library, "lib.rpn")] == ["E0203"]
    assert [d.code for d in editor.check_text("model m { input x: vector[B, 4] return x", "m.rpn")] == ["E0103"]


def test_the_token_stream_survives_characters_the_grammar_refuses():
    toks = editor.tokens("model m { y = head(x) { kappa = 'cheb' @ 2 }")
    assert [str(t) for t in toks][-5:] == ["kappa", "=", "cheb", "2", "}"]
    assert toks[-3].column == 34  # positions are unchanged


def test_hover_and_definition_on_half_written_text():
    text = "model m(k = 3) {\n  input x: vector[B, 4]\n  y = head(x) {\n    kappa = chebyshev(d = k"
    h = editor.hover(text, 3, 16)
    assert h is not None and h.markdown.startswith("**chebyshev** — expansion") and (h.col, h.end_col) == (12, 21)
    hp = editor.hover(text, 3, 23)
    assert hp is not None and hp.markdown.startswith("**d**:")
    (param,) = editor.definition(text, 3, 27)
    assert (param.path, param.line, param.col) == (None, 0, 8)
    (value,) = editor.definition(text, 2, 11)
    assert (value.line, value.col) == (1, 8)
    assert editor.hover(text, 0, 0) is None  # a keyword


SHIPPED = sorted([*ROOT.joinpath("specs").rglob("*.rpn"), *ROOT.joinpath("examples", "specs").rglob("*.rpn")])


@settings(max_examples=40)
@given(spec=st.sampled_from(SHIPPED), cut=st.floats(0, 1), where=st.floats(0, 1), junk=st.sampled_from(
    ["", "=", "(", "{", "[", ",", ".", "'", "%", '"', "head", "kappa = ", "chebyshev(d = "]))
def test_half_written_text_never_breaks_the_analysis(spec, cut, where, junk):
    """Every prefix of a shipped spec, with something half-typed appended: the analysis answers and never raises;
    the checker reports located diagnostics, or the text is a valid spec (then it formats)."""
    full = spec.read_text(encoding="utf-8")
    text = full[:int(cut * len(full))] + junk
    offset = int(where * len(text))
    line, col = text[:offset].count("\n"), offset - (text[:offset].rfind("\n") + 1)
    editor.complete(text, line, col, path=spec)
    editor.hover(text, line, col, path=spec)
    editor.definition(text, line, col, path=spec)
    symbols.document_symbols(text, str(spec))
    symbols.references(text, line, col)
    symbols.signature_help(text, line, col, path=spec)
    diags = editor.check_text(text, str(spec), path=spec)
    assert all(d.code.startswith("E") for d in diags)
    if text != full and not text.strip().startswith("#") and text.strip():
        assert diags or editor.format_text(text) is not None


# ------------------------------------------------------------------------------------------------ checked values
def _shape_comments(text: str) -> dict[str, tuple[str, int | None]]:
    """The ``# inferred shapes`` table a spec carries by hand: node id -> (type, parameter count when a row ends
    with ``= N``)."""
    out, inside = {}, False
    for line in text.splitlines():
        if line.startswith("# inferred shapes"):
            inside = True
            continue
        m = re.match(r"#\s+([\w.]+)\s+(\w+\[[^\]]*\])(.*)$", line) if inside else None
        if m is None:
            inside = inside and line.startswith("#") and line[1:].strip() != ""
            continue
        count = re.search(r"= ([\d,]+)$", m[3].strip())
        if re.match(r"[\d,]+ \+", m[3].strip()):  # `3,211,264 + 65,536`: a sum the row leaves unfinished
            count = None
        out[m[1]] = (m[2], int(count[1].replace(",", "")) if count else None)
    return out


COMMENTED = [p for p in SHIPPED if _shape_comments(p.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("spec", COMMENTED, ids=lambda p: str(p.relative_to(ROOT)))
def test_inlay_labels_give_the_types_the_specs_write_by_hand(spec):
    """Every hand-written ``# inferred shapes`` row is the inlay label of the value that produces that node, and
    its parameter count where the row gives one."""
    text = spec.read_text(encoding="utf-8")
    a = analysis.analyse(text, str(spec), path=spec)
    assert a.diagnostics == [] and a.graphs
    produced = {inst.output: (v, inst) for v in a.values for inst in v.instances if v.kind != "alias"}
    for nid, (typ, count) in _shape_comments(text).items():
        assert nid in produced, (nid, sorted(produced))
        v, inst = produced[nid]
        label = analysis.inlay_label(a, v)
        assert typ in label.split(" · ")[0], (nid, typ, label)
        if count is not None and v.kind != "input":
            assert a.params(inst) == count, (nid, count, label)


def test_a_block_used_twice_has_one_instance_per_use_with_its_own_type_and_count():
    text = ("block enc(d = 4) {\n  input x\n  h = head(x) { out = d }\n  return h\n}\n"
            "model m {\n  input x: vector[B, 3]\n  a = enc(x, d = 5)\n  b = enc(a, d = 7)\n"
            "  c = repeat(3) enc(b, d = 2)\n  return c\n}\n")
    a = analysis.analyse(text, "two.rpn")
    graph = next(iter(a.graphs.values()))
    h = a.value_at(2, 2)
    assert [i.output for i in h.instances] == ["a.h", "b.h", "c.0.h", "c.1.h", "c.2.h"]
    assert analysis.inlay_label(a, h) == (": vector[B, 5] | vector[B, 7] | vector[B, 2] · 20 | 42 | 16 | 6 params "
                                         "(5 uses)")
    c = a.value_at(9, 2)
    assert c.kind == "repeat" and c.instances[0].output == "c.2.h"
    assert a.params(c.instances[0]) == sum(graph.node(f"c.{i}.h").params for i in range(3)) == 16 + 6 + 6
    assert analysis.inlay_label(a, a.value_at(1, 8)) == ": vector[B, 3] | vector[B, 5] | vector[B, 7] | " \
                                                        "vector[B, 2] (5 uses)"  # the block's input


def test_document_symbols_references_and_signatures_on_the_token_stream():
    text = (ROOT / "specs" / "transformer.rpn").read_text(encoding="utf-8")
    (enc, model) = symbols.document_symbols(text)
    assert (enc.name, enc.kind, model.name, model.kind) == ("encoder", "block", "transformer", "model")
    assert [(c.name, c.kind) for c in enc.children] == [
        ("d", "parameter"), ("heads", "parameter"), ("ffn", "parameter"), ("x", "input"), ("attn", "head"),
        ("ff", "head"), ("ff2", "head"), ("y", "op")]
    assert [c.kind for c in model.children][-1] == "block use"
    # a half-written file still has an outline of its definitions
    assert [s.name for s in symbols.document_symbols(text.replace("ff2 = head", "ff2 = = head"))] == ["encoder", "transformer"]
    lines = text.splitlines()
    refs = symbols.references(text, 29, 22)  # `attn` in add(attn, ff2)
    assert [lines[a][b:d] for a, b, _, d in refs] == ["attn"] * 3
    assert len(symbols.references(text, 29, 22, include_declaration=False)) == 2
    typed = "  y = head(x) { kappa = chebyshev(d = 2, "
    sig = symbols.signature_help("model m {\n" + typed, 1, len(typed))
    fields = list(REGISTRY["expansion"]["chebyshev"].schema.model_fields)
    assert [sig.label[a:b].split(":")[0] for a, b, _ in sig.parameters] == fields
    assert sig.active == fields.index("kind")


def test_aliases_offered_are_other_names_and_the_rest_only_respell_the_components_name():
    kappa = set(complete(BODIES["head"].replace("|", "kappa = |")))
    assert {"max_pool", "avg_pool", "mexican_hat_wavelet"} <= kappa  # names a user knows the component by
    assert not {"chebyshev_expansion", "harr", "harr_wavelet", "dog", "incremental_pca", "linear_compression"} & kappa
    fusion = set(complete(BODIES["layer"].replace("|", "fusion = |")))
    assert {"concat", "sum", "prod"} <= fusion and not {"concatenation", "summation", "product"} & fusion
    xi = set(complete(BODIES["head"].replace("|", "xi_instance = |")))
    assert {"gat", "graph_attention"} <= xi and "low_rank_parameterized" not in xi
    # a distance is its kernel, an acronym its words: each pair is one component, offered once
    assert {"canberra_kernel", "euclidean_kernel", "rma_bilinear", "cosine_similarity", "inner_product_kernel"} <= xi
    assert not {"canberra_distance", "euclidean_distance", "random_matrix_adaption_bilinear", "cosine_kernel"} & xi


SPEC_TEXTS = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "specs").rglob("*.rpn"))]


@given(st.data())
def test_completion_never_offers_a_label_twice_anywhere_in_a_shipped_spec_or_its_half_written_prefix(data):
    text = data.draw(st.sampled_from(SPEC_TEXTS))
    offset = data.draw(st.integers(0, len(text)))
    for source in (text, text[:offset]):
        before = source[:offset]
        line, col = before.count("\n"), len(before) - (before.rfind("\n") + 1)
        labels = [c.label for c in editor.complete(source, line, col)]
        assert len(labels) == len(set(labels))


def test_view_output_of_an_input_names_it_and_runs_no_layer():
    """Found by the editor's lane: ``rpn2c.viewOutput`` on a model's input (``x`` in ``head(x)`` of highway.rpn)
    raised ``KeyError: 'x'``, an input having no module in the generated program. It answers with the model's
    header line and no layer; a layer beside it still gets its own lines."""
    text = (ROOT / "examples" / "specs" / "highway.rpn").read_text(encoding="utf-8")
    a = analysis.analyse(text, "highway.rpn")
    x, h = a.value_at(13, 8), a.value_at(14, 2)
    assert (x.name, x.kind, h.name) == ("x", "input", "h")
    out = analysis.view_output(a, x)
    assert out["title"].startswith("x (input") and out["explain"] == "" and out["code"] == "# model highway: x (x)"
    assert "h = self.h" in analysis.view_output(a, h)["code"]
