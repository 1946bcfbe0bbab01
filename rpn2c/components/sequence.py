"""Sequence models as users write them: token embeddings, positional encodings and item-axis readouts.

A ``tokens[B, T]`` value holds integer ids; only :class:`Embedding` reads one (the checker refuses every other
reader). In RPN 2 terms an embedding is a head with κ = one-hot expansion (``e_x ∈ R^V``) and ψ = ``Wᵀ``: the row
``W[x]``; ``F.embedding`` is the gather that computes it without the one-hot matrix.
"""

from __future__ import annotations

from typing import ClassVar, TYPE_CHECKING

from pydantic import Field

from rpn2c.components.base import Op, ShapeRuleError, example_model
from rpn2c.components.readouts import needed, read_axis, read_type
from rpn2c.components.registry import HP, register
from rpn2c.errors import InputError
from rpn2c.ir.types import Dim, TensorType, is_known, items, vector

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    import torch

_TOKENS = "input x: tokens[B, 6]"
_SEQUENCE = "input x: sequence[B, 6, 4]"


def _sequence(t: TensorType, what: str) -> TensorType:
    """``t`` when it is items ``[B, T, d]`` with a known width d, else a ShapeRuleError naming ``what``."""
    if t.kind != "items":
        raise ShapeRuleError(f"{what} needs a sequence [B, T, d], got {t}", arg=0)
    if not is_known(t.features):
        raise ShapeRuleError(f"{what} needs a known feature width d, got '{t.features}'", arg=0)
    return t


def _shift(n: Dim, k: int) -> Dim:
    """``n + k`` for a known or symbolic item count (``T+1``, ``T-2``)."""
    if is_known(n):
        return n + k
    base, sep, off = str(n).rpartition("+") if "+" in str(n) else str(n).rpartition("-")
    if sep and off.isdigit() and base:  # T+1 shifted by -2 is T-1, not T+1-2
        n, k = base, k + (int(off) if sep == "+" else -int(off))
    return n if k == 0 else f"{n}{'+' if k > 0 else '-'}{abs(k)}"


def token_bound(graph, nid: str) -> int | None:
    """The smallest vocabulary of the embeddings reading the tokens input ``nid`` (ids below it are valid for
    every reader), None when no embedding reads it. Test and export drivers draw random ids below it."""
    vocabs = [graph.node(dst).op.component.hp.vocab for _, dst in graph.g.out_edges(nid)
              if graph.node(dst).kind == "op" and isinstance(graph.node(dst).op.component, Embedding)]
    return min(vocabs) if vocabs else None


def random_tokens(graph, nid: str, shape, generator=None) -> torch.Tensor:
    """Random valid ids for the tokens input ``nid``: uniform below :func:`token_bound` (int64)."""
    import torch

    return torch.randint(0, token_bound(graph, nid) or 1, tuple(shape), generator=generator)


# ------------------------------------------------------------------------------------------------ embedding
class _EmbeddingHP(HP):
    vocab: int = Field(ge=1, description="vocabulary size V: ids lie in [0, V)")
    dim: int = Field(ge=1, description="embedding width d")
    padding_idx: int | None = Field(None, description="an id whose row is zero and gets no gradient "
                                                      "(negative counts from V, as nn.Embedding)")


