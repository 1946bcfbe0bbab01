"""Input/output processing: activations, normalisation, dropout (shape-preserving; also usable as ops)."""

from __future__ import annotations

import math

import torch
from pydantic import Field
from torch import nn

from rpn2c.components.base import Processing
from rpn2c.components.registry import HP, register
from rpn2c.ir.types import TensorType, is_known


class _Activation(Processing):
    family = "processing"
    fn = staticmethod(torch.relu)

    def build(self, t):
        return Apply(self.fn, self.name)


class Apply(nn.Module):
    """An activation as a module: ``forward(x) = fn(x)`` (the lowering may call ``fn`` directly)."""

    def __init__(self, fn, label):
        super().__init__()
        self.fn, self.label = fn, label

    def forward(self, x):
        return self.fn(x)

    def extra_repr(self):
        return self.label


def _act(name_, fn_, doc):
    cls = type(name_.title().replace("_", ""), (_Activation,), {"__doc__": doc, "name": name_,
                                                                "fn": staticmethod(fn_)})
    return register(cls)


_act("relu", torch.relu, "ReLU max(0, x).")
_act("tanh", torch.tanh, "Hyperbolic tangent.")
_act("sigmoid", torch.sigmoid, "Logistic sigmoid 1/(1+e^{−x}).")
_act("gelu", nn.functional.gelu, "GELU x·Φ(x) (exact erf form, as torch's default).")
_act("silu", nn.functional.silu, "SiLU x·σ(x).")
_act("elu", nn.functional.elu, "ELU.")
_act("leaky_relu", nn.functional.leaky_relu, "Leaky ReLU with slope 0.01.")
_act("softplus", nn.functional.softplus, "Softplus log(1+e^x).")


def _feature_dim(t: TensorType) -> int:
    return 1 if t.kind == "grid" else -1


@register
class Softmax(Processing):
    """Softmax over the feature axis (channels for grids)."""

    name, family = "softmax", "processing"

    def build(self, t):
        return _Softmax(_feature_dim(t))


@register
class LogSoftmax(Processing):
    """Log-softmax over the feature axis (channels for grids)."""

    name, family = "log_softmax", "processing"

    def build(self, t):
        return _Softmax(_feature_dim(t), log=True)


class _Softmax(nn.Module):
    def __init__(self, dim, log=False):
        super().__init__()
        self.dim, self.log = dim, log

    def forward(self, x):
        return torch.log_softmax(x, self.dim) if self.log else torch.softmax(x, self.dim)


@register
class Dropout(Processing):
    """Dropout with probability p (identity in eval mode)."""

    name, family = "dropout", "processing"

    class HP(HP):
        p: float = Field(0.5, ge=0.0, lt=1.0)

    def build(self, t):
        return nn.Dropout(self.hp.p)


class _NormHP(HP):
    eps: float = Field(1e-5, gt=0)
    affine: bool = True


@register
class LayerNorm(Processing):
    """Layer normalisation over the features of each item (over C·ΠS for a grid)."""

    name, family = "layer_norm", "processing"
    HP = _NormHP

    def shape(self, t):
        return tuple(t.shape[1:]) if t.kind == "grid" else (t.features,)

    def check(self, t):
        if t.kind not in ("vector", "items", "grid"):
            return f"layer_norm needs features, got {t}"
        if not all(is_known(d) for d in self.shape(t)):
            return f"layer_norm needs known feature sizes, got {t}"
        return None

    def count(self, t):
        return 2 * math.prod(self.shape(t)) if self.hp.affine else 0

    def build(self, t):
        return nn.LayerNorm(self.shape(t), eps=self.hp.eps, elementwise_affine=self.hp.affine)


@register
class BatchNorm(Processing):
    """Batch normalisation per feature (per channel for a grid); running statistics in eval mode."""

    name, family = "batch_norm", "processing"

    class HP(_NormHP):
        momentum: float = Field(0.1, gt=0, le=1)

    def check(self, t):
        if t.kind not in ("vector", "items", "grid"):
            return f"batch_norm needs features, got {t}"
        if not is_known(t.features):
            return f"batch_norm needs a known feature count, got {t}"
        return None

    def count(self, t):
        return 2 * t.features if self.hp.affine else 0

    def build(self, t):
        dims = len(t.spatial) if t.kind == "grid" else 1
        cls = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}[max(dims, 1)]
        return _BatchNorm(cls(t.features, eps=self.hp.eps, momentum=self.hp.momentum, affine=self.hp.affine),
                          items=t.kind == "items")


class _BatchNorm(nn.Module):
    def __init__(self, bn, items):
        super().__init__()
        self.bn, self.items = bn, items

    def forward(self, x):
        # contiguous: torch 2.13's CPU batch_norm backward is wrong for a size-1 batch axis with an odd stride
        if self.items:  # [B, N, F] -> normalise F over B and N
            return self.bn(x.transpose(1, 2).contiguous()).transpose(1, 2)
        return self.bn(x.contiguous())
