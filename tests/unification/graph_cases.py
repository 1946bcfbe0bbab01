"""Random edge lists for the graph tests: every form PyG accepts, not only simple graphs.

``edge_lists`` draws a directed edge list ``[2, E]`` over ``n`` nodes with duplicated edges, self-loops (repeated
too), isolated nodes (at least one node no edge touches, some of the time) and any order of the entries.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st


@st.composite
def edge_lists(draw, max_nodes: int = 6, max_edges: int = 10, loops: bool = True):
    """``(n, edge_index)``; ``loops=False`` leaves self-loops out."""
    n = draw(st.integers(1, max_nodes))
    node = st.integers(0, n - 1)
    pairs = draw(st.lists(st.tuples(node, node), max_size=max_edges))
    if loops:
        pairs += [(v, v) for v in draw(st.lists(node, max_size=4))]  # repeated nodes: duplicated self-loops
    else:
        pairs = [(s, t) for s, t in pairs if s != t]
    if pairs:
        pairs += draw(st.lists(st.sampled_from(pairs), max_size=4))  # duplicated edges (and loops)
    order = draw(st.permutations(range(len(pairs))))
    n += draw(st.integers(0, 2))  # isolated nodes after the last index
    ei = torch.tensor([pairs[k] for k in order], dtype=torch.long).reshape(-1, 2).T.contiguous()
    return n, ei


def has_duplicate_self_loops(ei: torch.Tensor) -> bool:
    loops = ei[0][ei[0] == ei[1]]
    return loops.numel() != loops.unique().numel()
