"""Parameter reconciliation ψ: R^l -> R^{n×D} (catalog §2.3, paper §7.2), dense and factored.

Every family ``<name>`` provides

* ``<name>_param_shapes(n, D, **hp) -> dict[str, shape]``: the learnable tensors, in the order in which they are split
  from a flat ``w ∈ R^l`` (see :func:`unflatten`); ``l = Σ prod(shape)``;
* ``<name>_buffers(n, D, *, generator, dtype, device, **hp) -> dict[str, Tensor]`` for families with frozen random or
  mask matrices (the caller registers them as buffers so checkpoints restore the function; toolkit bug 9);
* ``<name>_fabricate(params, n, D, **hp) -> Tensor[n, D]``: the literal, dense paper form (the reference);
* ``<name>_apply(x, params, n, D, **hp) -> Tensor[..., n]``: ``x @ ψᵀ`` for ``x: [..., D]``, without building the
  ``n×D`` matrix whenever a factored form is cheaper.

``params`` is a mapping holding both the learnable tensors and the frozen buffers by name. All functions follow the
dtype/device of their inputs and do no host round trips.

Kronecker semantics are those of ``torch.kron``: ``(A ⊗ B)[a·s + i, c·t + j] = A[a, c] B[i, j]``. (The toolkit's
``hm``/``lphm``/``dual_lphm`` and ``duplicated_padding`` compute a reshaped outer product ``vec(A) vec(B)ᵀ`` instead;
bug 3.) Applying ``A ⊗ B`` to ``x`` uses the vec trick: ``x`` reshaped to ``X ∈ R^{q×t}``, ``y = vec(A X Bᵀ)``.

Frozen random matrices default to ``N(0, 1)`` entries (paper eq 163; the toolkit uses ``torch.randn`` for all of
them). ``std="fan_in"`` scales each factor by ``1/sqrt(contracted dim)``, keeping hypernet activations O(1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    import torch
    from torch import Tensor


Shapes = dict[str, tuple[int, ...]]

__all__ = [
    "RECONCILIATIONS",
    "ReconciliationSpec",
    "closest_factors",
    "flatten",
    "get_reconciliation",
    "hm_default_pq",
    "hm_min_params_pq",
    "num_params",
    "unflatten",
]


# --------------------------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------------------------

def closest_factors(k: int) -> tuple[int, int]:
    """``(a, b)`` with ``a·b = k``, ``a ≤ b`` and ``a`` the largest divisor of ``k`` not above ``sqrt(k)``."""
    if int(k) != k or k < 1:
        raise ValueError(f"closest_factors needs a positive integer, got {k}")
    k = int(k)
    for a in range(math.isqrt(k), 0, -1):
        if k % a == 0:
            return a, k // a
    raise AssertionError("unreachable")  # a = 1 always divides


def hm_default_pq(n: int, D: int) -> tuple[int, int]:
    """Default HM block grid (toolkit heuristic): ``p`` = closest factor of ``n``, ``q`` = closest factor of ``D``.

    Balances ``pq`` against ``st`` (both ≈ sqrt(nD) when n and D are near-squares); not always the minimum of
    ``l = pq + (n/p)(D/q)``, see :func:`hm_min_params_pq`.
    """
    return closest_factors(n)[0], closest_factors(D)[0]


def _divisors(k: int) -> list[int]:
    small = [a for a in range(1, math.isqrt(k) + 1) if k % a == 0]
    return sorted(set(small + [k // a for a in small]))


def hm_min_params_pq(n: int, D: int) -> tuple[int, int]:
    """``(p, q)`` minimizing the HM count ``pq + (n/p)(D/q)`` over the divisors of ``n`` and ``D`` (ties: smaller p, q)."""
    n, D = _pos_int("n", n), _pos_int("D", D)
    return min(((p, q) for p in _divisors(n) for q in _divisors(D)),
               key=lambda pq: (pq[0] * pq[1] + (n // pq[0]) * (D // pq[1]), pq))


def _pos_int(name: str, v: int) -> int:
    if int(v) != v or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


def _blocks(n: int, D: int, p: int | None, q: int | None) -> tuple[int, int, int, int]:
    """Validated Kronecker block grid ``(p, q, s, t)`` with ``n = p·s`` and ``D = q·t``."""
    n, D = _pos_int("n", n), _pos_int("D", D)
    dp, dq = hm_default_pq(n, D)
    p = dp if p is None else _pos_int("p", p)
    q = dq if q is None else _pos_int("q", q)
    if n % p:
        raise ValueError(f"n={n} is not divisible by p={p}; choose p among the divisors of n")
    if D % q:
        raise ValueError(f"D={D} is not divisible by q={q}; choose q among the divisors of D")
    return p, q, n // p, D // q


def num_params(shapes: Shapes) -> int:
    """``l = Σ prod(shape)``."""
    return sum(math.prod(s) for s in shapes.values())


def unflatten(w: Tensor, shapes: Shapes) -> dict[str, Tensor]:
    """Split a flat ``w ∈ R^l`` (last axis) into the named tensors of ``shapes``, in order (views, no copy)."""
    import torch

    sizes = [math.prod(s) for s in shapes.values()]
    if w.shape[-1] != sum(sizes):
        raise ValueError(f"w has length {w.shape[-1]}, expected l={sum(sizes)} for {shapes}")
    parts = torch.split(w, sizes, dim=-1)
    return {k: part.reshape(*w.shape[:-1], *s) for (k, s), part in zip(shapes.items(), parts)}


def flatten(params: Mapping[str, Tensor], shapes: Shapes) -> Tensor:
    """Inverse of :func:`unflatten`."""
    import torch

    return torch.cat([params[k].reshape(-1) for k in shapes], dim=-1)


def _random(shape: tuple[int, ...], std: float | str, fan_in: int, generator, dtype, device) -> Tensor:
    import torch

    if std == "fan_in":
        scale = 1.0 / math.sqrt(fan_in)
    elif isinstance(std, (int, float)) and std > 0:
        scale = float(std)
    else:
        raise ValueError(f"std must be a positive float or 'fan_in', got {std!r}")
    # sample on the generator's device, then move: a CPU generator works for any target device
    gdev = generator.device if generator is not None else device
    return (torch.randn(shape, generator=generator, dtype=dtype, device=gdev) * scale).to(device)


def _check_x(x: Tensor, D: int) -> None:
    if x.shape[-1] != D:
        raise ValueError(f"input last axis must be D={D}, got {tuple(x.shape)}")


# --------------------------------------------------------------------------------------------------------------------
# constant / zero / one / eye (l = 0)
# --------------------------------------------------------------------------------------------------------------------

def constant_param_shapes(n: int, D: int, *, c: float = 1.0) -> Shapes:
    return {}


def constant_fabricate(params: Mapping[str, Tensor], n: int, D: int, *, c: float = 1.0,
                       dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> Tensor:
    """``ψ = c · 1_{n×D}``."""
    import torch

    return torch.full((n, D), float(c), dtype=dtype, device=device)


def constant_apply(x: Tensor, params: Mapping[str, Tensor], n: int, D: int, *, c: float = 1.0) -> Tensor:
    """``x (c 1)ᵀ = c · (Σ_j x_j) 1_n``."""
    _check_x(x, D)
    return (c * x.sum(dim=-1, keepdim=True)) * x.new_ones(n)


def zero_fabricate(params, n, D, *, dtype=None, device=None) -> Tensor:
    """``ψ = 0_{n×D}``."""
    return constant_fabricate(params, n, D, c=0.0, dtype=dtype, device=device)


def zero_apply(x, params, n, D) -> Tensor:
    return constant_apply(x, params, n, D, c=0.0)


def one_fabricate(params, n, D, *, dtype=None, device=None) -> Tensor:
    """``ψ = 1_{n×D}``."""
    return constant_fabricate(params, n, D, c=1.0, dtype=dtype, device=device)


def one_apply(x, params, n, D) -> Tensor:
    return constant_apply(x, params, n, D, c=1.0)


def _no_params(n: int, D: int) -> Shapes:
    return {}


def constant_eye_fabricate(params, n, D, *, dtype=None, device=None) -> Tensor:
    """``ψ = I_{n×D}`` (``torch.eye(n, D)``)."""
    import torch

    return torch.eye(n, D, dtype=dtype, device=device)


def constant_eye_apply(x: Tensor, params, n: int, D: int) -> Tensor:
    """``x I_{n×D}ᵀ``: the first ``min(n, D)`` entries of ``x``, zero-padded to ``n``."""
    import torch.nn.functional as F

    _check_x(x, D)
    if n == D:  # I is the identity; F.pad with no padding returns an alias that AOT autograd's backward
        return x  # cannot view (a transposed input), and a copy would be wasted
    k = min(n, D)
    return F.pad(x[..., :k], (0, n - k))


# --------------------------------------------------------------------------------------------------------------------
# identity, masking
# --------------------------------------------------------------------------------------------------------------------

def identity_param_shapes(n: int, D: int) -> Shapes:
    return {"W": (n, D)}


def identity_fabricate(params, n, D) -> Tensor:
    """``ψ(w) = reshape(w) = W ∈ R^{n×D}``."""
    return params["W"]


def identity_apply(x, params, n, D) -> Tensor:
    import torch.nn.functional as F

    _check_x(x, D)
    return F.linear(x, params["W"])


def masking_param_shapes(n: int, D: int, *, p: float = 0.5) -> Shapes:
    return {"W": (n, D)}


def masking_buffers(n: int, D: int, *, p: float = 0.5, generator: torch.Generator | None = None,
                    dtype: torch.dtype | None = None, device=None) -> dict[str, Tensor]:
    """Fixed mask ``M_ij ~ Bernoulli(p)``, ``P(M_ij = 1) = p`` (p = kept fraction, as the toolkit's ``rand < p``).

    Returned in ``dtype`` (0/1 values) for a cheap ``W ⊙ M``. For a resampled mask call this again per step.
    """
    import torch

    if not (0.0 <= p <= 1.0):
        raise ValueError(f"masking p must be in [0, 1], got {p}")
    gdev = generator.device if generator is not None else device
    u = torch.rand((n, D), generator=generator, dtype=dtype or torch.get_default_dtype(), device=gdev)
    return {"mask": (u < p).to(dtype=dtype or torch.get_default_dtype(), device=device)}


def masking_fabricate(params, n, D, *, p: float = 0.5) -> Tensor:
    """``ψ(w) = reshape(w) ⊙ M``. Learnable count stays ``nD`` (masked entries get zero gradient)."""
    return params["W"] * params["mask"]


def masking_apply(x, params, n, D, *, p: float = 0.5) -> Tensor:
    import torch.nn.functional as F

    _check_x(x, D)
    return F.linear(x, params["W"] * params["mask"])


# --------------------------------------------------------------------------------------------------------------------
# duplicated padding, duplicated diagonal padding
# --------------------------------------------------------------------------------------------------------------------

def _dup_grid(n: int, D: int, p: int, q: int | None) -> tuple[int, int, int, int]:
    return _blocks(n, D, p, p if q is None else q)


def duplicated_padding_param_shapes(n: int, D: int, *, p: int = 2, q: int | None = None) -> Shapes:
    p, q, s, t = _dup_grid(n, D, p, q)
    return {"W": (s, t)}


def duplicated_padding_fabricate(params, n, D, *, p: int = 2, q: int | None = None) -> Tensor:
    """``ψ = 1_{p×q} ⊗ W``, ``W ∈ R^{(n/p)×(D/q)}`` (``q`` defaults to ``p``)."""
    import torch

    p, q, _, _ = _dup_grid(n, D, p, q)
    W = params["W"]
    return torch.kron(W.new_ones(p, q), W)


def duplicated_padding_apply(x, params, n, D, *, p: int = 2, q: int | None = None) -> Tensor:
    """Sum the ``q`` blocks of ``x``, multiply by ``Wᵀ``, repeat the result ``p`` times."""
    import torch.nn.functional as F

    _check_x(x, D)
    p, q, s, t = _dup_grid(n, D, p, q)
    y = F.linear(x.unflatten(-1, (q, t)).sum(dim=-2), params["W"])  # [..., s]
    return y.unsqueeze(-2).expand(*y.shape[:-1], p, s).reshape(*y.shape[:-1], n)


def duplicated_diagonal_padding_param_shapes(n: int, D: int, *, p: int = 2, q: int | None = None) -> Shapes:
    p, q, s, t = _dup_grid(n, D, p, q)
    return {"W": (s, t)}


def duplicated_diagonal_padding_fabricate(params, n, D, *, p: int = 2, q: int | None = None) -> Tensor:
    """``ψ = I_{p×q} ⊗ W`` (``torch.eye(p, q)``): ``blockdiag(W, …, W)`` with ``min(p, q)`` copies (``q`` defaults to p)."""
    import torch

    p, q, _, _ = _dup_grid(n, D, p, q)
    W = params["W"]
    return torch.kron(torch.eye(p, q, dtype=W.dtype, device=W.device), W)


def duplicated_diagonal_padding_apply(x, params, n, D, *, p: int = 2, q: int | None = None) -> Tensor:
    """Block ``k`` of ``x`` times ``Wᵀ`` gives output block ``k`` (``k < min(p, q)``); other output blocks are 0."""
    import torch.nn.functional as F

    _check_x(x, D)
    p, q, _, t = _dup_grid(n, D, p, q)
    k = min(p, q)
    y = F.linear(x.unflatten(-1, (q, t))[..., :k, :], params["W"])  # [..., k, s]
    return F.pad(y, (0, 0, 0, p - k)).flatten(-2)


# --------------------------------------------------------------------------------------------------------------------
# low-rank and Kronecker families
# --------------------------------------------------------------------------------------------------------------------

def lorr_param_shapes(n: int, D: int, *, r: int = 2) -> Shapes:
    r = _pos_int("r", r)
    return {"A": (n, r), "B": (D, r)}


def lorr_fabricate(params, n, D, *, r: int = 2) -> Tensor:
    """Eq (162): ``ψ = A Bᵀ``, ``A ∈ R^{n×r}``, ``B ∈ R^{D×r}``, ``l = (n + D) r``."""
    return params["A"] @ params["B"].mT


def lorr_apply(x, params, n, D, *, r: int = 2) -> Tensor:
    """``(x B) Aᵀ``: cost ``r(n + D)`` per row instead of ``nD``."""
    _check_x(x, D)
    return (x @ params["B"]) @ params["A"].mT


def _kron_apply(x: Tensor, left: Tensor, right_t_apply: Callable[[Tensor], Tensor], q: int, t: int) -> Tensor:
    """``(L ⊗ R) x = vec(L X Rᵀ)``: ``X = x`` as ``[q, t]``; ``right_t_apply(X) = X Rᵀ -> [q, s]``; then ``L @``."""
    Z = right_t_apply(x.unflatten(-1, (q, t)))  # [..., q, s]
    return (left @ Z).flatten(-2)  # [..., p, s] -> [..., n]


def hm_param_shapes(n: int, D: int, *, p: int | None = None, q: int | None = None) -> Shapes:
    p, q, s, t = _blocks(n, D, p, q)
    return {"A": (p, q), "B": (s, t)}


def hm_fabricate(params, n, D, *, p: int | None = None, q: int | None = None) -> Tensor:
    """Hypercomplex multiplication: ``ψ = A ⊗ B`` (``torch.kron``), ``A ∈ R^{p×q}``, ``B ∈ R^{(n/p)×(D/q)}``."""
    import torch

    _blocks(n, D, p, q)
    return torch.kron(params["A"], params["B"])


def hm_apply(x, params, n, D, *, p: int | None = None, q: int | None = None) -> Tensor:
    """``vec(A X Bᵀ)``, cost ``q·t·s + p·q·s`` per row."""
    _check_x(x, D)
    _, q, _, t = _blocks(n, D, p, q)
    B = params["B"]
    return _kron_apply(x, params["A"], lambda X: X @ B.mT, q, t)


def lphm_param_shapes(n: int, D: int, *, r: int = 2, p: int | None = None, q: int | None = None) -> Shapes:
    p, q, s, t = _blocks(n, D, p, q)
    r = _pos_int("r", r)
    return {"A": (p, q), "S": (s, r), "T": (r, t)}


def lphm_fabricate(params, n, D, *, r: int = 2, p: int | None = None, q: int | None = None) -> Tensor:
    """Low-rank parameterized HM: ``ψ = A ⊗ (S T)``, ``S ∈ R^{s×r}``, ``T ∈ R^{r×t}``; ``l = pq + r(s + t)``."""
    import torch

    _blocks(n, D, p, q)
    return torch.kron(params["A"], params["S"] @ params["T"])


def lphm_apply(x, params, n, D, *, r: int = 2, p: int | None = None, q: int | None = None) -> Tensor:
    """``vec(A ((X Tᵀ) Sᵀ))``."""
    _check_x(x, D)
    _, q, _, t = _blocks(n, D, p, q)
    S, T = params["S"], params["T"]
    return _kron_apply(x, params["A"], lambda X: (X @ T.mT) @ S.mT, q, t)


def dual_lphm_param_shapes(n: int, D: int, *, r: int = 2, p: int | None = None, q: int | None = None) -> Shapes:
    p, q, s, t = _blocks(n, D, p, q)
    r = _pos_int("r", r)
    return {"P": (p, r), "Q": (r, q), "S": (s, r), "T": (r, t)}


def dual_lphm_fabricate(params, n, D, *, r: int = 2, p: int | None = None, q: int | None = None) -> Tensor:
    """Dual LPHM: ``ψ = (P Q) ⊗ (S T)``, ``P ∈ R^{p×r}``, ``Q ∈ R^{r×q}``; ``l = r(p + q + s + t)``."""
    import torch

    _blocks(n, D, p, q)
    return torch.kron(params["P"] @ params["Q"], params["S"] @ params["T"])


def dual_lphm_apply(x, params, n, D, *, r: int = 2, p: int | None = None, q: int | None = None) -> Tensor:
    """``vec(P (Q ((X Tᵀ) Sᵀ)))``."""
    _check_x(x, D)
    _, q, _, t = _blocks(n, D, p, q)
    P, Q, S, T = params["P"], params["Q"], params["S"], params["T"]
    Z = (x.unflatten(-1, (q, t)) @ T.mT) @ S.mT  # [..., q, s]
    return (P @ (Q @ Z)).flatten(-2)


# --------------------------------------------------------------------------------------------------------------------
# hypernet families (frozen random matrices)
# --------------------------------------------------------------------------------------------------------------------

def hypernet_param_shapes(n: int, D: int, *, l: int = 64, d: int = 128, std: float | str = 1.0) -> Shapes:
    return {"w": (_pos_int("l", l),)}


def hypernet_buffers(n: int, D: int, *, l: int = 64, d: int = 128, std: float | str = 1.0,
                     generator: torch.Generator | None = None, dtype=None, device=None) -> dict[str, Tensor]:
    """Frozen ``H1 ∈ R^{l×d}``, ``H2 ∈ R^{d×nD}`` (``N(0, std²)``; ``std="fan_in"``: ``1/sqrt(l)``, ``1/sqrt(d)``)."""
    l, d = _pos_int("l", l), _pos_int("d", d)
    return {
        "H1": _random((l, d), std, l, generator, dtype, device),
        "H2": _random((d, n * D), std, d, generator, dtype, device),
    }


def hypernet_fabricate(params, n, D, *, l: int = 64, d: int = 128, std: float | str = 1.0) -> Tensor:
    """Eq (165)-(166): ``ψ(w) = reshape(σ(w H1) H2) ∈ R^{n×D}`` (σ = sigmoid, no biases)."""
    import torch

    return (torch.sigmoid(params["w"] @ params["H1"]) @ params["H2"]).reshape(n, D)


def hypernet_apply(x, params, n, D, *, l: int = 64, d: int = 128, std: float | str = 1.0) -> Tensor:
    """Materializes ψ: it is batch-independent, and contracting ``x`` with ``H2`` first would cost ``b·d·nD``."""
    import torch.nn.functional as F

    _check_x(x, D)
    return F.linear(x, hypernet_fabricate(params, n, D))


def random_matrix_adaption_param_shapes(n: int, D: int, *, r: int = 2, std: float | str = 1.0) -> Shapes:
    return {"lambda1": (n,), "lambda2": (_pos_int("r", r),)}


def random_matrix_adaption_buffers(n: int, D: int, *, r: int = 2, std: float | str = 1.0,
                                   generator: torch.Generator | None = None, dtype=None, device=None) -> dict[str, Tensor]:
    """Frozen ``A ∈ R^{n×r}``, ``B ∈ R^{D×r}`` with ``N(0, 1)`` entries (eq 163; ``std`` rescales)."""
    r = _pos_int("r", r)
    return {
        "A": _random((n, r), std, r, generator, dtype, device),
        "B": _random((D, r), std, D, generator, dtype, device),
    }


def random_matrix_adaption_fabricate(params, n, D, *, r: int = 2, std: float | str = 1.0) -> Tensor:
    """VeRA, eq (164): ``ψ = Λ1 A Λ2 Bᵀ``, ``Λ1 = diag(λ1 ∈ R^n)``, ``Λ2 = diag(λ2 ∈ R^r)``; ``l = n + r``. The
    diagonal factors scale A's rows and columns (never an ``n × n`` matrix: n = 10⁵ would be 40 GB)."""
    return (params["lambda1"][:, None] * params["A"] * params["lambda2"]) @ params["B"].mT


def random_matrix_adaption_apply(x, params, n, D, *, r: int = 2, std: float | str = 1.0) -> Tensor:
    """``(((x B) ⊙ λ2) Aᵀ) ⊙ λ1``: cost ``r(n + D)`` per row."""
    _check_x(x, D)
    return (((x @ params["B"]) * params["lambda2"]) @ params["A"].mT) * params["lambda1"]


def random_matrix_hypernet_param_shapes(n: int, D: int, *, r: int = 2, l: int = 64, d: int = 128,
                                        std: float | str = 1.0) -> Shapes:
    return {"w": (_pos_int("l", l),)}


def random_matrix_hypernet_buffers(n: int, D: int, *, r: int = 2, l: int = 64, d: int = 128, std: float | str = 1.0,
                                   generator: torch.Generator | None = None, dtype=None, device=None) -> dict[str, Tensor]:
    """Frozen ``P ∈ R^{l×r}``, ``Q ∈ R^{d×r}``, ``S ∈ R^{d×r}``, ``T ∈ R^{nD×r}`` (``N(0, std²)``;
    ``std="fan_in"`` uses ``1/sqrt`` of the dimension each factor is contracted over: l, r, d, r)."""
    r, l, d = _pos_int("r", r), _pos_int("l", l), _pos_int("d", d)
    return {
        "P": _random((l, r), std, l, generator, dtype, device),
        "Q": _random((d, r), std, r, generator, dtype, device),
        "S": _random((d, r), std, d, generator, dtype, device),
        "T": _random((n * D, r), std, r, generator, dtype, device),
    }


def random_matrix_hypernet_fabricate(params, n, D, *, r: int = 2, l: int = 64, d: int = 128,
                                     std: float | str = 1.0) -> Tensor:
    """Eq (167): ``ψ(w) = reshape((σ((w P) Qᵀ) S) Tᵀ) ∈ R^{n×D}``; never forms ``H1 = P Qᵀ`` or ``H2 = S Tᵀ``."""
    import torch

    h = torch.sigmoid((params["w"] @ params["P"]) @ params["Q"].mT)  # [d]
    return ((h @ params["S"]) @ params["T"].mT).reshape(n, D)


def random_matrix_hypernet_apply(x, params, n, D, *, r: int = 2, l: int = 64, d: int = 128,
                                 std: float | str = 1.0) -> Tensor:
    """Materializes ψ = reshape(T u) (``nD·r``), then one GEMM: cheaper than contracting ``x`` with ``T`` per row."""
    import torch.nn.functional as F

    _check_x(x, D)
    return F.linear(x, random_matrix_hypernet_fabricate(params, n, D, r=r, l=l, d=d))


# --------------------------------------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReconciliationSpec:
    """One reconciliation family. ``hp`` are the family's keyword hyper-parameters (see its functions)."""

    name: str
    formula: str
    param_shapes: Callable[..., Shapes]
    fabricate: Callable[..., Tensor]
    apply: Callable[..., Tensor]
    make_buffers: Callable[..., dict[str, Tensor]] | None = None
    hyperparams: tuple[str, ...] = ()

    def num_params(self, n: int, D: int, **hp) -> int:
        """The learnable parameter count ``l(n, D, **hp)``."""
        return num_params(self.param_shapes(n, D, **hp))

    @property
    def learnable(self) -> bool:
        return self.name not in _PARAMETERLESS


_PARAMETERLESS = frozenset({"constant", "zero", "one", "constant_eye"})


def _spec(name, formula, shapes, fab, app, bufs=None, hp=()):
    return ReconciliationSpec(name, formula, shapes, fab, app, bufs, tuple(hp))


from rpn2c.functional.loha import loha_apply, loha_fabricate, loha_param_shapes  # noqa: E402


RECONCILIATIONS: dict[str, ReconciliationSpec] = {
    s.name: s
    for s in (
        _spec("constant", "c·1_{n×D}; l = 0", constant_param_shapes, constant_fabricate, constant_apply, hp=("c",)),
        _spec("zero", "0_{n×D}; l = 0", _no_params, zero_fabricate, zero_apply),
        _spec("one", "1_{n×D}; l = 0", _no_params, one_fabricate, one_apply),
        _spec("constant_eye", "I_{n×D}; l = 0", _no_params, constant_eye_fabricate, constant_eye_apply),
        _spec("identity", "reshape(w) = W ∈ R^{n×D}; l = nD", identity_param_shapes, identity_fabricate,
              identity_apply),
        _spec("masking", "W ⊙ M, M ~ Bernoulli(p) fixed; l = nD", masking_param_shapes, masking_fabricate,
              masking_apply, masking_buffers, ("p",)),
        _spec("duplicated_padding", "1_{p×q} ⊗ W, W ∈ R^{(n/p)×(D/q)}; l = nD/(pq)",
              duplicated_padding_param_shapes, duplicated_padding_fabricate, duplicated_padding_apply,
              hp=("p", "q")),
        _spec("duplicated_diagonal_padding", "I_{p×q} ⊗ W (block diagonal), W ∈ R^{(n/p)×(D/q)}; l = nD/(pq)",
              duplicated_diagonal_padding_param_shapes, duplicated_diagonal_padding_fabricate,
              duplicated_diagonal_padding_apply, hp=("p", "q")),
        _spec("lorr", "A Bᵀ, A ∈ R^{n×r}, B ∈ R^{D×r}; l = r(n + D)  (eq 162)", lorr_param_shapes,
              lorr_fabricate, lorr_apply, hp=("r",)),
        _spec("loha", "(A1 B1ᵀ) ⊙ (A2 B2ᵀ), A_i ∈ R^{n×r}, B_i ∈ R^{D×r}; l = 2r(n + D)  (LoHa)", loha_param_shapes,
              loha_fabricate, loha_apply, hp=("r",)),
        _spec("hm", "A ⊗ B, A ∈ R^{p×q}, B ∈ R^{(n/p)×(D/q)}; l = pq + nD/(pq)", hm_param_shapes, hm_fabricate,
              hm_apply, hp=("p", "q")),
        _spec("lphm", "A ⊗ (S T), S ∈ R^{s×r}, T ∈ R^{r×t}; l = pq + r(s + t)", lphm_param_shapes,
              lphm_fabricate, lphm_apply, hp=("r", "p", "q")),
        _spec("dual_lphm", "(P Q) ⊗ (S T), P ∈ R^{p×r}, Q ∈ R^{r×q}; l = r(p + q + s + t)",
              dual_lphm_param_shapes, dual_lphm_fabricate, dual_lphm_apply, hp=("r", "p", "q")),
        _spec("hypernet", "reshape(σ(w H1) H2), H1 ∈ R^{l×d}, H2 ∈ R^{d×nD} frozen; l free  (eq 166)",
              hypernet_param_shapes, hypernet_fabricate, hypernet_apply, hypernet_buffers, ("l", "d", "std")),
        _spec("random_matrix_adaption", "Λ1 A Λ2 Bᵀ, A ∈ R^{n×r}, B ∈ R^{D×r} frozen N(0,1); l = n + r  (eq 164)",
              random_matrix_adaption_param_shapes, random_matrix_adaption_fabricate, random_matrix_adaption_apply,
              random_matrix_adaption_buffers, ("r", "std")),
        _spec("random_matrix_hypernet", "reshape((σ((w P) Qᵀ) S) Tᵀ), P, Q, S, T frozen rank r; l free  (eq 167)",
              random_matrix_hypernet_param_shapes, random_matrix_hypernet_fabricate, random_matrix_hypernet_apply,
              random_matrix_hypernet_buffers, ("r", "l", "d", "std")),
    )
}


def get_reconciliation(name: str) -> ReconciliationSpec:
    """Look up a family by name (``ValueError`` listing the known names otherwise)."""
    try:
        return RECONCILIATIONS[name]
    except KeyError:
        raise ValueError(f"unknown reconciliation {name!r}; known: {sorted(RECONCILIATIONS)}") from None
