"""Data expansion κ (D >= m): the RPN 2 paper's (§7.1) and the tinyBIG inventory's elementwise and composite ones.

Basic, polynomial, trigonometric, RBF and combinatorial expansions and the composites (``extended``, ``nested``)
live here; the probabilistic ones in :mod:`rpn2c.components.kappa_probabilistic`, the wavelets in
:mod:`rpn2c.components.kappa_wavelets` and the patch-based geometric ones in :mod:`rpn2c.components.kappa_patches`.
Each entry maps its hyper-parameters onto a builder of :mod:`rpn2c.functional.expansion` (the maths lives there and
is tested there). Elementwise entries give ``degree`` outputs per attribute, attribute-major (``out[i*k + j] =
g_j(x_i)``); zero padding in grid heads reads ``value_at_zero()`` = κ(0). The order-0 constant is never part of a
polynomial expansion. The tinyBIG class names are registered as aliases (``hermite_expansion`` -> ``hermite``).
"""

from __future__ import annotations

from typing import ClassVar, Literal, Optional

from pydantic import Field, field_validator, model_validator

from rpn2c.components.base import ShapeRuleError
from rpn2c.components.kappa import Composite, FunctionalKappa, parts_hp
from rpn2c.components.registry import HP, register
from rpn2c.functional import expansion as FE


class _Expansion(FunctionalKappa):
    family = "expansion"
    table = FE.EXPANSIONS


# ------------------------------------------------------------------------------------------------ basic
@register
class Identity(_Expansion):
    """κ(x) = x (D = m)."""

    name = "identity"
    aliases = ("identity_expansion",)


@register
class Reciprocal(_Expansion):
    """κ(x) = 1/x', x' = x with |x| < eps pushed to ±eps (0 -> +eps), so κ(0) = 1/eps; D = m.

    tinyBIG bug (notes §8.11): its reciprocal writes into the input tensor; this one never does.
    """

    name = "reciprocal"
    aliases = ("reciprocal_expansion",)

    class HP(HP):
        eps: float = Field(1e-6, gt=0, le=1, description="clamp |x| >= eps")


class _LinearHP(HP):
    c: float = Field(1.0, description="scalar factor (κ = c·x, elementwise)")
    C: Optional[list[list[float]]] = Field(None, description="constant matrix [m, D] (κ = x C)")

    @model_validator(mode="after")
    def _one(self):
        if self.C is not None:
            if "c" in self.model_fields_set:
                raise ValueError("give either c or C, not both")
            if not self.C or not self.C[0] or any(len(r) != len(self.C[0]) for r in self.C):
                raise ValueError("C must be a non-empty rectangular matrix [m, D]")
        return self


@register
class Linear(_Expansion):
    """κ(x) = c·x (elementwise, D = m) or x C with a constant C ∈ R^{m×D} (eq 89 / RPN v1).

    tinyBIG's ``pre_C·x`` (multiplying on the sample side) is omitted: it mixes samples (semantics.md).
    """

    name = "linear"
    aliases = ("linear_expansion",)
    HP = _LinearHP

    def kwargs(self):
        if self.hp.C is not None:
            import torch

            return {"C": torch.tensor(self.hp.C, dtype=torch.float64)}
        return {"c": self.hp.c}

    def flat_out(self, m):
        if self.hp.C is not None and len(self.hp.C) != m:
            raise ShapeRuleError(f"{self.name}: C has {len(self.hp.C)} rows but the input has {m} features")
        return super().flat_out(m)


# ------------------------------------------------------------------------------------------------ polynomial
class _DegreeHP(HP):
    d: int = Field(2, ge=1, le=16, description="highest order")


@register
class Taylor(_Expansion):
    """Taylor κ(x) = [x, x⊗x, ..., x^{⊗d}] (Kronecker powers), D = Σ_{k=1..d} m^k (symmetric: unique monomials).

    ``symmetric = true`` keeps each monomial once (D = Σ_k C(m+k−1, k)); tinyBIG keeps both x_i x_j and x_j x_i.
    """

    name = "taylor"
    aliases = ("taylor_expansion",)

    class HP(_DegreeHP):
        symmetric: bool = False


@register
class Fourier(_Expansion):
    """Fourier κ(x) = per attribute [cos(2πnx/P), sin(2πnx/P)] for n = 1..N; D = 2mN (κ(0) = [1, 0] per n)."""

    name = "fourier"
    aliases = ("fourier_expansion",)

    class HP(HP):
        P: float = Field(10.0, description="period")
        N: int = Field(5, ge=1, le=256, description="number of harmonics")

        @field_validator("P")
        @classmethod
        def _nonzero(cls, v):
            if v == 0:
                raise ValueError("the period P must be nonzero")
            return v


