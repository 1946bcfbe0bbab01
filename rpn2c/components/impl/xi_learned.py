"""The ``nn.Module`` implementations of :mod:`rpn2c.components.xi_learned` (imported when a model is built)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rpn2c.components.impl.base import XiModule
from rpn2c.functional import reconciliation as recon
from rpn2c.functional import structure


class _Fabricated(nn.Module):
    """Learnable tensors of one reconciliation family ψ ∈ R^{n x D}, its frozen buffers, fabricate / apply."""

    def __init__(self, psi: str, n: int, D: int, kwargs: dict):
        super().__init__()
        self.spec = recon.get_reconciliation(psi)
        self.n, self.D, self.kwargs = n, D, dict(kwargs)
        self.names = list(self.spec.param_shapes(n, D, **kwargs))
        for name, shape in self.spec.param_shapes(n, D, **kwargs).items():
            if len(shape) == 1:
                init = torch.ones(shape)
            else:
                bound = 1.0 / math.sqrt(max(shape[-1], 1))
                init = torch.empty(shape).uniform_(-bound, bound)
            self.register_parameter(name, nn.Parameter(init))
        self.buffer_names = []
        if self.spec.make_buffers is not None:
            bufs = self.spec.make_buffers(n, D, generator=None, dtype=torch.get_default_dtype(), device=None,
                                          **kwargs)
            for name, t in bufs.items():
                self.register_buffer(name, t)  # persistent
                self.buffer_names.append(name)

    def params(self) -> dict:
        return {k: getattr(self, k) for k in self.names + self.buffer_names}

    def matrix(self) -> torch.Tensor:
        """ψ ∈ R^{n x D}, literally."""
        return self.spec.fabricate(self.params(), self.n, self.D, **self.kwargs)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ ψᵀ`` for ``x: [..., D]`` in factored form."""
        return self.spec.apply(x, self.params(), self.n, self.D, **self.kwargs)


class _ParameterizedXi(XiModule):
    """A = ψ(w); with ``bias`` the affine ξ ``A z + b 1ᵀ`` (instance) / ``z A + 1 bᵀ`` (attribute)."""

    def __init__(self, fab, axis, bias: bool = False):
        super().__init__()
        self.fab, self.axis = fab, axis
        bound = 1.0 / math.sqrt(max(fab.D, 1))
        self.bias = nn.Parameter(torch.empty(fab.n).uniform_(-bound, bound)) if bias else None

    def matrix(self, q, c, aux, size=None):
        psi = self.fab.matrix()
        return psi if self.axis == "instance" else psi.T

    def offset(self):
        return self.bias

    def apply(self, z, q, c, aux):
        if self.axis == "attribute":
            y = self.fab.apply(z)
            return y if self.bias is None else y + self.bias
        if self.bias is not None:  # A z + b 1ᵀ as one addmm-like product on z as it is (no transposed copies)
            return torch.baddbmm(self.bias.unsqueeze(-1).expand(z.shape[0], -1, z.shape[-1]),
                                 self.fab.matrix().expand(z.shape[0], -1, -1), z) if z.dim() == 3 else \
                self.fab.matrix() @ z + self.bias.unsqueeze(-1)
        return self.fab.apply(z.transpose(-1, -2)).transpose(-1, -2)


class _PBilinearXi(XiModule):
    def __init__(self, fab, hp, axis, width):
        super().__init__()
        self.fab, self.hp, self.axis = fab, hp, axis
        self.scale = hp.scale if hp.scale is not None else (1.0 / math.sqrt(width) if hp.softmax else 1.0)

    def _vk(self, q, c):
        """(V, K) with logits V Kᵀ: row = output (query) j, column = input i; K = (inputs) Wᵀ."""
        if self.axis == "instance":
            return q, self.fab.apply(c)
        v = c.transpose(-1, -2)
        return v, self.fab.apply(v)

    def logits(self, q, c):
        v, k = self._vk(q, c)
        return (v @ k.transpose(-1, -2)) * self.scale

    def entries(self, q, c, aux, dst, src):
        """Row = output entries R[dst, src] in O(E·M) without the full matrix (softmax: its row normaliser by
        blocks, :func:`structure.bilinear_entries`)."""
        v, k = self._vk(q, c)
        return structure.bilinear_entries(v, k, dst, src, self.scale, self.hp.softmax)

    def matrix(self, q, c, aux, size=None):
        r = self.logits(q, c)
        if self.hp.softmax:
            r = torch.softmax(r, dim=-1)
        return r if self.axis == "instance" else r.transpose(-1, -2)

    def apply(self, z, q, c, aux):
        v, k = self._vk(q, c)
        zz = z if self.axis == "instance" else z.transpose(-1, -2)
        if self.hp.softmax:
            y = F.scaled_dot_product_attention(v, k, zz, scale=self.scale)
        else:
            y = v @ ((k.transpose(-1, -2) @ zz) * self.scale)
        return y if self.axis == "instance" else y.transpose(-1, -2)


class _RPNXi(XiModule):
    def __init__(self, kappa, fab, pi, form, axis, out):
        super().__init__()
        self.kappa, self.fab, self.pi = kappa, fab, pi
        self.form, self.axis, self.out = form, axis, out

    def matrix(self, q, c, aux, size=None):
        if self.form == "flatten":
            v = c.flatten(-2).unsqueeze(-2)  # [B, 1, N·M]
        else:
            v = c.transpose(-1, -2) if self.axis == "attribute" else c  # [B, K, L]
        r = self.fab.apply(self.kappa(v))
        if self.pi is not None:
            r = r + self.pi(v)
        if self.form == "flatten":
            r = r.reshape(*r.shape[:-2], -1, self.out)  # rows = input positions (the paper's m x m')
        return r if self.axis == "attribute" else r.transpose(-1, -2)
