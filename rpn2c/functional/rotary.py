"""Rotary position embedding (RoPE, Su et al. 2021) as a position-dependent rotation of queries and keys.

Item t's ``dims`` leading features are taken in pairs, and pair i is rotated by the angle ``t · θ_i`` with
``θ_i = base^(−2i / dims)``, i < dims / 2; the features past ``dims`` pass unchanged (partial rotary). The pairs
are ``(i, i + dims/2)`` (the half layout of GPT-NeoX, Llama, Qwen: ``rotate_half``) or ``(2i, 2i + 1)``
(``interleaved``: RoFormer, GPT-J). Then ``⟨R_t q, R_s k⟩`` depends on the positions only through ``t − s``.

The angles and their cosines are computed in float32 and cast to the operands' dtype, as the libraries whose
weights these models load do (transformers, timm, x-transformers): in float64 too, so a model equals theirs.
"""

from __future__ import annotations

import torch
from torch import Tensor


def frequencies(dims: int, base: float, device=None) -> Tensor:
    """``θ_i = base^(−2i/dims)``, i < dims/2, float32 (``inv_freq``)."""
    exponents = torch.arange(0, dims, 2, dtype=torch.int64, device=device).float() / dims
    return 1.0 / (base ** exponents)


def tables(n: int, dims: int, base: float, dtype: torch.dtype, device=None) -> tuple[Tensor, Tensor]:
    """cos and sin of the angles ``t · θ_i`` of items t < n, ``[n, dims/2]`` each, in ``dtype``."""
    angles = torch.arange(n, device=device, dtype=torch.float32)[:, None] * frequencies(dims, base, device)[None]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: Tensor, dims: int, base: float, interleaved: bool = False) -> Tensor:
    """``x`` ``[..., N, r]`` with each item's leading ``dims`` features rotated by its position (items on axis −2)."""
    cos, sin = tables(x.shape[-2], dims, base, x.dtype, x.device)
    part, rest = (x, None) if dims == x.shape[-1] else (x[..., :dims], x[..., dims:])
    if interleaved:
        a, b = part[..., 0::2], part[..., 1::2]
        out = torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)
    else:
        a, b = part.chunk(2, dim=-1)
        out = torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)
    return out if rest is None else torch.cat((out, rest), dim=-1)


def rotation_matrices(n: int, width: int, dims: int, base: float, interleaved: bool, dtype: torch.dtype,
                      device=None) -> Tensor:
    """The literal rotations ``R_t`` ``[n, width, width]`` (identity past ``dims``): ``rotate(x)[t] = R_t x[t]``."""
    cos, sin = tables(n, dims, base, dtype, device)
    half = dims // 2
    i = torch.arange(half, device=device)
    a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + half)
    r = torch.eye(width, dtype=dtype, device=device).repeat(n, 1, 1)
    r[:, a, a], r[:, a, b] = cos, -sin
    r[:, b, b], r[:, b, a] = cos, sin
    return r
