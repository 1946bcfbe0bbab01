"""Rename, semantic tokens, folding ranges and workspace symbols on the shipped specs and on half-written text:
renames agree with references and keep every spec's model, colours and folds agree with the grammar's own lexer."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rpn2c
from rpn2c.errors import Diagnostic, Span
from rpn2c.runtime import editor, rename, roles, structure, symbols
from rpn2c.runtime.lsp import SEMANTIC_LEGEND
from rpn2c.runtime.workspace import Workspace
from rpn2c.syntax.parser import _parser

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "specs").rglob("*.rpn")) + sorted((ROOT / "examples" / "specs").rglob("*.rpn"))
TEXTS = {p: p.read_text(encoding="utf-8") for p in SPECS}
TRANSFORMER = ROOT / "specs" / "transformer.rpn"


def at(text: str, marker: str) -> tuple[int, int]:
    """The 0-based position right after the first ``marker``."""
    idx = text.index(marker) + len(marker)
    return text[:idx].count("\n"), idx - (text[:idx].rfind("\n") + 1)


def declarations(kinds=("value", "parameter")) -> list[tuple[Path, int, int, str]]:
    """Every declared value or parameter of the shipped specs: (file, line, col, kind of its definition)."""
    out = []
    for path, text in TEXTS.items():
        n = roles.names(text)
        for i, r in n.roles.items():
            if r.declaration and r.kind in kinds:
                t = n.tokens[i]
                out.append((path, t.line - 1, t.column - 1, n.definitions[r.scope][0]))
    return out


DECLARED = declarations()


# ------------------------------------------------------------------------------------------------ rename
@given(st.sampled_from([d for d in DECLARED if d[3] == "model" or d[2] > 0]))
def test_renaming_a_value_edits_exactly_its_references(decl):
    """A value, or a model's parameter: the places rename edits are the places references finds."""
    path, line, col, kind = decl
    text = TEXTS[path]
    target, _ = rename.target(text, line, col, path)
    if target.kind == "parameter" and kind == "block":
        return  # a block's parameter is also each call's keyword argument: below
    edits = rename.rename(text, line, col, "renamed_name", path)
    assert sorted(r for r, _ in edits[None]) == sorted(symbols.references(text, line, col))
    assert set(edits) == {None}


@given(st.sampled_from(DECLARED))
def test_a_renamed_spec_checks_to_the_same_model(decl):
    path, line, col, _ = decl
    text = TEXTS[path]
    edits = rename.rename(text, line, col, "renamed_name", path)
    renamed = rename.apply(text, edits[None])
    assert renamed != text and editor.check_text(renamed, str(path), path=path) == []
    before, after = rpn2c.check(text, str(path), path=path), rpn2c.check(renamed, str(path), path=path)
    assert (after.param_count, len(after.g), after.g.number_of_edges()) == (
        before.param_count, len(before.g), before.g.number_of_edges())


def test_a_block_parameter_is_renamed_with_every_calls_keyword_argument():
    text = TRANSFORMER.read_text(encoding="utf-8")
    lines = text.splitlines()
    edits = rename.rename(text, *at(text, "block encoder(d"), "width", TRANSFORMER)[None]
    call = lines.index("  y = encoder(x, d = d, heads = heads)")
    assert [(r[0], r[1]) for r, _ in edits if r[0] == call] == [(call, lines[call].index("d ="))]  # not `= d`
    assert len(edits) == 6 and all(lines[r[0]][r[1]:r[3]] == "d" for r, _ in edits)
    # and the model's `d` is another name: its declaration, its use in the type and the argument's value
    model = rename.rename(text, *at(text, "model transformer(d"), "width", TRANSFORMER)[None]
    assert [r[0] for r, _ in model] == [lines.index("model transformer(d = 32, heads = 4) {"),
                                        lines.index("  input x: sequence[B, T, d]"), call]


@pytest.mark.parametrize("marker, reason", [
    ("  attn = he", "'head' is a keyword"), ("low_rank_bil", "'low_rank_bilinear' is a component of the registry"),
    ("    xi_inst", "'xi_instance' is a setting"), ("(ra", "'rank' is a hyper-parameter of the component "
                                                          "'low_rank_bilinear'"),
    ("x: sequ", "'sequence' is a tensor type"), ("x: sequence[B", "'B' is a dimension"),
    ("bias = tr", "'true' is a keyword"), ("# transf", "nothing to rename here")])
def test_what_is_not_renamed_says_why(marker, reason):
    text = TRANSFORMER.read_text(encoding="utf-8")
    with pytest.raises(rename.RenameError, match=reason):
        rename.target(text, *at(text, marker))


def test_a_heads_name_and_an_unknown_name_are_refused():
    text = ("model m {\n  input x: vector[B, 4]\n  y = layer(x) {\n    head a { out = 2 }\n  }\n  z = add(y, nope)\n"
            "  return z\n}\n")
    with pytest.raises(rename.RenameError, match="'a' names a head of its layer"):
        rename.target(text, *at(text, "head a"))
    with pytest.raises(rename.RenameError, match="'nope' is not defined in this file"):
        rename.target(text, *at(text, "no"))


