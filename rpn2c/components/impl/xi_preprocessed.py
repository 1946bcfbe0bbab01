"""The ``nn.Module`` implementation of :mod:`rpn2c.components.xi_preprocessed` (imported when a model is built)."""

from __future__ import annotations

import torch

from rpn2c.components.impl.base import XiModule


class _PreprocessedXi(XiModule):
    def __init__(self, inner, hp, axis, columns=None):
        super().__init__()
        self.inner, self.hp, self.axis = inner, hp, axis
        if columns is not None:  # BatchNorm1d's affine, initialised as torch initialises it
            self.weight = torch.nn.Parameter(torch.ones(columns))
            self.bias = torch.nn.Parameter(torch.zeros(columns))

    def pre(self, x):
        """The processing of ξ's input batch: X ``[.., N, M]`` (attribute) or Xᵀ (instance), column by column."""
        dim = -2 if self.axis == "attribute" else -1  # a column of X is a feature; a column of Xᵀ an item
        for step in self.hp.pre:
            if step == "batch_norm":
                mean = x.mean(dim, keepdim=True)
                var = x.var(dim, unbiased=False, keepdim=True)
                x = (x - mean) / torch.sqrt(var + self.hp.eps)
                if self.hp.affine:
                    shape = (-1, 1) if self.axis == "instance" else (-1,)  # γ, β of a column
                    x = x * self.weight.reshape(shape) + self.bias.reshape(shape)
            else:
                x = getattr(torch, step)(x)
        return x

    def _data(self, q, c):
        pc = self.pre(c)
        return (pc if q is c else self.pre(q)), pc

    def matrix(self, q, c, aux, size=None):
        return self.inner.matrix(*self._data(q, c), aux, size)

    def apply(self, z, q, c, aux):
        return self.inner.apply(z, *self._data(q, c), aux)
