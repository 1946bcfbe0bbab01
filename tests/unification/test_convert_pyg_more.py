"""More PyG layers convert to specs equal to PyG in float64 (outputs, parameter and input gradients, free-parameter
count) on any edge list: SAGEConv(normalize=True) (l2_normalize processing after the head) and
GINConv(train_eps=True) (the learned self term (1 + eps)·x is the remainder π = scaled_identity, eps its one
parameter); GATv2Conv and SAGEConv's max aggregation refuse with what is missing."""

from __future__ import annotations

import pytest
import torch
from convert_checks import assert_same_model
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from unification_helpers import compile_or_skip, n_examples, rand

import rpn2c
from rpn2c.frontends import TorchImportError
from tests.unification.graph_cases import edge_lists

pyg = pytest.importorskip("torch_geometric.nn")


@settings(max_examples=n_examples(20), deadline=None)
@given(edge_lists(), st.integers(1, 3), st.integers(1, 4), st.sampled_from(["mean", "add"]), st.booleans(),
       st.booleans(), st.integers(0, 2**16))
def test_sageconv_normalize_matches_pyg(graph, fin, fout, aggr, root_weight, project, seed):
    n, ei = graph
    torch.manual_seed(seed)
    m = pyg.SAGEConv(fin, fout, aggr=aggr, normalize=True, root_weight=root_weight, project=project)
    spec = assert_same_model(m, (rand(n, fin, seed=seed), ei))
    assert "l2_normalize" in spec.text


@settings(max_examples=n_examples(20), deadline=None)
@given(edge_lists(), st.integers(1, 3), st.integers(1, 4), st.sampled_from([0.0, 0.5, -0.25]), st.booleans(),
       st.integers(0, 2**16))
def test_ginconv_train_eps_matches_pyg(graph, fin, fout, eps, batched, seed):
    n, ei = graph
    torch.manual_seed(seed)
    m = pyg.GINConv(nn.Sequential(nn.Linear(fin, 5), nn.ReLU(), nn.Linear(5, fout)), eps=eps, train_eps=True)
    x = rand(2, n, fin, seed=seed) if batched else rand(n, fin, seed=seed)
    spec = assert_same_model(m, (x, ei))
    assert "pi = scaled_identity(offset = 1.0)" in spec.text
    assert spec.state_dict["gin.pi.eps"].item() == eps


def test_ginconv_eps_trains_as_one_parameter():
    """One SGD step moves the spec's eps exactly as PyG's."""
    torch.manual_seed(0)
    ei = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])
    m = pyg.GINConv(nn.Linear(3, 2), eps=0.1, train_eps=True).double()
    x = rand(3, 3)
    spec = rpn2c.from_torch(m, (x, ei))
    model = compile_or_skip(spec).train()
    for mod in (m, model):
        opt = torch.optim.SGD(mod.parameters(), lr=0.5)
        opt.zero_grad()
        (mod(x, ei) ** 2).sum().backward()
        opt.step()
    torch.testing.assert_close(model.state_dict()["gin.pi.eps"], m.eps.detach().reshape(()))
    torch.testing.assert_close(model(x, ei), m(x, ei))


def test_gatv2_refuses_naming_the_missing_score_form():
    m = pyg.GATv2Conv(3, 2).double()
    with pytest.raises(TorchImportError) as err:
        rpn2c.from_torch(m, (rand(4, 3), torch.tensor([[0, 1], [1, 2]])))
    assert "GATv2Conv" in str(err.value) and "graph_attention" in str(err.value) and "E0390" in str(err.value)


def test_sageconv_max_refuses_naming_the_aggregation():
    m = pyg.SAGEConv(3, 2, aggr="max").double()
    with pytest.raises(TorchImportError, match="aggr='max'.*graph ξ"):
        rpn2c.from_torch(m, (rand(4, 3), torch.tensor([[0, 1], [1, 2]])))
