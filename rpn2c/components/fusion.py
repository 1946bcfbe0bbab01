"""Fusion of heads (in a layer) or channels (in a head) (paper §4.5, §6.2; catalog §2.9; tinyBIG's 20 fusions).

Entries call :mod:`rpn2c.functional.fusion` (and, for the reconciled concatenations, the ψ entries). A fusion sees
k tensors ``[..., d_i]`` and fuses along the feature axis (the channel axis of images, moved last by the layer).
Element-wise fusions need equal widths; concatenations take any widths and concatenate features (erratum 17: the
paper's "row-wise" ⊔ is the feature-wise concatenation its shapes describe).
"""

from __future__ import annotations

from functools import partial
from typing import ClassVar, Literal, Optional

from pydantic import Field, field_validator

from rpn2c.components import psi as psi_entries
from rpn2c.components.base import Fusion
from rpn2c.components.registry import HP, register
from rpn2c.functional import fusion as F


# ------------------------------------------------------------------------------------------------ element-wise
class _SameWidth(Fusion):
    """Element-wise fusions need equal widths; the output has that width."""

    family = "fusion"
    fn: ClassVar = None

    def check(self, dims):
        return None if len(set(dims)) == 1 else f"{self.name} fusion needs equal widths, got {dims}"

    def out_features(self, dims):
        return dims[0]

    def kwargs(self) -> dict:
        return {}

    def build(self, dims):
        from rpn2c.components.impl.fusion import _FnModule

        return _FnModule(type(self).fn, self.name, **self.kwargs())


def _elementwise(name_, fn_, doc, aliases=()):
    cls = type("".join(w.title() for w in name_.split("_")) + "Fusion", (_SameWidth,),
               {"__doc__": doc, "name": name_, "fn": staticmethod(fn_), "aliases": tuple(aliases),
                "__module__": __name__})
    return register(cls)


Sum = _elementwise("sum", F.sum_fusion, "Summation fusion Σ_i A_i (eq 114 with α_i = 1).", ("summation",))
Mean = _elementwise("mean", F.mean_fusion, """Average fusion (1/k) Σ_i A_i (eq 114 with α_i = 1/k).

    The toolkit has two (average_fusion and metric mean_fusion, one shadowing the other on import); both are this.
    """, ("average",))
Max = _elementwise("max", F.max_fusion, """Max fusion max_i A_i, element-wise (eq 115-116).

    Ties share the gradient equally (amax), so the function is symmetric in its inputs.
    """)
Min = _elementwise("min", F.min_fusion, "Min fusion min_i A_i, element-wise (ties share the gradient).")
Prod = _elementwise("prod", F.prod_fusion, "Product fusion Π_i A_i, element-wise.", ("product",))
Hadamard = _elementwise("hadamard", F.hadamard_fusion, """Hadamard product fusion A_1 ∘ A_2 ∘ ... ∘ A_k (eq 117-118).

    The same function as `prod`; the paper's name, e.g. to mask data-based interdependence with a structural one.
    """, ("hadamard_product",))
L1Norm = _elementwise("l1_norm", partial(F.pnorm_fusion, p=1.0),
                      "L1-norm fusion Σ_i |A_i|, element-wise (the toolkit's l1_norm_fusion).")
L2Norm = _elementwise("l2_norm", partial(F.pnorm_fusion, p=2.0),
                      "L2-norm fusion (Σ_i A_i²)^{1/2}, element-wise (the toolkit's l2_norm_fusion).")


@register
class Median(_SameWidth):
    """Median fusion median_i A_i, element-wise; for even k, mode "mean" averages the two middle values.

    "mean" is the textbook (NumPy) median and symmetric in its inputs; "lower" takes the lower middle value
    (torch.median, which the toolkit's metric fusion calls).
    """

    name = "median"
    fn = staticmethod(F.median_fusion)

    class HP(HP):
        mode: Literal["mean", "lower"] = Field("mean", description="even k: average the middle pair, or the lower")

    def kwargs(self):
        return {"mode": self.hp.mode}


@register
class Norm(_SameWidth):
    """p-norm fusion (Σ_i |A_i|^p)^{1/p}, element-wise (a vector norm across the k inputs)."""

    name = "norm"
    aliases = ("pnorm",)
    fn = staticmethod(F.pnorm_fusion)

    class HP(HP):
        p: float = Field(2.0, gt=0.0, description="order of the norm")

    def kwargs(self):
        return {"p": self.hp.p}


