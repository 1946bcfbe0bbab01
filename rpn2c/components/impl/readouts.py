"""The ``nn.Module`` of :mod:`rpn2c.components.readouts` (imported when a model is built)."""

from __future__ import annotations

import torch
from torch import nn

from rpn2c.errors import InputError


class ItemModule(nn.Module):
    """Position ``index`` of ``axis`` (1: items, 2: a signal's steps), on inputs of at least ``needed`` positions;
    ``reference``: the product with the unit vector ``e_k`` (the one-row selection matrix), else ``x.select``."""

    def __init__(self, index: int, axis: int, what: str, needed: int, reference: bool = False):
        super().__init__()
        self.index, self.axis, self.what, self.reference = index, axis, what, reference
        self.needed = needed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[self.axis]
        if n < self.needed:
            unit = "items" if self.axis == 1 else "steps"
            raise InputError(f"{self.what} needs at least {self.needed} {unit}, got an input of {n}")
        if not self.reference:
            return x.select(self.axis, self.index)
        unit = torch.zeros(n, dtype=x.dtype, device=x.device)
        unit[self.index % n] = 1  # e_k
        return torch.einsum("bnd,n->bd" if self.axis == 1 else "bcn,n->bc", x, unit)

    def extra_repr(self) -> str:
        return f"index={self.index}, axis={self.axis}, lowering={'reference' if self.reference else 'select'}"
