"""Relations as values: the matrix of an instance ξ as a ``matrix[B, N, M]`` value, and what reads one.

``r = relation(x, c, xi = attention(rank = 4))`` is R = ξ(X, C) per sample, row i the query item x_i, column j the
context item c_j (without ``c``: of x with itself). ``apply(r, v)`` is R V (``transpose = true``: Rᵀ V);
``xi_instance = given(r)`` makes R a later head's instance ξ; ``rows(r)`` reads R as the sequence of its N rows
(a recurrence over a relation map) and ``as_matrix(y)`` reads a sequence ``[B, N, M]`` back as a relation.
With ``tie = r0, swap = true`` a relation scores with ``r0``'s factors swapped (W_q ← W_k, W_k ← W_q): the same
pairwise score Ψ, transposed (DRRT's β from Ψᵀ, seed 002 eq 4). docs/semantics.md, "Relations as values".
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field

from rpn2c.components.base import Interdependence, Op, ShapeRuleError, XiContext, example_model
from rpn2c.components.registry import HP, ValueRef, register
from rpn2c.ir.types import TensorType, items, matrix

#: ξ hyper-parameters that hold no parameter shapes: two tied relations may differ in them (masks, scale)
UNSHAPED_KEYS = frozenset({"softmax", "scale", "causal", "window", "window_scores", "regions", "region",
                           "key_padding", "attn_mask", "keys"})


def _same(a, b) -> bool:
    """Two dims agree: equal numbers, or the same symbol."""
    return str(a) == str(b)


class _RelationHP(HP):
    xi: Any = Field(None, description="the instance ξ whose matrix is the relation, with its hyper-parameters, "
                                      "e.g. attention(rank = 4)")
    swap: bool = Field(False, description="with `tie = r0`: score with r0's query and key factors swapped "
                                          "(W_q ← W_k, W_k ← W_q), the relation of Ψᵀ")


@register
class Relation(Op):
    """Relation value: R = ξ(X, C) ∈ R^{N x M} per sample (row i = query item, column j = context item), the matrix of an instance ξ as a value matrix[B, N, M].

    ``relation(x, xi = ...)`` relates x's items with themselves. The reference lowering builds ξ's literal matrix
    (its masks as the paper's structural matrices); the default lowering builds only R (masks from item indices).
    """

    name, family = "relation", "op"
    HP = _RelationHP
    arity = (1, 2)
    example = example_model("input x: sequence[B, 5, 4]", "input c: sequence[B, 6, 3]",
                            "r = relation(x, c, xi = attention(rank = 2))", "y = apply(r, c)", "return y")

    def context(self, types: list[TensorType], aux: dict[str, TensorType]) -> XiContext:
        q = types[0]
        c = types[1] if len(types) > 1 else q
        for i, t in enumerate((q, c)[:len(types)]):
            if t.kind != "items":
                raise ShapeRuleError(f"a relation relates the items of two sequences, got {t}", arg=i)
            if not isinstance(t.features, int):
                raise ShapeRuleError(f"the features of {t} must be a known integer: they size ξ's weights", arg=i)
        return XiContext("instance", c.items, q.features, c.features, q.items, aux)

    def infer_with(self, types: list[TensorType], aux: dict[str, TensorType]) -> tuple[TensorType, int]:
        """The relation's type ``matrix[B, N, M]`` and its parameter count."""
        ctx = self.context(types, aux)
        if len(types) > 1:
            _one_batch(types[0], types[1], "relates the items of each sample of one batch")
        xi = self.hp.xi.component
        if xi.kind == "grid" or "instance" not in xi.axes:
            raise ShapeRuleError(f"'{xi.name}' is not an instance ξ: a relation needs one that relates items")
        if xi.affine():
            raise ShapeRuleError(f"'{xi.name}' with bias = true is affine (A z + b 1ᵀ), not a matrix: a relation "
                                 f"is a matrix")
        n = xi.out_size(ctx)
        if xi.kind == "data" and len(types) > 1:
            n = types[0].items
        return matrix(types[0].batch, n, ctx.size), xi.count(ctx)

    def build(self, inputs: list[TensorType]):
        from rpn2c.components.impl.relation import RelationModule

        keys = [k for k, _ in self.hp.xi.component.value_refs()]
        data = inputs[:len(inputs) - len(keys)]
        ctx = self.context(data, dict(zip(keys, inputs[len(data):])))
        module = self.hp.xi.component.build(ctx)
        module.axis = "instance"
        return RelationModule(module, len(data) > 1, keys, self.hp.swap)

    def tie(self, module, source) -> bool:
        module.tie_to(source)  # ξ's tensors, the query and key factors swapped with ``swap``
        return True


def _one_batch(a: TensorType, b: TensorType, what: str) -> None:
    """Both operands share the batch (or one has a single sample, broadcast)."""
    if not _same(a.batch, b.batch) and "1" not in (str(a.batch), str(b.batch)):
        raise ShapeRuleError(f"a relation {what}: {a} and {b} have different batch sizes ({a.batch} and "
                             f"{b.batch}); give both inputs the same batch symbol", arg=1)


def _relation_type(t: TensorType, arg: int) -> None:
    if t.kind != "matrix":
        raise ShapeRuleError(f"expected a relation matrix[B, N, M] (made by relation(...)), got {t}", arg=arg)


@register
class ApplyRelation(Op):
    """Relation product: Y = R V (transpose = true: Rᵀ V), matrix[B, N, M] x items[B, M, F] -> items[B, N, F] (seed 002 eq 10–11: T = α' (B' W))."""

    name, family = "apply", "op"
    arity = (2, 2)
    example = example_model("input x: sequence[B, 5, 4]", "r = relation(x, xi = attention(rank = 2))",
                            "y = apply(r, x)", "return y")

    class HP(HP):
        transpose: bool = Field(False, description="multiply by Rᵀ (an M x N map) instead of R")

    def infer(self, inputs):
        r, v = inputs
        _relation_type(r, 0)
        if v.kind != "items":
            raise ShapeRuleError(f"a relation multiplies the items of a sequence, got {v}", arg=1)
        _one_batch(r, v, "multiplies the items of each sample by its own matrix")
        rows, cols = r.shape[1:] if not self.hp.transpose else r.shape[:0:-1]
        if not _same(cols, v.items):
            flip = "" if self.hp.transpose else " (for Rᵀ V, `transpose = true`)"
            raise ShapeRuleError(f"the relation {r} reads {cols} items{' (transposed)' if self.hp.transpose else ''}"
                                 f", but {v} has {v.items}{flip}", arg=1)
        return items(v.batch, rows, v.features, batched=v.batched, role=v.role)

    def build(self, inputs):
        from rpn2c.components.impl.relation import ApplyModule

        return ApplyModule(self.hp.transpose)


@register
class Rows(Op):
    """Rows of a relation: matrix[B, N, M] -> sequence[B, N, M], row i the item i (a recurrence or head over a map's rows)."""

    name, family = "rows", "op"
    example = example_model("input x: sequence[B, 5, 4]", "r = relation(x, xi = attention(rank = 2))",
                            "y = rows(r)", "return y")

    def infer(self, inputs):
        (r,) = inputs
        _relation_type(r, 0)
        return items(*r.shape, role="sequence")

    def build(self, inputs):
        from rpn2c.components.impl.identity import Identity

        return Identity()


class _AsMatrixHP(HP):
    rows: Optional[int] = Field(None, ge=1, description="read a vector[B, rows·c] as matrix[B, rows, c], row-major "
                                                         "(a predicted transform, PointNet's T-net)")
    identity: bool = Field(False, description="add I to the matrix (square only): T = reshape(v) + I, the T-net's "
                                              "identity at zero weights")


@register
class AsMatrix(Op):
    """A value read as a matrix: items[B, N, M] -> matrix[B, N, M] (row i = item i); with ``rows = k`` a vector[B, k·c] -> matrix[B, k, c] row-major, ``identity = true`` adding I.

    ``as_matrix(y)`` reads a map back after a recurrence over its rows; ``as_matrix(v, rows = k, identity = true)``
    is PointNet's T-net output, T = reshape_{k x k}(v) + I, which ``transform(x, t)`` applies to every point.
    """

    name, family = "as_matrix", "op"
    HP = _AsMatrixHP
    example = example_model("input x: sequence[B, 5, 4]", "r = relation(x, xi = attention(rank = 2))",
                            "h = rows(r)", "m = as_matrix(h)", "y = apply(m, x)", "return y")

    def infer(self, inputs):
        (t,) = inputs
        k = self.hp.rows
        if k is not None:
            if t.kind != "vector":
                raise ShapeRuleError(f"as_matrix(rows = {k}) reads a vector[B, rows·c], got {t}", arg=0)
            f = t.features
            if not isinstance(f, int) or f % k:
                raise ShapeRuleError(f"as_matrix(rows = {k}) needs a vector whose {f} features are {k} rows of "
                                     f"equal length", arg=0, code="E0360")
            shape = (t.batch, k, f // k)
        else:
            if t.kind != "items" or not t.batched:
                raise ShapeRuleError(f"as_matrix reads a batched sequence [B, N, M] (or a vector with rows = k), "
                                     f"got {t}", arg=0)
            shape = tuple(t.shape)
        if self.hp.identity and not _same(shape[1], shape[2]):
            raise ShapeRuleError(f"as_matrix(identity = true) adds I to a square matrix, but {t} is read as "
                                 f"{shape[1]} x {shape[2]}", arg=0, code="E0360")
        return matrix(*shape)

    def build(self, inputs):
        from rpn2c.components.impl.relation import AsMatrixModule

        return AsMatrixModule(self.hp.rows, self.hp.identity)


class _GivenHP(HP):
    source: ValueRef = Field(..., description="the relation value matrix[B, N, M]")
    transpose: bool = Field(False, description="use Rᵀ (an M x N map)")


@register
class Given(Interdependence):
    """Given ξ: A = R (or Rᵀ), a relation value matrix[B, N, M] computed earlier (relation(...)), as this head's instance ξ; l = 0."""

    name, family = "given", "interdependence"
    HP = _GivenHP
    axes = ("instance",)
    kind = "data"
    positional = ("source",)
    example = example_model("input x: sequence[B, 5, 4]", "r = relation(x, xi = attention(rank = 2))",
                            "y = head(x) {", "  xi_instance = given(r)", "  out = 3", "}", "return y")

    def out_size(self, ctx: XiContext):
        t = ctx.aux.get("source")
        if t is None or t.kind != "matrix":
            raise ShapeRuleError(f"given(...) takes a relation matrix[B, N, M] (made by relation(...)), got {t}")
        rows, cols = t.shape[1:] if not self.hp.transpose else t.shape[:0:-1]
        if not _same(cols, ctx.size):
            raise ShapeRuleError(f"the relation {t}{' transposed' if self.hp.transpose else ''} reads {cols} items, "
                                 f"but the head's data has {ctx.size}")
        if ctx.query_items is not None and not _same(rows, ctx.query_items):
            raise ShapeRuleError(f"the relation {t}{' transposed' if self.hp.transpose else ''} maps to {rows} "
                                 f"items, but the head's input has {ctx.query_items}")
        return rows

    def build(self, ctx: XiContext):
        from rpn2c.components.impl.relation import GivenXi

        return GivenXi(self.hp.transpose)
