"""``psi = tied(src)``: a reconciliation whose matrix is the weight of an earlier node (tied input and output
embeddings; a tied autoencoder with ``transpose = true``)."""

from __future__ import annotations

from rpn2c.components.base import Reconciliation, example_model
from rpn2c.components.registry import HP, ValueRef, register


class _TiedHP(HP):
    source: ValueRef
    transpose: bool = False


@register
class TiedPsi(Reconciliation):
    """Tied reconciliation ψ(w) = W_src (or W_srcᵀ with transpose = true): the weight matrix of an earlier node (an
    embedding table, or a one-head layer's ψ); l = 0 (the tensor is the source's)."""

    name, family = "tied", "reconciliation"
    HP = _TiedHP
    positional = ("source",)
    example = example_model("input x: tokens[B, 5]", "e = embedding(x, vocab = 7, dim = 3)",
                            "y = head(e) {", "  psi = tied(e)", "  out = 7", "  bias = false", "}", "return y")

    def count(self, n, D):
        return 0

    def build(self, n, D):
        from rpn2c.components.impl.tied import TiedPsi as Module

        return Module(n, D, self.hp.transpose)
