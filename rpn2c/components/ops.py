"""Dataflow operations: reshaping between layouts, elementwise sums, differences and products, concatenation,
item pooling."""

from __future__ import annotations

from typing import ClassVar, Literal, Optional

from pydantic import Field

from rpn2c.components.base import Op, ShapeRuleError, binary_example, example_model
from rpn2c.components.registry import HP, Lazy, register
from rpn2c.ir.types import TensorType, broadcast_dim, grid, is_known, items, numel, vector


@register
class FlattenOp(Op):
    """flatten(x): a grid [B, C, *S] or items [B, N, F] becomes a vector [B, C·ΠS] (channel-major)."""

    name, family = "flatten", "op"

    def infer(self, ins):
        t = ins[0]
        if t.kind == "vector":
            return t
        if t.kind not in ("grid", "items"):
            raise ShapeRuleError(f"flatten needs a grid or items value, got {t}")
        return vector(t.batch, numel(t.shape[1:]))

    def build(self, ins):
        from rpn2c.components.impl.ops import _Lambda

        return _Lambda(lambda x: x.flatten(1))


def _wide(ins):
    """The first grid/items operand when a per-sample vector is to be broadcast over it, else None."""
    wide = next((t for t in ins if t.kind in ("grid", "items")), None)
    return wide if wide is not None and any(t.kind == "vector" for t in ins) else None


_FEATURE_AXIS = {"vector": -1, "items": -1, "grid": 1}


def _broadcast_pair(a, b, what, arg):
    """The type two operands of one layout broadcast to: per axis equal, or size 1 on one side (a sample, item or
    spatial axis; the channel/feature axis never broadcasts); the result keeps the layout and role."""
    if a.kind == b.kind and tuple(a.shape) == tuple(b.shape):
        return a
    one_graph = a.batched != b.batched and (a if a.batched else b).batch == 1  # a parameter on one graph's nodes
    if (a.kind != b.kind or a.kind not in _FEATURE_AXIS or len(a.shape) != len(b.shape)
            or (a.batched != b.batched and not one_graph) or a.time_major != b.time_major):
        raise ShapeRuleError(f"{what} needs equal shapes (or shapes that broadcast), got {a} and {b}", arg=arg)
    feature = _FEATURE_AXIS[a.kind] % len(a.shape)
    shape = []
    for axis, (x, y) in enumerate(zip(a.shape, b.shape)):
        d = x if x == y else (None if axis == feature else broadcast_dim(x, y))
        if d is None:
            which = "feature" if axis == feature else f"axis {axis}"
            raise ShapeRuleError(f"{what} needs shapes that broadcast (each axis equal, or of size 1 on one side; the "
                                 f"{'channel' if a.kind == 'grid' else 'feature'} axis equal), got {a} and {b}: "
                                 f"{which} is {x} against {y}", arg=arg)
        shape.append(d)
    shape = tuple(shape)
    return b if tuple(b.shape) == shape and tuple(a.shape) != shape else a.with_shape(shape)


def _elementwise_type(ins, what):
    """The type of an elementwise op (docs/semantics.md, "Elementwise operations and broadcasting").

    Operands of one layout broadcast as torch does, axis by axis: equal axes, or a size-1 sample, item or spatial
    axis against any size (a ``[B, C, 1, 1]`` gate against the ``[B, C, H, W]`` grid it gates, a ``[1, T, d]``
    value against ``[B, T, d]``); the channel/feature axis is equal. With a grid ``[B, C, *S]`` or items
    ``[B, N, F]`` operand X, an operand may also be a per-sample vector ``[B, C]`` (``[B, F]``), broadcast over
    the spatial (item) axes: ``y[b, c, s] = x[b, c, s] ⊙ v[b, c]``. The result has the broadcast type.
    """
    wide = _wide(ins)
    main = [(i, t) for i, t in enumerate(ins) if wide is None or t.kind != "vector"]
    out = main[0][1]
    for i, t in main[1:]:  # located at the call, as both operands are named; at the argument beside a vector
        out = _broadcast_pair(out, t, what, None if wide is None else i)
    if wide is None:
        return out
    axis = "channel" if out.kind == "grid" else "feature"
    for i, t in enumerate(ins):
        if t.kind == "vector" and (t.batch != out.batch or t.features != out.features):
            raise ShapeRuleError(f"{what} broadcasts a per-sample vector over {out} per {axis}, so it needs "
                                 f"vector[{out.batch}, {out.features}]; argument {i + 1} is {t}", arg=i)
    return out