_METRICS = {"max": F.max_fusion, "min": F.min_fusion, "sum": F.sum_fusion, "mean": F.mean_fusion,
            "prod": F.prod_fusion, "median": F.median_fusion, "l1_norm": partial(F.pnorm_fusion, p=1.0),
            "l2_norm": partial(F.pnorm_fusion, p=2.0)}


@register
class Metric(_SameWidth):
    """Metric fusion metric_i(A_i), element-wise, metric one of max, min, sum, mean, prod, median, l1_norm, l2_norm.

    The toolkit's generic metric_fusion(metric); each metric is also an entry of its own.
    """

    name = "metric"

    class HP(HP):
        metric: Literal["max", "min", "sum", "mean", "prod", "median", "l1_norm", "l2_norm"] = Field(
            "max", description="the element-wise statistic")

    def build(self, dims):
        from rpn2c.components.impl.fusion import _FnModule

        return _FnModule(_METRICS[self.hp.metric], f"metric={self.hp.metric}")


@register
class Weighted(_SameWidth):
    """Weighted summation fusion Σ_i α_i A_i (eq 114), α ∈ R^k learnable (l = k) or fixed.

    `weights` gives α (default 1/k each); `learnable = false` keeps them fixed (the toolkit's
    weighted_summation_fusion), `learnable = true` learns them from that start (parameterized_weighted_summation).
    """

    name = "weighted"
    aliases = ("weighted_sum", "parameterized_weighted_summation")

    class HP(HP):
        weights: Optional[list[float]] = Field(None, description="α_1..α_k (initial values if learnable); default 1/k")
        learnable: bool = Field(True, description="learn α")

        @field_validator("weights")
        @classmethod
        def _non_empty(cls, v):
            if v is not None and not v:
                raise ValueError("weights must list one number per input")
            return v

    def check(self, dims):
        w = self.hp.weights
        if w is not None and len(w) != len(dims):
            return f"weighted fusion has {len(w)} weights for {len(dims)} inputs"
        return super().check(dims)

    def count(self, dims):
        return len(dims) if self.hp.learnable else 0

    def build(self, dims):
        import torch
        from rpn2c.components.impl.fusion import _Weighted

        k = len(dims)
        w = torch.tensor(self.hp.weights if self.hp.weights is not None else [1.0 / k] * k)
        return _Weighted(w, self.hp.learnable)


# ------------------------------------------------------------------------------------------------ concatenations
@register
class Concat(Fusion):
    """Concatenation fusion A_1 ⊔ ... ⊔ A_k along the feature axis: width Σ n_i (no parameters).

    Erratum 17: the paper calls ⊔ "row-wise"; its shapes (m x Σ n_i) make it feature-wise, as here.
    """

    name, family = "concat", "fusion"
    aliases = ("concatenation",)

    def out_features(self, dims):
        return sum(dims)

    def build(self, dims):
        from rpn2c.components.impl.fusion import _FnModule

        return _FnModule(F.concat_fusion, "concat")


class _ProjHP(HP):
    out: Optional[int] = Field(None, ge=1, description="output width n; default Σ n_i")
    bias: bool = Field(True, description="learn b ∈ R^n")


class _Projected(Fusion):
    """Concatenation then a learned projection to width n."""

    family = "fusion"

    def width(self, dims):
        return self.hp.out if self.hp.out is not None else sum(dims)

    def out_features(self, dims):
        return self.width(dims)

    def bias_count(self, dims):
        return self.width(dims) if self.hp.bias else 0


@register
class ConcatLinear(_Projected):
    """Concat + linear fusion (⊔ A_i) W (+ b), W ∈ R^{(Σ n_i) x n} (eq 119); l = n·Σ n_i (+ n).

    The toolkit's parameterized_concatenation_fusion. Stored as nn.Linear (`linear.weight` = Wᵀ ∈ R^{n x Σ n_i}).
    """

    name = "concat_linear"
    aliases = ("parameterized_concatenation",)
    HP = _ProjHP

    def count(self, dims):
        return sum(dims) * self.width(dims) + self.bias_count(dims)

    def build(self, dims):
        from rpn2c.components.impl.fusion import _ConcatLinear

        return _ConcatLinear(sum(dims), self.width(dims), self.hp.bias)


@register
class ConcatLowRank(_Projected):
    """Concat + low-rank fusion (⊔ A_i)(P Qᵀ) (+ b), P ∈ R^{(Σn_i) x r}, Q ∈ R^{n x r} (eq 120); l = r(Σn_i + n) (+ n).

    Applied as ((⊔ A_i) P) Qᵀ, never forming P Qᵀ. The toolkit's lowrank_parameterized_concatenation_fusion.
    """

    name = "concat_lowrank"
    aliases = ("lowrank_parameterized_concatenation", "concat_low_rank")

    class HP(_ProjHP):
        r: int = Field(2, ge=1, description="rank")

    def count(self, dims):
        return self.hp.r * (sum(dims) + self.width(dims)) + self.bias_count(dims)

    def build(self, dims):
        from rpn2c.components.impl.fusion import _ConcatLowRank

        return _ConcatLowRank(sum(dims), self.width(dims), self.hp.r, self.hp.bias)