@pytest.mark.parametrize("marker, new, reason", [
    ("  att", "2x", "'2x' is not a name"), ("  att", "layer", "'layer' is a keyword"),
    ("  att", "ff", "'ff' is already a value of encoder"), ("  att", "heads", "'heads' is already a parameter"),
    ("block enc", "transformer", "'transformer' is already a model of this file"),
    ("block enc", "relu", "'relu' is a component of the registry: a block of that name would hide it")])
def test_a_new_name_that_is_not_free_is_refused(marker, new, reason):
    text = TRANSFORMER.read_text(encoding="utf-8")
    with pytest.raises(rename.RenameError, match=reason):
        rename.rename(text, *at(text, marker), new, TRANSFORMER)


def test_a_rename_that_would_break_a_spec_that_checked_is_refused_with_the_checkers_reason(monkeypatch):
    text = TRANSFORMER.read_text(encoding="utf-8")
    real = editor.check_text

    def check(source, *args, **kwargs):  # the checker, refusing the new name as it refuses reserved ones
        if "shiny" in source:
            return [Diagnostic("E0208", "'shiny' is reserved", Span("t.rpn", 1, 1, 1, 2))]
        return real(source, *args, **kwargs)

    monkeypatch.setattr(editor, "check_text", check)
    with pytest.raises(rename.RenameError, match="the renamed spec would not check: 'shiny' is reserved"):
        rename.rename(text, *at(text, "  att"), "shiny", TRANSFORMER)
    broken = text.replace("out = ffn", "out = nope")  # already failing: the rename is not blamed for it
    assert rename.rename(broken, *at(broken, "  att"), "shiny", TRANSFORMER)


@given(st.sampled_from(sorted(TEXTS)), st.data())
def test_half_written_text_never_breaks_the_structure_requests(path, data):
    text = TEXTS[path]
    cut = data.draw(st.integers(0, len(text)))
    prefix = text[:cut]
    offset = data.draw(st.integers(0, cut))
    line, col = prefix[:offset].count("\n"), offset - (prefix[:offset].rfind("\n") + 1)
    structure.semantic_tokens(prefix)
    structure.folding_ranges(prefix)
    try:
        rename.rename(prefix, line, col, "renamed_name", path)
    except rename.RenameError:
        pass


# ------------------------------------------------------------------------------------------------ colours and folds
@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_semantic_tokens_are_ordered_disjoint_and_find_the_lexers_comments(path):
    text = TEXTS[path]
    found = structure.semantic_tokens(text)
    assert all(t.type in SEMANTIC_LEGEND["tokenTypes"] and set(t.modifiers) <= set(SEMANTIC_LEGEND["tokenModifiers"])
               for t in found)
    ends = [(a.line, a.col + a.length) for a in found]
    assert all(end <= (b.line, b.col) for end, b in zip(ends, found[1:]))
    lexed = [(t.line - 1, t.column - 1, str(t)) for t in _parser().lex(text, dont_ignore=True) if t.type == "COMMENT"]
    lines = text.splitlines()
    assert [(t.line, t.col, lines[t.line][t.col:t.col + t.length]) for t in found if t.type == "comment"] == lexed
    names = {(t.line - 1, t.column - 1) for t in editor.tokens(text) if t.type == "NAME"}
    coloured = {(t.line, t.col) for t in found}
    known = {(n.tokens[i].line - 1, n.tokens[i].column - 1) for n in [roles.names(text)]
             for i, r in n.roles.items() if r.kind != "unknown"}
    assert names & coloured == known  # every name the checker can place, and only those


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_definition_body_folds_and_each_fold_opens_a_bracket_or_a_run(path):
    text = TEXTS[path]
    lines = text.splitlines()
    folds = structure.folding_ranges(text)
    starts = {f.start for f in folds if f.kind is None}
    n = roles.names(text)
    assert {n.tokens[k].line - 1 for k in n.definitions} <= starts
    for f in folds:
        assert f.end > f.start
        if f.kind == "comment":
            assert all(lines[k].lstrip().startswith("#") for k in range(f.start, f.end + 1))
        elif f.kind == "imports":
            assert all(lines[k].lstrip().startswith("import") for k in range(f.start, f.end + 1))
        else:
            assert any(b in lines[f.start] for b in "({[")


# ------------------------------------------------------------------------------------------------ workspace
def test_the_workspace_reads_its_spec_files_and_open_documents_win(tmp_path):
    (tmp_path / "a.rpn").write_text("block alpha {\n  input x\n  return x\n}\n", encoding="utf-8")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "b.rpn").write_text("block hidden {\n  input x\n  return x\n}\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.rpn").write_text("model gamma {\n  input x: vector[B, 2]\n  alpha_value = x\n"
                                            "  return alpha_value\n}\n", encoding="utf-8")
    opened = {(tmp_path / "a.rpn").resolve(): "block alpha_open {\n  input x\n  return x\n}\n"}
    ws = Workspace([tmp_path], lambda: opened)
    assert [p.name for p in ws.files()] == ["a.rpn", "c.rpn"]
    assert [(s.name, s.kind) for s in ws.symbols("")] == [("alpha_open", "block"), ("gamma", "model")]
    found = ws.symbols("alpha")
    assert [(s.name, s.kind, s.container) for s in found] == [("alpha_open", "block", None),
                                                               ("alpha_value", "value", "gamma")]
    assert [s.name for s in ws.symbols("gma")] == ["gamma"]  # the letters in order
