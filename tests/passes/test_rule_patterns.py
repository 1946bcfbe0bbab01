"""Every optimiser rule on hand-built terms: what its pattern matches, what it rewrites to, what it must leave alone.

After tinygrad's ``test/null/test_pattern_matcher.py``: each case builds the smallest term a rule's pattern
matches (keyed and with the ``info`` that ``rpn2c/ir/terms.py`` gives a head's terms: ``slot``, ``use`` with a
registry component, ``grid`` ...), runs the driver with that one rule and a guard that accepts everything (guards
read ``Site``s of checked specs; the end-to-end harness ``test_optimizer.py`` covers them), and asserts the exact
rewritten term, its provenance and the spans it stands for. Each rule also has near-miss terms its pattern must not
match. Driver properties (benefit order, fixed point, interning) are checked on hand-built terms too.

A case is one row of ``CASES`` / ``MISSES``: when a rule's rewrite changes, its expectation is a one-line change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest

import rpn2c.components  # noqa: F401  (registration)
from rpn2c.components.registry import lookup
from rpn2c.errors import Span
from rpn2c.ir.graph import Use
from rpn2c.ir.terms import HeadKey, InputKey, Term, TermTable, render
from rpn2c.ir.types import ValueRef
from rpn2c.passes.rewrite import rewrite
from rpn2c.passes.rule import P, Rule
from rpn2c.passes.rules import RULES

RULE = {r.name: r for r in RULES}


def ALLOW(rule, term) -> bool:
    return True


def _use(name: str, family: str, **hp) -> Use:
    entry = lookup(name, (family,))
    return Use(entry.cls(entry.cls.HP(**hp)))


def _span(line: int) -> Span:
    return Span("m.rpn", line, 1, line, 9)


# components, from the registry, with the hyper-parameters the patterns read
CHEB = _use("chebyshev", "expansion")
TAYLOR = _use("taylor", "expansion", d=2)
TAYLOR_D1 = _use("taylor", "expansion", d=1)
TAYLOR_SYM = _use("taylor", "expansion", d=2, symmetric=True)
KAPPA_ID = _use("identity", "expansion")
PATCH_MAX = _use("patch_max", "compression", size=2)
PATCH_EXP = _use("patch_expansion", "expansion", size=3, pad=1)
PSI = _use("identity", "reconciliation")
GRID = _use("grid_patch", "interdependence", size=3, pad=1)
GRID_SUM = _use("grid_patch", "interdependence", size=3, mode="aggregation")
CHAIN = _use("chain", "interdependence")
GRAPH = _use("graph", "interdependence", edges=ValueRef("edges"))
CAUSAL = _use("bilinear", "interdependence", causal=True)
WINDOW = _use("bilinear", "interdependence", window=2)
LINEAR_ATTN = _use("linear_attention", "interdependence", rank=2, causal=True)
HYBRID_SUM = _use("hybrid", "interdependence", parts=["chain", "pearson_correlation"], fusion="sum")
HYBRID_MAX = _use("hybrid", "interdependence", parts=["chain", "pearson_correlation"], fusion="max")
HYBRID_GAT = _use("hybrid", "interdependence", parts=["graph", "low_rank_bilinear"], edges=ValueRef("edges"), rank=2,
                  normalize="softmax")
HYBRID_HADAMARD = _use("hybrid", "interdependence", parts=["chain", "pearson_correlation"])  # no graph part
PARAM_XI = _use("parameterized", "interdependence")
PARAM_XI_AFFINE = _use("parameterized", "interdependence", bias=True)
XI_ID = _use("identity", "interdependence")
CONCAT = _use("concat", "fusion")

# span lines: one per kind of term, so that a rewrite's spans say which terms it stands for
BIAS, RECONCILE, EXPAND, PATCHES, XI, LAYER = 1, 2, 3, 4, 5, 6


class Build:
    """Terms of node ``y`` in one table, keyed as ``terms.py`` keys them: ``(node, head, op, slot, channel, name)``
    for a head's terms, ``(node,)`` for a layer's."""

    def __init__(self):
        self.tab = TermTable()

    def x(self, name: str = "x") -> Term:
        return self.tab.make("input", (), InputKey(name), {"name": name})

    def t(self, op, *args, use=None, what=None, channel=None, head="h", line=0, prov=(), **extra) -> Term:
        name = use.name if use is not None else what
        key = HeadKey("y", head, op, extra.get("slot"), channel, name)
        info = {"node": "y", "head": head, "what": name, "use": use, "channel": channel, **extra}
        return self.tab.make(op, args, key, info, (_span(line),) if line else (), prov)

    def layer(self, op, *args, what=None, line=LAYER) -> Term:
        return self.tab.make(op, args, ("y",), {"node": "y", "head": None, "what": what}, (_span(line),))

    # the pieces of a head
    def head(self, k: Term, channel=0, head="h") -> Term:
        """``bias(reconcile(k))`` of one channel."""
        y = self.t("reconcile", k, use=PSI, channel=channel, head=head, line=RECONCILE)
        return self.t("bias", y, what="tied", channel=channel, head=head, line=BIAS)

    def expand(self, z: Term, use=CHEB, channel=None, **extra) -> Term:
        return self.t("expand", z, use=use, channel=channel, line=EXPAND, **extra)

    def patches(self, use=GRID) -> Term:
        return self.t("patches", self.x(), use=use, slot="xi_attribute", mode=use.component.hp.mode, line=PATCHES)

    def xi(self, z: Term, use, slot="xi_instance", op="xi", prov=()) -> Term:
        return self.t(op, z, use=use, slot=slot, line=XI, prov=prov)


@dataclass(frozen=True)
class Case:
    rule: str
    build: Callable[[Build], Term]
    after: str  # render() of the rewritten root
    spans: frozenset[int]  # lines of the spans of the term the rule produced
    prov: tuple[str, ...] | None = None  # its provenance; None: (rule,)
    matched: frozenset[int] | None = None  # lines of the spans the pattern matched; None: spans

    def __str__(self) -> str:
        return self.rule


def _c(rule, build, after, spans, prov=None, matched=None) -> Case:
    return Case(rule, build, after, frozenset(spans), prov, None if matched is None else frozenset(matched))


HEAD_TERM = "bias[tied](reconcile[identity]({}))"
TWO_HEADS = ", ".join([HEAD_TERM.format("input(x)")] * 2)

CASES: tuple[Case, ...] = (
    _c("conv", lambda b: b.head(b.expand(b.patches())), "conv[tied](input(x))", {BIAS, RECONCILE, EXPAND, PATCHES}),
    _c("box_sum", lambda b: b.patches(GRID_SUM), "box_sum[grid_patch](input(x))", {PATCHES}),
    _c("unfold_patches", lambda b: b.patches(), "unfold[grid_patch](input(x))", {PATCHES}),
    _c("gather_patches", lambda b: b.patches(), "gather_patches[grid_patch](input(x))", {PATCHES}),
    _c("pool", lambda b: b.expand(b.x(), PATCH_MAX, grid=True), "pool[patch_max](input(x))", {EXPAND}),
    _c("unfold_kappa", lambda b: b.expand(b.x(), PATCH_EXP, grid=True), "kappa_unfold[patch_expansion](input(x))",
       {EXPAND}),
    _c("degree_blocks", lambda b: b.head(b.expand(b.x(), TAYLOR)), "degree_linear[tied](input(x))",
       {BIAS, RECONCILE, EXPAND}),
    _c("project_first", lambda b: b.t("reconcile", b.xi(b.x(), GRAPH), use=PSI, line=RECONCILE),
       "xi[graph](reconcile[identity](input(x)))", {RECONCILE, XI}),
    _c("project_first",  # after structured_xi: the kernel keeps its provenance and gains the reordering
       lambda b: b.t("reconcile", b.xi(b.x(), CHAIN, op="xi_kernel", prov=("structured_xi",)), use=PSI,
                     line=RECONCILE),
       "xi_kernel[chain](reconcile[identity](input(x)))", {RECONCILE, XI}, ("structured_xi", "project_first")),
    _c("shared_kappa", lambda b: b.expand(b.x(), channel=1), "expand[chebyshev](input(x))", {EXPAND}),
    _c("linear", lambda b: b.head(b.expand(b.x())), "linear[tied](expand[chebyshev](input(x)))", {BIAS, RECONCILE}),
    _c("structured_xi", lambda b: b.xi(b.x(), CHAIN), "xi_kernel[chain](input(x))", {XI}),
    _c("structured_xi", lambda b: b.xi(b.x(), CAUSAL), "xi_kernel[bilinear](input(x))", {XI}),
    _c("graph_spmm", lambda b: b.xi(b.x(), GRAPH), "spmm[graph](input(x))", {XI}),
    _c("graph_spmm", lambda b: b.xi(b.x(), GRAPH, op="xi_kernel", prov=("structured_xi",)), "spmm[graph](input(x))",
       {XI}, ("structured_xi", "graph_spmm")),
    _c("causal_sdpa", lambda b: b.xi(b.expand(b.x()), CAUSAL),
       "sdpa_causal[bilinear](expand[chebyshev](input(x)))", {XI}),
    _c("flex_window", lambda b: b.xi(b.expand(b.x()), WINDOW, op="xi_kernel", prov=("structured_xi",)),
       "flex_attention[bilinear](expand[chebyshev](input(x)))", {XI}, ("structured_xi", "flex_window")),
    _c("fused_parts", lambda b: b.xi(b.x(), HYBRID_SUM), "fused_parts[hybrid](input(x))", {XI}),
    _c("edge_hadamard", lambda b: b.xi(b.x(), HYBRID_GAT), "edge_hadamard[hybrid](input(x))", {XI}),
    _c("linear_attention", lambda b: b.xi(b.expand(b.x()), LINEAR_ATTN),
       "linear_attention[linear_attention](expand[chebyshev](input(x)))", {XI}),
    _c("fused_heads", lambda b: b.layer("fuse_heads", b.head(b.x(), head="a"), b.head(b.x(), head="b"),
                                        what="concat_linear"),
       "fused_sdpa[concat_linear](input(x))", {LAYER}),  # the heads' terms do not run: what it reads
    _c("stacked_heads", lambda b: b.layer("fuse_heads", b.head(b.x(), head="a"), b.head(b.x(), head="b"),
                                          what="concat_linear"),
       f"stacked_linear[concat_linear]({TWO_HEADS})", {LAYER}),
    _c("chebyshev_heads", lambda b: b.layer("fuse_heads", b.head(b.x(), head="a"), b.head(b.x(), head="b"),
                                            what="sum"),
       f"chebyshev_sum[sum]({TWO_HEADS})", {LAYER}),  # the heads' terms do not run: one recurrence over them
    _c("parallel_scan", lambda b: b.layer("recur", b.x(), what="linear"), "parallel_scan[linear](input(x))", {LAYER}),
    _c("fused_recurrent", lambda b: b.layer("recur", b.x(), what="gru"), "rnn_fused[gru](input(x))", {LAYER}),
    _c("time_loop", lambda b: b.layer("recur", b.x(), what="rnn"), "time_loop[rnn](input(x))", {LAYER}),
    # the identity term is replaced by its argument: the result is that argument, unchanged (no span, no prov)
    _c("drop_identity", lambda b: b.head(b.expand(b.x(), KAPPA_ID)), HEAD_TERM.format("input(x)"), (), (),
       matched={EXPAND}),
    _c("drop_identity", lambda b: b.xi(b.expand(b.x()), XI_ID), "expand[chebyshev](input(x))", {EXPAND}, (),
       matched={XI}),
)


@dataclass(frozen=True)
class Miss:
    rule: str
    build: Callable[[Build], Term]
    why: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.why}"


MISSES: tuple[Miss, ...] = (
    Miss("conv", lambda b: b.head(b.expand(b.x())), "κ of the input, no patches under it"),
    Miss("conv", lambda b: b.head(b.expand(b.xi(b.x(), GRID, slot="xi_attribute"))), "a grid ξ as xi, not patches"),
    Miss("conv", lambda b: b.t("reconcile", b.expand(b.patches()), use=PSI), "no bias above ψ"),
    Miss("box_sum", lambda b: b.xi(b.x(), GRID_SUM, slot="xi_attribute"), "xi, not patches"),
    Miss("unfold_patches", lambda b: b.xi(b.x(), GRID, slot="xi_attribute"), "xi, not patches"),
    Miss("gather_patches", lambda b: b.expand(b.x(), grid=True), "a grid κ, not patches"),
    Miss("pool", lambda b: b.expand(b.x(), PATCH_MAX), "no grid flag"),
    Miss("pool", lambda b: b.expand(b.x(), PATCH_MAX, grid=False), "grid flag false"),
    Miss("pool", lambda b: b.patches(), "patches, not expand"),
    Miss("unfold_kappa", lambda b: b.expand(b.x(), PATCH_MAX, grid=True), "a patch compression, not an expansion"),
    Miss("unfold_kappa", lambda b: b.expand(b.x(), PATCH_EXP), "no grid flag"),
    Miss("degree_blocks", lambda b: b.head(b.expand(b.x())), "a Chebyshev κ"),
    Miss("degree_blocks", lambda b: b.head(b.expand(b.x(), TAYLOR_D1)), "Taylor of degree 1"),
    Miss("degree_blocks", lambda b: b.head(b.expand(b.x(), TAYLOR_SYM)), "symmetric Taylor"),
    Miss("degree_blocks", lambda b: b.head(b.xi(b.expand(b.x(), TAYLOR), CHAIN, slot="xi_attribute_post")),
         "a ξ between κ and ψ"),
    Miss("project_first", lambda b: b.t("reconcile", b.xi(b.x(), CHAIN, slot="xi_attribute"), use=PSI),
         "an attribute ξ"),
    Miss("project_first", lambda b: b.xi(b.t("reconcile", b.x(), use=PSI), GRAPH), "already ψ first"),
    Miss("project_first", lambda b: b.t("reconcile", b.xi(b.x(), PARAM_XI_AFFINE), use=PSI),
         "an affine ξ (A z + b 1ᵀ) does not commute with ψ"),
    Miss("project_first", lambda b: b.t("bias", b.xi(b.x(), GRAPH), what="tied"), "bias, not reconcile, above ξ"),
    Miss("shared_kappa", lambda b: b.expand(b.x()), "no channel in the key"),
    Miss("shared_kappa", lambda b: b.t("reconcile", b.x(), use=PSI, channel=1), "a channel's ψ, not its κ"),
    Miss("linear", lambda b: b.t("reconcile", b.x(), use=PSI), "ψ without the bias term"),
    Miss("linear", lambda b: b.t("bias", b.xi(b.x(), CHAIN), what="tied"), "a ξ, not ψ, under the bias"),
    Miss("structured_xi", lambda b: b.xi(b.x(), PARAM_XI), "a learned (param) ξ"),
    Miss("structured_xi", lambda b: b.xi(b.x(), GRID, slot="xi_attribute"), "a grid ξ"),
    Miss("structured_xi", lambda b: b.xi(b.x(), CHAIN, op="xi_kernel"), "already a kernel"),
    Miss("graph_spmm", lambda b: b.xi(b.x(), CHAIN), "a chain ξ"),
    Miss("graph_spmm", lambda b: b.xi(b.x(), CAUSAL, op="xi_kernel"), "an attention kernel"),
    Miss("causal_sdpa", lambda b: b.xi(b.x(), CAUSAL, slot="xi_attribute"), "attribute slot"),
    Miss("causal_sdpa", lambda b: b.xi(b.x(), CAUSAL, slot="xi_instance_prior"), "prior instance slot"),
    Miss("flex_window", lambda b: b.xi(b.x(), WINDOW, slot="xi_attribute_post"), "attribute post slot"),
    Miss("flex_window", lambda b: b.expand(b.x()), "not a ξ"),
    Miss("linear_attention", lambda b: b.xi(b.x(), CAUSAL), "softmax attention, not linear"),
    Miss("fused_parts", lambda b: b.xi(b.x(), HYBRID_MAX), "a max fusion is not linear in the matrices"),
    Miss("edge_hadamard", lambda b: b.xi(b.x(), HYBRID_HADAMARD), "a Hadamard product with no graph part"),
    Miss("fused_heads", lambda b: b.t("fuse_channels", b.head(b.x(), 0), b.head(b.x(), 1), use=CONCAT),
         "channels, not heads"),
    Miss("stacked_heads", lambda b: b.t("fuse_channels", b.head(b.x(), 0), b.head(b.x(), 1), use=CONCAT),
         "channels, not heads"),
    Miss("chebyshev_heads", lambda b: b.t("fuse_channels", b.head(b.x(), 0), b.head(b.x(), 1), use=CONCAT),
         "channels, not heads"),
    Miss("parallel_scan", lambda b: b.layer("process", b.x(), what="relu"), "not a recurrence"),
    Miss("fused_recurrent", lambda b: b.layer("remainder", b.x(), b.x(), what="linear"), "not a recurrence"),
    Miss("time_loop", lambda b: b.layer("fuse_heads", b.x(), what="concat"), "not a recurrence"),
    Miss("drop_identity", lambda b: b.expand(b.x()), "a Chebyshev κ"),
    Miss("drop_identity", lambda b: b.t("reconcile", b.x(), use=PSI), "an identity ψ is a weight, not dropped"),
    Miss("drop_identity", lambda b: b.xi(b.x(), CHAIN), "a chain ξ"),
)


def _run(term: Term, rules, allow=ALLOW):
    return rewrite(term, list(rules), TermTable(term), allow)


def _lines(spans) -> set[int]:
    return {s.line for s in spans}


# ------------------------------------------------------------------------------------------------ rules
@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_rule_rewrites_its_minimal_term(case):
    before = case.build(Build())
    after, fired = _run(before, [RULE[case.rule]])
    assert render(after) == case.after
    (f,) = fired
    assert f.rule is RULE[case.rule] and f.after.prov == ((case.rule,) if case.prov is None else case.prov)
    assert _lines(f.after.spans) == case.spans
    assert _lines(f.spans) == (case.spans if case.matched is None else case.matched)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_rewritten_term_is_a_fixed_point(case):
    after, _ = _run(case.build(Build()), [RULE[case.rule]])
    again, fired = _run(after, [RULE[case.rule]])
    assert again is after and fired == []


@pytest.mark.parametrize("miss", MISSES, ids=str)
def test_the_rule_leaves_a_near_miss_alone(miss):
    before = miss.build(Build())
    after, fired = _run(before, [RULE[miss.rule]])
    assert after is before and fired == []


@pytest.mark.parametrize("name", [r.name for r in RULES])
def test_every_rule_has_a_hand_built_case_and_a_near_miss(name):
    assert any(c.rule == name for c in CASES), f"rule {name!r} has no case in CASES"
    assert any(m.rule == name for m in MISSES), f"rule {name!r} has no near miss in MISSES"


def test_every_case_names_a_rule_of_the_tables():
    assert {c.rule for c in CASES} | {m.rule for m in MISSES} <= set(RULE)


def test_a_refused_rule_leaves_the_term_unchanged():
    before = Build().patches()
    asked = []
    after, fired = _run(before, [RULE["box_sum"]], lambda r, t: asked.append((r.name, t)) or False)
    assert after is before and fired == [] and asked == [("box_sum", before)]


# ------------------------------------------------------------------------------------------------ driver
def _order(root: Term, names, refuse=()):
    """The rewritten text and the rules that fired, with ``names`` in this table order and ``refuse`` refused."""
    after, fired = _run(root, [RULE[n] for n in names], lambda r, t: r.name not in refuse)
    return render(after), [f.rule.name for f in fired]


def test_alternatives_on_one_root_op_go_by_benefit_then_table_order():
    b = Build()
    patches = b.patches()
    grid = ("box_sum", "unfold_patches", "gather_patches")
    assert _order(patches, grid) == ("box_sum[grid_patch](input(x))", ["box_sum"])
    assert _order(patches, grid[::-1]) == ("unfold[grid_patch](input(x))", ["unfold_patches"])  # tie: table order
    assert _order(patches, grid[::-1], refuse={"unfold_patches"}) == ("box_sum[grid_patch](input(x))", ["box_sum"])
    assert _order(patches, grid, refuse={"box_sum", "unfold_patches"})[1] == ["gather_patches"]
    asked = []
    _run(patches, [RULE[n] for n in grid[::-1]], lambda r, t: asked.append(r.name) or False)
    assert asked == ["unfold_patches", "box_sum", "gather_patches"]


def test_the_largest_pattern_on_a_grid_head_wins_then_the_next_takes_over():
    """conv (3) > degree_blocks (2) > linear (1) at the bias; unfold_patches on the patches once the root no longer
    consumes them. Benefit, not table order, decides."""
    b = Build()
    root = b.head(b.expand(b.patches(), TAYLOR))
    names = ("linear", "unfold_patches", "degree_blocks", "conv")
    assert _order(root, names) == ("conv[tied](input(x))", ["conv"])
    assert _order(root, names, refuse={"conv"}) == ("degree_linear[tied](unfold[grid_patch](input(x)))",
                                                     ["degree_blocks", "unfold_patches"])
    assert _order(root, names, refuse={"conv", "degree_blocks"}) == (
        "linear[tied](expand[taylor](unfold[grid_patch](input(x))))", ["linear", "unfold_patches"])


def test_recurrence_rules_go_by_benefit():
    b = Build()
    root = b.layer("recur", b.x(), what="linear")
    names = ("time_loop", "fused_recurrent", "parallel_scan")
    assert _order(root, names)[1] == ["parallel_scan"]
    assert _order(root, names, refuse={"parallel_scan"})[1] == ["fused_recurrent"]
    assert _order(root, names, refuse={"parallel_scan", "fused_recurrent"})[1] == ["time_loop"]


def test_drop_identity_yields_to_a_pattern_that_reads_the_identity_term():
    b = Build()
    root = b.head(b.expand(b.patches(), KAPPA_ID))
    after, fired = _run(root, [RULE["drop_identity"], RULE["conv"]])
    assert render(after) == "conv[tied](input(x))" and [f.rule.name for f in fired] == ["conv"]
    assert _lines(after.spans) == {BIAS, RECONCILE, EXPAND, PATCHES}  # the identity κ's span is not lost


def test_channels_share_one_interned_kappa_after_shared_kappa():
    b = Build()
    channels = [b.head(b.expand(b.x(), channel=c), channel=c) for c in range(3)]
    root = b.t("fuse_channels", *channels, use=CONCAT)
    expands = lambda t: [s for s in t.walk() if s.op == "expand"]  # noqa: E731
    assert len(expands(root)) == 3
    after, fired = _run(root, [RULE["shared_kappa"], RULE["linear"]])
    (kappa,) = expands(after)
    assert kappa.key.channel is None and kappa.prov == ("shared_kappa",)
    assert all(ch.args[0] is kappa for ch in after.args)  # one object, read by every channel
    assert render(after) == ("%1 = expand[chebyshev](input(x)); "
                             "fuse_channels[concat](linear[tied](%1), linear[tied](%1), linear[tied](%1))")
    assert sorted(f.rule.name for f in fired) == ["linear"] * 3 + ["shared_kappa"] * 3
    again, refired = _run(after, [RULE["shared_kappa"], RULE["linear"]])
    assert again is after and refired == []


def test_rewriting_an_argument_rebuilds_the_parents_with_their_own_spans_and_provenance():
    b = Build()
    root = b.head(b.xi(b.x(), CHAIN, prov=("earlier",)))
    after, _ = _run(root, [RULE["structured_xi"]])
    assert render(after) == "bias[tied](reconcile[identity](xi_kernel[chain](input(x))))"
    assert after.key == root.key and after.prov == root.prov and after.spans == root.spans
    assert after.args[0].spans == root.args[0].spans and after.args[0].args[0].prov == ("earlier", "structured_xi")


def test_a_rule_that_never_settles_is_an_error():
    grow = Rule("grow", "head", "test", lambda s: True, "test", "test",
                pattern=P("bias", "k"), rewrite=lambda m: m.make("bias", (m.root,)))
    b = Build()
    with pytest.raises(RuntimeError, match="fixed point"):
        _run(b.head(b.x()), [grow])
