"""from_torch on graph convolutions: torch_geometric.nn.GCNConv (when PyG is importable) and a dense-adjacency GCN
written here (``DenseGCN``), converted through the registration hook ``register_converter``.

RPN 2 recipe checked here (catalog §5.3): a head with a graph instance ξ from the edge list, symmetric normalisation
D^-1/2 (A+I) D^-1/2 (target-side degrees, PyG's add_remaining_self_loops), κ identity, ψ identity = Θ and the bias
added after aggregation. The paper's own eq (176)/(177) are column/row normalisations (catalog §8 item 13).
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from unification_helpers import assert_matches_torch, compile_or_skip, n_examples, rand

import rpn2c
from rpn2c.frontends import register_converter
from tests.unification.graph_cases import edge_lists, has_duplicate_self_loops

try:
    from torch_geometric.nn import GCNConv
except ImportError:  # pragma: no cover - PyG is optional
    GCNConv = None

needs_pyg = pytest.mark.skipif(GCNConv is None, reason="torch_geometric is not installed")


class DenseGCN(nn.Module):
    """A GCN layer in dense maths: A[target, source] = 1 per edge, Â = D^-1/2 (A + I) D^-1/2 (D = row sums of
    A + I), Y = Â X W + b with W [in, out] (Kipf & Welling, eq 2)."""

    def __init__(self, fin: int, fout: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(fin, fout) / math.sqrt(fin))
        self.bias = nn.Parameter(torch.randn(fout) * 0.1)

    def forward(self, x, edge_index):
        n = x.shape[0]
        a = torch.zeros(n, n, dtype=x.dtype).index_put_((edge_index[1], edge_index[0]),
                                                        torch.ones(edge_index.shape[1], dtype=x.dtype),
                                                        accumulate=True)
        a = a + torch.eye(n, dtype=x.dtype)
        d = a.sum(-1).pow(-0.5)
        return (d[:, None] * a * d[None, :]) @ x @ self.weight + self.bias


def convert_dense_gcn(m: DenseGCN, ctx) -> rpn2c.frontends.Value:
    """The documented hook: declare the inputs, emit one graph head, link ψ = Wᵀ and the bias."""
    x, e = ctx.get("x"), ctx.get("edge_index")
    fin, fout = m.weight.shape
    ctx.declare(x, "items", f"nodes[{{items}}, {fin}]", batched=False, item_axis=0, item_symbol="N")
    ctx.declare(e, "edges", "edges[2, E]")
    name = ctx.name("gcn")
    y = ctx.head(x, [f'xi_instance = graph(edges = {e.name}, norm = "symmetric", self_loops = true)',
                     f"out = {fout}"], name=name, uses=[e],
                 comment=f"{ctx.where()}: graph instance ξ (symmetric, self-loops), κ identity, ψ = Wᵀ, bias after")
    ctx.param(f"{name}.psi.weight", "weight", transpose=True)
    ctx.param(f"{name}.bias", "bias")
    return y


register_converter(DenseGCN, convert_dense_gcn)


@needs_pyg
@settings(max_examples=n_examples(40), deadline=None)
@given(edge_lists(), st.integers(1, 3), st.integers(1, 4), st.booleans(), st.booleans(), st.booleans(),
       st.booleans(), st.booleans(), st.integers(0, 2**16))
def test_gcnconv_matches_pyg(graph, fin, fout, weighted, normalize, self_loops, bias, batched, seed):
    """GCNConv (normalize, add_self_loops, bias, edge weights, a batch axis) on any edge list (duplicated edges and
    self-loops, isolated nodes): outputs and gradients equal PyG's."""
    n, ei = graph
    torch.manual_seed(seed)
    self_loops = self_loops and normalize  # PyG adds self-loops only while normalising
    m = GCNConv(fin, fout, normalize=normalize, add_self_loops=self_loops, bias=bias).double()
    if bias:
        with torch.no_grad():
            m.bias.normal_()
    x = rand(2, n, fin, seed=seed) if batched else rand(n, fin, seed=seed)
    args = (x, ei) + ((torch.rand(ei.shape[1], dtype=torch.float64) + 0.1,) if weighted else ())
    assert_matches_torch(m, args)


@settings(max_examples=n_examples(25), deadline=None)
@given(edge_lists(loops=False), st.integers(1, 3), st.integers(1, 4), st.integers(0, 2**16))
def test_dense_gcn_via_registered_converter(graph, fin, fout, seed):
    """A user module converted through register_converter: Â X W + b equals the spec (graphs without self-loops,
    where Kipf's A + I and PyG's remaining self-loops agree)."""
    n, ei = graph
    torch.manual_seed(seed)
    assert_matches_torch(DenseGCN(fin, fout), (rand(n, fin, seed=seed), ei))


