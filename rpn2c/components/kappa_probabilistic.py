"""Probabilistic expansion κ: log-densities of the input under fixed laws (RPN 2 §7.1, tinyBIG inventory).

Naive entries give log p(x | θ) per attribute for one θ (D = m); family entries give one column per member of a
θ set (D = K·m); the hybrid entry stacks one fixed law of every family (D = 6m). The maths is
:mod:`rpn2c.functional.expansion` (``naive_*``, the family rows, ``PROB_FAMILIES``). The tinyBIG class names are
registered as aliases.
"""

from __future__ import annotations

from typing import ClassVar, Literal, Optional

from pydantic import Field, model_validator

from rpn2c.components.kappa_expansion import _Expansion
from rpn2c.components.registry import HP, register
from rpn2c.functional import expansion as FE


_DISTS = ("normal", "cauchy", "chi2", "gamma", "laplace", "exponential")
_DIST_PARAMS = {"normal": ("loc", "scale"), "cauchy": ("loc", "scale"), "laplace": ("loc", "scale"), "chi2": ("df",),
                "gamma": ("concentration", "rate"), "exponential": ("rate",)}
_POSITIVE = {"scale", "df", "concentration", "rate"}


def _check_theta(dist: str, theta) -> tuple[float, ...]:
    names = _DIST_PARAMS[dist]
    if len(theta) != len(names):
        raise ValueError(f"{dist} takes parameters ({', '.join(names)}), got {list(theta)}")
    for n, v in zip(names, theta):
        if n in _POSITIVE and not v > 0:
            raise ValueError(f"{dist} parameter {n} must be > 0, got {v}")
    return tuple(float(v) for v in theta)


class _NaiveHP(HP):
    params: Optional[list[float]] = Field(None, description="θ (default: the family's first member)")
    squash: bool = Field(True, description="positive laws read 0.99·sigmoid(x)+0.001 (tinyBIG)")


class _Naive(_Expansion):
    DIST: ClassVar[str] = ""
    HP = _NaiveHP

    @property
    def dist(self) -> str:
        return self.hp.__dict__.get("dist", self.DIST)  # (pydantic's __getattr__ does not trace)

    @property
    def spec(self):
        return self.table[f"naive_{self.dist}"]

    def kwargs(self):
        return {"params": None if self.hp.params is None else tuple(self.hp.params), "squash": self.hp.squash}


class _NaiveAnyHP(_NaiveHP):
    dist: Literal[_DISTS] = "normal"  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _theta(self):
        if self.params is not None:
            _check_theta(self.dist, self.params)
        return self


@register
class NaiveProbabilistic(_Naive):
    """Naive probabilistic κ(x) = log p(x | θ) elementwise (normal, cauchy, chi2, gamma, laplace, exponential); D = m.

    Positive-support laws (chi2, gamma, exponential) read 0.99·sigmoid(x) + 0.001 when ``squash`` (tinyBIG).
    """

    name = "naive_probabilistic"
    HP = _NaiveAnyHP


def _fixed_theta_hp(dist: str) -> type[HP]:
    class FixedHP(_NaiveHP):
        @model_validator(mode="after")
        def _theta(self):
            if self.params is not None:
                _check_theta(dist, self.params)
            return self

    return FixedHP


def _naive_entry(dist: str) -> type:
    names = ", ".join(_DIST_PARAMS[dist])
    cls = type(f"Naive_{dist}", (_Naive,), {
        "__doc__": f"Naive {dist} κ(x) = log p(x | {names}) elementwise (θ = {FE.PROB_FAMILIES[dist][0]} by "
                   f"default); D = m.",
        "name": f"naive_{dist}", "DIST": dist, "aliases": (f"naive_{dist}_expansion",), "HP": _fixed_theta_hp(dist),
        "__module__": __name__})
    return register(cls)


for _d in _DISTS:
    _naive_entry(_d)


class _FamilyHP(HP):
    params: Optional[list[list[float]]] = Field(None, min_length=1, description="θ_1..θ_K (default: tinyBIG's set)")
    squash: bool = Field(True, description="positive laws read 0.99·sigmoid(x)+0.001 (tinyBIG)")


class _Family(_Expansion):
    DIST: ClassVar[str] = ""

    @property
    def spec(self):
        return self.table[self.hp.__dict__.get("dist", self.DIST)]  # (pydantic's __getattr__ does not trace)

    def kwargs(self):
        p = self.hp.params
        return {"params": None if p is None else tuple(tuple(t) for t in p), "squash": self.hp.squash}


class _FamilyAnyHP(_FamilyHP):
    dist: Literal[_DISTS] = "normal"  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _theta(self):
        for t in self.params or ():
            _check_theta(self.dist, t)
        return self


@register
class Probabilistic(_Family):
    """Probabilistic κ(x) = per attribute [log p(x | θ_1), ..., log p(x | θ_K)] for one family; D = m·K.

    Default θ sets are tinyBIG's (6 members; chi2: 2), listed in ``rpn2c.functional.expansion.PROB_FAMILIES``.
    """

    name = "probabilistic"
    HP = _FamilyAnyHP


def _family_entry(dist: str) -> type:
    class FixedHP(_FamilyHP):
        @model_validator(mode="after")
        def _theta(self):
            for t in self.params or ():
                _check_theta(dist, t)
            return self

    k = len(FE.PROB_FAMILIES[dist])
    cls = type(f"Family_{dist}", (_Family,), {
        "__doc__": f"{dist.capitalize()} family κ(x) = per attribute [log p(x | θ_j)] for tinyBIG's {k} {dist} "
                   f"parameter sets; D = {k}m.",
        "name": f"probabilistic_{dist}", "DIST": dist, "aliases": (f"{dist}_expansion",), "HP": FixedHP,
        "__module__": __name__})
    return register(cls)


for _d in _DISTS:
    _family_entry(_d)


@register
class HybridProbabilistic(_Expansion):
    """Hybrid probabilistic κ(x) = per attribute log p(x) for N, Cauchy, χ², Γ, Laplace, Exp (θ fixed); D = 6m."""

    name = "hybrid_probabilistic"
    aliases = ("hybrid_probabilistic_expansion",)

    class HP(HP):
        squash: bool = Field(True, description="positive laws read 0.99·sigmoid(x)+0.001 (tinyBIG)")

