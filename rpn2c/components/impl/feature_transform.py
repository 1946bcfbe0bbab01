"""The ``nn.Module`` of :mod:`rpn2c.components.feature_transform` and the loss terms a model adds in training."""

from __future__ import annotations

import torch
from torch import nn


class Regularised(nn.Module):
    """A module with a loss term: ``penalty`` is the term of its last forward in training mode (None otherwise);
    :func:`regularisation` sums them and the training loop adds the sum to the loss."""

    penalty: torch.Tensor | None = None


def regularisation(model: nn.Module) -> torch.Tensor | None:
    """Σ of the ``penalty`` of every :class:`Regularised` module of ``model`` (None when there is none)."""
    terms = [m.penalty for m in model.modules() if isinstance(m, Regularised) and m.penalty is not None]
    return torch.stack(terms).sum() if terms else None


class TransformModule(Regularised):
    """Y = X T per sample (``torch.matmul``); in training with w > 0, penalty = w · mean_b ‖I − T_b T_bᵀ‖²_F."""

    def __init__(self, orthogonality: float):
        super().__init__()
        self.orthogonality = orthogonality

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if self.orthogonality and self.training and torch.is_grad_enabled():
            eye = torch.eye(t.shape[-1], dtype=t.dtype, device=t.device)
            self.penalty = self.orthogonality * (eye - t @ t.transpose(-1, -2)).square().sum((-2, -1)).mean()
        else:
            self.penalty = None
        return x @ t

    def extra_repr(self) -> str:
        return f"orthogonality={self.orthogonality}" if self.orthogonality else ""
