"""Relative position biases as values: ``relative_bias(x, heads = H)`` (T5's bucketed learned bias) and
``alibi(x, heads = H)`` give a per-head additive mask ``head_bias[H, Nq, Nc]``, computed once and handed to every
layer's attention as ``attn_mask = b`` (head h adds slice h to its scores). In RPN 2 terms it is an additive term
of the bilinear ξ's logits, ``softmax(⟨W_q x_i, W_k c_j⟩ · scale + b_h(j − i))``, not a parameter of W_q or W_k
(docs/semantics.md). Maths: :mod:`rpn2c.functional.position_bias`.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from rpn2c.components.base import Op, ShapeRuleError, example_model
from rpn2c.components.registry import HP, register
from rpn2c.ir.types import TensorType, head_bias

def _items(ins: list[TensorType], what: str) -> tuple:
    """``(Nq, Nc)``: the item counts of the queries ``x`` and of the keys (``c`` when given, else ``x``)."""
    for i, t in enumerate(ins):
        if t.kind != "items":
            raise ShapeRuleError(f"{what} reads the positions of a sequence [B, T, d], got {t}", arg=i)
    return ins[0].items, ins[-1].items


_EXAMPLE = ("input x: sequence[B, 6, 8]", "y = head(x) {", "  heads = 2", "  xi_instance = attention(rank = 2, "
            "attn_mask = b)", "  out = 2", "  fusion = concat_linear(out = 8)", "}", "return y")


class _RelativeHP(HP):
    heads: int = Field(ge=1, description="H: one bias per attention head (the layer's heads)")
    buckets: int = Field(32, ge=2, description="buckets of the offset j − i (T5's relative_attention_num_buckets)")
    max_distance: int = Field(128, ge=1, description="offsets from this on share the last bucket "
                                                     "(T5's relative_attention_max_distance)")
    bidirectional: bool = Field(True, description="separate buckets for keys before and after the query (an "
                                                  "encoder); false: keys after it share bucket 0 (a decoder)")

    @model_validator(mode="after")
    def _exact_half(self):
        half = self.buckets // 2 if self.bidirectional else self.buckets
        if half // 2 < 1 or self.max_distance <= half // 2:
            raise ValueError(f"{self.buckets} buckets keep {half // 2} exact offsets, and max_distance must be "
                             f"larger than that (got {self.max_distance})")
        return self


@register
class RelativeBias(Op):
    """relative_bias(x, heads = H): T5's bucketed relative position bias, b[h, i, j] = W[bucket(j − i), h] with a
    learned W ∈ R^{buckets×H}: head_bias[H, Nq, Nc], for ``attn_mask`` of an attention with H heads.

    ``relative_bias(x, c, ...)``: queries from x, keys from c. The buckets are T5's (exact below buckets/4, then
    logarithmic up to max_distance); computed once, every layer given ``attn_mask = b`` reads the same table, as
    T5's layers reuse the first layer's ``position_bias``.
    """

    name, family = "relative_bias", "op"
    aliases = ("bucketed_relative_bias",)
    synonyms = dict.fromkeys(("relative_attention_bias", "t5_relative_bias", "relative_position_bias",
                              "position_bias"), "relative_bias(x, heads = H)")
    arity = (1, 2)
    HP = _RelativeHP
    example = example_model(_EXAMPLE[0], "b = relative_bias(x, heads = 2, buckets = 8, max_distance = 16)",
                            *_EXAMPLE[1:])

    def infer(self, ins):
        return head_bias(self.hp.heads, *_items(ins, "relative_bias"))

    def count(self, ins):
        return self.hp.buckets * self.hp.heads

    def build(self, ins):
        from rpn2c.components.impl.position_bias import RelativeBiasModule

        return RelativeBiasModule(self.hp.buckets, self.hp.heads, self.hp.bidirectional, self.hp.max_distance)


class _AlibiHP(HP):
    heads: int = Field(ge=1, description="H: one slope per attention head (the layer's heads)")


@register
class Alibi(Op):
    """alibi(x, heads = H): ALiBi's fixed linear biases, b[h, i, j] = −m_h·|i − j| with m_h = 2^(−8(h+1)/H) (the
    paper's interleaved slopes when H is not a power of two): head_bias[H, Nq, Nc], no parameters.

    With ``causal = true`` on the attention the kept keys j <= i read −m_h·(i − j), the paper's causal form.
    """

    name, family = "alibi", "op"
    synonyms = dict.fromkeys(("alibi_bias", "linear_biases", "attention_with_linear_biases"),
                             "alibi(x, heads = H)")
    arity = (1, 2)
    HP = _AlibiHP
    example = example_model(_EXAMPLE[0], "b = alibi(x, heads = 2)", *_EXAMPLE[1:])

    def infer(self, ins):
        return head_bias(self.hp.heads, *_items(ins, "alibi"))

    def build(self, ins):
        from rpn2c.components.impl.position_bias import AlibiModule

        return AlibiModule(self.hp.heads)
