"""A short causal convolution over the item axis, one filter per channel (Mamba's ``conv1d``, H3's short conv).

``y[b, t, c] = β_c + Σ_{j<k} w[c, j] x[b, t − k + 1 + j, c]`` with zeros before the first item. As a matrix over
the items of channel c it is the banded lower-triangular Toeplitz ``M_c[t, s] = w[c, k − 1 − (t − s)]`` for
``0 ≤ t − s < k`` (0 elsewhere): :func:`causal_conv_matrix` builds it (the reference lowering), :func:`causal_conv`
computes the same product by one grouped ``conv1d`` (the default lowering).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x [B, T, C]``, ``weight [C, 1, k]`` (``nn.Conv1d``'s depthwise layout), ``bias [C]`` -> ``[B, T, C]``:
    ``conv1d`` with ``groups = C`` on the input padded with ``k − 1`` zeros on the left."""
    k = weight.shape[-1]
    y = F.conv1d(F.pad(x.transpose(1, 2), (k - 1, 0)), weight.to(x.dtype),
                 None if bias is None else bias.to(x.dtype), groups=x.shape[-1])
    return y.transpose(1, 2)


def causal_conv_matrix(weight: torch.Tensor, n: int) -> torch.Tensor:
    """The per-channel Toeplitz matrices ``M [C, T, T]``: ``M[c, t, s] = w[c, k − 1 − (t − s)]`` on the band
    ``0 ≤ t − s < k``, 0 elsewhere (``n = T``)."""
    k = weight.shape[-1]
    steps = torch.arange(n, device=weight.device)
    lag = steps[:, None] - steps[None, :]  # [T, T]: t − s
    band = (lag >= 0) & (lag < k)
    taps = weight[:, 0, (k - 1 - lag).clamp(0, k - 1)]  # [C, T, T]
    return taps * band.to(weight.dtype)


def causal_conv_by_matrix(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`causal_conv` as ``y[:, :, c] = M_c x[:, :, c] + β_c`` with ``M`` materialised."""
    m = causal_conv_matrix(weight.to(x.dtype), x.shape[1])
    y = torch.einsum("cts,bsc->btc", m, x)
    return y if bias is None else y + bias.to(x.dtype)
