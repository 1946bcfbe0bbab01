"""Fuzzing the checker: any text ends in a graph or a SpecError whose diagnostics all point at a real line."""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark

import rpn2c
from rpn2c.runtime.fuzz import is_hostile, run_one
from rpn2c.runtime.fuzz_inputs import make_input, mutate, seed_specs
from rpn2c.syntax.parser import build_parser

RUNS = {"examples": 0}
ROOT = Path(__file__).resolve().parent.parent
SEEDS = seed_specs()
SPECS = {p.name: p.read_text(encoding="utf-8") for p in sorted((ROOT / "specs").glob("*.rpn"))}


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


_grammar = from_lark(build_parser(), start="start").map(lambda s: s)


@settings(max_examples=_n(60), deadline=None)
@given(from_lark(build_parser(), explicit={"NAME": st.from_regex(r"[a-z_][a-z0-9_]{0,5}", fullmatch=True)},
                 alphabet=st.characters(codec="ascii")))
def test_grammar_generated(text):
    check_ends_cleanly(text)


@st.composite
def mutations(draw):
    """One to three token or line mutations of a shipped spec: the fuzz harness's mutator, seeded by hypothesis."""
    name = draw(st.sampled_from(sorted(SPECS)))
    return mutate(random.Random(draw(st.integers(0, 2**32 - 1))), SPECS[name])


@settings(max_examples=_n(150), deadline=None)
@given(mutations())
def test_mutated_specs(text):
    check_ends_cleanly(text)


@settings(max_examples=_n(40), deadline=None)
@given(st.integers(0, 2**48))
def test_fuzz_inputs_check_compile_and_run(seed):
    """The long lanes' property on hypothesis-drawn seeds: generated, varied, mutated or damaged specs (and hostile
    inputs) end in success, a located SpecError or a clear InputError, never a traceback or a time-out."""
    RUNS["examples"] += 1
    origin, source = make_input(seed, SEEDS)
    out = run_one(source, time_limit=20.0, hostile=is_hostile(seed))
    assert out.status != "failure", f"seed {seed} ({origin}): {out.detail}\n{out.trace}"


def test_shipped_specs_check():
    for name, text in SPECS.items():
        check_ends_cleanly(text)
        assert rpn2c.check(text).param_count > 0, name


def test_examples_were_run():
    """Runs last in this module: the properties above really exercised the checker."""
    assert RUNS["examples"] > 0
