"""Parameter reconciliation ψ: R^l -> R^{n x D} (catalog §2.3, paper §7.2; tinyBIG's 15 reconciliation classes).

Every entry is a thin registry wrapper over one family of :mod:`rpn2c.functional.reconciliation`: the shape rule and
the parameter count come from its ``param_shapes``, ``matrix()`` from its ``fabricate`` (the literal paper form, used
by the reference lowering) and ``apply(z)`` from its factored ``apply`` (Kronecker forms by the reshape trick,
low-rank forms as two thin matmuls, constants by a sum). Frozen random matrices (masking, VeRA, hypernets) are
persistent buffers drawn from the entry's ``seed`` on the CPU in float64, so a checkpoint restores the function and
two compilations with the same seed agree on every device (toolkit bug 9). All channels of a head (and all heads
with equal hyper-parameters) share the frozen matrices, as VeRA shares them across layers; vary ``seed`` to differ.
A learnable bias is the head's ``bias`` setting, not part of ψ (the toolkit's ``enable_bias``).
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal, Optional, TYPE_CHECKING, Union

from pydantic import Field, field_validator

from rpn2c.components.base import Reconciliation
from rpn2c.components.registry import HP, register
from rpn2c.functional import reconciliation as R

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    import torch

Std = Union[Annotated[float, Field(gt=0)], Literal["fan_in"]]  # a std is > 0 (checked, not found at build)


def _uniform(shape, fan_in: int) -> torch.Tensor:
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)), the nn.Linear initialisation."""
    import torch

    bound = 1.0 / math.sqrt(max(int(fan_in), 1))
    return torch.empty(shape).uniform_(-bound, bound)


def _generator(seed: int) -> torch.Generator:
    import torch

    return torch.Generator(device="cpu").manual_seed(int(seed))


MAX_FROZEN = 2**28  # entries (1 GiB in float32) of the frozen random matrices one ψ keeps


def frozen_entries(spec, n: int, D: int, kwargs: dict) -> int:
    """How many frozen random entries ψ keeps for an n x D matrix: 0 below the bound n·D·max(1, integer settings)
    plus the product of the two largest of n, D and the settings, which holds every family's frozen matrices (so
    small specs check without torch), else drawn on the meta device (nothing allocated)."""
    ints = [v for v in kwargs.values() if isinstance(v, int) and not isinstance(v, bool)]
    widest = sorted([n, D, *ints], reverse=True)  # two settings may span one matrix (a hypernet's l x d)
    if spec.make_buffers is None or n * D * max([1, *ints]) + widest[0] * widest[1] <= MAX_FROZEN:
        return 0
    import torch

    bufs = spec.make_buffers(n, D, **kwargs, generator=None, dtype=torch.float32, device="meta")
    return sum(b.numel() for b in bufs.values())


