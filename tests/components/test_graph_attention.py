"""graph_attention ξ (GAT's additive edge attention) as a spec: both lowerings against a hand-written per-node softmax
in float64 (outputs and gradients, heads fused by concat and mean, with and without self-loops, duplicated edges and
isolated nodes), the default lowering's memory (never an N x N tensor), torch.compile, and located errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import rpn2c
from rpn2c.errors import SpecError
from rpn2c.functional import structure
from tests.components.test_hybrid_edges import _MaxNumel
from tests.unification.graph_cases import edge_lists

F64 = torch.float64


def _spec(heads=2, fusion="mean", rank=None, slope=0.2, loops=True, nodes="nodes[B, N, 3]", out=2, dropout=0.0):
    xi = [f"edges = edges", f"negative_slope = {slope}", f"self_loops = {'true' if loops else 'false'}"]
    xi += [f"rank = {rank}"] if rank else []
    xi += [f"dropout = {dropout}"] if dropout else []
    return f"""
model gat_layer() {{
  input x: {nodes}
  input edges: edges[2, E]
  y = head(x) {{
    heads = {heads}
    xi_instance = graph_attention({', '.join(xi)})
    out = {out}
    fusion = {fusion}
  }}
  return y
}}
"""


def _models(text, seed=0):
    torch.manual_seed(seed)
    default = rpn2c.compile(text).double()
    with torch.no_grad():
        for p in default.parameters():
            p.normal_()
    reference = rpn2c.compile(text, reference=True).double()
    reference.load_state_dict(default.state_dict())
    return default, reference


def _hand_gat(x, ei, n, p, heads, fusion, slope, loops, rank):
    """Per target node i: softmax over its incoming edges (listed self-loops replaced by one per node when
    ``loops``) of LeakyReLU(u_srcᵀ x_j + u_dstᵀ x_i); y_i = Σ α W x_j + b; heads concatenated or averaged."""
    pairs = [(s, t) for s, t in ei.T.tolist() if not (loops and s == t)] + ([(i, i) for i in range(n)] if loops else [])
    outs = []
    for h in range(heads):
        q = f"y.heads.h{h}." if heads > 1 else "y."
        if rank:
            u_src = p[q + "xi_instance.weight"] @ p[q + "xi_instance.att_src"]
            u_dst = p[q + "xi_instance.weight"] @ p[q + "xi_instance.att_dst"]
        else:
            u_src, u_dst = p[q + "xi_instance.u_src"], p[q + "xi_instance.u_dst"]
        z = x @ p[q + "psi.weight"].T
        s_src, s_dst = x @ u_src, x @ u_dst
        rows = []
        for i in range(n):
            into = [s for s, t in pairs if t == i]
            if not into:
                rows.append(torch.zeros_like(z[..., 0, :]))
                continue
            a = torch.softmax(torch.stack([F.leaky_relu(s_src[..., j] + s_dst[..., i], slope) for j in into], -1), -1)
            rows.append(sum(a[..., k, None] * z[..., j, :] for k, j in enumerate(into)))
        outs.append(torch.stack(rows, -2) + p[q + "bias"])
    return torch.cat(outs, -1) if fusion == "concat" else sum(outs) / heads


@settings(deadline=None)
@given(edge_lists(), st.integers(1, 3), st.sampled_from(["concat", "mean"]), st.booleans(),
       st.sampled_from([None, 2]), st.sampled_from([0.2, 0.0, 1.5]), st.integers(0, 2**16))
def test_both_lowerings_equal_the_hand_written_gat(graph, heads, fusion, loops, rank, slope, seed):
    """Outputs and gradients (input and every parameter) of both lowerings equal the per-node softmax written out
    by hand, on edge lists with duplicated edges and self-loops and isolated nodes, a batch of 2 graphs' features."""
    n, ei = graph
    models = _models(_spec(heads, fusion, rank, slope, loops), seed)
    x = torch.randn(2, n, 3, dtype=F64, generator=torch.Generator().manual_seed(seed)).requires_grad_()
    w = torch.randn(2, n, 2 * (heads if fusion == "concat" else 1), dtype=F64)
    params = dict(models[0].named_parameters())
    want = _hand_gat(x, ei, n, params, heads, fusion, slope, loops, rank)
    g_want = torch.autograd.grad((want * w).sum(), [x, *params.values()], allow_unused=True, materialize_grads=True)
    for model in models:
        y = model(x, ei)
        torch.testing.assert_close(y, want, rtol=1e-10, atol=1e-12)
        g = torch.autograd.grad((y * w).sum(), [x, *model.parameters()], allow_unused=True, materialize_grads=True)
        for a, b in zip(g, g_want):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_isolated_node_gets_only_the_bias_and_loops_are_replaced():
    """Without self-loops an isolated node's row is the bias alone; with them, duplicated listed loops count once."""
    ei = torch.tensor([[0, 1, 1, 1], [1, 0, 1, 1]])
    default, reference = _models(_spec(heads=1, fusion="mean", loops=False, nodes="nodes[N, 3]"))
    x = torch.randn(3, 3, dtype=F64)
    for m in (default, reference):
        torch.testing.assert_close(m(x, ei)[2], m.y.bias.detach())
    default, _ = _models(_spec(heads=1, fusion="mean", nodes="nodes[N, 3]"))
    a = default.y.xi_instance.matrix(x, x, {"edges": ei})
    assert torch.equal(a > 0, torch.tensor([[True, True, False], [True, True, False], [False, False, True]]))
    torch.testing.assert_close(a.sum(-1), torch.ones(3, dtype=F64))


