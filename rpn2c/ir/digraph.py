"""The IR's directed graph: networkx's ``DiGraph`` interface as far as rpn2c uses it, on three dicts.

``import networkx`` loads some 350 modules (a tenth of a second or more, as much as the rest of the checker), for a
graph whose every use here is a node or edge attribute dict, a neighbour, a degree, a topological order or the
ancestors of a node. This class keeps networkx's semantics and iteration orders for those (nodes in insertion order,
edges by source then target insertion order, an edge's data one dict shared by both directions); networkx's
algorithms take :meth:`DiGraph.to_networkx`.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterator
from typing import Any


class NodeView:
    """``g.nodes``: iterate, test membership, ``g.nodes[n]`` (the attribute dict), ``g.nodes(data=True)``."""

    def __init__(self, attrs: dict):
        self._attrs = attrs

    def __getitem__(self, n: Hashable) -> dict:
        return self._attrs[n]

    def __iter__(self) -> Iterator:
        return iter(self._attrs)

    def __len__(self) -> int:
        return len(self._attrs)

    def __contains__(self, n: object) -> bool:
        return n in self._attrs

    def __call__(self, data: bool = False):
        return list(self._attrs.items()) if data else list(self._attrs)


class EdgeView:
    """``g.edges``: iterate ``(u, v)``, ``(u, v) in``, ``g.edges[u, v]`` (the data dict), ``g.edges(data=True)``."""

    def __init__(self, succ: dict):
        self._succ = succ

    def __iter__(self) -> Iterator[tuple]:
        return ((u, v) for u, nbrs in self._succ.items() for v in nbrs)

    def __len__(self) -> int:
        return sum(len(nbrs) for nbrs in self._succ.values())

    def __contains__(self, edge: object) -> bool:
        try:
            u, v = edge  # type: ignore[misc]
        except (TypeError, ValueError):
            return False
        return u in self._succ and v in self._succ[u]

    def __getitem__(self, edge: tuple) -> dict:
        u, v = edge
        return self._succ[u][v]

    def __call__(self, data: bool = False) -> list[tuple]:
        return [(u, v, d) if data else (u, v) for u, nbrs in self._succ.items() for v, d in nbrs.items()]


class DiGraph:
    """A directed graph without parallel edges: nodes with attribute dicts, edges with data dicts."""

    def __init__(self) -> None:
        self._node: dict[Hashable, dict] = {}
        self._succ: dict[Hashable, dict[Hashable, dict]] = {}
        self._pred: dict[Hashable, dict[Hashable, dict]] = {}

    @property
    def nodes(self) -> NodeView:
        return NodeView(self._node)

    @property
    def edges(self) -> EdgeView:
        return EdgeView(self._succ)

    def __iter__(self) -> Iterator:
        return iter(self._node)

    def __len__(self) -> int:
        return len(self._node)

    def __contains__(self, n: object) -> bool:
        try:
            return n in self._node
        except TypeError:
            return False

    def add_node(self, n: Hashable, **attr: Any) -> None:
        """Add ``n`` (or update its attributes)."""
        if n not in self._node:
            self._node[n], self._succ[n], self._pred[n] = {}, {}, {}
        self._node[n].update(attr)

    def add_edge(self, u: Hashable, v: Hashable, **attr: Any) -> None:
        """Add the edge ``u -> v`` (and its nodes), or update its data."""
        for n in (u, v):
            if n not in self._node:
                self.add_node(n)
        data = self._succ[u].get(v, {})
        data.update(attr)
        self._succ[u][v] = self._pred[v][u] = data

    def remove_node(self, n: Hashable) -> None:
        """Remove ``n`` and its edges; KeyError if it is not in the graph."""
        del self._node[n]
        for v in self._succ.pop(n):
            if v != n:
                del self._pred[v][n]
        for u in self._pred.pop(n):
            if u != n:
                del self._succ[u][n]

    def has_edge(self, u: Hashable, v: Hashable) -> bool:
        return u in self._succ and v in self._succ[u]

    def successors(self, n: Hashable) -> Iterator:
        return iter(self._succ[n])

    def predecessors(self, n: Hashable) -> Iterator:
        return iter(self._pred[n])

    def in_edges(self, n: Hashable, data: bool = False) -> list[tuple]:
        return [(u, n, d) if data else (u, n) for u, d in self._pred[n].items()]

    def out_edges(self, n: Hashable, data: bool = False) -> list[tuple]:
        return [(n, v, d) if data else (n, v) for v, d in self._succ[n].items()]

    def in_degree(self, n: Hashable) -> int:
        return len(self._pred[n])

    def out_degree(self, n: Hashable) -> int:
        return len(self._succ[n])

    def to_networkx(self):
        """The same graph as a ``networkx.DiGraph`` (node attributes and edge data shared, not copied)."""
        import networkx as nx

        g = nx.DiGraph()
        g.add_nodes_from(self._node.items())
        g.add_edges_from((u, v, d) for u, nbrs in self._succ.items() for v, d in nbrs.items())
        return g


def lexicographical_topological_sort(g: DiGraph) -> Iterator:
    """The nodes in topological order, the smallest ready node first (``networkx.lexicographical_topological_sort``
    without a key); ValueError on a cycle."""
    indegree = {v: g.in_degree(v) for v in g if g.in_degree(v)}
    ready = [v for v in g if not g.in_degree(v)]
    heapq.heapify(ready)
    while ready:
        node = heapq.heappop(ready)
        for child in g.successors(node):
            indegree[child] -= 1
            if not indegree[child]:
                heapq.heappush(ready, child)
                del indegree[child]
        yield node
    if indegree:
        raise ValueError("the graph has a cycle")


def ancestors(g: DiGraph, n: Hashable) -> set:
    """Every node with a path to ``n``, ``n`` excluded (``networkx.ancestors``)."""
    seen = {n}
    todo = [n]
    while todo:
        for u in g.predecessors(todo.pop()):
            if u not in seen:
                seen.add(u)
                todo.append(u)
    return seen - {n}
