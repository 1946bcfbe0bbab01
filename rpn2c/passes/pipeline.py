"""The optimiser: canonicalise the graph, then rewrite every layer's term with the rule tables.

``optimize(graph)`` rewrites the graph (dead code, common operations, shared interdependence), builds each layer's
and recurrent node's term of paper operations (``rpn2c/ir/terms.py``) and rewrites it to a fixed point with the
rules of ``rpn2c/passes/rules`` (``passes/rewrite.py``). Each rule that fired becomes a :class:`Decision` on the
node (``node.decisions``, in firing order, with the spans it replaced and the term before and after); the term
itself is kept as ``node.terms = (before, after)``. The rewritten term is the program the default lowering runs
(``rpn2c/lower/program.py``: one emitter per op), so the kernels ``rpn2c check`` and ``rpn2c explain`` show are what
runs, with the run-time fallbacks each kernel op declares (``rpn2c.ir.kernels.Fallback``). ``disable`` switches
rules off (the term then keeps the next rule's op or the literal form) — the differential tests use it.
"""

from __future__ import annotations

from collections.abc import Iterable

from rpn2c.ir.graph import Graph
from rpn2c.ir.terms import TermTable, build_terms, render
from rpn2c.passes.canonical import common_ops, dead_code, shared_interdependence
from rpn2c.passes.rewrite import Fired, rewrite
from rpn2c.passes.rule import Decision, Rule, Site
from rpn2c.passes.rules import RULES

GRAPH_RULES = ("dead_code", "common_op", "shared_xi")
CANONICAL_SLOTS = ("identity",)  # rewrites that choose no kernel: not in the kernel column (``node.plan``)


def rule_names() -> list[str]:
    return [r.name for r in RULES] + list(GRAPH_RULES)


def _sites(graph: Graph, node) -> dict[str | None, Site]:
    """What the guards of ``node``'s rules read: per head name, and ``None`` for the node itself."""
    sites = {None: Site(node, graph=graph)}
    if node.kind == "layer":
        preds = graph.preds(node.id)
        x = graph.node(preds["x"]).type
        data = graph.node(preds["context"]).type if "context" in preds else x
        for h, t in zip(node.layer.heads, node.trace["heads"]):
            sites[h.name] = Site(node, h, t, x, data, graph)
    return sites


def _costs(sites: dict) -> callable:
    """A rule's cost estimate at a head (or the node), computed once: the guard and the record read the same."""
    memo = {}

    def cost(rule: Rule, head):
        key = (rule.name, head)
        if key not in memo:
            memo[key] = rule.cost(sites[head]) if rule.cost is not None else None
        return memo[key]

    return cost


def _allowed(sites: dict, cost_of=None) -> callable:
    cost_of = cost_of or _costs(sites)

    def allow(rule: Rule, term) -> bool:
        head = term.info.get("head")
        if (rule.scope == "head") != (head is not None):
            return False
        site = sites[head]
        if not rule.guard(site):
            return False
        if rule.profitable and rule.cost is not None:
            c = cost_of(rule, head)
            return c.flops_after <= c.flops_before
        return True

    return allow


def _decisions(fired: list[Fired], cost_of) -> list[Decision]:
    out, seen = [], set()
    for f in fired:
        r, head = f.rule, f.before.info.get("head")
        if (r.name, head) in seen:  # the same rule on another channel of the head
            continue
        seen.add((r.name, head))
        cost = cost_of(r, head)
        spans = tuple(str(s) for s in sorted(f.spans))
        out.append(Decision(r.name, r.slot, head, r.location, r.why, r.paper, cost, spans, render(f.before),
                            render(f.after)))
    return out


def optimize(graph: Graph, disable: Iterable[str] = ()) -> Graph:
    """Optimise ``graph`` in place (and return it). Idempotent: a second run changes nothing."""
    disable = set(disable)
    unknown = disable - set(rule_names())
    if unknown:
        raise ValueError(f"unknown optimiser rules {sorted(unknown)}; known: {rule_names()}")
    log = list(graph.log)
    if "dead_code" not in disable:
        log += dead_code(graph)
    if "common_op" not in disable:
        log += common_ops(graph)
    if "shared_xi" not in disable:
        log = [r for r in log if r.rule != "shared_xi"] + shared_interdependence(graph)
    else:
        for node in graph.nodes():
            node.trace.pop("xi_share", None)
    graph.log = log
    enabled = [r for r in RULES if r.name not in disable]
    terms = build_terms(graph)
    for node in graph.nodes():
        node.decisions, node.terms = [], None
        if node.id not in terms:
            continue
        sites = _sites(graph, node)
        cost_of = _costs(sites)
        before = terms[node.id]
        after, fired = rewrite(before, enabled, TermTable(before), _allowed(sites, cost_of))
        node.terms = (before, after)
        node.decisions = _decisions(fired, cost_of)
        node.plan = sorted({d.rule for d in node.decisions if d.slot not in CANONICAL_SLOTS})
    return graph

