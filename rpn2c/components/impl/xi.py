"""The ``nn.Module`` implementations of :mod:`rpn2c.components.xi` (imported when a model is built)."""

from __future__ import annotations

import torch

from rpn2c.components.impl.base import XiModule
from rpn2c.functional import kernels, structure


class _IdentityXi(XiModule):
    def __init__(self, axis):
        super().__init__()
        self.axis = axis

    def matrix(self, q, c, aux, size=None):
        n = size if size is not None else c.shape[-2 if self.axis == "instance" else -1]
        return torch.eye(n, dtype=q.dtype, device=q.device)

    def apply(self, z, q, c, aux):
        return z


class _ChainXi(XiModule):
    def __init__(self, hp, axis):
        super().__init__()
        self.hp, self.axis = hp, axis

    def _forward_op(self, z):
        """M @ z along dim -2 for the forward (or bidirectional) chain, by shifts / scans / DST."""
        hp = self.hp
        bi = hp.direction == "bidirectional"
        s = hp.self_scaling if hp.self_loop else 0.0
        mode = hp.effective_mode
        if mode in ("power", "accumulate"):
            return structure.chain_apply(z, -2, hp.hops, mode=mode, bidirectional=bi, self_loop=hp.self_loop,
                                         self_scaling=hp.self_scaling, include_identity=hp.include_identity)
        if mode == "inverse_approx":
            return structure.chain_apply(z, -2, mode="inverse", bidirectional=bi)
        if mode == "inverse":
            return structure.chain_inverse_apply(z, -2, alpha=hp.alpha, bidirectional=bi, self_scaling=s)
        return structure.chain_exp_apply(z, -2, alpha=hp.alpha, bidirectional=bi, self_scaling=s)

    def _op(self, z, transpose=False):
        """M @ z (or Mᵀ @ z): backward = J·M_forward·J and M_forwardᵀ = J·M_forward·J (J reverses the items)."""
        backward = self.hp.direction == "backward"
        if transpose and self.hp.direction != "bidirectional":
            backward = not backward
        return self._forward_op(z.flip(-2)).flip(-2) if backward else self._forward_op(z)

    def _on_items(self, z):
        """Normalised M @ z along dim -2 without building M (degrees = M applied to ones; zero degree -> 0)."""
        norm = self.hp.norm
        if norm == "none":
            return self._op(z)
        ones = torch.ones(z.shape[-2], 1, dtype=z.dtype, device=z.device)
        if norm == "row":
            return self._op(z) * _chain_inv(self._op(ones))
        if norm == "column":
            return self._op(z * _chain_inv(self._op(ones, transpose=True)))
        d = _chain_inv_sqrt(self._op(ones))
        return d * self._op(z * d)

    def matrix(self, q, c, aux, size=None):
        n = size if size is not None else (c.shape[-2] if self.axis == "instance" else c.shape[-1])
        a = _chain_dense(n, self.hp, q.dtype, q.device)
        return a if self.axis == "instance" else a.T

    def apply(self, z, q, c, aux):
        if self.axis == "instance":
            return self._on_items(z)
        return self._on_items(z.transpose(-1, -2)).transpose(-1, -2)


def _chain_inv(d):
    return torch.where(d != 0, 1.0 / torch.where(d != 0, d, torch.ones_like(d)), torch.zeros_like(d))


def _chain_inv_sqrt(d):
    return torch.where(d > 0, torch.where(d > 0, d, torch.ones_like(d)).rsqrt(), torch.zeros_like(d))


def _chain_dense(n, hp, dtype, device):
    """The literal chain matrix (row = output item), as the paper writes it (reference lowering)."""
    bi = hp.direction == "bidirectional"
    mode = hp.effective_mode
    if mode in ("power", "accumulate"):
        m = structure.multihop_chain(n, hp.hops, mode == "accumulate", hp.include_identity, bidirectional=bi,
                                     self_loop=hp.self_loop, self_scaling=hp.self_scaling, device=device,
                                     dtype=dtype)
    elif mode == "inverse_approx":
        m = structure.chain_inverse_approx(n, bi, device=device, dtype=dtype)
    else:
        a = structure.chain_matrix(n, bi, hp.self_loop, hp.self_scaling, device=device, dtype=dtype)
        if mode == "inverse":
            m = torch.linalg.inv(torch.eye(n, dtype=dtype, device=device) - hp.alpha * a)
        else:
            m = torch.linalg.matrix_exp(hp.alpha * a)
    if hp.direction == "backward":
        m = m.T
    return m if hp.norm == "none" else kernels.degree_normalize(m, hp.norm)
