"""Data-based interdependence kernels (paper §5.1.3-§5.1.4) and matrix normalizations (§1.9 of the catalog).

Column mode throughout: ``X`` has shape ``[..., b, m]`` (leading batch axes allowed, broadcast with ``Y``) and a
kernel returns ``A`` of shape ``[..., m, m]`` with ``A[i, j] = k(X[:, i], X[:, j])`` (eq 35 / 42).  The two-argument
form ``kernel(X, Y)`` with ``Y: [..., b, m_y]`` returns ``[..., m_x, m_y]``, ``A[i, j] = k(X[:, i], Y[:, j])``
(cross-interdependence).  Instance mode is obtained by the caller passing ``X.mT``.

Everything is a vectorized matrix form (Gram algebra or ``torch.cdist``); nothing loops over attribute pairs, nothing
syncs with the host, and results follow the dtype/device of the inputs.

Paper vs toolkit (tinyBIG) decisions, see catalog §2.5 / §8 item 11:

* exponential: paper ``exp(-γ‖x−y‖₁)`` is the default; the toolkit's ``exp(-γ‖x−y‖₂²)`` is ``norm="2sq"``.
* Minkowski family: paper ``1 − ‖x−y‖_p`` is the default (``form="paper"``); toolkit ``exp(−‖x−y‖_p)`` is ``form="exp"``.
* KL: columns become distributions over the ``b`` entries by softmax (toolkit-compatible, smooth, never log 0);
  ``normalize="abs_sum"`` gives ``(|x| + eps) / Σ(|x| + eps)``.
* RV coefficient, eq (38) with 1-D columns: ``Σ_xy`` is the scalar covariance, so ``RV = cov² / (var_x var_y) = ρ²``
  exactly (the toolkit returns clamped ρ, not ρ², and leaves a 0 diagonal: both are bugs). The diagonal is 1.
* Gaussian MI, eq (39) per pair: ``½ log(σx²σy² / (σx²σy² − σxy²)) = −½ log(1 − ρ²)``. ``+inf`` on the diagonal in
  theory; we cap ``1 − ρ²`` at ``eps`` so every entry is ``≤ ½ log(1/eps)`` (diagonal included), or fill the diagonal
  with a given value (``diagonal=0.0`` reproduces the toolkit).
* Pearson: eq (37) with population std (ddof 0) and the toolkit's all-unbiased (ddof 1) version are both exactly ρ (the
  ddof cancels), which is what we compute; it equals ``numpy.corrcoef``.
* Degenerate columns (zero norm for cosine, zero variance for Pearson/RV/MI) are treated as uncorrelated with every
  column, themselves included: their row and column of ``A`` are 0 (never NaN).
* Symmetric degree normalization is exactly ``D^{-1/2} A D^{-1/2}`` (toolkit ``row_column`` is not; bug 7).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    from torch import Tensor


__all__ = [
    "KERNELS",
    "NORMALIZATIONS",
    "KernelSpec",
    "anisotropic_rbf_kernel",
    "canberra_distance",
    "canberra_kernel",
    "chebyshev_kernel",
    "cosine_similarity_kernel",
    "covariance",
    "degree_normalize",
    "euclidean_kernel",
    "exponential_kernel",
    "gaussian_mutual_information_kernel",
    "gaussian_rbf_kernel",
    "gram",
    "hybrid_kernel",
    "hyperbolic_tangent_kernel",
    "kl_divergence_kernel",
    "laplacian_kernel",
    "linear_kernel",
    "manhattan_kernel",
    "mean_std_normalize",
    "minkowski_distance",
    "minkowski_kernel",
    "normalize_matrix",
    "pearson_correlation_kernel",
    "polynomial_kernel",
    "rv_coefficient",
    "rv_coefficient_kernel",
    "softmax_normalize",
    "sq_euclidean_distance",
]


# --------------------------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------------------------

def _other(X: Tensor, Y: Tensor | None) -> Tensor:
    if X.dim() < 2:
        raise ValueError(f"kernel input must have shape [..., b, m], got {tuple(X.shape)}")
    if Y is None:
        return X
    if Y.dim() < 2 or Y.shape[-2] != X.shape[-2]:
        raise ValueError(f"X {tuple(X.shape)} and Y {tuple(Y.shape)} must share the b axis (-2)")
    return Y


def _fill_diagonal(A: Tensor, value: float) -> Tensor:
    """Out-of-place ``A[..., i, i] = value`` (autograd-safe, no host sync)."""
    import torch

    eye = torch.eye(A.shape[-2], A.shape[-1], dtype=torch.bool, device=A.device)
    return torch.where(eye, torch.as_tensor(value, dtype=A.dtype, device=A.device), A)


def gram(X: Tensor, Y: Tensor | None = None) -> Tensor:
    """Inner products of columns: ``G = Xᵀ Y``, ``[..., m_x, m_y]``."""
    return X.mT @ _other(X, Y)


def covariance(X: Tensor, Y: Tensor | None = None, *, ddof: int = 1) -> Tensor:
    """Column covariance, eq (40)-(41): ``Σ = X'ᵀ Y' / (b − ddof)`` with ``X' = X − 1μᵀ``."""
    Yo = _other(X, Y)
    b = X.shape[-2]
    if b - ddof <= 0:
        raise ValueError(f"covariance needs b > ddof, got b={b}, ddof={ddof}")
    Xc = X - X.mean(dim=-2, keepdim=True)
    Yc = Xc if Y is None else Yo - Yo.mean(dim=-2, keepdim=True)
    return Xc.mT @ Yc / (b - ddof)


