"""Local-window (band) masks over item pairs: item i relates to item j only when |i − j| <= k; and region pairs
(seed 002 eq 8): the k-th of K contiguous regions of the queries against the k-th of the keys."""

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



def region_outside(rows: Tensor, cols: Tensor, nq: int, nc: int, k: int, regions: int) -> Tensor:
    """The pairs outside region pair k (``R^{r(k)}_ij = 0``, eq 8) for broadcastable index tensors: item i of n is
    in region ``⌊i·K/n⌋`` (K equal spans of the index range)."""
    return (rows * regions // nq != k) | (cols * regions // nc != k)


def region_matrix(nq: int, nc: int, k: int, regions: int, *, device: torch.device | str | None = None) -> Tensor:
    """The literal region-pair indicator ``R^{r(k)} [nq, nc]`` (bool): one block of ones, zeros elsewhere."""
    rows = torch.arange(nq, device=device).unsqueeze(-1)
    return ~region_outside(rows, torch.arange(nc, device=device), nq, nc, k, regions)
