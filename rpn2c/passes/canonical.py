"""Graph-level canonicalisation: dead-code elimination and common-subexpression elimination of operations.

- DCE: a node from which no model output is reachable never runs and owns no parameters.
- CSE: two parameter-free, deterministic operations of the same kind on the same inputs compute the same value;
  the later one is replaced by the earlier (its consumers are rewired).
- shared interdependence: identical parameter-free ξ reading the same named inputs (the edge list of two GCN
  layers) are computed once per forward; heads record a share key the lowering hands to their ξ modules.
Both record what they did on ``graph.log`` so ``rpn2c explain`` can show it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


from rpn2c.ir.digraph import ancestors
from rpn2c.ir.graph import Graph

_RANDOM = ("dropout",)  # operations that draw random numbers are never merged


@dataclass(frozen=True)
class GraphRewrite:
    rule: str
    node: str
    detail: str
    span: object

    def to_json(self) -> dict:
        return {"rule": self.rule, "node": self.node, "detail": self.detail, "span": str(self.span)}


def dead_code(graph: Graph) -> list[GraphRewrite]:
    """Remove every non-input node that reaches no output."""
    live = set(graph.outputs)
    for out in graph.outputs:
        live |= ancestors(graph.g, out)
    done = []
    for nid in sorted(set(graph.g.nodes) - live - set(graph.inputs)):
        node = graph.node(nid)
        done.append(GraphRewrite("dead_code", nid, f"'{nid}' reaches no output: removed "
                                                   f"({node.params:,} parameters)", node.span))
        graph.g.remove_node(nid)
    return done


def _op_key(graph: Graph, nid: str) -> str | None:
    node = graph.node(nid)
    if node.kind != "op" or node.params or any(r in node.op.name for r in _RANDOM):
        return None
    preds = sorted(graph.preds(nid).items())
    return json.dumps([node.op.canonical(), preds], sort_keys=True, default=str)


def common_ops(graph: Graph) -> list[GraphRewrite]:
    """Merge identical parameter-free operations on identical inputs (outputs are never merged away)."""
    seen: dict[str, str] = {}
    done = []
    for node in graph.nodes():
        key = _op_key(graph, node.id)
        if key is None:
            continue
        if key not in seen or node.id in graph.outputs:
            seen.setdefault(key, node.id)
            continue
        keep = seen[key]
        if any(graph.g.has_edge(keep, dst) for dst in graph.g.successors(node.id)):
            continue  # one consumer reading both: the IR has one edge per (producer, consumer) pair
        for _, dst, data in list(graph.g.out_edges(node.id, data=True)):
            graph.g.add_edge(keep, dst, **data)
        graph.g.remove_node(node.id)
        done.append(GraphRewrite("common_op", node.id, f"'{node.id}' = '{keep}' ({node.op}): merged", node.span))
    return done


def _xi_share_key(graph: Graph, node, head, slot, use) -> str | None:
    comp = use.component
    if not comp.shareable:
        return None
    preds = graph.preds(node.id)
    inputs = sorted((k, preds.get(f"aux:{r.name}", "")) for k, r in comp.value_refs())
    return json.dumps([use.canonical(), slot.startswith("xi_attribute"), inputs], sort_keys=True, default=str)


def shared_interdependence(graph: Graph) -> list[GraphRewrite]:
    """Give identical shareable ξ across heads and layers one share key (``node.trace['xi_share']``)."""
    groups: dict[str, list] = {}
    for node in graph.nodes():
        if node.kind == "layer":
            node.trace["xi_share"] = {}
            for h in node.layer.heads:
                for slot, use in h.xi.items():
                    key = _xi_share_key(graph, node, h, slot, use)
                    if key is not None:
                        groups.setdefault(key, []).append((node, h, slot, use))
    done = []
    for members in groups.values():
        if len(members) < 2:
            continue
        first = members[0][0]
        share = f"{first.id}.{members[0][1].name}.{members[0][2]}"
        for k, (node, h, slot, use) in enumerate(members):
            node.trace["xi_share"][f"{h.name}:{slot}"] = share
            if k:
                done.append(GraphRewrite("shared_xi", node.id, f"{slot} = {use} of '{node.id}' is the one of "
                                                               f"'{first.id}': computed once", use.span))
    return done
