"""The record of a layer's matrix view, ``vec(y) = matrix · u + bias`` (:class:`LayerMatrix`), the error a layer
without one raises, and the guarded dense helpers both views build it with (:mod:`rpn2c.runtime.layer_matrix` for
head layers, :mod:`rpn2c.runtime.recurrence_matrix` for recurrent ones)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

MAX_ENTRIES = 50_000_000  # a dense float64 M of 400 MB


class ViewError(ValueError):
    """The layer has no matrix view (a nonlinear part where a linear one is needed, or no such layer)."""


@dataclass
class LayerMatrix:
    """``vec(y) = matrix · u + bias`` for one layer and one input sample (``u``: see :mod:`rpn2c.runtime.layer_matrix`)."""

    layer: str
    kind: str
    matrix: torch.Tensor  # [out, in]
    bias: torch.Tensor  # [out]
    u: torch.Tensor  # [in]: the vector the matrix multiplies, for the given input
    in_shape: tuple
    out_shape: tuple
    meaning: str
    data_dependent: bool = False
    factors: dict = field(default_factory=dict)
    structure: dict = field(default_factory=dict)
    layout: tuple = ()  # ("grid", P, N): rows (o, q), columns (c, n); ("items", N', N): rows (i, o), columns (j, c)

    def output(self) -> torch.Tensor:
        """``matrix · u + bias`` reshaped to the layer's per-sample output shape (before ``post``)."""
        return (self.matrix @ self.u + self.bias).reshape(self.out_shape)

    def summary(self) -> dict:
        """Shape, non-zeros, density, bandwidths and the structure found (JSON-ready)."""
        r, c = self.matrix.shape
        nz = self.matrix != 0
        out = {"layer": self.layer, "kind": self.kind, "shape": [r, c], "nnz": int(nz.sum()),
               "density": round(float(nz.sum()) / max(r * c, 1), 6)}
        out["lower_bandwidth"], out["upper_bandwidth"] = _bandwidths(nz)
        if self.layout and r % self.layout[1] == 0 and c % self.layout[2] == 0:
            kind, p, n = self.layout
            if kind == "grid":  # the spatial pattern shared by the (output, input) channel blocks
                pattern = nz.reshape(r // p, p, c // n, n).any(2).any(0)
                what = f"output cell × input cell, shared by the {r // p}×{c // n} channel blocks"
            else:  # the item pattern: which input item feeds which output item
                pattern = nz.reshape(p, r // p, n, c // n).any(3).any(1)
                what = f"output item × input item, each a {r // p}×{c // n} block of features"
            out["blocks"] = {"pattern": what, "shape": [p, n]}
            out["blocks"]["lower_bandwidth"], out["blocks"]["upper_bandwidth"] = _bandwidths(pattern)
        return {**out, "input_shape": list(self.in_shape), "output_shape": list(self.out_shape),
                "data_dependent": self.data_dependent, "meaning": self.meaning,
                "factors": {k: list(v.shape) for k, v in self.factors.items()}, **self.structure}


def _bandwidths(nz: torch.Tensor) -> tuple[int, int]:
    """(lower, upper) bandwidth of a 0/1 pattern: the largest ``r − c`` and ``c − r`` of a non-zero."""
    rows, cols = nz.nonzero(as_tuple=True)
    if not rows.numel():
        return 0, 0
    return max(int((rows - cols).max()), 0), max(int((cols - rows).max()), 0)


def _room(*shape: int) -> None:
    """Refuse (ViewError) an array of ``shape`` beyond :data:`MAX_ENTRIES` before it is allocated."""
    entries = math.prod(int(n) for n in shape)
    if entries > MAX_ENTRIES:
        raise ViewError(f"its matrix view needs a {' × '.join(f'{int(n):,}' for n in shape)} array ({entries:,} "
                        f"entries, at most {MAX_ENTRIES:,}); use a smaller input or narrower heads")


def _eye(n: int) -> torch.Tensor:
    _room(n, n)
    return torch.eye(n, dtype=torch.float64)


def _kron(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a ⊗ b`` of two matrices or two vectors, as one broadcast product (``torch.kron`` refuses some strides of
    size-1 axes)."""
    _room(a.numel(), b.numel())
    if a.dim() == 1:
        return (a[:, None] * b[None, :]).reshape(-1)
    return (a[:, None, :, None] * b[None, :, None, :]).reshape(a.shape[0] * b.shape[0], a.shape[1] * b.shape[1])