class _Reconciled(_Projected):
    """(⊔ A_i) ψ(w)ᵀ (+ b) with ψ: R^l -> R^{n x Σ n_i} a reconciliation entry (`psi_cls`), applied factored."""

    psi_cls: ClassVar[type] = None

    def psi(self):
        fields = self.psi_cls.HP.model_fields
        return self.psi_cls(self.psi_cls.HP(**{k: v for k, v in self.hp if k in fields}))

    def check(self, dims):
        n, d = self.width(dims), sum(dims)
        err = self.psi().check(n, d)
        return None if err is None else f"{self.name} (ψ is n x Σn_i = {n} x {d}): {err}"

    def count(self, dims):
        return self.psi().count(self.width(dims), sum(dims)) + self.bias_count(dims)

    def build(self, dims):
        from rpn2c.components.impl.fusion import _ReconciledConcat

        n = self.width(dims)
        return _ReconciledConcat(self.psi().build(n, sum(dims)), n, self.hp.bias)


def _reconciled(name_, psi_cls, hp_cls, doc, aliases=()):
    cls = type("Concat" + psi_cls.__name__, (_Reconciled,),
               {"__doc__": doc, "name": name_, "psi_cls": psi_cls, "HP": hp_cls, "aliases": tuple(aliases),
                "__module__": __name__})
    return register(cls)


class _HMHP(_ProjHP):
    p: Optional[int] = Field(None, ge=1, description="block rows (divides n); default: closest factor of n")
    q: Optional[int] = Field(None, ge=1, description="block columns (divides Σ n_i); default: closest factor")


class _LPHMHP(_HMHP):
    r: int = Field(2, ge=1, description="rank of the factorised block(s)")


class _VeRAHP(_ProjHP):
    r: int = Field(2, ge=1, description="rank of the frozen factors")
    std: psi_entries.Std = Field(1.0, description="std of the frozen N(0, std²) factors, or \"fan_in\"")
    seed: int = Field(0, ge=0, description="seed of the frozen random matrices (persistent buffers)")
    _std = field_validator("std")(psi_entries._positive_std)


ConcatHM = _reconciled("concat_hm", psi_entries.HM, _HMHP, (
    "Concat + HM fusion (⊔ A_i)(A ⊗ B)ᵀ (+ b), A ∈ R^{p x q}, B ∈ R^{(n/p) x (Σn_i/q)}; l = pq + nΣn_i/(pq) (+ n).\n\n"
    "The toolkit's hm_parameterized_concatenation_fusion, with a true Kronecker product (its bug 3) applied by the\n"
    "reshape trick."), ("hm_parameterized_concatenation",))
ConcatLPHM = _reconciled("concat_lphm", psi_entries.LPHM, _LPHMHP, (
    "Concat + LPHM fusion (⊔ A_i)(A ⊗ (S T))ᵀ (+ b); l = pq + r(n/p + Σn_i/q) (+ n).\n\n"
    "The toolkit's lphm_parameterized_concatenation_fusion, with a true Kronecker product (its bug 3)."),
    ("lphm_parameterized_concatenation",))
ConcatDualLPHM = _reconciled("concat_dual_lphm", psi_entries.DualLPHM, _LPHMHP, (
    "Concat + dual-LPHM fusion (⊔ A_i)((P Q) ⊗ (S T))ᵀ (+ b); l = r(p + q + n/p + Σn_i/q) (+ n).\n\n"
    "The toolkit's dual_lphm_parameterized_concatenation_fusion, with a true Kronecker product (its bug 3)."),
    ("dual_lphm_parameterized_concatenation",))
ConcatVeRA = _reconciled("concat_random_matrix_adaption", psi_entries.RandomMatrixAdaption, _VeRAHP, (
    "Concat + random-matrix-adaption fusion (⊔ A_i)(Λ1 A Λ2 Bᵀ)ᵀ (+ b), A, B frozen N(0, std²); l = n + r (+ n).\n\n"
    "The toolkit's random_matrix_adaption_parameterized_concatenation_fusion; A, B are persistent buffers from\n"
    "`seed` (its bug 9)."), ("concat_vera", "random_matrix_adaption_parameterized_concatenation"))
