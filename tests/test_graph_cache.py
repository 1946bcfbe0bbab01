"""The one graph cache: the normalised edge list (gather/scatter form) and the operator of rpn2c::graph_mm (rule
graph_spmm), one entry per edge tensor; it may never serve a stale graph."""

import pytest
import torch
from torch.testing import assert_close

import rpn2c
from rpn2c.functional.structure import graph_cache as cache
from rpn2c.lower.build import CompiledModel
from rpn2c.passes import optimize


def _models(disable=()):
    text = open("specs/gcn.rpn", encoding="utf-8").read()
    fast = CompiledModel(optimize(rpn2c.check(text), disable=disable)).double().eval()
    ref = rpn2c.compile(text, reference=True).double().eval()
    ref.load_state_dict(fast.state_dict())
    return fast, ref


def test_graph_normalisation_cache_follows_the_edge_tensor():
    fast, ref = _models(disable={"graph_spmm"})
    cache.clear_graph_cache()
    g = torch.Generator().manual_seed(0)
    n = 30
    x = torch.randn(n, 34, generator=g, dtype=torch.float64)
    edges = torch.randint(0, n, (2, 80), generator=g)
    assert_close(fast(x, edges), ref(x, edges))
    (entry,) = [op for _, op in cache._CACHE.values() if _ is not None and _[0] is edges]
    cached = entry.edges
    assert_close(fast(x, edges), ref(x, edges))
    assert len(cache._CACHE) == 1 and next(iter(cache._CACHE.values()))[1].edges is cached  # served, not rebuilt
    assert entry.csr is None and entry.dense is None  # the gather/scatter form never builds the matrix
    edges[1, :5] = (edges[1, :5] + 7) % n  # in-place edit bumps the version counter
    assert_close(fast(x, edges), ref(x, edges))
    assert all(op.edges is not cached for _, op in list(cache._CACHE.values())[-1:])
    other = torch.randint(0, n, (2, 80), generator=g)  # a different tensor
    assert_close(fast(x, other), ref(x, other))


def test_graph_operator_cache_never_serves_another_graph():
    """Views of one storage at other offsets, freed and reallocated tensors, in-place edits, several graphs in
    turn beyond the cache's size, inference tensors: each call equals the reference."""
    fast, ref = _models()
    g = torch.Generator().manual_seed(1)
    n = 30
    x = torch.randn(n, 34, generator=g, dtype=torch.float64)
    cache.clear_graph_cache()
    graphs = [torch.randint(0, n, (2, 70), generator=g) for _ in range(cache.MAX_GRAPHS + 2)]
    for _ in range(2):
        for e in graphs:
            assert_close(fast(x, e), ref(x, e))
    assert len(cache._CACHE) == cache.MAX_GRAPHS
    both = torch.randint(0, n, (2, 140), generator=g)
    for part in (both[:, :70], both[:, 70:]):  # same storage, other offset
        assert_close(fast(x, part), ref(x, part))
    for seed in range(3):  # a freed tensor's memory handed to the next one
        e = torch.randint(0, n, (2, 70), generator=torch.Generator().manual_seed(seed))
        assert_close(fast(x, e), ref(x, e))
        del e
    with torch.inference_mode():
        e = torch.randint(0, n, (2, 70), generator=g)
        assert_close(fast(x, e), ref(x, e))
    cache.clear_graph_cache()
    assert not cache._CACHE


def test_graph_mm_refuses_weights_that_need_gradients():
    w = torch.rand(5, requires_grad=True)
    with pytest.raises(ValueError, match="need gradients"):
        cache.graph_mm(torch.zeros(2, 5, dtype=torch.long), w, torch.randn(3, 2), n=3)
