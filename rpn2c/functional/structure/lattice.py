"""The packings' patch centres at the paper's real-valued distances (§5.2.4–5.2.6, Figs 14–16), rounded per centre.

A packing strategy gives centre distances ``d = (d_h, d_w[, d_d])`` such as ``√3·r`` or ``2√6/3·r``. On a grid the
centre of patch ``q`` is the paper's lattice point rounded half up to a cell:

    c(q) = ⌊q ⊙ d + o(q) + ½⌋,   o(q) = (0, (q_h mod 2)·d_w/2, 0) + layer(q_d mod period)

with the zig-zag rows of the hexagonal packings (odd rows shifted by ``d_w/2``) and the sphere packings' depth layers
over the centroids of the triangles of the layer below, ``layer(k) = (k·d_h/3, (k·d_w/2) mod d_w)`` (face-centred
cubic: period 3, hexagonal: period 2). Every centre is within half a cell of the paper's point per axis, so the
error does not grow along the grid as floored distances do. ``counts`` keeps the centres with ``q_a d_a < L_a − ½``,
the same ``ceil(L_a / d_a)`` as whole-cell distances when ``d_a`` is an integer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    from torch import Tensor

_EPS = 1e-9  # float round-off of products such as √2·r·q that are meant to be exact


@dataclass(frozen=True)
class Lattice:
    """Real-valued centre distances, the zig-zag row shift (``d_w/2`` or 0) and the depth-layer shifts."""

    distances: tuple[float, ...]
    row_shift: float = 0.0
    layers: tuple[tuple[float, float], ...] = ()

    @property
    def whole(self) -> bool:
        """Every distance and shift a whole number of cells: the lattice is the strided one of whole cells."""
        values = [*self.distances, self.row_shift, *(v for pair in self.layers for v in pair)]
        return all(abs(v - round(v)) < _EPS for v in values)

    def count(self, length: int, axis: int) -> int:
        """Centres along ``axis`` of a grid axis of ``length`` cells: the ``q`` with ``q·d < length − ½``."""
        return max(math.ceil((length - 0.5) / self.distances[axis] - _EPS), 1)

    def counts(self, extent: Sequence[int]) -> tuple[int, ...]:
        return tuple(self.count(int(n), a) for a, n in enumerate(extent))

    def centres(self, counts: Sequence[int], device=None) -> Tensor:
        """LongTensor ``[P, ndim]``: the rounded centre of every patch, row-major over ``counts``."""
        import torch

        ndim = len(counts)
        axes = [torch.arange(int(c), device=device, dtype=torch.float64) * self.distances[a]
                for a, c in enumerate(counts)]
        grids = list(torch.meshgrid(*axes, indexing="ij"))
        if self.row_shift and ndim >= 2:
            odd = (torch.arange(int(counts[0]), device=device) % 2).to(torch.float64)
            grids[1] = grids[1] + odd.reshape(-1, *([1] * (ndim - 1))) * self.row_shift
        if self.layers and ndim >= 3:
            table = torch.tensor(self.layers, dtype=torch.float64, device=device).reshape(-1, 2)
            by_layer = table[torch.arange(int(counts[2]), device=device) % len(table)]
            view = (1, 1, -1) + (1,) * (ndim - 3)
            grids[0] = grids[0] + by_layer[:, 0].reshape(view)
            grids[1] = grids[1] + by_layer[:, 1].reshape(view)
        real = torch.stack([g.reshape(-1) for g in grids], dim=-1)
        return torch.floor(real + 0.5 + _EPS).to(torch.long)