class _Poly(_Expansion):
    HP = _DegreeHP


@register
class Chebyshev(_Poly):
    """Chebyshev κ(x) = [T_1(x), ..., T_d(x)], T_{n+1} = 2x T_n − T_{n−1} (kind 2: U_n, U_1 = 2x); D = m·d."""

    name = "chebyshev"
    aliases = ("chebyshev_expansion",)

    class HP(_DegreeHP):
        kind: Literal[1, 2] = 1


@register
class Jacobi(_Poly):
    """Jacobi κ(x) = [P_1^{(α,β)}(x), ..., P_d^{(α,β)}(x)], P_1 = (α−β)/2 + (α+β+2)x/2 (three-term); D = m·d."""

    name = "jacobi"
    aliases = ("jacobi_expansion",)

    class HP(_DegreeHP):
        alpha: float = Field(1.0, gt=-1)
        beta: float = Field(1.0, gt=-1)


@register
class Hermite(_Poly):
    """Hermite κ(x) = [He_1(x), ..., He_d(x)], He_n = x He_{n−1} − (n−1) He_{n−2} (probabilists', eq 124); D = m·d.

    ``kind = "physicist"`` gives H_n = 2x H_{n−1} − 2(n−1) H_{n−2} (H_n(x) = 2^{n/2} He_n(√2 x)).
    """

    name = "hermite"
    aliases = ("hermite_expansion",)

    class HP(_DegreeHP):
        kind: Literal["probabilist", "physicist"] = "probabilist"


@register
class Laguerre(_Poly):
    """Laguerre κ(x) = [L_1^{(α)}, ..., L_d^{(α)}], L_1 = 1 + α − x, L_n = ((2n−1+α−x)L_{n−1} − (n−1+α)L_{n−2})/n.

    Erratum (catalog §8.8): tinyBIG's L_1 = 1 + α + x has the wrong sign of x; eq (128) drops α. Pinned by test.
    """

    name = "laguerre"
    aliases = ("laguerre_expansion",)

    class HP(_DegreeHP):
        alpha: float = Field(1.0, gt=-1)


@register
class Legendre(_Poly):
    """Legendre κ(x) = [P_1(x), ..., P_d(x)], P_n = ((2n−1) x P_{n−1} − (n−1) P_{n−2})/n (Bonnet); D = m·d."""

    name = "legendre"
    aliases = ("legendre_expansion",)


@register
class Gegenbauer(_Poly):
    """Gegenbauer κ(x) = [C_1^{(α)}, ..., C_d^{(α)}], C_1 = 2αx, C_n = (2x(n−1+α)C_{n−1} − (n+2α−2)C_{n−2})/n."""

    name = "gegenbauer"
    aliases = ("gegenbauer_expansion",)

    class HP(_DegreeHP):
        alpha: float = Field(1.0, gt=-0.5, description="α > −1/2, α ≠ 0 (α = 0 gives the zero sequence)")

        @field_validator("alpha")
        @classmethod
        def _nonzero(cls, v):
            if v == 0:
                raise ValueError("alpha = 0 makes every C_n^{(0)} zero; use chebyshev for that limit")
            return v


@register
class Bessel(_Poly):
    """Bessel κ(x) = [B_1(x), ..., B_d(x)], B_1 = x + 1, B_n = (2n−1) x B_{n−1} + B_{n−2}; D = m·d (κ(0) = 1)."""

    name = "bessel"
    aliases = ("bessel_expansion",)


@register
class ReverseBessel(_Poly):
    """Reverse Bessel κ(x) = [R_1(x), ..., R_d(x)], R_1 = x + 1, R_n = (2n−1) R_{n−1} + x² R_{n−2}; D = m·d.

    Erratum (catalog §8.8): eq (143) prints B for R in the recursion; R is used (pinned by test).
    """

    name = "reverse_bessel"
    aliases = ("reverse_bessel_expansion",)


@register
class Fibonacci(_Poly):
    """Fibonacci κ(x) = [F_1(x), ..., F_d(x)], F_0 = 0, F_1 = 1, F_n = x F_{n−1} + F_{n−2}; D = m·d."""

    name = "fibonacci"
    aliases = ("fibonacci_expansion",)


@register
class Lucas(_Poly):
    """Lucas κ(x) = [L_1(x), ..., L_d(x)], L_0 = 2, L_1 = x, L_n = x L_{n−1} + L_{n−2}; D = m·d."""

    name = "lucas"
    aliases = ("lucas_expansion",)


