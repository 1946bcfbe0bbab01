"""The IR's graph keeps networkx's semantics and orders: the same random sequence of node and edge additions,
data updates and node removals, applied to ``rpn2c.ir.digraph.DiGraph`` and to ``networkx.DiGraph``, leaves graphs
that iterate, look up, and sort alike."""

from __future__ import annotations

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rpn2c.ir import digraph
from rpn2c.ir.digraph import DiGraph

NAMES = st.sampled_from([f"n{i}" for i in range(9)])
STEPS = st.lists(st.one_of(
    st.tuples(st.just("node"), NAMES, st.integers(0, 3)),
    st.tuples(st.just("edge"), NAMES, NAMES, st.integers(0, 3)),
    st.tuples(st.just("remove"), NAMES)), max_size=40)


def _apply(steps, ours: DiGraph, theirs: nx.DiGraph, acyclic: bool) -> None:
    for step in steps:
        if step[0] == "node":
            ours.add_node(step[1], tag=step[2])
            theirs.add_node(step[1], tag=step[2])
        elif step[0] == "edge":
            u, v = sorted(step[1:3]) if acyclic else step[1:3]  # edges from the smaller name: no cycle
            if acyclic and u == v:
                continue
            ours.add_edge(u, v, role=step[3])
            theirs.add_edge(u, v, role=step[3])
        elif step[1] in theirs:
            ours.remove_node(step[1])
            theirs.remove_node(step[1])


def _same(ours: DiGraph, theirs: nx.DiGraph) -> None:
    assert list(ours) == list(theirs) and list(ours.nodes) == list(theirs.nodes) and len(ours) == len(theirs)
    assert ours.nodes(data=True) == list(theirs.nodes(data=True))
    assert list(ours.edges) == list(theirs.edges) and len(ours.edges) == len(theirs.edges)
    assert ours.edges(data=True) == list(theirs.edges(data=True))
    for n in theirs:
        assert ours.nodes[n] == theirs.nodes[n] and n in ours and n in ours.nodes
        assert ours.in_edges(n, data=True) == list(theirs.in_edges(n, data=True))
        assert ours.out_edges(n) == list(theirs.out_edges(n))
        assert list(ours.successors(n)) == list(theirs.successors(n))
        assert list(ours.predecessors(n)) == list(theirs.predecessors(n))
        assert (ours.in_degree(n), ours.out_degree(n)) == (theirs.in_degree(n), theirs.out_degree(n))
    for u, v in theirs.edges:
        assert ours.has_edge(u, v) and (u, v) in ours.edges and ours.edges[u, v] == theirs.edges[u, v]
    assert not ours.has_edge("n0", "absent") and "absent" not in ours and ("n0", "absent") not in ours.edges


@given(STEPS, st.booleans())
def test_the_graph_behaves_as_networkx_digraph(steps, acyclic):
    ours, theirs = DiGraph(), nx.DiGraph()
    _apply(steps, ours, theirs, acyclic)
    _same(ours, theirs)
    back = ours.to_networkx()
    assert list(back.nodes(data=True)) == list(theirs.nodes(data=True))
    assert list(back.edges(data=True)) == list(theirs.edges(data=True))
    if acyclic:
        assert list(digraph.lexicographical_topological_sort(ours)) == \
            list(nx.lexicographical_topological_sort(theirs))
        for n in theirs:
            assert digraph.ancestors(ours, n) == nx.ancestors(theirs, n)


def test_an_edge_s_data_is_one_dict_for_both_directions_and_updates_in_place():
    g = DiGraph()
    g.add_node("a", node=1)
    g.add_edge("a", "b", role="x")
    g.edges["a", "b"]["also"] = ("y",)
    g.add_edge("a", "b", role="z")
    assert g.in_edges("b", data=True) == [("a", "b", {"role": "z", "also": ("y",)})]
    assert g.nodes["a"] == {"node": 1} and g.nodes["b"] == {}


def test_a_cycle_has_no_topological_order_and_ancestors_leave_the_node_out():
    g = DiGraph()
    g.add_edge("a", "b")
    g.add_edge("b", "a")
    g.add_edge("a", "a")
    assert digraph.ancestors(g, "a") == {"b"}
    with pytest.raises(ValueError, match="cycle"):
        list(digraph.lexicographical_topological_sort(g))
    g.remove_node("a")
    assert list(g) == ["b"] and list(g.edges) == [] and g.in_degree("b") == 0
