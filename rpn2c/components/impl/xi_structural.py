"""The ``nn.Module`` implementations of :mod:`rpn2c.components.xi_structural` (imported when a model is built)."""

from __future__ import annotations

import torch

from rpn2c.components.impl.base import XiModule
from rpn2c.components.impl.xi_graph import _GraphXi
from rpn2c.functional import structure


class _ConstantXi(XiModule):
    def __init__(self, c, out, matrix, axis):
        super().__init__()
        self.c, self.out, self.axis = c, out, axis
        if matrix is not None:
            self.register_buffer("a", torch.tensor(matrix, dtype=torch.get_default_dtype()))
        else:
            self.a = None

    def _n_out(self, n):
        return self.out if self.out is not None else n

    def matrix(self, q, c, aux, size=None):
        if self.a is not None:
            a = self.a.to(q.dtype)
            return a if self.axis == "attribute" else a.T
        n = size if size is not None else (c.shape[-2] if self.axis == "instance" else c.shape[-1])
        shape = (n, self._n_out(n)) if self.axis == "attribute" else (self._n_out(n), n)
        return torch.full(shape, self.c, dtype=q.dtype, device=q.device)

    def apply(self, z, q, c, aux):
        if self.a is not None:
            a = self.a.to(z.dtype)
            return z @ a if self.axis == "attribute" else a.T @ z
        dim = -1 if self.axis == "attribute" else -2
        shape = list(z.shape)
        shape[dim] = self._n_out(z.shape[dim])
        # c = 0 included: 0·Σz is zero but stays attached to z (a fresh zeros tensor would cut the gradient path)
        return (self.c * z.sum(dim=dim, keepdim=True)).expand(shape)


class _PageRankXi(_GraphXi):
    def support(self, aux, n, dtype, device):
        return None

    def _from_adjacency(self, a):
        return structure.pagerank_matrix(a, self.hp.alpha)

    def _propagate(self, zz, src, dst, w, n, operator=None):
        hp = self.hp
        return structure.pagerank_propagate(zz, src, dst, w, n, hp.alpha, hp.iters, hp.tol, dim=-2,
                                            method=hp.method, operator=operator)
