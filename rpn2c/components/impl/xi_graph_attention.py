"""The ``nn.Module`` implementations of :mod:`rpn2c.components.xi_graph_attention` (imported when a model is built)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rpn2c.components.impl.base import XiModule
from rpn2c.functional import structure


def _glorot(*shape):
    bound = math.sqrt(6.0 / (shape[0] + (shape[1] if len(shape) > 1 else 1)))
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


class _GraphAttentionXi(XiModule):
    axis = "instance"

    def __init__(self, hp, mq, mc):
        super().__init__()
        self.hp = hp
        self.__dict__["_psi"] = None  # share_psi: the head's ψ module (bound by the model; not a sub-module)
        if hp.rank is None:
            self.u_src, self.u_dst = _glorot(mc), _glorot(mq)
        else:
            if not hp.share_psi:
                self.weight = _glorot(mc, hp.rank)
            self.att_src, self.att_dst = _glorot(hp.rank), _glorot(hp.rank)

    def bind_psi(self, psi: nn.Module) -> None:
        """``share_psi``: score with ``psi.weight``ᵀ (one tensor for W, as GATConv's ``lin``)."""
        self.__dict__["_psi"] = psi

    def projection(self) -> torch.Tensor:
        """W [M, r]: the ξ's own, or the head's ψ weight transposed."""
        if not self.hp.share_psi:
            return self.weight
        if self._psi is None:
            raise RuntimeError("graph_attention(share_psi = true) is used before the model bound it to its ψ")
        return self._psi.weight.t()

    def scores(self, q, c):
        """``(s_dst [..., Nq], s_src [..., Nc])``: each target's and each source's additive score term."""
        if self.hp.rank is None:
            return q @ self.u_dst, c @ self.u_src
        w = self.projection()
        return (q @ w) @ self.att_dst, (c @ w) @ self.att_src

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
