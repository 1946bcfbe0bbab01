"""from_torch on torch_geometric's ChebConv: Σ_{k<K} lins[k](T_k(L̃) x) + bias is a layer of K heads fused by sum,
head k with ξ = chebyshev_graph(order = k) (L̃ = 2L/λ_max − I, λ_max = 2: PyG's 2·max L for "sym" and "rw" with
nonnegative weights) and ψ = lins[k], the bias once on head t0. Checked in float64 on edge lists with duplicated
edges, self-loops and isolated nodes, with and without edge weights and a batch axis: outputs, parameter and input gradients,
free-parameter count, both lowerings; a model of two ChebConvs; the normalisations and arguments that refuse."""

from __future__ import annotations

import pytest
import torch
from convert_checks import assert_same_model
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from unification_helpers import n_examples, rand

import rpn2c
from rpn2c.frontends import TorchImportError
from tests.unification.graph_cases import edge_lists

pyg = pytest.importorskip("torch_geometric.nn")


def _bias(m):
    with torch.no_grad():
        if m.bias is not None:
            m.bias.normal_()
    return m


@settings(max_examples=n_examples(5), deadline=None)
@given(edge_lists(), st.integers(1, 3), st.integers(1, 3), st.integers(1, 4), st.sampled_from(["sym", "rw"]),
       st.booleans(), st.booleans(), st.booleans(), st.integers(0, 2**16))
def test_chebconv_matches_pyg(graph, fin, fout, k, norm, bias, weighted, batched, seed):
    n, ei = graph
    torch.manual_seed(seed)
    m = _bias(pyg.ChebConv(fin, fout, K=k, normalization=norm, bias=bias))
    args = (rand(2, n, fin, seed=seed) if batched else rand(n, fin, seed=seed), ei)
    if weighted:
        args += (torch.rand(ei.shape[1], generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + 0.1,)
    spec = assert_same_model(m, args)
    assert spec.text.count("chebyshev_graph(") == k and ("fusion = sum" in spec.text) == (k > 1)
    assert spec.text.count("bias = false") == k - (1 if bias else 0)


class _ChebNet(nn.Module):
    """Two ChebConvs (K = 3, then K = 2) around a ReLU."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = pyg.ChebConv(4, 6, K=3), pyg.ChebConv(6, 2, K=2)

    def forward(self, x, edge_index):
        return self.c2(self.c1(x, edge_index).relu(), edge_index)


def test_chebnet_model_matches_pyg():
    torch.manual_seed(0)
    ei = torch.tensor([[0, 1, 2, 3, 4, 0, 2], [1, 2, 3, 4, 0, 2, 0]])
    spec = assert_same_model(_ChebNet(), (rand(6, 4, seed=1), ei))  # node 5 is isolated
    assert spec.text.count("= layer(") == 2


@pytest.mark.parametrize("kw, call, option", [
    (dict(normalization=None), {}, "normalization=None"),
    ({}, {"lambda_max": torch.tensor(2.0, dtype=torch.float64)}, "lambda_max=..."),
])
def test_chebconv_refuses_what_the_constant_lambda_max_cannot_follow(kw, call, option):
    m = pyg.ChebConv(2, 3, K=2, **kw).double()
    args = (rand(3, 2), torch.tensor([[0, 1], [1, 2]]))
    with pytest.raises(TorchImportError) as err:
        rpn2c.from_torch(m, args, call)
    assert err.value.option == option and "ChebConv" in str(err.value)
