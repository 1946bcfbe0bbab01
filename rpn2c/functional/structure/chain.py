"""Chains (catalog §4.1-4.2): literal chain matrices, multi-hop powers and their shift / scan appliers.
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import torch
from torch import Tensor

from rpn2c.functional.structure._common import _dtype


# ----------------------------------------------------------------------------------------------------------
# chain (catalog §4.1–4.2)
# ----------------------------------------------------------------------------------------------------------


def chain_matrix(
    n: int,
    bidirectional: bool = False,
    self_loop: bool = False,
    self_scaling: float = 1.0,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Chain adjacency ``[n, n]``, row = output item: ``A[t, t-1] = 1`` (each item relies on the previous one).

    Bidirectional adds ``A[t, t+1] = 1`` (tridiagonal, 0/1). ``self_loop`` adds ``self_scaling * I`` (eq 75;
    the toolkit's ``self_dependence``/``self_scaling``).
    """
    dt = _dtype(dtype)
    a = torch.zeros(n, n, dtype=dt, device=device)
    if n > 1:
        a = torch.diag(torch.ones(n - 1, dtype=dt, device=device), -1)
    if bidirectional:
        a = a + a.T
    if self_loop:
        a = a + self_scaling * torch.eye(n, dtype=dt, device=device)
    return a


def chain_edges(n: int, bidirectional: bool = False, *, device: torch.device | str | None = None) -> Tensor:
    """The chain as a PyG ``edge_index`` ``[2, E]`` (source row 0, target row 1): edges ``t-1 -> t`` (+ ``t -> t-1``).

    ``graph_adjacency(chain_edges(n, b), n) == chain_matrix(n, b)``; use it for normalised chains.
    """
    t = torch.arange(1, max(n, 1), device=device)
    e = torch.stack([t - 1, t])
    return torch.cat([e, e.flip(0)], dim=1) if bidirectional else e