def sq_euclidean_distance(X: Tensor, Y: Tensor | None = None, weights: Tensor | float | None = None) -> Tensor:
    """``d²(i, j) = Σ_k a_k (X[k, i] − Y[k, j])²`` via Gram algebra (``a = 1`` by default), clamped at 0.

    ``weights`` is a scalar or a ``[b]`` vector (any sign; no square root is taken, so it is gradient-safe at 0).
    """
    Yo = _other(X, Y)
    Xw = X if weights is None else X * _as_col_weights(weights, X)
    Yw = Yo if weights is None else Yo * _as_col_weights(weights, X)
    xx = (Xw * X).sum(dim=-2)  # [..., m_x]
    yy = (Yw * Yo).sum(dim=-2)  # [..., m_y]
    d2 = xx.unsqueeze(-1) + yy.unsqueeze(-2) - 2.0 * (Xw.mT @ Yo)
    if Y is None:
        d2 = _fill_diagonal(d2, 0.0)
    return d2.clamp_min(0.0) if weights is None or _nonneg(weights) else d2


def _nonneg(weights: Tensor | float) -> bool:
    # Only python scalars are inspected (no host sync on tensors); tensor weights are left unclamped.
    import torch

    return not isinstance(weights, torch.Tensor) and weights >= 0


def _as_col_weights(weights: Tensor | float, X: Tensor) -> Tensor:
    import torch

    a = torch.as_tensor(weights, dtype=X.dtype, device=X.device)
    if a.dim() == 0:
        return a
    if a.shape[-1] != X.shape[-2]:
        raise ValueError(f"anisotropic weights must have length b={X.shape[-2]}, got {tuple(a.shape)}")
    return a.unsqueeze(-1)  # [..., b, 1]


def minkowski_distance(X: Tensor, Y: Tensor | None = None, *, p: float = 2.0) -> Tensor:
    """``d(i, j) = ‖X[:, i] − Y[:, j]‖_p`` for ``p ≥ 1`` or ``p = inf`` (``torch.cdist``, exact mode)."""
    import torch

    Yo = _other(X, Y)
    p = float(p)
    if not (p >= 1.0):
        raise ValueError(f"Minkowski p must be >= 1 or inf, got {p}")
    # exact mode: the matmul shortcut leaves ~sqrt(eps) on the diagonal, visible in 1 - d
    return torch.cdist(X.mT, Yo.mT, p=p, compute_mode="donot_use_mm_for_euclid_dist")


