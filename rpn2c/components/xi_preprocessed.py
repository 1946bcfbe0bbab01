"""ξ's input pre-processing (paper §5.1.1, eq 29): the interdependence function computes its matrix from a
processed copy of its input batch, and the matrix multiplies the raw data."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from rpn2c.components.base import Interdependence, ShapeRuleError, XiContext
from rpn2c.components.registry import HP, REGISTRY, register

PRE = ("batch_norm", "sigmoid", "relu", "tanh")


class _PreprocessedHP(HP):
    model_config = ConfigDict(extra="allow")
    xi: str = Field(..., description="the data interdependence entry whose input is processed")
    pre: list[Literal[PRE]] = Field(..., min_length=1, description="applied in order to ξ's input batch")
    eps: float = Field(1e-5, gt=0, description="batch_norm: (x − μ)/√(σ² + ε)")
    affine: bool = Field(False, json_schema_extra={"hash": "omit_default"},
                         description="batch_norm: a learned scale and shift per column, γ x̂ + β (torch's "
                                     "BatchNorm1d with its affine; γ = 1, β = 0 at first)")

    @model_validator(mode="after")
    def _inner_ok(self):
        if self.affine and "batch_norm" not in self.pre:
            raise ValueError("'affine' is batch_norm's learned scale and shift: add \"batch_norm\" to pre")
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
    standardises each feature over the items (attribute) or each item over its features (instance), with the
    batch's own statistics; ``affine = true`` adds torch BatchNorm1d's learned γ x̂ + β per column (the paper's
    "input batch normalization"). The other keys configure the inner ξ, including its output post-normalisation
    (``norm``). Only data ξ read their input.
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

    def columns(self, ctx: XiContext):
        """The width of γ and β: the columns of ξ's input batch, features (attribute) or items (instance)."""
        if ctx.axis == "attribute":
            width, other = ctx.context_features, ctx.query_features
        else:
            width, other = ctx.size, ctx.query_items
        if not isinstance(width, int) or str(other) != str(width):
            raise ShapeRuleError(f"'affine' learns a scale per column of ξ's input batch, so its {ctx.axis} "
                                 f"columns must be one known count for the query and the context, got {other} and "
                                 f"{width}: use affine = false")
        return width

    def count(self, ctx):
        return self.inner.count(ctx) + (2 * self.columns(ctx) if self.hp.affine else 0)

    def scratch(self, ctx):
        return self.inner.scratch(ctx)

    def build(self, ctx):
        from rpn2c.components.impl.xi_preprocessed import _PreprocessedXi

        inner = self.inner.build(ctx)
        inner.axis = ctx.axis
        return _PreprocessedXi(inner, self.hp, ctx.axis, self.columns(ctx) if self.hp.affine else None)
