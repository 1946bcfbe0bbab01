"""The ``fused_heads`` kernel: H identical softmax-bilinear (attention) heads as one batched SDPA call."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def fused_attention(mods, q, c, aux, values):
    """H identical softmax-bilinear heads in one ``scaled_dot_product_attention`` call.

    ``values`` is ``[B, H, Nc, n]`` (each head's ψ already applied); returns ``[B, H, Nq, n]``. Equal to calling
    each head's ``apply`` (the per-head projections are stacked, not changed).
    """
    first = mods[0]
    keys = aux["keys"] if first.hp.keys is not None else c
    qq = torch.einsum("bnm,hmr->bhnr", q, torch.stack([m.w_q for m in mods]))
    if first.b_q is not None:
        qq = qq + torch.stack([m.b_q for m in mods])[None, :, None, :]
    if first.full:
        kk = keys.unsqueeze(1).expand(-1, len(mods), -1, -1)
    else:
        kk = torch.einsum("bnm,hmr->bhnr", keys, torch.stack([m.w_k for m in mods]))
        if first.b_k is not None:
            kk = kk + torch.stack([m.b_k for m in mods])[None, :, None, :]
    if first.is_causal_kernel:
        return F.scaled_dot_product_attention(qq, kk, values, is_causal=True, scale=first.scale)
    mask = first._additive_mask(aux, q.shape[-2], keys.shape[-2], q.dtype, q.device)
    if mask is not None and mask.dim() == 3:
        mask = mask.unsqueeze(1)  # [B, 1, Nq|1, Nc]: broadcast over heads
    return F.scaled_dot_product_attention(qq, kk, values, attn_mask=mask, scale=first.scale)
