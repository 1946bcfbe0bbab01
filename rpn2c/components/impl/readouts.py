"""The ``nn.Module`` of :mod:`rpn2c.components.readouts` (imported when a model is built)."""

from __future__ import annotations

import torch
from torch import nn

from rpn2c.errors import InputError


class ItemModule(nn.Module):
    """Position ``index`` of ``axis`` (1: items, 2: a signal's steps), on inputs of at least ``needed`` positions;
    ``x.select`` (the reference lowering's product with the unit vector ``e_k`` is ``lower/literal_forms.py``'s)."""

    def __init__(self, index: int, axis: int, what: str, needed: int):
        super().__init__()
        self.index, self.axis, self.what = index, axis, what
        self.needed = needed

    def check(self, x: torch.Tensor) -> None:
        n = x.shape[self.axis]
        if n < self.needed:
            unit = "items" if self.axis == 1 else "steps"
            raise InputError(f"{self.what} needs at least {self.needed} {unit}, got an input of {n}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.check(x)
        return x.select(self.axis, self.index)

    def extra_repr(self) -> str:
        return f"index={self.index}, axis={self.axis}"
