"""Shared types and small helpers of the structural builders."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Literal, TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    import torch
    from torch import Tensor


PaddingMode = Literal["zeros", "circular", "reflect", "replicate"]
SparseFormat = bool | Literal["coo", "csr"]
IntOrTuple = int | Sequence[int]


# ----------------------------------------------------------------------------------------------------------
# small helpers
# ----------------------------------------------------------------------------------------------------------


def _tuple(v: IntOrTuple | None, ndim: int, default: int, name: str) -> tuple[int, ...]:
    if v is None:
        return (default,) * ndim
    if isinstance(v, int):
        return (int(v),) * ndim
    t = tuple(int(a) for a in v)
    if len(t) != ndim:
        raise ValueError(f"{name} has {len(t)} entries, expected {ndim}")
    return t


def _dtype(dtype: torch.dtype | None) -> torch.dtype:
    import torch

    return torch.get_default_dtype() if dtype is None else dtype


def _to_sparse(indices: Tensor, values: Tensor, size: tuple[int, int], sparse: SparseFormat) -> Tensor:
    """COO (duplicates summed, coalesced) or CSR tensor from (row, col) indices."""
    import torch

    coo = torch.sparse_coo_tensor(indices, values, size, check_invariants=True).coalesce()
    if sparse is True or sparse == "coo":
        return coo
    if sparse == "csr":
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            return coo.to_sparse_csr()
    raise ValueError(f"sparse must be False, True, 'coo' or 'csr', got {sparse!r}")
