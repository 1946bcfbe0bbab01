"""from_torch on torch_geometric's SAGEConv, GraphConv and GINConv: each is one hop of message passing, a graph instance ξ.

SAGEConv = a head with ξ = graph(norm "row") (the mean over incoming edges, 0 for a node without any; norm "none"
for aggr add/sum), ψ = lin_l with its bias and π = linear remainder lin_r; GraphConv the same head with lin_rel,
lin_root and edge weights. GINConv = a head with
ξ = hybrid(graph + (1 + eps)·identity, sum fusion), ψ = eye (no parameters), then the inner ``nn`` converted on the
aggregated features. Checked in float64 on edge lists with duplicated edges, self-loops and isolated nodes:
outputs, input gradients and parameter gradients mapped back, and the number of free parameters.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from unification_helpers import assert_matches_torch, compile_or_skip, n_examples, rand

import rpn2c
from rpn2c.frontends import TorchImportError
from tests.unification.graph_cases import edge_lists

try:
    from torch_geometric.nn import GINConv, GraphConv, SAGEConv
except ImportError:  # pragma: no cover - PyG is optional
    SAGEConv = GINConv = GraphConv = None

pytestmark = pytest.mark.skipif(SAGEConv is None, reason="torch_geometric is not installed")


def check(module, args):
    """Outputs and parameter gradients (``assert_matches_torch``), input gradients and the free-parameter count."""
    spec = assert_matches_torch(module, args)
    x = args[0]
    w = rand(*module(*args).shape, seed=3)
    xt = x.detach().clone().requires_grad_(True)
    (module(xt, *args[1:]) * w).sum().backward()
    for reference in (False, True):
        model = compile_or_skip(spec, reference)
        xs = x.detach().clone().requires_grad_(True)
        (model(xs, *args[1:]) * w).sum().backward()
        torch.testing.assert_close(xs.grad, xt.grad, rtol=1e-8, atol=1e-9)
        n_free = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert n_free == sum(p.numel() for p in module.parameters()), spec.text
    return spec


def _bias(m):
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.normal_()
    return m


@settings(max_examples=n_examples(30), deadline=None)
@given(edge_lists(), st.integers(1, 3), st.integers(1, 4), st.sampled_from(["mean", "add", "sum"]), st.booleans(),
       st.booleans(), st.booleans(), st.booleans(), st.integers(0, 2**16))
def test_sageconv_matches_pyg(graph, fin, fout, aggr, root_weight, bias, project, batched, seed):
    """SAGEConv (aggr mean/add/sum, root_weight, bias, project, a batch axis) on any edge list: outputs and gradients
    equal PyG's, with as many free parameters. project=True: a relu perceptron head feeds the graph head, and the
    root term is a second head on x added to it."""
    n, ei = graph
    torch.manual_seed(seed)
    m = _bias(SAGEConv(fin, fout, aggr=aggr, root_weight=root_weight, bias=bias, project=project).double())
    x = rand(2, n, fin, seed=seed) if batched else rand(n, fin, seed=seed)
    check(m, (x, ei))


def test_sageconv_mean_is_zero_for_a_node_without_incoming_edges():
    """Node 2 has no incoming edge: PyG's mean is 0 there, so the output is lin_l's bias + lin_r(x_2)."""
    torch.manual_seed(0)
    m = SAGEConv(2, 3).double()
    ei = torch.tensor([[0, 1, 2, 0], [1, 0, 1, 1]])
    x = rand(3, 2)
    spec = check(m, (x, ei))
    assert 'norm = "row"' in spec.text and "pi = linear(bias = false)" in spec.text
    want = m.lin_l.bias + m.lin_r(x[2])
    torch.testing.assert_close(compile_or_skip(spec)(x, ei)[2], want.detach())


@pytest.mark.parametrize("kw, option", [(dict(aggr="max"), "aggr='max'")])
def test_sageconv_refuses_what_has_no_graph_head(kw, option):
    m = SAGEConv(2, 3, **kw).double()
    with pytest.raises(TorchImportError) as err:
        rpn2c.from_torch(m, (rand(3, 2), torch.tensor([[0, 1], [1, 2]])))
    assert err.value.option == option and "SAGEConv" in str(err.value)


@settings(max_examples=n_examples(30), deadline=None)
@given(edge_lists(), st.integers(1, 3), st.integers(1, 4), st.sampled_from(["add", "sum", "mean"]), st.booleans(),
       st.booleans(), st.booleans(), st.integers(0, 2**16))
def test_graphconv_matches_pyg(graph, fin, fout, aggr, weighted, bias, batched, seed):
    """GraphConv (aggr add/sum/mean, edge weights with add/sum, bias, a batch axis) on any edge list."""
    n, ei = graph
    torch.manual_seed(seed)
    weighted = weighted and aggr != "mean"
    m = _bias(GraphConv(fin, fout, aggr=aggr, bias=bias).double())
    x = rand(2, n, fin, seed=seed) if batched else rand(n, fin, seed=seed)
    check(m, (x, ei) + ((torch.rand(ei.shape[1], dtype=torch.float64) + 0.1,) if weighted else ()))


def test_graphconv_refuses_a_weighted_mean():
    """PyG's weighted mean divides by the edge count, the graph ξ's row normalisation by the weight sum."""
    m = GraphConv(2, 3, aggr="mean").double()
    with pytest.raises(TorchImportError) as err:
        rpn2c.from_torch(m, (rand(3, 2), torch.tensor([[0, 1], [1, 2]]), torch.rand(2, dtype=torch.float64)))
    assert "mean" in err.value.option and "GraphConv" in str(err.value)


class GraphSAGE(nn.Module):
    """Two SAGEConv layers with a ReLU between them (the usual node classifier), traced through torch.fx."""

    def __init__(self, fin, hidden, fout):
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(fin, hidden), SAGEConv(hidden, fout)

    def forward(self, x, edge_index):
        h = F.relu(self.conv1(x, edge_index))
        h = F.dropout(h, p=0.5, training=self.training)
        return self.conv2(h, edge_index)


def _mlp(fin, hidden, fout):
    return nn.Sequential(nn.Linear(fin, hidden), nn.ReLU(), nn.Linear(hidden, fout))


@settings(max_examples=n_examples(30), deadline=None)
@given(edge_lists(), st.integers(1, 3), st.integers(1, 4), st.sampled_from([0.0, 0.5, -0.25, 2.0]), st.booleans(),
       st.integers(0, 2**16))
def test_ginconv_matches_pyg(graph, fin, fout, eps, batched, seed):
    """GINConv (fixed eps, an MLP as nn, a batch axis) on any edge list: the sum over incoming edges plus
    (1 + eps)·x_i, then the MLP; outputs and gradients equal PyG's, with as many free parameters."""
    n, ei = graph
    torch.manual_seed(seed)
    m = _bias(GINConv(_mlp(fin, 5, fout), eps=eps).double())
    x = rand(2, n, fin, seed=seed) if batched else rand(n, fin, seed=seed)
    spec = check(m, (x, ei))
    assert "psi = eye" in spec.text and f"weights = [1.0, {1.0 + eps!r}]" in spec.text


