"""The ``nn.Module`` implementation of :mod:`rpn2c.components.xi_spectral` (imported when a model is built)."""

from __future__ import annotations

from rpn2c.components.impl.base import XiModule
from rpn2c.functional.structure import chebyshev
from rpn2c.functional.structure.graph import check_edge_ids


class _ChebyshevXi(XiModule):
    axis = "instance"

    def __init__(self, hp):
        super().__init__()
        self.hp = hp

    def _laplacian(self, aux, n, dtype, device, literal):
        hp = self.hp
        check_edge_ids(aux["edges"], n, hp.edges.name, self.axis)
        build = chebyshev.laplacian_matrix if literal else chebyshev.laplacian_edges
        return build(aux["edges"], aux.get("weight"), n, hp.norm, hp.lambda_max, hp.scale, dtype, device)

    def matrix(self, q, c, aux, size=None):
        n = size if size is not None else c.shape[-2]
        m = self._laplacian(aux, n, q.dtype, q.device, literal=True)
        return chebyshev.polynomial_matrix(m, self.hp.order, self.hp.basis)

    def apply(self, z, q, c, aux):
        src, dst, w, diag = self._laplacian(aux, z.shape[-2], z.dtype, z.device, literal=False)
        return chebyshev.polynomial_apply(z, src, dst, w, diag, self.hp.order, self.hp.basis)

    def polynomial_sum(self, ys, aux):
        """``Σ_k T_k(L̃) y_k`` over the orders of ``ys`` (``{order: [..., n, F]}``) by one Clenshaw recurrence: the
        K heads of a ChebNet layer in K − 1 propagations (emitter ``chebyshev_sum``)."""
        z = next(iter(ys.values()))
        src, dst, w, diag = self._laplacian(aux, z.shape[-2], z.dtype, z.device, literal=False)
        return chebyshev.polynomial_sum(ys, src, dst, w, diag, self.hp.basis)
