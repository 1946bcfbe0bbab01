"""Bilinear forms ``R = scale·Q Kᵀ + M`` (M an additive mask) at chosen entries, e.g. a graph's edges, without the
``Nq x Nc`` matrix: the row normaliser of a row softmax by blocks of query rows, and the entries ``R[dst, src]``."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

#: query rows x keys (x batch) per block of :func:`row_logsumexp`
LSE_BLOCK = 1 << 22

#: ``bias(rows, cols, dtype)``: the additive mask at the entries ``(rows, cols)`` (broadcast together), or None
BiasFn = Callable[[Tensor, Tensor, torch.dtype], "Tensor | None"]


def row_logsumexp(q: Tensor, k: Tensor, scale: float, bias: BiasFn | None = None) -> Tensor:
    """``lse[..., j] = log Σ_i exp(scale·q_j·k_i + bias(j, i))`` over all keys, for ``q [..., Nq, r]``, ``k [..., Nc, r]``.

    Blocks of query rows with at most :data:`LSE_BLOCK` logits each, checkpointed when a
    gradient is needed: memory O(LSE_BLOCK), never ``[Nq, Nc]`` at once (the backward recomputes each block).
    """
    nq, nc = q.shape[-2], k.shape[-2]
    lead = math.prod(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]))
    step = max(1, min(nq, LSE_BLOCK // max(nc * lead, 1)))
    cols = torch.arange(nc, device=q.device)

    def rows_lse(qb, keys, start):
        logits = (qb @ keys.transpose(-1, -2)) * scale
        rows = torch.arange(start, start + qb.shape[-2], device=qb.device).unsqueeze(-1)
        b = None if bias is None else bias(rows, cols, logits.dtype)
        return torch.logsumexp(logits if b is None else logits + b, dim=-1)

    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)
    out = []
    for start in range(0, nq, step):
        qb = q.narrow(-2, start, min(step, nq - start))
        out.append(checkpoint(rows_lse, qb, k, start, use_reentrant=False) if grad else rows_lse(qb, k, start))
    return torch.cat(out, dim=-1)


def bilinear_entries(q: Tensor, k: Tensor, dst: Tensor, src: Tensor, scale: float, softmax: bool = True,
                     bias: BiasFn | None = None) -> Tensor:
    """Entries ``[..., E]`` at ``(dst, src)`` of ``R = scale·q kᵀ + M`` (``M = bias``), in O(E·r).

    ``softmax=False``: ``s_e = scale·q_dst·k_src + M[dst, src]``, blocked entries (``M = −inf``) 0 (as the literal
    masked matrix); ``softmax=True``: the row softmax over all keys ``exp(s_e − lse_dst)`` (:func:`row_logsumexp`).
    """
    s = (q.index_select(-2, dst) * k.index_select(-2, src)).sum(-1) * scale
    b = None if bias is None else bias(dst, src, s.dtype)
    if not softmax:
        return s if b is None else torch.where(torch.isneginf(b), 0.0, s + b)
    if b is not None:
        s = s + b
    return torch.exp(s - row_logsumexp(q, k, scale, bias).index_select(-1, dst))
