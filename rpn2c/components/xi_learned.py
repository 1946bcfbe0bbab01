"""Learned interdependence ξ: parameterised matrices (paper §5.1.5), bilinear forms with fabricated W (§5.1.6–5.1.7)
and the RPN-based ξ (§5.1.8). Hybrid fusions of ξ's (§5.3) are :mod:`rpn2c.components.xi_hybrid`.

Learnable matrices are fabricated by :mod:`rpn2c.functional.reconciliation` (identity, LoRR, HM/LPHM/dual-LPHM as
true Kronecker products — the toolkit's HM is a reshaped outer product, bug 3 — masking, hypernet, RMA) and applied
in factored form by the default lowering; the reference lowering builds them literally. Frozen random factors are
persistent buffers (a checkpoint restores the function; toolkit bug 9).

Sub-component hyper-parameters are flat keys: ``r``, ``p``, ``q``, ... for the reconciliation of ``parameterized``
/ ``parameterized_bilinear``; ``kappa_<key>``, ``psi_<key>``, ``pi_<key>`` for ``rpn_interdependence``.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import ConfigDict, Field, ValidationError, model_validator

from rpn2c.components.base import Interdependence, ShapeRuleError
from rpn2c.components.psi import MAX_FROZEN, frozen_entries
from rpn2c.components.registry import HP, lookup, register
from rpn2c.functional import reconciliation as recon
from rpn2c.ir.types import is_known

#: learnable reconciliation families that can fabricate a ξ matrix (the constant ones are ``constant``/``zero``/...)
PSI_FAMILIES = tuple(n for n, s in recon.RECONCILIATIONS.items() if s.learnable)
_PSI_KEYS = ("r", "p", "q", "l", "d", "std")


def _need_int(v, what: str) -> int:
    if not is_known(v):
        raise ShapeRuleError(f"{what} must be a known integer, got '{v}'")
    return v


def _psi_kwargs(psi: str, values: dict) -> dict:
    """Keyword hyper-parameters of reconciliation ``psi`` from ``values`` (only the keys the user set)."""
    spec = recon.get_reconciliation(psi)
    bad = sorted(k for k in values if k not in spec.hyperparams)
    if bad:
        takes = ", ".join(spec.hyperparams) or "none"
        raise ValueError(f"reconciliation '{psi}' has no hyper-parameter {', '.join(bad)} (it takes: {takes})")
    return dict(values)


def _psi_count(psi: str, n: int, D: int, kwargs: dict) -> int:
    """ψ's parameter count, once its hyper-parameters and frozen matrices (drawn on the meta device) are valid."""
    frozen = 0
    try:
        spec = recon.get_reconciliation(psi)
        count = spec.num_params(n, D, **kwargs)
        if psi == "masking" and not 0 <= kwargs.get("p", 0.5) <= 1:  # else only its frozen mask's draw refuses it
            raise ValueError(f"masking p must be in [0, 1], got {kwargs['p']}")
        frozen = frozen_entries(spec, n, D, kwargs)
    except ValueError as exc:
        raise ShapeRuleError(f"reconciliation '{psi}' for a {n} x {D} matrix: {exc}") from None
    if frozen > MAX_FROZEN:
        raise ShapeRuleError(f"reconciliation '{psi}' keeps {frozen:,} frozen random entries for a {n} x {D} "
                             f"matrix (at most {MAX_FROZEN:,})")
    return count


# ------------------------------------------------------------------------------------------------ parameterised
class _ParamHP(HP):
    out: Optional[int] = Field(None, ge=1, description="output length m' / N' (default: the axis length)")
    psi: Literal[PSI_FAMILIES] = Field("identity", description="reconciliation fabricating A (functional names)")
    r: Optional[int] = Field(None, ge=1, description="rank (lorr, lphm, dual_lphm, rma, random_matrix_hypernet)")
    p: Optional[Union[int, float]] = Field(None, description="block rows (hm family) / keep probability (masking)")
    q: Optional[int] = Field(None, ge=1, description="block columns (hm family, duplicated padding)")
    l: Optional[int] = Field(None, ge=1, description="hypernet input length")
    d: Optional[int] = Field(None, ge=1, description="hypernet hidden width")
    std: Optional[Union[Annotated[float, Field(gt=0)], Literal["fan_in"]]] = Field(
        None, description="scale of frozen random factors")

    @model_validator(mode="after")
    def _keys(self):
        _psi_kwargs(self.psi, self.psi_kwargs())
        return self

    def psi_kwargs(self) -> dict:
        return {k: getattr(self, k) for k in _PSI_KEYS if getattr(self, k) is not None}


class _LearnedHP(_ParamHP):
    bias: bool = Field(False, description="a learned bias b per output item (instance) or feature (attribute): "
                                          "A z + b 1ᵀ, a Linear across the axis (MLP-Mixer's token mixing)")


