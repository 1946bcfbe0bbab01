"""Data expansion functions kappa: R^m -> R^D (RPN v1 [89] and RPN 2 paper §7.1).

Every function is ``f(x, *, <hyper-params>) -> Tensor`` acting on the LAST axis: ``x`` is ``[..., m]``, the output is
``[..., D]``. Functions are pure, vectorized over every leading axis and over m, and follow ``x``'s dtype and device.

Layout convention for elementwise multi-output expansions (polynomials, trig families, RBF, B-spline, Fourier,
probabilistic, wavelets of order 1): **attribute-major, basis fastest**, ``out[..., i*k + j] = g_j(x_i)``, i.e. the
function computes ``[..., m, k]`` and flattens the last two axes. The toolkit (tinyBIG) uses the same layout for the
polynomials, RBF, B-spline and wavelets, but concatenates whole blocks (``[g_1(x), g_2(x), ...]``, block-major) for
trig/hyperbolic, Fourier and the probabilistic families; :func:`attribute_to_block` / :func:`block_to_attribute`
convert between the two (a pure permutation of psi's columns). The constant term (order 0) is never included in a
polynomial expansion.

``EXPANSIONS`` gives each κ registry entry of ``rpn2c.components.kappa_expansion`` its maths by the entry's name:
the function, its dimension rule and when it is elementwise. The entry is the catalog: its docstring, hyper-parameter
schema (defaults, bounds) and aliases are the only ones.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    import torch
    from torch import Tensor


__all__ = [
    "EXPANSIONS",
    "PROB_FAMILIES",
    "WAVELETS",
    "arc_hyperbolic",
    "arc_trigonometric",
    "attribute_to_block",
    "bessel",
    "beta_mother",
    "block_to_attribute",
    "bspline",
    "chebyshev",
    "combination_index",
    "combinatorial",
    "combinatorial_normal",
    "dog",
    "extended",
    "fibonacci",
    "fourier",
    "gaussian_rbf",
    "gegenbauer",
    "haar",
    "hermite",
    "hybrid_probabilistic",
    "hyperbolic",
    "identity",
    "inverse_quadratic_rbf",
    "jacobi",
    "laguerre",
    "legendre",
    "linear",
    "log_pdf",
    "lucas",
    "meyer",
    "mvn_equicorrelated_log_pdf",
    "naive_probabilistic",
    "nested",
    "probabilistic",
    "reciprocal",
    "reverse_bessel",
    "ricker",
    "shannon",
    "taylor",
    "taylor_reconcile",
    "trigonometric",
    "wavelet",
]


# ----------------------------------------------------------------------------------------------------------------------
# The maths of one registry entry
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransformSpec:
    """The maths behind one κ registry entry: ``fn(x, **kw)`` with output width ``dim(m, **kw)``.

    An implementation detail of the components (``FunctionalKappa``), not a catalog: it has no docs, defaults or
    aliases of its own. ``elementwise``: True when ``out[..., i*k + j] = g_j(x_i)`` for every hyper-parameter choice
    (so a gather on the attribute axis commutes with kappa, up to the layout); ``elementwise_when(**kw)`` refines it
    for hyper-parameter dependent cases (Taylor d=1, wavelet order 1, nested chains).
    """

    fn: Callable[..., Tensor]
    dim: Callable[..., int]
    elementwise: bool
    elementwise_when: Callable[..., bool] | None = None
    stacks_degrees: bool = False  # fn(x, axis=k): the d values of each element stacked at axis k, unflattened

    def is_elementwise(self, **hp: Any) -> bool:
        """Elementwise for these hyper-parameters."""
        if self.elementwise:
            return True
        return bool(self.elementwise_when(**hp)) if self.elementwise_when is not None else False

    def width(self, **hp: Any) -> int:
        """Outputs per attribute k (D = m*k) for an elementwise transformation."""
        if not self.is_elementwise(**hp):
            raise ValueError("width() is only defined for elementwise transformations")
        return self.dim(1, **hp)


# ----------------------------------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------------------------------


def _check_degree(d: int, name: str = "d") -> int:
    if isinstance(d, bool) or int(d) != d or d < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {d!r}")
    return int(d)


def _flat(y: Tensor) -> Tensor:
    """[..., m, k] -> [..., m*k] (attribute-major)."""
    return y.flatten(-2)


def attribute_to_block(y: Tensor, k: int) -> Tensor:
    """Re-lay ``[..., m*k]`` from attribute-major (``i*k + j``) to block-major (``j*m + i``, the toolkit's cat)."""
    m = y.shape[-1] // k
    return y.unflatten(-1, (m, k)).transpose(-1, -2).flatten(-2)


def block_to_attribute(y: Tensor, k: int) -> Tensor:
    """Inverse of :func:`attribute_to_block`."""
    m = y.shape[-1] // k
    return y.unflatten(-1, (k, m)).transpose(-1, -2).flatten(-2)


def _three_term(x: Tensor, d: int, p0: Tensor | float, p1: Tensor,
                step: Callable[[int, Tensor, Tensor, Tensor], Tensor], axis: int | None = None) -> Tensor:
    """[P_1(x), ..., P_d(x)] attribute-major, from P_0, P_1 and ``P_n = step(n, x, P_{n-1}, P_{n-2})``.

    A constant P_0 is a Python number (no tensor of ones). ``axis``: the degrees stacked at that axis instead,
    unflattened (a grid [B, C, *S] with ``axis=2`` gives [B, C, d, *S], a convolution's channel layout, without a
    copy)."""
    import torch

    d = _check_degree(d)
    outs = [p1]
    prev2, prev1 = p0, p1
    for n in range(2, d + 1):
        cur = step(n, x, prev1, prev2)
        outs.append(cur)
        prev2, prev1 = prev1, cur
    if axis is not None:
        return torch.stack(outs, dim=axis)
    return _flat(torch.stack(outs, dim=-1))


@functools.lru_cache(maxsize=128)
def _combination_tuples(m: int, r: int, with_replacement: bool) -> list[tuple[int, ...]]:
    # itertools, not torch.combinations: a constant under torch.compile (torch's has a data-dependent length)
    return list((itertools.combinations_with_replacement if with_replacement else itertools.combinations)(range(m), r))


def combination_index(m: int, r: int, *, with_replacement: bool = False,
                      device: torch.device | str | None = None) -> Tensor:
    """All r-subsets (or multisets) of range(m) in lexicographic order, shape [C, r] (long)."""
    import torch

    if r < 1 or (not with_replacement and r > m):
        raise ValueError(f"cannot take {r}-combinations of {m} attributes")
    # the tuples are cached, not the tensor: one made while torch.export traces is a fake tensor, which a later
    # eager call would receive
    tuples = _combination_tuples(int(m), int(r), bool(with_replacement))
    return torch.tensor(tuples, dtype=torch.long, device=torch.device(device or "cpu")).reshape(-1, r)


def _n_comb(m: int, r: int, with_replacement: bool = False) -> int:
    return math.comb(m + r - 1, r) if with_replacement else math.comb(m, r)


# ----------------------------------------------------------------------------------------------------------------------
# Basic: identity, reciprocal, linear
# ----------------------------------------------------------------------------------------------------------------------


def identity(x: Tensor) -> Tensor:
    """kappa(x) = x."""
    return x


def reciprocal(x: Tensor, *, eps: float = 1e-6) -> Tensor:
    """kappa(x) = 1/x', x' = x with |x| < eps pushed to sign(x)*eps (0 -> +eps), so |kappa| <= 1/eps.

    Same convention as the toolkit but without writing into ``x``. kappa(0) = 1/eps (1e6 by default); the
    gradient is 0 inside the clamped band.
    """
    import torch

    if eps <= 0:
        raise ValueError("eps must be > 0")
    safe = torch.where(x >= 0, x.clamp(min=eps), x.clamp(max=-eps))
    return torch.reciprocal(safe)


def linear(x: Tensor, *, C: Tensor | None = None, c: float | None = None) -> Tensor:
    """kappa(x) = x @ C with a constant C [m, D], or c*x for a scalar c (C wins if both are given)."""
    if C is not None:
        if C.dim() != 2 or C.shape[0] != x.shape[-1]:
            raise ValueError(f"C must be [m, D] with m={x.shape[-1]}, got {tuple(C.shape)}")
        return x @ C.to(dtype=x.dtype, device=x.device)
    if c is not None:
        return x * c
    return x


def _dim_linear(m: int, C: Tensor | None = None, **_: Any) -> int:
    if C is not None:
        if C.shape[0] != m:
            raise ValueError(f"C has {C.shape[0]} rows, input has m={m}")
        return int(C.shape[1])
    return m


# ----------------------------------------------------------------------------------------------------------------------
# Taylor (Kronecker powers) and Fourier
# ----------------------------------------------------------------------------------------------------------------------


def taylor(x: Tensor, *, d: int = 2, symmetric: bool = False) -> Tensor:
    """kappa(x) = [x, x⊗x, ..., x^{⊗d}], D = Σ_k m^k; ``x⊗x`` index ``i*m + j`` (Kronecker order).

    ``symmetric=True`` keeps each monomial once (i1 <= i2 <= ... <= ik, lexicographic): D = Σ_k C(m+k-1, k).
    """
    import torch

    d = _check_degree(d)
    m = x.shape[-1]
    outs = [x]
    if symmetric:
        for k in range(2, d + 1):
            idx = combination_index(m, k, with_replacement=True, device=x.device)
            outs.append(x[..., idx].prod(dim=-1))
    else:
        p = x
        for _ in range(2, d + 1):
            p = (p.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2)
            outs.append(p)
    return torch.cat(outs, dim=-1)


def taylor_reconcile(x: Tensor, weight: Tensor, bias: Tensor | None = None, *, d: int = 2) -> Tensor:
    """``taylor(x, d)·Wᵀ + b`` without building κ: ``W = [W₁ | W₂ | … | W_d]`` in κ's degree blocks, and
    ``x^{⊗k}·W_kᵀ`` contracts one factor of x at a time (per-degree ψ blocks).

    ``W_k[n, i₁…i_k]`` viewed ``[n·m^{k−1}, m]`` gives ``u = x·W_kᵀ = Σ_{i_k} W_k[n, i₁…i_k] x_{i_k}`` (one
    ``F.linear`` for every degree at once); each further ``(u·x).sum`` contracts the next factor. The widest
    intermediate is ``n·m^{d−1}`` per row instead of κ's ``D = Σ_k m^k``: the same multiply-adds for the product,
    less memory whenever ``n < m``.
    """
    import torch

    d = _check_degree(d)
    m, n = x.shape[-1], weight.shape[0]
    if weight.shape[-1] != _dim_taylor(m, d):
        raise ValueError(f"taylor_reconcile: W has {weight.shape[-1]} columns, κ has {_dim_taylor(m, d)}")
    blocks, sizes, start = [], [], 0
    for k in range(1, d + 1):
        blocks.append(weight[:, start:start + m**k].reshape(n * m ** (k - 1), m))
        sizes.append(n * m ** (k - 1))
        start += m**k
    parts = torch.nn.functional.linear(x, torch.cat(blocks) if d > 1 else blocks[0]).split(sizes, dim=-1)
    y = parts[0]
    for k, u in enumerate(parts[1:], start=2):
        for _ in range(k - 1):  # contract the next factor: [..., n·m^{j}] -> [..., n·m^{j−1}]
            u = (u.unflatten(-1, (-1, m)) * x.unsqueeze(-2)).sum(-1)
        y = y + u
    return y if bias is None else y + bias


def _dim_taylor(m: int, d: int = 2, symmetric: bool = False, **_: Any) -> int:
    d = _check_degree(d)
    if symmetric:
        return sum(math.comb(m + k - 1, k) for k in range(1, d + 1))
    return sum(m**k for k in range(1, d + 1))


def fourier(x: Tensor, *, P: float = 10.0, N: int = 5) -> Tensor:
    """Per attribute [cos(2π·1·x/P), sin(2π·1·x/P), ..., cos(2π·N·x/P), sin(2π·N·x/P)], D = 2mN.

    Layout: attribute-major, then harmonic n, then (cos, sin). The toolkit concatenates block-major
    ``[cos_1(x), sin_1(x), cos_2(x), ...]`` (each block m wide): use ``attribute_to_block(y, 2N)``.
    """
    import torch

    N = _check_degree(N, "N")
    if P == 0:
        raise ValueError("P must be nonzero")
    n = torch.arange(1, N + 1, dtype=x.dtype, device=x.device)
    arg = (2.0 * math.pi / P) * x.unsqueeze(-1) * n
    return torch.stack((torch.cos(arg), torch.sin(arg)), dim=-1).flatten(-3)


# ----------------------------------------------------------------------------------------------------------------------
# Trigonometric / hyperbolic families (toolkit: 3 functions each, D = 3m)
# ----------------------------------------------------------------------------------------------------------------------


_TRIG_FUNCS: Mapping[str, tuple[str, ...]] = MappingProxyType({  # each name is the torch function's
    "hyperbolic": ("sinh", "cosh", "tanh"),
    "trigonometric": ("sin", "cos", "tan"),
    "arc_hyperbolic": ("asinh", "acosh", "atanh"),
    "arc_trigonometric": ("asin", "acos", "atan"),
})
# the toolkit's domain squash of the arc families: s = sigmoid(x), then an affine map per function
_SQUASH = {"asinh": (1.0, 0.0), "acosh": (1.0, 1.01), "atanh": (0.99, 0.0),
           "asin": (0.99, 0.0), "acos": (0.99, 0.0), "atan": (1.0, 0.0)}


def _trig_family(family: str, x: Tensor, functions: Sequence[str] | None, squash: bool = False) -> Tensor:
    """Per attribute [f_1(x), ..., f_k(x)] for the family's functions (all three, or ``functions`` in that order).

    Only the requested functions are evaluated, so an unused one outside its domain cannot poison the gradient.
    """
    import torch

    table = {n: getattr(torch, n) for n in _TRIG_FUNCS[family]}
    names = tuple(table) if functions is None else tuple(functions)
    if not names or len(set(names)) != len(names) or any(n not in table for n in names):
        raise ValueError(f"functions must be distinct names from {tuple(table)}, got {functions!r}")
    u = torch.sigmoid(x) if squash else x
    parts = []
    for n in names:
        a, b = _SQUASH[n] if squash else (1.0, 0.0)
        parts.append(table[n](a * u + b if (a, b) != (1.0, 0.0) else u))
    return _flat(torch.stack(parts, dim=-1))


def hyperbolic(x: Tensor, *, functions: Sequence[str] | None = None) -> Tensor:
    """Per attribute [sinh x, cosh x, tanh x] (or the listed ``functions``), D = 3m (m·len(functions))."""
    return _trig_family("hyperbolic", x, functions)


def arc_hyperbolic(x: Tensor, *, squash: bool = True, functions: Sequence[str] | None = None) -> Tensor:
    """Per attribute [asinh s, acosh(s + 1.01), atanh(0.99 s)], s = sigmoid(x) (toolkit domain squash), D = 3m.

    ``squash=False`` gives raw [asinh x, acosh x, atanh x] (caller guarantees x >= 1 resp. |x| < 1).
    ``functions`` picks a subset (e.g. ``["asinh"]``), D = m·len(functions).
    """
    return _trig_family("arc_hyperbolic", x, functions, squash)


def trigonometric(x: Tensor, *, functions: Sequence[str] | None = None) -> Tensor:
    """Per attribute [sin x, cos x, tan x] (or the listed ``functions``), D = 3m (m·len(functions))."""
    return _trig_family("trigonometric", x, functions)


def arc_trigonometric(x: Tensor, *, squash: bool = True, functions: Sequence[str] | None = None) -> Tensor:
    """Per attribute [asin(0.99 s), acos(0.99 s), atan s], s = sigmoid(x) (toolkit domain squash), D = 3m.

    ``squash=False`` gives raw [asin x, acos x, atan x] (caller guarantees |x| <= 1).
    ``functions`` picks a subset, D = m·len(functions).
    """
    return _trig_family("arc_trigonometric", x, functions, squash)


def _dim_trig(m: int, functions: Sequence[str] | None = None, **_: Any) -> int:
    return m * (3 if functions is None else len(functions))


# ----------------------------------------------------------------------------------------------------------------------
# Radial basis functions around fixed centres
# ----------------------------------------------------------------------------------------------------------------------


def _centres(x: Tensor, num_centres: int, grid_range: Sequence[float], centres: Tensor | None) -> Tensor:
    import torch

    if centres is not None:
        return centres.to(dtype=x.dtype, device=x.device).reshape(-1)
    num_centres = _check_degree(num_centres, "num_centres")
    lo, hi = float(grid_range[0]), float(grid_range[1])
    return torch.linspace(lo, hi, num_centres, dtype=x.dtype, device=x.device)


def gaussian_rbf(x: Tensor, *, num_centres: int = 10, grid_range: Sequence[float] = (-1.0, 1.0),
                 sigma: float = 1.0, centres: Tensor | None = None) -> Tensor:
    """Per attribute exp(-((x - c_j)/sigma)^2), c = linspace(lo, hi, num_centres); D = m*num_centres.

    The toolkit's ``epsilon`` is 1/sigma. ``centres`` overrides the linspace grid.
    """
    import torch

    if sigma <= 0:
        raise ValueError("sigma must be > 0")
    c = _centres(x, num_centres, grid_range, centres)
    return _flat(torch.exp(-(((x.unsqueeze(-1) - c) / sigma) ** 2)))


def inverse_quadratic_rbf(x: Tensor, *, num_centres: int = 10, grid_range: Sequence[float] = (-1.0, 1.0),
                          sigma: float = 1.0, centres: Tensor | None = None) -> Tensor:
    """Per attribute 1/(1 + ((x - c_j)/sigma)^2), c = linspace(lo, hi, num_centres); D = m*num_centres."""
    import torch

    if sigma <= 0:
        raise ValueError("sigma must be > 0")
    c = _centres(x, num_centres, grid_range, centres)
    return _flat(torch.reciprocal(1.0 + ((x.unsqueeze(-1) - c) / sigma) ** 2))


def _dim_rbf(m: int, num_centres: int = 10, centres: Tensor | None = None, **_: Any) -> int:
    return m * (int(centres.numel()) if centres is not None else _check_degree(num_centres, "num_centres"))


# ----------------------------------------------------------------------------------------------------------------------
# Probabilistic (log-likelihood) expansions
# ----------------------------------------------------------------------------------------------------------------------

_LOG_2PI = math.log(2.0 * math.pi)


def _lp_normal(x: Tensor, loc: float = 0.0, scale: float = 1.0) -> Tensor:
    return -0.5 * ((x - loc) / scale) ** 2 - math.log(scale) - 0.5 * _LOG_2PI


def _lp_cauchy(x: Tensor, loc: float = 0.0, scale: float = 1.0) -> Tensor:
    import torch

    return -math.log(math.pi * scale) - torch.log1p(((x - loc) / scale) ** 2)


def _lp_laplace(x: Tensor, loc: float = 0.0, scale: float = 1.0) -> Tensor:
    return -math.log(2.0 * scale) - (x - loc).abs() / scale


def _lp_chi2(x: Tensor, df: float = 1.0) -> Tensor:
    import torch

    k2 = 0.5 * df
    return (k2 - 1.0) * torch.log(x) - 0.5 * x - k2 * math.log(2.0) - math.lgamma(k2)


def _lp_gamma(x: Tensor, concentration: float = 1.0, rate: float = 1.0) -> Tensor:
    import torch

    a = concentration
    return a * math.log(rate) + (a - 1.0) * torch.log(x) - rate * x - math.lgamma(a)


def _lp_exponential(x: Tensor, rate: float = 1.0) -> Tensor:
    return math.log(rate) - rate * x


def _lp_uniform(x: Tensor, low: float = 0.0, high: float = 1.0) -> Tensor:
    import torch

    inside = (x >= low) & (x <= high)
    return torch.where(inside, torch.full_like(x, -math.log(high - low)), torch.full_like(x, -math.inf))


# name -> (log-pdf, positive support?)
_LOG_PDFS: dict[str, tuple[Callable[..., Tensor], bool]] = {
    "normal": (_lp_normal, False),
    "cauchy": (_lp_cauchy, False),
    "laplace": (_lp_laplace, False),
    "chi2": (_lp_chi2, True),
    "gamma": (_lp_gamma, True),
    "exponential": (_lp_exponential, True),
    "uniform": (_lp_uniform, False),
}

#: Parameter sets of the toolkit's 6-member (chi2: 2-member) families; the first one is the "naive" member.
#: normal/cauchy/laplace: (loc, scale); chi2: (df,); gamma: (concentration, rate); exponential: (rate,).
PROB_FAMILIES: Mapping[str, tuple[tuple[float, ...], ...]] = MappingProxyType({
    "normal": ((0.0, 1.0), (1.0, 1.0), (-1.0, 1.0), (0.0, 0.1), (1.0, 0.1), (-1.0, 0.1)),
    "cauchy": ((0.0, 1.0), (0.0, 0.5), (1.0, 1.0), (1.0, 0.5), (-1.0, 1.0), (-1.0, 0.5)),
    "laplace": ((0.0, 1.0), (0.0, 2.0), (1.0, 1.0), (1.0, 2.0), (-1.0, 1.0), (-1.0, 2.0)),
    "chi2": ((1.0,), (2.0,)),
    "gamma": ((0.5, 1.0), (0.5, 2.0), (1.0, 1.0), (1.0, 2.0), (2.0, 1.0), (2.0, 2.0)),
    "exponential": ((0.5,), (0.75,), (1.0,), (2.0,), (3.0,), (5.0,)),
})


def positive_squash(x: Tensor) -> Tensor:
    """0.99*sigmoid(x) + 0.001 in (0.001, 0.991): the toolkit's map onto a positive support."""
    import torch

    return 0.99 * torch.sigmoid(x) + 0.001


def log_pdf(x: Tensor, dist: str, params: Sequence[float] = (), *, squash: bool = True) -> Tensor:
    """Elementwise log-density of ``dist`` with ``params``; positive-support laws see positive_squash(x) if squash."""
    if dist not in _LOG_PDFS:
        raise ValueError(f"unknown distribution {dist!r}; known: {sorted(_LOG_PDFS)}")
    fn, positive = _LOG_PDFS[dist]
    if positive and squash:
        x = positive_squash(x)
    return fn(x, *params)


def probabilistic(x: Tensor, *, dist: str = "normal", params: Sequence[Sequence[float]] | None = None,
                  squash: bool = True) -> Tensor:
    """Per attribute [log p(x | theta_1), ..., log p(x | theta_K)], D = mK (toolkit: K=6, chi2 K=2).

    Positive-support laws (chi2, gamma, exponential) evaluate at 0.99*sigmoid(x)+0.001 when ``squash`` (toolkit).
    """
    import torch

    if params is None:
        if dist not in PROB_FAMILIES:
            raise ValueError(f"no default parameter family for {dist!r}")
        params = PROB_FAMILIES[dist]
    if len(params) == 0:
        raise ValueError("params must be non-empty")
    return _flat(torch.stack([log_pdf(x, dist, p, squash=squash) for p in params], dim=-1))


def naive_probabilistic(x: Tensor, *, dist: str = "normal", params: Sequence[float] | None = None,
                        squash: bool = True) -> Tensor:
    """kappa(x) = log p(x | theta) elementwise, D = m; default theta = first member of PROB_FAMILIES[dist]."""
    if params is None:
        params = PROB_FAMILIES[dist][0] if dist in PROB_FAMILIES else ()
    return log_pdf(x, dist, params, squash=squash)


_HYBRID = (("normal", (0.0, 1.0)), ("cauchy", (0.0, 1.0)), ("chi2", (1.0,)), ("gamma", (0.5, 1.0)),
           ("laplace", (0.0, 1.0)), ("exponential", (1.0,)))


def hybrid_probabilistic(x: Tensor, *, squash: bool = True) -> Tensor:
    """Per attribute log-pdfs [N(0,1), Cauchy(0,1), chi2(1), Gamma(0.5,1), Laplace(0,1), Exp(1)], D = 6m."""
    import torch

    return _flat(torch.stack([log_pdf(x, dist, p, squash=squash) for dist, p in _HYBRID], dim=-1))


# ----------------------------------------------------------------------------------------------------------------------
# Combinatorial expansions
# ----------------------------------------------------------------------------------------------------------------------


def combinatorial(x: Tensor, *, d: int = 2, with_replacement: bool = False) -> Tensor:
    """Concatenate every r-combination tuple of attributes, r = 1..d (lexicographic), D = Σ_r r·C(m, r)."""
    import torch

    d = _check_degree(d)
    m = x.shape[-1]
    outs = [x[..., combination_index(m, r, with_replacement=with_replacement, device=x.device)].flatten(-2)
            for r in range(1, d + 1)]
    return torch.cat(outs, dim=-1)


def _dim_combinatorial(m: int, d: int = 2, with_replacement: bool = False, **_: Any) -> int:
    d = _check_degree(d)
    return sum(r * _n_comb(m, r, with_replacement) for r in range(1, d + 1))


def mvn_equicorrelated_log_pdf(t: Tensor, *, loc: float = 0.0, scale: float = 1.0, rho: float = 0.0) -> Tensor:
    """log N(t | loc·1, scale²((1-rho)I + rho·11ᵀ)) over the last axis (length r), closed form.

    log p = -(r log 2π + logdet Σ + (|z|² - rho/(1+(r-1)rho)·(Σz)²)/(1-rho))/2, z = (t-loc)/scale,
    logdet Σ = 2r log scale + (r-1) log(1-rho) + log(1+(r-1)rho). Requires -1/(r-1) < rho < 1.
    """
    r = t.shape[-1]
    if not (rho < 1.0 and (r == 1 or rho > -1.0 / (r - 1))) or scale <= 0:
        raise ValueError(f"invalid equicorrelated normal: r={r}, rho={rho}, scale={scale}")
    z = (t - loc) / scale
    denom = 1.0 + (r - 1) * rho
    maha = ((z * z).sum(-1) - (rho / denom) * z.sum(-1) ** 2) / (1.0 - rho)
    logdet = 2.0 * r * math.log(scale) + (r - 1) * math.log1p(-rho) + math.log(denom)
    return -0.5 * (r * _LOG_2PI + logdet + maha)


def combinatorial_normal(x: Tensor, *, d: int = 1, with_replacement: bool = False, loc: float = 0.0,
                         scale: float = 1.0, rho: float = 0.0) -> Tensor:
    """log N(x_S | loc, Σ_r) for every attribute r-subset S, r = 1..d (lexicographic), D = Σ_r C(m, r).

    Σ_r = scale²((1-rho)I + rho·11ᵀ); the toolkit's combinatorial_normal_expansion is loc=0, scale=1, rho=0.
    """
    import torch

    d = _check_degree(d)
    m = x.shape[-1]
    outs = []
    for r in range(1, d + 1):
        tuples = x[..., combination_index(m, r, with_replacement=with_replacement, device=x.device)]
        outs.append(mvn_equicorrelated_log_pdf(tuples, loc=loc, scale=scale, rho=rho))
    return torch.cat(outs, dim=-1)


def _dim_combinatorial_normal(m: int, d: int = 1, with_replacement: bool = False, **_: Any) -> int:
    d = _check_degree(d)
    return sum(_n_comb(m, r, with_replacement) for r in range(1, d + 1))


# ----------------------------------------------------------------------------------------------------------------------
# B-spline (KAN style)
# ----------------------------------------------------------------------------------------------------------------------


def bspline(x: Tensor, *, grid_size: int = 5, order: int = 3, grid_range: Sequence[float] = (-1.0, 1.0)) -> Tensor:
    """Per attribute the G+k B-spline basis functions of degree k=order on the uniform knots
    g_j = lo + (j - k)h, j = 0..G+2k, h = (hi - lo)/G (Cox–de Boor):

    B_{j,0} = [g_j <= x < g_{j+1}],  B_{j,p} = ((x - g_j) B_{j,p-1} + (g_{j+p+1} - x) B_{j+1,p-1}) / (p h).
    D = m(G + k). Sums to 1 on [lo, hi); 0 outside [g_0, g_{G+2k}).
    """
    import torch

    G = _check_degree(grid_size, "grid_size")
    if isinstance(order, bool) or int(order) != order or order < 0:
        raise ValueError(f"order must be an integer >= 0, got {order!r}")
    k = int(order)
    lo, hi = float(grid_range[0]), float(grid_range[1])
    if not hi > lo:
        raise ValueError("grid_range must have hi > lo")
    h = (hi - lo) / G
    g = lo + (torch.arange(G + 2 * k + 1, dtype=x.dtype, device=x.device) - k) * h
    xe = x.unsqueeze(-1)
    basis = ((xe >= g[:-1]) & (xe < g[1:])).to(x.dtype)
    for p in range(1, k + 1):
        left = (xe - g[: -(p + 1)]) * basis[..., :-1]
        right = (g[p + 1:] - xe) * basis[..., 1:]
        basis = (left + right) / (p * h)
    return _flat(basis)


# ----------------------------------------------------------------------------------------------------------------------
# Orthogonal / recursive polynomials, degrees 1..d (constant term excluded), D = m*d
# ----------------------------------------------------------------------------------------------------------------------


def chebyshev(x: Tensor, *, d: int = 2, kind: int = 1, axis: int | None = None) -> Tensor:
    """Chebyshev T_n (kind=1: T_1 = x) or U_n (kind=2: U_1 = 2x); P_n = 2x P_{n-1} - P_{n-2}, n = 1..d."""
    if kind not in (1, 2):
        raise ValueError("kind must be 1 or 2")
    p1 = x if kind == 1 else 2.0 * x
    return _three_term(x, d, 1.0, p1, lambda n, x, a, b: 2.0 * x * a - b, axis=axis)


def jacobi(x: Tensor, *, d: int = 2, alpha: float = 1.0, beta: float = 1.0, axis: int | None = None) -> Tensor:
    """Jacobi P_n^{(α,β)}: P_1 = (α-β)/2 + (α+β+2)x/2;
    2n(n+α+β)(2n+α+β-2) P_n = (2n+α+β-1)[(2n+α+β)(2n+α+β-2)x + α²-β²] P_{n-1} - 2(n+α-1)(n+β-1)(2n+α+β) P_{n-2}.
    """
    a, b = float(alpha), float(beta)
    if a <= -1 or b <= -1:
        raise ValueError("jacobi needs alpha, beta > -1")

    def step(n: int, x: Tensor, p1: Tensor, p2: Tensor) -> Tensor:
        s = 2 * n + a + b
        c1 = 2 * n * (n + a + b) * (s - 2)
        c2 = (s - 1) * s * (s - 2)
        c3 = (s - 1) * (a * a - b * b)
        c4 = 2 * (n + a - 1) * (n + b - 1) * s
        return ((c2 * x + c3) * p1 - c4 * p2) / c1

    return _three_term(x, d, 1.0, 0.5 * (a - b) + 0.5 * (a + b + 2) * x, step, axis=axis)


def hermite(x: Tensor, *, d: int = 2, kind: str = "probabilist", axis: int | None = None) -> Tensor:
    """Probabilist's He_n (paper eq 124): He_1 = x, He_n = x He_{n-1} - (n-1) He_{n-2};
    ``kind="physicist"``: H_1 = 2x, H_n = 2x H_{n-1} - 2(n-1) H_{n-2}."""
    if kind == "probabilist":
        return _three_term(x, d, 1.0, x, lambda n, x, a, b: x * a - (n - 1) * b, axis=axis)
    if kind == "physicist":
        return _three_term(x, d, 1.0, 2.0 * x, lambda n, x, a, b: 2.0 * x * a - 2.0 * (n - 1) * b, axis=axis)
    raise ValueError("kind must be 'probabilist' or 'physicist'")


def laguerre(x: Tensor, *, d: int = 2, alpha: float = 1.0, axis: int | None = None) -> Tensor:
    """Generalized Laguerre (paper eq 129–130): P_1 = 1 + α - x,
    P_n = ((2n - 1 + α - x) P_{n-1} - (n - 1 + α) P_{n-2}) / n. (The toolkit's P_1 = 1 + α + x is a sign bug.)"""
    a = float(alpha)
    return _three_term(x, d, 1.0, (1.0 + a) - x,
                       lambda n, x, p1, p2: ((2 * n - 1 + a - x) * p1 - (n - 1 + a) * p2) / n, axis=axis)


def legendre(x: Tensor, *, d: int = 2, axis: int | None = None) -> Tensor:
    """Legendre (Bonnet): P_1 = x, P_n = ((2n-1) x P_{n-1} - (n-1) P_{n-2}) / n."""
    return _three_term(x, d, 1.0, x, lambda n, x, a, b: ((2 * n - 1) * x * a - (n - 1) * b) / n, axis=axis)


def gegenbauer(x: Tensor, *, d: int = 2, alpha: float = 1.0, axis: int | None = None) -> Tensor:
    """Gegenbauer C_n^{(α)}: C_1 = 2αx, C_n = (2x(n-1+α) C_{n-1} - (n+2α-2) C_{n-2}) / n (α=1/2 Legendre, α=1 U_n).

    Orthogonal for α > -1/2, α ≠ 0; at α = 0 this recurrence gives the zero sequence (scipy uses a limit instead).
    """
    a = float(alpha)
    return _three_term(x, d, 1.0, 2.0 * a * x,
                       lambda n, x, p1, p2: (2.0 * (n - 1 + a) * x * p1 - (n + 2 * a - 2) * p2) / n, axis=axis)


def bessel(x: Tensor, *, d: int = 2, axis: int | None = None) -> Tensor:
    """Bessel polynomials: B_1 = x + 1, B_n = (2n-1) x B_{n-1} + B_{n-2}."""
    return _three_term(x, d, 1.0, x + 1.0, lambda n, x, a, b: (2 * n - 1) * x * a + b, axis=axis)


def reverse_bessel(x: Tensor, *, d: int = 2, axis: int | None = None) -> Tensor:
    """Reverse Bessel: R_1 = x + 1, R_n = (2n-1) R_{n-1} + x² R_{n-2} (eq 143 misprints B for R)."""
    return _three_term(x, d, 1.0, x + 1.0, lambda n, x, a, b: (2 * n - 1) * a + x * x * b, axis=axis)


def fibonacci(x: Tensor, *, d: int = 2, axis: int | None = None) -> Tensor:
    """Fibonacci polynomials: F_0 = 0, F_1 = 1, F_n = x F_{n-1} + F_{n-2}."""
    import torch

    return _three_term(x, d, 0.0, torch.ones_like(x), lambda n, x, a, b: x * a + b, axis=axis)


def lucas(x: Tensor, *, d: int = 2, axis: int | None = None) -> Tensor:
    """Lucas polynomials: L_0 = 2, L_1 = x, L_n = x L_{n-1} + L_{n-2}."""
    return _three_term(x, d, 2.0, x, lambda n, x, a, b: x * a + b, axis=axis)


def _dim_poly(m: int, d: int = 2, **_: Any) -> int:
    return m * _check_degree(d)


# ----------------------------------------------------------------------------------------------------------------------
# Wavelets (paper §7.1.7)
# ----------------------------------------------------------------------------------------------------------------------


def haar(tau: Tensor) -> Tensor:
    """Haar mother (eq 152): 1 on [0, 1/2), -1 on [1/2, 1), 0 elsewhere."""
    import torch

    one = torch.ones_like(tau)
    return torch.where((tau >= 0) & (tau < 0.5), one, torch.where((tau >= 0.5) & (tau < 1), -one, 0.0 * one))


def beta_mother(tau: Tensor, *, alpha: float = 1.0, beta: float = 1.0, domain: str = "sigmoid") -> Tensor:
    """Beta mother (eq 153): u^{α-1}(1-u)^{β-1}/B(α,β), α, β >= 1.

    ``domain="sigmoid"``: u = sigmoid(τ) for every τ (elementwise; the toolkit applies the sigmoid to the whole batch
    only when some τ leaves [0, 1], which makes one entry depend on the others). ``domain="support"``: u = τ on
    [0, 1] and 0 outside (the density's own support).
    """
    import torch

    if alpha < 1 or beta < 1:
        raise ValueError("beta wavelet needs alpha, beta >= 1")
    log_b = math.lgamma(alpha) + math.lgamma(beta) - math.lgamma(alpha + beta)
    if domain == "sigmoid":
        u = torch.sigmoid(tau)
        return math.exp(-log_b) * u ** (alpha - 1.0) * (1.0 - u) ** (beta - 1.0)
    if domain == "support":
        inside = (tau >= 0) & (tau <= 1)
        u = torch.where(inside, tau, torch.full_like(tau, 0.5))
        val = math.exp(-log_b) * u ** (alpha - 1.0) * (1.0 - u) ** (beta - 1.0)
        return torch.where(inside, val, torch.zeros_like(val))
    raise ValueError("domain must be 'sigmoid' or 'support'")


def ricker(tau: Tensor, *, sigma: float = 1.0) -> Tensor:
    """Ricker (Mexican hat, eq 154 with the normalisation typo fixed):
    2/(sqrt(3σ) π^{1/4}) · (1 - (τ/σ)²) · exp(-τ²/(2σ²))."""
    import torch

    if sigma <= 0:
        raise ValueError("sigma must be > 0")
    c = 2.0 / (math.sqrt(3.0 * sigma) * math.pi ** 0.25)
    z = tau / sigma
    return c * (1.0 - z * z) * torch.exp(-0.5 * z * z)


def shannon(tau: Tensor) -> Tensor:
    """Shannon (eq 155): (sin 2πτ - sin πτ)/(πτ) = 2 sinc(2τ) - sinc(τ) (normalized sinc); value 1 at τ = 0."""
    import torch

    return 2.0 * torch.sinc(2.0 * tau) - torch.sinc(tau)


_MEYER_C0 = 2.0 / 3.0 + 4.0 / (3.0 * math.pi)          # limit at τ = 0
_MEYER_C34 = 2.0 / (3.0 * math.pi)                      # limit at |τ| = 3/4 (0/0)
_MEYER_S34 = -(math.pi / 3.0 + 4.0 / (3.0 * math.pi))   # d/d|τ| at |τ| = 3/4


def meyer(tau: Tensor) -> Tensor:
    """Meyer (eq 157): (sin(2πτ/3) + (4/3)τ cos(4πτ/3)) / (πτ - (16π/9)τ³), with the removable singularities
    filled in: 2/3 + 4/(3π) at τ = 0 and 2/(3π) at |τ| = 3/4 (first-order Taylor inside a band of width
    eps^{1/3} around ±3/4, where numerator and denominator cancel). Even function."""
    import torch

    fi = torch.finfo(tau.dtype)
    a = tau.abs()
    near0 = a < math.sqrt(fi.eps)
    near34 = (a - 0.75).abs() < fi.eps ** (1.0 / 3.0)
    safe = torch.where(near0 | near34, torch.full_like(tau, 0.5), tau)
    num = torch.sin((2.0 * math.pi / 3.0) * safe) + (4.0 / 3.0) * safe * torch.cos((4.0 * math.pi / 3.0) * safe)
    den = math.pi * safe - (16.0 * math.pi / 9.0) * safe ** 3
    val = num / den
    band = _MEYER_C34 + _MEYER_S34 * (a - 0.75)
    return torch.where(near0, torch.full_like(tau, _MEYER_C0), torch.where(near34, band, val))


def dog(tau: Tensor, *, sigma_1: float = 1.0, sigma_2: float = 2.0) -> Tensor:
    """Difference of Gaussians (eq 156): N(τ | 0, σ1) - N(τ | 0, σ2) (densities)."""
    import torch

    if sigma_1 <= 0 or sigma_2 <= 0:
        raise ValueError("sigma_1, sigma_2 must be > 0")
    return torch.exp(_lp_normal(tau, 0.0, sigma_1)) - torch.exp(_lp_normal(tau, 0.0, sigma_2))


#: mother wavelet name -> (function, names of its own hyper-parameters)
WAVELETS: Mapping[str, tuple[Callable[..., Tensor], tuple[str, ...]]] = MappingProxyType({
    "haar": (haar, ()),
    "beta": (beta_mother, ("alpha", "beta", "domain")),
    "ricker": (ricker, ("sigma",)),
    "shannon": (shannon, ()),
    "meyer": (meyer, ()),
    "dog": (dog, ("sigma_1", "sigma_2")),
})


def wavelet(x: Tensor, *, mother: str = "ricker", a: float = 2.0, b: float = 1.0, s: int = 1, t: int = 1,
            d: int = 1, order2: str = "kron", **mother_hp: Any) -> Tensor:
    """Discrete wavelet expansion (eq 151, 160–161).

    Order 1: per attribute [φ_{0,0}(x), φ_{0,1}(x), ..., φ_{s-1,t-1}(x)] (scale-major, shift fastest),
    φ_{σ,τ}(x) = a^{-σ/2} φ(x/a^σ - τ·b), D1 = s·t·m. Order d >= 2: ``order2="kron"`` gives the paper's
    kappa1^{⊗d} (eq 161, D = D1^d, index p*D1 + q for d = 2); ``order2="concat"`` gives the toolkit's
    [kappa1, kappa1^{⊗2}, ..., kappa1^{⊗d}] (D = Σ_k D1^k).
    """
    import torch

    if mother not in WAVELETS:
        raise ValueError(f"unknown mother wavelet {mother!r}; known: {sorted(WAVELETS)}")
    fn, own = WAVELETS[mother]
    extra = set(mother_hp) - set(own)
    if extra:
        raise ValueError(f"unexpected hyper-parameters for {mother} wavelet: {sorted(extra)}")
    s = _check_degree(s, "s")
    t = _check_degree(t, "t")
    d = _check_degree(d)
    if a <= 0 or b < 0:
        raise ValueError("wavelet needs a > 0 (a > 1 for distinct scales) and b >= 0")
    if order2 not in ("kron", "concat"):
        raise ValueError("order2 must be 'kron' or 'concat'")
    sc = torch.arange(s, dtype=x.dtype, device=x.device)
    inv_scale = float(a) ** (-sc)                                  # a^{-σ}
    shift = torch.arange(t, dtype=x.dtype, device=x.device) * b    # τ·b
    tau = x[..., None, None] * inv_scale[:, None] - shift          # [..., m, s, t]
    k1 = (fn(tau, **mother_hp) * inv_scale.sqrt()[:, None]).flatten(-3)
    if d == 1:
        return k1
    outs = [k1]
    p = k1
    for _ in range(2, d + 1):
        p = (p.unsqueeze(-1) * k1.unsqueeze(-2)).flatten(-2)
        outs.append(p)
    return p if order2 == "kron" else torch.cat(outs, dim=-1)


def _dim_wavelet(m: int, s: int = 1, t: int = 1, d: int = 1, order2: str = "kron", **_: Any) -> int:
    d1 = m * _check_degree(s, "s") * _check_degree(t, "t")
    d = _check_degree(d)
    return d1**d if order2 == "kron" else sum(d1**k for k in range(1, d + 1))


def _named_wavelet(mother: str) -> Callable[..., Tensor]:
    def f(x: Tensor, **hp: Any) -> Tensor:
        return wavelet(x, mother=mother, **hp)

    f.__name__ = f"{mother}_wavelet"
    f.__doc__ = f"wavelet(x, mother={mother!r}, ...)"
    return f


# ----------------------------------------------------------------------------------------------------------------------
# Composition: extended (concatenation) and nested (composition)
# ----------------------------------------------------------------------------------------------------------------------

Part = tuple[str, Mapping[str, Any]]


def _resolve(name: str, registry: Mapping[str, TransformSpec] | None) -> TransformSpec:
    reg = EXPANSIONS if registry is None else registry
    if name not in reg:
        raise ValueError(f"unknown transformation {name!r}")
    return reg[name]


def extended(x: Tensor, *, parts: Sequence[Part], registry: Mapping[str, TransformSpec] | None = None) -> Tensor:
    """kappa(x) = [kappa_1(x), ..., kappa_K(x)] (concatenation), D = Σ D_i."""
    import torch

    if not parts:
        raise ValueError("extended needs at least one part")
    return torch.cat([_resolve(n, registry).fn(x, **dict(hp)) for n, hp in parts], dim=-1)


def nested(x: Tensor, *, parts: Sequence[Part], registry: Mapping[str, TransformSpec] | None = None) -> Tensor:
    """kappa(x) = kappa_K(... kappa_2(kappa_1(x))), D = D_K(... D_1(m))."""
    if not parts:
        raise ValueError("nested needs at least one part")
    for n, hp in parts:
        x = _resolve(n, registry).fn(x, **dict(hp))
    return x


def _dim_extended(m: int, parts: Sequence[Part] = (), registry: Mapping[str, TransformSpec] | None = None,
                  **_: Any) -> int:
    return sum(_resolve(n, registry).dim(m, **dict(hp)) for n, hp in parts)


def _dim_nested(m: int, parts: Sequence[Part] = (), registry: Mapping[str, TransformSpec] | None = None,
                **_: Any) -> int:
    for n, hp in parts:
        m = _resolve(n, registry).dim(m, **dict(hp))
    return m


def _nested_elementwise(parts: Sequence[Part] = (), registry: Mapping[str, TransformSpec] | None = None,
                        **_: Any) -> bool:
    # attribute-major chains compose: (i*k1 + j1)*k2 + j2 = i*(k1 k2) + (j1 k2 + j2)
    return bool(parts) and all(_resolve(n, registry).is_elementwise(**dict(hp)) for n, hp in parts)


# ----------------------------------------------------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------------------------------------------------


def _w(k: int) -> Callable[..., int]:
    return lambda m, **_: m * k


def _naive(dist: str) -> Callable[..., Tensor]:
    def f(x: Tensor, *, params: Sequence[float] | None = None, squash: bool = True) -> Tensor:
        return naive_probabilistic(x, dist=dist, params=params, squash=squash)

    f.__name__ = f"naive_{dist}"
    f.__doc__ = f"log p(x | theta) under {dist}, elementwise (default theta {PROB_FAMILIES[dist][0]})"
    return f


def _family(dist: str) -> Callable[..., Tensor]:
    def f(x: Tensor, *, params: Sequence[Sequence[float]] | None = None, squash: bool = True) -> Tensor:
        return probabilistic(x, dist=dist, params=params, squash=squash)

    f.__name__ = dist
    f.__doc__ = f"per attribute log-pdfs under the {dist} family {PROB_FAMILIES[dist]}"
    return f


def _dim_family(dist: str) -> Callable[..., int]:
    return lambda m, params=None, **_: m * len(PROB_FAMILIES[dist] if params is None else params)


_E: dict[str, TransformSpec] = {
    "identity": TransformSpec(identity, lambda m, **_: m, True),
    "reciprocal": TransformSpec(reciprocal, lambda m, **_: m, True),
    "linear": TransformSpec(linear, _dim_linear, False, elementwise_when=lambda C=None, **_: C is None),
    "taylor": TransformSpec(taylor, _dim_taylor, False, elementwise_when=lambda d=2, **_: d == 1),
    "fourier": TransformSpec(fourier, lambda m, N=5, **_: 2 * m * _check_degree(N, "N"), True),
    "hyperbolic": TransformSpec(hyperbolic, _dim_trig, True),
    "arc_hyperbolic": TransformSpec(arc_hyperbolic, _dim_trig, True),
    "trigonometric": TransformSpec(trigonometric, _dim_trig, True),
    "arc_trigonometric": TransformSpec(arc_trigonometric, _dim_trig, True),
    "gaussian_rbf": TransformSpec(gaussian_rbf, _dim_rbf, True),
    "inverse_quadratic_rbf": TransformSpec(inverse_quadratic_rbf, _dim_rbf, True),
    "hybrid_probabilistic": TransformSpec(hybrid_probabilistic, _w(6), True),
    "combinatorial": TransformSpec(combinatorial, _dim_combinatorial, False),
    "combinatorial_normal": TransformSpec(combinatorial_normal, _dim_combinatorial_normal, False,
                                          elementwise_when=lambda d=1, **_: d == 1),
    "bspline": TransformSpec(bspline, lambda m, grid_size=5, order=3, **_: m * (_check_degree(grid_size, "grid_size")
                                                                            + int(order)), True),
    **{name: TransformSpec(fn, _dim_poly, True, stacks_degrees=True) for name, fn in (
        ("chebyshev", chebyshev), ("jacobi", jacobi), ("hermite", hermite), ("laguerre", laguerre),
        ("legendre", legendre), ("gegenbauer", gegenbauer), ("bessel", bessel), ("reverse_bessel", reverse_bessel),
        ("fibonacci", fibonacci), ("lucas", lucas))},
    "wavelet": TransformSpec(wavelet, _dim_wavelet, False, elementwise_when=lambda d=1, **_: d == 1),
    "extended": TransformSpec(extended, _dim_extended, False),
    "nested": TransformSpec(nested, _dim_nested, False, elementwise_when=_nested_elementwise),
}

for _dist in ("normal", "cauchy", "chi2", "gamma", "laplace", "exponential"):
    _E[f"naive_{_dist}"] = TransformSpec(_naive(_dist), lambda m, **_: m, True)
    _E[_dist] = TransformSpec(_family(_dist), _dim_family(_dist), True)

for _mother in ("haar", "beta", "ricker", "shannon", "meyer", "dog"):
    _E[f"{_mother}_wavelet"] = TransformSpec(_named_wavelet(_mother), _dim_wavelet, False,
                                             elementwise_when=lambda d=1, **_: d == 1)

EXPANSIONS: Mapping[str, TransformSpec] = MappingProxyType(_E)