def canberra_distance(X: Tensor, Y: Tensor | None = None) -> Tensor:
    """``d(i, j) = Σ_k |x_k − y_k| / (|x_k| + |y_k|)`` with the ``0/0 = 0`` convention (as scipy).

    Broadcast form: uses ``O(b·m_x·m_y)`` memory.
    """
    import torch

    Yo = _other(X, Y)
    x = X.unsqueeze(-1)  # [..., b, m_x, 1]
    y = Yo.unsqueeze(-2)  # [..., b, 1, m_y]
    num = (x - y).abs()
    den = x.abs() + y.abs()
    zero = den == 0
    ratio = torch.where(zero, torch.zeros_like(num), num / torch.where(zero, torch.ones_like(den), den))
    return ratio.sum(dim=-3)


# --------------------------------------------------------------------------------------------------------------------
# numerical kernels (§5.1.4)
# --------------------------------------------------------------------------------------------------------------------

def linear_kernel(X: Tensor, Y: Tensor | None = None) -> Tensor:
    """Eq (43): ``k(x, y) = <x, y>``, i.e. ``A = Xᵀ Y``."""
    return gram(X, Y)


def polynomial_kernel(X: Tensor, Y: Tensor | None = None, *, c: float = 0.0, d: int = 2) -> Tensor:
    """Eq (44): ``k(x, y) = (<x, y> + c)^d`` (``d`` a non-negative integer)."""
    if int(d) != d or d < 0:
        raise ValueError(f"polynomial degree d must be a non-negative integer, got {d}")
    return (gram(X, Y) + c) ** int(d)


def hyperbolic_tangent_kernel(X: Tensor, Y: Tensor | None = None, *, alpha: float = 1.0, c: float = 0.0) -> Tensor:
    """Eq (45): ``k(x, y) = tanh(α <x, y> + c)``."""
    import torch

    return torch.tanh(alpha * gram(X, Y) + c)


def exponential_kernel(X: Tensor, Y: Tensor | None = None, *, gamma: float = 1.0, norm: str | int = 1) -> Tensor:
    """Eq (46): ``k(x, y) = exp(−γ ‖x − y‖₁)`` (paper, ``norm=1``); ``norm="2sq"``: ``exp(−γ ‖x − y‖₂²)`` (toolkit)."""
    import torch

    if norm in (1, "1", "l1"):
        dist = minkowski_distance(X, Y, p=1.0)
    elif norm in ("2sq", "l2sq"):
        dist = sq_euclidean_distance(X, Y)
    else:
        raise ValueError(f"exponential kernel norm must be 1 or '2sq', got {norm!r}")
    return torch.exp(-gamma * dist)


def cosine_similarity_kernel(X: Tensor, Y: Tensor | None = None, *, eps: float = 1e-8) -> Tensor:
    """Eq (47): ``k(x, y) = <x, y> / (‖x‖ ‖y‖)``.

    Each column is divided by ``max(‖x‖₂, eps)`` (``F.normalize``), so a zero column gives 0 against every column,
    itself included; every other diagonal entry is 1.
    """
    import torch.nn.functional as F

    Yo = _other(X, Y)
    Xn = F.normalize(X, p=2.0, dim=-2, eps=eps)
    Yn = Xn if Y is None else F.normalize(Yo, p=2.0, dim=-2, eps=eps)
    return Xn.mT @ Yn


_MINKOWSKI_FORMS = ("paper", "exp")


def minkowski_kernel(X: Tensor, Y: Tensor | None = None, *, p: float = 2.0, form: str = "paper") -> Tensor:
    """Eq (48)/(53): ``k(x, y) = 1 − ‖x − y‖_p`` (``form="paper"``) or ``exp(−‖x − y‖_p)`` (``form="exp"``, toolkit).

    ``p ≥ 1`` real or ``float("inf")`` (Chebyshev).
    """
    import torch

    dist = minkowski_distance(X, Y, p=p)
    if form == "paper":
        return 1.0 - dist
    if form == "exp":
        return torch.exp(-dist)
    raise ValueError(f"Minkowski kernel form must be one of {_MINKOWSKI_FORMS}, got {form!r}")