def test_default_lowering_never_allocates_n_by_n():
    """N = 3000 nodes, E = 10000 edges, two heads, forward and backward: the largest tensor any op returns is
    O(E·width), against N² = 9e6 for the literal matrix (which the reference lowering does build)."""
    n, e = 3000, 10000
    model, _ = _models(_spec(heads=2, fusion="concat", rank=4, nodes="nodes[N, 3]"))
    edges = torch.randint(0, n, (2, e), generator=torch.Generator().manual_seed(0))
    x = torch.randn(n, 3, dtype=F64).requires_grad_()
    with _MaxNumel() as rec:
        y = model(x, edges)
        y.square().sum().backward()
    assert y.shape == (n, 4) and x.grad.abs().sum() > 0
    assert rec.max <= (e + n) * 4 < n * n // 100
    _, reference = _models(_spec(heads=1, nodes="nodes[N, 3]"))
    with _MaxNumel() as rec:
        reference(x[:300].detach(), edges[:, :100] % 300)
    assert rec.max >= 300 * 300  # the recorder sees the literal matrix where one is built


def test_edge_softmax_compiles_with_loop_placeholders():
    """Under torch.compile(fullgraph) the replaced self-loops stay as masked placeholders: same values as eager."""
    ei = torch.tensor([[0, 2, 2, 1, 3], [1, 2, 2, 0, 1]])
    s = torch.randn(2, 4, dtype=F64)

    def f(s, ei):
        src, dst, valid = structure.attention_edges(ei, 4)
        a = structure.edge_softmax(s.index_select(-1, src), dst, 4, valid)
        return structure.edge_aggregate(torch.eye(4, dtype=F64).expand(2, 4, 4), src, dst, a, 4)

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(s, ei), f(s, ei))
    torch.testing.assert_close(f(s, ei).sum(-1), torch.ones(2, 4, dtype=F64))


def test_dropout_acts_on_the_coefficients_only_while_training():
    default, _ = _models(_spec(heads=1, nodes="nodes[N, 3]", dropout=0.5))
    x, ei = torch.randn(5, 3, dtype=F64), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    default.eval()
    torch.testing.assert_close(default(x, ei), default(x, ei))
    default.train()
    torch.manual_seed(0)
    assert not torch.allclose(default(x, ei), default.eval()(x, ei))


@pytest.mark.parametrize("hp, code_text", [
    ("negative_slope = -1", "negative_slope"),
    ("rank = 0", "rank"),
    ("edges = x", "edges"),
])
def test_bad_settings_are_located_errors(hp, code_text):
    text = _spec(heads=1).replace("edges = edges, ", "edges = edges, " + hp + ", ", 1)
    if hp.startswith("edges"):
        text = _spec(heads=1).replace("edges = edges", hp, 1)
    with pytest.raises(SpecError) as err:
        rpn2c.compile(text, "gat.rpn")
    assert code_text in str(err.value) and "gat.rpn:" in str(err.value)
