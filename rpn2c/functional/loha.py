"""LoHa / FedPara reconciliation (seed 003 Table 1): ψ = (A1 B1ᵀ) ⊙ (A2 B2ᵀ), A_i ∈ R^{n×r}, B_i ∈ R^{D×r}.

A Hadamard product of two rank-r matrices has rank up to r² from l = 2r(n + D) parameters. The mixed-product rule
(A1 B1ᵀ) ⊙ (A2 B2ᵀ) = (A1 • A2)(B1 • B2)ᵀ (• the row-wise Khatri–Rao product) applies it without forming ψ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

Shapes = dict[str, tuple[int, ...]]


def loha_param_shapes(n: int, D: int, *, r: int = 2) -> Shapes:
    if int(r) != r or r < 1:
        raise ValueError(f"r must be a positive integer, got {r!r}")
    r = int(r)
    return {"A1": (n, r), "B1": (D, r), "A2": (n, r), "B2": (D, r)}


def _face_split(a: Tensor, b: Tensor) -> Tensor:
    """Row-wise Khatri–Rao (face-splitting) product: ``[k, r] • [k, r] -> [k, r²]``, row i = ``a_i ⊗ b_i``."""
    return (a.unsqueeze(-1) * b.unsqueeze(-2)).flatten(-2)


def loha_fabricate(params, n, D, *, r: int = 2) -> Tensor:
    """LoHa / FedPara (seed 003 Table 1): ``ψ = (A1 B1ᵀ) ⊙ (A2 B2ᵀ)``, rank up to r² from ``l = 2r(n + D)``."""
    return (params["A1"] @ params["B1"].mT) * (params["A2"] @ params["B2"].mT)


def loha_apply(x, params, n, D, *, r: int = 2) -> Tensor:
    """``x ψᵀ`` by the mixed-product rule ``(A1 B1ᵀ) ⊙ (A2 B2ᵀ) = (A1 • A2)(B1 • B2)ᵀ`` (• row-wise Khatri–Rao):
    ``(x (B1 • B2)) (A1 • A2)ᵀ`` at ``r²(n + D)`` per row where that is below ``nD``, else through ``ψ``."""
    if x.shape[-1] != D:
        raise ValueError(f"input last axis must be D={D}, got {tuple(x.shape)}")
    if r * r * (n + D) >= n * D:
        return x @ loha_fabricate(params, n, D, r=r).mT
    return (x @ _face_split(params["B1"], params["B2"])) @ _face_split(params["A1"], params["A2"]).mT
