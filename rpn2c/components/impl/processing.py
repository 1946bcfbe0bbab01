"""The ``nn.Module`` implementations of :mod:`rpn2c.components.processing` (imported when a model is built)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Apply(nn.Module):
    """An activation as a module: ``forward(x) = fn(x)`` (the lowering may call ``fn`` directly)."""

    def __init__(self, fn, label):
        super().__init__()
        self.fn, self.label = fn, label

    def forward(self, x):
        return self.fn(x)

    def extra_repr(self):
        return self.label


class _PReLU(nn.Module):
    def __init__(self, n, init, items):
        super().__init__()
        self.weight = nn.Parameter(torch.full((n,), float(init)))
        self.items = items

    def forward(self, x):
        # torch's prelu slopes axis 1; a sequence's (or a vector's) features are its last axis
        if self.items and x.dim() > 2 and self.weight.numel() > 1:
            return F.prelu(x.movedim(-1, 1), self.weight).movedim(1, -1)
        return F.prelu(x, self.weight)


class _Softmax(nn.Module):
    def __init__(self, dim, log=False):
        super().__init__()
        self.dim, self.log = dim, log

    def forward(self, x):
        return torch.log_softmax(x, self.dim) if self.log else torch.softmax(x, self.dim)


class _BatchNorm(nn.Module):
    def __init__(self, bn, items):
        super().__init__()
        self.bn, self.items = bn, items

    def forward(self, x):
        # contiguous: torch 2.13's CPU batch_norm backward is wrong for a size-1 batch axis with an odd stride
        if self.items:  # [B, N, F] -> normalise F over B and N
            return self.bn(x.transpose(1, 2).contiguous()).transpose(1, 2)
        return self.bn(x.contiguous())


class LayerNormModule(nn.Module):
    """y = layer_norm(x) · (γ + offset) [+ β] over the trailing ``shape``; γ starts at 1 − offset (a fresh norm
    scales by 1), as x-transformers' LayerNorm with ``unit_offset``."""

    def __init__(self, shape: tuple[int, ...], eps: float, bias: bool, offset: float):
        super().__init__()
        self.shape, self.eps, self.offset = tuple(shape), eps, offset
        self.weight = nn.Parameter(torch.full(self.shape, 1.0 - offset))
        self.bias = nn.Parameter(torch.zeros(self.shape)) if bias else None

    def forward(self, x):
        y = F.layer_norm(x, self.shape, None, None, self.eps) * (self.weight + self.offset)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"{self.shape}, eps={self.eps}, offset={self.offset}"


class RMSNormModule(nn.Module):
    """y = x / √(mean(x²) + ε) · (γ + offset) over the trailing ``shape`` (``F.rms_norm``, torch's fused kernel);
    γ starts at 1 − offset, so a fresh norm scales by 1. Half-precision inputs are normalised in float32 and cast
    back before the scale, as transformers' Llama and T5 norms do (wider inputs keep their precision); ``upcast``
    does so for every dtype, in LlamaRMSNorm's order of operations (a float64 input is normalised in float32);
    ``upcast_variance`` takes only mean(x²) in float32 and scales x at its own precision (T5LayerNorm's order)."""

    def __init__(self, shape: tuple[int, ...], eps: float, affine: bool, offset: float, upcast: bool = False,
                 upcast_variance: bool = False):
        super().__init__()
        self.shape, self.eps, self.offset = tuple(shape), eps, offset
        self.upcast, self.upcast_variance = upcast, upcast_variance
        self.weight = nn.Parameter(torch.full(self.shape, 1.0 - offset)) if affine else None

    def forward(self, x):
        w = self.weight if self.weight is None or not self.offset else self.weight + self.offset
        dims = tuple(range(-len(self.shape), 0))
        if self.upcast:
            h = x.to(torch.float32)
            y = (h * torch.rsqrt(h.pow(2).mean(dims, keepdim=True) + self.eps)).to(x.dtype)
            return y if w is None else w * y
        if self.upcast_variance:  # x * rsqrt(float32 variance): float32 for half inputs, then cast back
            y = (x * torch.rsqrt(x.to(torch.float32).pow(2).mean(dims, keepdim=True) + self.eps)).to(x.dtype)
            return y if w is None else w * y
        if x.dtype in (torch.float16, torch.bfloat16):
            y = F.rms_norm(x.float(), self.shape, None, self.eps).to(x.dtype)
            return y if w is None else w * y
        return F.rms_norm(x, self.shape, w, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.shape}, eps={self.eps}" + (f", offset={self.offset}" if self.offset else "")
                + (", upcast" if self.upcast else "") + (", upcast_variance" if self.upcast_variance else ""))


class RReLUModule(nn.RReLU):
    """``nn.RReLU`` whose eval form is the leaky ReLU it equals, slope (lower + upper)/2: torch's eval RReLU still
    dispatches its random-noise operator, which neither ONNX nor a traced program's consumers translate."""

    def forward(self, x):
        if self.training:
            return super().forward(x)
        return F.leaky_relu(x, (self.lower + self.upper) / 2)
