"""``token_mask(ids, pad = p)``: the padding mask of a batch of token ids, as a model computes it in forward
(``ids.eq(pad)``); it feeds an attention ξ's ``key_padding``. y[b, t] = (ids[b, t] = p) (True blocks the key), or
with ``keep = true`` y[b, t] = (ids[b, t] ≠ p) (True keeps it)."""

from __future__ import annotations

from pydantic import Field

from rpn2c.components.base import Op, ShapeRuleError, example_model
from rpn2c.components.registry import HP, register
from rpn2c.ir.types import TensorType


class _TokenMaskHP(HP):
    pad: int = Field(0, ge=-(1 << 62), le=1 << 62, description="the padding token id")
    keep: bool = Field(False, description="true: the mask is True where the id is not padding (a keep mask)")


@register
class TokenMask(Op):
    """token_mask(ids, pad = p): tokens [B, T] -> a mask [B, T], True where ids = p (a block mask for key_padding);
    keep = true: True where ids ≠ p (a keep mask)."""

    name, family = "token_mask", "op"
    aliases = ("padding_mask",)
    HP = _TokenMaskHP
    reads_tokens = True
    example = example_model("input x: tokens[B, 6]", "e = embedding(x, vocab = 9, dim = 4)", "k = token_mask(x, pad = 0)",
                            "y = head(e) {", "  xi_instance = attention(rank = 2, key_padding = k)", "  out = 4", "}",
                            "return y")

    def infer(self, ins):
        t = ins[0]
        if t.kind != "tokens":
            raise ShapeRuleError(f"token_mask reads token ids [B, T], got {t}", arg=0)
        mode = "keep" if self.hp.keep else "block"
        return TensorType("mask", tuple(t.shape), t.batched, mode, f"{mode}_mask", False)

    def build(self, ins):
        from rpn2c.components.impl.masks import TokenMask as Module

        return Module(self.hp.pad, self.hp.keep)
