"""A graph's adjacency ``A[dst, src] = Σ w`` as a CSR matrix, for the cached operator of ``graph_cache``.

The CSR parts ``(crow, col, val)`` are built by sorting an edge list: fixed sizes, no host synchronisation,
duplicates kept (the product sums them). ``graph_cache`` builds ``A`` with the operator and ``Aᵀ`` (with
:func:`_csr_parts` on the swapped edges) lazily, the first time a backward asks for it; ``Aᵀ`` as its own CSR is
~4x faster than transposing in the backward.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor


def _csr_parts(rows: Tensor, cols: Tensor, w: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(crow [n + 1], col [nnz], val [nnz])`` of ``M[rows, cols] = Σ w``."""
    order = torch.sort(rows * n + cols).indices
    r = rows[order]
    crow = torch.zeros(n + 1, dtype=torch.long, device=rows.device).index_add_(0, r + 1, torch.ones_like(r))
    return crow.cumsum(0), cols[order], w[order]


def _csr(crow: Tensor, col: Tensor, val: Tensor) -> Tensor:
    """The ``[n, n]`` sparse CSR tensor of the parts (invariants hold by construction: not checked)."""
    n = crow.numel() - 1
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, col, val, (n, n), check_invariants=False)