def manhattan_kernel(X: Tensor, Y: Tensor | None = None, *, form: str = "paper") -> Tensor:
    """Eq (53), p = 1: ``1 − Σ|x_k − y_k|`` (or ``exp(−·)`` with ``form="exp"``)."""
    return minkowski_kernel(X, Y, p=1.0, form=form)


def euclidean_kernel(X: Tensor, Y: Tensor | None = None, *, form: str = "paper") -> Tensor:
    """Eq (53), p = 2: ``1 − ‖x − y‖₂`` (or ``exp(−·)`` with ``form="exp"``)."""
    return minkowski_kernel(X, Y, p=2.0, form=form)


def chebyshev_kernel(X: Tensor, Y: Tensor | None = None, *, form: str = "paper") -> Tensor:
    """Eq (53), p = ∞: ``1 − max_k |x_k − y_k|`` (or ``exp(−·)`` with ``form="exp"``)."""
    return minkowski_kernel(X, Y, p=math.inf, form=form)


def gaussian_rbf_kernel(X: Tensor, Y: Tensor | None = None, *, sigma: float = 1.0) -> Tensor:
    """Eq (49): ``k(x, y) = exp(−‖x − y‖₂² / (2σ²))`` (diagonal exactly 1)."""
    import torch

    if sigma <= 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    return torch.exp(-sq_euclidean_distance(X, Y) / (2.0 * sigma * sigma))


def laplacian_kernel(X: Tensor, Y: Tensor | None = None, *, sigma: float = 1.0) -> Tensor:
    """Eq (50): ``k(x, y) = exp(−‖x − y‖₁ / σ)``."""
    import torch

    if sigma <= 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    return torch.exp(-minkowski_distance(X, Y, p=1.0) / sigma)


def anisotropic_rbf_kernel(X: Tensor, Y: Tensor | None = None, *, a: Tensor | float = 1.0) -> Tensor:
    """Eq (51): ``k(x, y) = exp(−(x − y) diag(a) (x − y)ᵀ)``, ``a`` a scalar or a ``[b]`` vector of per-entry scales."""
    import torch

    return torch.exp(-sq_euclidean_distance(X, Y, weights=a))


def canberra_kernel(X: Tensor, Y: Tensor | None = None) -> Tensor:
    """Toolkit-only Canberra kernel: ``k(x, y) = exp(−Σ_k |x_k − y_k| / (|x_k| + |y_k|))`` (``0/0 = 0``)."""
    import torch

    return torch.exp(-canberra_distance(X, Y))


def hybrid_kernel(
    X: Tensor,
    Y: Tensor | None = None,
    *,
    kernels: Sequence[Callable[..., Tensor]],
    weights: Sequence[float] | Tensor | None = None,
) -> Tensor:
    """Eq (52): ``k(x, y) = Σ_i α_i k_i(x, y)`` (``α k1 + β k2`` for two kernels; weights default to 1).

    Each ``k_i`` is called as ``k_i(X, Y)`` (bind hyper-parameters with ``functools.partial``).
    """
    if len(kernels) == 0:
        raise ValueError("hybrid kernel needs at least one kernel")
    if weights is None:
        weights = [1.0] * len(kernels)
    if len(weights) != len(kernels):
        raise ValueError(f"{len(kernels)} kernels but {len(weights)} weights")
    out = None
    for k_i, w_i in zip(kernels, weights):  # loop over the (static, few) kernels, not over attributes
        term = w_i * k_i(X, Y)
        out = term if out is None else out + term
    return out


# --------------------------------------------------------------------------------------------------------------------
# statistical kernels (§5.1.3)
# --------------------------------------------------------------------------------------------------------------------