@register
class Embedding(Op):
    """embedding(x, vocab = V, dim = d): tokens [B, T] -> sequence [B, T, d], y[b, t] = W[x[b, t]] (W ∈ R^{V×d}).

    κ = one-hot (``e_x ∈ R^V``), ψ = ``Wᵀ``: ``y = e_xᵀ W``, computed as a row gather (``nn.Embedding``, whose
    ``padding_idx`` it also takes). Ids outside ``[0, V)`` are a runtime error naming the id and its index.
    """

    name, family = "embedding", "op"
    HP = _EmbeddingHP
    reads_tokens = True  # the one reader of a tokens value (the checker refuses every other)
    example = example_model(_TOKENS, "y = embedding(x, vocab = 10, dim = 4)", "return y")

    def infer(self, ins):
        t = ins[0]
        if t.kind != "tokens":
            raise ShapeRuleError(f"embedding reads integer token ids tokens[B, T], got {t}", arg=0)
        pad = self.hp.padding_idx
        if pad is not None and not -self.hp.vocab <= pad < self.hp.vocab:
            raise ShapeRuleError(f"padding_idx = {pad} is outside the vocabulary of {self.hp.vocab} ids")
        return items(t.batch, t.shape[1], self.hp.dim, batched=t.batched, role="sequence")

    def count(self, ins):
        return self.hp.vocab * self.hp.dim

    def build(self, ins):
        from rpn2c.components.impl.sequence import _EmbeddingModule

        pad = self.hp.padding_idx
        return _EmbeddingModule(self.hp.vocab, self.hp.dim, pad % self.hp.vocab if pad is not None else None)


# ------------------------------------------------------------------------------------------------ positions
class _SinusoidalHP(HP):
    base: float = Field(10000.0, gt=1.0, description="wavelength base (the paper's 10000)")


@register
class SinusoidalPosition(Op):
    """sinusoidal_position(x, base = 10000): x + P, P[t, 2i] = sin(t/base^{2i/d}), P[t, 2i+1] = cos(t/base^{2i/d}).

    The fixed encoding of "Attention is all you need" (§3.5), a buffer: no parameters, any sequence length.
    """

    name, family = "sinusoidal_position", "op"
    HP = _SinusoidalHP
    example = example_model(_SEQUENCE, "y = sinusoidal_position(x)", "return y")

    def infer(self, ins):
        return _sequence(ins[0], "sinusoidal_position")

    def build(self, ins):
        from rpn2c.components.impl.sequence import _SinusoidalModule

        t = ins[0]
        return _SinusoidalModule(t.items if is_known(t.items) else 512, t.features, self.hp.base)


class _LearnedHP(HP):
    max_len: int = Field(ge=1, description="the most items a sequence may have")
    scale: float = Field(1.0, allow_inf_nan=False, json_schema_extra={"hash": "omit_default"},
                         description="a constant factor on the table, x + scale·P[:T] (x-transformers' "
                                     "AbsolutePositionalEmbedding: dim^(−1/2))")


@register
class LearnedPosition(Op):
    """learned_position(x, max_len = L): x + P[:T], P ∈ R^{L×d} learned (L·d parameters); T > L is an error;
    ``scale = s``: x + s·P[:T]."""

    name, family = "learned_position", "op"
    HP = _LearnedHP
    example = example_model(_SEQUENCE, "y = learned_position(x, max_len = 8)", "return y")

    def infer(self, ins):
        t = _sequence(ins[0], "learned_position")
        if is_known(t.items) and t.items > self.hp.max_len:
            raise ShapeRuleError(f"learned_position has max_len = {self.hp.max_len} positions, but {t} has "
                                 f"{t.items} items", arg=0)
        return t

    def count(self, ins):
        return self.hp.max_len * ins[0].features

    def axis_limits(self, ins):
        return [(ins[0].items, 1, self.hp.max_len)]

    def build(self, ins):
        from rpn2c.components.impl.sequence import _LearnedModule

        return _LearnedModule(self.hp.max_len, ins[0].features, self.hp.scale)


@register
class PrependToken(Op):
    """prepend_token(x): [B, T, d] -> [B, T+1, d], a learned item c ∈ R^d (a CLS token) put first: y = [c; x]."""

    name, family = "prepend_token", "op"
    aliases = ("cls_token",)
    example = example_model(_SEQUENCE, "y = prepend_token(x)", "return y")

    def infer(self, ins):
        t = _sequence(ins[0], "prepend_token")
        return t.with_shape((t.batch, _shift(t.items, 1), t.features))

    def count(self, ins):
        return ins[0].features

    def build(self, ins):
        from rpn2c.components.impl.sequence import _PrependModule

        return _PrependModule(ins[0].features)


