"""Learned and composed interdependence ξ: parameterised matrices (paper §5.1.5), bilinear forms with fabricated W
(§5.1.6–5.1.7), the RPN-based ξ (§5.1.8) and hybrid fusions of ξ's (§5.3).

Learnable matrices are fabricated by :mod:`rpn2c.functional.reconciliation` (identity, LoRR, HM/LPHM/dual-LPHM as
true Kronecker products — the toolkit's HM is a reshaped outer product, bug 3 — masking, hypernet, RMA) and applied
in factored form by the default lowering; the reference lowering builds them literally. Frozen random factors are
persistent buffers (a checkpoint restores the function; toolkit bug 9).

Sub-component hyper-parameters are flat keys: ``r``, ``p``, ``q``, ... for the reconciliation of ``parameterized``
/ ``parameterized_bilinear``; ``kappa_<key>``, ``psi_<key>``, ``pi_<key>`` for ``rpn_interdependence``; for
``hybrid``, a plain key goes to every part that declares it and ``p<i>_<key>`` to part i only (1-based).
"""

from __future__ import annotations

import math
import weakref
from typing import Annotated, ClassVar, Literal, Optional, Union

import torch
import torch.nn.functional as F
from pydantic import ConfigDict, Field, ValidationError, model_validator
from torch import nn

from rpn2c.components.base import Interdependence, ShapeRuleError, XiContext, XiModule
from rpn2c.components.registry import HP, REGISTRY, ValueRef, lookup, register
from rpn2c.components.xi import _BilinearXi
from rpn2c.components.xi_kernels import KERNEL_ENTRIES, NORMS, normalize_matrix
from rpn2c.functional import reconciliation as recon
from rpn2c.functional import structure
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


