"""Horizontal fusion of a layer's heads: identical perceptron-like heads as one matrix product.

Slot ``heads`` (shared with ``fused_heads``): ``fuse_heads(bias(reconcile(expand(x))) …)`` where every head
reads the same parameter-free κ of the same input, with an identity ψ, one channel and no interdependence, is
``stacked_linear``: κ(x) once and one ``F.linear`` with the heads' ψ stacked row-wise, split back per head.
A ChebNet layer, heads whose one instance ξ is ``chebyshev_graph`` of one Laplacian at different orders fused by
``sum``, is ``chebyshev_sum``: Σ_k T_k(L̃) Y_k by Clenshaw's recurrence, K − 1 propagations instead of the heads'
Σ_k k = K(K − 1)/2.
"""

from __future__ import annotations

import json

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
    if len(heads) < 2 or s.node.layer.pi_in_terms or not all(_plain(h, t) for h, t in zip(heads, traces)):
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


def _chebyshev_key(h, t) -> str | None:
    """The Laplacian a head's Chebyshev filter reads (its ξ settings but the order), when the head is one plain
    filter: one instance ξ chebyshev_graph, one channel, no groups, no own processing or tie, tied or no bias,
    a parameter-free κ on items."""
    use = h.xi.get("xi_instance")
    if (set(h.xi) != {"xi_instance"} or use.name != "chebyshev_graph" or h.channels != 1 or h.groups != 1
            or h.post or h.tie is not None or h.bias not in ("tied", "none") or t.view != "items"
            or h.kappa.component.count((t.mz,)) != 0):
        return None
    return json.dumps({k: v for k, v in use.canonical()["hp"].items() if k != "order"}, sort_keys=True, default=str)


def chebyshev_layer(s: Site) -> bool:
    """Whether the layer is a ChebNet layer (rule ``chebyshev_heads``): ≥ 2 plain Chebyshev heads of one
    Laplacian, fused by ``sum``."""
    spec, traces = s.node.layer, s.node.trace["heads"]
    if len(spec.heads) < 2 or spec.fusion is None or spec.fusion.name != "sum" or spec.pi_in_terms:
        return False
    keys = {_chebyshev_key(h, t) for h, t in zip(spec.heads, traces)}
    return len(keys) == 1 and None not in keys


def _chebyshev_cost(s: Site) -> Cost:
    """Propagations of an n-wide signal over the graph: Σ_h k_h for the heads one by one, max_h k_h shared."""
    heads, traces = s.node.layer.heads, s.node.trace["heads"]
    row = size(traces[0].nz) * (heads[0].out or traces[0].d)
    orders = [h.xi["xi_instance"].component.hp.order for h in heads]
    return Cost(sum(orders) * row, max(orders) * row, 8 * sum(orders) * row, 8 * min(max(orders), 3) * row)


@makes("chebyshev_sum")
def _chebyshev(m: Match):
    """``fuse_heads[sum](h…)`` → ``chebyshev_sum(h…)``: one recurrence over the heads' orders."""
    return m.make("chebyshev_sum", m.root.args)


HEAD_RULES: tuple[Rule, ...] = (
    Rule("stacked_heads", "layer", "heads", stackable,
         "identical perceptron heads (same parameter-free κ, identity ψ, no ξ): κ(x) once and one F.linear with "
         "the heads' ψ rows stacked (and their biases), split back per head, instead of one product per head",
         "RPN 2 eq (31) multi-head layers; horizontal fusion (TVM Relax / Inductor)", benefit=2, cost=_stack_cost,
         pattern=P("fuse_heads"), rewrite=_stack),
    Rule("chebyshev_heads", "layer", "heads", chebyshev_layer,
         "a ChebNet layer Σ_k T_k(L̃) X Θ_k: the heads' filters of one Laplacian fused by sum as one Clenshaw "
         "recurrence b_k = Y_k + 2L̃ b_{k+1} − b_{k+2} on the projected Y_k = κ(X) Θ_kᵀ, K − 1 propagations "
         "instead of k for head k (K(K − 1)/2 in all)",
         "Defferrard et al. 2016 (ChebNet); Clenshaw 1955", benefit=2, cost=_chebyshev_cost,
         pattern=P("fuse_heads"), rewrite=_chebyshev),
)
