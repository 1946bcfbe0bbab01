"""The ``nn.Module`` of :mod:`rpn2c.components.sequence_conv` (imported when a model is built)."""

from __future__ import annotations

import math

import torch
from torch import nn

from rpn2c.functional.causal_conv import causal_conv


class CausalConvModule(nn.Module):
    """``weight [C, 1, k]`` and ``bias [C]`` as ``nn.Conv1d(C, C, k, groups = C)`` holds and draws them
    (U(±1/√k)); one grouped convolution (the reference lowering's Toeplitz matrices are
    ``lower/literal_forms.py``'s)."""

    def __init__(self, channels: int, taps: int, bias: bool):
        super().__init__()
        bound = 1 / math.sqrt(taps)
        self.weight = nn.Parameter(torch.empty(channels, 1, taps).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(channels).uniform_(-bound, bound)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return causal_conv(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        c, _, k = self.weight.shape
        return f"channels={c}, kernel={k}, bias={self.bias is not None}"
