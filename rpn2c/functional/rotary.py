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


def tables(n: int, dims: int, base: float | Tensor, dtype: torch.dtype, device=None) -> tuple[Tensor, Tensor]:
    """cos and sin of the angles ``t · θ_i`` of items t < n, ``[n, dims/2]`` each, in ``dtype``; ``base`` may be
    the frequencies themselves (a float32 ``[dims/2]`` tensor, computed once)."""
    freqs = base.float() if isinstance(base, Tensor) else frequencies(dims, base, device)  # a float64 copy: same values
    angles = torch.arange(n, device=device, dtype=torch.float32)[:, None] * freqs[None]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def full_tables(n: int, freqs: Tensor, dtype: torch.dtype, interleaved: bool = False) -> tuple[Tensor, Tensor]:
    """cos and sin over the ``dims`` turned features, ``[n, dims]``: each pair's angle at both of its features
    (``cat(a, a)``; interleaved: each repeated twice), as :func:`rotate_by` takes them."""
    cos, sin = tables(n, 2 * freqs.shape[0], freqs, dtype, freqs.device)
    if interleaved:
        return cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    return torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)


def rotate_by(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = False) -> Tensor:
    """``x`` ``[..., N, r]`` turned by the full tables ``[N, dims]`` (:func:`full_tables`): the libraries' form
    ``x · cos + rotate_half(x) · sin`` on the leading ``dims`` features (``rotate_half(a, b) = (−b, a)``;
    interleaved: ``(−x_{2i+1}, x_{2i})``), the rest unchanged."""
    dims = cos.shape[-1]
    part, rest = (x, None) if dims == x.shape[-1] else (x[..., :dims], x[..., dims:])
    if interleaved:
        turned = torch.stack((-part[..., 1::2], part[..., 0::2]), -1).flatten(-2)
    else:
        a, b = part.chunk(2, dim=-1)
        turned = torch.cat((-b, a), -1)
    out = part * cos + turned * sin
    return out if rest is None else torch.cat((out, rest), dim=-1)


def rotate(x: Tensor, dims: int, base: float, interleaved: bool = False) -> Tensor:
    """``x`` ``[..., N, r]`` with each item's leading ``dims`` features turned by its position (items on axis −2)."""
    cos, sin = full_tables(x.shape[-2], frequencies(dims, base, x.device), x.dtype, interleaved)
    return rotate_by(x, cos, sin, interleaved)


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
