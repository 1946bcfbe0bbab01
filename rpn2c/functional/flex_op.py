"""Windowed attention by FlexAttention, as the custom op ``rpn2c::window_attention`` (no gradients).

``softmax(q kᵀ · scale + band) v`` with ``band`` keeping ``|i − j| <= window`` (and ``j <= i`` if causal): a block
mask makes FlexAttention compute only the 128 × 128 blocks that meet the band, O(N·window) instead of O(N²).

FlexAttention runs fast only compiled, and torch 2.13's CPU lowering has no backward, reads the size of each
operand's own buffer rather than of a view of it, and cannot fuse the ops that follow. So the op compiles
``flex_attention`` once on its own (fresh operand buffers, nothing to fuse) and is opaque to an outer
``torch.compile``; the block mask of each (sizes, window, device) is built once and kept. It serves the rule
``flex_window`` where no gradient is needed; elsewhere the band goes to SDPA as a mask.
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch import Tensor

from rpn2c.functional.structure.band import band_blocked, band_outside

BLOCK = 128  # FlexAttention's default sparse block size
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_UNAVAILABLE: list[str] = []  # why FlexAttention could not be compiled here (then the band goes to SDPA)


def worthwhile(nq: int, nc: int, window: int) -> bool:
    """Whether a band block mask skips blocks: at least half of the key blocks lie outside every query block's
    band. Shorter sequences are faster through SDPA with the band as a mask."""
    blocks = -(-nc // BLOCK)
    band_blocks = 2 + -(-(2 * window + 1) // BLOCK)
    return nq >= 2 * BLOCK and band_blocks * 2 <= blocks


def supported(*tensors: Tensor) -> bool:
    """FlexAttention's dtypes on CPU or CUDA, no operand needing a gradient (the op has no backward), and a
    FlexAttention that compiled here."""
    t = tensors[0]
    if torch.is_grad_enabled() and any(x.requires_grad for x in tensors):
        return False
    return t.device.type in ("cpu", "cuda") and t.dtype in _DTYPES and not _UNAVAILABLE


@functools.lru_cache(maxsize=1)
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, fullgraph=True)


@functools.lru_cache(maxsize=16)
def _block_mask(nq: int, nc: int, window: int, causal: bool, device: str):
    """The band's block mask from block indices, forward only: no vmap (over the mask function, or to transpose
    the block lists), which fails inside a compiled graph's run. Query block b meets key blocks
    ⌊(128·b − window)/128⌋ … ⌊(128·b + 127 + window)/128⌋ (to its own last row's block if causal); the mask
    function trims the edge blocks."""
    from torch.nn.attention.flex_attention import BlockMask

    def band(b, h, i, j):
        keep = ~band_outside(i, j, window)
        return keep & (j <= i) if causal else keep

    q_blocks, kv_blocks = -(-nq // BLOCK), -(-nc // BLOCK)
    first_row = torch.arange(q_blocks, device=device) * BLOCK
    last_row = torch.clamp(first_row + BLOCK - 1, max=nq - 1)
    lo = torch.clamp(first_row - window, min=0) // BLOCK
    hi = torch.clamp(torch.clamp(last_row if causal else last_row + window, max=nc - 1) // BLOCK, max=kv_blocks - 1)
    count = torch.clamp(hi - lo + 1, min=0)
    # each row lists every key block, those of the band first (a permutation: lo, lo + 1, … wrapping around)
    idx = (lo[:, None] + torch.arange(kv_blocks, device=device)[None, :]) % kv_blocks
    return BlockMask.from_kv_blocks(count[None, None].int(), idx[None, None].int(), BLOCK_SIZE=BLOCK,
                                    mask_mod=band, seq_lengths=(nq, nc), compute_q_blocks=False)  # forward only


@torch.library.custom_op("rpn2c::window_attention", mutates_args=())
def window_attention(q: Tensor, k: Tensor, v: Tensor, window: int, causal: bool, scale: float) -> Tensor:
    """``[B, H, Nq, r]`` × ``[B, H, Nc, r]`` × ``[B, H, Nc, n]`` → ``[B, H, Nq, n]``."""
    mask = _block_mask(q.shape[-2], k.shape[-2], window, causal, str(q.device))
    q, k, v = (t.contiguous() for t in (q, k, v))
    try:
        return _compiled_flex()(q, k, v, block_mask=mask, scale=scale)
    except Exception as e:  # no compiler toolchain for inductor here: the same band as an SDPA mask, from now on
        _UNAVAILABLE.append(f"{type(e).__name__}: {e}")
        warnings.warn(f"FlexAttention could not be compiled ({type(e).__name__}); local attention windows run "
                      "as SDPA with a band mask", RuntimeWarning, stacklevel=2)
        return _sdpa_band(q, k, v, window, causal, scale)


def _sdpa_band(q, k, v, window, causal, scale):
    blocked = band_blocked(q.shape[-2], k.shape[-2], window, device=q.device)
    if causal:
        blocked = blocked | torch.ones_like(blocked).triu(1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=~blocked, scale=scale)


@window_attention.register_fake
def _(q, k, v, window, causal, scale):
    return v.new_empty(*q.shape[:-1], v.shape[-1])


def windowed_flex_attention(qq, kk, values, window: int, causal: bool, scale: float):
    """Attention restricted to |i − j| <= window (and j <= i if causal) by FlexAttention's block mask (the op
    ``rpn2c::window_attention``); 3-D operands get a head axis."""
    heads = qq.dim() == 4
    q, k, v = (t if heads else t.unsqueeze(1) for t in (qq, kk, values))
    out = window_attention(q, k, v, window, causal, scale)
    return out if heads else out.squeeze(1)
