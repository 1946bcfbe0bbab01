"""Relative position biases: per-head terms added to attention scores, a function of the key − query offset.

- T5's bucketed bias (Raffel et al. 2020): the offset ``j − i`` falls into one of ``buckets`` buckets, exact for
  small offsets and logarithmically wider up to ``max_distance`` (beyond it one bucket); head h adds the learned
  ``table[bucket(j − i), h]``. :func:`t5_buckets` is transformers' ``T5Attention._relative_position_bucket``
  (Mesh TensorFlow's), the logarithm in float32 as there, so the buckets are the same integers.
- ALiBi (Press et al. 2022): head h adds ``−m_h · |i − j|`` with the fixed slope ``m_h = 2^(−8(h+1)/H)`` for H a
  power of two, and the paper's interleaving of the next power's slopes otherwise (:func:`alibi_slopes`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def offsets(nq: int, nk: int, device=None) -> Tensor:
    """``j − i`` for query i < nq and key j < nk, int64 ``[nq, nk]`` (T5's ``memory_position − context_position``)."""
    return torch.arange(nk, dtype=torch.long, device=device)[None, :] - \
        torch.arange(nq, dtype=torch.long, device=device)[:, None]


def t5_buckets(relative: Tensor, bidirectional: bool, buckets: int, max_distance: int) -> Tensor:
    """T5's bucket of each offset ``relative = j − i`` (int64, values in [0, buckets))."""
    out = torch.zeros_like(relative)
    if bidirectional:
        buckets //= 2
        out = out + (relative > 0).to(torch.long) * buckets
        relative = relative.abs()
    else:
        relative = -torch.min(relative, torch.zeros_like(relative))
    exact = buckets // 2
    small = relative < exact
    large = exact + (torch.log(relative.float() / exact) / math.log(max_distance / exact)
                     * (buckets - exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, buckets - 1))
    return out + torch.where(small, relative, large)


def bucketed_bias(table: Tensor, nq: int, nk: int, bidirectional: bool, max_distance: int) -> Tensor:
    """The per-head bias ``[H, nq, nk]`` of a learned ``table`` ``[buckets, H]``: ``table[bucket(j − i), h]``."""
    idx = t5_buckets(offsets(nq, nk, table.device), bidirectional, table.shape[0], max_distance)
    return table[idx].permute(2, 0, 1)


def alibi_slopes(heads: int) -> list[float]:
    """ALiBi's head slopes (the paper's ``get_slopes``): a geometric sequence starting at ``2^(−8/H)`` for H a
    power of two; otherwise those of the largest power of two below H, then every other slope of twice that."""
    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]

    if math.log2(heads).is_integer():
        return power_of_two(heads)
    below = 2 ** math.floor(math.log2(heads))
    return power_of_two(below) + alibi_slopes(2 * below)[0::2][:heads - below]


def alibi_bias(heads: int, nq: int, nk: int, dtype: torch.dtype, device=None) -> Tensor:
    """``−m_h · |i − j|`` as ``[H, nq, nk]``; with a causal mask it is the paper's ``−m_h · (i − j)``, j <= i."""
    slopes = torch.tensor(alibi_slopes(heads), dtype=dtype, device=device)
    return -slopes[:, None, None] * offsets(nq, nk, device).abs().to(dtype)
