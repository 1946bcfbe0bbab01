"""The ``fused_heads`` kernel: H identical softmax-bilinear (attention) heads as one batched SDPA call."""

from __future__ import annotations

import torch


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
    return first.attend(qq, kk, values, aux)  # the heads share their masks: the first head's kernel