def _kl_log_dist(X: Tensor, normalize: str, eps: float) -> tuple[Tensor, Tensor]:
    """Columns of X as distributions over the b entries: (P, log P)."""
    import torch

    if normalize == "softmax":
        logp = torch.log_softmax(X, dim=-2)
        return logp.exp(), logp
    if normalize == "abs_sum":
        a = X.abs() + eps
        p = a / a.sum(dim=-2, keepdim=True)
        return p, torch.log(p)
    raise ValueError(f"KL normalize must be 'softmax' or 'abs_sum', got {normalize!r}")


def kl_divergence_kernel(
    X: Tensor, Y: Tensor | None = None, *, normalize: str = "softmax", eps: float = 1e-12
) -> Tensor:
    """Eq (36): ``A[i, j] = KL(p_i ‖ q_j) = Σ_k p_i(k) log(p_i(k) / q_j(k))``.

    Each column becomes a distribution over its ``b`` entries: ``softmax`` (default, as the toolkit) or
    ``abs_sum``: ``(|x| + eps) / Σ_k (|x_k| + eps)`` (``eps`` smoothing keeps every log finite; a zero column becomes
    uniform). Matrix form: ``A = h 1ᵀ − Pᵀ log Q`` with ``h_i = Σ_k p_i(k) log p_i(k)``. Asymmetric, ``≥ 0``; the
    single-argument form has an exactly zero diagonal.
    """
    Yo = _other(X, Y)
    P, logP = _kl_log_dist(X, normalize, eps)
    if Y is None:
        logQ = logP
    else:
        _, logQ = _kl_log_dist(Yo, normalize, eps)
    neg_entropy = (P * logP).sum(dim=-2)  # [..., m_x]
    A = neg_entropy.unsqueeze(-1) - P.mT @ logQ
    return _fill_diagonal(A, 0.0) if Y is None else A


def _standardize(X: Tensor, rtol: float | None) -> Tensor:
    """Centered columns scaled to unit L2 norm, ``Z = X' / ‖X'‖``; zero-variance columns become 0.

    A column counts as constant when ``‖X'‖ ≤ rtol · ‖X‖`` (default ``rtol = 100·eps(dtype)``; this catches the
    round-off left by centering a constant column).
    """
    import torch

    if rtol is None:
        rtol = 100.0 * torch.finfo(X.dtype).eps
    Xc = X - X.mean(dim=-2, keepdim=True)
    nc = torch.linalg.vector_norm(Xc, dim=-2, keepdim=True)
    nx = torch.linalg.vector_norm(X, dim=-2, keepdim=True)
    degenerate = nc <= rtol * nx
    safe = torch.where(degenerate, torch.ones_like(nc), nc)
    return torch.where(degenerate, torch.zeros_like(Xc), Xc / safe)


def _correlation(X: Tensor, Y: Tensor | None, rtol: float | None) -> Tensor:
    Yo = _other(X, Y)
    Zx = _standardize(X, rtol)
    Zy = Zx if Y is None else _standardize(Yo, rtol)
    return (Zx.mT @ Zy).clamp(-1.0, 1.0)


def pearson_correlation_kernel(X: Tensor, Y: Tensor | None = None, *, rtol: float | None = None) -> Tensor:
    """Eq (37): ``A[i, j] = ρ(x_i, y_j) = Σ_k (x_k − μx)(y_k − μy) / (b σx σy)``.

    With σ the population std (ddof 0) this is exactly Pearson's ρ; the toolkit's unbiased cov/std (ddof 1) gives the
    same value since the ddof cancels. Equals ``numpy.corrcoef``; symmetric, in ``[−1, 1]``, diagonal 1. Zero-variance
    columns give 0 (see ``_standardize`` for ``rtol``).
    """
    return _correlation(X, Y, rtol)


