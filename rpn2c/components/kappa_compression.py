"""Data compression κ (D <= m): every compression of the RPN 2 paper (§6.1) and of the tinyBIG inventory.

Each entry calls :mod:`rpn2c.functional.compression` (metrics, random projection, the stateful incremental
modules, probabilistic sampling, manifold embeddings) or :mod:`rpn2c.functional.structure` (patch index tables and
the paper's padding matrix for pooling). Stateful entries (feature selection, incremental PCA) keep their statistics
in registered buffers (``state_dict`` round-trips), update them on training batches only and are frozen in eval
mode. The tinyBIG class names are registered as aliases.
"""

from __future__ import annotations

import inspect
import math
from typing import ClassVar, Literal, Optional

import torch
import torch.nn.functional as F
from pydantic import AliasChoices, Field, model_validator
from torch import nn

from rpn2c.components.base import GRID_VOLUME, Kappa, ShapeRuleError, compress_example, head_example
from rpn2c.components.grid import Geometry
from rpn2c.components.kappa import (
    METRIC_NAMES,
    CallModule,
    CentredCuboidHP,
    Composite,
    ConvPatchHP,
    CylinderHP,
    FunctionalKappa,
    MetricHP,
    PoolHP,
    SphereHP,
    ignore_fill,
    literal_patches,
    metric_kwargs,
    pad_pairs,
    parts_hp,
)
from rpn2c.components.kappa_expansion import Linear as _LinearExpansion
from rpn2c.components.registry import HP, register
from rpn2c.functional import compression as FC

_K = Field(..., ge=1, le=1_000_000, validation_alias=AliasChoices("k", "n_feature", "D"),
           description="output width d (also spelt n_feature or D)")


def _need_k(name: str, k: int, m: int) -> int:
    if k > m:
        raise ShapeRuleError(f"{name} compresses {m} features to k = {k}: need k <= m")
    return k


# ------------------------------------------------------------------------------------------------ basic (eq 88–89)
class _Compression(FunctionalKappa):
    family = "compression"
    table = FC.COMPRESSIONS


@register
class IdentityCompression(_Compression):
    """κ(x) = x (eq 88), d = m."""

    name = "identity"
    aliases = ("identity_compression",)
    example_call = "identity_compression"  # the bare name is the expansion's


@register
class ReciprocalCompression(_Compression):
    """κ(x) = 1/x', x' = x with |x| < eps pushed to ±eps (eq 88), d = m; never writes into x (tinyBIG does)."""

    name = "reciprocal"
    aliases = ("reciprocal_compression",)
    example_call = "reciprocal_compression"  # the bare name is the expansion's

    class HP(HP):
        eps: float = Field(1e-6, gt=0, le=1, description="clamp |x| >= eps")


@register
class LinearCompression(_LinearExpansion):
    """κ(x) = c·x or x C with a constant C ∈ R^{m×d}, d <= m (eq 89)."""

    name, family = "linear", "compression"
    aliases = ("linear_compression",)
    example_call = "linear_compression"  # the bare name is the expansion's
    table = FC.COMPRESSIONS

    def flat_out(self, m):
        d = super().flat_out(m)
        if d > m:
            raise ShapeRuleError(f"linear compression needs d <= m; C maps {m} features to {d}")
        return d


# ------------------------------------------------------------------------------------------------ metric
class _Metric(Kappa):
    family = "compression"
    METRIC: ClassVar[str] = ""

    @property
    def metric(self) -> str:
        return getattr(self.hp, "metric", self.METRIC)

    def flat_out(self, m):
        return 1

    def module(self, feat):
        kw = metric_kwargs(self.hp) if hasattr(self.hp, "metric") else {}
        return CallModule(FC.metric_compression, {"metric": self.metric, **kw}, f"{self.metric}")


class _MetricHP(MetricHP):
    metric: Literal[METRIC_NAMES] = "mean"  # type: ignore[valid-type]


@register
class Metric(_Metric):
    """Metric compression κ(x) = [φ(x)] over all m features (φ: norms, entropy, statistics, max/min/sum/…), d = 1.

    Median is the middle order statistic (mean of the two middle ones for even m, as numpy); tinyBIG's
    median_compression uses torch.median, the lower median: metric = "median_low" (pinned by test).
    """

    name = "metric"
    aliases = ("metric_compression",)
    HP = _MetricHP


