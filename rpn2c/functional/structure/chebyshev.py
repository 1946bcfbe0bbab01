"""Spectral graph filters (ChebNet; seed 001 §7.5): polynomials of the scaled graph Laplacian.

``M = 2 L / λ_max − I`` (``scale``) or ``M = L``, with ``L`` one of (self-loops dropped first, duplicate edges
summed, degrees ``d_j = Σ_i A[i, j]`` as the seed's ``d_m = Σ_n a_nm``, which is PyG's ``get_laplacian``)

* ``none``: ``L = D − A`` (the combinatorial Laplacian);
* ``sym``:  ``L = I − D^{-1/2} A D^{-1/2}`` (the symmetric degree-normalised one);
* ``rw``:   ``L = I − A D^{-1}``;

a node of degree 0 keeps ``L_ii = 1`` in ``sym`` and ``rw`` (its ``D^{-1}`` entry is 0), as PyG. The filter of
order k is ``T_k(M)`` (Chebyshev: ``T_0 = I``, ``T_1 = M``, ``T_k = 2 M T_{k−1} − T_{k−2}``) or ``M^k``.

The literal builders (``laplacian_matrix``, ``polynomial_matrix``) materialise ``M`` and the filter (reference
lowering); ``laplacian_edges`` and ``polynomial_apply`` run the same recurrence on vectors over the edge list
(``y[dst] += w · x[src]`` plus a diagonal), never an ``n x n`` matrix, without host synchronisation.
``polynomial_sum`` is a ChebNet layer's ``Σ_k T_k(M) y_k`` by Clenshaw's recurrence: K − 1 propagations for
orders 0 … K − 1, where applying each ``T_k`` on its own costs Σ_k k = K(K − 1)/2.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rpn2c.functional.structure.graph import dense_from_edges, graph_propagate


def laplacian_edges(edges: Tensor, weight: Tensor | None, n: int, norm: str, lambda_max: float, scale: bool,
                    dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(src, dst, w, diag)`` with ``M x = diag ⊙ x + Σ_{edges} w · x[src] → dst``."""
    src, dst = edges[0].to(device), edges[1].to(device)
    w = torch.ones(src.shape[0], dtype=dtype, device=device) if weight is None else weight.to(device, dtype)
    w = w * (src != dst).to(dtype)  # self-loops dropped (their weight zeroed: no data-dependent shape)
    deg = torch.zeros(n, dtype=dtype, device=device).index_add(0, src, w)
    if norm == "none":
        diag, off = deg, -w
    else:
        inv = torch.where(deg > 0, deg, torch.ones_like(deg)).reciprocal() * (deg > 0).to(dtype)
        if norm == "sym":
            off = -inv.sqrt()[src] * w * inv.sqrt()[dst]
        else:  # rw: L = I − A D^{-1}
            off = -w * inv[src]
        diag = torch.ones(n, dtype=dtype, device=device)
    if scale:
        diag, off = diag * (2.0 / lambda_max) - 1.0, off * (2.0 / lambda_max)
    return src, dst, off, diag


def laplacian_matrix(edges: Tensor, weight: Tensor | None, n: int, norm: str, lambda_max: float, scale: bool,
                     dtype: torch.dtype, device: torch.device) -> Tensor:
    """The literal ``[n, n]`` operator ``M`` (row = output node)."""
    src, dst, off, diag = laplacian_edges(edges, weight, n, norm, lambda_max, scale, dtype, device)
    return dense_from_edges(src, dst, off, n) + torch.diag(diag)


def polynomial_matrix(m: Tensor, order: int, basis: str = "chebyshev") -> Tensor:
    """``T_order(M)`` (Chebyshev) or ``M^order`` (``basis = "power"``), materialised by the recurrence."""
    eye = torch.eye(m.shape[-1], dtype=m.dtype, device=m.device)
    prev, cur = eye, m
    if order == 0:
        return eye
    for _ in range(order - 1):
        prev, cur = cur, (2 * m @ cur - prev if basis == "chebyshev" else m @ cur)
    return cur


def polynomial_apply(z: Tensor, src: Tensor, dst: Tensor, w: Tensor, diag: Tensor, order: int,
                     basis: str = "chebyshev", dim: int = -2) -> Tensor:
    """``T_order(M) z`` (or ``M^order z``) along the item axis ``dim`` by the three-term recurrence on vectors."""
    n = diag.shape[0]
    shape = [1] * z.dim()
    shape[dim % z.dim()] = n
    d = diag.to(z.dtype).reshape(shape)

    def step(x):
        return d * x + graph_propagate(x, src, dst, w, n, dim=dim)

    if order == 0:
        return z
    prev, cur = z, step(z)
    for _ in range(order - 1):
        prev, cur = cur, (2 * step(cur) - prev if basis == "chebyshev" else step(cur))
    return cur


def polynomial_sum(ys: dict[int, Tensor], src: Tensor, dst: Tensor, w: Tensor, diag: Tensor,
                   basis: str = "chebyshev", dim: int = -2) -> Tensor:
    """``Σ_k T_k(M) y_k`` (``basis = "power"``: ``Σ_k M^k y_k``) over the orders k of ``ys`` with max(k)
    propagations: Clenshaw's ``b_k = y_k + 2 M b_{k+1} − b_{k+2}`` from the top order down, then
    ``Σ = y_0 + M b_1 − b_2`` (Horner's ``b_k = y_k + M b_{k+1}`` for the powers)."""
    n = diag.shape[0]
    top = max(ys)
    first = ys[top]
    shape = [1] * first.dim()
    shape[dim % first.dim()] = n
    d = diag.to(first.dtype).reshape(shape)
    cheb = basis == "chebyshev"

    def step(x):
        return d * x + graph_propagate(x, src, dst, w, n, dim=dim)

    if top == 0:
        return first
    b1, b2 = first, None  # b_{k+1}, b_{k+2}
    for k in range(top - 1, 0, -1):
        b = 2 * step(b1) if cheb else step(b1)
        if b2 is not None and cheb:
            b = b - b2
        if k in ys:
            b = b + ys[k]
        b1, b2 = b, b1
    out = step(b1)
    if b2 is not None and cheb:
        out = out - b2
    return out + ys[0] if 0 in ys else out
