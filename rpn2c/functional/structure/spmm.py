"""Sparse-matrix products as ``torch.library`` custom ops: ``A @ x`` with ``A`` in CSR, in eager and compiled code.

A CSR matrix is passed as its three plain tensors ``(crow, col, val)``, built by sorting an edge list (fixed
sizes, no host synchronisation, duplicates kept and summed by the product), so building and applying it both
trace with ``torch.compile(fullgraph=True)``: the product is one opaque node with a shape rule, and its backward
is the product with the transposed matrix, built alongside (``Aᵀ`` as its own CSR is ~4x faster than
transposing in the backward). Gradients flow to ``x`` only; the values are constants of the graph.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import torch
from torch import Tensor


class CSRPair(NamedTuple):
    """``A`` (row = output item) and ``Aᵀ``, each as ``(crow [n + 1], col [nnz], val [nnz])``."""

    crow: Tensor
    col: Tensor
    val: Tensor
    crow_t: Tensor
    col_t: Tensor
    val_t: Tensor


def _csr_parts(rows: Tensor, cols: Tensor, w: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
    order = torch.sort(rows * n + cols).indices
    r = rows[order]
    crow = torch.zeros(n + 1, dtype=torch.long, device=rows.device).index_add_(0, r + 1, torch.ones_like(r))
    return crow.cumsum(0), cols[order], w[order]


def csr_pair(src: Tensor, dst: Tensor, w: Tensor, n: int, transpose: bool = True) -> CSRPair:
    """``A[dst, src] = Σ w`` and its transpose as CSR parts (``w`` must not need gradients). ``transpose=False``
    leaves ``Aᵀ`` empty: for products that are never differentiated (inference)."""
    a = _csr_parts(dst, src, w, n)
    if transpose:
        return CSRPair(*a, *_csr_parts(src, dst, w, n))
    return CSRPair(*a, a[0].new_zeros(0), a[1].new_zeros(0), a[2].new_zeros(0))


def _csr(crow: Tensor, col: Tensor, val: Tensor) -> Tensor:
    n = crow.numel() - 1
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, col, val, (n, n), check_invariants=False)


@torch.library.custom_op("rpn2c::csr_mm", mutates_args=())
def _csr_mm(crow: Tensor, col: Tensor, val: Tensor, crow_t: Tensor, col_t: Tensor, val_t: Tensor,
            x: Tensor) -> Tensor:
    return _csr(crow, col, val) @ x.contiguous()


@_csr_mm.register_fake
def _(crow, col, val, crow_t, col_t, val_t, x):
    return x.new_empty(crow.shape[0] - 1, x.shape[1])


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:6])


def _backward(ctx, grad):
    crow, col, val, crow_t, col_t, val_t = ctx.saved_tensors
    if ctx.needs_input_grad[6] and crow_t.numel() == 0:
        raise RuntimeError("csr_mm: the matrix was built without its transpose (transpose=False) and cannot be "
                           "differentiated")
    gx = _csr_mm(crow_t, col_t, val_t, crow, col, val, grad) if ctx.needs_input_grad[6] else None
    return None, None, None, None, None, None, gx


_csr_mm.register_autograd(_backward, setup_context=_setup)


def csr_mm(a: CSRPair, x: Tensor) -> Tensor:
    """``A @ x`` for ``x`` of shape ``[n, K]``; differentiable in ``x`` (the backward is ``Aᵀ @ grad``)."""
    return _csr_mm(*a, x)
