"""The classical Hopfield network (seed 001 §1.4): Hebbian couplings, the energy and its sign updates.

States are ``X ∈ {−1, +1}^n``; the patterns ``P ∈ {−1, +1}^{s x n}`` are stored by Hebbian learning,
``W = (1/n) Σ_t x_t x_tᵀ`` with the diagonal set to 0 (the seed's constraint ``w_ii = 0``), thresholds ``b_i = θ``.
The energy is ``H(X) = −½ Σ_ij w_ij X_i X_j + Σ_i b_i X_i``; an update sets ``X_i ← sgn(H_i)`` with the local field
``H_i = Σ_j w_ij X_j − b_i`` and ``sgn(0) = +1``: all neurons at once (synchronous) or one after another, i = 1..n
(asynchronous, which never raises H). The sign is taken of ``n H_i = (n W) X − n θ``: for ±1 patterns ``n W`` holds
integers, so a tie (``H_i = 0``) is exact in both lowerings. ``coupling_apply`` computes ``(n W) X`` as
``Pᵀ(P X) − (Σ_t p_ti²) X_i`` without the n x n matrix; ``hebbian_counts`` builds it (reference lowering).
"""

from __future__ import annotations

import torch
from torch import Tensor


def hebbian_counts(patterns: Tensor) -> Tensor:
    """``n W = Pᵀ P`` with a zero diagonal: ``[..., s, n] -> [..., n, n]``."""
    w = patterns.transpose(-1, -2) @ patterns
    return w - torch.diag_embed(torch.diagonal(w, dim1=-2, dim2=-1))


def hebbian_matrix(patterns: Tensor) -> Tensor:
    """``W = (1/n) Σ_t p_t p_tᵀ`` with ``w_ii = 0``."""
    return hebbian_counts(patterns) / patterns.shape[-1]


def coupling_apply(patterns: Tensor, x: Tensor) -> Tensor:
    """``(n W) x`` for states ``x: [..., n]`` from the patterns ``[..., s, n]``, never building W."""
    overlaps = (patterns @ x.unsqueeze(-1)).squeeze(-1)  # [..., s]: p_t · x
    field = (patterns.transpose(-1, -2) @ overlaps.unsqueeze(-1)).squeeze(-1)
    return field - (patterns * patterns).sum(-2) * x


def sign(h: Tensor) -> Tensor:
    """``sgn`` with ``sgn(0) = +1`` (seed 001 §1.4)."""
    return torch.where(h >= 0, torch.ones_like(h), -torch.ones_like(h))


def energy(w: Tensor, x: Tensor, threshold: float = 0.0) -> Tensor:
    """``H(X) = −½ Xᵀ W X + θ Σ_i X_i`` per state: ``[..., n] -> [...]``."""
    return -0.5 * (x * (w @ x.unsqueeze(-1)).squeeze(-1)).sum(-1) + threshold * x.sum(-1)


def update(patterns: Tensor, x: Tensor, steps: int, mode: str, threshold: float = 0.0,
           literal: bool = False) -> Tensor:
    """``steps`` sweeps of the sign update (synchronous: every neuron from the same state; asynchronous: neuron
    i = 0..n−1 in order, each reading the states already updated). ``literal`` multiplies by the built ``n W``."""
    n = x.shape[-1]
    w = hebbian_counts(patterns) if literal else None
    bound = n * threshold
    for _ in range(steps):
        if mode == "synchronous":
            field = (w @ x.unsqueeze(-1)).squeeze(-1) if literal else coupling_apply(patterns, x)
            x = sign(field - bound)
            continue
        for i in range(n):  # asynchronous: one neuron at a time (the dynamics are sequential)
            if literal:
                field = (w[..., i, :] * x).sum(-1)
            else:
                p = patterns[..., i]  # [..., s]: column i of P; (n W x)_i = p · P x − p · p x_i
                overlaps = (patterns @ x.unsqueeze(-1)).squeeze(-1)
                field = (p * overlaps).sum(-1) - (p * p).sum(-1) * x[..., i]
            x = torch.cat([x[..., :i], sign(field - bound).unsqueeze(-1), x[..., i + 1:]], -1)
    return x
