"""Per-node shape traces recorded by the checker and read by the optimiser and the lowerings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class HeadTrace:
    """Per-stage widths and items of one head, as the shape rule inferred them."""

    view: str  # vector | items | grid
    m: int  # features of the data path (after pre)
    n_items: Any  # items of the data path (None for vector)
    mz: int = 0  # features entering κ
    nz: Any = None  # items entering κ
    d: int = 0  # κ output width (after attribute-post ξ)
    dk: int = 0  # κ output width itself (what an attribute-post ξ acts on)
    n: int = 0  # head output width (after channel fusion)
    n_out: Any = None  # output items
    spatial_out: tuple = ()
    geometry: Any = None
    grid_kappa: bool = False  # κ acts on grid features (pooling / elementwise over channels)
    params: int = 0
    scratch: Any = 0  # elements per sample of intermediates besides κ's and ξ's matrices (inner κ, fabricated ψ)
    steps: list = field(default_factory=list)  # (slot, propagations its ξ runs one after another: hops)
    # instance-ξ slots that propagate over an edge list (graph, PageRank): the default lowering never builds their
    # N×N matrix (their edge messages are in ``scratch``); only the reference lowering does
    propagating: list = field(default_factory=list)
    # elements of the structural matrix the reference lowering builds for a grid head (a convolution's or a
    # pooling's padding matrix, an aggregation matrix); symbolic where the grid is
    literal: Any = 0


@dataclass
class RecurrentTrace:
    """Per-layer widths: κ output on each layer input, κ_state output on H."""

    d_in: list[int]
    d_state: int
