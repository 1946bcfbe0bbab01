"""Local-window (band) masks over item pairs: item i relates to item j only when |i − j| <= k."""

from __future__ import annotations

import torch
from torch import Tensor


def band_matrix(nq: int, nc: int, k: int, *, device: torch.device | str | None = None) -> Tensor:
    """The literal band indicator ``R [nq, nc]``: ``R_ij = 1`` where ``|i − j| <= k``, else 0 (bool)."""
    return torch.ones(nq, nc, dtype=torch.bool, device=device).tril(k).triu(-k)


def band_blocked(nq: int, nc: int, k: int, *, device: torch.device | str | None = None) -> Tensor:
    """The pairs outside the band, ``|i − j| > k``, from item indices (``[nq, 1]`` against ``[1, nc]``)."""
    rows = torch.arange(nq, device=device).unsqueeze(-1)
    cols = torch.arange(nc, device=device)
    return band_outside(rows, cols, k)


def band_outside(rows: Tensor, cols: Tensor, k: int) -> Tensor:
    """``|rows − cols| > k`` for broadcastable index tensors (entries of a band mask at given positions)."""
    return (rows - cols).abs() > k