class _Functional(Reconciliation):
    """Base of the entries: ``functional`` names the family in ``RECONCILIATIONS``; HP fields of the same names as
    the family's keyword hyper-parameters are passed through; ``seed`` draws the frozen buffers."""

    family = "reconciliation"
    functional: ClassVar[str] = ""
    names: ClassVar[dict[str, str]] = {}

    @property
    def spec(self) -> R.ReconciliationSpec:
        return R.RECONCILIATIONS[self.functional]

    def fhp(self) -> dict:
        """The hyper-parameters the functional family takes."""
        return {k: getattr(self.hp, k) for k in self.spec.hyperparams if k in type(self.hp).model_fields}

    def check(self, n, D):
        try:
            self.spec.param_shapes(n, D, **self.fhp())
        except ValueError as exc:
            return f"{self.name}: {exc}"
        if self.spec.make_buffers is not None and isinstance(n, int) and isinstance(D, int):
            frozen = frozen_entries(self.spec, n, D, self.fhp())
            if frozen > MAX_FROZEN:
                return (f"{self.name} keeps {frozen:,} frozen random entries for n = {n}, D = {D} (at most "
                        f"{MAX_FROZEN:,}); lower out or the hidden width, or compress the input first")
        return None

    def count(self, n, D):
        return self.spec.num_params(n, D, **self.fhp())

    def scratch(self, n, D):
        """The n x D matrix, where it is fabricated from fewer parameters (the reference lowering builds it)."""
        return n * D if self.count(n, D) < n * D else 0

    def row_width(self, n, D):
        """A factor wider than n and D (a rank beyond both), which the factored form reaches for every row."""
        widest = max((d for shape in self.spec.param_shapes(n, D, **self.fhp()).values() for d in shape), default=0)
        return widest if widest > max(n, D) else 0

    def init(self, shapes: dict[str, tuple[int, ...]], n: int, D: int) -> dict[str, torch.Tensor]:
        """Initial values of the learnable tensors (global torch RNG, like nn.Linear); default U(±1/sqrt(last dim))."""
        return {k: _uniform(s, s[-1]) for k, s in shapes.items()}

    def frozen(self, n: int, D: int) -> dict[str, torch.Tensor]:
        """The frozen tensors, drawn from ``seed`` (float64 on the CPU, then the default dtype)."""
        import torch

        if self.spec.make_buffers is None:
            return {}
        bufs = self.spec.make_buffers(n, D, **self.fhp(), generator=_generator(self.hp.seed),
                                      dtype=torch.float64, device="cpu")
        return {k: v.to(torch.get_default_dtype()) for k, v in bufs.items()}

    def build(self, n, D):
        from rpn2c.components.impl.psi import _Psi

        fhp = self.fhp()
        shapes = self.spec.param_shapes(n, D, **fhp)
        return _Psi(self.functional, n, D, fhp, self.init(shapes, n, D), self.frozen(n, D), self.names)


def _seed():
    return Field(0, ge=0, description="seed of the frozen random matrices (persistent buffers)")


def _positive_std(cls, v):
    if v != "fan_in" and not v > 0:
        raise ValueError("std must be > 0 or \"fan_in\"")
    return v


class _BlocksHP(HP):
    p: Optional[int] = Field(None, ge=1, description="block rows (divides n); default: closest factor of n")
    q: Optional[int] = Field(None, ge=1, description="block columns (divides D); default: closest factor of D")


class _LowRankBlocksHP(_BlocksHP):
    r: int = Field(2, ge=1, description="rank of the factorised block(s)")


# ------------------------------------------------------------------------------------------------ constants (l = 0)
@register
class Constant(_Functional):
    """Constant reconciliation ψ = c·1_{n x D} (no parameters; l = 0).

    The output is c·(Σ_j κ_j)·1_n, computed as a sum, never as a product with the n x D matrix.
    """

    name, functional = "constant", "constant"

    class HP(HP):
        c: float = Field(1.0, description="the constant")


@register
class Zero(_Functional):
    """Zero reconciliation ψ = 0_{n x D} (l = 0): the head outputs its bias (and π) only."""

    name, functional = "zero", "zero"


@register
class One(_Functional):
    """One reconciliation ψ = 1_{n x D} (l = 0): every output is the sum of κ's outputs."""

    name, functional = "one", "one"


@register
class Eye(_Functional):
    """Constant eye reconciliation ψ = I_{n x D} = eye(n, D) (l = 0): passes κ's output through.

    n < D keeps the first n features; n > D pads with zeros (the rectangular identity, as torch.eye(n, D)).
    The default ψ of `compress` layers (paper §9.1.2: "constant eye parameter reconciliation").
    """

    name, functional = "eye", "constant_eye"
    aliases = ("constant_eye",)


# ------------------------------------------------------------------------------------------------ dense
@register
class IdentityPsi(_Functional):
    """Identity reconciliation ψ(w) = reshape(w) = W ∈ R^{n x D}; l = n·D (a dense weight, stored as `weight`).

    Initialised U(±1/sqrt(D)) like nn.Linear. In a conv head ψ is the C_out x (C_in·p) kernel matrix applied to every
    patch (erratum 16: eq (171) writes it as I ⊗ w of the transposed shape (p·p_count) x p_count).
    """

    name, functional = "identity", "identity"
    names = {"W": "weight"}