def rv_coefficient_kernel(X: Tensor, Y: Tensor | None = None, *, rtol: float | None = None) -> Tensor:
    """Eq (38) for 1-D columns: ``tr(Σxy Σyx) / sqrt(tr(Σx²) tr(Σy²)) = σxy² / (σx² σy²) = ρ²``.

    In ``[0, 1]``, symmetric, diagonal 1 (zero-variance columns give 0). Not the toolkit's clamped ρ.
    """
    rho = _correlation(X, Y, rtol)
    return rho * rho


def rv_coefficient(X: Tensor, Y: Tensor, *, ddof: int = 1) -> Tensor:
    """Multivariate RV coefficient of two variable groups, eq (7)/(38): ``X: [..., b, p]``, ``Y: [..., b, q]`` -> ``[...]``.

    ``RV = tr(Σxy Σyx) / sqrt(tr(Σx²) tr(Σy²)) = ‖Σxy‖_F² / (‖Σx‖_F ‖Σy‖_F)`` (Σ symmetric). Reduces to ρ² for
    ``p = q = 1``; 0 when either group has zero variance.
    """
    import torch

    Sxy = covariance(X, Y, ddof=ddof)
    Sx = covariance(X, ddof=ddof)
    Sy = covariance(Y, ddof=ddof)
    num = Sxy.square().sum(dim=(-2, -1))
    den = torch.linalg.matrix_norm(Sx) * torch.linalg.matrix_norm(Sy)
    zero = den == 0
    return torch.where(zero, torch.zeros_like(num), num / torch.where(zero, torch.ones_like(den), den))


def gaussian_mutual_information_kernel(
    X: Tensor,
    Y: Tensor | None = None,
    *,
    eps: float = 1e-6,
    diagonal: float | None = None,
    rtol: float | None = None,
) -> Tensor:
    """Eq (39) per pair of 1-D Gaussian columns: ``½ log(σx² σy² / det Σ_xy) = −½ log(1 − ρ²)`` (nats, ``≥ 0``).

    ``det Σ_xy = σx²σy² − σxy²`` vanishes for perfectly correlated pairs (always on the diagonal), where MI is +inf.
    Convention: ``1 − ρ²`` is floored at ``eps`` so every entry, the diagonal included, is ``≤ ½ log(1/eps)``
    (≈ 6.91 for the default). ``diagonal=v`` instead writes ``v`` on the diagonal of the single-argument form
    (``diagonal=0.0`` is the toolkit's choice). Zero-variance columns give 0.
    """
    import torch

    if not (0.0 < eps <= 1.0):
        raise ValueError(f"eps must be in (0, 1], got {eps}")
    rho = _correlation(X, Y, rtol)
    one_minus = (1.0 - rho * rho).clamp_min(eps)
    A = -0.5 * torch.log(one_minus)
    if diagonal is not None and Y is None:
        A = _fill_diagonal(A, diagonal)
    return A


# --------------------------------------------------------------------------------------------------------------------
# matrix normalizations (post-processing of interdependence matrices)
# --------------------------------------------------------------------------------------------------------------------

def _safe_pow(d: Tensor, exponent: float) -> Tensor:
    """``d^exponent`` where ``d > 0``, else 0 (zero/negative degree -> zero inverse, gradient-safe)."""
    import torch

    pos = d > 0
    safe = torch.where(pos, d, torch.ones_like(d))
    return torch.where(pos, safe.pow(exponent), torch.zeros_like(d))


def _safe_inv(d: Tensor) -> Tensor:
    import torch

    nz = d != 0
    safe = torch.where(nz, d, torch.ones_like(d))
    return torch.where(nz, 1.0 / safe, torch.zeros_like(d))