def _metric_entry(metric: str, formula: str) -> type:
    cls = type(f"{metric.capitalize()}Compression", (_Metric,), {
        "__doc__": f"{metric.capitalize()} compression κ(x) = [{formula}] over all m features, d = 1.",
        "name": f"{metric}_compression", "METRIC": metric, "aliases": (), "HP": HP, "__module__": __name__})
    return register(cls)


for _metric, _formula in (("max", "max_i x_i"), ("min", "min_i x_i"), ("sum", "Σ_i x_i"), ("mean", "(1/m) Σ_i x_i"),
                          ("prod", "Π_i x_i"), ("median", "median_i x_i (numpy: mean of the middle two if m is even)")):
    _metric_entry(_metric, _formula)


# ------------------------------------------------------------------------------------------------ geometric pooling
def native_pooling(geo: Geometry, metric: str) -> bool:
    """Whether a patch compression is a native pooling kernel: zero padding, rank 1-3, max/min over full boxes
    (max_pool), or sum/mean over any patch mask (a depthwise convolution)."""
    return (geo.padding_mode == "zeros" and 1 <= geo.rank <= 3
            and (metric in ("sum", "mean") or (metric in ("max", "min") and geo.taps is None)))


class PatchPoolModule(nn.Module):
    """Grid [B, C, *S] -> [B, C, *S']: φ over every patch (eq 90).

    Default lowering: max/min by native max pooling of the explicitly padded grid (pad value 0, or ∓inf when
    out-of-grid taps are ignored), sum/mean by a depthwise convolution with the patch mask (any patch shape);
    every other metric, patch or padding mode by a gather + :func:`rpn2c.functional.compression.patch_reduce`.
    Reference lowering: the paper's padding matrix, ``x A`` (one-hot columns, zero for out-of-grid taps), then φ.
    """

    def __init__(self, geo: Geometry, spatial, metric: str, kw: dict, ignore: bool, reference: bool):
        super().__init__()
        self.geo, self.spatial, self.metric, self.kw, self.reference = geo, tuple(spatial), metric, kw, reference
        self.out_spatial = geo.out_spatial(self.spatial)
        index = geo.patch_index(self.spatial)
        valid = index >= 0
        self.ignore = ignore and geo.padding_mode == "zeros"
        self.fill = ignore_fill(metric) if self.ignore else 0.0
        self.register_buffer("index", index, persistent=False)
        self.register_buffer("outside", ~valid, persistent=False)
        self.register_buffer("count", valid.sum(-1).clamp(min=1), persistent=False)
        if not reference and native_pooling(geo, metric) and metric in ("sum", "mean"):
            self.register_buffer("mask", geo.kernel_mask().to(torch.get_default_dtype()), persistent=False)

    def _mean_ignoring(self, s):
        return s / self.count.to(s.dtype)

    def pool(self, x):
        """Kernel op ``pool`` (rule ``pool``, where ``native_pooling`` holds): max/min by native max pooling of
        the explicitly padded grid, sum/mean by a depthwise convolution with the patch mask."""
        c = x.shape[1]
        geo, metric = self.geo, self.metric
        pads = pad_pairs(geo)
        padded = any(pads)  # F.pad copies even when every pad is zero
        pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[geo.rank - 1]
        if metric == "max":
            return pool(F.pad(x, pads, value=self.fill) if padded else x, geo.kernel, geo.stride, 0, geo.dilation)
        if metric == "min":
            return -pool(F.pad(-x, pads, value=-self.fill) if padded else -x, geo.kernel, geo.stride, 0,
                         geo.dilation)
        conv = (F.conv1d, F.conv2d, F.conv3d)[geo.rank - 1]
        w = self.mask.to(x.dtype).expand(c, 1, *geo.kernel)
        y = conv(F.pad(x, pads) if padded else x, w, stride=geo.stride, dilation=geo.dilation, groups=c)
        if metric == "mean":
            y = y / self.count.to(x.dtype).reshape(self.out_spatial) if self.ignore else y / geo.patch_size
        return y

    def forward(self, x, grid=True):
        """φ over every patch by gather + reduce (the reference: by the padding matrix)."""
        b, c = x.shape[:2]
        geo, metric = self.geo, self.metric
        mean_ignore = metric == "mean" and self.ignore
        if self.reference:
            taps = literal_patches(x, geo, self.spatial)  # [B, C, P, p]
            if self.ignore and self.fill != 0.0:
                taps = taps.masked_fill(self.outside, self.fill)
            y = FC.reduce(taps, "sum" if mean_ignore else metric, -1, **self.kw)
        else:
            y = FC.patch_reduce(x.flatten(2), self.index, "sum" if mean_ignore else metric, pad_value=self.fill,
                                **self.kw)
        if mean_ignore:
            y = self._mean_ignoring(y)
        return y.reshape(b, c, *self.out_spatial)

    def extra_repr(self):
        return (f"{self.metric}, kernel={self.geo.kernel}, p={self.geo.patch_size}, stride={self.geo.stride}, "
                f"ignore_outside={self.ignore}, reference={self.reference}")


