"""Block uses in a checked graph, for pictures: which nodes each use of a block made and the block's name
(``Graph.collapsed`` draws each use as one node).

The checker names a block use's nodes under the value it binds (``y = enc(x)`` makes ``y.attn``, ``y.ff``, ...)
and the ``i``-th copy of ``y = repeat(n) enc(x)`` under ``y.i.``; nested uses stay inside their outer use.
"""

from __future__ import annotations

import re


def use_of(nid: str) -> str | None:
    """The outermost block use that made node ``nid`` (``y`` or ``y.3`` for a repeat), None outside blocks."""
    parts = nid.split(".")
    if len(parts) < 2:
        return None
    return ".".join(parts[:2]) if parts[1].isdigit() and len(parts) > 2 else parts[0]


def block_uses(graph) -> dict[str, list[str]]:
    """Each block use and its nodes, in topological order (a collapsed use is no longer one)."""
    out: dict[str, list[str]] = {}
    for n in graph.nodes():
        use = use_of(n.id) if n.kind != "block" else None
        if use is not None:
            out.setdefault(use, []).append(n.id)
    return out


def block_name(graph, use: str, nodes: list[str]) -> str | None:
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
