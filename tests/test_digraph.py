"""The IR's graph container answers as ``networkx.DiGraph`` does, on random graphs."""

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rpn2c.ir.digraph import DiGraph, ancestors, lexicographical_topological_sort


@st.composite
def dags(draw):
    """A random DAG over names ``n0 … n{k-1}`` (edges only from a lower to a higher index, added in random order),
    each edge with a role attribute, nodes with an attribute; plus nodes to remove."""
    k = draw(st.integers(1, 12))
    names = [f"n{i:02d}" for i in draw(st.permutations(range(k)))]  # insertion order unrelated to the names
    pairs = draw(st.lists(st.tuples(st.integers(0, k - 1), st.integers(0, k - 1)), max_size=30))
    edges = [(f"n{min(a, b):02d}", f"n{max(a, b):02d}", f"r{a}{b}") for a, b in pairs if a != b]
    drop = draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
    return names, edges, drop


def _both(names, edges):
    ours, theirs = DiGraph(), nx.DiGraph()
    for g in (ours, theirs):
        g.graph["calls"] = {"b": 1}
        for n in names:
            g.add_node(n, node=n.upper())
        for u, v, role in edges:
            g.add_edge(u, v, role=role)  # a repeated edge updates its attributes, in both
    return ours, theirs


@settings(max_examples=150, deadline=None)
@given(dags())
def test_the_container_answers_as_networkx(case):
    names, edges, drop = case
    ours, theirs = _both(names, edges)
    for g in (ours, theirs):
        for n in drop:
            g.remove_node(n)
    assert list(ours) == list(theirs) and len(ours) == len(theirs)
    assert list(ours.edges) == list(theirs.edges) and ours.number_of_edges() == theirs.number_of_edges()
    assert list(ours.edges(data=True)) == list(theirs.edges(data=True))
    assert list(lexicographical_topological_sort(ours)) == list(nx.lexicographical_topological_sort(theirs))
    for n in theirs:
        assert ours.nodes[n] == theirs.nodes[n] and (n in ours) and ours.has_node(n)
        assert ancestors(ours, n) == nx.ancestors(theirs, n)
        assert ours.in_edges(n, data=True) == list(theirs.in_edges(n, data=True))
        assert ours.out_edges(n) == list(theirs.out_edges(n))
        assert list(ours.successors(n)) == list(theirs.successors(n))
        assert list(ours.predecessors(n)) == list(theirs.predecessors(n))
        assert (ours.in_degree(n), ours.out_degree(n)) == (theirs.in_degree(n), theirs.out_degree(n))
    for u, v, _ in edges:
        assert ours.has_edge(u, v) == theirs.has_edge(u, v)
        if theirs.has_edge(u, v):
            assert ours.edges[u, v] == theirs.edges[u, v]
    assert nx.utils.graphs_equal(ours.to_networkx(), theirs) and ours.to_networkx().graph == theirs.graph
    copy = ours.copy()
    copy.add_edge("new", names[0])
    assert copy.graph == ours.graph and copy.graph is not ours.graph
    assert "new" not in ours and list(copy.edges(data=True))[:len(theirs.edges)] == list(theirs.edges(data=True))


def test_a_cycle_has_no_topological_order():
    g = DiGraph([("a", "b"), ("b", "c"), ("c", "a"), ("x", "a")])
    with pytest.raises(ValueError, match="cycle"):
        list(lexicographical_topological_sort(g))


def test_removing_an_absent_node_is_a_key_error_and_unhashables_are_no_nodes():
    g = DiGraph([("a", "b")])
    with pytest.raises(KeyError):
        g.remove_node("z")
    assert ["a"] not in g and ("a", "b") in g.edges and ("b", "a") not in g.edges
