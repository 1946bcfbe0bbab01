"""Input/output processing: activations, normalisation, dropout (shape-preserving; also usable as ops)."""

from __future__ import annotations

import functools
import math
from typing import Annotated, Literal

from pydantic import Field, create_model, model_validator

from rpn2c.components.base import Processing
from rpn2c.components.registry import HP, Lazy, register
from rpn2c.ir.types import TensorType, is_known


class _Activation(Processing):
    family = "processing"
    fn = Lazy("torch.relu")

    def build(self, t):
        from rpn2c.components.impl.processing import Apply

        return Apply(self.function(), self.name)

    def function(self):
        """``fn`` with the hyper-parameters bound (a plain function of x: the lowering may call it directly)."""
        kwargs = dict(self.hp)
        return functools.partial(type(self).fn, **kwargs) if kwargs else type(self).fn


def _act(name_, fn_, doc, hp=None, call="", aliases=(), synonyms=None):
    """Register the activation ``name_`` = ``fn_(x, **hp)`` (``fn_``: the function's import path); ``hp``: its
    hyper-parameter schema (keyword arguments of ``fn_``), ``call``: how its example writes it; ``aliases`` and
    ``synonyms`` as :class:`rpn2c.components.registry.Component` declares them."""
    body = {"__doc__": doc, "name": name_, "fn": Lazy(fn_), "example_call": call, "aliases": tuple(aliases),
            "synonyms": dict(synonyms or {})}
    if hp is not None:
        body["HP"] = hp
    cls = type(name_.title().replace("_", ""), (_Activation,), body)
    return register(cls)


# an activation's number: finite and of a size every float dtype holds (a spec can never overflow the kernel)
_Real = Annotated[float, Field(allow_inf_nan=False, ge=-1e6, le=1e6)]
_Width = Annotated[float, Field(allow_inf_nan=False, ge=0, le=1e6)]
_LATER = {"hash": "omit_default"}  # added to a component specs already used: left out of the hash at its default


def _hp(name_: str, **fields) -> type[HP]:
    """A hyper-parameter schema: ``fields`` maps a name to ``(type, Field(...))``."""
    return create_model(f"{name_.title().replace('_', '')}HP", __base__=HP, **fields)


class _Bounds(HP):
    min_val: _Real = Field(-1.0, description="the lower bound")
    max_val: _Real = Field(1.0, description="the upper bound")

    @model_validator(mode="after")
    def _ordered(self):
        if self.min_val > self.max_val:
            raise ValueError(f"min_val ({self.min_val}) must be at most max_val ({self.max_val})")
        return self


_F = "torch.nn.functional."  # the import path of most activations
_act("relu", "torch.relu", "ReLU max(0, x).")
_act("tanh", "torch.tanh", "Hyperbolic tangent.")
_act("sigmoid", "torch.sigmoid", "Logistic sigmoid 1/(1+e^{−x}).", synonyms={"logistic": "sigmoid"})
_act("gelu", _F + "gelu", "GELU x·Φ(x) (approximate = \"none\": the exact erf form, torch's default; \"tanh\": "
     "0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).",
     _hp("gelu", approximate=(Literal["none", "tanh"], Field("none", json_schema_extra=_LATER, description="the erf form or the tanh one"))),
     'gelu(approximate = "tanh")',
     synonyms={**dict.fromkeys(("gelu_tanh", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "approximate_gelu",
                                "approx_gelu"), 'gelu(approximate = "tanh")'),
               "gaussian_error_linear_unit": "gelu"})
# swish (TensorFlow, Keras, JAX, Hugging Face) is exactly x·σ(x): accepted as a name of silu
_act("silu", _F + "silu", "SiLU x·σ(x) (also called swish).", aliases=("swish",),
     synonyms={"sigmoid_linear_unit": "silu"})
_act("elu", _F + "elu", "ELU x for x > 0, alpha·(e^x − 1) otherwise.",
     _hp("elu", alpha=(_Real, Field(1.0, json_schema_extra=_LATER, description="the negative saturation value −alpha"))),
     "elu(alpha = 0.5)")
_act("leaky_relu", _F + "leaky_relu", "Leaky ReLU x for x ≥ 0, negative_slope·x otherwise (default slope 0.01).",
     _hp("leaky_relu", negative_slope=(_Real, Field(0.01, json_schema_extra=_LATER, description="the slope for x < 0"))),
     "leaky_relu(negative_slope = 0.2)", synonyms={"lrelu": "leaky_relu"})
