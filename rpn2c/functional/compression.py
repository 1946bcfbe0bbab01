"""Data compression functions kappa: R^m -> R^d, d <= m (RPN 2 paper §6.1).

(a) ``reduce(x, metric, dim)`` / ``METRICS``: the patch mappings phi of eq (91)–(94) (norms, entropy, statistics,
numerical operators); ``patch_reduce`` applies one to zero-padded patches given as an index table (geometric
compression = pooling, eq 90). (b) Stateless whole-vector compressions with a ``COMPRESSIONS`` registry (identity,
reciprocal, linear, metric, random projection, extended, nested) plus reproducible random-projection matrices.
(c) Stateful compressions as ``nn.Module`` classes whose state lives in registered buffers (``state_dict``
round-trips): incremental variance threshold, incremental feature clustering, incremental PCA, random projection,
naive and combinatorial probabilistic compression, and (only with scikit-learn) manifold embeddings.

Stateful modules update their statistics in training mode, until ``max_updates`` updates have been made
(early stop), and are frozen in eval mode. No forward reads a tensor back to the host. They live in
:mod:`rpn2c.functional.compression_modules` (read here on first access): importing this module, whose tables the
checker reads, imports neither torch nor ``torch._dynamo``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TYPE_CHECKING

from rpn2c.lazy import lazy_exports
from rpn2c.functional.expansion import (
    TransformSpec,
    _dim_extended,
    _dim_linear,
    _dim_nested,
    extended,
    identity,
    linear,
    nested,
    reciprocal,
)

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    import torch
    from torch import Tensor

__all__ = [
    "COMPRESSIONS",
    "COMPRESSION_DISTRIBUTIONS",
    "METRICS",
    "MetricSpec",
    "adaptive_bin_index",
    "adaptive_bins",
    "adaptive_pool_matrix",
    "gaussian_random_matrix",
    "metric_compression",
    "patch_reduce",
    "random_projection",
    "reduce",
    "sparse_random_matrix",
]


# ----------------------------------------------------------------------------------------------------------------------
# (a) Metric reductions
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricSpec:
    """A reduction phi over one axis: ``fn(x, dim, keepdim, **kw)``."""

    fn: Callable[..., Tensor]
    doc: str
    differentiable: bool = True


def _median(x: Tensor, dim: int, keepdim: bool) -> Tensor:
    n = x.shape[dim]
    s = x.sort(dim=dim).values
    if n % 2:
        out = s.narrow(dim, n // 2, 1)
    else:
        out = 0.5 * (s.narrow(dim, n // 2 - 1, 1) + s.narrow(dim, n // 2, 1))
    return out if keepdim else out.squeeze(dim)


def _median_low(x: Tensor, dim: int, keepdim: bool) -> Tensor:
    n = x.shape[dim]
    out = x.sort(dim=dim).values.narrow(dim, (n - 1) // 2, 1)
    return out if keepdim else out.squeeze(dim)


def _mode(x: Tensor, dim: int, keepdim: bool) -> Tensor:
    import torch

    xt = x.movedim(dim, -1)
    counts = (xt.unsqueeze(-1) == xt.unsqueeze(-2)).sum(-1)
    best = counts.amax(-1, keepdim=True)
    cand = torch.where(counts == best, xt, torch.full_like(xt, math.inf))
    out = cand.amin(-1, keepdim=True).movedim(-1, dim)
    return out if keepdim else out.squeeze(dim)


def _lp(x: Tensor, dim: int, keepdim: bool, p: float = 2.0) -> Tensor:
    import torch

    return torch.linalg.vector_norm(x, ord=p, dim=dim, keepdim=keepdim)


def _entropy(x: Tensor, dim: int, keepdim: bool, eps: float = 1e-12) -> Tensor:
    import torch

    a = x.abs() + eps
    p = a / a.sum(dim=dim, keepdim=True)
    return -(p * torch.log(p)).sum(dim=dim, keepdim=keepdim)


def _variance(x: Tensor, dim: int, keepdim: bool, correction: int = 0) -> Tensor:
    import torch

    return torch.var(x, dim=dim, keepdim=keepdim, correction=correction)


def _std(x: Tensor, dim: int, keepdim: bool, correction: int = 0) -> Tensor:
    import torch

    return torch.std(x, dim=dim, keepdim=keepdim, correction=correction)


def _skewness(x: Tensor, dim: int, keepdim: bool) -> Tensor:
    import torch

    c = x - x.mean(dim=dim, keepdim=True)
    m2 = (c * c).mean(dim=dim, keepdim=keepdim)
    m3 = (c * c * c).mean(dim=dim, keepdim=keepdim)
    pos = m2 > 0
    return torch.where(pos, m3 / torch.where(pos, m2, torch.ones_like(m2)) ** 1.5, torch.zeros_like(m3))


def _gmean(x: Tensor, dim: int, keepdim: bool) -> Tensor:
    import torch

    return torch.exp(torch.log(x).mean(dim=dim, keepdim=keepdim))


def _hmean(x: Tensor, dim: int, keepdim: bool) -> Tensor:
    import torch

    return x.shape[dim] / torch.reciprocal(x).sum(dim=dim, keepdim=keepdim)


METRICS: Mapping[str, MetricSpec] = MappingProxyType({
    "max": MetricSpec(lambda x, dim, keepdim: x.amax(dim=dim, keepdim=keepdim), "max_i x_i"),
    "min": MetricSpec(lambda x, dim, keepdim: x.amin(dim=dim, keepdim=keepdim), "min_i x_i"),
    "sum": MetricSpec(lambda x, dim, keepdim: x.sum(dim=dim, keepdim=keepdim), "Σ_i x_i"),
    "mean": MetricSpec(lambda x, dim, keepdim: x.mean(dim=dim, keepdim=keepdim), "(1/n) Σ_i x_i"),
    "prod": MetricSpec(lambda x, dim, keepdim: x.prod(dim=dim, keepdim=keepdim), "Π_i x_i"),
    "median": MetricSpec(_median, "middle order statistic; mean of the two middle ones for even n (numpy)"),
    "median_low": MetricSpec(_median_low, "lower median s_{(n-1)//2} of the sorted values (torch.median, toolkit)"),
    "mode": MetricSpec(_mode, "most frequent value (exact equality); ties -> smallest value, so all-distinct -> min; "
                              "O(n²) memory per reduction", differentiable=False),
    "l1": MetricSpec(lambda x, dim, keepdim: _lp(x, dim, keepdim, 1.0), "Σ_i |x_i|"),
    "l2": MetricSpec(lambda x, dim, keepdim: _lp(x, dim, keepdim, 2.0), "sqrt(Σ_i x_i²)"),
    "linf": MetricSpec(lambda x, dim, keepdim: _lp(x, dim, keepdim, math.inf), "max_i |x_i|"),
    "lp": MetricSpec(_lp, "(Σ_i |x_i|^p)^{1/p}, kwarg p (default 2)"),
    "entropy": MetricSpec(_entropy, "-Σ p_i log p_i, p = (|x| + eps)/Σ(|x| + eps), eps = 1e-12 (kwarg); "
                                    "all-zero input -> log n"),
    "variance": MetricSpec(_variance, "Σ(x - mean)²/(n - correction), correction = 0 (population) by default; "
                                      "the toolkit uses 1"),
    "std": MetricSpec(_std, "sqrt(variance), same correction convention"),
    "skewness": MetricSpec(_skewness, "Fisher–Pearson g1 = m3/m2^{3/2} (biased, scipy default); 0 for constant input"),
    "geometric_mean": MetricSpec(_gmean, "exp(mean(log x)), x > 0 (0 if some x = 0, NaN for negatives)"),
    "harmonic_mean": MetricSpec(_hmean, "n / Σ 1/x_i, x > 0 (0 if some x = 0)"),
})

_METRIC_ALIASES = {"var": "variance", "standard_deviation": "std", "skew": "skewness", "gmean": "geometric_mean",
                   "hmean": "harmonic_mean", "l2_norm": "l2", "l1_norm": "l1", "norm": "lp", "average": "mean",
                   "product": "prod", "maximum": "max", "minimum": "min"}


def _metric(metric: str) -> MetricSpec:
    key = _METRIC_ALIASES.get(metric, metric)
    if key not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; known: {sorted(METRICS)}")
    return METRICS[key]


def reduce(x: Tensor, metric: str, dim: int = -1, *, keepdim: bool = False, **kw: Any) -> Tensor:
    """phi(x) over axis ``dim`` with a metric from ``METRICS`` (extra kwargs: p, eps, correction)."""
    if x.shape[dim] == 0:
        raise ValueError("cannot reduce an empty axis")
    return _metric(metric).fn(x, dim, keepdim, **kw)


def metric_compression(x: Tensor, *, metric: str = "mean", **kw: Any) -> Tensor:
    """kappa(x) = [phi(x)] over the whole last axis, d = 1."""
    return reduce(x, metric, -1, keepdim=True, **kw)


def patch_reduce(x: Tensor, index: Tensor, metric: str = "max", *, pad_value: float = 0.0, **kw: Any) -> Tensor:
    """Geometric patch compression (eq 90): out[..., q] = phi(x[..., index[q, :]]), d = P.

    ``index`` is [P, p] (long); entries < 0 are out-of-grid slots that read ``pad_value`` (0, as in the toolkit,
    so max-pooling a boundary patch sees a 0 and mean-pooling counts the pad).
    """
    import torch

    if index.dim() != 2:
        raise ValueError("index must be [P, p]")
    m = x.shape[-1]
    pad = torch.full((*x.shape[:-1], 1), pad_value, dtype=x.dtype, device=x.device)
    xe = torch.cat((x, pad), dim=-1)
    idx = torch.where(index < 0, torch.full_like(index, m), index).to(x.device)
    return reduce(xe[..., idx], metric, -1, **kw)


def adaptive_bins(length: int, size: int) -> list[tuple[int, int]]:
    """Adaptive pooling bins of one axis (torch's AdaptiveAvgPool/AdaptiveMaxPool): bin i is
    ``[floor(i·L/S), ceil((i+1)·L/S))``, i < S; neighbouring bins overlap where S does not divide L."""
    if length < 1 or size < 1:
        raise ValueError(f"adaptive bins need a length and a size >= 1, got {length} and {size}")
    return [((i * length) // size, -(-((i + 1) * length) // size)) for i in range(size)]


def adaptive_bin_index(spatial: Sequence[int], size: Sequence[int], device=None) -> Tensor:
    """LongTensor [Q, p]: the flat (row-major) positions of every adaptive bin q (the product of the axes' bins),
    padded with -1 to the largest bin size p; Q = prod(size)."""
    import torch

    if len(spatial) != len(size):
        raise ValueError(f"{len(size)} output sizes for a {len(spatial)}-D grid")
    cells: list[list[int]] = [[0]]
    for n, s in zip(spatial, size):
        cells = [[f * n + j for f in flat for j in range(a, b)] for flat in cells for a, b in adaptive_bins(n, s)]
    width = max(len(c) for c in cells)
    return torch.tensor([c + [-1] * (width - len(c)) for c in cells], dtype=torch.long, device=device)


def adaptive_pool_matrix(spatial: Sequence[int], size: Sequence[int], *, dtype: torch.dtype | None = None,
                         device=None) -> Tensor:
    """The adaptive average pooling matrix P [N, Q] (N = prod(spatial)): P[j, q] = 1/|bin(q)| for j in bin q,
    else 0, so that ``x_flat @ P`` is the mean of every bin (κ as a linear compression)."""
    import torch

    dtype = torch.float32 if dtype is None else dtype  # the default, resolved here: no torch at import
    index = adaptive_bin_index(spatial, size, device)
    valid = index >= 0
    n = 1
    for v in spatial:
        n *= v
    q = torch.arange(index.shape[0], device=device).unsqueeze(1).expand_as(index)
    out = torch.zeros(n, index.shape[0], dtype=dtype, device=device)
    out[index[valid], q[valid]] = 1.0 / valid.sum(1, keepdim=True).expand_as(index)[valid].to(dtype)
    return out


# ----------------------------------------------------------------------------------------------------------------------
# (b) Random projection matrices
# ----------------------------------------------------------------------------------------------------------------------


def _gen(seed: int) -> torch.Generator:
    import torch

    g = torch.Generator(device="cpu")
    g.manual_seed(int(seed))
    return g


def gaussian_random_matrix(m: int, k: int, *, seed: int = 0, dtype: torch.dtype | None = None,
                           device: torch.device | str | None = None) -> Tensor:
    """R [m, k] with R_ij ~ N(0, 1/k) (eq 105); drawn on the CPU from ``seed`` so it is device independent."""
    import torch

    dtype = torch.float32 if dtype is None else dtype  # the default, resolved here: no torch at import
    r = torch.randn(m, k, generator=_gen(seed), dtype=torch.float64) / math.sqrt(k)
    return r.to(dtype=dtype, device=device)


def sparse_random_matrix(m: int, k: int, *, density: float | None = None, seed: int = 0,
                         dtype: torch.dtype | None = None, device: torch.device | str | None = None) -> Tensor:
    """R [m, k] with R_ij = ±sqrt(1/(s k)) w.p. s/2 each, 0 w.p. 1 - s (eq 104; Achlioptas s = 1/3, Li et al.
    s = 1/sqrt(m), the default)."""
    import torch

    dtype = torch.float32 if dtype is None else dtype  # the default, resolved here: no torch at import
    s = 1.0 / math.sqrt(m) if density is None else float(density)
    if not 0.0 < s <= 1.0:
        raise ValueError("density must be in (0, 1]")
    u = torch.rand(m, k, generator=_gen(seed), dtype=torch.float64)
    v = math.sqrt(1.0 / (s * k))
    sign = (u < s).to(torch.float64) - 2.0 * (u < s / 2).to(torch.float64)   # -1 w.p. s/2, +1 w.p. s/2, else 0
    return (sign * v).to(dtype=dtype, device=device)


def random_projection(x: Tensor, *, R: Tensor) -> Tensor:
    """kappa(x) = x @ R (eq 103)."""
    return x @ R.to(dtype=x.dtype, device=x.device)


# ----------------------------------------------------------------------------------------------------------------------
# Stateless registry
# ----------------------------------------------------------------------------------------------------------------------


def _extended_c(x: Tensor, *, parts: Sequence[tuple[str, Mapping[str, Any]]]) -> Tensor:
    return extended(x, parts=parts, registry=COMPRESSIONS)


def _nested_c(x: Tensor, *, parts: Sequence[tuple[str, Mapping[str, Any]]]) -> Tensor:
    return nested(x, parts=parts, registry=COMPRESSIONS)


def _metric_fn(name: str) -> Callable[..., Tensor]:
    def f(x: Tensor, **kw: Any) -> Tensor:
        return metric_compression(x, metric=name, **kw)

    f.__name__ = f"{name}_compression"
    return f


_C: dict[str, TransformSpec] = {
    "identity": TransformSpec(identity, lambda m, **_: m, True),
    "reciprocal": TransformSpec(reciprocal, lambda m, **_: m, True),
    "linear": TransformSpec(linear, _dim_linear, False),
    "metric": TransformSpec(metric_compression, lambda m, **_: 1, False),
    "random_projection": TransformSpec(random_projection, lambda m, R=None, **_: int(R.shape[1]), False),
    "extended": TransformSpec(_extended_c, lambda m, parts=(), **_: _dim_extended(m, parts, COMPRESSIONS), False),
    "nested": TransformSpec(_nested_c, lambda m, parts=(), **_: _dim_nested(m, parts, COMPRESSIONS), False),
}
for _name in ("max", "min", "sum", "mean", "prod", "median"):
    _C[f"{_name}_compression"] = TransformSpec(_metric_fn(_name), lambda m, **_: 1, False)

COMPRESSIONS: Mapping[str, TransformSpec] = MappingProxyType(_C)


COMPRESSION_DISTRIBUTIONS: Mapping[str, tuple[float, ...]] = MappingProxyType({
    "uniform": (0.0, 1.0), "normal": (0.0, 1.0), "cauchy": (0.0, 1.0), "laplace": (0.0, 1.0),
    "chi2": (1.0,), "exponential": (0.5,), "gamma": (1.0, 1.0),
})

_MANIFOLDS = ("isomap", "tsne", "lle", "mds", "spectral_embedding", "smacof")


_MODULES = ("CombinatorialProbabilisticCompression", "IncrementalFeatureClustering", "IncrementalPCA",
            "IncrementalVarianceThreshold", "ManifoldCompression", "NaiveProbabilisticCompression", "RandomProjection")


# the stateful compressions of (c), imported on first access (they subclass ``torch.nn.Module``)
__getattr__ = lazy_exports(__name__, dict.fromkeys(_MODULES, "rpn2c.functional.compression_modules"), globals())[0]
