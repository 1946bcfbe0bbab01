"""Item and vector heads: where ψ is applied relative to the instance ξ, and κ shared across channels.

Slot ``order``: ``reconcile(xi(k))`` → ``xi(reconcile(k))``: project to n before the instance interdependence
(``A(κψᵀ) = (Aκ)ψᵀ``).
Slot ``share``: one ``expand`` term for all channels when ξ has no parameters (the channels' terms become equal
and interning merges them).
Slot ``psi``: ``bias(reconcile(k))`` with an identity ψ → ``linear(k)``.
Slot ``xi``: ``xi`` → ``xi_kernel``: structured interdependence through its own kernel, not the literal matrix.
Slot ``xi`` also: a hybrid ξ by its own kernels (``fused_parts``: the parts' outputs fused; ``edge_hadamard``: a
Hadamard product on a graph part's edge list).
Slot ``graph``: a graph ξ's propagation as one SpMM (``spmm``; CSR, or dense GEMM for dense graphs) instead of
gather/scatter.
"""

from __future__ import annotations

from rpn2c.components.xi_graph import SPMM
from rpn2c.components.xi_hybrid import EDGE_HADAMARD, FUSED_PARTS
from rpn2c.ir.kernels import offered
from rpn2c.passes.cost import HINTS, Cost, size
from rpn2c.passes.rewrite import Match
from rpn2c.passes.rule import P, Rule, Site, to


def _xi_paramless(s: Site) -> bool:
    return all(u.component.kind in ("static", "grid") for u in s.head.xi.values())


def _items(s: Site) -> bool:
    return s.trace.view in ("items", "vector") and not s.trace.grid_kappa


def _project_first_cost(s: Site) -> Cost:
    t = s.trace
    n_q, n_k = size(t.n_out), size(t.nz)
    d, n = t.d, (s.head.out or t.d)
    # A [N', N] applied to κ [N, D] then ψ, versus ψ first and A on [N, n]
    return Cost(n_q * n_k * d + n_q * d * n, n_k * d * n + n_q * n_k * n, 8 * n_q * d, 8 * n_k * n)


def _share_cost(s: Site) -> Cost:
    t, c = s.trace, s.head.channels
    k = size(t.nz) * t.d
    return Cost(c * k, k, 8 * c * k, 8 * k)


def _graph_xi(s: Site) -> bool:
    return _items(s) and any(offered(u.component, SPMM) for u in s.head.xi.values())


def _spmm_cost(s: Site) -> Cost:
    """Gather/scatter materialises the [E, K] messages twice (index_select, scatter_add); SpMM streams them."""
    t = s.trace
    n_items = size(t.nz)
    e, k = n_items * HINTS["edges_per_item"], (s.head.out or t.d)
    return Cost(e * k, e * k, 8 * 2 * e * k, 8 * n_items * k)


def _instance_xi(t) -> bool:
    return t.info.get("slot") == "xi_instance"


def _linear_instance_xi(t) -> bool:
    """An instance ξ that commutes with ψ: a matrix, not an affine ξ (``(A z + b 1ᵀ) ψᵀ ≠ A z ψᵀ + b 1ᵀ``)."""
    return _instance_xi(t) and not t.info["use"].component.affine()


def _structured(t) -> bool:
    return t.info["use"].component.kind in ("static", "data")


def _graph_term(t) -> bool:
    return offered(t.info["use"].component, SPMM)


def _offers(kernel):
    """A rule's guard and a pattern's test: a ξ of the head (of the term) implements ``kernel``, which applies."""
    return (lambda s: _items(s) and any(offered(u.component, kernel) for u in s.head.xi.values()),
            lambda t: offered(t.info["use"].component, kernel))


def _reorder(m: Match):
    """``reconcile(xi(k))`` → ``xi(reconcile(k))``."""
    xi = m.root.args[0]
    return m.rebuild(xi, (m.rebuild(m.root, (m.binds["k"],)),), spans=m.spans, prov=(m.rule,))