_act("softplus", _F + "softplus", "Softplus log(1 + e^{beta·x})/beta, x itself where beta·x > threshold.",
     _hp("softplus", beta=(_Real, Field(1.0, gt=0, json_schema_extra=_LATER, description="the sharpness")),
         threshold=(_Real, Field(20.0, json_schema_extra=_LATER, description="beta·x above which the result is x (numerical stability)"))),
     "softplus(beta = 2.0)")
_act("relu6", _F + "relu6", "ReLU6 min(max(0, x), 6).")
_act("hardtanh", _F + "hardtanh", "Hard tanh min(max(x, min_val), max_val).",
     _Bounds, "hardtanh(min_val = -2.0, max_val = 2.0)")
_act("hardsigmoid", _F + "hardsigmoid", "Hard sigmoid min(max(0, x/6 + 1/2), 1).",
     synonyms={"hsigmoid": "hardsigmoid", "hard_sigmoid": "hardsigmoid"})
_act("hardswish", _F + "hardswish", "Hard swish x·min(max(0, x + 3), 6)/6.",
     synonyms={"hswish": "hardswish", "hard_swish": "hardswish"})
_act("selu", _F + "selu", "SELU scale·(max(0, x) + min(0, alpha·(e^x − 1))), alpha ≈ 1.6733, scale ≈ 1.0507.")
_act("celu", _F + "celu", "CELU max(0, x) + min(0, alpha·(e^{x/alpha} − 1)).",
     _hp("celu", alpha=(_Real, Field(1.0, gt=0, description="the negative saturation value −alpha"))),
     "celu(alpha = 0.5)")
_act("mish", _F + "mish", "Mish x·tanh(softplus(x)).")
_act("scale", "rpn2c.functional.elementwise.scale", "Scale by ·x by a constant (√d·x of a scaled embedding).",
     _hp("scale", by=(_Real, Field(..., description="the constant factor"))), "scale(by = 2.0)")
_act("softsign", _F + "softsign", "Softsign x/(1 + |x|).")
_act("tanhshrink", _F + "tanhshrink", "Tanh shrink x − tanh(x).")
_act("log_sigmoid", _F + "logsigmoid", "Log-sigmoid log(1/(1 + e^{−x})).")
_SHRINK = _hp("shrink", lambd=(_Width, Field(0.5, description="the half-width of the zeroed band")))
_act("hardshrink", _F + "hardshrink", "Hard shrink x where |x| > lambd, 0 otherwise.", _SHRINK,
     "hardshrink(lambd = 0.3)")
_act("softshrink", _F + "softshrink", "Soft shrink x − lambd for x > lambd, x + lambd for x < −lambd, 0 otherwise.",
     _SHRINK, "softshrink(lambd = 0.3)")
_act("threshold", _F + "threshold", "Threshold x where x > threshold, value otherwise.",
     _hp("threshold", threshold=(_Real, Field(..., description="values at or below it are replaced")),
         value=(_Real, Field(..., description="the replacement"))), "threshold(threshold = 0.1, value = -1.0)")


@register
class Rrelu(Processing):
    """Randomized leaky ReLU x for x ≥ 0, a·x otherwise: a ~ U(lower, upper) per element in training,
    a = (lower + upper)/2 in eval."""

    name, family = "rrelu", "processing"
    example_call = "rrelu(lower = 0.1, upper = 0.3)"

    class HP(HP):
        lower: _Real = Field(1 / 8, description="the smallest slope for x < 0")
        upper: _Real = Field(1 / 3, description="the largest slope for x < 0")

        @model_validator(mode="after")
        def _ordered(self):
            if self.lower > self.upper:
                raise ValueError(f"lower ({self.lower}) must be at most upper ({self.upper})")
            return self

    def build(self, t):
        from rpn2c.components.impl.processing import RReLUModule

        return RReLUModule(self.hp.lower, self.hp.upper)


@register
class Prelu(Processing):
    """PReLU x for x ≥ 0, a·x otherwise, with a learned slope a (one, or one per feature / channel)."""

    name, family = "prelu", "processing"
    example_call = "prelu(num_parameters = 3)"

    class HP(HP):
        num_parameters: int = Field(1, ge=1, description="1 (one shared slope) or the feature / channel count")
        init: _Real = Field(0.25, description="the initial slope")

    def check(self, t):
        if self.hp.num_parameters != 1 and self.hp.num_parameters != t.features:
            return f"prelu(num_parameters = {self.hp.num_parameters}) needs 1 or the feature count, got {t}"
        return None

    def count(self, t):
        return self.hp.num_parameters

    def build(self, t):
        from rpn2c.components.impl.processing import _PReLU

        return _PReLU(self.hp.num_parameters, self.hp.init, items=t.kind != "grid")


def _feature_dim(t: TensorType) -> int:
    return 1 if t.kind == "grid" else -1