class _PatchPool(Kappa):
    """Geometric patch compression (pooling): grid [C, *S] -> [C, *S'], one φ value per patch and channel."""

    family = "compression"
    grid_only = True
    METRIC: ClassVar[str] = ""

    @property
    def metric(self) -> str:
        return getattr(self.hp, "metric", self.METRIC)

    def geometry(self, rank: int) -> Geometry:
        return self.hp.to_geometry(rank)

    def features_out(self, feat):
        if len(feat) < 2:
            raise ShapeRuleError(f"{self.name} pools over a grid; the input has flat features {feat}")
        return (feat[0], *self.geometry(len(feat) - 1).out_spatial(tuple(feat[1:])))

    def native_pooling(self, rank: int) -> bool:
        return native_pooling(self.geometry(rank), self.metric)

    def build(self, feat, reference=False):
        hp = self.hp
        kw = metric_kwargs(hp) if hasattr(hp, "metric") else {}
        ignore = hp.ignores_outside() if hasattr(hp, "ignores_outside") else \
            (hp.outside == "ignore" or (hp.outside == "auto" and self.metric in ("max", "min")))
        return PatchPoolModule(self.geometry(len(feat) - 1), tuple(feat[1:]), self.metric, kw, ignore, reference)


class _OutsideHP(HP):
    outside: Literal["auto", "zero", "ignore"] = Field(
        "auto", description="zero: out-of-grid taps read 0 (paper/toolkit); ignore: skipped (MaxPool; AvgPool "
                            "count_include_pad=False); auto: ignore for max/min, zero for mean")


class _ConvPoolHP(PoolHP, ConvPatchHP):
    pass


class _ConvFixedHP(_OutsideHP, ConvPatchHP):
    pass


class _CuboidPoolHP(PoolHP, CentredCuboidHP):
    pass


class _CylinderPoolHP(PoolHP, CylinderHP):
    pass


class _SpherePoolHP(PoolHP, SphereHP):
    pass


class _CuboidFixedHP(_OutsideHP, CentredCuboidHP):
    pass


class _CylinderFixedHP(_OutsideHP, CylinderHP):
    pass


class _SphereFixedHP(_OutsideHP, SphereHP):
    pass


@register
class PatchPool(_PatchPool):
    """Patch pooling κ(x)_q = φ(x(patch_q)) over conv-style cuboid patches (size, stride = size, pad, dilation), any φ.

    Out-of-grid taps read 0 (tinyBIG, catalog §3.6) or are ignored (outside = "ignore"; "auto": max/min ignore
    them as MaxPool does). Padding modes circular/reflect/replicate read mirrored/wrapped cells as F.pad.
    """

    name = "patch_pool"
    example_call = "patch_pool(size = 2)"
    aliases = ("geometric_compression",)
    HP = _ConvPoolHP


@register
class PatchMax(_PatchPool):
    """Patch max pooling: κ(x)_q = max_{j ∈ patch(q)} x_j (out-of-grid taps are ignored, as MaxPool)."""

    name, METRIC = "patch_max", "max"
    example_call = "patch_max(size = 2)"
    aliases = ("max_pool",)
    HP = _ConvFixedHP


@register
class PatchMin(_PatchPool):
    """Patch min pooling: κ(x)_q = min_{j ∈ patch(q)} x_j (out-of-grid taps are ignored by default)."""

    name, METRIC = "patch_min", "min"
    example_call = "patch_min(size = 2)"
    aliases = ("min_pool",)
    HP = _ConvFixedHP


@register
class PatchMean(_PatchPool):
    """Patch mean pooling: κ(x)_q = (1/p) Σ_{j ∈ patch(q)} x_j (zero padding counted, as AvgPool)."""

    name, METRIC = "patch_mean", "mean"
    example_call = "patch_mean(size = 2)"
    aliases = ("mean_pool", "avg_pool")
    HP = _ConvFixedHP


