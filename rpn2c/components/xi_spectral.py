"""Spectral graph ξ (seed 001 §7.5; ChebNet): a polynomial of the scaled graph Laplacian as an instance ξ."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from rpn2c.components.base import Interdependence, edge_messages, graph_example
from rpn2c.components.registry import HP, ValueRef, register


class _ChebyshevHP(HP):
    edges: ValueRef
    weight: Optional[ValueRef] = None
    order: int = Field(1, ge=0, le=64, description="k of T_k(L̃) (or L̃^k)")
    norm: Literal["sym", "rw", "none"] = Field("sym", description="L = I − D^{-1/2}AD^{-1/2} | I − AD⁻¹ | D − A")
    lambda_max: float = Field(2.0, gt=0, description="λ_max of L̃ = 2L/λ_max − I (PyG's default for sym: 2)")
    scale: bool = Field(True, description="use the scaled L̃ (false: L itself, the seed's Σ α_k L^k)")
    basis: Literal["chebyshev", "power"] = Field("chebyshev", description="T_k(L̃) or the monomial L̃^k")


@register
class ChebyshevGraph(Interdependence):
    """Spectral graph ξ: T_k(L̃) with L̃ = 2L/λ_max − I, T_0 = I, T_1 = L̃, T_k = 2L̃T_{k−1} − T_{k−2} (basis "power": L̃^k).

    L from the edge list (row 0 source, row 1 target; self-loops dropped, duplicates summed, degrees the column
    sums d_j = Σ_i A[i, j]): sym I − D^{-1/2}AD^{-1/2}, rw I − AD⁻¹, none D − A, as PyG's ``get_laplacian``. A
    ChebNet layer (Defferrard et al.; PyG ``ChebConv``) Σ_{k<K} T_k(L̃) X Θ_k is a ``layer`` of K heads, head k
    with ``order = k``, fused by ``sum`` (one bias). The seed's polynomial kernel Σ_k α_k L^k is the same family
    (``scale = false, basis = "power"``). Default lowering: the recurrence on vectors over the edge list, never an
    n x n matrix; reference: L̃ and T_k(L̃) materialised.
    """

    name, family = "chebyshev_graph", "interdependence"
    aliases = ("spectral_graph",)
    synonyms = dict.fromkeys(("cheb_conv", "chebconv", "chebnet"),
                             'chebyshev_graph(edges = E, order = k) as head k of a layer of K heads, '
                             'fusion = sum')
    axes = ("instance",)
    HP = _ChebyshevHP
    example, example_call = graph_example(), "{name}(edges = edges, order = 2)"

    def scratch(self, ctx):
        return edge_messages(ctx)

    def steps(self, ctx):
        return max(self.hp.order, 1)  # one propagation per order

    def build(self, ctx):
        from rpn2c.components.impl.xi_spectral import _ChebyshevXi

        return _ChebyshevXi(self.hp)
