"""The graph ξ (paper §5.2.4): M·z with A from an edge list, normalised, one or several hops.

Row = output item, A[dst, src] = w. The default lowering propagates on the edge list (gather / index_add per hop) or
on the graph's cached SpMM operator; the reference lowering builds the literal matrix.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from rpn2c.components.base import Interdependence, edge_messages, graph_example
from rpn2c.components.registry import HP, ValueRef, register
from rpn2c.ir.kernels import XI_ARGS, Fallback, Kernel, Predicate


def _spmm_falls_back(m, z, q, c, aux) -> bool:
    """Gather/scatter instead of the SpMM operator: see ``SPMM.fallback``'s text."""
    import torch

    from rpn2c.functional import structure

    weight = aux.get("weight")
    if z.dtype not in (torch.float32, torch.float64) or (weight is not None and weight.requires_grad):
        return True
    n = z.shape[-2] if m.axis == "instance" else z.shape[-1]
    return not torch.compiler.is_compiling() and structure.squaring_pays(
        n, aux["edges"].shape[-1] + n, getattr(m.hp, "hops", 1), z.numel() // max(n, 1))


# kernel op ``spmm`` (rule graph_spmm): propagation by the graph's cached SpMM operator, one product per hop
SPMM = Kernel("spmm", XI_ARGS, "spmm",
              Predicate(lambda xi: xi.propagates(), "the ξ propagates over its edge list hop by hop"),
              Fallback("gather_scatter", Predicate(
                  _spmm_falls_back, "the edge weights need gradients, the dtype is not float32/float64, or (eager) "
                                    "the graph is small and the hops many enough that repeated squaring of the "
                                    "dense adjacency costs less")))


class _GraphHP(HP):
    edges: ValueRef
    weight: Optional[ValueRef] = None
    norm: Literal["none", "row", "column", "symmetric"] = "none"
    self_loops: Optional[bool] = Field(None, description="add missing self-loops first; default: symmetric only")
    directed: bool = True
    hops: int = Field(1, ge=0)
    mode: Literal["power", "accumulate"] = "power"
    include_identity: bool = Field(True, description="accumulate from k = 0 (eq 83) or from k = 1")


@register
class Graph(Interdependence):
    """Graph ξ: M·z, A[dst, src] = w from an edge list, normalised none | row D⁻¹A | column AD⁻¹ | symmetric D^{-1/2}(A+I)D^{-1/2}; M = A^h or Σ_{k=k0..h} A^k.

    Edge list: row 0 source, row 1 target (PyG); undirected = max(A, Aᵀ); self-loops are added before
    normalising (toolkit order) and default to on for symmetric only, which is Kipf's GCN = PyG gcn_norm
    (semantics.md). Erratum 13: eq (176) (column) and eq (177) (D⁻¹Â + I, row) are neither Kipf's nor each
    other; eq (177) is hybrid(parts = ["graph", "identity"], edges = edges, norm = "row") (sum fusion).
    Multi-hop (eq 83): accumulate includes I (k0 = 0) unless include_identity = false. Default lowering:
    gather/index_add per hop, never an n x n matrix.
    """

    name, family = "graph", "interdependence"
    synonyms = dict.fromkeys(("gcn", "gcn_conv", "graph_conv"), 'graph(edges = E, norm = "symmetric")')  # Kipf's
    HP = _GraphHP
    example, example_call = graph_example(), "{name}(edges = edges)"
    shareable = True  # the normalised edge list depends only on the named inputs: computed once per forward
    kernels = (SPMM,)

    def propagates(self) -> bool:
        """Propagation runs hop by hop on the edge list (so also as SpMMs on the built adjacency)."""
        return True

    def scratch(self, ctx):
        return edge_messages(ctx)

    def one_hop(self) -> bool:
        return self.hp.hops == 1 and self.hp.mode == "power"

    def steps(self, ctx):
        return max(self.hp.hops, 1)  # one propagation per hop (at most log2(hops) squarings on a small graph)

    def build(self, ctx):
        from rpn2c.components.impl.xi_graph import _GraphXi

        return _GraphXi(self.hp, ctx.axis, self.one_hop())


