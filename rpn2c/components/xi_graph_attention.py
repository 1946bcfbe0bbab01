"""Graph attention ξ (GAT, Veličković et al.): additive scores on the edges of a graph, softmax over each node's
incoming edges (other_seeds §GAT: q_ij = softmax_j(ρ(uᵀ[V x_i, V x_j])), ρ = LeakyReLU).

Instance matrices are stored with row = output (target) item: ``Y = A @ Z``.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from rpn2c.components.base import Interdependence, ShapeRuleError, XiModule, graph_example
from rpn2c.components.registry import HP, ValueRef, register
from rpn2c.functional import structure


class _GraphAttentionHP(HP):
    edges: ValueRef
    negative_slope: float = Field(0.2, ge=0, description="slope of the LeakyReLU on the scores (GAT: 0.2)")
    self_loops: bool = Field(True, description="drop listed self-loops and attend to one loop per node (PyG "
                                               "add_self_loops); false: the edge list as given")
    rank: Optional[int] = Field(None, ge=1, description="score factors W ∈ R^{M x r}, a_src, a_dst ∈ R^r "
                                                        "(GAT's own); default the folded u = W a ∈ R^M")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the attention coefficients while training")


@register
class GraphAttention(Interdependence):
    """Graph attention ξ: A[i, j] = Σ_{e: j→i} softmax_e(LeakyReLU(u_srcᵀ x_j + u_dstᵀ x_i)), softmax over the edges into i (GAT).

    Additive scores on the edge list (row 0 source, row 1 target, as PyG): ``u = W a`` folds GAT's projection W
    into its attention vectors a (``aᵀ(W x) = (W a)ᵀ x``; ``rank = r`` keeps W ∈ R^{M x r} and a ∈ R^r apart,
    the exact weights of torch_geometric's GATConv). ``self_loops`` (default true) replaces the listed self-loops
    by one per node; duplicated edges are separate softmax terms (A[i, j] sums them); a node without incoming
    edges gets a zero row. Multi-head GAT: ``heads = H`` copies fused by concat or mean. Default lowering: scores
    gathered at the edges, segment softmax (scatter amax + index_add), index_add aggregation, never an N x N
    matrix; the reference builds A literally (multiplicity ∘ exp, row-normalised).
    """

    name, family = "graph_attention", "interdependence"
    aliases = ("gat", "additive_graph_attention")
    axes = ("instance",)
    kind = "data"
    HP = _GraphAttentionHP
    example, example_call = graph_example(), "{name}(edges = edges)"

    def out_size(self, ctx):
        if self.hp.rank is not None and str(ctx.query_features) != str(ctx.context_features):
            raise ShapeRuleError(f"rank = {self.hp.rank} projects the query ({ctx.query_features} features) and the "
                                 f"context ({ctx.context_features}) with one W: give them equal widths, or leave "
                                 "rank out (separate u_src, u_dst)")
        return ctx.size

    def count(self, ctx):
        r = self.hp.rank
        return ctx.query_features + ctx.context_features if r is None else ctx.context_features * r + 2 * r

    def build(self, ctx):
        return _GraphAttentionXi(self.hp, ctx.query_features, ctx.context_features)


def _glorot(*shape):
    bound = math.sqrt(6.0 / (shape[0] + (shape[1] if len(shape) > 1 else 1)))
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


class _GraphAttentionXi(XiModule):
    axis = "instance"

    def __init__(self, hp, mq, mc):
        super().__init__()
        self.hp = hp
        if hp.rank is None:
            self.u_src, self.u_dst = _glorot(mc), _glorot(mq)
        else:
            self.weight, self.att_src, self.att_dst = _glorot(mc, hp.rank), _glorot(hp.rank), _glorot(hp.rank)

    def scores(self, q, c):
        """``(s_dst [..., Nq], s_src [..., Nc])``: each target's and each source's additive score term."""
        if self.hp.rank is None:
            return q @ self.u_dst, c @ self.u_src
        return (q @ self.weight) @ self.att_dst, (c @ self.weight) @ self.att_src

    def matrix(self, q, c, aux, size=None):
        """The literal A [..., Nq, Nc]: multiplicity m_ij of edge j → i, A_ij = m_ij e^{s_ij} / Σ_k m_ik e^{s_ik}."""
        nq, nc = q.shape[-2], c.shape[-2]
        structure.check_edge_ids(aux["edges"], min(nq, nc), self.hp.edges.name)
        src, dst = aux["edges"].to(q.device).long()
        mult = torch.zeros(nq, nc, dtype=q.dtype, device=q.device)
        mult = mult.index_put((dst, src), torch.ones_like(src, dtype=q.dtype), accumulate=True)
        if self.hp.self_loops:
            eye = torch.eye(nq, nc, dtype=q.dtype, device=q.device)
            mult = mult * (1 - eye) + eye
        s_dst, s_src = self.scores(q, c)
        logits = F.leaky_relu(s_dst.unsqueeze(-1) + s_src.unsqueeze(-2), self.hp.negative_slope)
        top = logits.masked_fill(mult == 0, float("-inf")).amax(-1, keepdim=True)
        top = top.masked_fill(torch.isinf(top), 0.0).detach()
        ex = mult * torch.exp((logits - top).masked_fill(mult == 0, 0.0))
        den = ex.sum(-1, keepdim=True)
        a = ex / torch.where(den > 0, den, 1.0)
        return F.dropout(a, self.hp.dropout, self.training)

    def apply(self, z, q, c, aux):
        nq, nc = q.shape[-2], c.shape[-2]
        structure.check_edge_ids(aux["edges"], min(nq, nc), self.hp.edges.name)
        src, dst, valid = structure.attention_edges(aux["edges"], min(nq, nc), self.hp.self_loops, q.device)
        s_dst, s_src = self.scores(q, c)
        e = F.leaky_relu(s_src.index_select(-1, src) + s_dst.index_select(-1, dst), self.hp.negative_slope)
        alpha = F.dropout(structure.edge_softmax(e, dst, nq, valid), self.hp.dropout, self.training)
        return structure.edge_aggregate(z, src, dst, alpha, nq)
