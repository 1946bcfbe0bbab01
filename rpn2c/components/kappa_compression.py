"""Data compression κ (D <= m): the RPN 2 paper's (§6.1) and the tinyBIG inventory's flat compressions.

Basic, metric, flatten, feature selection, dimension reduction and manifold compressions and the composites live
here; the geometric pooling ones in :mod:`rpn2c.components.kappa_pooling` and the probabilistic sampling ones in
:mod:`rpn2c.components.kappa_sampling`. Each entry calls :mod:`rpn2c.functional.compression` (metrics, random
projection, the stateful incremental modules, manifold embeddings). Stateful entries (feature selection,
incremental PCA) keep their statistics in registered buffers (``state_dict`` round-trips), update them on training
batches only and are frozen in eval mode. The tinyBIG class names are registered as aliases.
"""

from __future__ import annotations

import inspect
import math
from typing import ClassVar, Literal, Optional

from pydantic import AliasChoices, Field, model_validator

from rpn2c.components.base import Kappa, ShapeRuleError, head_example
from rpn2c.components.kappa import METRIC_NAMES, Composite, FunctionalKappa, MetricHP, metric_kwargs, parts_hp
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
        from rpn2c.components.impl.kappa import CallModule

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


# ------------------------------------------------------------------------------------------------ flatten
@register
class Flatten(Kappa):
    """Flatten compression κ(x) = vec(x): a grid [C, *S] becomes C·ΠS flat features (channel-major)."""

    name, family = "flatten", "compression"

    def features_out(self, feat):
        return (math.prod(feat),)

    def build(self, feat):
        from rpn2c.components.impl.kappa_compression import _FlattenModule

        return _FlattenModule()


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