_SHAPE_DOC = {
    "cuboid": ("centred cuboids c + [−p, p'] per axis (eq 63)", _CuboidPoolHP, _CuboidFixedHP),
    "cylinder": ("cylinders ∇i² + ∇j² ≤ r², ∇k ∈ [−p_d, p'_d] (eq 65)", _CylinderPoolHP, _CylinderFixedHP),
    "sphere": ("spheres ∇i² + ∇j² + ∇k² ≤ r², 3-D grid (eq 65)", _SpherePoolHP, _SphereFixedHP),
}
_SHAPE_NOTES = (
    "\n\nCentres are c = q·stride (or a named packing, catalog §3.4), ceil(L/stride) per axis (erratum §8.5: the "
    "paper's 1 + floor(L/stride) is off by one). Erratum §8.7: packing convention = \"paper\" (default) or "
    "\"toolkit\" for the strategies where the two disagree; strides are floored to integers >= 1.")


def _shape_entries(shape: str) -> None:
    what, pool_hp, fixed_hp = _SHAPE_DOC[shape]
    example = compress_example(GRID_VOLUME) if shape == "sphere" else ""  # spheres need a 3-D grid
    extra = ("\n\nErratum (catalog §3.2): tinyBIG's cylinder ignores p_d; both depth bounds are honoured here."
             if shape == "cylinder" else "")
    register(type(f"{shape.capitalize()}Pool", (_PatchPool,), {
        "__doc__": f"{shape.capitalize()} pooling κ(x)_c = φ(x(patch(c))), any φ, over {what}."
                   + _SHAPE_NOTES + extra,
        "name": f"{shape}_pool", "HP": pool_hp, "__module__": __name__, "example": example,
        "aliases": (f"{shape}_compression", f"{shape}_patch_based_geometric_compression")}))
    for metric in ("max", "min", "mean"):
        formula = {"max": "max_{patch(c)} x", "min": "min_{patch(c)} x", "mean": "(1/p) Σ_{patch(c)} x"}[metric]
        register(type(f"{shape.capitalize()}{metric.capitalize()}", (_PatchPool,), {
            "__doc__": f"{shape.capitalize()} {metric} pooling κ(x)_c = {formula} over {what}." + _SHAPE_NOTES + extra,
            "name": f"{shape}_{metric}", "METRIC": metric, "HP": fixed_hp, "__module__": __name__, "example": example,
            "aliases": (f"{shape}_{metric}_based_geometric_compression",)}))


for _shape in ("cuboid", "cylinder", "sphere"):
    _shape_entries(_shape)


# ------------------------------------------------------------------------------------------------ flatten
@register
class Flatten(Kappa):
    """Flatten compression κ(x) = vec(x): a grid [C, *S] becomes C·ΠS flat features (channel-major)."""

    name, family = "flatten", "compression"

    def features_out(self, feat):
        return (math.prod(feat),)

    def build(self, feat, reference=False):
        return _FlattenModule()


class _FlattenModule(nn.Module):
    def forward(self, x, grid=False):
        return x.flatten(1) if grid else x


# ------------------------------------------------------------------------------------------------ feature selection
MAX_GRAM = 2**28  # elements (1 GiB in float32) of the m×m running XᵀX or similarity an incremental κ keeps


def _need_gram(name: str, m) -> None:
    if isinstance(m, int) and m * m > MAX_GRAM:
        raise ShapeRuleError(f"{name} keeps an m×m statistics buffer: m = {m:,} features need {m * m * 4 / 2**30:.3g} GiB "
                             f"(at most {MAX_GRAM:,} elements); compress with a projection first")


class _KMixin(Kappa):
    family = "compression"
    example_call = "{name}(k = 2)"

    def flat_out(self, m):
        return _need_k(self.name, self.hp.k, m)


class _VarianceHP(HP):
    k: int = _K
    max_updates: Optional[int] = Field(None, ge=1, description="early stop: freeze after this many training batches")
    correction: int = Field(0, ge=0, le=1, description="variance: 0 population, 1 sample")


@register
class VarianceThreshold(_KMixin):
    """Incremental variance threshold κ(x) = x[top-k of v̄], v̄ ← v̄ + (var(X) − v̄)/t (eq 96–98, top-k form), d = k.

    The statistics are updated on every training batch (until max_updates) and frozen in eval mode; before the first
    update the first k attributes are kept. Eq (98)'s "keep v̄ >= p" has a data-dependent width; top-k is used.
    """

    name = "variance_threshold"
    aliases = ("incremental_variance_threshold", "incremental_variance_threshold_based_compression")
    HP = _VarianceHP

    def module(self, feat):
        hp = self.hp
        return FC.IncrementalVarianceThreshold(feat[0], hp.k, max_updates=hp.max_updates, correction=hp.correction)