def _lifts(ins):
    """Per operand, the index that lines a per-sample vector up with the grid/items operand (None: as it is):
    ``v[:, :, None, ...]`` (one None per spatial axis) for a grid, ``v[:, None, :]`` for items."""
    wide = _wide(ins)
    if wide is None:
        return (None,) * len(ins)
    lift = ((slice(None), slice(None), *([None] * len(wide.spatial))) if wide.kind == "grid"
            else (slice(None), None, slice(None)))
    return tuple(lift if t.kind == "vector" else None for t in ins)


_LATER = {"hash": "omit_default"}  # added after specs were hashed: left out of the hash at their defaults


class _ScalarHP(HP):
    constant: Optional[float] = Field(None, json_schema_extra=_LATER,
                                      description="a number among the operands (`add(x, 1e-6)`, `sub(1.0, m)`, "
                                                  "`mul(x, 0.5)`): a constant operand")
    constant_at: int = Field(0, ge=0, json_schema_extra=_LATER, description="the constant's place among the operands")


class _ElementwiseOp(Op):
    """An elementwise op folding ``fn`` over its operands, typed by :func:`_elementwise_type` (broadcasting).
    A number written among the operands is a constant operand (hyper-parameters ``constant`` at ``constant_at``,
    set by the checker): ``mul(x, 0.5)`` is ``x ⊙ 0.5``, ``sub(1.0, m)`` is ``1 − m``."""

    fn = None  # the torch function, ``Lazy(path)`` in each op
    takes_constants: ClassVar[bool] = True
    HP = _ScalarHP

    def infer(self, ins):
        if self.hp.constant is not None and self.hp.constant_at > len(ins):
            raise ShapeRuleError(f"{self.name}: the constant's place {self.hp.constant_at} is past the "
                                 f"{len(ins)} tensor operand(s)")
        return ins[0] if len(ins) == 1 else _elementwise_type(ins, self.name)

    def build(self, ins):
        from rpn2c.components.impl.ops import _Elementwise

        return _Elementwise(self.fn, _lifts(ins), self.hp.constant, self.hp.constant_at)


@register
class Add(_ElementwiseOp):
    """add(a, b, ...): elementwise sum (residuals, shifts); size-1 sample, item and spatial axes broadcast.

    ``y[b, c, s] = x[b, c, s] + v[b, c]`` for a vector over a grid, ``y[b, n, f] = x[b, n, f] + v[b, f]`` over
    items; ``y[b, t, f] = x[b, t, f] + p[0, t, f]`` for a ``[1, T, d]`` value (learned positions) added to
    ``[B, T, d]``. The channel/feature axis never broadcasts. A residual shortcut ``x + f(x)`` is the remainder π of
    RPN 2.
    """

    name, family = "add", "op"
    synonyms = {"sum": "add", "residual": "add"}
    arity = (2, 64)
    fn = Lazy("torch.add")
    example = example_model("input x: sequence[B, 4, 3]", "input v: vector[B, 3]", "y = add(x, v)", "return y")


@register
class Multiply(_ElementwiseOp):
    """mul(a, b, ...): elementwise (Hadamard) product ⊙; size-1 sample, item and spatial axes broadcast.

    A gate is a Hadamard product: squeeze-and-excitation multiplies a grid ``x: [B, C, H, W]`` by its gate
    ``s: [B, C, 1, 1]`` (global average pool, 1×1 convolutions, sigmoid), ``y[b, c, h, w] = x[b, c, h, w] ·
    s[b, c, 0, 0]``, the size-1 spatial axes broadcast; a vector gate ``v: [B, C]`` gives ``y[b, c, s] = x[b, c, s]
    · v[b, c]`` (channel scaling), and over items ``y[b, n, f] = x[b, n, f] · v[b, f]`` (feature scaling, FiLM).
    The channel/feature axis never broadcasts.
    """

    name, family = "mul", "op"
    synonyms = {"multiply": "mul"}
    arity = (2, 64)
    fn = Lazy("torch.mul")
    example = example_model("input x: image[B, 2, 3, 3]", "input g: vector[B, 2]", "y = mul(x, g)", "return y")


@register
class Subtract(_ElementwiseOp):
    """sub(a, b): elementwise difference a − b; size-1 sample, item and spatial axes and vectors broadcast."""

    name, family = "sub", "op"
    synonyms = {"subtract": "sub"}
    arity = (2, 2)
    fn = Lazy("torch.sub")
    example = example_model("input x: signal[B, 2, 5]", "input v: vector[B, 2]", "y = sub(v, x)", "return y")