def test_ginconv_with_an_identity_nn_is_the_aggregation_alone():
    """nn = Identity: the spec is the parameter-free aggregation head, A + (1 + eps)·I applied to x."""
    ei = torch.tensor([[0, 1, 1, 2, 2, 2], [1, 2, 2, 0, 2, 2]])
    x = rand(4, 3)
    m = GINConv(nn.Identity(), eps=0.5).double()
    spec = rpn2c.from_torch(m, (x, ei))
    a = torch.tensor([[0, 0, 1, 0], [1, 0, 0, 0], [0, 2, 2, 0], [0, 0, 0, 0]], dtype=torch.float64)
    want = (a + 1.5 * torch.eye(4, dtype=torch.float64)) @ x
    torch.testing.assert_close(m(x, ei), want)
    for reference in (False, True):
        torch.testing.assert_close(compile_or_skip(spec, reference).double()(x, ei), want)  # no tensors: float32


class GIN(nn.Module):
    """Two GINConv layers (MLPs inside) with a ReLU between them and a linear readout per node, traced by torch.fx."""

    def __init__(self, fin, hidden, fout):
        super().__init__()
        self.conv1 = GINConv(_mlp(fin, hidden, hidden))
        self.conv2 = GINConv(_mlp(hidden, hidden, hidden), eps=0.1)
        self.lin = nn.Linear(hidden, fout)

    def forward(self, x, edge_index):
        h = self.conv1(x, edge_index).relu()
        h = self.conv2(h, edge_index)
        return self.lin(h)


@pytest.mark.parametrize("model", [GraphSAGE, GIN])
@settings(max_examples=n_examples(10), deadline=None)
@given(graph=edge_lists(max_nodes=8), seed=st.integers(0, 2**16))
def test_two_layer_models(model, graph, seed):
    """A 2-layer GraphSAGE and a 2-layer GIN written as model classes convert through torch.fx, equal to PyG."""
    n, ei = graph
    torch.manual_seed(seed)
    check(_bias(model(3, 6, 2).double()), (rand(n, 3, seed=seed), ei))


def test_gin_with_batch_norm_normalises_each_feature_over_the_nodes():
    """BatchNorm1d on one graph's nodes [N, F] normalises per feature over N (running statistics in eval, the
    nodes' statistics in training), as the batch_norm processing does on items."""
    torch.manual_seed(0)
    m = GINConv(nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))).double()
    with torch.no_grad():
        m.nn[1].running_mean.normal_()
        m.nn[1].running_var.uniform_(0.5, 2.0)
    x = torch.randn(6, 4, dtype=torch.float64)
    edges = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
    spec = assert_matches_torch(m, (x, edges))
    model = rpn2c.compile(spec.text).double()
    model.load_state_dict(spec.state_dict)
    torch.testing.assert_close(model.train()(x, edges), m.train()(x, edges), rtol=1e-10, atol=1e-10)