@register
class Masking(_Functional):
    """Masking reconciliation ψ(w) = reshape(w) ⊙ M, M ∈ {0,1}^{n x D} fixed; l = n·D.

    M is drawn once from `seed` with P(M_ij = 1) = p (p is the kept fraction, the toolkit's `rand < p`), or given
    literally as `mask` (an n x D list of 0/1 rows); either way it is a persistent buffer (toolkit bug 9: its mask
    was a plain attribute, lost on reload). Masked entries of W stay in the count (the paper's l = nD) and get zero
    gradient. The toolkit's resampled variant (`fixed_mask = False`) is DropConnect: a random function per call that
    no reference lowering can reproduce; use dropout processing instead.
    """

    name, functional = "masking", "masking"
    names = {"W": "weight"}

    class HP(HP):
        p: float = Field(0.5, ge=0.0, le=1.0, description="probability that an entry is kept")
        mask: Optional[list[list[float]]] = Field(None, description="a given n x D 0/1 mask (overrides p, seed)")
        seed: int = _seed()

        @field_validator("mask")
        @classmethod
        def _binary(cls, v):
            if v is not None:
                if not v or len({len(row) for row in v}) != 1:
                    raise ValueError("mask must be a non-empty rectangular list of rows")
                if any(x not in (0, 1) for row in v for x in row):
                    raise ValueError("mask entries must be 0 or 1")
            return v

    def check(self, n, D):
        mask = self.hp.mask
        if mask is not None and (len(mask), len(mask[0])) != (n, D):
            return f"masking: the given mask is {len(mask)} x {len(mask[0])}, ψ is n x D = {n} x {D}"
        return super().check(n, D)

    def frozen(self, n, D):
        import torch

        if self.hp.mask is not None:
            return {"mask": torch.tensor(self.hp.mask, dtype=torch.get_default_dtype())}
        return super().frozen(n, D)


# ------------------------------------------------------------------------------------------------ padding
class _PaddingHP(HP):
    p: int = Field(2, ge=1, description="row repetitions (divides n)")
    q: Optional[int] = Field(None, ge=1, description="column repetitions (divides D); default p")


@register
class DuplicatedPadding(_Functional):
    """Duplicated padding ψ(w) = 1_{p x q} ⊗ W, W ∈ R^{(n/p) x (D/q)}; l = nD/(pq).

    Applied as: sum κ's q column blocks, multiply by Wᵀ, repeat the result p times. ⊗ is torch.kron (the toolkit
    tiles the same block; equal here since 1 ⊗ W is the tiling).
    """

    name, functional = "duplicated_padding", "duplicated_padding"
    example_call = "duplicated_padding(p = 3, q = 2)"  # p divides n = 3, q divides D = 4
    names = {"W": "weight"}
    HP = _PaddingHP

    def init(self, shapes, n, D):
        return {"W": _uniform(shapes["W"], D)}  # the q blocks of κ are summed: fan-in D


@register
class DuplicatedDiagonalPadding(_Functional):
    """Duplicated diagonal padding ψ(w) = I_{p x q} ⊗ W = blockdiag(W, ..., W), W ∈ R^{(n/p) x (D/q)}; l = nD/(pq).

    min(p, q) copies of W on the block diagonal (torch.eye(p, q) ⊗ W); applied block by block, never as n x D.
    """

    name, functional = "duplicated_diagonal_padding", "duplicated_diagonal_padding"
    example_call = "duplicated_diagonal_padding(p = 3, q = 2)"  # p divides n = 3, q divides D = 4
    names = {"W": "weight"}
    HP = _PaddingHP


# ------------------------------------------------------------------------------------------------ low rank
@register
class LowRank(_Functional):
    """Low-rank reconciliation (LoRR) ψ(w) = A Bᵀ, A ∈ R^{n x r}, B ∈ R^{D x r}; l = r(n + D) (eq 162).

    Applied as (z B) Aᵀ. B is stored D x r as in eq (162) (the toolkit stores it r x D; same count).
    r must not exceed min(n, D): a larger rank only adds parameters.
    """

    name, functional = "lorr", "lorr"
    aliases = ("low_rank",)

    class HP(HP):
        r: int = Field(2, ge=1, description="rank")

    def check(self, n, D):
        if self.hp.r > min(n, D):
            return f"rank r = {self.hp.r} exceeds min(n, D) = {min(n, D)}"
        return super().check(n, D)

    def init(self, shapes, n, D):
        r = self.hp.r
        return {"A": _uniform((n, r), r), "B": _uniform((D, r), D)}


