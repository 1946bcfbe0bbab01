"""Hybrid interdependence ξ (paper §5.3): A = fusion(A_1, …, A_k) of registered ξ entries (eq 85–87), and the
custom hybrid kernel ξ (eq 52).

Keys are flat: a plain key goes to every part that declares it and ``p<i>_<key>`` to part i only (1-based). Sums
of parts are applied part by part; a Hadamard product with a 1-hop graph part runs on its edge list, taking the
other parts' entries at the edges (``entries`` of the part, else gathered from its matrix).
"""

from __future__ import annotations

import weakref
from typing import ClassVar, Literal, Optional

import torch
from pydantic import ConfigDict, Field, ValidationError, model_validator
from torch import nn

from rpn2c.components.base import Interdependence, ShapeRuleError, XiContext, XiModule
from rpn2c.components.registry import HP, REGISTRY, ValueRef, register
from rpn2c.components.xi_kernels import KERNEL_ENTRIES, NORMS, normalize_matrix
from rpn2c.functional import structure
from rpn2c.ir.types import is_known


_FUSIONS = ("hadamard", "sum", "mean", "max", "min", "median", "weighted", "concat_linear", "concat_lowrank")
_CONCAT = ("concat_linear", "concat_lowrank")
#: fusions run by the fusion entry of the same name (``rpn2c.components.fusion``) on the parts' matrices or outputs
_ENTRY_FUSIONS = ("median", "weighted", *_CONCAT)
#: hybrid keys that configure the fusion, and the fusions they belong to
_FUSION_KEYS = {"learnable": ("weighted",), "median_mode": ("median",), "fusion_out": _CONCAT,
                "fusion_bias": _CONCAT, "fusion_rank": ("concat_lowrank",)}