@register
class Parameterized(Interdependence):
    """Parameterised ξ: A = ψ(w) ∈ R^{size x out} (eq 54), a learned matrix; out changes the axis length; ψ = any learnable reconciliation.

    Stored row = output: ψ ∈ R^{out x size}; attribute A = ψᵀ (z·A = z ψᵀ), instance A = ψ (A·z). Default
    lowering applies ψ factored (LoRR (zB)Aᵀ, Kronecker vec trick); hm/lphm/dual_lphm are true Kronecker
    products (toolkit bug 3). Parameters per channel: l of ψ for (out, size), and out more with ``bias``.

    ``bias = true`` makes ξ affine, ``A z + b 1ᵀ`` on the instance axis (``z A + 1 bᵀ`` on the attribute axis):
    the matrix ``[A | b]`` applied to the items with a constant item of ones appended (homogeneous coordinates),
    which the reference lowering builds literally. On the instance axis it is a ``Linear`` across the items
    (MLP-Mixer's token mixing, ``fc(x.transpose(1, 2)).transpose(1, 2)``).
    """

    name, family = "parameterized", "interdependence"
    kind = "param"
    HP = _LearnedHP

    def affine(self) -> bool:
        return self.hp.bias

    def _dims(self, ctx):
        size = _need_int(ctx.size, f"the {ctx.axis} length of '{self.name}'")
        return (self.hp.out if self.hp.out is not None else size), size

    def out_size(self, ctx):
        n, D = self._dims(ctx)
        _psi_count(self.hp.psi, n, D, self.hp.psi_kwargs())
        return n

    def count(self, ctx):
        n, D = self._dims(ctx)
        return _psi_count(self.hp.psi, n, D, self.hp.psi_kwargs()) + (n if self.hp.bias else 0)

    def build(self, ctx):
        from rpn2c.components.impl.xi_learned import _Fabricated, _ParameterizedXi

        n, D = self._dims(ctx)
        return _ParameterizedXi(_Fabricated(self.hp.psi, n, D, self.hp.psi_kwargs()), ctx.axis, self.hp.bias)


def _variant_hp(base, psi: str, **defaults):
    """A copy of ``base`` with ψ fixed to ``psi`` (and new defaults)."""
    fields = {"psi": (Literal[psi], psi)}
    fields.update({k: (Optional[int], Field(v, ge=1)) for k, v in defaults.items()})
    from pydantic import create_model

    return create_model(f"{base.__name__}_{psi}", __base__=base, **fields)


@register
class LowRankParameterized(Parameterized):
    """Low-rank parameterised ξ: A = A_r B_rᵀ, rank r (LoRR, eq 162 as ξ); l = r(size + out)."""

    name = "lowrank_parameterized"
    aliases = ("low_rank_parameterized",)
    HP = _variant_hp(_LearnedHP, "lorr", r=2)


@register
class HMParameterized(Parameterized):
    """HM parameterised ξ: A = A_p ⊗ B (Kronecker, torch.kron), A_p ∈ R^{p x q}; l = pq + size·out/(pq)."""

    name = "hm_parameterized"
    HP = _variant_hp(_LearnedHP, "hm")


@register
class LPHMParameterized(Parameterized):
    """LPHM parameterised ξ: A = A_p ⊗ (S T), S T of rank r; l = pq + r(s + t)."""

    name = "lphm_parameterized"
    HP = _variant_hp(_LearnedHP, "lphm", r=2)


@register
class DualLPHMParameterized(Parameterized):
    """Dual-LPHM parameterised ξ: A = (P Q) ⊗ (S T), both factors of rank r; l = r(p + q + s + t)."""

    name = "dual_lphm_parameterized"
    HP = _variant_hp(_LearnedHP, "dual_lphm", r=2)


@register
class RMAParameterized(Parameterized):
    """Random-matrix-adaption parameterised ξ: A = Λ1 A_r Λ2 B_rᵀ with frozen random A_r, B_r (VeRA, eq 164); l = out + r."""

    name = "rma_parameterized"
    aliases = ("random_matrix_adaption_parameterized",)
    HP = _variant_hp(_LearnedHP, "random_matrix_adaption", r=2)


# ------------------------------------------------------------------------------------------------ bilinear
class _PBilinearHP(_ParamHP):
    out: None = Field(None, description="(a bilinear form keeps the axis length)")
    softmax: bool = Field(True, description="row softmax over inputs (scaled softmax, eq 182)")
    scale: Optional[float] = Field(None, description="logit scale; default 1/sqrt(vector length) with "
                                                     "softmax, 1 without (eq 55–56)")


