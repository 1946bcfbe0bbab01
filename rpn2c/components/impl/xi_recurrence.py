"""The ``nn.Module`` implementations of :mod:`rpn2c.components.xi_recurrence` (imported when a model is built)."""

from __future__ import annotations

import torch
from torch import nn

from rpn2c.components.impl.base import XiModule
from rpn2c.functional.scan import linear_scan, recurrence_matrix


class _RecurrenceXi(XiModule):
    def __init__(self, hp):
        super().__init__()
        self.reverse, self.fixed = hp.direction == "backward", float(hp.decay)
        if hp.learnable:
            self.decay = nn.Parameter(torch.tensor(self.fixed))

    def _lam(self, like):
        if hasattr(self, "decay"):
            return self.decay.to(like.dtype)
        return torch.tensor(self.fixed, dtype=like.dtype, device=like.device)

    def matrix(self, q, c, aux, size=None):
        n = size if size is not None else c.shape[-2]
        return recurrence_matrix(self._lam(q), n, reverse=self.reverse)

    def apply(self, z, q, c, aux):
        if self.reverse:
            return linear_scan(z.flip(-2), self._lam(z)).flip(-2)
        return linear_scan(z, self._lam(z))