@register
class Softmax(Processing):
    """Softmax over the feature axis (channels for grids)."""

    name, family = "softmax", "processing"

    def build(self, t):
        from rpn2c.components.impl.processing import _Softmax

        return _Softmax(_feature_dim(t))


@register
class LogSoftmax(Processing):
    """Log-softmax over the feature axis (channels for grids)."""

    name, family = "log_softmax", "processing"

    def build(self, t):
        from rpn2c.components.impl.processing import _Softmax

        return _Softmax(_feature_dim(t), log=True)


@register
class Dropout(Processing):
    """Dropout with probability p (identity in eval mode)."""

    name, family = "dropout", "processing"

    class HP(HP):
        p: float = Field(0.5, ge=0.0, lt=1.0)

    def build(self, t):
        from torch import nn

        return nn.Dropout(self.hp.p)


class _NormHP(HP):
    eps: float = Field(1e-5, gt=0)
    affine: bool = True


@register
class LayerNorm(Processing):
    """Layer normalisation over the features of each item (over C·ΠS for a grid); ``bias = false``: the affine
    form's weight alone (``nn.LayerNorm(bias=False)``, x-transformers' LayerNorm); ``offset``: scaled by γ + offset."""

    name, family = "layer_norm", "processing"

    class HP(_NormHP):
        bias: bool = Field(True, json_schema_extra={"hash": "omit_default"},
                           description="the affine form's bias (false: a weight alone)")
        offset: float = Field(0.0, allow_inf_nan=False, json_schema_extra={"hash": "omit_default"},
                              description="γ + offset scales the items (x-transformers' unit_offset: 1, with γ "
                                          "initialised to 0)")

    def shape(self, t):
        return tuple(t.shape[1:]) if t.kind == "grid" else (t.features,)

    def check(self, t):
        if t.kind not in ("vector", "items", "grid"):
            return f"{self.name} needs features, got {t}"
        if not all(is_known(d) for d in self.shape(t)):
            return f"{self.name} needs known feature sizes, got {t}"
        return None

    def count(self, t):
        return (1 + self.hp.bias) * math.prod(self.shape(t)) if self.hp.affine else 0

    def build(self, t):
        from torch import nn

        if self.hp.offset and self.hp.affine:
            from rpn2c.components.impl.processing import LayerNormModule

            return LayerNormModule(self.shape(t), self.hp.eps, self.hp.bias, self.hp.offset)
        return nn.LayerNorm(self.shape(t), eps=self.hp.eps, elementwise_affine=self.hp.affine, bias=self.hp.bias)


@register
class RMSNorm(Processing):
    """RMS normalisation over the features of each item: y = x / √(mean(x²) + ε) · γ (no mean subtracted, no
    bias; Llama's and T5's norm), ``offset`` adds a constant to γ (Gemma: y = … · (1 + γ))."""

    name, family = "rms_norm", "processing"
    synonyms = dict.fromkeys(("rmsnorm", "rms_layer_norm", "t5_layer_norm", "t5layernorm", "llama_rms_norm",
                              "root_mean_square_norm"), "rms_norm")

    class HP(HP):
        eps: float = Field(1e-6, gt=0)
        affine: bool = True
        offset: float = Field(0.0, description="γ + offset scales the items (Gemma: 1, with γ initialised to 0)")
        upcast: bool = Field(False, description="normalise in float32 for every input dtype, then cast back before "
                                                "γ (transformers' LlamaRMSNorm: a float64 model too)")
        upcast_variance: bool = Field(False, json_schema_extra={"hash": "omit_default"},
                                      description="only mean(x²) in float32, the input scaled by its rsqrt at its own "
                                                  "precision (transformers' T5LayerNorm: a float64 model too)")

        @model_validator(mode="after")
        def _one_upcast(self):
            if self.upcast and self.upcast_variance:
                raise ValueError("upcast (the whole norm in float32) and upcast_variance (only mean(x²)) exclude "
                                 "each other")
            return self

    shape = LayerNorm.shape
    check = LayerNorm.check

    def count(self, t):
        return math.prod(self.shape(t)) if self.hp.affine else 0

    def build(self, t):
        from rpn2c.components.impl.processing import RMSNormModule

        return RMSNormModule(self.shape(t), self.hp.eps, self.hp.affine, self.hp.offset, self.hp.upcast,
                             self.hp.upcast_variance)


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
        from rpn2c.components.impl.processing import _BatchNorm
        from torch import nn

        dims = len(t.spatial) if t.kind == "grid" else 1
        cls = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}[max(dims, 1)]
        return _BatchNorm(cls(t.features, eps=self.hp.eps, momentum=self.hp.momentum, affine=self.hp.affine),
                          items=t.kind == "items")