class _ClusterHP(HP):
    k: int = _K
    max_updates: Optional[int] = Field(None, ge=1, description="early stop: freeze after this many training batches")
    iters: int = Field(10, ge=1, le=1000, description="k-medoids rounds")
    output: Literal["select", "centroid"] = Field(
        "select", description="select: top-variance attribute per cluster (eq 100); centroid: cluster means")
    absolute: bool = Field(False, description="cluster on |cosine similarity|")


@register
class FeatureClustering(_KMixin):
    """Incremental feature clustering κ(x) = x[top-variance attribute of each of k clusters] (eq 99–100), d = k.

    Attributes are clustered by deterministic k-medoids on the running mean cosine similarity of training batches
    (frozen in eval mode); ``output = "centroid"`` returns each cluster's mean attribute instead.
    """

    name = "feature_clustering"
    aliases = ("incremental_feature_clustering", "incremental_feature_clustering_based_compression")
    HP = _ClusterHP

    def flat_out(self, m):
        _need_gram(self.name, m)
        return super().flat_out(m)

    def module(self, feat):
        hp = self.hp
        return FC.IncrementalFeatureClustering(feat[0], hp.k, max_updates=hp.max_updates, iters=hp.iters,
                                               output=hp.output, absolute=hp.absolute)


class _SelectionHP(_ClusterHP):
    method: Literal["variance_threshold", "feature_clustering"] = "variance_threshold"
    correction: int = Field(0, ge=0, le=1, description="variance_threshold: 0 population, 1 sample")


@register
class FeatureSelection(_KMixin):
    """Feature selection κ(x) = x[S], |S| = k chosen incrementally (variance threshold or feature clustering), d = k."""

    name = "feature_selection"
    aliases = ("feature_selection_compression",)
    HP = _SelectionHP

    def flat_out(self, m):
        if self.hp.method != "variance_threshold":
            _need_gram(self.name, m)
        return super().flat_out(m)

    def module(self, feat):
        hp = self.hp
        if hp.method == "variance_threshold":
            return FC.IncrementalVarianceThreshold(feat[0], hp.k, max_updates=hp.max_updates,
                                                   correction=hp.correction)
        return FC.IncrementalFeatureClustering(feat[0], hp.k, max_updates=hp.max_updates, iters=hp.iters,
                                               output=hp.output, absolute=hp.absolute)


# ------------------------------------------------------------------------------------------------ dimension reduction
class _PcaHP(HP):
    k: int = _K
    center: bool = Field(False, description="true: (x − μ) V_k on the covariance (sklearn/tinyBIG); false: eq 101")
    max_updates: Optional[int] = Field(None, ge=1, description="early stop: freeze after this many training batches")


@register
class Pca(_KMixin):
    """Incremental PCA κ(x) = x V_k, V_k = top-k right singular vectors of all training rows seen (eq 101–102), d = k.

    Exact incremental form (running XᵀX; equals the SVD of the concatenated batches), signs fixed; frozen in eval
    mode; V = I[:, :k] before the first update.
    """

    name = "pca"
    aliases = ("incremental_pca", "incremental_pca_based_compression", "incremental_PCA_based_compression")
    HP = _PcaHP

    def flat_out(self, m):
        _need_gram(self.name, m)
        return super().flat_out(m)

    def module(self, feat):
        return FC.IncrementalPCA(feat[0], self.hp.k, center=self.hp.center, max_updates=self.hp.max_updates)


class _ProjectionHP(HP):
    k: int = _K
    kind: Literal["gaussian", "sparse"] = Field(
        "gaussian", description="gaussian: R_ij ~ N(0, 1/k) (eq 105); sparse: ±sqrt(1/(s k)) w.p. s/2 (eq 104)")
    density: Optional[float] = Field(None, gt=0, le=1, description="s of the sparse kind (default 1/sqrt(m))")
    seed: int = Field(0, ge=0)


@register
class RandomProjection(_KMixin):
    """Random projection κ(x) = x R, R ∈ R^{m×k} drawn once from ``seed`` (eq 103–105), d = k.

    R is a registered buffer: it survives ``state_dict`` (tinyBIG bug §8.9 regenerates its random matrices).
    """

    name = "random_projection"
    aliases = ("incremental_random_projection", "incremental_random_projection_based_compression")
    HP = _ProjectionHP

    def module(self, feat):
        hp = self.hp
        return FC.RandomProjection(feat[0], hp.k, kind=hp.kind, density=hp.density, seed=hp.seed)


