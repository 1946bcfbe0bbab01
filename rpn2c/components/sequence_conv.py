"""A short causal depthwise convolution over a sequence's item axis (Mamba's and H3's ``conv1d`` before the scan).

In RPN 2 terms each channel c is a head with ψ = identity and an instance ξ of its own, the banded
lower-triangular Toeplitz matrix ``M_c[t, s] = w[c, k − 1 − (t − s)]`` (``0 ≤ t − s < k``): a causal chain of k
learned taps, the finite-impulse cousin of the recurrence chain ξ (``docs/semantics.md``). The reference lowering
builds the C matrices ``[C, T, T]``; the default lowering runs one grouped ``conv1d`` with ``k − 1`` zeros of left
padding.
"""

from __future__ import annotations

from pydantic import Field

from rpn2c.components.base import Op, ShapeRuleError, example_model
from rpn2c.components.registry import HP, register
from rpn2c.ir.types import is_known


class _CausalConvHP(HP):
    kernel: int = Field(ge=1, le=4096, description="k: taps per channel, the item and its k − 1 predecessors")
    bias: bool = Field(True, description="a learned β_c per channel")


@register
class CausalConv(Op):
    """causal_conv(x, kernel = k): sequence [B, T, C] -> [B, T, C], y[t, c] = β_c + Σ_{j<k} w[c, j] x[t − k + 1 + j, c].

    Depthwise (one filter of k taps per channel) and causal (item t reads items t − k + 1 … t, zeros before the
    first): ``nn.Conv1d(C, C, k, groups = C, padding = k − 1)`` on ``xᵀ`` with its last k − 1 outputs dropped,
    as Mamba writes it. Weight ``[C, 1, k]`` (``nn.Conv1d``'s layout), bias ``[C]``: C·k (+ C) parameters.
    """

    name, family = "causal_conv", "op"
    aliases = ("short_conv",)
    HP = _CausalConvHP
    example = example_model("input x: sequence[B, 6, 4]", "y = causal_conv(x, kernel = 3)", "return y")

    def infer(self, ins):
        t = ins[0]
        if t.kind != "items":
            raise ShapeRuleError(f"causal_conv convolves the item axis of a sequence [B, T, C], got {t}", arg=0)
        if not is_known(t.features):
            raise ShapeRuleError(f"causal_conv needs a known channel count C (one filter each), got {t}", arg=0)
        return t

    def count(self, ins):
        c = ins[0].features
        return c * self.hp.kernel + (c if self.hp.bias else 0)

    def build(self, ins):
        from rpn2c.components.impl.sequence_conv import CausalConvModule

        return CausalConvModule(ins[0].features, self.hp.kernel, self.hp.bias)
