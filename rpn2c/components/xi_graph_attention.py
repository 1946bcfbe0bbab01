"""Graph attention ξ (GAT, Veličković et al.): additive scores on the edges of a graph, softmax over each node's
incoming edges (other_seeds §GAT: q_ij = softmax_j(ρ(uᵀ[V x_i, V x_j])), ρ = LeakyReLU).

Instance matrices are stored with row = output (target) item: ``Y = A @ Z``.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from rpn2c.components.base import Interdependence, ShapeRuleError, edge_messages, graph_example
from rpn2c.components.registry import HP, ValueRef, register
from rpn2c.ir.types import dim_add, dim_mul


class _GraphAttentionHP(HP):
    edges: ValueRef
    negative_slope: float = Field(0.2, ge=0, description="slope of the LeakyReLU on the scores (GAT: 0.2)")
    self_loops: bool = Field(True, description="drop listed self-loops and attend to one loop per node (PyG "
                                               "add_self_loops); false: the edge list as given")
    rank: Optional[int] = Field(None, ge=1, description="score factors W ∈ R^{M x r}, a_src, a_dst ∈ R^r "
                                                        "(GAT's own); default the folded u = W a ∈ R^M")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the attention coefficients while training")
    share_psi: bool = Field(False, description="score with the head's ψ weight as W (GAT's one projection: "
                                               "W ∈ R^{r x M} is ψ, r = the head's out); needs rank",
                            json_schema_extra={"hash": "omit_default"})


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

    def out_size_check(self):
        if self.hp.share_psi and self.hp.rank is None:
            raise ShapeRuleError("share_psi = true scores with the head's ψ weight: give rank = the head's out")

    def count(self, ctx):
        r = self.hp.rank
        self.out_size_check()
        if self.hp.share_psi:
            return 2 * r  # W is the head's ψ, counted there
        return ctx.query_features + ctx.context_features if r is None else ctx.context_features * r + 2 * r

    def scratch(self, ctx):
        """Messages and scores per edge, and the items projected to ``rank`` scores each."""
        return dim_add(edge_messages(ctx), dim_mul(ctx.size, self.hp.rank or 1))

    def build(self, ctx):
        from rpn2c.components.impl.xi_graph_attention import _GraphAttentionXi

        return _GraphAttentionXi(self.hp, ctx.query_features, ctx.context_features)