@register
class ConcatOp(Op):
    """concat(a, b, ...): concatenation along the feature axis (channels for grids)."""

    name, family = "concat", "op"
    arity = (2, 64)
    example = binary_example()

    def infer(self, ins):
        first = ins[0]
        for t in ins[1:]:
            if t.kind != first.kind or len(t.shape) != len(first.shape):
                raise ShapeRuleError(f"concat needs values of one layout, got {first} and {t}")
            fa = 1 if first.kind == "grid" else len(first.shape) - 1
            rest_a = [d for i, d in enumerate(first.shape) if i != fa]
            rest_b = [d for i, d in enumerate(t.shape) if i != fa]
            if rest_a != rest_b:
                raise ShapeRuleError(f"concat needs equal shapes outside the feature axis, got {first} and {t}")
        fa = 1 if first.kind == "grid" else len(first.shape) - 1
        total = 0
        for t in ins:
            total = total + t.shape[fa] if isinstance(total, int) and isinstance(t.shape[fa], int) else "?"
        shape = list(first.shape)
        shape[fa] = total
        return first.with_shape(shape)

    def build(self, ins):
        import torch
        from rpn2c.components.impl.ops import _Lambda

        dim = 1 if ins[0].kind == "grid" else -1
        return _Lambda(lambda *xs: torch.cat(xs, dim=dim))


@register
class ToItems(Op):
    """to_items(x): a grid [B, C, *S] becomes items [B, ΠS, C] (one item per position, row-major).

    On a signal [B, E, T] this is torch's ``x.transpose(1, 2)`` after an ``nn.Conv1d``: the identity on the data, a
    change of which axis is the instance axis (the T positions become the T items, the E channels their features);
    no matrix is applied. :class:`ToSignal` is the other direction.
    """

    name, family = "to_items", "op"
    aliases = ("to_sequence",)
    example = example_model("input x: image[B, 2, 3, 3]", "y = to_items(x)", "return y")

    def infer(self, ins):
        t = ins[0]
        if t.kind != "grid":
            raise ShapeRuleError(f"to_items needs a grid, got {t}")
        return items(t.batch, numel(t.spatial), t.features, role="sequence")

    def build(self, ins):
        from rpn2c.components.impl.ops import _Lambda

        return _Lambda(lambda x: x.flatten(2).transpose(1, 2))


@register
class TimeMajor(Op):
    """time_major(y): y unchanged, but returned time-first ([T, B, F] instead of [B, T, F]) by the model."""

    name, family = "time_major", "op"

    def infer(self, ins):
        t = ins[0]
        if t.kind != "items" or not t.batched:
            raise ShapeRuleError(f"time_major needs a batched sequence, got {t}")
        return TensorType("items", t.shape, True, None, "time_major", True)

    def build(self, ins):
        from rpn2c.components.impl.ops import _Lambda

        return _Lambda(lambda x: x)


class _PoolHP(HP):
    how: Literal["mean", "sum", "max"] = "mean"


@register
class PoolItems(Op):
    """pool_items(x, how = "mean"|"sum"|"max"): items [B, N, F] or a grid [B, C, *S] to a vector over the item/spatial axes."""

    name, family = "pool_items", "op"
    aliases = ("readout",)
    synonyms = {"global_mean_pool": 'pool_items(how = "mean")', "global_avg_pool": 'pool_items(how = "mean")',
                "global_add_pool": 'pool_items(how = "sum")', "global_max_pool": 'pool_items(how = "max")'}  # PyG
    value_hints = {"how": {"last": "the last item of a sequence is an operation of its own: `last(x)`",
                           "first": "the first item of a sequence is an operation of its own: `first(x)`",
                           **dict.fromkeys(("avg", "average"), 'the average is `how = "mean"`')}}
    HP = _PoolHP

    def infer(self, ins):
        t = ins[0]
        if t.kind not in ("items", "grid"):
            raise ShapeRuleError(f"pool_items needs items or a grid, got {t}")
        return vector(t.batch, t.features)

    def build(self, ins):
        from rpn2c.components.impl.ops import _Lambda

        how, is_grid = self.hp.how, ins[0].kind == "grid"

        def pool(x):
            x = x.flatten(2) if is_grid else x.transpose(1, 2)
            return x.amax(-1) if how == "max" else (x.sum(-1) if how == "sum" else x.mean(-1))

        return _Lambda(pool)


@register
class ToSignal(Op):
    """to_signal(x): a sequence [B, T, E] becomes a signal [B, E, T] (E channels over a 1-D grid of T positions).

    torch's ``x.transpose(1, 2)`` / ``x.permute(0, 2, 1)`` / ``x.mT`` before an ``nn.Conv1d``. In RPN 2 terms it is
    the identity on the data, a change of which axis is the instance axis: the T items become the T positions of a
    grid whose channels are the E features, so that a grid head's patches run along T; no matrix is applied.
    ``to_items`` is the inverse.
    """

    name, family = "to_signal", "op"
    example = example_model("input x: sequence[B, 5, 4]", "y = to_signal(x)", "return y")

    def infer(self, ins):
        t = ins[0]
        if t.kind != "items" or not t.batched or t.time_major:
            raise ShapeRuleError(f"to_signal needs a batched, batch-first sequence [B, T, E], got {t}")
        return grid(t.batch, t.features, (t.items,))

    def build(self, ins):
        from rpn2c.components.impl.ops import _Lambda

        return _Lambda(lambda x: x.transpose(1, 2))