@register
class LoHa(_Functional):
    """Low-rank Hadamard (LoHa, FedPara; seed 003 Table 1) ψ(w) = (A1 B1ᵀ) ⊙ (A2 B2ᵀ), A_i ∈ R^{n x r}, B_i ∈ R^{D x r}; l = 2r(n + D).

    Rank up to r² from 2r(n + D) parameters. Applied factored by the mixed-product rule
    (A1 B1ᵀ) ⊙ (A2 B2ᵀ) = (A1 • A2)(B1 • B2)ᵀ (• the row-wise Khatri–Rao product, width r²) where r²(n + D) < nD.
    """

    name, functional = "loha", "loha"
    aliases = ("low_rank_hadamard", "fedpara")

    class HP(HP):
        r: int = Field(2, ge=1, description="rank of each factor (ψ has rank up to r²)")

    def init(self, shapes, n, D):
        r = self.hp.r
        return {"A1": _uniform((n, r), r), "B1": _uniform((D, r), D), "A2": _uniform((n, r), r),
                "B2": _uniform((D, r), 1)}


# ------------------------------------------------------------------------------------------------ Kronecker
_KRON_NOTE = ("⊗ is a true Kronecker product (torch.kron), applied by the reshape trick vec(A X Bᵀ) without forming "
              "n x D; the toolkit computes a reshaped outer product vec(A)vec(B)ᵀ instead (its bug 3).")


@register
class HM(_Functional):
    """Hypercomplex multiplication ψ(w) = A ⊗ B, A ∈ R^{p x q}, B ∈ R^{(n/p) x (D/q)}; l = pq + nD/(pq).

    {kron}
    Default p, q: the closest factors of n and D (the toolkit's find_close_factors).
    """

    name, functional = "hm", "hm"
    aliases = ("hypercomplex",)
    HP = _BlocksHP

    def init(self, shapes, n, D):
        (p, q), (s, t) = shapes["A"], shapes["B"]
        return {"A": _uniform((p, q), q), "B": _uniform((s, t), t)}


@register
class LPHM(_Functional):
    """Low-rank parameterised HM ψ(w) = A ⊗ (S T), A ∈ R^{p x q}, S ∈ R^{s x r}, T ∈ R^{r x t}; l = pq + r(s + t).

    s = n/p, t = D/q. {kron}
    """

    name, functional = "lphm", "lphm"
    HP = _LowRankBlocksHP

    def init(self, shapes, n, D):
        (p, q), (s, r), (_, t) = shapes["A"], shapes["S"], shapes["T"]
        return {"A": _uniform((p, q), q), "S": _uniform((s, r), r), "T": _uniform((r, t), t)}


@register
class DualLPHM(_Functional):
    """Dual LPHM ψ(w) = (P Q) ⊗ (S T), P ∈ R^{p x r}, Q ∈ R^{r x q}, S ∈ R^{s x r}, T ∈ R^{r x t}; l = r(p+q+s+t).

    s = n/p, t = D/q. {kron}
    """

    name, functional = "dual_lphm", "dual_lphm"
    HP = _LowRankBlocksHP

    def init(self, shapes, n, D):
        (p, r), (_, q), (s, _), (_, t) = shapes["P"], shapes["Q"], shapes["S"], shapes["T"]
        return {"P": _uniform((p, r), r), "Q": _uniform((r, q), q), "S": _uniform((s, r), r),
                "T": _uniform((r, t), t)}


for _cls in (HM, LPHM, DualLPHM):
    _cls.__doc__ = _cls.__doc__.replace("{kron}", _KRON_NOTE)


