"""Data-dependent interdependence ξ: statistical and numerical kernels of the data (paper §5.1.3–5.1.4).

Each entry computes, per sample, a dense matrix from the data (the head's data input ``c``, ``[B, N, M]``):

* attribute axis: ``A ∈ R^{B x M x M}``, ``A[i, j] = k(c[:, i], c[:, j])`` over the M columns (eq 35), used as ``z·A``;
* instance axis: ``A ∈ R^{B x N x N}`` stored row = output item, ``A[j, i] = k(c_i, c_j)`` over the N rows (the
  paper's ``xi(Xᵀ)`` applied transposed, eq 26 / 29); with a context input (cross), ``A[j, i] = k(c_i, q_j)``.

Either way output j gathers input i with weight ``k(v_i, v_j)``. Samples never interact (semantics.md): there is no
kernel over the mini-batch, so a head without an item axis has no kernel ξ. The maths are
:mod:`rpn2c.functional.kernels` (Gram algebra / ``torch.cdist``, no loops over attributes or items); the optional
post-normalisation is applied on the row = output orientation (``row``: each output's weights sum to 1).
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal, Optional, Union

from pydantic import Field, field_validator

from rpn2c.components.base import Interdependence, ShapeRuleError
from rpn2c.components.registry import HP, register
from rpn2c.functional import kernels
from rpn2c.ir.types import is_known

NORMS = ("none", "row", "column", "symmetric", "softmax", "softmax_column", "mean_std", "mean_std_column",
         "mean_std_all")


class KernelHP(HP):
    """Options shared by every kernel ξ."""

    centered: bool = Field(False, description="subtract each compared vector's mean first (toolkit `centered`)")
    norm: Literal[NORMS] = Field("none", description="post-normalisation on the row = output orientation")
    softmax_scale: float = Field(1.0, description="softmax(scale · A) for the softmax norms")
    mask_zeros: bool = Field(False, description="softmax norms: exact zeros stay 0 (masked)")


class KernelXi(Interdependence):
    """Base of the kernel ξ entries: ``fn(X, Y=None, **kwargs)`` from kernels.py over column vectors."""

    kind = "data"
    HP = KernelHP
    fn: ClassVar = None
    #: hyper-parameter name -> kernels.py keyword
    kwargs_map: ClassVar[dict[str, str]] = {}

    def kernel_kwargs(self) -> dict:
        return {kw: getattr(self.hp, key) for key, kw in self.kwargs_map.items()}

    def vector_length(self, ctx) -> object:
        """Length of the compared vectors: N (columns, attribute axis) or M (rows, instance axis)."""
        return ctx.query_items if ctx.axis == "attribute" else ctx.context_features

    def out_size(self, ctx):
        if ctx.query_items is None:
            raise ShapeRuleError(f"'{self.name}' compares vectors along an item axis, and this head's input has "
                                 "none (samples never interact)")
        if ctx.axis == "attribute" and str(ctx.size) != str(ctx.context_features):
            raise ShapeRuleError(f"'{self.name}' on the attribute axis is an M x M matrix of the data's "
                                 f"{ctx.context_features} columns; this slot acts on {ctx.size} features")
        if ctx.axis == "instance" and str(ctx.query_features) != str(ctx.context_features):
            raise ShapeRuleError(f"'{self.name}' compares query rows ({ctx.query_features} features) with context "
                                 f"rows ({ctx.context_features} features); they must have the same width")
        return ctx.size

    def build(self, ctx):
        from rpn2c.components.impl.xi_kernels import KernelXiModule

        return KernelXiModule(type(self).fn, self.kernel_kwargs(), self.hp, ctx.axis)


# ------------------------------------------------------------------------------------------------ statistical
@register
class KLDivergence(KernelXi):
    """KL divergence ξ: A[i, j] = KL(p_i ‖ p_j) = Σ_k p_i(k) log(p_i(k)/p_j(k)), vectors made distributions (eq 36).

    dist = "softmax" (default, the toolkit's) or "abs_sum" ((|x|+eps)/Σ(|x|+eps)); asymmetric, ≥ 0, diagonal 0.
    """

    name, family = "kl_divergence", "interdependence"
    fn = staticmethod(kernels.kl_divergence_kernel)
    kwargs_map = {"dist": "normalize", "eps": "eps"}

    class HP(KernelHP):
        dist: Literal["softmax", "abs_sum"] = "softmax"
        eps: float = Field(1e-12, gt=0)


@register
class PearsonCorrelation(KernelXi):
    """Pearson correlation ξ: A[i, j] = ρ(v_i, v_j) = Σ_k (x_k − μx)(y_k − μy)/(b σx σy) (eq 37), = numpy.corrcoef.

    Population or unbiased std give the same ρ (the ddof cancels); zero-variance vectors give 0, never NaN.
    """

    name, family = "pearson_correlation", "interdependence"
    aliases = ("pearson",)
    fn = staticmethod(kernels.pearson_correlation_kernel)


@register
class RVCoefficient(KernelXi):
    """RV coefficient ξ: A[i, j] = tr(Σ_ij Σ_ji)/sqrt(tr Σ_ii² tr Σ_jj²) = ρ(v_i, v_j)² for 1-D vectors (eq 38).

    Errata (catalog §2.5, §8 item 11): the toolkit returns clamped ρ with a 0 diagonal (and loops over pairs);
    here RV = ρ² exactly, diagonal 1, in [0, 1], one Gram product.
    """

    name, family = "rv_coefficient", "interdependence"
    fn = staticmethod(kernels.rv_coefficient_kernel)


@register
class MutualInformation(KernelXi):
    """Gaussian mutual information ξ: A[i, j] = ½ log(σ_i² σ_j² / det Σ_ij) = −½ log(1 − ρ_ij²) (eq 39), nats.

    1 − ρ² is floored at eps (default 1e-6), so the diagonal (ρ = 1, MI = +inf in theory) is ½ log(1/eps);
    diagonal = 0.0 reproduces the toolkit's zero diagonal (erratum 11). Vectorised (no pair loop).
    """

    name, family = "mutual_information", "interdependence"
    aliases = ("gaussian_mutual_information",)
    fn = staticmethod(kernels.gaussian_mutual_information_kernel)
    kwargs_map = {"eps": "eps", "diagonal": "diagonal"}

    class HP(KernelHP):
        eps: float = Field(1e-6, gt=0, le=1)
        diagonal: Optional[float] = None


# ------------------------------------------------------------------------------------------------ numerical
@register
class LinearKernel(KernelXi):
    """Linear (inner product) kernel ξ: A[i, j] = <v_i, v_j>, i.e. A = XᵀX (eq 43)."""

    name, family = "linear_kernel", "interdependence"
    aliases = ("inner_product_kernel",)
    fn = staticmethod(kernels.linear_kernel)


@register
class PolynomialKernel(KernelXi):
    """Polynomial kernel ξ: A[i, j] = (<v_i, v_j> + c)^d (eq 44)."""

    name, family = "polynomial_kernel", "interdependence"
    fn = staticmethod(kernels.polynomial_kernel)
    kwargs_map = {"c": "c", "d": "d"}

    class HP(KernelHP):
        c: float = 0.0
        d: int = Field(2, ge=0)


@register
class HyperbolicTangentKernel(KernelXi):
    """Hyperbolic tangent kernel ξ: A[i, j] = tanh(α<v_i, v_j> + c) (eq 45)."""

    name, family = "hyperbolic_tangent_kernel", "interdependence"
    aliases = ("tanh_kernel",)
    fn = staticmethod(kernels.hyperbolic_tangent_kernel)
    kwargs_map = {"alpha": "alpha", "c": "c"}

    class HP(KernelHP):
        alpha: float = 1.0
        c: float = 0.0


@register
class ExponentialKernel(KernelXi):
    """Exponential kernel ξ: A[i, j] = exp(−γ ‖v_i − v_j‖₁) (eq 46, paper); distance = "l2sq": exp(−γ‖·‖₂²).

    Erratum 11: the paper's L1 form is the default; the toolkit's squared-L2 form is distance = "l2sq".
    """

    name, family = "exponential_kernel", "interdependence"
    fn = staticmethod(kernels.exponential_kernel)
    kwargs_map = {"gamma": "gamma", "distance": "norm"}

    class HP(KernelHP):
        gamma: float = Field(1.0, ge=0)
        distance: Literal["l1", "l2sq"] = "l1"


@register
class CosineSimilarity(KernelXi):
    """Cosine similarity ξ: A[i, j] = <v_i, v_j> / (‖v_i‖ ‖v_j‖) (eq 47); a zero vector gives 0 (never NaN)."""

    name, family = "cosine_similarity", "interdependence"
    aliases = ("cosine_kernel",)
    fn = staticmethod(kernels.cosine_similarity_kernel)
    kwargs_map = {"eps": "eps"}

    class HP(KernelHP):
        eps: float = Field(1e-8, gt=0)


class _MinkowskiHP(KernelHP):
    form: Literal["paper", "exp"] = Field("paper", description="1 − dist (paper) or exp(−dist) (toolkit)")


@register
class MinkowskiKernel(KernelXi):
    """Minkowski distance kernel ξ: A[i, j] = 1 − ‖v_i − v_j‖_p, p ≥ 1 or "inf" (eq 48 / 53); form = "exp": exp(−‖·‖_p).

    Erratum 11: the paper's 1 − dist is the default; the toolkit's exp(−dist) is form = "exp". Exact cdist.
    """

    name, family = "minkowski_kernel", "interdependence"
    aliases = ("minkowski_distance",)
    fn = staticmethod(kernels.minkowski_kernel)
    kwargs_map = {"form": "form"}

    class HP(_MinkowskiHP):
        p: Union[float, Literal["inf"]] = 2.0

        @field_validator("p")
        @classmethod
        def _p(cls, v):
            if v != "inf" and not v >= 1:
                raise ValueError("p must be >= 1 or \"inf\"")
            return v

    def kernel_kwargs(self):
        return {"form": self.hp.form, "p": math.inf if self.hp.p == "inf" else float(self.hp.p)}


@register
class ManhattanKernel(KernelXi):
    """Manhattan distance kernel ξ: A[i, j] = 1 − ‖v_i − v_j‖₁ (eq 53, p = 1); form = "exp": exp(−‖·‖₁)."""

    name, family = "manhattan_kernel", "interdependence"
    aliases = ("manhattan_distance",)
    HP = _MinkowskiHP
    fn = staticmethod(kernels.manhattan_kernel)
    kwargs_map = {"form": "form"}


@register
class EuclideanKernel(KernelXi):
    """Euclidean distance kernel ξ: A[i, j] = 1 − ‖v_i − v_j‖₂ (eq 53, p = 2); form = "exp": exp(−‖·‖₂)."""

    name, family = "euclidean_kernel", "interdependence"
    aliases = ("euclidean_distance",)
    HP = _MinkowskiHP
    fn = staticmethod(kernels.euclidean_kernel)
    kwargs_map = {"form": "form"}


@register
class ChebyshevKernel(KernelXi):
    """Chebyshev distance kernel ξ: A[i, j] = 1 − ‖v_i − v_j‖_∞ (eq 53, p = ∞); form = "exp": exp(−‖·‖_∞)."""

    name, family = "chebyshev_kernel", "interdependence"
    aliases = ("chebyshev_distance",)
    HP = _MinkowskiHP
    fn = staticmethod(kernels.chebyshev_kernel)
    kwargs_map = {"form": "form"}


@register
class CanberraKernel(KernelXi):
    """Canberra kernel ξ (toolkit only): A[i, j] = exp(−Σ_k |x_k − y_k| / (|x_k| + |y_k|)), 0/0 = 0."""

    name, family = "canberra_kernel", "interdependence"
    aliases = ("canberra_distance",)
    fn = staticmethod(kernels.canberra_kernel)


@register
class GaussianRBFKernel(KernelXi):
    """Gaussian RBF kernel ξ: A[i, j] = exp(−‖v_i − v_j‖₂² / (2σ²)) (eq 49); diagonal exactly 1."""

    name, family = "gaussian_rbf_kernel", "interdependence"
    aliases = ("rbf_kernel",)
    fn = staticmethod(kernels.gaussian_rbf_kernel)
    kwargs_map = {"sigma": "sigma"}

    class HP(KernelHP):
        sigma: float = Field(1.0, gt=0)


@register
class LaplacianKernel(KernelXi):
    """Laplacian kernel ξ: A[i, j] = exp(−‖v_i − v_j‖₁ / σ) (eq 50)."""

    name, family = "laplacian_kernel", "interdependence"
    fn = staticmethod(kernels.laplacian_kernel)
    kwargs_map = {"sigma": "sigma"}

    class HP(KernelHP):
        sigma: float = Field(1.0, gt=0)


@register
class AnisotropicRBFKernel(KernelXi):
    """Anisotropic RBF kernel ξ: A[i, j] = exp(−(v_i − v_j) diag(a) (v_i − v_j)ᵀ) (eq 51), a scalar or per entry.

    ``a`` is a hyper-parameter (no learning, as the paper); a list must have one scale per vector entry: N on the
    attribute axis, M on the instance axis. It is a persistent buffer (follows dtype/device, saved with the model).
    """

    name, family = "anisotropic_rbf_kernel", "interdependence"
    fn = staticmethod(kernels.anisotropic_rbf_kernel)

    class HP(KernelHP):
        a: Union[float, list[float]] = 1.0

        @field_validator("a")
        @classmethod
        def _nonempty(cls, v):
            if isinstance(v, list) and not v:
                raise ValueError("a needs at least one scale")
            return v

    def out_size(self, ctx):
        size = super().out_size(ctx)
        if isinstance(self.hp.a, list):
            length = self.vector_length(ctx)
            if not is_known(length):
                raise ShapeRuleError(f"'{self.name}' has a list of {len(self.hp.a)} scales in a: the compared "
                                     f"vectors need a known length, got {length}")
            if length != len(self.hp.a):
                raise ShapeRuleError(f"'{self.name}' has {len(self.hp.a)} scales in a, but the compared vectors "
                                     f"have {length} entries")
        return size

    def build(self, ctx):
        from rpn2c.components.impl.xi_kernels import _AnisotropicModule

        return _AnisotropicModule(self.hp, ctx.axis)


#: registry name -> entry class, for hybrid_kernel and the docs
KERNEL_ENTRIES = {cls.name: cls for cls in (
    KLDivergence, PearsonCorrelation, RVCoefficient, MutualInformation, LinearKernel, PolynomialKernel,
    HyperbolicTangentKernel, ExponentialKernel, CosineSimilarity, MinkowskiKernel, ManhattanKernel, EuclideanKernel,
    ChebyshevKernel, CanberraKernel, GaussianRBFKernel, LaplacianKernel, AnisotropicRBFKernel)}
