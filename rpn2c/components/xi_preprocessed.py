"""ξ's input pre-processing (paper §5.1.1, eq 29): the interdependence function computes its matrix from a
processed copy of its input batch, and the matrix multiplies the raw data."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from rpn2c.components.base import Interdependence, XiContext
from rpn2c.components.registry import HP, REGISTRY, register

PRE = ("batch_norm", "sigmoid", "relu", "tanh")


class _PreprocessedHP(HP):
    model_config = ConfigDict(extra="allow")
    xi: str = Field(..., description="the data interdependence entry whose input is processed")
    pre: list[Literal[PRE]] = Field(..., min_length=1, description="applied in order to ξ's input batch")
    eps: float = Field(1e-5, gt=0, description="batch_norm: (x − μ)/√(σ² + ε)")

    @model_validator(mode="after")
    def _inner_ok(self):
        _inner(self)
        return self


def _inner(hp) -> Interdependence:
    """The inner ξ, built from the plain keys beside ``xi``, ``pre`` and ``eps``."""
    entry = REGISTRY["interdependence"].get(hp.xi)
    if entry is None:
        raise ValueError(f"'{hp.xi}' is not a registered interdependence entry")
    if entry.cls.kind != "data" or issubclass(entry.cls, Preprocessed):
        raise ValueError(f"'{hp.xi}' does not compute its matrix from the data (kind {entry.cls.kind}): "
                         f"pre-processing its input would change nothing; use a data ξ (a kernel)")
    try:
        return entry.cls(entry.schema(**dict(hp.model_extra or {})))
    except ValidationError as exc:
        msgs = "; ".join(f"{'.'.join(map(str, e['loc'])) or entry.name}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"'{entry.name}': {msgs}") from None


@register
class Preprocessed(Interdependence):
    """Pre-processed ξ (§5.1.1): A = ξ(pre(X)) applied to the raw data, pre = batch_norm (columns of ξ's input batch standardised: (x − μ)/√(σ² + ε)), sigmoid, relu, tanh, in order.

    ξ's input batch is X ∈ R^{b x m} on the attribute axis and Xᵀ on the instance axis (eq 29): batch_norm
    standardises each feature over the items (attribute) or each item over its features (instance), without a
    learned scale (the paper's "input data batch normalization"). The other keys configure the inner ξ, including
    its output post-normalisation (``norm``). Only data ξ read their input.
    """

    name, family = "preprocessed", "interdependence"
    aliases = ("preprocessed_xi",)
    kind = "data"
    HP = _PreprocessedHP
    example_call = 'preprocessed(xi = "pearson_correlation", pre = ["batch_norm", "sigmoid"])'

    def __init__(self, hp):
        super().__init__(hp)
        self.inner = _inner(hp)
        self.axes = self.inner.axes

    def out_size(self, ctx: XiContext):
        return self.inner.out_size(ctx)

    def count(self, ctx):
        return self.inner.count(ctx)

    def scratch(self, ctx):
        return self.inner.scratch(ctx)

    def build(self, ctx):
        from rpn2c.components.impl.xi_preprocessed import _PreprocessedXi

        inner = self.inner.build(ctx)
        inner.axis = ctx.axis
        return _PreprocessedXi(inner, self.hp, ctx.axis)