def _power_sum(a: Tensor, count: int) -> tuple[Tensor, Tensor]:
    """``(Σ_{k<count} A^k, A^count)`` by binary splitting, O(log count) matmuls (``a`` may be batched)."""
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device).expand_as(a)
    if count == 0:
        return torch.zeros_like(a), eye.clone()
    if count % 2 == 1:
        s, p = _power_sum(a, count - 1)
        return s + p, p @ a
    s, p = _power_sum(a, count // 2)
    return s + p @ s, p @ p


def _multihop(a: Tensor, hops: int, accumulate: bool, include_identity: bool) -> Tensor:
    if hops < 0:
        raise ValueError("hops must be >= 0")
    if not accumulate:
        return torch.linalg.matrix_power(a, hops)
    s, _ = _power_sum(a, hops + 1)
    if not include_identity:
        s = s - torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    return s


def multihop_chain(
    n: int,
    hops: int,
    accumulate: bool = False,
    include_identity: bool = True,
    *,
    bidirectional: bool = False,
    self_loop: bool = False,
    self_scaling: float = 1.0,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Multi-hop chain: ``A^h`` (eq 77) or, with ``accumulate``, ``Σ_{k=k0..h} A^k`` (eq 78).

    ``A = chain_matrix(n, bidirectional, self_loop, self_scaling)``. ``k0 = 0`` (``I`` included, the paper's eq 78)
    when ``include_identity`` else ``k0 = 1`` (the toolkit's ``accumulative_matrix_power``). ``include_identity``
    is ignored without ``accumulate`` (``A^0 = I`` anyway). The toolkit's multi-hop chain is ``(A + I)^h``:
    ``self_loop=True``. Uni chain without self-loop: ``A^h[t, t-h] = 1``.
    """
    a = chain_matrix(n, bidirectional, self_loop, self_scaling, device=device, dtype=dtype)
    return _multihop(a, hops, accumulate, include_identity)


def chain_inverse_approx(
    n: int,
    bidirectional: bool = False,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Reciprocal approximation (eq 80), A without self-loop.

    Uni chain: ``(I - A)^{-1} = Σ_{k<n} A^k`` = all-ones lower triangle incl. the diagonal (A is nilpotent).
    Bidirectional: ``I - A`` may be singular, so the paper's fallback ``Σ_{k=0..n-1} A^k`` (eq 78, h = n-1;
    entries count walks and grow like 2^n, so float32 overflows past n ≈ 128). The toolkit instead uses
    ``Σ_{k=1..n-1}`` and column-normalises.
    """
    dt = _dtype(dtype)
    if not bidirectional:
        return torch.tril(torch.ones(n, n, dtype=dt, device=device))
    return multihop_chain(n, max(n - 1, 0), accumulate=True, bidirectional=True, device=device, dtype=dtype)


def chain_exponential(
    n: int,
    bidirectional: bool = False,
    self_loop: bool = False,
    self_scaling: float = 1.0,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Exponential approximation (eq 80): ``exp(A) = Σ_h A^h / h!`` via ``torch.linalg.matrix_exp``.

    Uni chain without self-loop: ``exp(A)[t, t-h] = 1/h!``.
    """
    return torch.linalg.matrix_exp(chain_matrix(n, bidirectional, self_loop, self_scaling, device=device, dtype=dtype))


def shift(x: Tensor, k: int, dim: int = -2) -> Tensor:
    """``y[t] = x[t - k]`` along ``dim`` with zeros shifted in (``k < 0`` shifts the other way).

    ``shift(x, 1, dim)`` is ``chain_matrix(n) @ x`` along ``dim``. ``|k| ≥ n`` gives zeros that stay in ``x``'s
    autograd graph (an empty slice of ``x`` is concatenated), as the reference ``0 @ x`` does.
    """
    d = dim % x.dim()
    n = x.shape[d]
    if k == 0:
        return x
    m = min(abs(k), n)
    zshape = list(x.shape)
    zshape[d] = m
    z = x.new_zeros(zshape)
    if k > 0:
        return torch.cat([z, x.narrow(d, 0, n - m)], dim=d)
    return torch.cat([x.narrow(d, m, n - m), z], dim=d)


def _chain_step(x: Tensor, dim: int, bidirectional: bool, self_loop: bool, self_scaling: float) -> Tensor:
    y = shift(x, 1, dim)
    if bidirectional:
        y = y + shift(x, -1, dim)
    if self_loop:
        y = y + self_scaling * x
    return y


def chain_apply(
    x: Tensor,
    dim: int = -2,
    hops: int = 1,
    *,
    mode: Literal["power", "accumulate", "inverse", "exponential"] = "power",
    bidirectional: bool = False,
    self_loop: bool = False,
    self_scaling: float = 1.0,
    include_identity: bool = True,
    max_terms: int = 32,
) -> Tensor:
    """``M @ x`` along the item axis ``dim`` without building ``M`` (shifts and cumulative sums).

    ``A = chain_matrix(n, bidirectional, self_loop, self_scaling)``, ``n = x.shape[dim]``, and ``M`` is

    * ``"power"``: ``A^hops`` (``multihop_chain``); uni chain without self-loop = one shift by ``hops``;
    * ``"accumulate"``: ``Σ_{k=k0..hops} A^k``, ``k0 = 0 if include_identity else 1`` (sum of shifts);
    * ``"inverse"``: ``chain_inverse_approx`` (uni: ``cumsum``; bi: ``Σ_{k<n} A^k`` hop by hop, O(n) steps);
      no self-loop allowed;
    * ``"exponential"``: ``chain_exponential`` = ``e^s Σ_{k<K} A0^k / k!`` (``A0`` = A without self-loop, Horner).
      Uni chain: ``K = min(n, max_terms)``, exact up to lags ≥ 32 whose weight is ≤ 1/32! ≈ 4e-36;
      bi chain (not nilpotent, ``‖A0‖₂ ≤ 2``): ``K = max_terms``, tail ≤ e²·2^K/K! ≈ 1e-25 for K = 32.
    """
    d = dim % x.dim()
    n = x.shape[d]
    if mode == "power":
        if hops < 0:
            raise ValueError("hops must be >= 0")
        if not bidirectional and not self_loop:
            return shift(x, hops, d)
        y = x
        for _ in range(hops):
            y = _chain_step(y, d, bidirectional, self_loop, self_scaling)
        return y
    if mode == "accumulate":
        if hops < 0:
            raise ValueError("hops must be >= 0")
        if not bidirectional and not self_loop:
            # a running sum of shifts (never all of them at once); an empty sum is a shift by n: zero, yet still
            # attached to x's autograd graph
            acc = shift(x, 0 if include_identity else n, d)
            for k in range(1, min(hops, n - 1) + 1):
                acc = acc + shift(x, k, d)
            return acc
        y = x
        acc = x if include_identity else shift(x, n, d)
        for _ in range(hops):
            y = _chain_step(y, d, bidirectional, self_loop, self_scaling)
            acc = acc + y
        return acc
    if mode == "inverse":
        if self_loop:
            raise ValueError("the inverse approximation is defined on the chain without self-loop")
        if not bidirectional:
            return torch.cumsum(x, dim=d)
        return chain_apply(x, d, max(n - 1, 0), mode="accumulate", bidirectional=True)
    if mode == "exponential":
        terms = min(n, max_terms) if not bidirectional else max_terms
        y = x
        for k in range(terms - 1, 0, -1):
            y = x + _chain_step(y, d, bidirectional, False, 0.0) / k
        return math.exp(self_scaling) * y if self_loop else y
    raise ValueError(f"unknown chain mode {mode!r}")


def _dst1(x: Tensor) -> Tensor:
    """Unnormalised DST-I along the last axis: ``y_k = Σ_j x_j sin(π (j+1)(k+1)/(n+1))`` via one real FFT."""
    n = x.shape[-1]
    z = x.new_zeros(*x.shape[:-1], 1)
    ext = torch.cat([z, x, z, -x.flip(-1)], dim=-1)  # odd extension, length 2(n+1)
    return -0.5 * torch.fft.rfft(ext, dim=-1).imag[..., 1 : n + 1]


def chain_spectral_apply(x: Tensor, fn, dim: int = -2) -> Tensor:
    """``f(T) @ x`` along ``dim`` for the bidirectional 0/1 chain ``T`` (symmetric tridiagonal), never building it.

    ``T = S diag(λ) S`` with ``λ_k = 2cos(π(k+1)/(n+1))`` and the orthogonal, symmetric DST-I basis
    ``S[j, k] = sqrt(2/(n+1)) sin(π(j+1)(k+1)/(n+1))``, so ``f(T) x = (2/(n+1)) DST(f(λ) ⊙ DST(x))``:
    ``O(n log n)`` per column by FFT. ``fn`` maps the eigenvalue tensor ``λ`` (dtype/device of ``x``) to ``f(λ)``
    (e.g. ``lambda lam: 1 / (1 - alpha * (lam + s))`` for ``(I − α(T + sI))^{-1}``).
    """
    d = dim % x.dim()
    n = x.shape[d]
    xm = x.movedim(d, -1)
    k = torch.arange(1, n + 1, dtype=x.dtype, device=x.device)
    lam = 2.0 * torch.cos(math.pi * k / (n + 1))
    y = _dst1(fn(lam) * _dst1(xm)) * (2.0 / (n + 1))
    return y.movedim(-1, d)


def chain_inverse_apply(
    x: Tensor, dim: int = -2, *, alpha: float = 1.0, bidirectional: bool = False, self_scaling: float = 0.0
) -> Tensor:
    """``(I − αA)^{-1} @ x`` along ``dim`` with ``A = chain_matrix(n, bidirectional) + s·I`` (``s = self_scaling``).

    Uni chain (``A = N + sI``, ``N`` nilpotent): ``(1/γ) Σ_{k<n} β^k N^k x`` with ``γ = 1 − αs ≠ 0``, ``β = α/γ``,
    by a doubling scan ``y ← y + β^L shift(y, L)``, ``L = 1, 2, 4, …`` (⌈log₂ n⌉ steps; each entry is the exact
    finite sum). ``α = 1, s = 0`` is the paper's reciprocal form, the all-ones lower triangle (``cumsum``).
    Bidirectional: :func:`chain_spectral_apply` with ``f(λ) = 1/(1 − α(λ + s))``; exact whenever ``I − αA`` is
    invertible (guaranteed for ``|α|(2 + |s|) < 1``, where it equals the Neumann series ``Σ_k α^k A^k``).
    """
    if bidirectional:
        return chain_spectral_apply(x, lambda lam: 1.0 / (1.0 - alpha * (lam + self_scaling)), dim)
    gamma = 1.0 - alpha * self_scaling
    if gamma == 0:
        raise ValueError("I - alpha*A is singular for a uni-directional chain with alpha * self_scaling = 1")
    beta = alpha / gamma
    d = dim % x.dim()
    n = x.shape[d]
    y, L, b = x, 1, beta
    while L < n:
        y = y + b * shift(y, L, d)
        L, b = 2 * L, b * b
    return y / gamma


@functools.lru_cache(maxsize=256)
def _exp_terms(a: float, n: int) -> int:
    """Terms ``K ≤ n`` of ``Σ_k a^k/k!`` kept: all terms above ``2^-60`` times the largest one."""
    if a == 0 or n <= 1:
        return 1
    la = math.log(abs(a))
    logs = [k * la - math.lgamma(k + 1) for k in range(n)]
    top = max(logs)
    keep = [k for k, v in enumerate(logs) if v >= top - 60 * math.log(2)]
    return max(keep) + 1


def chain_exp_apply(
    x: Tensor, dim: int = -2, *, alpha: float = 1.0, bidirectional: bool = False, self_scaling: float = 0.0
) -> Tensor:
    """``exp(αA) @ x`` along ``dim`` with ``A = chain_matrix(n, bidirectional) + s·I`` (eq 80 with a scale α).

    Uni chain: ``e^{αs} Σ_{k<K} α^k N^k x / k!`` by Horner on shifts; ``exp(αN)[t, t−k] = α^k/k!`` exactly, and
    ``K`` drops only terms below ``2^-60`` of the largest (so the result equals ``matrix_exp`` to rounding).
    Bidirectional: :func:`chain_spectral_apply` with ``f(λ) = exp(α(λ + s))`` (exact).
    """
    if bidirectional:
        return chain_spectral_apply(x, lambda lam: torch.exp(alpha * (lam + self_scaling)), dim)
    d = dim % x.dim()
    y = x
    for k in range(_exp_terms(alpha, x.shape[d]) - 1, 0, -1):
        y = x + (alpha / k) * shift(y, 1, d)
    return math.exp(alpha * self_scaling) * y if self_scaling else y