# ------------------------------------------------------------------------------------------------ readouts
def _items_only(t: TensorType, what: str) -> TensorType:
    if t.kind != "items":
        raise ShapeRuleError(f"{what} reads the item axis of a sequence [B, T, d], got {t}", arg=0)
    return t


class _ReadItem(Op):
    """One item of a sequence, or one step of a signal, as a vector: ``item(x, index = k)`` for a fixed k
    (``rpn2c.components.readouts``)."""

    index: ClassVar[int] = 0

    def infer(self, ins):
        return read_type(ins[0], self.index, self.name)

    def axis_limits(self, ins):
        return [(read_axis(ins[0], self.name)[1], needed(self.index), None)]

    def build(self, ins):
        from rpn2c.components.impl.readouts import ItemModule

        axis, _ = read_axis(ins[0], self.name)
        return ItemModule(self.index, axis, f"{self.name}(x)", needed(self.index))


@register
class Last(_ReadItem):
    """last(x): sequence [B, T, d] -> vector [B, d], y[b] = x[b, T−1] (the readout of a causal model); a signal
    [B, C, T] -> vector [B, C], its last step x[b, :, T−1] (a TCN's readout)."""

    name, family, index = "last", "op", -1


@register
class First(_ReadItem):
    """first(x): sequence [B, T, d] -> vector [B, d], y[b] = x[b, 0] (the CLS readout after prepend_token); a
    signal [B, C, T] -> its first step x[b, :, 0]."""

    name, family, index = "first", "op", 0


class _SliceHP(HP):
    start: int = Field(0, description="first item kept (negative: counted from the end)")
    stop: int | None = Field(None, description="item after the last one kept (none: the end; negative: from the end)")


def slice_length(n: Dim, start: int, stop: int | None) -> tuple[Dim, int]:
    """``(length, least T)`` of ``x[:, start:stop]``: the item count (symbolic when it depends on T) and the
    fewest items T the slice needs; a ShapeRuleError when it is empty or outside a known T."""
    where = f"slice(start = {start}, stop = {'none' if stop is None else stop})"
    if start < 0 and stop is not None and stop >= 0 and not is_known(n):
        raise ShapeRuleError(f"{where} mixes an index from the end with one from the start: its length depends "
                             f"on the symbolic item count {n}")
    need = max(-start if start < 0 else start + 1, (stop if stop >= 0 else -stop) if stop is not None else 0)
    if is_known(n):
        if n < need:
            raise ShapeRuleError(f"{where} needs at least {need} items, the sequence has {n}", arg=0)
        length = len(range(n)[start:stop])
    elif start >= 0 and stop is not None and stop >= 0:
        length = stop - start
    elif start < 0:
        length = (stop if stop is not None else 0) - start
    else:
        length = _shift(n, (stop if stop is not None else 0) - start)
    if start >= 0 and stop is not None and stop < 0:  # T + stop > start: at least one item
        need = max(need, start - stop + 1)
    if is_known(length) and length < 1:
        raise ShapeRuleError(f"{where} keeps no item")
    return length, need


@register
class Slice(Op):
    """slice(x, start = s, stop = e): sequence [B, T, d] -> [B, T', d], y = x[:, s:e] (strict bounds)."""

    name, family = "slice", "op"
    aliases = ("slice_items",)
    HP = _SliceHP
    example = example_model(_SEQUENCE, "y = slice(x, start = 1, stop = -1)", "return y")

    def infer(self, ins):
        t = _items_only(ins[0], "slice")
        length, _ = slice_length(t.items, self.hp.start, self.hp.stop)
        return t.with_shape((t.batch, length, t.features))

    def build(self, ins):
        from rpn2c.components.impl.sequence import _SliceModule

        _, need = slice_length(ins[0].items, self.hp.start, self.hp.stop)
        return _SliceModule(self.hp.start, self.hp.stop, need)
