"""The IR's graph container: a directed graph with attribute dicts, in networkx's interface.

The checker, the passes and the lowering use a small part of ``networkx.DiGraph`` (nodes and edges with attribute
dicts, predecessors and successors, a deterministic topological order, ancestors). ``import networkx`` loads the
whole package (every algorithm, generator, reader and backend; about 0.2 s), which every command that builds a model
would pay before it runs anything. This class keeps that part, with networkx's method names and semantics, so that
``rpn2c eval`` imports no networkx; :meth:`DiGraph.to_networkx` hands the same graph to networkx's algorithms.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterable, Iterator
from typing import Any


class _NodeView:
    """``g.nodes``: iterate the node ids, ``g.nodes[n]`` is ``n``'s attribute dict."""

    __slots__ = ("_g",)

    def __init__(self, g: DiGraph):
        self._g = g

    def __getitem__(self, n: Hashable) -> dict:
        return self._g._node[n]

    def __iter__(self) -> Iterator:
        return iter(self._g._node)

    def __len__(self) -> int:
        return len(self._g._node)

    def __contains__(self, n: object) -> bool:
        return n in self._g._node

    def __call__(self, data: bool = False) -> Iterable:
        return self._g._node.items() if data else iter(self._g._node)


class _EdgeView:
    """``g.edges``: iterate ``(u, v)``; ``g.edges(data=True)`` yields ``(u, v, attributes)``; ``g.edges[u, v]`` is the
    attribute dict of the edge ``u → v``."""

    __slots__ = ("_g",)

    def __init__(self, g: DiGraph):
        self._g = g

    def __getitem__(self, e: tuple) -> dict:
        u, v = e
        return self._g._succ[u][v]

    def __iter__(self) -> Iterator[tuple]:
        return ((u, v) for u, nbrs in self._g._succ.items() for v in nbrs)

    def __len__(self) -> int:
        return sum(len(nbrs) for nbrs in self._g._succ.values())

    def __contains__(self, e: object) -> bool:
        return isinstance(e, tuple) and len(e) == 2 and self._g.has_edge(*e)

    def __call__(self, data: bool = False) -> Iterator[tuple]:
        if not data:
            return iter(self)
        return ((u, v, d) for u, nbrs in self._g._succ.items() for v, d in nbrs.items())


class DiGraph:
    """Nodes in insertion order, each with an attribute dict; at most one edge ``u → v``, with an attribute dict;
    ``graph``: the graph's own attributes."""

    def __init__(self, edges: Iterable[tuple] = ()):
        self.graph: dict = {}
        self._node: dict[Hashable, dict] = {}
        self._succ: dict[Hashable, dict[Hashable, dict]] = {}
        self._pred: dict[Hashable, dict[Hashable, dict]] = {}
        for u, v in edges:
            self.add_edge(u, v)

    # ---------------------------------------------------------------------------------------------- building
    def add_node(self, n: Hashable, **attr: Any) -> None:
        if n not in self._node:
            self._node[n], self._succ[n], self._pred[n] = {}, {}, {}
        self._node[n].update(attr)

    def add_edge(self, u: Hashable, v: Hashable, **attr: Any) -> None:
        """Add ``u → v`` (and either end not yet present), or update its attributes."""
        for n in (u, v):
            if n not in self._node:
                self.add_node(n)
        data = self._succ[u].get(v)
        if data is None:
            data = self._succ[u][v] = self._pred[v][u] = {}
        data.update(attr)

    def remove_node(self, n: Hashable) -> None:
        """Remove ``n`` and every edge at it; ``KeyError`` if it is absent."""
        for v in self._succ.pop(n):
            del self._pred[v][n]
        for u in self._pred.pop(n):
            del self._succ[u][n]
        del self._node[n]

    def copy(self) -> DiGraph:
        """Same nodes and edges; attribute dicts copied (their values shared), as ``networkx.DiGraph.copy``."""
        out = DiGraph()
        out.graph.update(self.graph)
        for n, d in self._node.items():
            out.add_node(n, **d)
        for u, v, d in self.edges(data=True):
            out.add_edge(u, v, **d)
        return out

    # ---------------------------------------------------------------------------------------------- reading
    @property
    def nodes(self) -> _NodeView:
        return _NodeView(self)

    @property
    def edges(self) -> _EdgeView:
        return _EdgeView(self)

    def __contains__(self, n: object) -> bool:
        try:
            return n in self._node
        except TypeError:  # an unhashable value is no node
            return False

    def __iter__(self) -> Iterator:
        return iter(self._node)

    def __len__(self) -> int:
        return len(self._node)

    def has_node(self, n: Hashable) -> bool:
        return n in self

    def has_edge(self, u: Hashable, v: Hashable) -> bool:
        return u in self._succ and v in self._succ[u]

    def successors(self, n: Hashable) -> Iterator:
        return iter(self._succ[n])

    def predecessors(self, n: Hashable) -> Iterator:
        return iter(self._pred[n])

    def in_degree(self, n: Hashable) -> int:
        return len(self._pred[n])

    def out_degree(self, n: Hashable) -> int:
        return len(self._succ[n])

    def in_edges(self, n: Hashable, data: bool = False) -> list[tuple]:
        """Edges into ``n``: ``(u, n)``, or ``(u, n, attributes)`` with ``data=True``."""
        return [(u, n, d) if data else (u, n) for u, d in self._pred[n].items()]

    def out_edges(self, n: Hashable, data: bool = False) -> list[tuple]:
        """Edges out of ``n``: ``(n, v)``, or ``(n, v, attributes)`` with ``data=True``."""
        return [(n, v, d) if data else (n, v) for v, d in self._succ[n].items()]

    def number_of_nodes(self) -> int:
        return len(self._node)

    def number_of_edges(self) -> int:
        return len(self.edges)

    def to_networkx(self):
        """The same graph as a ``networkx.DiGraph`` (attribute dicts shared), for networkx's algorithms."""
        import networkx as nx

        g = nx.DiGraph(**self.graph)
        g.add_nodes_from(self._node.items())
        g.add_edges_from(self.edges(data=True))
        return g


def lexicographical_topological_sort(g: DiGraph, key=None) -> Iterator:
    """Kahn's order, always taking the smallest ready node (by ``key``), as networkx's function of this name: the
    order depends only on the graph, not on insertion. ``ValueError`` on a cycle."""
    key = key or (lambda n: n)
    indegree = {n: g.in_degree(n) for n in g}
    tick = itertools.count()  # ties of ``key`` by insertion, never by comparing nodes
    ready = [(key(n), next(tick), n) for n in g if indegree[n] == 0]
    heapq.heapify(ready)
    done = 0
    while ready:
        _, _, n = heapq.heappop(ready)
        done += 1
        yield n
        for v in g.successors(n):
            indegree[v] -= 1
            if indegree[v] == 0:
                heapq.heappush(ready, (key(v), next(tick), v))
    if done != len(indegree):
        raise ValueError("the graph has a cycle: no topological order")


def ancestors(g: DiGraph, n: Hashable) -> set:
    """Every node with a path to ``n`` (``n`` itself excluded)."""
    seen: set = set()
    stack = list(g.predecessors(n))
    while stack:
        u = stack.pop()
        if u not in seen:
            seen.add(u)
            stack.extend(g.predecessors(u))
    return seen
