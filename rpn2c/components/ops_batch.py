"""The explicit opt-in to interdependence across the samples of a batch (paper §3.4, §5.1.3: instance kernels over
the batch, for tabular or transductive data): ``batch_as_items`` makes the B samples of a ``vector[B, F]`` the items
of one implicit sample, ``nodes[B, F]``, so that any instance ξ (a kernel, a graph, attention) relates samples;
``batch_as_samples`` is the way back. Both are the identity on the data. A model using them computes each sample's
output from the whole batch, so its outputs (in eval mode too) depend on the batch's size and composition
(docs/semantics.md, "Interdependence across the batch").
"""

from __future__ import annotations

from rpn2c.components.base import Op, ShapeRuleError, example_model
from rpn2c.components.registry import register
from rpn2c.ir.types import items, vector


@register
class BatchAsItems(Op):
    """batch_as_items(x): vector[B, F] -> nodes[B, F], the B samples become the items of one sample (opt-in: an instance ξ after it mixes samples).

    The identity on the data (inside the model it adds the implicit sample axis of one, as an unbatched input
    has). Without it samples never interact; with it every instance ξ of the heads that read the
    result relates the samples of the batch, so an output depends on the whole batch (eval mode included).
    """

    name, family = "batch_as_items", "op"
    aliases = ("over_batch",)
    example = example_model("input x: vector[B, 4]", "n = batch_as_items(x)",
                            "h = head(n) {", "  xi_instance = gaussian_rbf_kernel", "  out = 3", "}",
                            "y = batch_as_samples(h)", "return y")

    def infer(self, ins):
        t = ins[0]
        if t.kind != "vector":
            raise ShapeRuleError(f"batch_as_items relates the samples of a vector[B, F] batch, got {t}; items "
                                 "already have an item axis for instance interdependence")
        return items(1, t.batch, t.features, batched=False, role="nodes")

    def build(self, ins):
        from rpn2c.components.impl.ops import _Lambda

        return _Lambda(lambda x: x.unsqueeze(0))  # one implicit sample, as an unbatched input is held inside


@register
class BatchAsSamples(Op):
    """batch_as_samples(y): nodes[N, F] (one implicit sample) -> vector[N, F], the items become samples again."""

    name, family = "batch_as_samples", "op"
    example = BatchAsItems.example

    def infer(self, ins):
        t = ins[0]
        if t.kind != "items" or t.batched:
            raise ShapeRuleError(f"batch_as_samples needs one implicit sample of items (nodes[N, F], as "
                                 f"batch_as_items gives), got {t}")
        return vector(t.items, t.features)

    def build(self, ins):
        from rpn2c.components.impl.ops import _Lambda

        return _Lambda(lambda x: x.squeeze(0))
