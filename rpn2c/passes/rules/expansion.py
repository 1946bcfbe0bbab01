"""Where κ's structure meets ψ: per-degree ψ blocks.

Slot ``psi`` (shared with ``linear``): ``bias(reconcile(expand[taylor](z)))`` with a dense ψ is
``degree_linear(z)``: ``κ(z)·Wᵀ = Σ_k z^{⊗k}·W_kᵀ`` with ``W = [W₁ | … | W_d]`` split by degree, each block
contracting one factor of z at a time (``functional.expansion.taylor_reconcile``), so the Kronecker powers are
never built. The widest intermediate per row is ``n·m^{d−1}`` instead of ``Σ_k m^k``; the cost model lets it fire
where it adds no work (``n ≤ m`` for d = 2).
"""

from __future__ import annotations

from rpn2c.passes.cost import Cost, elements, size
from rpn2c.passes.rule import P, Rule, Site, to
from rpn2c.passes.rules.heads import stackable


def _taylor(use) -> bool:
    c = use.component
    return c.name == "taylor" and not c.hp.symmetric and c.hp.d >= 2


def _applies(s: Site) -> bool:
    h, t = s.head, s.trace
    return (_taylor(h.kappa) and h.psi.name == "identity" and h.groups == 1 and h.bias in ("tied", "none")
            and not t.grid_kappa and t.view in ("items", "vector", "grid") and not stackable(s))


def _rows(s: Site) -> int:
    """Rows κ acts on per sample: items, output patches, or 1 for a vector."""
    t = s.trace
    if t.view == "grid":
        return elements(*t.spatial_out) if t.spatial_out else elements(*s.data.spatial)
    return size(t.nz) if t.view == "items" else 1


def _blocks_cost(s: Site) -> Cost:
    """Literal: form κ (Σ_{k≥2} m^k products) and one [D] × [D, n] product. Blocks: one [m] × [m, n·Σ_{k<d} m^k]
    product (the same n·D multiply-adds) and the contractions n·Σ_{k=2..d} Σ_{j=1..k−1} m^j."""
    m, d, n = s.trace.mz, s.head.kappa.component.hp.d, s.head.out or s.trace.d
    big_d = sum(m**k for k in range(1, d + 1))
    rows, channels = _rows(s), s.head.channels
    before = rows * (big_d - m + channels * n * big_d)
    contract = n * sum(m**j for k in range(2, d + 1) for j in range(1, k))
    after = rows * channels * (n * big_d + contract)
    return Cost(before, after, 8 * rows * big_d, 8 * rows * n * sum(m**k for k in range(d)))


EXPANSION_RULES: tuple[Rule, ...] = (
    Rule("degree_blocks", "head", "psi", _applies,
         "a Taylor κ under a dense ψ: ψ split into its degree blocks W_k, each z^{⊗k}·W_kᵀ contracting one factor "
         "of z at a time after one F.linear for all degrees: the Kronecker powers z⊗z… are never built",
         "RPN 2 eq (26), §7.1 Taylor expansion (κ(x) = [x, x⊗x, …]); per-degree ψ blocks", benefit=2,
         cost=_blocks_cost, profitable=True,
         pattern=P("bias", P("reconcile", P("expand", "z", where=lambda t: _taylor(t.info["use"])))),
         rewrite=to("degree_linear")),
)