def degree_normalize(A: Tensor, mode: str = "row", *, degree: str = "row") -> Tensor:
    """Degree normalization of ``A: [..., m, m']``.

    * ``row``: ``D_r⁻¹ A`` with ``D_r = diag(A 1)`` (each non-zero-sum row sums to 1);
    * ``column``: ``A D_c⁻¹`` with ``D_c = diag(1ᵀ A)``;
    * ``symmetric`` (alias ``row_column``): exactly ``D^{-1/2} A D^{-1/2}``. ``degree`` picks ``D``: ``"row"``
      (``D_r`` both sides, default), ``"column"`` (``D_c`` both sides; both need a square ``A``) or ``"split"``
      (``D_r^{-1/2} A D_c^{-1/2}``, any shape). For symmetric ``A`` the three coincide.

    Zero degrees (and non-positive ones under the square root) get a zero inverse, so their rows/columns are zero
    instead of NaN/inf; for non-negative ``A`` such rows are already all zero.
    """
    if mode == "row":
        return A * _safe_inv(A.sum(dim=-1, keepdim=True))
    if mode == "column":
        return A * _safe_inv(A.sum(dim=-2, keepdim=True))
    if mode in ("symmetric", "row_column"):
        if degree == "split":
            left = A.sum(dim=-1)
            right = A.sum(dim=-2)
        elif degree in ("row", "column"):
            if A.shape[-1] != A.shape[-2]:
                raise ValueError(f"symmetric normalization with degree={degree!r} needs a square A, got {tuple(A.shape)}")
            left = right = A.sum(dim=-1) if degree == "row" else A.sum(dim=-2)
        else:
            raise ValueError(f"degree must be 'row', 'column' or 'split', got {degree!r}")
        return _safe_pow(left, -0.5).unsqueeze(-1) * A * _safe_pow(right, -0.5).unsqueeze(-2)
    raise ValueError(f"degree normalization mode must be 'row', 'column' or 'symmetric', got {mode!r}")


def softmax_normalize(A: Tensor, mode: str = "row", *, scale: float = 1.0, mask_zeros: bool = False) -> Tensor:
    """Softmax of ``scale·A`` along rows (``mode="row"``: each row sums to 1) or columns (``"column"``).

    ``scale`` is the toolkit's ``rescale_factor``; the paper's scaled softmax (eq 182) is ``scale = 1/sqrt(r)``.
    ``mask_zeros``: entries of ``A`` that are exactly 0 are excluded (probability 0) and the softmax runs over the
    remaining entries; a row/column whose entries are all 0 yields all zeros (never NaN).
    """
    import torch

    if mode == "row":
        dim = -1
    elif mode == "column":
        dim = -2
    else:
        raise ValueError(f"softmax normalization mode must be 'row' or 'column', got {mode!r}")
    S = A * scale
    if not mask_zeros:
        return torch.softmax(S, dim=dim)
    masked = A == 0
    empty = masked.all(dim=dim, keepdim=True)
    neg_inf = torch.full_like(S, float("-inf"))
    logits = torch.where(masked & ~empty, neg_inf, S)  # fully masked lines stay finite, zeroed below
    P = torch.softmax(logits, dim=dim)
    return torch.where(masked, torch.zeros_like(P), P)


def mean_std_normalize(A: Tensor, mode: str = "row", *, eps: float = 1e-8, unbiased: bool = False) -> Tensor:
    """``(A − mean) / (std + eps)`` per row (``"row"``), per column (``"column"``) or over the whole matrix (``"all"``).

    ``std`` is the population std by default (the result then has unit population variance up to ``eps``);
    ``unbiased=True`` uses ddof 1 as the toolkit does. Leading batch axes are normalized independently.
    """
    import torch

    if mode == "row":
        dims: tuple[int, ...] = (-1,)
    elif mode == "column":
        dims = (-2,)
    elif mode == "all":
        dims = (-2, -1)
    else:
        raise ValueError(f"mean-std normalization mode must be 'row', 'column' or 'all', got {mode!r}")
    mean = A.mean(dim=dims, keepdim=True)
    std = torch.std(A, dim=dims, keepdim=True, correction=1 if unbiased else 0)
    return (A - mean) / (std + eps)