@register
class BSpline(_Expansion):
    """B-spline κ(x) = [B_{j,k}(x)] on a uniform grid over [low, high] (Cox–de Boor, KAN); D = m·(grid + order)."""

    name = "bspline"
    aliases = ("bspline_expansion",)

    class HP(HP):
        grid: int = Field(5, ge=1, le=256, description="number of grid intervals (tinyBIG t)")
        order: int = Field(3, ge=0, le=8, description="spline degree (tinyBIG d)")
        low: float = -1.0
        high: float = 1.0

        @model_validator(mode="after")
        def _range(self):
            if not self.high > self.low:
                raise ValueError("need high > low")
            return self

    def kwargs(self):
        return {"grid_size": self.hp.grid, "order": self.hp.order, "grid_range": (self.hp.low, self.hp.high)}


# ------------------------------------------------------------------------------------------------ trigonometric
def _trig_family(funcs: tuple[str, str, str], squash: bool) -> type[HP]:
    class TrigHP(HP):
        functions: Optional[list[str]] = Field(None, description=f"subset of {list(funcs)} (default: all three)")

        @field_validator("functions")
        @classmethod
        def _subset(cls, v):
            if v is None:
                return v
            bad = [f for f in v if f not in funcs]
            if bad or not v or len(set(v)) != len(v):
                raise ValueError(f"functions must be distinct names from {list(funcs)}, got {v}")
            return v

    if squash:
        class SquashHP(TrigHP):
            squash: bool = Field(True, description="evaluate at s = sigmoid(x) (tinyBIG's domain squash)")

        return SquashHP
    return TrigHP


class _Trig(_Expansion):
    FUNCS: ClassVar[tuple[str, str, str]] = ("", "", "")

    def kwargs(self):
        kw = {"functions": None if self.hp.functions is None else tuple(self.hp.functions)}
        if "squash" in type(self.hp).model_fields:
            kw["squash"] = self.hp.squash
        return kw


@register
class Trigonometric(_Trig):
    """Trigonometric κ(x) = per attribute [sin x, cos x, tan x] (or the chosen ``functions``); D = m·#functions."""

    name = "trigonometric"
    aliases = ("trigonometric_expansion",)
    FUNCS = ("sin", "cos", "tan")
    HP = _trig_family(FUNCS, False)


@register
class Hyperbolic(_Trig):
    """Hyperbolic κ(x) = per attribute [sinh x, cosh x, tanh x] (or the chosen ``functions``); D = m·#functions."""

    name = "hyperbolic"
    aliases = ("hyperbolic_expansion",)
    FUNCS = ("sinh", "cosh", "tanh")
    HP = _trig_family(FUNCS, False)


@register
class ArcTrigonometric(_Trig):
    """Arc-trigonometric κ(x) = per attribute [asin(0.99s), acos(0.99s), atan s], s = sigmoid(x); D = m·#functions."""

    name = "arc_trigonometric"
    aliases = ("arc_trigonometric_expansion",)
    FUNCS = ("asin", "acos", "atan")
    HP = _trig_family(FUNCS, True)


@register
class ArcHyperbolic(_Trig):
    """Arc-hyperbolic κ(x) = per attribute [asinh s, acosh(s+1.01), atanh(0.99s)], s = sigmoid(x); D = m·#functions."""

    name = "arc_hyperbolic"
    aliases = ("arc_hyperbolic_expansion",)
    FUNCS = ("asinh", "acosh", "atanh")
    HP = _trig_family(FUNCS, True)


# ------------------------------------------------------------------------------------------------ RBF
class _RbfHP(HP):
    num_centres: int = Field(10, ge=1, le=1024, description="centres c = linspace(low, high, num_centres)")
    low: float = -1.0
    high: float = 1.0
    sigma: float = Field(1.0, gt=0, description="width (tinyBIG's epsilon is 1/sigma)")
    epsilon: Optional[float] = Field(None, gt=0, description="tinyBIG spelling: sigma = 1/epsilon")
    centres: Optional[list[float]] = Field(None, min_length=1, description="explicit centres (override linspace)")

    @model_validator(mode="after")
    def _check(self):
        if not self.high > self.low:
            raise ValueError("need high > low")
        if self.epsilon is not None and "sigma" in self.model_fields_set:
            raise ValueError("give either sigma or epsilon, not both")
        return self


