"""Grid heads (images, signals, volumes): the patch interdependence ξ fused with κ and ψ into native kernels.

Slot ``grid``: how ``κ(X·A_patch)·ψᵀ`` is computed — one convolution (the whole term
``bias(reconcile(expand(patches(x))))``), or the ``patches`` term alone as a box-sum convolution, im2col, or a
patch gather (any rank).
Slot ``pool``: a patch κ on the grid (``expand`` on the grid): a patch compression as native max/avg pooling, a
patch expansion as im2col.
"""

from __future__ import annotations

from rpn2c.passes.cost import Cost, elements
from rpn2c.passes.rule import P, Rule, Site, to


def _grid_xi(s: Site):
    use = s.head.xi.get("xi_attribute")
    return None if use is None or use.component.kind != "grid" else use.component


def _grid_head(s: Site) -> bool:
    return s.trace.view == "grid" and not s.trace.grid_kappa and _grid_xi(s) is not None


def _lattice(s: Site) -> bool:
    """Patch centres on a strided lattice (a convolution's windows); hexagonal packing's offset rows
    and sphere packings' offset depth layers are not."""
    return _grid_head(s) and not s.trace.geometry.staggered


def _dims(s: Site):
    """(C_in, N, P, p, D, n·channels) of a grid head: D is κ's width on one patch (C·p·d when elementwise)."""
    geo, t = s.trace.geometry, s.trace
    n_in = elements(*s.data.spatial)
    p_out = elements(*t.spatial_out) if t.spatial_out else n_in
    n = (s.head.out or t.d) * s.head.channels
    return s.data.features, n_in, p_out, geo.patch_size, t.d, n


def _patch_cost(s: Site, conv: bool) -> Cost:
    """Literal: X·A_patch with the [N, P·p] padding matrix per channel, κ, then ψ. Kernel: ψ on the patches
    only, reading the κ-expanded grid (conv) or the materialised patches (im2col / gather)."""
    c, n_in, p_out, p, d, n = _dims(s)
    before = c * n_in * p_out * p + p_out * d * n
    after = p_out * d * n // s.head.groups
    moved = d // p * n_in + p_out * n if conv else p_out * d
    return Cost(before, after, 8 * (n_in * p_out * p + p_out * d), 8 * moved)


def _conv_cost(s: Site) -> Cost:
    return _patch_cost(s, conv=True)


def _gather_cost(s: Site) -> Cost:
    return _patch_cost(s, conv=False)


def _box_cost(s: Site) -> Cost:
    c, n_in, p_out, p, d, n = _dims(s)
    return Cost(c * n_in * p_out + p_out * d * n, c * p_out * p + p_out * d * n, 8 * n_in * p_out, 8 * c * p_out)


def _pool_cost(s: Site) -> Cost:
    c, n_in = s.data.features, elements(*s.data.spatial)
    geo = s.trace.geometry or s.head.kappa.component.geometry(len(s.data.spatial))
    # the shape rule's output grid (with ceil_mode's added windows), not the bare geometry's
    out = s.trace.spatial_out or geo.out_spatial(tuple(s.data.spatial))
    p_out, p = elements(*out), geo.patch_size
    return Cost(c * n_in * p_out * p, c * p_out * p, 8 * (n_in * p_out * p + c * p_out * p), 8 * c * p_out)


def _patch_kappa(t) -> bool:
    """An ``expand`` on the grid by a patch expansion κ (its patches as channels)."""
    k = t.info["use"].component
    return t.info.get("grid", False) and k.grid_only and k.family == "expansion"


def _unfolds(s: Site) -> bool:
    k = s.head.kappa.component
    return s.trace.grid_kappa and k.grid_only and k.family == "expansion" and k.unfolds(len(s.data.spatial))


def _native_pool(s: Site) -> bool:
    k = s.head.kappa.component
    return (s.trace.grid_kappa and k.grid_only and k.family == "compression"
            and k.native_pooling(len(s.data.spatial)))


GRID_RULES: tuple[Rule, ...] = (
    Rule("conv", "head", "grid",
         lambda s: _lattice(s) and _grid_xi(s).mode == "padding" and s.head.kappa.component.elementwise,
         "padding-mode grid ξ + elementwise κ + ψ = one convolution over the C·d expanded channels (κ commutes "
         "with the patch gather; padded cells read κ(0)); ψ reshaped to the conv kernel",
         "RPN 2 eq (26)-(27), §5.2 grid-based ξ; CNN as a special case (§6.1)", benefit=3, cost=_conv_cost,
         pattern=P("bias", P("reconcile", P("expand", P("patches", "x")))), rewrite=to("conv")),
    Rule("box_sum", "head", "grid",
         lambda s: _lattice(s) and _grid_xi(s).mode == "aggregation",
         "aggregation-mode grid ξ sums each patch: a depthwise convolution with the patch mask as kernel",
         "RPN 2 §5.2 (aggregation mode)", benefit=2, cost=_box_cost, pattern=P("patches", "x"), rewrite=to("box_sum")),
    Rule("unfold_patches", "head", "grid",
         lambda s: _lattice(s) and _grid_xi(s).mode == "padding" and s.trace.geometry.rank <= 2,
         "patches of a 1-D/2-D grid by im2col (F.unfold after padding), then κ per patch and ψ: a strided copy "
         "whose backward is col2im, not an index scatter",
         "RPN 2 eq (26), §5.2; im2col", benefit=2, cost=_gather_cost, pattern=P("patches", "x"), rewrite=to("unfold")),
    Rule("gather_patches", "head", "grid",
         lambda s: _grid_head(s) and (_grid_xi(s).mode == "padding" or s.trace.geometry.staggered),
         "patches by index (out-of-grid taps read 0; summed per patch in aggregation mode), then κ per patch and "
         "ψ: never the [N, P·p] matrix (any patch lattice, hexagonal packing's offset rows included)",
         "RPN 2 eq (26), §5.2", benefit=1, cost=_gather_cost, pattern=P("patches", "x"),
         rewrite=to("gather_patches")),
    Rule("pool", "head", "pool", _native_pool,
         "a max/min/sum/mean patch compression with zero padding = native pooling (max_pool / depthwise conv)",
         "RPN 2 §7.2 geometric compression, eq (90)", benefit=2, cost=_pool_cost,
         pattern=P("expand", "x", where=lambda t: t.info.get("grid", False)), rewrite=to("pool")),
    Rule("unfold_kappa", "head", "pool", _unfolds,
         "a patch expansion κ with a zero-padded box of taps on a 2-D grid = im2col (F.unfold after padding): a "
         "strided copy whose backward is col2im, not a gather by index and its index scatter",
         "RPN 2 §7.1 geometric expansion, eq (63)-(67); im2col", benefit=2,
         pattern=P("expand", "x", where=_patch_kappa), rewrite=to("kappa_unfold")),
)