class _ReductionHP(HP):
    method: Literal["pca", "random_projection"] = "pca"
    k: int = _K
    center: bool = Field(False, description="pca only")
    max_updates: Optional[int] = Field(None, ge=1, description="pca only")
    kind: Literal["gaussian", "sparse"] = Field("gaussian", description="random_projection only")
    density: Optional[float] = Field(None, gt=0, le=1, description="random_projection only")
    seed: int = Field(0, ge=0, description="random_projection only")

    @model_validator(mode="after")
    def _relevant(self):
        other = {"pca": ("kind", "density", "seed"), "random_projection": ("center", "max_updates")}[self.method]
        bad = sorted(set(other) & self.model_fields_set)
        if bad:
            raise ValueError(f"method = {self.method!r} takes no {', '.join(bad)}")
        return self


@register
class DimensionReduction(_KMixin):
    """Dimension reduction κ(x) = x V_k (incremental PCA, eq 101–102) or x R (random projection, eq 103), d = k."""

    name = "dimension_reduction"
    aliases = ("dimension_reduction_compression",)
    HP = _ReductionHP

    def flat_out(self, m):
        if self.hp.method == "pca":
            _need_gram(self.name, m)
        return super().flat_out(m)

    def module(self, feat):
        hp = self.hp
        if hp.method == "pca":
            return FC.IncrementalPCA(feat[0], hp.k, center=hp.center, max_updates=hp.max_updates)
        return FC.RandomProjection(feat[0], hp.k, kind=hp.kind, density=hp.density, seed=hp.seed)


# ------------------------------------------------------------------------------------------------ manifold
_MANIFOLD_METHODS = ("isomap", "lle", "mds", "spectral_embedding", "tsne", "smacof")


class _ManifoldHP(HP):
    k: int = _K
    n_neighbors: int = Field(5, ge=1, le=10_000, description="isomap, lle, spectral_embedding")
    perplexity: Optional[float] = Field(None, gt=0, description="tsne (default min(30, (n−1)/3))")
    max_iter: Optional[int] = Field(None, ge=250, le=100_000, description="tsne, mds, smacof (sklearn default)")
    seed: int = Field(0, ge=0)


class _ManifoldAnyHP(_ManifoldHP):
    method: Literal[_MANIFOLD_METHODS] = "isomap"  # type: ignore[valid-type]


def _manifold_kwargs(method: str, hp) -> dict:
    import sklearn.manifold as M

    iters = {} if hp.max_iter is None or method not in ("tsne", "mds", "smacof") else {"max_iter": hp.max_iter}
    if method == "isomap":
        return {"n_neighbors": hp.n_neighbors, "eigen_solver": "dense"}  # arpack would draw an unseeded v0
    if method == "lle":
        return {"n_neighbors": hp.n_neighbors, "eigen_solver": "dense"}
    if method == "spectral_embedding":
        return {"n_neighbors": hp.n_neighbors}
    if method == "tsne":
        return iters if hp.perplexity is None else {"perplexity": hp.perplexity, **iters}
    if method == "mds" and "init" in inspect.signature(M.MDS).parameters:
        return {"init": "random", **iters}  # today's default, stated (sklearn 1.8+ warns about a coming change)
    return iters


class _Manifold(_KMixin):
    METHOD: ClassVar[str] = ""
    compile_limitation = ("fits a scikit-learn embedding on the host at every forward; TorchDynamo cannot trace "
                          "scikit-learn/NumPy, so that call is a graph break")
    example = head_example("sequence[B, 6, 4]", "kappa = {call}")  # enough rows for the neighbour graphs

    @property
    def method(self) -> str:
        return getattr(self.hp, "method", self.METHOD)

    def module(self, feat):
        return FC.ManifoldCompression(self.hp.k, method=self.method, seed=self.hp.seed,
                                      **_manifold_kwargs(self.method, self.hp))


_MANIFOLD_NOTE = ("\n\nFit on the batch: every forward embeds the rows of its own batch (all samples and items "
                  "together) with scikit-learn on the CPU, deterministically for a fixed seed; the output carries no "
                  "gradient and reads the batch back to the host (the one κ that does). Parity with tinyBIG only; "
                  "not a data-path operator.")


@register
class Manifold(_Manifold):
    """Manifold compression κ(X) = embed(X) ∈ R^{rows×k} (isomap, lle, mds, spectral embedding, t-SNE, smacof)."""

    __doc__ = __doc__ + _MANIFOLD_NOTE
    name = "manifold"
    aliases = ("manifold_compression",)
    HP = _ManifoldAnyHP