def _one_kappa(m: Match):
    """The channel index leaves the ``expand`` term: every channel's term is then the same (interned) one."""
    t = m.root
    return m.rebuild(t, key=t.key._replace(channel=None), prov=(m.rule,))


ITEMS_RULES: tuple[Rule, ...] = (
    Rule("project_first", "head", "order",
         lambda s: _items(s) and "xi_instance" in s.head.xi and "xi_attribute_post" not in s.head.xi,
         "instance ξ commutes with ψ: A(κ ψᵀ) = (A κ)ψᵀ, so reconcile to n first where n ≤ D (the cost "
         "model: ξ then moves n instead of D features per item)",
         "RPN 2 eq (26) associativity; GCN's XW-first (Kipf & Welling)", benefit=2, cost=_project_first_cost,
         profitable=True, pattern=P("reconcile", P(("xi", "xi_kernel"), "k", where=_linear_instance_xi)),
         rewrite=_reorder),
    Rule("shared_kappa", "head", "share",
         lambda s: _items(s) and s.head.channels > 1 and _xi_paramless(s) and "xi_instance" not in s.head.xi,
         "parameter-free ξ before κ: κ_ξ(X) is the same for every channel, computed once",
         "RPN 2 eq (30) multi-channel heads", benefit=1, cost=_share_cost,
         pattern=P("expand", "z", where=lambda t: t.key.channel is not None), rewrite=_one_kappa),
    Rule("linear", "head", "psi",
         lambda s: ((_items(s) or (s.trace.view == "grid" and not s.trace.grid_kappa))
                    and s.head.psi.name == "identity" and s.head.groups == 1
                    and s.head.bias in ("tied", "none") and "xi_instance" not in s.head.xi),
         "identity ψ (a dense weight) with a tied bias: ψ applied and the bias added by one F.linear (addmm); "
         "on a grid head, on the patches' κ when no convolution took the whole head",
         "RPN 2 eq (26) with identity reconciliation: the perceptron", benefit=1,
         pattern=P("bias", P("reconcile", "k")), rewrite=to("linear")),
    Rule("structured_xi", "head", "xi",
         lambda s: _items(s) and any(u.component.kind in ("static", "data")
                                     for u in s.head.xi.values()),
         "chain → shifts/scans, graph → gather/scatter_add on the edge list, bilinear+softmax → "
         "scaled_dot_product_attention: the interdependence matrix is never built",
         "RPN 2 §5.3-5.5; other_seeds §sparse-matrix view", benefit=1,
         pattern=P("xi", "k", where=_structured), rewrite=to("xi_kernel")),
    Rule("graph_spmm", "head", "graph", _graph_xi,
         "a graph ξ's normalised adjacency as a CSR matrix (dense when n² ≤ 16·nnz), built once per edge tensor "
         "and kept, eagerly and under torch.compile (the opaque custom op rpn2c::graph_mm), applied by one SpMM per "
         "hop, its transpose in the backward: no [E, K] message tensors and no normalisation per call; "
         "gather/scatter_add remains for edge weights that need gradients",
         "RPN 2 eq (81)-(84); other_seeds §sparse-matrix view (ξ as a sparse matrix)", benefit=1, cost=_spmm_cost,
         pattern=P(("xi", "xi_kernel"), "k", where=_graph_term), rewrite=to(SPMM)),
    Rule("fused_parts", "head", "xi", _offers(FUSED_PARTS)[0], FUSED_PARTS.applies.text,
         "RPN 2 eq (85), (114), (119)-(120) hybrid fusions; linearity of the product in A", benefit=2,
         pattern=P(("xi", "xi_kernel"), "k", where=_offers(FUSED_PARTS)[1]), rewrite=to(FUSED_PARTS)),
    Rule("edge_hadamard", "head", "xi", _offers(EDGE_HADAMARD)[0], EDGE_HADAMARD.applies.text,
         "RPN 2 eq (86)-(87) graph mask ∘ bilinear; GAT (Veličković et al.) on the edge list", benefit=2,
         pattern=P(("xi", "xi_kernel"), "k", where=_offers(EDGE_HADAMARD)[1]), rewrite=to(EDGE_HADAMARD)),
)
