"""Structural interdependence: grid patches, chains and graphs (RPN 2 paper §5.2).

One module per structure: ``patches`` (grid patch shapes, packing, index tables, conv geometry), ``chain``,
``graph`` (with PageRank), ``band`` and ``masks`` (attention masks), ``bilinear`` (bilinear forms at chosen
entries); this package re-exports their public functions.

Two kinds of builder live here:

* **literal** builders that materialise the paper's matrices (reference lowering, plots, tests);
* **descriptor** builders and appliers for the optimised lowering: patch index tables, conv geometry,
  shifts / cumulative sums along an item axis, edge lists with normalised weights and gather/scatter
  propagation. These never build an ``n x n`` or ``N x P*p`` matrix.

Binding conventions (``docs/semantics.md``):

* Instance matrices are stored **row = output item**: ``Y = A @ X``.
* Grids are flattened row-major over the spatial axes (last axis fastest): ``idx = i*w*d + j*d + k``.
* Patch offsets are listed in lexicographic order (first axis outermost), the row-major flatten order of a
  conv kernel.
* A patch window ``q`` (one index per axis) reads grid positions ``q*stride - pad_before + offset``. With
  centre-relative offsets (``cuboid_offsets`` etc.) and ``pad_before = 0`` this is the paper's centred patch at
  centre ``q*stride``; with start-relative offsets ``a*dilation`` and ``pad_before = p`` it is ``conv``'s
  window. The default patch count per axis is ``ceil(L / stride)`` (the toolkit rule that reproduces the paper's
  parameter counts, catalog §3.4 / §6.3).

Builders take ``device`` / ``dtype`` keyword arguments (``dtype`` defaults to ``torch.get_default_dtype()``,
``device`` to the device of the tensor arguments, else the default device). Build-time functions may use
data-dependent shapes (boolean selection); the per-forward appliers (``gather_patches``, ``chain_apply``,
``graph_propagate``, ``multihop_propagate``, ``pagerank_propagate``) do not synchronise with the host and
capture with ``torch.compile(fullgraph=True)``.
"""

from __future__ import annotations

from rpn2c.functional.structure._common import (  # noqa: F401
    IntOrTuple,
    PaddingMode,
    SparseFormat,
)
from rpn2c.functional.structure.patches import (  # noqa: F401
    cuboid_offsets,
    cylinder_offsets,
    cylinder_rows,
    sphere_offsets,
    sphere_rows,
    kernel_mask,
    PACKING_TABLE,
    packing_lattice,
    packing_layer_shift,
    packing_row_shift,
    packing_strategies,
    packing_stride,
    out_extent,
    centre_counts,
    origin_span,
    reachable_offsets,
    patch_index,
    gather_patches,
    box_sum,
    im2col,
    padding_matrix,
    aggregation_matrix,
)
from rpn2c.functional.structure.lattice import Lattice  # noqa: F401

from rpn2c.functional.structure.counts import pagerank_iterations  # noqa: F401,E402  (torch-free: shape rules)
from rpn2c.lazy import lazy_exports  # noqa: E402

# the builders below need torch at import (custom operators among them): each module is imported on first use
_LAZY = {name: module for module, names in {
    "chain": ("chain_matrix", "chain_edges", "multihop_chain", "chain_inverse_approx", "chain_exponential", "shift",
              "chain_apply", "chain_spectral_apply", "chain_inverse_apply", "chain_exp_apply"),
    "graph": ("check_edge_ids", "coalesce_edges", "graph_norm_weights", "graph_adjacency", "graph_propagate",
              "multihop_graph", "multihop_propagate", "pagerank_matrix", "pagerank_propagate", "attention_edges",
              "edge_softmax", "edge_aggregate", "squaring_pays", "DENSE_MAX", "DENSE_RATIO"),
    "band": ("band_blocked", "band_matrix", "band_outside", "region_matrix", "region_outside"),
    "masks": ("additive_mask", "mask_term"),
    "bilinear": ("bilinear_entries", "row_logsumexp"),
    "graph_cache": ("clear_graph_cache", "graph_mm", "normalized_edges"),
}.items() for name in names}


__all__ = [
    # grid patches
    "cuboid_offsets",
    "cylinder_offsets",
    "cylinder_rows",
    "sphere_offsets",
    "sphere_rows",
    "kernel_mask",
    "PACKING_TABLE",
    "packing_layer_shift",
    "packing_row_shift",
    "packing_strategies",
    "packing_stride",
    "out_extent",
    "centre_counts",
    "origin_span",
    "reachable_offsets",
    "patch_index",
    "gather_patches",
    "box_sum",
    "im2col",
    "padding_matrix",
    "aggregation_matrix",
    "Lattice",
    "packing_lattice",
]
__all__ += [*_LAZY, "pagerank_iterations"]


# a builder of the chain, graph, band, masks, bilinear or graph-cache module, imported on first access (they import
# torch, and the checker reads only the patch shapes above)
__getattr__, __dir__ = lazy_exports(__name__, {name: f".{module}" for name, module in _LAZY.items()}, globals())
