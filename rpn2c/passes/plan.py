"""The optimiser: pick native kernels for each head of the default lowering.

Rules are a table of ``(name, applies(head, trace) -> bool, why)`` tried in order, tinygrad style; every rule
that fires is recorded on the IR node (``node.plan``) so ``rpn2c graph`` and the check table show what the
optimiser did and why. The reference lowering ignores plans: it always materialises the paper's matrices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rpn2c.check.heads import HeadTrace
from rpn2c.ir.graph import Graph, HeadSpec, LayerSpec


@dataclass(frozen=True)
class Rule:
    name: str
    applies: Callable[[HeadSpec, HeadTrace], bool]
    why: str


def _grid_xi(h: HeadSpec):
    use = h.xi.get("xi_attribute")
    return None if use is None or getattr(use.component, "kind", "") != "grid" else use.component


def _elementwise(h: HeadSpec) -> bool:
    return h.kappa.component.elementwise


def _xi_paramless(h: HeadSpec) -> bool:
    return all(getattr(u.component, "kind", "static") in ("static", "grid") for u in h.xi.values())


RULES: tuple[Rule, ...] = (
    Rule("conv", lambda h, t: t.view == "grid" and not t.grid_kappa and _grid_xi(h) is not None
         and _grid_xi(h).mode == "padding" and _elementwise(h),
         "padding-mode grid ξ + elementwise κ + ψ = convolution (κ commutes with the patch gather; padding "
         "reads κ(0))"),
    Rule("box_sum", lambda h, t: t.view == "grid" and not t.grid_kappa and _grid_xi(h) is not None
         and _grid_xi(h).mode == "aggregation",
         "aggregation-mode grid ξ = depthwise convolution with a ones kernel"),
    Rule("gather_patches", lambda h, t: t.view == "grid" and not t.grid_kappa and _grid_xi(h) is not None
         and _grid_xi(h).mode == "padding" and not _elementwise(h),
         "non-elementwise κ does not commute with the gather: patches by index, then κ per patch"),
    Rule("pool", lambda h, t: t.grid_kappa and h.kappa.component.grid_only
         and h.kappa.component.family == "compression", "patch compression = native pooling"),
    Rule("project_first", lambda h, t: "xi_instance" in h.xi and "xi_attribute_post" not in h.xi,
         "instance ξ commutes with ψ: A(κ ψᵀ) = (Aκ)ψᵀ, so project to n first"),
    Rule("shared_kappa", lambda h, t: h.channels > 1 and _xi_paramless(h),
         "parameter-free ξ: κ_ξ(X) is computed once and shared by all channels"),
    Rule("structured_xi", lambda h, t: any(getattr(u.component, "kind", "") in ("static", "data")
                                           for u in h.xi.values()),
         "chain → shifts, graph → gather/scatter, bilinear+softmax → scaled_dot_product_attention"),
)


RECURRENT_RULES: tuple[Rule, ...] = (
    Rule("fused_recurrent", lambda r, t: r.kappa_state.name == "identity",
         "identity κ_state: the gate heads and chain feedback match torch's fused RNN/GRU/LSTM kernel (κ on the "
         "input is applied to the whole sequence first)"),
    Rule("time_loop", lambda r, t: r.kappa_state.name != "identity",
         "an expansion of the fed-back state does not fit the fused kernel: a loop over time steps"),
)


def _attention_head(h: HeadSpec) -> bool:
    xi = h.xi.get("xi_instance")
    return (set(h.xi) == {"xi_instance"} and xi.name in ("low_rank_bilinear", "bilinear") and xi.component.hp.softmax
            and h.kappa.name == "identity" and h.psi.name == "identity" and h.channels == 1 and h.groups == 1
            and h.bias != "untied")


def _same_heads(spec: LayerSpec) -> bool:
    def key(h):
        return {k: v for k, v in h.canonical().items() if k != "name"}

    return all(key(h) == key(spec.heads[0]) for h in spec.heads[1:])


LAYER_RULES: tuple[Rule, ...] = (
    Rule("fused_heads", lambda spec, traces: len(spec.heads) > 1 and all(_attention_head(h) for h in spec.heads)
         and all(t.view == "items" for t in traces) and _same_heads(spec),
         "H identical attention heads: one batched [B, H, N, r] scaled_dot_product_attention instead of H calls"),
)


def plan_head(h: HeadSpec, t: HeadTrace) -> list[str]:
    return [r.name for r in RULES if r.applies(h, t)]


def optimize(graph: Graph) -> Graph:
    """Annotate every layer node with the kernels the default lowering will use (in place; returns graph)."""
    for node in graph.nodes():
        if node.kind == "layer":
            plan = {k for h, t in zip(node.layer.heads, node.trace["heads"]) for k in plan_head(h, t)}
            plan |= {r.name for r in LAYER_RULES if r.applies(node.layer, node.trace["heads"])}
            node.plan = sorted(plan)
        elif node.kind == "recurrent":
            node.plan = [r.name for r in RECURRENT_RULES if r.applies(node.layer, node.trace["recurrent"])]
    return graph


def explain(name: str) -> str:
    return next(r.why for r in (*RULES, *LAYER_RULES, *RECURRENT_RULES) if r.name == name)
