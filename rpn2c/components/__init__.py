"""The component registry and every component family (importing this package registers them all)."""

from rpn2c.components import cells, fusion, kappa, kappa_compression, kappa_expansion, ops, pi, processing, psi, xi  # noqa: F401  (registration)
from rpn2c.components import kappa_patches, kappa_pooling, kappa_probabilistic, kappa_sampling, kappa_wavelets  # noqa: F401,E402  (registration: κ catalog)
from rpn2c.components import xi_graph, xi_attention  # noqa: F401,E402  (registration: graph, bilinear ξ)
from rpn2c.components import xi_kernels, xi_learned, xi_hybrid, xi_structural  # noqa: F401,E402  (registration: ξ catalog)
from rpn2c.components import xi_graph_attention  # noqa: F401,E402  (registration: GAT's edge attention)
from rpn2c.components import xi_recurrence  # noqa: F401,E402  (registration: seed 004's recurrence ξ)
from rpn2c.components import cells_selective  # noqa: F401,E402  (registration: selective and complex cells)
from rpn2c.components import sequence  # noqa: F401,E402  (registration: tokens, positions, readouts)
from rpn2c.components import free_params  # noqa: F401,E402  (registration: free learnable tensors)
from rpn2c.components import psi_tied  # noqa: F401,E402  (registration: ψ from another node's weight)
from rpn2c.components import masks  # noqa: F401,E402  (registration: masks computed from token ids)
from rpn2c.components import ops_batch  # noqa: F401,E402  (registration: the opt-in batch interdependence)
from rpn2c.components import layout, pi_more, processing_more  # noqa: F401,E402  (registration: layout ops, more π, processing)
from rpn2c.components import relation  # noqa: F401,E402  (registration: relations as values)
from rpn2c.components.registry import REGISTRY, Entry, all_entries, lookup, names

__all__ = ["REGISTRY", "Entry", "all_entries", "lookup", "names"]