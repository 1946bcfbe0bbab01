"""Masks computed from token ids."""

from __future__ import annotations

import torch
from torch import nn


class TokenMask(nn.Module):
    """``ids == pad`` (or ``ids != pad`` for a keep mask), a bool [B, T]."""

    def __init__(self, pad: int, keep: bool):
        super().__init__()
        self.pad, self.keep = pad, keep

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return ids.ne(self.pad) if self.keep else ids.eq(self.pad)