def normalize_matrix(a: Tensor, norm: str, scale: float = 1.0, mask_zeros: bool = False) -> Tensor:
    """Post-normalisation of a row = output matrix ``[..., n', n]`` (degree, softmax, mean-std).

    ``row``: D⁻¹A (each output's weights sum to 1); ``column``: AD⁻¹; ``symmetric``: exactly D^{-1/2} A D^{-1/2}
    with D the row sums (the toolkit's row_column is not, bug 7); ``softmax[_column]``: softmax(scale·A) per row
    (column), optionally over the non-zero entries only; ``mean_std[_column|_all]``: (A − mean)/(std + 1e-8).
    """
    if norm == "none":
        return a
    if norm in ("row", "column", "symmetric"):
        return degree_normalize(a, norm)
    if norm.startswith("softmax"):
        return softmax_normalize(a, "column" if norm.endswith("column") else "row", scale=scale,
                                 mask_zeros=mask_zeros)
    mode = {"mean_std": "row", "mean_std_column": "column", "mean_std_all": "all"}[norm]
    return mean_std_normalize(a, mode)


# --------------------------------------------------------------------------------------------------------------------
# registries
# --------------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelSpec:
    """Registry entry: ``fn(X, Y=None, **hp) -> [..., m_x, m_y]``; ``symmetric``: ``fn(X)`` is symmetric."""

    name: str
    fn: Callable[..., Tensor]
    formula: str
    symmetric: bool
    statistical: bool = False


KERNELS: dict[str, KernelSpec] = {
    s.name: s
    for s in (
        KernelSpec("linear", linear_kernel, "<x, y>  (A = XᵀX), eq 43", True),
        KernelSpec("polynomial", polynomial_kernel, "(<x, y> + c)^d, eq 44", True),
        KernelSpec("hyperbolic_tangent", hyperbolic_tangent_kernel, "tanh(α<x, y> + c), eq 45", True),
        KernelSpec("exponential", exponential_kernel, "exp(−γ‖x−y‖₁) (norm='2sq': exp(−γ‖x−y‖₂²)), eq 46", True),
        KernelSpec("cosine_similarity", cosine_similarity_kernel, "<x, y>/(‖x‖‖y‖), eq 47", True),
        KernelSpec("minkowski", minkowski_kernel, "1 − ‖x−y‖_p (form='exp': exp(−‖x−y‖_p)), eq 48", True),
        KernelSpec("manhattan", manhattan_kernel, "1 − ‖x−y‖₁, eq 53", True),
        KernelSpec("euclidean", euclidean_kernel, "1 − ‖x−y‖₂, eq 53", True),
        KernelSpec("chebyshev", chebyshev_kernel, "1 − ‖x−y‖_∞, eq 53", True),
        KernelSpec("gaussian_rbf", gaussian_rbf_kernel, "exp(−‖x−y‖₂²/(2σ²)), eq 49", True),
        KernelSpec("laplacian", laplacian_kernel, "exp(−‖x−y‖₁/σ), eq 50", True),
        KernelSpec("anisotropic_rbf", anisotropic_rbf_kernel, "exp(−(x−y) diag(a) (x−y)ᵀ), eq 51", True),
        KernelSpec("canberra", canberra_kernel, "exp(−Σ|x−y|/(|x|+|y|)) (toolkit only)", True),
        KernelSpec("hybrid", hybrid_kernel, "Σ α_i k_i(x, y), eq 52", False),
        KernelSpec("kl_divergence", kl_divergence_kernel, "Σ p log(p/q), columns softmax-normalized, eq 36", False, True),
        KernelSpec("pearson_correlation", pearson_correlation_kernel, "ρ(x, y), eq 37", True, True),
        KernelSpec("rv_coefficient", rv_coefficient_kernel, "tr(ΣxyΣyx)/sqrt(tr Σx² tr Σy²) = ρ², eq 38", True, True),
        KernelSpec(
            "mutual_information", gaussian_mutual_information_kernel, "½log(σx²σy²/det Σ) = −½log(1−ρ²), eq 39", True, True
        ),
    )
}

NORMALIZATIONS: dict[str, Callable[..., Tensor]] = {
    "degree": degree_normalize,
    "softmax": softmax_normalize,
    "mean_std": mean_std_normalize,
}
