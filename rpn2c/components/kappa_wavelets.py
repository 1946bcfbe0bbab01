"""Discrete wavelet expansion κ (RPN 2 eq 151–161): one entry per mother wavelet, and ``wavelet`` naming it.

κ(x) = [a^{−σ/2} φ(x/a^σ − τb)] over s scales and t shifts per attribute; order d >= 2 takes Kronecker powers
(or tinyBIG's concatenated powers). The maths is :mod:`rpn2c.functional.expansion` (``*_wavelet``). The tinyBIG
class names are registered as aliases.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Optional

from pydantic import Field, create_model, model_validator

from rpn2c.components.kappa_expansion import _Expansion
from rpn2c.components.registry import HP, register


class _WaveletHP(HP):
    a: float = Field(2.0, gt=0, description="scale base (a > 1 for distinct scales; tinyBIG default 1)")
    b: float = Field(1.0, ge=0, description="shift step")
    s: int = Field(1, ge=1, le=16, description="number of scales σ = 0..s−1")
    t: int = Field(1, ge=1, le=16, description="number of shifts τ = 0..t−1")
    d: int = Field(1, ge=1, le=4, description="order (d >= 2 is not elementwise)")
    order2: Literal["kron", "concat"] = Field(
        "kron", description="order d >= 2: kron = κ1^{⊗d} (paper eq 161), concat = [κ1, ..., κ1^{⊗d}] (tinyBIG)")


_MOTHER_HP: dict[str, dict[str, Any]] = {
    "haar": {},
    "shannon": {},
    "meyer": {},
    "ricker": {"sigma": (float, Field(1.0, gt=0))},
    "dog": {"sigma_1": (float, Field(1.0, gt=0)), "sigma_2": (float, Field(2.0, gt=0))},
    "beta": {"alpha": (float, Field(1.0, ge=1)), "beta": (float, Field(1.0, ge=1)),
             "domain": (Literal["sigmoid", "support"], Field("sigmoid"))},
}
_MOTHER_FORMULA = {  # short form (first doc line), full form (further lines)
    "haar": ("φ = 1 on [0, ½), −1 on [½, 1), 0 else (eq 152)", ""),
    "shannon": ("φ(τ) = (sin 2πτ − sin πτ)/(πτ) (eq 155)", ""),
    "meyer": ("φ = Meyer's mother wavelet (eq 157)",
              "φ(τ) = (sin(2πτ/3) + (4/3)τ cos(4πτ/3))/(πτ − (16π/9)τ³), φ(0) = 2/3 + 4/(3π)."),
    "ricker": ("φ(τ) ∝ (1 − τ²/σ²) e^{−τ²/(2σ²)} (eq 154)",
               "φ(τ) = 2/(√(3σ) π^{1/4}) (1 − (τ/σ)²) e^{−τ²/(2σ²)}."),
    "dog": ("φ(τ) = N(τ|0,σ1) − N(τ|0,σ2) (eq 156)", ""),
    "beta": ("φ(τ) = Beta(α, β) pdf at u = sigmoid(τ) (eq 153)", "φ(τ) = u^{α−1}(1 − u)^{β−1}/B(α, β)."),
}
_MOTHER_ALIASES = {
    "haar": ("haar", "harr_wavelet", "harr", "harr_wavelet_expansion", "haar_wavelet_expansion"),
    "shannon": ("shannon", "shannon_wavelet_expansion"),
    "meyer": ("meyer", "meyer_wavelet_expansion"),
    "ricker": ("ricker", "mexican_hat_wavelet", "ricker_wavelet_expansion"),
    "dog": ("dog", "difference_of_gaussians_wavelet", "dog_wavelet_expansion"),
    "beta": ("beta_wavelet_expansion",),
}
_WAVELET_NOTES = {
    "haar": "tinyBIG spells the class harr_wavelet_expansion; both spellings resolve here.",
    "ricker": "Erratum (catalog §8.9): eq (154) prints √(3σπ^{1/4}); the normalisation 2/(√(3σ) π^{1/4}) is used.",
    "beta": "Erratum: tinyBIG applies the sigmoid only when some τ of the batch leaves [0, 1], so one entry depends "
            "on the others; here u = sigmoid(τ) always (domain = sigmoid) or the density's support (domain = support).",
    "meyer": "The removable singularities at τ = 0 and |τ| = 3/4 are filled with their limits.",
}


class _Wavelet(_Expansion):
    """Discrete wavelet expansion (eq 151, 160–161)."""

    MOTHER: ClassVar[str] = ""

    @property
    def spec(self):
        return self.table[f"{self.MOTHER}_wavelet"] if self.MOTHER else self.table["wavelet"]

    def kwargs(self):
        return {k: v for k, v in self.hp.model_dump().items() if v is not None}


def _wavelet_entry(mother: str) -> type:
    hp = create_model(f"{mother.capitalize()}WaveletHP", __base__=_WaveletHP, __module__=__name__,
                      **_MOTHER_HP[mother])
    short, full = _MOTHER_FORMULA[mother]
    doc = f"{mother.capitalize()} wavelet κ(x) = [a^{{−σ/2}} φ(x/a^σ − τb)]_{{σ<s,τ<t}}, D = mst, {short}."
    note = " ".join(t for t in (full, _WAVELET_NOTES.get(mother)) if t)
    cls = type(f"{mother.capitalize()}Wavelet", (_Wavelet,), {
        "__doc__": doc + ("\n\n" + note if note else "") + "\n\nErratum (catalog §8.10): order d >= 2 is the paper's "
                   "κ1^{⊗d} by default; tinyBIG's concatenated powers are order2 = \"concat\".",
        "name": f"{mother}_wavelet", "MOTHER": mother, "aliases": _MOTHER_ALIASES[mother], "HP": hp,
        "__module__": __name__})
    return register(cls)


for _m in _MOTHER_HP:
    _wavelet_entry(_m)


class _AnyWaveletHP(_WaveletHP):
    mother: Literal[tuple(_MOTHER_HP)] = "ricker"  # type: ignore[valid-type]
    sigma: Optional[float] = Field(None, gt=0)
    sigma_1: Optional[float] = Field(None, gt=0)
    sigma_2: Optional[float] = Field(None, gt=0)
    alpha: Optional[float] = Field(None, ge=1)
    beta: Optional[float] = Field(None, ge=1)
    domain: Optional[Literal["sigmoid", "support"]] = None

    @model_validator(mode="after")
    def _own(self):
        own = set(_MOTHER_HP[self.mother])
        extra = sorted(k for k in ("sigma", "sigma_1", "sigma_2", "alpha", "beta", "domain")
                       if getattr(self, k) is not None and k not in own)
        if extra:
            raise ValueError(f"the {self.mother} wavelet has no hyper-parameter {', '.join(extra)}")
        return self


@register
class Wavelet(_Wavelet):
    """Wavelet κ(x) = [a^{−σ/2} φ(x/a^σ − τb)]_{σ<s,τ<t}, mother φ (haar, beta, ricker, shannon, meyer, dog); D = mst.

    Erratum (catalog §8.10): order d >= 2 is the paper's κ1^{⊗d} (D = (mst)^d) by default; tinyBIG's concatenated
    powers [κ1, κ1^{⊗2}, ...] are ``order2 = "concat"``.
    """

    name = "wavelet"
    aliases = ("discrete_wavelet", "discrete_wavelet_expansion")
    HP = _AnyWaveletHP


