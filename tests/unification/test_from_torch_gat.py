"""from_torch on torch_geometric.nn.GATConv, and the shipped examples/specs/gat_nodes.rpn against two GATConv layers.

RPN 2 recipe checked here: ``heads = H`` heads fused by concat (or mean); head h = a graph_attention instance ξ
(softmax over the edges into each node of LeakyReLU(a_srcᵀ W_h x_j + a_dstᵀ W_h x_i), listed self-loops replaced by
one per node), κ identity, ψ identity = W_h, and its bias slice (concat) or the shared bias (mean) after aggregation.
"""

from __future__ import annotations

from pathlib import Path

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

GATConv = pytest.importorskip("torch_geometric.nn").GATConv

SPEC = Path(__file__).resolve().parents[2] / "examples" / "specs" / "gat_nodes.rpn"


def _gat(fin, fout, seed, **kw):
    torch.manual_seed(seed)
    m = GATConv(fin, fout, **kw).double()
    if m.bias is not None:
        with torch.no_grad():
            m.bias.normal_()
    return m


@settings(max_examples=n_examples(25), deadline=None)
@given(edge_lists(), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.booleans(), st.booleans(),
       st.booleans(), st.sampled_from([0.2, 0.0, 0.5]), st.integers(0, 2**16))
def test_gatconv_matches_pyg(graph, fin, fout, heads, concat, self_loops, bias, slope, seed):
    """GATConv (heads, concat or mean, add_self_loops, bias, negative_slope) on edge lists with duplicated edges and
    self-loops and isolated nodes: outputs and parameter gradients (mapped back) equal PyG's in both lowerings."""
    n, ei = graph
    m = _gat(fin, fout, seed, heads=heads, concat=concat, add_self_loops=self_loops, bias=bias, negative_slope=slope)
    assert_matches_torch(m, (rand(n, fin, seed=seed), ei))


@pytest.mark.parametrize("concat, self_loops", [(True, True), (False, False), (True, False), (False, True)])
def test_input_gradients_equal_pyg(concat, self_loops):
    """d output / d x equals PyG's (a duplicated edge, a duplicated self-loop, an isolated node)."""
    ei = torch.tensor([[0, 1, 1, 2, 3, 2, 2, 0], [1, 2, 2, 0, 3, 2, 2, 3]])
    m = _gat(3, 2, 1, heads=3, concat=concat, add_self_loops=self_loops).eval()
    x = rand(5, 3, seed=2).requires_grad_()
    w = rand(5, 6 if concat else 2, seed=3)
    (want,) = torch.autograd.grad((m(x, ei) * w).sum(), x)
    spec = rpn2c.from_torch(m, (x.detach(), ei))
    for reference in (False, True):
        model = compile_or_skip(spec, reference)
        (got,) = torch.autograd.grad((model(x, ei) * w).sum(), x)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_attention_dropout_converts_and_is_off_in_eval():
    ei = torch.tensor([[0, 1, 2], [1, 2, 0]])
    m = _gat(2, 2, 0, heads=2, dropout=0.6).eval()
    spec = rpn2c.from_torch(m, (rand(3, 2), ei))
    assert "dropout = 0.6" in spec.text
    assert_matches_torch(m, (rand(3, 2), ei))


@pytest.mark.parametrize("kw, option", [
    (dict(edge_dim=2), "edge_dim"),
    (dict(residual=True), "residual"),
    (dict(in_channels=(2, 3)), "in_channels"),
])
def test_unconvertible_options_are_refused(kw, option):
    fin = kw.pop("in_channels", 2)
    m = GATConv(fin, 2, **kw).double()
    x = rand(3, 2) if isinstance(fin, int) else (rand(3, 2), rand(3, 3))
    with pytest.raises(TorchImportError, match=option):
        rpn2c.from_torch(m, (x, torch.tensor([[0, 1], [1, 2]])))


class TwoLayerGAT(nn.Module):
    """Veličković et al.'s transductive model: GATConv(heads, concat) -> ELU -> GATConv(1 head); dropout off."""

    def __init__(self, features=34, hidden=8, heads=4, classes=2):
        super().__init__()
        self.conv1 = GATConv(features, hidden, heads=heads)
        self.conv2 = GATConv(hidden * heads, classes)

    def forward(self, x, edge_index):
        return self.conv2(F.elu(self.conv1(x, edge_index)), edge_index)


def _transfer(conv, prefix, heads) -> dict:
    c = conv.out_channels
    out = {}
    for h in range(heads):
        p = f"{prefix}.heads.h{h}" if heads > 1 else prefix
        w = conv.lin.weight[h * c:(h + 1) * c]
        out |= {f"{p}.psi.weight": w, f"{p}.xi_instance.weight": w.T, f"{p}.bias": conv.bias[h * c:(h + 1) * c],
                f"{p}.xi_instance.att_src": conv.att_src[0, h], f"{p}.xi_instance.att_dst": conv.att_dst[0, h]}
    return out


@settings(max_examples=n_examples(10), deadline=None)
@given(edge_lists(max_nodes=8, max_edges=20), st.integers(0, 2**16))
def test_shipped_gat_spec_equals_two_gatconv_layers(graph, seed):
    """examples/specs/gat_nodes.rpn, unedited, equals TwoLayerGAT in float64 in both lowerings (eval mode)."""
    n, ei = graph
    torch.manual_seed(seed)
    torch_model = TwoLayerGAT().double().eval()
    with torch.no_grad():
        for conv in (torch_model.conv1, torch_model.conv2):
            conv.bias.normal_()
    state = _transfer(torch_model.conv1, "h", 4) | _transfer(torch_model.conv2, "y", 1)
    x = rand(n, 34, seed=seed)
    want = torch_model(x, ei)
    for reference in (False, True):
        model = rpn2c.compile(SPEC.read_text(), SPEC.name, reference=reference).double()
        model.load_state_dict({k: v.detach() for k, v in state.items()})
        torch.testing.assert_close(model.eval()(x, ei), want, rtol=1e-9, atol=1e-11)