@register
class ParameterizedBilinear(Interdependence):
    """Parameterised bilinear ξ: A[j, i] = softmax_i(v_j W v_iᵀ · scale), W = ψ(w) any reconciliation (eq 55–56; HM/LPHM/RMA W of the toolkit).

    Instance axis: v = rows (query rows j, context rows i), W ∈ R^{Mq x Mc} (= bilinear / low_rank_bilinear with a
    fabricated W); attribute axis: v = columns of the data (length N), W ∈ R^{N x N}, A = XᵀWX (eq 55). softmax =
    false keeps the raw form (paper); the default lowering then applies it as V (Kᵀ z) without an N x N matrix, and
    with softmax uses scaled_dot_product_attention on (V, X Wᵀ).
    """

    name, family = "parameterized_bilinear", "interdependence"
    kind = "data"
    HP = _PBilinearHP

    def _dims(self, ctx):
        if ctx.axis == "instance":
            return (_need_int(ctx.query_features, "query features"),
                    _need_int(ctx.context_features, "context features"))
        n = _need_int(ctx.query_items, f"the item count of '{self.name}' on the attribute axis")
        return n, n

    def out_size(self, ctx):
        if ctx.axis == "attribute" and str(ctx.size) != str(ctx.context_features):
            raise ShapeRuleError(f"'{self.name}' on the attribute axis is an M x M form of the data's "
                                 f"{ctx.context_features} columns; this slot acts on {ctx.size} features")
        _psi_count(self.hp.psi, *self._dims(ctx), self.hp.psi_kwargs())
        return ctx.size

    def count(self, ctx):
        return _psi_count(self.hp.psi, *self._dims(ctx), self.hp.psi_kwargs())

    def build(self, ctx):
        from rpn2c.components.impl.xi_learned import _Fabricated, _PBilinearXi

        n, D = self._dims(ctx)
        return _PBilinearXi(_Fabricated(self.hp.psi, n, D, self.hp.psi_kwargs()), self.hp, ctx.axis, D)


def _bilinear_variant(psi, **defaults):
    return _variant_hp(_PBilinearHP, psi, **defaults)


@register
class HMBilinear(ParameterizedBilinear):
    """HM bilinear ξ: A[j, i] = softmax(v_j (A_p ⊗ B) v_iᵀ · scale), a Kronecker-factored W (torch.kron, not the toolkit's outer product)."""

    name = "hm_bilinear"
    HP = _bilinear_variant("hm")


@register
class LPHMBilinear(ParameterizedBilinear):
    """LPHM bilinear ξ: A[j, i] = softmax(v_j (A_p ⊗ S T) v_iᵀ · scale), W Kronecker with a rank-r factor."""

    name = "lphm_bilinear"
    HP = _bilinear_variant("lphm", r=2)


@register
class DualLPHMBilinear(ParameterizedBilinear):
    """Dual-LPHM bilinear ξ: A[j, i] = softmax(v_j ((P Q) ⊗ (S T)) v_iᵀ · scale), both Kronecker factors of rank r."""

    name = "dual_lphm_bilinear"
    HP = _bilinear_variant("dual_lphm", r=2)


@register
class RMABilinear(ParameterizedBilinear):
    """Random-matrix-adaption bilinear ξ: A[j, i] = softmax(v_j Λ1 A_r Λ2 B_rᵀ v_iᵀ · scale), frozen random A_r, B_r."""

    name = "rma_bilinear"
    aliases = ("random_matrix_adaption_bilinear",)
    HP = _bilinear_variant("random_matrix_adaption", r=2)


# ------------------------------------------------------------------------------------------------ RPN-based
def _split_prefixed(extra: dict, prefixes: tuple[str, ...]) -> dict[str, dict]:
    out = {p: {} for p in prefixes}
    for key, value in extra.items():
        for p in prefixes:
            if key.startswith(p + "_") and len(key) > len(p) + 1:
                out[p][key[len(p) + 1:]] = value
                break
        else:
            raise ValueError(f"unknown hyper-parameter '{key}' (sub-component keys are "
                             f"{', '.join(p + '_<key>' for p in prefixes)})")
    return out