class _Rbf(_Expansion):
    KIND: ClassVar[str] = ""
    HP = _RbfHP

    @property
    def spec(self):
        return self.table[f"{self.hp.__dict__.get('kind', self.KIND)}_rbf"]  # (pydantic's __getattr__ does not trace)

    def kwargs(self):
        hp = self.hp
        sigma = 1.0 / hp.epsilon if hp.epsilon is not None else hp.sigma
        centres = None
        if hp.centres is not None:  # given centres are a tensor argument (only then is torch imported here)
            import torch

            centres = torch.tensor(hp.centres, dtype=torch.float64)
        return {"num_centres": hp.num_centres, "grid_range": (hp.low, hp.high), "sigma": sigma, "centres": centres}


@register
class Rbf(_Rbf):
    """RBF κ(x) = per attribute [g((x − c_j)/σ)], g = exp(−u²) (gaussian) or 1/(1 + u²); D = m·#centres."""

    name = "rbf"

    class HP(_RbfHP):
        kind: Literal["gaussian", "inverse_quadratic"] = "gaussian"


@register
class GaussianRbf(_Rbf):
    """Gaussian RBF κ(x) = per attribute [exp(−((x − c_j)/σ)²)], c = linspace(low, high, num_centres); D = m·#c."""

    name, KIND = "gaussian_rbf", "gaussian"
    aliases = ("gaussian_rbf_expansion",)


@register
class InverseQuadraticRbf(_Rbf):
    """Inverse quadratic RBF κ(x) = per attribute [1/(1 + ((x − c_j)/σ)²)], c = linspace(low, high, #c); D = m·#c."""

    name, KIND = "inverse_quadratic_rbf", "inverse_quadratic"
    aliases = ("inverse_quadratic_rbf_expansion",)


# ------------------------------------------------------------------------------------------------ combinatorial
@register
class Combinatorial(_Expansion):
    """Combinatorial κ(x) = [C(x, 1), ..., C(x, d)]: every r-subset tuple of attributes, r = 1..d; D = Σ_r r·C(m, r)."""

    name = "combinatorial"
    aliases = ("combinatorial_expansion",)

    class HP(HP):
        d: int = Field(2, ge=1, le=6, description="largest tuple size")
        with_replacement: bool = False

    def flat_out(self, m):
        if not self.hp.with_replacement and self.hp.d > m:
            raise ShapeRuleError(f"{self.name}: tuples of size d = {self.hp.d} need at least {self.hp.d} features, "
                                 f"got {m}")
        return super().flat_out(m)


@register
class CombinatorialNormal(_Expansion):
    """Combinatorial normal κ(x) = [log N(x_S | loc·1, Σ_r) for every r-subset S, r = 1..d]; D = Σ_r C(m, r).

    Σ_r = scale²((1 − rho) I + rho 11ᵀ); tinyBIG's combinatorial_normal_expansion is loc = 0, scale = 1, rho = 0.
    """

    name = "combinatorial_normal"
    aliases = ("combinatorial_normal_expansion",)

    class HP(HP):
        d: int = Field(1, ge=1, le=6, description="largest tuple size")
        with_replacement: bool = False
        loc: float = 0.0
        scale: float = Field(1.0, gt=0)
        rho: float = Field(0.0, lt=1, description="equicorrelation, −1/(d−1) < rho < 1")

        @model_validator(mode="after")
        def _rho(self):
            if self.d > 1 and not self.rho > -1.0 / (self.d - 1):
                raise ValueError(f"rho must exceed −1/(d−1) = {-1.0 / (self.d - 1):g} for a valid covariance")
            return self

    def flat_out(self, m):
        if not self.hp.with_replacement and self.hp.d > m:
            raise ShapeRuleError(f"{self.name}: tuples of size d = {self.hp.d} need at least {self.hp.d} features, "
                                 f"got {m}")
        return super().flat_out(m)


# ------------------------------------------------------------------------------------------------ composites
@register
class Extended(Composite):
    """Extended κ(x) = [κ_1(x), ..., κ_K(x)] (concatenation of registry κ by name), D = Σ D_k.

    With elementwise parts the result is elementwise, laid out per attribute [κ_1(x_i), ..., κ_K(x_i)] (a column
    permutation of the block concatenation, absorbed by ψ).
    """

    name, family = "extended", "expansion"
    example_call = 'extended(parts = ["chebyshev", "fourier"])'
    aliases = ("extended_expansion",)
    concat = True
    HP = parts_hp(("expansion", "compression"))


@register
class Nested(Composite):
    """Nested κ(x) = κ_K(... κ_2(κ_1(x))) (composition of registry κ by name), D = D_K(... D_1(m))."""

    name, family = "nested", "expansion"
    example_call = 'nested(parts = ["chebyshev", "fourier"])'
    aliases = ("nested_expansion",)
    concat = False
    HP = parts_hp(("expansion", "compression"))
