"""Fuzzing the checker: any text ends in a graph or a SpecError whose diagnostics all point at a real line."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark

import rpn2c
from rpn2c.syntax.parser import _parser

RUNS = {"examples": 0}
ROOT = Path(__file__).resolve().parent.parent
SPECS = {p.name: p.read_text(encoding="utf-8") for p in sorted((ROOT / "specs").glob("*.rpn"))}
TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*|[A-Za-z_][A-Za-z0-9_]*|[0-9]+(?:\.[0-9]*)?|//|\S')


def _n(k: int) -> int:
    return max(1, k * settings.default.max_examples // 25)


def check_ends_cleanly(text: str) -> None:
    RUNS["examples"] += 1
    try:
        rpn2c.check(text)
    except rpn2c.SpecError as exc:
        assert exc.diagnostics, text
        for d in exc.diagnostics:
            assert d.span.line >= 1, (d, text)


@settings(max_examples=_n(100), deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_random_text(text):
    check_ends_cleanly(text)


@settings(max_examples=_n(100), deadline=None)
@given(st.text("model block input head layer compress return {}()[]=,.:;+-*/#\"\\ \n0123456789abxyz_", max_size=120))
def test_random_spec_alphabet(text):
    check_ends_cleanly(text)


_grammar = from_lark(_parser(), start="start").map(lambda s: s)


@settings(max_examples=_n(60), deadline=None)
@given(from_lark(_parser(), explicit={"NAME": st.from_regex(r"[a-z_][a-z0-9_]{0,5}", fullmatch=True)},
                 alphabet=st.characters(codec="ascii")))
def test_grammar_generated(text):
    check_ends_cleanly(text)


@st.composite
def mutations(draw):
    name = draw(st.sampled_from(sorted(SPECS)))
    text = SPECS[name]
    op = draw(st.sampled_from(["del_tok", "dup_tok", "swap_tok", "del_line", "dup_line", "swap_line", "number",
                               "rename"]))
    if op.endswith("line"):
        lines = text.split("\n")
        i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
        if op == "del_line":
            del lines[i]
        elif op == "dup_line":
            lines.insert(i, lines[i])
        else:
            lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)
    toks = [m for m in TOKEN.finditer(text) if not m.group().startswith("#")]
    if op == "number":
        nums = [m for m in toks if m.group()[0].isdigit()]
        m = draw(st.sampled_from(nums))
        new = draw(st.sampled_from(["0", "1", "3", "7", "1000000", "2.5", "0.0", "-1", "99999999999999999999"]))
        return text[:m.start()] + new + text[m.end():]
    if op == "rename":
        idents = sorted({m.group() for m in toks if m.group()[0].isalpha() or m.group()[0] == "_"})
        old = draw(st.sampled_from(idents))
        new = draw(st.sampled_from(["x", "y", "head", "relu", "zz", "model", "B", "edges", "none", old + "2"]))
        return re.sub(rf"\b{re.escape(old)}\b", new, text, count=draw(st.integers(0, 3)))
    i, j = sorted((draw(st.integers(0, len(toks) - 1)), draw(st.integers(0, len(toks) - 1))))
    a, b = toks[i], toks[j]
    if op == "del_tok":
        return text[:a.start()] + text[a.end():]
    if op == "dup_tok":
        return text[:a.end()] + " " + a.group() + text[a.end():]
    if i == j:
        return text
    return text[:a.start()] + b.group() + text[a.end():b.start()] + a.group() + text[b.end():]


@settings(max_examples=_n(150), deadline=None)
@given(mutations())
def test_mutated_specs(text):
    check_ends_cleanly(text)


def test_shipped_specs_check():
    for name, text in SPECS.items():
        check_ends_cleanly(text)
        assert rpn2c.check(text).param_count > 0, name


def test_examples_were_run():
    """Runs last in this module: the properties above really exercised the checker."""
    assert RUNS["examples"] > 0