def _sub_component(name: str, families: tuple[str, ...], kwargs: dict, what: str):
    entry = lookup(name, families)
    if entry is None:
        raise ValueError(f"{what} '{name}' is not a registered {' or '.join(families)} component")
    try:
        return entry.cls(entry.schema(**kwargs))
    except ValidationError as exc:
        msgs = "; ".join(f"{'.'.join(map(str, e['loc'])) or name}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"{what} '{name}': {msgs}") from None


class _RPNHP(HP):
    model_config = ConfigDict(extra="allow")
    kappa: str = Field("identity", description="κ': an expansion or compression entry")
    psi: Literal[PSI_FAMILIES] = Field("identity", description="ψ': reconciliation fabricating R^{out x D}")
    pi: str = Field("zero", description="π': a remainder entry (zero, linear, identity)")
    out: Optional[int] = Field(None, ge=1, description="output length m' / N' (default: the axis length)")
    form: Literal["columnwise", "flatten"] = Field("columnwise", description="per vector (toolkit) or flatten(X) (eq 58)")

    @model_validator(mode="after")
    def _subs(self):
        parts = _split_prefixed(self.model_extra or {}, ("kappa", "psi", "pi"))
        _sub_component(self.kappa, ("expansion", "compression"), parts["kappa"], "kappa")
        _psi_kwargs(self.psi, parts["psi"])
        _sub_component(self.pi, ("remainder",), parts["pi"], "pi")
        return self

    def subs(self):
        parts = _split_prefixed(self.model_extra or {}, ("kappa", "psi", "pi"))
        kappa = _sub_component(self.kappa, ("expansion", "compression"), parts["kappa"], "kappa")
        pi = _sub_component(self.pi, ("remainder",), parts["pi"], "pi")
        return kappa, parts["psi"], pi


@register
class RPNInterdependence(Interdependence):
    """RPN-based ξ: A = ⟨κ'(v), ψ'(w')⟩ + π'(v) per vector v (rows of A; toolkit), or of v = flatten(X) reshaped to size x out (eq 57–59).

    columnwise: attribute v = columns of the data (length N), A[i, :] = ψ' κ'(x_i) + π'(x_i) ∈ R^{M x out};
    instance v = rows (length M), row i of the paper's b x b' matrix, stored transposed (row = output).
    flatten (the paper's eq 58): one pseudo-instance x = flatten(X) ∈ R^{NM}, ψ' ∈ R^{(size·out) x D}.
    κ', ψ', π' are single-head, single-channel RPN components (no nesting); keys kappa_<k>, psi_<k>, pi_<k>.
    """

    name, family = "rpn_interdependence", "interdependence"
    aliases = ("rpn_based",)
    kind = "data"
    HP = _RPNHP

    def _shape(self, ctx):
        """(vector length L, output length per vector n, out size)."""
        size = _need_int(ctx.size, f"the {ctx.axis} length of '{self.name}'")
        out = self.hp.out if self.hp.out is not None else size
        if ctx.axis == "attribute" and size != ctx.context_features:
            raise ShapeRuleError(f"'{self.name}' builds an M x out matrix from the data's "
                                 f"{ctx.context_features} columns; this slot acts on {size} features")
        items = _need_int(ctx.query_items, f"the item count of '{self.name}'") if ctx.query_items is not None \
            else None
        if items is None:
            raise ShapeRuleError(f"'{self.name}' needs an item axis (samples never interact)")
        m = _need_int(ctx.context_features, "the feature count")
        if ctx.axis == "instance" and size != items:
            raise ShapeRuleError(f"'{self.name}' builds its matrix from the data's {items} items; this slot acts "
                                 f"on {size}")
        if self.hp.form == "flatten":
            return items * m, size * out, out
        return (items if ctx.axis == "attribute" else m), out, out

    def _parts(self, ctx):
        L, n, out = self._shape(ctx)
        kappa, psi_kw, pi = self.hp.subs()
        if kappa.grid_only:
            raise ShapeRuleError(f"κ' '{kappa.name}' pools grids; the RPN-based ξ needs a flat κ'")
        D = kappa.features_out((L,))[0]
        err = pi.check(L, n)
        if err:
            raise ShapeRuleError(f"π' of '{self.name}': {err}")
        return kappa, psi_kw, pi, L, n, D, out

    def out_size(self, ctx):
        _, psi_kw, _, _, n, D, out = self._parts(ctx)
        _psi_count(self.hp.psi, n, D, psi_kw)
        return out

    def count(self, ctx):
        kappa, psi_kw, pi, L, n, D, _ = self._parts(ctx)
        return kappa.count((L,)) + _psi_count(self.hp.psi, n, D, psi_kw) + pi.count(L, n)

    def scratch(self, ctx):
        """κ'(v) for every vector v (D + κ''s own intermediates each), ψ''s fabricated n x D matrix, π''s."""
        kappa, _, pi, L, n, D, _ = self._parts(ctx)
        if self.hp.form == "flatten":
            vectors = 1
        else:
            vectors = _need_int(ctx.context_features if ctx.axis == "attribute" else ctx.query_items, "vectors")
        return vectors * (D + kappa.scratch((L,)) + pi.scratch(L, n)) + n * D

    def build(self, ctx):
        from rpn2c.components.impl.xi_learned import _Fabricated, _RPNXi

        kappa, psi_kw, pi, L, n, D, out = self._parts(ctx)
        return _RPNXi(kappa.build((L,)), _Fabricated(self.hp.psi, n, D, psi_kw), pi.build(L, n), self.hp.form,
                      ctx.axis, out)


