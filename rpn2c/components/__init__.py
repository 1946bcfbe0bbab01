"""The component registry and every component family. A family's module is imported when one of its names is
first read (``registry.Family``, through ``index.INDEX``), or with all the others when the registry is listed
(``registry.load_all``); ``MODULES`` names them all, in the order they register their components."""

MODULES = (
    "cells", "fusion", "kappa", "kappa_compression", "kappa_expansion", "ops", "pi", "processing", "psi", "xi",
    "kappa_patches", "kappa_pooling", "kappa_probabilistic", "kappa_sampling", "kappa_wavelets",  # κ catalog
    "xi_graph", "xi_attention",  # graph, bilinear ξ
    "xi_kernels", "xi_learned", "xi_hybrid", "xi_structural",  # ξ catalog
    "xi_graph_attention",  # GAT's edge attention
    "xi_recurrence",  # seed 004's recurrence ξ
    "cells_selective",  # selective and complex cells
    "sequence",  # tokens, positions, readouts
    "free_params",  # free learnable tensors
    "psi_tied",  # ψ from another node's weight
    "masks",  # masks computed from token ids
    "position_bias",  # per-head relative position biases (T5, ALiBi)
    "windows",  # shifted-window attention, its bias, patch merging (Swin)
    "ops_batch",  # the opt-in batch interdependence
    "layout", "pi_more", "processing_more",  # layout ops, more π, processing
    "relation",  # relations as values
    "sequence_conv",  # the short causal depthwise convolution
    "readouts",  # one item of a sequence, one step of a signal
    "xi_spectral",  # spectral graph ξ (ChebNet)
    "hopfield",  # the classical Hopfield network
    "xi_preprocessed",  # ξ's input pre-processing (§5.1.1)
)

from rpn2c.components.registry import REGISTRY, Entry, all_entries, load_all, lookup, names  # noqa: E402

__all__ = ["MODULES", "REGISTRY", "Entry", "all_entries", "load_all", "lookup", "names"]
