"""The optimiser's IR and rewrite driver: terms of paper operations, patterns, span unions, fixed points.

Each rule is a pattern over a layer's term; the driver rewrites top-down to a fixed point; the replacement stands
for the union of the matched terms' spans and records the rule; equal terms are one object (interning), which is
how a κ shared by channels becomes one computation.
"""

from __future__ import annotations

import pytest
from hypothesis import given

import rpn2c
from rpn2c.ir.terms import SEMANTIC_OPS, Term, TermTable, build_terms
from rpn2c.lower.emitters import kernel_ops
from rpn2c.passes import optimize
from rpn2c.passes.rewrite import Match, rewrite
from rpn2c.passes.rule import P, Rule, to
from rpn2c.passes.rules import RULES

from tests.passes.programs import programs
from tests.passes.test_optimizer import TARGETS_TEXT

CNN = """model m {
  input x: image[B, 2, 6, 6]
  y = head(x) {
    xi_attribute = grid_patch(size = 3, pad = 1)
    kappa = chebyshev(d = 2)
    out = 3
    post = [relu]
  }
  return y
}
"""


def _node(text, nid="y", disable=()):
    return optimize(rpn2c.check(text), disable=disable).node(nid)


def test_a_head_is_built_as_the_papers_composition():
    before, after = _node(CNN).terms
    assert str(before) == ("process[relu](bias[tied](reconcile[identity](expand[chebyshev]("
                           "patches[grid_patch](input(x))))))")
    assert str(after) == "process[relu](conv[tied](input(x)))"


def test_a_rewrite_stands_for_the_union_of_the_spans_it_replaced():
    node = _node(CNN)
    (conv,) = node.decisions
    matched = [t for t in node.terms[0].walk() if t.op in ("bias", "reconcile", "expand", "patches")]
    spans = frozenset().union(*(t.spans for t in matched))
    assert {s.line for s in spans} == {3, 4, 5}  # the head, its ξ and its κ
    assert conv.spans == tuple(str(s) for s in sorted(spans))
    rewritten = node.terms[1].args[0]
    assert rewritten.op == "conv" and rewritten.spans == spans and rewritten.prov == ("conv",)


def test_the_largest_pattern_wins_and_the_next_one_takes_over_when_it_is_off():
    node = _node(CNN, disable={"conv"})
    assert [d.rule for d in node.decisions] == ["linear", "unfold_patches"]
    assert str(node.terms[1]) == "process[relu](linear[tied](expand[chebyshev](unfold[grid_patch](input(x)))))"
    node = _node(CNN, disable={"conv", "linear", "unfold_patches"})
    assert [d.rule for d in node.decisions] == ["gather_patches"]


def test_shared_kappa_makes_the_channels_read_one_interned_term():
    node = _node(TARGETS_TEXT["shared_kappa"])
    before, after = node.terms
    expands = lambda t: {id(s) for s in t.walk() if s.op == "expand"}  # noqa: E731
    assert len(expands(before)) == 3 and len(expands(after)) == 1
    assert str(after).startswith("%1 = expand[chebyshev](")  # named once, read by the three channels


def test_rules_compose_in_order_on_one_term():
    """GCN: ψ moves before ξ, ξ becomes its structured kernel, that kernel becomes one SpMM."""
    node = _node(TARGETS_TEXT["graph_spmm"])
    assert [d.rule for d in node.decisions] == ["project_first", "structured_xi", "graph_spmm", "drop_identity"]
    assert [d.after.split("(")[0] for d in node.decisions] == ["xi[graph]", "xi_kernel[graph]", "spmm[graph]",
                                                               "input"]  # κ = id left the term last
    assert node.decisions[1].before == node.decisions[0].after


@given(programs())
def test_the_rewritten_term_is_a_fixed_point_of_the_rules(program):
    text, _, _ = program
    graph = optimize(rpn2c.check(text))
    for node in graph.nodes():
        if node.terms is None:
            continue
        guarded, fired = rewrite(node.terms[1], RULES, TermTable(node.terms[1]),
                                 lambda r, t: _guards(graph, node)(r, t))
        assert fired == [] and guarded is node.terms[1], (node.id, [f.rule.name for f in fired])
        assert {t.op for t in node.terms[1].walk()} <= set(SEMANTIC_OPS) | set(kernel_ops())


def _guards(graph, node):
    from rpn2c.passes.pipeline import _allowed, _sites

    return _allowed(_sites(graph, node))


@pytest.mark.parametrize("rule", sorted(r.name for r in RULES if r.name in TARGETS_TEXT))
def test_each_rule_rewrites_its_target_into_known_ops(rule):
    graph = optimize(rpn2c.check(TARGETS_TEXT[rule]))
    node = graph.node("y")
    assert rule in [d.rule for d in node.decisions]
    ops = {t.op for t in node.terms[1].walk()}
    assert ops <= set(SEMANTIC_OPS) | set(kernel_ops())


def test_terms_are_rebuilt_from_the_graph_and_not_part_of_its_hash():
    graph = rpn2c.check(CNN)
    h = graph.content_hash()
    optimize(graph)
    assert graph.content_hash() == h
    assert str(build_terms(graph)["y"]) == str(graph.node("y").terms[0])


def test_interning_and_pattern_captures():
    tab = TermTable()
    x = tab.make("input", (), ("x",), {"name": "x"})
    a = tab.make("expand", (x,), ("k",))
    assert tab.make("expand", (x,), ("k",)) is a and tab.make("expand", (x,), ("k2",)) is not a
    m = Match(a, {}, [], tab, "r")
    from rpn2c.passes.rewrite import match

    assert match(P("expand", "z"), a, m) and m.binds == {"z": x} and m.matched == [a]
    assert not match(P("expand", "z", where=lambda t: False), a, Match(a, {}, [], tab, "r"))


def test_a_rule_set_that_cycles_is_reported_not_run_forever():
    flip = Rule("flip", "head", "s", lambda s: True, "x", "y", pattern=P("a", "x"), rewrite=to("b"))
    flop = Rule("flop", "head", "s", lambda s: True, "x", "y", pattern=P("b", "x"), rewrite=to("a"))
    tab = TermTable()
    t = tab.make("a", (tab.make("input", (), ("x",), {"name": "x"}),))
    with pytest.raises(RuntimeError, match="fixed point"):
        rewrite(t, [flip, flop], tab, lambda r, term: True)


def test_a_rule_without_pattern_or_rewrite_is_refused():
    with pytest.raises(ValueError, match="pattern and a rewrite"):
        Rule("bad", "head", "s", lambda s: True, "x", "y")


def test_terms_are_immutable():
    t = Term("input", key=("x",))
    with pytest.raises(AttributeError):
        t.op = "expand"  # type: ignore[misc]


def test_every_rule_is_in_the_optimiser_doc():
    from pathlib import Path

    from rpn2c.passes import rule_names

    doc = (Path(__file__).resolve().parents[2] / "docs" / "optimizer.md").read_text(encoding="utf-8")
    assert [n for n in rule_names() if f"`{n}`" not in doc] == []
    assert [op for op in kernel_ops() if f"`{op}`" not in doc] == []
