"""Horizontal fusion of a layer's heads: identical perceptron-like heads as one matrix product.

Slot ``heads`` (shared with ``fused_heads``): ``fuse_heads(bias(reconcile(expand(x))) …)`` where every head
reads the same parameter-free κ of the same input, with an identity ψ, one channel and no interdependence, is
``stacked_linear``: κ(x) once and one ``F.linear`` with the heads' ψ stacked row-wise, split back per head.
"""

from __future__ import annotations

from rpn2c.passes.cost import Cost, size
from rpn2c.passes.rewrite import Match
from rpn2c.passes.rule import P, Rule, Site, makes


def _plain(h, t) -> bool:
    return (not h.xi and h.channels == 1 and h.groups == 1 and h.psi.name == "identity"
            and h.bias in ("tied", "none") and t.view in ("items", "vector") and not t.grid_kappa
            and not h.post and h.kappa.component.count((t.mz,)) == 0)


def stackable(s: Site) -> bool:
    """Whether the layer's heads are identical perceptron heads (rule ``stacked_heads``)."""
    heads, traces = s.node.layer.heads, s.node.trace["heads"]
    if len(heads) < 2 or not all(_plain(h, t) for h, t in zip(heads, traces)):
        return False
    first = heads[0]
    return all(h.kappa.canonical() == first.kappa.canonical() and h.bias == first.bias for h in heads[1:])


def _stack_cost(s: Site) -> Cost:
    """κ once instead of once per head; the products are the same multiply-adds in one call."""
    heads, traces = s.node.layer.heads, s.node.trace["heads"]
    items = size(traces[0].nz) if traces[0].view == "items" else 1
    k = items * traces[0].d
    mm = sum(items * t.d * (h.out or t.d) for h, t in zip(heads, traces))
    return Cost(len(heads) * k + mm, k + mm, 8 * len(heads) * k, 8 * k)


@makes("stacked_linear")
def _stack(m: Match):
    """``fuse_heads(h…)`` → ``stacked_linear(h…)``: one kernel over the heads, which stay as its arguments."""
    return m.make("stacked_linear", m.root.args)


HEAD_RULES: tuple[Rule, ...] = (
    Rule("stacked_heads", "layer", "heads", stackable,
         "identical perceptron heads (same parameter-free κ, identity ψ, no ξ): κ(x) once and one F.linear with "
         "the heads' ψ rows stacked (and their biases), split back per head, instead of one product per head",
         "RPN 2 eq (31) multi-head layers; horizontal fusion (TVM Relax / Inductor)", benefit=2, cost=_stack_cost,
         pattern=P("fuse_heads"), rewrite=_stack),
)