for _method, _title in (("isomap", "Isomap"), ("lle", "Locally linear embedding"), ("mds", "Metric MDS"),
                        ("spectral_embedding", "Spectral embedding"), ("tsne", "t-SNE")):
    register(type(f"Manifold_{_method}", (_Manifold,), {
        "__doc__": f"{_title} compression κ(X) = {_method}(X) ∈ R^{{rows×k}} (scikit-learn, fit on the batch), d = k."
                   + _MANIFOLD_NOTE,
        "name": _method, "METHOD": _method, "HP": _ManifoldHP, "__module__": __name__,
        "aliases": (f"{_method}_manifold_compression",)}))


# ------------------------------------------------------------------------------------------------ probabilistic
_SAMPLING_NOTE = ("\n\nSampling is reproducible: forward call j draws from a generator seeded by (seed, j); the call "
                  "counter is a buffer, so it survives state_dict. Gradients flow through the sampled values.")


class _NaiveSamplingHP(HP):
    k: int = _K
    params: Optional[list[float]] = Field(None, description="θ of the weighting law (default: tinyBIG's)")
    output: Literal["value", "normalized", "log_prob"] = Field(
        "value", description="value: x at the samples (tinyBIG simply_sampling); normalized: f(x); log_prob: eq 109")
    normalize: bool = Field(True, description="f(x) = 0.99·sigmoid(x) + 0.001 (tinyBIG require_normalization)")
    with_replacement: bool = False
    seed: int = Field(0, ge=0)


class _NaiveSamplingAnyHP(_NaiveSamplingHP):
    dist: Literal[tuple(FC.COMPRESSION_DISTRIBUTIONS)] = "uniform"  # type: ignore[valid-type]
    fixed: bool = Field(False, description="uniform only: one index set drawn at build time (a pure gather)")

    @model_validator(mode="after")
    def _fixed(self):
        if self.fixed and self.dist != "uniform":
            raise ValueError("fixed = true needs dist = \"uniform\" (other weights depend on x)")
        return self


_GENERATOR_LIMITATION = ("draws from a torch.Generator made at each forward (seeded by (seed, call)); TorchDynamo "
                         "cannot create a Generator inside a graph (\"An opaque object was created in the middle "
                         "of the program\")")


class _NaiveSampling(Kappa):
    family = "compression"
    DIST: ClassVar[str] = ""
    compile_limitation = _GENERATOR_LIMITATION
    example_call = "{name}(k = 2)"

    def flat_out(self, m):
        if not self.hp.with_replacement:
            _need_k(self.name, self.hp.k, m)
        dist = getattr(self.hp, "dist", self.DIST)
        theta = self.hp.params
        if theta is not None:  # θ must fit the law's density (log_pdf(x, *θ)); checked here, not at forward time
            want = len(FC.COMPRESSION_DISTRIBUTIONS[dist])
            if len(theta) != want:
                raise ShapeRuleError(f"{self.name}: the {dist} law takes {want} parameter(s), got params = "
                                     f"{list(theta)}")
            positive = {"normal": [1], "cauchy": [1], "laplace": [1], "chi2": [0], "exponential": [0],
                        "gamma": [0, 1]}.get(dist, [])
            if any(not theta[i] > 0 for i in positive) or (dist == "uniform" and not theta[1] > theta[0]):
                raise ShapeRuleError(f"{self.name}: params = {list(theta)} do not define a {dist} law (scales, "
                                     "rates and degrees of freedom are > 0; uniform needs low < high)")
        return self.hp.k

    def module(self, feat):
        hp = self.hp
        return FC.NaiveProbabilisticCompression(
            feat[0], hp.k, dist=getattr(hp, "dist", self.DIST), params=hp.params, output=hp.output,
            normalize=hp.normalize, with_replacement=hp.with_replacement, fixed=getattr(hp, "fixed", False),
            seed=hp.seed)


@register
class NaiveProbabilisticCompression(_NaiveSampling):
    """Naive probabilistic compression κ(x) = x[S], k attributes sampled ∝ p(f(x_i) | θ) or uniformly (eq 106–109)."""

    __doc__ = __doc__ + _SAMPLING_NOTE
    name = "naive_probabilistic_compression"
    HP = _NaiveSamplingAnyHP