class _Fabricated(nn.Module):
    """Learnable tensors of one reconciliation family ψ ∈ R^{n x D}, its frozen buffers, fabricate / apply."""

    def __init__(self, psi: str, n: int, D: int, kwargs: dict):
        super().__init__()
        self.spec = recon.get_reconciliation(psi)
        self.n, self.D, self.kwargs = n, D, dict(kwargs)
        self.names = list(self.spec.param_shapes(n, D, **kwargs))
        for name, shape in self.spec.param_shapes(n, D, **kwargs).items():
            if len(shape) == 1:
                init = torch.ones(shape)
            else:
                bound = 1.0 / math.sqrt(max(shape[-1], 1))
                init = torch.empty(shape).uniform_(-bound, bound)
            self.register_parameter(name, nn.Parameter(init))
        self.buffer_names = []
        if self.spec.make_buffers is not None:
            bufs = self.spec.make_buffers(n, D, generator=None, dtype=torch.get_default_dtype(), device=None,
                                          **kwargs)
            for name, t in bufs.items():
                self.register_buffer(name, t)  # persistent
                self.buffer_names.append(name)

    def params(self) -> dict:
        return {k: getattr(self, k) for k in self.names + self.buffer_names}

    def matrix(self) -> torch.Tensor:
        """ψ ∈ R^{n x D}, literally."""
        return self.spec.fabricate(self.params(), self.n, self.D, **self.kwargs)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ ψᵀ`` for ``x: [..., D]`` in factored form."""
        return self.spec.apply(x, self.params(), self.n, self.D, **self.kwargs)


def _psi_count(psi: str, n: int, D: int, kwargs: dict) -> int:
    try:
        return recon.get_reconciliation(psi).num_params(n, D, **kwargs)
    except ValueError as exc:
        raise ShapeRuleError(f"reconciliation '{psi}' for a {n} x {D} matrix: {exc}") from None


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


@register
class Parameterized(Interdependence):
    """Parameterised ξ: A = ψ(w) ∈ R^{size x out} (eq 54), a learned matrix; out changes the axis length; ψ = any learnable reconciliation.

    Stored row = output: ψ ∈ R^{out x size}; attribute A = ψᵀ (z·A = z ψᵀ), instance A = ψ (A·z). Default
    lowering applies ψ factored (LoRR (zB)Aᵀ, Kronecker vec trick); hm/lphm/dual_lphm are true Kronecker
    products (toolkit bug 3). Parameters per channel: l of ψ for (out, size).
    """

    name, family = "parameterized", "interdependence"
    kind = "param"
    HP = _ParamHP

    def _dims(self, ctx):
        size = _need_int(ctx.size, f"the {ctx.axis} length of '{self.name}'")
        return (self.hp.out if self.hp.out is not None else size), size

    def out_size(self, ctx):
        n, D = self._dims(ctx)
        _psi_count(self.hp.psi, n, D, self.hp.psi_kwargs())
        return n

    def count(self, ctx):
        return _psi_count(self.hp.psi, *self._dims(ctx), self.hp.psi_kwargs())

    def build(self, ctx):
        return _ParameterizedXi(_Fabricated(self.hp.psi, *self._dims(ctx), self.hp.psi_kwargs()), ctx.axis)


class _ParameterizedXi(XiModule):
    def __init__(self, fab, axis):
        super().__init__()
        self.fab, self.axis = fab, axis

    def matrix(self, q, c, aux, size=None):
        psi = self.fab.matrix()
        return psi if self.axis == "instance" else psi.T

    def apply(self, z, q, c, aux):
        if self.axis == "attribute":
            return self.fab.apply(z)
        return self.fab.apply(z.transpose(-1, -2)).transpose(-1, -2)


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
    HP = _variant_hp(_ParamHP, "lorr", r=2)


@register
class HMParameterized(Parameterized):
    """HM parameterised ξ: A = A_p ⊗ B (Kronecker, torch.kron), A_p ∈ R^{p x q}; l = pq + size·out/(pq)."""

    name = "hm_parameterized"
    HP = _variant_hp(_ParamHP, "hm")


@register
class LPHMParameterized(Parameterized):
    """LPHM parameterised ξ: A = A_p ⊗ (S T), S T of rank r; l = pq + r(s + t)."""

    name = "lphm_parameterized"
    HP = _variant_hp(_ParamHP, "lphm", r=2)


@register
class DualLPHMParameterized(Parameterized):
    """Dual-LPHM parameterised ξ: A = (P Q) ⊗ (S T), both factors of rank r; l = r(p + q + s + t)."""

    name = "dual_lphm_parameterized"
    HP = _variant_hp(_ParamHP, "dual_lphm", r=2)


@register
class RMAParameterized(Parameterized):
    """Random-matrix-adaption parameterised ξ: A = Λ1 A_r Λ2 B_rᵀ with frozen random A_r, B_r (VeRA, eq 164); l = out + r."""

    name = "rma_parameterized"
    aliases = ("random_matrix_adaption_parameterized",)
    HP = _variant_hp(_ParamHP, "random_matrix_adaption", r=2)


# ------------------------------------------------------------------------------------------------ bilinear
class _PBilinearHP(_ParamHP):
    out: None = Field(None, description="(a bilinear form keeps the axis length)")
    softmax: bool = Field(True, description="row softmax over inputs (scaled softmax, eq 182)")
    scale: Optional[float] = Field(None, description="logit scale; default 1/sqrt(vector length)")


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
        n, D = self._dims(ctx)
        return _PBilinearXi(_Fabricated(self.hp.psi, n, D, self.hp.psi_kwargs()), self.hp, ctx.axis, D)


class _PBilinearXi(XiModule):
    def __init__(self, fab, hp, axis, width):
        super().__init__()
        self.fab, self.hp, self.axis = fab, hp, axis
        self.scale = hp.scale if hp.scale is not None else 1.0 / math.sqrt(width)

    def _vk(self, q, c):
        """(V, K) with logits V Kᵀ: row = output (query) j, column = input i; K = (inputs) Wᵀ."""
        if self.axis == "instance":
            return q, self.fab.apply(c)
        v = c.transpose(-1, -2)
        return v, self.fab.apply(v)

    def logits(self, q, c):
        v, k = self._vk(q, c)
        return (v @ k.transpose(-1, -2)) * self.scale

    def entries(self, q, c, aux, dst, src):
        """Row = output entries R[dst, src] in O(E·M) without the full matrix (softmax: its row normaliser by
        blocks, :func:`structure.bilinear_entries`)."""
        v, k = self._vk(q, c)
        return structure.bilinear_entries(v, k, dst, src, self.scale, self.hp.softmax)

    def matrix(self, q, c, aux, size=None):
        r = self.logits(q, c)
        if self.hp.softmax:
            r = torch.softmax(r, dim=-1)
        return r if self.axis == "instance" else r.transpose(-1, -2)

    def apply(self, z, q, c, aux):
        v, k = self._vk(q, c)
        zz = z if self.axis == "instance" else z.transpose(-1, -2)
        if self.hp.softmax:
            y = F.scaled_dot_product_attention(v, k, zz, scale=self.scale)
        else:
            y = v @ ((k.transpose(-1, -2) @ zz) * self.scale)
        return y if self.axis == "instance" else y.transpose(-1, -2)


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

    def build(self, ctx):
        kappa, psi_kw, pi, L, n, D, out = self._parts(ctx)
        return _RPNXi(kappa.build((L,)), _Fabricated(self.hp.psi, n, D, psi_kw), pi.build(L, n), self.hp.form,
                      ctx.axis, out)


class _RPNXi(XiModule):
    def __init__(self, kappa, fab, pi, form, axis, out):
        super().__init__()
        self.kappa, self.fab, self.pi = kappa, fab, pi
        self.form, self.axis, self.out = form, axis, out

    def matrix(self, q, c, aux, size=None):
        if self.form == "flatten":
            v = c.flatten(-2).unsqueeze(-2)  # [B, 1, N·M]
        else:
            v = c.transpose(-1, -2) if self.axis == "attribute" else c  # [B, K, L]
        r = self.fab.apply(self.kappa(v))
        if self.pi is not None:
            r = r + self.pi(v)
        if self.form == "flatten":
            r = r.reshape(*r.shape[:-2], -1, self.out)  # rows = input positions (the paper's m x m')
        return r if self.axis == "attribute" else r.transpose(-1, -2)


# ------------------------------------------------------------------------------------------------ hybrid
_FUSIONS = ("hadamard", "sum", "mean", "max", "min")


class _HybridHP(HP):
    model_config = ConfigDict(extra="allow")
    parts: list[str] = Field(..., min_length=1, description="interdependence entries to fuse")
    fusion: Literal[_FUSIONS] = Field("hadamard", description="A_1 ∘ … ∘ A_k, Σ w_i A_i, mean, max or min")
    weights: Optional[list[float]] = Field(None, description="w_i of the sum fusion (default 1)")
    normalize: Literal[NORMS] = Field("none", description="post-normalisation of the fused matrix (row = output)")
    softmax_scale: float = 1.0
    mask_zeros: bool = Field(True, description="softmax over the non-zero entries only (eq 87)")

    allowed: ClassVar[Optional[tuple]] = None  # part names allowed (None: any non-grid ξ)

    @model_validator(mode="after")
    def _parts_ok(self):
        if self.weights is not None:
            if self.fusion != "sum":
                raise ValueError("weights apply to fusion = \"sum\"")
            if len(self.weights) != len(self.parts):
                raise ValueError(f"{len(self.parts)} parts but {len(self.weights)} weights")
        _hybrid_parts(self)
        return self


def _hybrid_parts(hp) -> list[tuple[Interdependence, dict]]:
    """The part components and their aux key maps (part key -> hybrid key) from the flat keys of ``hp``."""
    allowed = type(hp).allowed
    extra = dict(hp.model_extra or {})
    schemas = []
    for i, name in enumerate(hp.parts, start=1):
        entry = REGISTRY["interdependence"].get(name)
        if entry is None or (allowed is not None and entry.cls.name not in allowed):
            kinds = "kernel ξ" if allowed is not None else "interdependence"
            raise ValueError(f"part {i} '{name}' is not a registered {kinds} entry")
        if entry.cls.kind == "grid" or issubclass(entry.cls, Hybrid):
            raise ValueError(f"part {i} '{name}' cannot be fused (grid patches and hybrids are not parts)")
        schemas.append(entry)
    kw = [dict() for _ in schemas]
    keymaps = [dict() for _ in schemas]
    for key, value in extra.items():
        head, _, rest = key.partition("_")
        if head[:1] == "p" and head[1:].isdigit() and rest:
            i = int(head[1:])
            if not 1 <= i <= len(schemas):
                raise ValueError(f"'{key}' names part {i}; there are {len(schemas)} parts")
            if rest not in schemas[i - 1].schema.model_fields:
                raise ValueError(f"part {i} '{schemas[i - 1].name}' has no hyper-parameter '{rest}'")
            kw[i - 1][rest], keymaps[i - 1][rest] = value, key
            continue
        users = [j for j, e in enumerate(schemas) if key in e.schema.model_fields and key not in kw[j]]
        if not users:
            raise ValueError(f"no part takes the hyper-parameter '{key}' (parts: {', '.join(hp.parts)})")
        for j in users:
            kw[j][key], keymaps[j][key] = value, key
    out = []
    for i, (entry, k, km) in enumerate(zip(schemas, kw, keymaps), start=1):
        try:
            comp = entry.cls(entry.schema(**k))
        except ValidationError as exc:
            msgs = "; ".join(f"{'.'.join(map(str, e['loc'])) or entry.name}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"part {i} '{entry.name}': {msgs}") from None
        out.append((comp, {pk: hk for pk, hk in km.items() if isinstance(k[pk], ValueRef)}))
    return out


@register
class Hybrid(Interdependence):
    """Hybrid ξ: A = fusion(A_1, …, A_k) (eq 85), Hadamard A_g ∘ A_b (eq 86–87, e.g. graph mask ∘ bilinear), Σ w_i A_i, mean, max or min; optional normalisation.

    normalize = "softmax" with mask_zeros (default) is the paper's softmax over the non-zero entries (its "column"
    normalisation under Aᵀ is our row = output). Default lowering: sums of parts are Σ w_i (A_i z) (never a fused
    matrix); a Hadamard product with a 1-hop graph part runs on its edge list (entries of the other parts
    gathered at the edges, segment softmax, index_add) — GAT-like without an N x N matrix; otherwise dense.
    Keys: plain keys go to every part declaring them, p<i>_<key> to part i (1-based).
    """

    name, family = "hybrid", "interdependence"
    example_call = 'hybrid(parts = ["chain", "pearson_correlation"])'
    HP = _HybridHP

    def __init__(self, hp):
        super().__init__(hp)
        self.parts = _hybrid_parts(hp)
        kinds = {p.kind for p, _ in self.parts}
        self.kind = "data" if "data" in kinds else "param" if "param" in kinds else "static"
        axes = set(self.parts[0][0].axes)
        for p, _ in self.parts[1:]:
            axes &= set(p.axes)
        self.axes = tuple(a for a in ("attribute", "instance") if a in axes)

    @staticmethod
    def _sub_ctx(ctx, keymap):
        return XiContext(ctx.axis, ctx.size, ctx.query_features, ctx.context_features, ctx.query_items,
                         {pk: ctx.aux[hk] for pk, hk in keymap.items() if hk in ctx.aux})

    def out_size(self, ctx):
        sizes = [p.out_size(self._sub_ctx(ctx, km)) for p, km in self.parts]
        if len({str(s) for s in sizes}) > 1:
            raise ShapeRuleError(f"the parts of '{self.name}' give different output lengths: "
                                 + ", ".join(f"{p.name}: {s}" for (p, _), s in zip(self.parts, sizes)))
        return sizes[0]

    def count(self, ctx):
        return sum(p.count(self._sub_ctx(ctx, km)) for p, km in self.parts)

    def build(self, ctx):
        mods = []
        for p, km in self.parts:
            m = p.build(self._sub_ctx(ctx, km))
            m.axis = ctx.axis
            mods.append(m)
        return _HybridXi(mods, [km for _, km in self.parts], self.hp, ctx.axis)


class _HybridHPKernel(_HybridHP):
    fusion: Literal[_FUSIONS] = "sum"
    allowed: ClassVar[Optional[tuple]] = tuple(KERNEL_ENTRIES)


@register
class HybridKernel(Hybrid):
    """Custom hybrid kernel ξ: A = Σ_i w_i K_i (eq 52: α k1 + β k2), any kernel ξ entries as parts; fusion = "hadamard" multiplies them."""

    name, family = "hybrid_kernel", "interdependence"
    example_call = 'hybrid_kernel(parts = ["gaussian_rbf_kernel", "linear_kernel"])'
    aliases = ("custom_hybrid_kernel",)
    HP = _HybridHPKernel


def _bilinear_bias(p, aux, nq, nc):
    """``bias(rows, cols, dtype)``: the additive mask of bilinear part ``p`` at the entries ``(rows, cols)`` (its
    causal, window, attn_mask and key_padding terms, :func:`structure.additive_mask`)."""
    hp = p.hp

    def bias(rows, cols, dtype):
        return structure.additive_mask(
            nq, nc, dtype, causal=hp.causal, window=hp.window,
            attn_mask=aux["attn_mask"] if hp.attn_mask is not None else None,
            attn_mode=p.modes.get("attn_mask", "block"),
            key_padding=aux["key_padding"] if hp.key_padding is not None else None,
            padding_mode=p.modes.get("key_padding", "block"), rows=rows, cols=cols)

    return bias


class _HybridXi(XiModule):
    def __init__(self, parts, keymaps, hp, axis):
        super().__init__()
        self.parts, self.keymaps, self.hp, self.axis = nn.ModuleList(parts), keymaps, hp, axis
        self.weights = hp.weights
        self._merge_cache = None  # ((src, dst, w) weakrefs, key, merged entries) of the last edge list seen

    def _aux(self, i, aux):
        return {pk: aux[hk] for pk, hk in self.keymaps[i].items() if hk in aux}

    def _fuse(self, mats):
        f = self.hp.fusion
        if f == "hadamard":
            out = mats[0]
            for a in mats[1:]:
                out = out * a
            return out
        if f in ("sum", "mean"):
            w = self.weights or [1.0] * len(mats)
            out = sum((wi * a for wi, a in zip(w[1:], mats[1:])), w[0] * mats[0])
            return out / len(mats) if f == "mean" else out
        out = mats[0]
        for a in mats[1:]:
            out = torch.maximum(out, a) if f == "max" else torch.minimum(out, a)
        return out

    def matrix(self, q, c, aux, size=None):
        a = self._fuse([p.matrix(q, c, self._aux(i, aux), size) for i, p in enumerate(self.parts)])
        if self.hp.normalize == "none":
            return a
        r = a if self.axis == "instance" else a.transpose(-1, -2)
        r = normalize_matrix(r, self.hp.normalize, self.hp.softmax_scale, self.hp.mask_zeros)
        return r if self.axis == "instance" else r.transpose(-1, -2)

    def apply(self, z, q, c, aux):
        f, norm = self.hp.fusion, self.hp.normalize
        if f in ("sum", "mean") and norm == "none":
            w = self.weights or [1.0] * len(self.parts)
            if f == "mean":
                w = [wi / len(self.parts) for wi in w]
            ys = [wi * p.apply(z, q, c, self._aux(i, aux)) for i, (wi, p) in enumerate(zip(w, self.parts))]
            return sum(ys[1:], ys[0])
        if f == "hadamard" and (norm in ("none", "row", "column", "symmetric")
                                or (norm.startswith("softmax") and self.hp.mask_zeros)):
            y = self._sparse_hadamard(z, q, c, aux)
            if y is not None:
                return y
        return super().apply(z, q, c, aux)

    # ------------------------------------------------------------------------------------ sparse Hadamard path
    def _sparse_hadamard(self, z, q, c, aux):
        zz = z if self.axis == "instance" else z.transpose(-1, -2)
        n = zz.shape[-2]
        sup = None
        for i, p in enumerate(self.parts):
            if hasattr(p, "support"):
                sup = p.support(self._aux(i, aux), n, zz.dtype, zz.device)
                if sup is not None:
                    first = i
                    break
        if sup is None:
            return None
        dst, src, vals = self._merged(*sup, n)  # duplicate entries merged: A[dst, src] is their sum
        for i, p in enumerate(self.parts):
            if i != first:
                vals = vals * self._entries(p, q, c, self._aux(i, aux), dst, src, n)
        norm = self.hp.normalize
        if norm.startswith("softmax"):  # over the non-zero entries (merged-away placeholders are zeros)
            seg = src if norm.endswith("column") else dst
            vals = vals * self.hp.softmax_scale
            vals = structure.edge_softmax(vals, seg, n, valid=vals != 0)
        elif norm in ("row", "column"):
            seg = dst if norm == "row" else src
            deg = torch.zeros((*vals.shape[:-1], n), dtype=vals.dtype, device=vals.device).index_add(-1, seg, vals)
            d = deg.gather(-1, seg.expand(*vals.shape[:-1], -1))
            vals = torch.where(d != 0, vals / torch.where(d != 0, d, torch.ones_like(d)), torch.zeros_like(vals))
        elif norm == "symmetric":
            deg = torch.zeros((*vals.shape[:-1], n), dtype=vals.dtype, device=vals.device).index_add(-1, dst, vals)
            inv_sqrt = torch.where(deg > 0, torch.where(deg > 0, deg, torch.ones_like(deg)).rsqrt(),
                                   torch.zeros_like(deg))
            lead = vals.shape[:-1]
            vals = vals * inv_sqrt.gather(-1, dst.expand(*lead, -1)) * inv_sqrt.gather(-1, src.expand(*lead, -1))
        y = structure.edge_aggregate(zz, src, dst, vals, n)
        return y if self.axis == "instance" else y.transpose(-1, -2)

    def _merged(self, src, dst, w, n):
        """``(dst, src, w)`` with duplicate entries merged at a fixed size (:func:`structure.coalesce_edges`: the sum
        at the first of each run, ``w = 0`` placeholders elsewhere; eagerly the placeholders are dropped), cached
        while the same unmodified edge tensors come back (a fixed graph's edge list is merged once)."""
        compiling = torch.compiler.is_compiling()
        cacheable = not compiling and not w.requires_grad
        if cacheable:
            key = (n, src._version, dst._version, w._version, src.device)
            if self._merge_cache is not None:
                refs, old, value = self._merge_cache
                if old == key and all(r() is t for r, t in zip(refs, (src, dst, w))):
                    return value
            refs = tuple(weakref.ref(t) for t in (src, dst, w))
        dst, src, w, count = structure.coalesce_edges(dst, src, w, n)
        if not compiling:
            keep = count > 0
            dst, src, w = dst[keep], src[keep], w[keep]
        if cacheable:
            self._merge_cache = (refs, key, (dst, src, w))
        return dst, src, w

    def _entries(self, p, q, c, aux, dst, src, n):
        """Entries R[dst, src] (row = output) of part ``p``: O(E·r) for bilinear parts and parts with an ``entries``
        method (factored), else gathered from its matrix (dense parts: kernels)."""
        if isinstance(p, _BilinearXi):
            qq, kk = p._qk(q, c, aux)
            return structure.bilinear_entries(qq, kk, dst, src, p.scale, p.hp.softmax,
                                              _bilinear_bias(p, aux, qq.shape[-2], kk.shape[-2]))
        if hasattr(p, "entries"):
            return p.entries(q, c, aux, dst, src)
        a = p.matrix(q, c, aux, n)
        r = a if self.axis == "instance" else a.transpose(-1, -2)
        return r[..., dst, src]
