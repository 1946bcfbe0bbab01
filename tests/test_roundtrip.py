"""The canonical formatter and the parser are inverse: parse(fmt(p)) == p, fmt is idempotent, comments survive."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rpn2c.syntax import ast
from rpn2c.syntax.format import format_program
from rpn2c.syntax.parser import parse


def _n(k: int) -> int:
    return max(1, k * settings.default.max_examples // 25)


KEYWORDS = {"import", "as", "model", "block", "input", "return", "head", "compress", "layer", "repeat", "true",
            "false", "none"}
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True).filter(lambda s: s not in KEYWORDS)
dotted = st.lists(names, min_size=1, max_size=3).map(lambda p: ast.Name(tuple(p)))
strings = st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=12) | \
    st.sampled_from(['a"b', "a\\b", "\\", '\\"', '"', "\\\\", '#not a comment', "tab\there", 'x\\"y\\'])
floats = st.floats(min_value=0, allow_nan=False, allow_infinity=False) | st.sampled_from([0.5, 1e-5, 3e20, 2.0])
literals = st.one_of(
    st.integers(0, 10**12).map(ast.Literal),
    floats.map(ast.Literal),
    strings.map(ast.Literal),
    st.booleans().map(ast.Literal),
    st.just(ast.Literal(None)),
)


def _extend(children):
    kwarg = st.builds(ast.Kwarg, names, children)
    return st.one_of(
        st.builds(ast.Call, dotted, st.lists(children, max_size=3).map(tuple),
                  st.lists(kwarg, max_size=2).map(tuple)),
        st.lists(children, max_size=3).map(lambda xs: ast.ListExpr(tuple(xs))),
        st.builds(ast.BinOp, st.sampled_from(["+", "-", "*", "/", "//", "%", "**"]), children, children),
        st.builds(ast.Neg, children),
        st.builds(ast.Index, children, children),
    )


exprs = st.recursive(literals | dotted, _extend, max_leaves=8)
kwargs_ = st.lists(st.builds(ast.Kwarg, names, exprs), max_size=2).map(tuple)
settings_ = st.lists(st.builds(ast.Setting, names, exprs), max_size=4).map(tuple)
calls = st.builds(ast.Call, dotted, st.lists(exprs, max_size=2).map(tuple), kwargs_)
values = st.one_of(
    exprs,
    st.builds(ast.HeadExpr, st.sampled_from(["head", "compress"]), st.lists(exprs, max_size=2).map(tuple),
              kwargs_, settings_),
    st.builds(ast.LayerExpr, st.lists(exprs, max_size=2).map(tuple), kwargs_,
              st.lists(st.builds(ast.HeadDecl, names, settings_), max_size=3).map(tuple), settings_),
    st.builds(ast.RepeatExpr, exprs, calls),
    st.builds(ast.RepeatExpr, exprs, calls, kwargs=st.builds(lambda n: (ast.Kwarg("index", ast.Name((n,))),), names)),
)
types = st.builds(ast.TensorTypeExpr, names, st.lists(exprs, max_size=4).map(tuple))
statements = st.one_of(
    st.builds(ast.Input, names, st.none() | types),
    st.builds(ast.Assign, names, values),
    st.lists(names, min_size=1, max_size=3).map(lambda ns: ast.Return(tuple(ns))),
)
definitions = st.builds(ast.Definition, st.sampled_from(["model", "block"]), names,
                        st.lists(st.builds(ast.Param, names, st.none() | exprs), max_size=3).map(tuple),
                        st.lists(statements, max_size=5).map(tuple))
programs = st.builds(ast.Program, st.lists(st.builds(ast.Import, strings, names), max_size=2).map(tuple),
                     st.lists(definitions, max_size=3).map(tuple))


@settings(max_examples=_n(200), deadline=None)
@given(programs)
def test_random_ast_roundtrips(program):
    text = format_program(program)
    again = parse(text)
    assert again == program, text
    assert format_program(again) == text


@settings(max_examples=_n(100), deadline=None)
@given(exprs)
def test_expression_precedence_survives(expr):
    program = ast.Program((), (ast.Definition("model", "m", (ast.Param("p", expr),), ()),))
    assert parse(format_program(program)) == program


SPECS = sorted((Path(__file__).resolve().parent.parent / "specs").glob("*.rpn"))


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_shipped_spec_formats_canonically(path):
    text = path.read_text(encoding="utf-8")
    once = format_program(parse(text))
    assert format_program(parse(once)) == once
    assert parse(once) == parse(text)
    comments = [c.text for c in parse(text).comments]
    assert comments, "every shipped spec is documented"
    assert [c.text for c in parse(once).comments] == comments
    for c in comments:
        assert c in once


def test_comments_keep_their_place():
    text = "# top\nmodel m(a = 1) {  # trailing\n  # before input\n  input x: vector[B, a]\n  return x  # end\n}\n"
    out = format_program(parse(text))
    assert out == text
    assert re.search(r"# before input\n  input x", out)