class _HybridHP(HP):
    model_config = ConfigDict(extra="allow")
    parts: list[str] = Field(..., min_length=1, description="interdependence entries to fuse")
    fusion: Literal[_FUSIONS] = Field("hadamard", description="A_1 ∘ … ∘ A_k, Σ w_i A_i, mean, max, min, median, "
                                      "Σ α_i A_i (weighted, eq 114), (⊔ A_i) W (concat_linear, eq 119) or "
                                      "(⊔ A_i) P Qᵀ (concat_lowrank, eq 120)")
    weights: Optional[list[float]] = Field(None, description="w_i of the sum fusion (default 1); α_i of the "
                                                             "weighted fusion (initial values if learnable; "
                                                             "default 1/k)")
    learnable: bool = Field(True, description="weighted fusion: learn α")
    median_mode: Literal["mean", "lower"] = Field("mean", description="median fusion, even k: average the middle "
                                                                      "pair, or take the lower")
    fusion_out: Optional[int] = Field(None, ge=1, description="concat fusions: output length n' of the fused "
                                                              "matrix (default: the parts' output length)")
    fusion_rank: int = Field(2, ge=1, description="concat_lowrank: rank r of P Qᵀ")
    fusion_bias: bool = Field(False, description="concat fusions: a learned b ∈ R^{n'} added to every row of A")
    normalize: Literal[NORMS] = Field("none", description="post-normalisation of the fused matrix (row = output)")
    softmax_scale: float = 1.0
    mask_zeros: bool = Field(True, description="softmax over the non-zero entries only (eq 87)")

    allowed: ClassVar[Optional[tuple]] = None  # part names allowed (None: any non-grid ξ)

    @model_validator(mode="after")
    def _parts_ok(self):
        if self.weights is not None:
            if self.fusion not in ("sum", "weighted"):
                raise ValueError("weights apply to fusion = \"sum\" or \"weighted\"")
            if len(self.weights) != len(self.parts):
                raise ValueError(f"{len(self.parts)} parts but {len(self.weights)} weights")
        for key, fusions in _FUSION_KEYS.items():
            if key in self.model_fields_set and self.fusion not in fusions:
                names = " or ".join(f'fusion = "{f}"' for f in fusions)
                raise ValueError(f"{key} applies to {names}, not fusion = \"{self.fusion}\"")
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
    """Hybrid ξ: A = fusion(A_1, …, A_k) (eq 85), Hadamard A_g ∘ A_b (eq 86–87, e.g. graph mask ∘ bilinear), Σ w_i A_i, mean, max, min, median, Σ α_i A_i (eq 114), (⊔ A_i) W (eq 119) or (⊔ A_i) P Qᵀ (eq 120); optional normalisation.

    normalize = "softmax" with mask_zeros (default) is the paper's softmax over the non-zero entries (its "column"
    normalisation under Aᵀ is our row = output). weighted, median, concat_linear and concat_lowrank are the fusion
    entries of those names applied to the matrices, ⊔ along their output axis (A_i ∈ R^{m x m'} side by side,
    W ∈ R^{k·m' x n'}); learnable (weighted), fusion_out, fusion_rank, fusion_bias (concat) configure them.
    Default lowering: sums, weighted sums and concatenations are the fusion of the parts' outputs A_i z (never a
    fused matrix; a concat bias b adds (Σ z) bᵀ); a Hadamard product with a 1-hop graph part runs on its edge list
    (entries of the other parts gathered at the edges, segment softmax, index_add) — GAT-like without an N x N
    matrix; otherwise (max, min, median, normalised fusions) dense. Keys: plain keys go to every part declaring
    them, p<i>_<key> to part i (1-based).
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

    def _part_size(self, ctx):
        sizes = [p.out_size(self._sub_ctx(ctx, km)) for p, km in self.parts]
        if len({str(s) for s in sizes}) > 1:
            raise ShapeRuleError(f"the parts of '{self.name}' give different output lengths: "
                                 + ", ".join(f"{p.name}: {s}" for (p, _), s in zip(self.parts, sizes)))
        return sizes[0]

    def out_size(self, ctx):
        size = self._part_size(ctx)
        if self.hp.fusion not in _CONCAT:
            return size
        if not is_known(size):
            raise ShapeRuleError(f'fusion = "{self.hp.fusion}" learns W over the {ctx.axis} axis, so that axis '
                                 f"needs a known length (the parts give {size}); declare it as a number")
        return self.hp.fusion_out if self.hp.fusion_out is not None else size

    def fusion_entry(self, ctx):
        """The fusion component of an entry fusion (weighted, median, concat_*) and its input widths, else None."""
        hp = self.hp
        if hp.fusion not in _ENTRY_FUSIONS:
            return None, None
        if hp.fusion == "weighted":
            kw = {"weights": hp.weights, "learnable": hp.learnable}
        elif hp.fusion == "median":
            kw = {"mode": hp.median_mode}
        else:
            kw = {"out": self.out_size(ctx), "bias": hp.fusion_bias}
            if hp.fusion == "concat_lowrank":
                kw["r"] = hp.fusion_rank
        entry = REGISTRY["fusion"][hp.fusion]
        size = self._part_size(ctx)
        return entry.cls(entry.schema(**kw)), [size if is_known(size) else 1] * len(self.parts)

    def count(self, ctx):
        fusion, dims = self.fusion_entry(ctx)
        own = fusion.count(dims) if fusion is not None else 0
        return own + sum(p.count(self._sub_ctx(ctx, km)) for p, km in self.parts)

    def build(self, ctx):
        mods = []
        for p, km in self.parts:
            m = p.build(self._sub_ctx(ctx, km))
            m.axis = ctx.axis
            mods.append(m)
        fusion, dims = self.fusion_entry(ctx)
        return _HybridXi(mods, [km for _, km in self.parts], self.hp, ctx.axis,
                         fusion.build(dims) if fusion is not None else None)


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


class _HybridXi(XiModule):
    def __init__(self, parts, keymaps, hp, axis, fusion=None):
        super().__init__()
        self.parts, self.keymaps, self.hp, self.axis = nn.ModuleList(parts), keymaps, hp, axis
        self.weights = hp.weights
        self.fusion = fusion  # the fusion entry's module (weighted, median, concat_*), else None
        self._merge_cache = None  # ((src, dst, w) weakrefs, key, merged entries) of the last edge list seen

    def _aux(self, i, aux):
        return {pk: aux[hk] for pk, hk in self.keymaps[i].items() if hk in aux}

    def _entry_fuse(self, ts):
        """The fusion entry on matrices or outputs ``ts`` along their output axis (the last for the attribute axis,
        the item axis -2 for the instance axis: it is moved last and back)."""
        inst = self.axis == "instance"
        ts = torch.broadcast_tensors(*[t.mT if inst else t for t in ts])
        y = self.fusion(list(ts))
        return y.mT if inst else y

    def _concat_bias(self):
        return getattr(getattr(self.fusion, "linear", self.fusion), "bias", None)

    def _fuse(self, mats):
        f = self.hp.fusion
        if f in _ENTRY_FUSIONS:
            return self._entry_fuse(mats)
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
        if f in ("weighted", *_CONCAT) and norm == "none":  # linear in the matrices: fuse the outputs A_i z
            y = self._entry_fuse([p.apply(z, q, c, self._aux(i, aux)) for i, p in enumerate(self.parts)])
            b = self._concat_bias() if f in _CONCAT else None
            if b is None:
                return y
            # (⊔ A_i W + 1 bᵀ) applied to z adds (Σ z) bᵀ; the fusion entry added b once
            if self.axis == "attribute":
                return y + (z.sum(-1, keepdim=True) - 1) * b
            return y + (z.sum(-2, keepdim=True) - 1) * b[:, None]
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
        """Entries R[dst, src] (row = output) of part ``p``: by its ``entries`` method where it has one (factored:
        O(E·r) for the bilinear forms), else gathered from its matrix (dense parts: kernels)."""
        if hasattr(p, "entries"):
            return p.entries(q, c, aux, dst, src)
        a = p.matrix(q, c, aux, n)
        r = a if self.axis == "instance" else a.transpose(-1, -2)
        return r[..., dst, src]
