"""Block uses in a checked graph, for pictures: which nodes each use of a block made, the block's name, and the
graph with each use collapsed into one node.

The checker names a block use's nodes under the value it binds (``y = enc(x)`` makes ``y.attn``, ``y.ff``, ...)
and the ``i``-th copy of ``y = repeat(n) enc(x)`` under ``y.i.``; nested uses stay inside their outer use.
"""

from __future__ import annotations

import re

from rpn2c.ir.digraph import DiGraph
from rpn2c.ir.graph import Graph, Node


def use_of(nid: str) -> str | None:
    """The outermost block use that made node ``nid`` (``y`` or ``y.3`` for a repeat), None outside blocks."""
    parts = nid.split(".")
    if len(parts) < 2:
        return None
    return ".".join(parts[:2]) if parts[1].isdigit() and len(parts) > 2 else parts[0]


def block_uses(graph: Graph) -> dict[str, list[str]]:
    """Each block use and its nodes, in topological order (a collapsed use is no longer one)."""
    out: dict[str, list[str]] = {}
    for n in graph.nodes():
        use = use_of(n.id) if n.kind != "block" else None
        if use is not None:
            out.setdefault(use, []).append(n.id)
    return out


def block_name(graph: Graph, use: str, nodes: list[str]) -> str | None:
    """The block a use instantiates: the ``block`` whose body holds the use's own nodes (read from the source)."""
    depth = use.count(".") + 1
    for nid in nodes:
        if nid.count(".") != depth:
            continue  # a nested use's node lies in the inner block
        span = graph.node(nid).span
        lines = graph.sources.get(span.file, "").splitlines()[:span.line]
        for line in reversed(lines):
            m = re.match(r"\s*(block|model)\s+([A-Za-z_][A-Za-z0-9_]*)", line)
            if m:
                return m[2] if m[1] == "block" else None
    return None


def _stacks(uses: dict[str, list[str]]) -> dict[str, list[tuple[str, list[str]]]]:
    """The uses (use, nodes) grouped by the value that made them: the copies ``y.0``, ``y.1``, ... of
    ``y = repeat(n) b(x)`` under ``y``, every other use alone."""
    out: dict[str, list[tuple[str, list[str]]]] = {}
    for use, nodes in uses.items():
        m = re.fullmatch(r"(.+)\.(\d+)", use)
        out.setdefault(m[1] if m else use, []).append((use, nodes))
    return out


def collapse(graph: Graph) -> Graph:
    """``graph`` with each block use drawn as one node (kind ``block``), and the ``n`` copies of a ``repeat`` as one
    node ``× n``: the type of the value it returns, the sum of its parameters and every kernel chosen inside it;
    edges between uses and other nodes are kept once."""
    stacks = _stacks(block_uses(graph))
    uses = {use: [v for _, nodes in copies for v in nodes] for use, copies in stacks.items()}
    owner = {nid: use for use, nodes in uses.items() for nid in nodes}
    g = DiGraph()
    for n in graph.nodes():
        if n.id not in owner:
            g.add_node(n.id, node=n)
    for use, nodes in uses.items():
        leaving = [v for v in nodes if v in graph.outputs or any(owner.get(w) != use for w in graph.g.successors(v))]
        out = graph.node(leaving[-1] if leaving else nodes[-1])
        name = block_name(graph, *stacks[use][0])
        plan = list(dict.fromkeys(k for v in nodes for k in graph.node(v).plan))
        node = Node(use, "block", out.span, out.type, params=sum(graph.node(v).params for v in nodes), plan=plan,
                    trace={"block": name, "nodes": len(nodes), "copies": len(stacks[use])})
        g.add_node(use, node=node)
    for u, v, d in graph.g.edges(data=True):
        a, b = owner.get(u, u), owner.get(v, v)
        if a != b and not g.has_edge(a, b):
            g.add_edge(a, b, **d)
    outputs = list(dict.fromkeys(owner.get(o, o) for o in graph.outputs))
    return Graph(graph.name, g, list(graph.inputs), outputs, graph.sources, list(graph.log))