# ------------------------------------------------------------------------------------------------ random matrices
@register
class RandomMatrixAdaption(_Functional):
    """Random matrix adaption (VeRA) ψ(w) = Λ1 A Λ2 Bᵀ, Λ1 = diag(λ1 ∈ R^n), Λ2 = diag(λ2 ∈ R^r); l = n + r (eq 164).

    A ∈ R^{n x r}, B ∈ R^{D x r} are frozen N(0, std²) buffers from `seed` (eq 163: std = 1; "fan_in" scales A by
    1/sqrt(r), B by 1/sqrt(D)). Applied as (((z B) ⊙ λ2) Aᵀ) ⊙ λ1. λ1 = 1/sqrt(3D), λ2 = 1/sqrt(r) initially, so ψ
    starts with the entry variance of nn.Linear (VeRA's zero start only suits an additive adapter).
    """

    name, functional = "random_matrix_adaption", "random_matrix_adaption"
    aliases = ("vera",)

    class HP(HP):
        r: int = Field(2, ge=1, description="rank of the frozen factors")
        std: Std = Field(1.0, description="std of the frozen N(0, std²) factors, or \"fan_in\"")
        seed: int = _seed()
        _std = field_validator("std")(_positive_std)

    def init(self, shapes, n, D):
        import torch

        scale = 1.0 if self.hp.std != "fan_in" else math.sqrt(self.hp.r * D)  # undo a fan-in scaled A Bᵀ
        return {"lambda1": torch.full((n,), scale / math.sqrt(3 * D)),
                "lambda2": torch.full((self.hp.r,), 1.0 / math.sqrt(self.hp.r))}


class _HypernetHP(HP):
    l: int = Field(64, ge=1, description="number of learnable parameters (the hypernet's input)")
    d: int = Field(128, ge=1, description="hidden width of the frozen hypernet")
    std: Std = Field("fan_in", description="std of the frozen N(0, std²) weights, or \"fan_in\" (1/sqrt(fan-in))")
    seed: int = _seed()
    _std = field_validator("std")(_positive_std)


@register
class Hypernet(_Functional):
    """Hypernet reconciliation ψ(w) = reshape(σ(w H1) H2), H1 ∈ R^{l x d}, H2 ∈ R^{d x nD} frozen; l free (eq 166).

    σ is the sigmoid; H1, H2 are N(0, std²) buffers from `seed`. Default std = "fan_in" (1/sqrt(l), 1/sqrt(d)): with
    the paper's N(0, 1) the entries of ψ have std ≈ sqrt(d/4). w starts N(0, 1), so σ(w H1) is not saturated.
    ψ is formed once per forward (batch independent, O(d·nD)); storage is O(d(l + nD)) (paper §7.2.2).
    """

    name, functional = "hypernet", "hypernet"
    HP = _HypernetHP

    def init(self, shapes, n, D):
        import torch

        return {"w": torch.randn(shapes["w"])}


@register
class RandomMatrixHypernet(_Functional):
    """Random-matrix hypernet ψ(w) = reshape((σ((w P) Qᵀ) S) Tᵀ), P ∈ R^{l x r}, Q, S ∈ R^{d x r}, T ∈ R^{nD x r}.

    l is free (the length of w).

    Eq (167): the hypernet's H1 = P Qᵀ and H2 = S Tᵀ are never formed; the frozen low-rank factors are buffers from
    `seed` (toolkit bug 9: not saved there), storage O(r(l + 2d + nD)). Default std = "fan_in", w starts N(0, 1).
    """

    name, functional = "random_matrix_hypernet", "random_matrix_hypernet"

    class HP(HP):
        r: int = Field(2, ge=1, description="rank of the frozen factors")
        l: int = Field(64, ge=1, description="number of learnable parameters (the hypernet's input)")
        d: int = Field(128, ge=1, description="hidden width of the frozen hypernet")
        std: Std = Field("fan_in", description="std of the frozen N(0, std²) weights, or \"fan_in\"")
        seed: int = _seed()
        _std = field_validator("std")(_positive_std)

    def init(self, shapes, n, D):
        import torch

        return {"w": torch.randn(shapes["w"])}