def test_existing_self_loops_follow_pyg_not_a_plus_i():
    """With a self-loop already in the edge list, Kipf's dense A + I gives that node weight 2, PyG (and the spec)
    keep weight 1: the spec is exactly GCNConv, and differs from the dense form there."""
    torch.manual_seed(0)
    ei = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 2]])
    x = rand(3, 2)
    dense = DenseGCN(2, 3).double()
    model = compile_or_skip(rpn2c.from_torch(dense, (x, ei)))
    assert not torch.allclose(model(x, ei), dense(x, ei))
    if GCNConv is not None:
        pyg = GCNConv(2, 3).double()
        with torch.no_grad():
            pyg.lin.weight.copy_(dense.weight.T)
            pyg.bias.copy_(dense.bias)
        torch.testing.assert_close(model(x, ei), pyg(x, ei).detach())


@needs_pyg
@settings(max_examples=n_examples(15), deadline=None)
@given(edge_lists(), st.integers(1, 3), st.integers(0, 2**16), st.data())
def test_gcn_is_permutation_equivariant(graph, fin, seed, data):
    """f(P X, P A Pᵀ) = P f(X, A) for the compiled spec: relabelling nodes permutes the output rows."""
    n, ei = graph
    torch.manual_seed(seed)
    m = GCNConv(fin, 3).double()
    x, w = rand(n, fin, seed=seed), torch.rand(ei.shape[1], dtype=torch.float64) + 0.1
    spec = rpn2c.from_torch(m, (x, ei, w))
    perm = torch.tensor(data.draw(st.permutations(list(range(n)))), dtype=torch.long)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(n)
    for reference in (False, True):
        model = compile_or_skip(spec, reference)
        torch.testing.assert_close(model(x[perm], inv[ei], w), model(x, ei, w)[perm])


@needs_pyg
def test_duplicated_weighted_self_loops_keep_the_last_one_as_pyg():
    """Node 0 lists self-loops of weight 2 and 3, node 1 of weight 5 and 7: PyG's add_remaining_self_loops keeps the
    last listed weight (3 and 7), not their sum; duplicated non-loop edges (1 -> 2 twice) add up."""
    ei = torch.tensor([[0, 1, 0, 1, 1, 1], [0, 1, 0, 2, 2, 1]])
    w = torch.tensor([2.0, 5.0, 3.0, 0.5, 0.25, 7.0], dtype=torch.float64)
    assert has_duplicate_self_loops(ei)
    x = rand(4, 2)
    m = GCNConv(2, 3).double()
    a = torch.tensor([[3.0, 0, 0, 0], [0, 7.0, 0, 0], [0, 0.75, 1.0, 0], [0, 0, 0, 1.0]], dtype=torch.float64)
    d = a.sum(1).rsqrt()
    want = (d[:, None] * a * d[None, :]) @ x @ m.lin.weight.T + m.bias
    torch.testing.assert_close(m(x, ei, w), want)
    for reference in (False, True):
        model = compile_or_skip(rpn2c.from_torch(m, (x, ei, w)), reference)
        torch.testing.assert_close(model(x, ei, w), want)


@needs_pyg
@settings(max_examples=n_examples(60), deadline=None)
@given(edge_lists(max_nodes=8, max_edges=16), st.booleans(), st.integers(0, 2**16))
def test_gcn_norm_equals_pyg_on_every_edge_list(graph, weighted, seed):
    """The graph ξ's symmetric normalisation with self-loops equals PyG's gcn_norm as a matrix, on held-out edge
    lists with duplicated edges, duplicated (weighted) self-loops and isolated nodes."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    from rpn2c.functional import structure

    n, ei = graph
    w = torch.rand(ei.shape[1], dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) + 0.1
    w = w if weighted else None
    e_idx, e_w = gcn_norm(ei, w, n, add_self_loops=True, dtype=torch.float64)
    want = torch.zeros(n, n, dtype=torch.float64).index_put_((e_idx[1], e_idx[0]), e_w, accumulate=True)
    got = structure.graph_adjacency(ei, n, w, normalization="symmetric", dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
    src, dst, ww = structure.graph_norm_weights(ei, n, w, normalization="symmetric", dtype=torch.float64)
    x = rand(n, 3, seed=seed)
    spmm = functools.partial(structure.graph_mm, ei, w, n=n, norm="symmetric")  # rule graph_spmm's cached operator
    for op in (None, spmm):  # gather/scatter and the SpMM/GEMM operand
        torch.testing.assert_close(structure.graph_propagate(x, src, dst, ww, n, 0, op), want @ x)