def _dim_sum(a, b):
    """``a + b`` for known or symbolic sizes (``T+3``, ``T+S``)."""
    if is_known(a) and is_known(b):
        return a + b
    if is_known(a):
        a, b = b, a
    return a if b == 0 else f"{a}+{b}"


@register
class ConcatItems(Op):
    """concat_items(a, b, ...): sequences [B, T_i, E] joined along the item axis into [B, ΣT_i, E].

    torch's ``torch.cat([a, b], dim=1)`` of two batch-first sequences: the items of ``b`` follow those of ``a``
    (``y[b, n] = a[b, n]`` for ``n < T_a``, ``b[b, n − T_a]`` after); the item count is symbolic when any part's is.
    """

    name, family = "concat_items", "op"
    arity = (2, 64)
    example = example_model("input a: sequence[B, 3, 4]", "input b: sequence[B, 2, 4]", "y = concat_items(a, b)",
                            "return y")

    def infer(self, ins):
        first = ins[0]
        batches = [t.batch for t in ins if t.batch != 1]  # a part of batch 1 (a class token) is broadcast
        batch = batches[0] if batches else 1
        total = 0
        for i, t in enumerate(ins):
            if t.kind != "items" or not t.batched or t.time_major:
                raise ShapeRuleError(f"concat_items needs batched, batch-first sequences, got {t}", arg=i)
            if t.batch not in (batch, 1) or t.features != first.features:
                raise ShapeRuleError(f"concat_items needs equal batch and feature sizes, got {first} and {t}", arg=i)
            total = _dim_sum(total, t.items)
        return first.with_shape((batch, total, first.features))

    def build(self, ins):
        import torch

        from rpn2c.components.impl.ops import _Lambda

        def cat(*xs):
            batch = max(x.shape[0] for x in xs)
            return torch.cat([x.expand(batch, -1, -1) if x.shape[0] != batch else x for x in xs], dim=1)

        return _Lambda(cat if any(t.batch == 1 for t in ins) else lambda *xs: torch.cat(xs, dim=1))


def kept(op, length, t, what: str, unit: str) -> int:
    """How many of ``length`` entries ``op``'s ``start``/``stop`` keep (a located error for none or unknown)."""
    if not is_known(length):
        raise ShapeRuleError(f"{op.name} needs a known {what}, got {t}")
    n = len(range(length)[op.hp.start:op.hp.stop])
    if n < 1:
        raise ShapeRuleError(f"{op.name}(start = {op.hp.start}, stop = {op.hp.stop}) keeps no {unit} of {length}")
    return n


class _SliceFeaturesHP(HP):
    start: int = Field(0, description="first feature kept (negative: counted from the end)")
    stop: int | None = Field(None, description="feature after the last one kept (none: the end; negative: from the end)")


@register
class SliceFeatures(Op):
    """slice_features(x, start = s, stop = e): the features s..e−1 of a vector [B, F], items [B, N, F] or the
    channels of a grid [B, C, *S] (``x[..., s:e]``, ``x[:, s:e]`` for a grid; negative bounds count from the end).

    torch's ``x.chunk(k, dim=-1)`` and ``x.split([a, b], dim=-1)`` are k slices of one value (a GLU's
    ``a * sigmoid(b)`` is the Hadamard product of two of them).
    """

    name, family = "slice_features", "op"
    HP = _SliceFeaturesHP
    example = example_model("input x: sequence[B, 3, 6]", "y = slice_features(x, start = 2, stop = 5)", "return y")

    def _length(self, t):
        if t.kind not in ("vector", "items", "grid"):
            raise ShapeRuleError(f"slice_features needs a vector, items or a grid, got {t}")
        return kept(self, t.features, t, "feature count", "feature")

    def infer(self, ins):
        t = ins[0]
        n = self._length(t)
        shape = list(t.shape)
        shape[1 if t.kind == "grid" else -1] = n
        return t.with_shape(shape)

    def build(self, ins):
        from rpn2c.components.impl.ops import _Lambda

        start, stop = self.hp.start, self.hp.stop
        if ins[0].kind == "grid":
            return _Lambda(lambda x: x[:, start:stop])
        return _Lambda(lambda x: x[..., start:stop])
