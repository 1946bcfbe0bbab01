"""A predicted matrix applied to every item's features (PointNet's T-nets; Qi et al. 2017, seed 001 §7.3)."""

from __future__ import annotations

from pydantic import Field

from rpn2c.components.base import Op, ShapeRuleError, example_model
from rpn2c.components.registry import HP, register
from rpn2c.ir.types import items


class _TransformHP(HP):
    orthogonality: float = Field(0.0, ge=0, description="w of the regulariser w·‖I − T Tᵀ‖²_F (batch mean) that "
                                                        "training adds to the loss (PointNet: 0.001); 0: none")


@register
class Transform(Op):
    """Per-sample feature transform: Y = X T, items[B, M, k] x matrix[B, k, c] -> items[B, M, c] (y_m = Tᵀ x_m for every item m).

    PointNet's input and feature transforms: a T-net (a small PointNet on the same set) predicts T per sample,
    ``as_matrix(v, rows = k, identity = true)`` makes it k x k with I added, and ``transform(x, t)`` aligns every
    point with it. ``orthogonality = w`` makes training add L_reg = w · mean_b ‖I − T_b T_bᵀ‖²_F to the loss (the
    paper's regulariser on the 64 x 64 feature transform); evaluation and the model's output never see it.
    """

    name, family = "transform", "op"
    synonyms = {"t_net": "transform(x, as_matrix(v, rows = k, identity = true))",
                "tnet": "transform(x, as_matrix(v, rows = k, identity = true))"}
    HP = _TransformHP
    arity = (2, 2)
    example = example_model("input x: set[B, M, 3]", "v = head(pool_items(x, how = \"max\")) {", "  out = 9", "}",
                            "t = as_matrix(v, rows = 3, identity = true)", "y = transform(x, t)", "return y")

    def infer(self, inputs):
        x, t = inputs
        if x.kind != "items" or not x.batched:
            raise ShapeRuleError(f"transform applies a matrix to the features of every item of a batched set or "
                                 f"sequence [B, M, k], got {x}", arg=0)
        if t.kind != "matrix":
            raise ShapeRuleError(f"transform's second input is a matrix[B, k, c] (as_matrix(v, rows = k)), got {t}",
                                 arg=1)
        if str(t.batch) not in (str(x.batch), "1"):
            raise ShapeRuleError(f"transform applies each sample's own matrix: {x} and {t} have different batch "
                                 f"sizes ({x.batch} and {t.batch})", arg=1)
        k, c = t.shape[1:]
        if str(k) != str(x.features):
            raise ShapeRuleError(f"the transform {t} maps {k} features, but {x} has {x.features}", arg=1,
                                 code="E0361")
        if self.hp.orthogonality and str(k) != str(c):
            raise ShapeRuleError(f"orthogonality = {self.hp.orthogonality} regularises a square transform "
                                 f"(I − T Tᵀ), but {t} is {k} x {c}", arg=1, code="E0362")
        return items(x.batch, x.items, c, batched=x.batched, role=x.role)

    def build(self, inputs):
        from rpn2c.components.impl.feature_transform import TransformModule

        return TransformModule(self.hp.orthogonality)
