"""More processing functions: softmin, L2 normalisation, stochastic depth (shape-preserving; also usable as ops)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rpn2c.components.base import Processing
from rpn2c.components.registry import HP, register


def _feature_dim(t) -> int:
    return 1 if t.kind == "grid" else -1


def _features_only(t, name: str) -> str | None:
    if t.kind not in ("vector", "items", "grid"):
        return f"{name} needs features, got {t}"
    return None


@register
class Softmin(Processing):
    """Softmin over the feature axis (channels for grids): softmax(−x), y_f = e^{−x_f} / Σ_g e^{−x_g}."""

    name, family = "softmin", "processing"

    def check(self, t):
        return _features_only(t, "softmin")

    def build(self, t):
        from rpn2c.components.impl.layout import Softmin as Module

        return Module(_feature_dim(t))


@register
class L2Normalize(Processing):
    """L2 normalisation over the feature axis (channels for grids): y = x / max(‖x‖₂, eps) (torch's F.normalize)."""

    name, family = "l2_normalize", "processing"
    example_call = "l2_normalize(eps = 1e-06)"

    class HP(HP):
        eps: float = Field(1e-12, gt=0, description="the smallest norm divided by (a zero vector stays zero)")

    def check(self, t):
        return _features_only(t, "l2_normalize")

    def build(self, t):
        from rpn2c.components.impl.layout import L2Normalize as Module

        return Module(_feature_dim(t), self.hp.eps)


@register
class StochasticDepth(Processing):
    """Stochastic depth (Huang et al. 2016; torchvision.ops.stochastic_depth): in training, x · m / (1 − p) with
    m ~ Bernoulli(1 − p) drawn once per sample (mode "row": the whole residual branch of that sample is dropped) or
    once per batch ("batch"); the identity in eval mode.

    Its draws are torchvision's (one ``bernoulli_`` of shape ``[B, 1, ...]`` or ``[1, ...]``), so under one seed the
    compiled model drops the same rows as the torch model.
    """

    name, family = "stochastic_depth", "processing"
    synonyms = {"drop_path": "stochastic_depth", "droppath": "stochastic_depth"}  # timm's name
    example_call = 'stochastic_depth(p = 0.2, mode = "row")'

    class HP(HP):
        p: float = Field(0.5, ge=0.0, le=1.0, description="the probability of dropping a row (or the batch)")
        mode: Literal["row", "batch"] = Field("row", description="one draw per sample (row) or for the batch")

    def build(self, t):
        from rpn2c.components.impl.layout import StochasticDepth as Module

        return Module(self.hp.p, self.hp.mode)
