"""The optimiser driver: canonicalise the graph, then take every kernel decision from the rule tables.

``optimize(graph)`` rewrites the graph (dead code, common operations), then for each layer, head and recurrent
node tries the rules of every slot and keeps the highest-benefit rule whose guard holds. The decisions are stored
on the node (``node.decisions``) and are the *only* input the default lowering reads to choose a kernel, so the
labels shown by ``rpn2c check`` and ``rpn2c explain`` are what runs. ``disable`` switches rules off (the lowering
then falls back to the next rule of the slot or to the literal form) — the differential tests use it.
"""

from __future__ import annotations

from collections.abc import Iterable

from rpn2c.ir.graph import Graph
from rpn2c.passes.canonical import common_ops, dead_code, shared_interdependence
from rpn2c.passes.rule import Decision, Rule, Site
from rpn2c.passes.rules import RULES

GRAPH_RULES = ("dead_code", "common_op", "shared_xi")


def rule_names() -> list[str]:
    return [r.name for r in RULES] + list(GRAPH_RULES)


def _choose(rules: Iterable[Rule], site: Site, head: str | None) -> list[Decision]:
    best: dict[str, Rule] = {}
    for r in rules:
        if not r.guard(site) or (r.slot in best and r.benefit <= best[r.slot].benefit):
            continue
        if r.profitable and r.cost is not None:
            c = r.cost(site)
            if c.flops_after > c.flops_before:
                continue
        best[r.slot] = r
    out = []
    for r in sorted(best.values(), key=lambda r: RULES.index(r)):
        cost = r.cost(site) if r.cost is not None else None
        out.append(Decision(r.name, r.slot, head, r.location, r.why, r.paper, cost))
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
    for node in graph.nodes():
        decisions: list[Decision] = []
        if node.kind == "layer":
            preds = graph.preds(node.id)
            x = graph.node(preds["x"]).type
            data = graph.node(preds["context"]).type if "context" in preds else x
            for h, t in zip(node.layer.heads, node.trace["heads"]):
                site = Site(node, h, t, x, data, graph)
                decisions += _choose((r for r in enabled if r.scope == "head"), site, h.name)
            decisions += _choose((r for r in enabled if r.scope == "layer"), Site(node, graph=graph), None)
        elif node.kind == "recurrent":
            decisions += _choose((r for r in enabled if r.scope == "recurrent"), Site(node, graph=graph), None)
        node.decisions = decisions
        node.plan = sorted({d.rule for d in decisions})
    return graph


def kernels(node) -> dict[str | None, set[str]]:
    """The rules that fired on ``node``, per head name (``None``: layer- or node-wide)."""
    out: dict[str | None, set[str]] = {None: set()}
    for d in getattr(node, "decisions", ()):
        out.setdefault(d.head, set()).add(d.rule)
    return out
