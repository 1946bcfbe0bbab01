"""The graph ξ caches its normalised edge list per edge tensor; the cache must never serve a stale graph."""

import torch
from torch.testing import assert_close

import rpn2c


def test_graph_normalisation_cache_follows_the_edge_tensor():
    fast = rpn2c.compile_file("specs/gcn.rpn").double().eval()
    ref = rpn2c.compile_file("specs/gcn.rpn", reference=True).double().eval()
    ref.load_state_dict(fast.state_dict())
    g = torch.Generator().manual_seed(0)
    n = 30
    x = torch.randn(n, 34, generator=g, dtype=torch.float64)
    edges = torch.randint(0, n, (2, 80), generator=g)
    assert_close(fast(x, edges), ref(x, edges))
    xi = fast.h.xi_instance
    cached = xi._cache[1]
    assert_close(fast(x, edges), ref(x, edges))
    assert xi._cache[1] is cached  # same tensor, unmodified: served from the cache
    edges[1, :5] = (edges[1, :5] + 7) % n  # in-place edit bumps the version counter
    assert_close(fast(x, edges), ref(x, edges))
    assert xi._cache[1] is not cached
    other = torch.randint(0, n, (2, 80), generator=g)  # a different tensor
    assert_close(fast(x, other), ref(x, other))
