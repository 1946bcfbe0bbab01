"""The ``nn.Module`` implementations of :mod:`rpn2c.components.xi_kernels` (imported when a model is built)."""

from __future__ import annotations

import torch

from rpn2c.components.impl.base import XiModule
from rpn2c.functional import kernels


class KernelXiModule(XiModule):
    def __init__(self, fn, kwargs, hp, axis, buffers=None):
        super().__init__()
        self.fn, self.kwargs, self.hp, self.axis = fn, dict(kwargs), hp, axis
        for name, value in (buffers or {}).items():
            self.register_buffer(name, value)  # persistent: a checkpoint restores the kernel

    def _vectors(self, t):
        v = t if self.axis == "attribute" else t.transpose(-1, -2)  # [B, b, k]: k vectors of length b
        return v - v.mean(dim=-2, keepdim=True) if self.hp.centered else v

    def call_kwargs(self):
        return self.kwargs

    def matrix(self, q, c, aux, size=None):
        x = self._vectors(c)
        y = None if (q is c or self.axis == "attribute") else self._vectors(q)
        k = self.fn(x, y, **self.call_kwargs())  # k[i, j] = k(v_i, w_j)
        r = k.transpose(-1, -2)  # row = output
        r = kernels.normalize_matrix(r, self.hp.norm, self.hp.softmax_scale, self.hp.mask_zeros)
        return r if self.axis == "instance" else r.transpose(-1, -2)


class _AnisotropicModule(KernelXiModule):
    def __init__(self, hp, axis):
        vector = isinstance(hp.a, list)
        bufs = {"a": torch.tensor(hp.a, dtype=torch.get_default_dtype())} if vector else {}
        super().__init__(kernels.anisotropic_rbf_kernel, {} if vector else {"a": float(hp.a)}, hp, axis, bufs)
        self.vector = vector

    def call_kwargs(self):
        return {"a": self.a} if self.vector else self.kwargs
