"""Probabilistic compression κ (RPN 2 eq 106–112): attributes or attribute tuples sampled by a law.

Naive entries keep k attributes drawn uniformly or ∝ p(f(x_i) | θ); combinatorial entries draw r-tuples ∝ a
multivariate normal and return their values or log-densities. The sampling modules are
:mod:`rpn2c.functional.compression`'s; each forward call draws from its own seeded generator.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal, Optional

from pydantic import Field, model_validator

from rpn2c.components.base import Kappa, ShapeRuleError
from rpn2c.components.kappa_compression import _K, _need_k
from rpn2c.components.registry import HP, register
from rpn2c.functional import compression as FC


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


MAX_TUPLES = 2**22  # r-subsets (r = 1..d) of the features that a combinatorial κ enumerates and scores per sample


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
        if sum(avail) > MAX_TUPLES:
            raise ShapeRuleError(f"{self.name}: tuples of up to d = {hp.d} of {m} features are {sum(avail):,} per "
                                 f"sample, each scored every call (at most {MAX_TUPLES:,}); lower d or compress "
                                 "the input first")
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
