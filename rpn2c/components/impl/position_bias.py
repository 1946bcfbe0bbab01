"""The ``nn.Module`` implementations of :mod:`rpn2c.components.position_bias` (imported when a model is built)."""

from __future__ import annotations

import torch
from torch import nn

from rpn2c.functional import position_bias


class RelativeBiasModule(nn.Module):
    """T5's bucketed bias ``[H, Nq, Nc]`` from the learned ``weight`` ``[buckets, H]`` (``nn.Embedding``'s layout,
    as T5's ``relative_attention_bias``)."""

    def __init__(self, buckets: int, heads: int, bidirectional: bool, max_distance: int):
        super().__init__()
        self.bidirectional, self.max_distance = bidirectional, max_distance
        self.weight = nn.Parameter(torch.randn(buckets, heads) * heads ** -0.5)

    def forward(self, x: torch.Tensor, c: torch.Tensor | None = None) -> torch.Tensor:
        nk = (x if c is None else c).shape[-2]
        return position_bias.bucketed_bias(self.weight, x.shape[-2], nk, self.bidirectional, self.max_distance)

    def extra_repr(self) -> str:
        return (f"buckets={self.weight.shape[0]}, heads={self.weight.shape[1]}, "
                f"bidirectional={self.bidirectional}, max_distance={self.max_distance}")


class AlibiModule(nn.Module):
    """ALiBi's ``−m_h·|i − j|`` ``[H, Nq, Nc]`` in the queries' dtype."""

    def __init__(self, heads: int):
        super().__init__()
        self.heads = heads

    def forward(self, x: torch.Tensor, c: torch.Tensor | None = None) -> torch.Tensor:
        nk = (x if c is None else c).shape[-2]
        return position_bias.alibi_bias(self.heads, x.shape[-2], nk, x.dtype, x.device)

    def extra_repr(self) -> str:
        return f"heads={self.heads}"