for _dist in FC.COMPRESSION_DISTRIBUTIONS:
    register(type(f"Naive_{_dist}_compression", (_NaiveSampling,), {
        "__doc__": f"Naive {_dist} probabilistic compression κ(x) = x[S], k features drawn "
                   + ("uniformly" if _dist == "uniform" else f"∝ {_dist} p(f(x_i) | θ)") + " (eq 106–109)."
                   + _SAMPLING_NOTE,
        "name": f"naive_{_dist}_probabilistic_compression", "DIST": _dist, "HP": _NaiveSamplingHP,
        "__module__": __name__, "aliases": ()}))


class _CombinatorialHP(HP):
    d: int = Field(1, ge=1, le=4, description="largest tuple size r = 1..d")
    k: int = Field(1, ge=1, le=100_000, description="tuples sampled per size")
    normalize: bool = Field(True, description="weights read f(x) = 0.99·sigmoid(x) + 0.001 (tinyBIG)")
    with_replacement: bool = False
    loc: float = 0.0
    scale: float = Field(1.0, gt=0)
    rho: float = Field(0.0, lt=1, description="equicorrelation of the weighting normal")
    seed: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _rho(self):
        if self.d > 1 and not self.rho > -1.0 / (self.d - 1):
            raise ValueError(f"rho must exceed −1/(d−1) = {-1.0 / (self.d - 1):g}")
        return self


class _Combinatorial(Kappa):
    family = "compression"
    OUTPUT: ClassVar[str] = "value"
    compile_limitation = _GENERATOR_LIMITATION

    def _per_size(self) -> bool:
        return getattr(self.hp, "per_size", True)

    def flat_out(self, m):
        hp = self.hp
        if hp.d > m:
            raise ShapeRuleError(f"{self.name}: tuples of size d = {hp.d} need at least {hp.d} features, got {m}")
        avail = [math.comb(m, r) for r in range(1, hp.d + 1)]
        cap = min(avail) if self._per_size() else sum(avail)
        if not hp.with_replacement and hp.k > cap:
            raise ShapeRuleError(f"{self.name}: k = {hp.k} exceeds the {cap} available tuples")
        if self.OUTPUT == "value":
            return hp.k * hp.d * (hp.d + 1) // 2
        return hp.k * hp.d if self._per_size() else hp.k

    def module(self, feat):
        hp = self.hp
        return FC.CombinatorialProbabilisticCompression(
            feat[0], k=hp.d, d=hp.k, per_size=self._per_size(), output=self.OUTPUT, normalize=hp.normalize,
            with_replacement=hp.with_replacement, loc=hp.loc, scale=hp.scale, rho=hp.rho, seed=hp.seed)


@register
class CombinatorialCompression(_Combinatorial):
    """Combinatorial compression κ(x) = [k r-tuples of x sampled ∝ N(f(x_S) | loc, Σ_r), r = 1..d]; d = k·d(d+1)/2."""

    __doc__ = __doc__ + _SAMPLING_NOTE
    name = "combinatorial_compression"
    OUTPUT = "value"
    HP = _CombinatorialHP


class _CombinatorialProbHP(_CombinatorialHP):
    per_size: bool = Field(True, description="true: k tuples per size (tinyBIG); false: k from the pooled set (eq 112)")


@register
class CombinatorialProbabilisticCompression(_Combinatorial):
    """Combinatorial probabilistic κ(x) = [log N(f(x_S) | loc, Σ_r) of k sampled r-tuples S, r ≤ d] (eq 110–112)."""

    __doc__ = __doc__ + _SAMPLING_NOTE
    name = "combinatorial_probabilistic_compression"
    OUTPUT = "log_prob"
    HP = _CombinatorialProbHP


# ------------------------------------------------------------------------------------------------ composites
@register
class ExtendedCompression(Composite):
    """Extended compression κ(x) = [κ_1(x), ..., κ_K(x)] (concatenation of registry κ by name), d = Σ d_k."""

    name, family = "extended_compression", "compression"
    example_call = 'extended_compression(parts = ["max_compression", "mean_compression"])'
    concat = True
    part_families = ("compression", "expansion")
    HP = parts_hp(part_families)


@register
class NestedCompression(Composite):
    """Nested compression κ(x) = κ_K(... κ_1(x)) (composition of registry κ by name), d = d_K(... d_1(m))."""

    name, family = "nested_compression", "compression"
    example_call = 'nested_compression(parts = ["pca(k = 3)", "max_compression"])'
    concat = False
    part_families = ("compression", "expansion")
    HP = parts_hp(part_families)
