"""Hybrid interdependence ξ (paper §5.3): A = fusion(A_1, …, A_k) of registered ξ entries (eq 85–87), and the
custom hybrid kernel ξ (eq 52).

Keys are flat: a plain key goes to every part that declares it and ``p<i>_<key>`` to part i only (1-based). Sums
of parts are applied part by part; a Hadamard product with a 1-hop graph part runs on its edge list, taking the
other parts' entries at the edges (``entries`` of the part, else gathered from its matrix).
"""

from __future__ import annotations

from typing import ClassVar, Literal, Optional

from pydantic import ConfigDict, Field, ValidationError, model_validator

from rpn2c.components.base import Interdependence, ShapeRuleError, XiContext
from rpn2c.components.registry import HP, REGISTRY, ValueRef, register
from rpn2c.components.xi_kernels import KERNEL_ENTRIES, NORMS
from rpn2c.ir.kernels import XI_ARGS, Kernel, Predicate
from rpn2c.ir.types import dim_add, dim_mul, is_known


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
        if comp.affine():
            raise ValueError(f"part {i} '{entry.name}' with bias = true is affine (A z + b 1ᵀ): a hybrid fuses "
                             f"matrices")
        out.append((comp, {pk: hk for pk, hk in km.items() if isinstance(k[pk], ValueRef)}))
    return out


def _linear_in_parts(xi) -> bool:
    return xi.hp.normalize == "none" and xi.hp.fusion in ("sum", "mean", "weighted", *_CONCAT)


def _on_edges(xi) -> bool:
    norm = xi.hp.normalize
    return (xi.hp.fusion == "hadamard" and any(p.one_hop() for p, _ in xi.parts)
            and (norm in ("none", "row", "column", "symmetric") or (norm.startswith("softmax") and xi.hp.mask_zeros)))


# the hybrid ξ's two kernels: its module's methods ``apply_parts`` and ``hadamard_on_edges`` (rules/items.py)
FUSED_PARTS = Kernel("fused_parts", XI_ARGS, "apply_parts", Predicate(
    _linear_in_parts, "an unnormalised sum, mean, weighted or concatenating fusion is linear in the matrices: each "
                      "part's own A_i z (its kernel), then the outputs fused; never the fused matrix"))
EDGE_HADAMARD = Kernel("edge_hadamard", XI_ARGS, "hadamard_on_edges", Predicate(
    _on_edges, "a Hadamard product with a 1-hop graph part (unnormalised, row, column or symmetric normalised, or "
               "a softmax over the non-zero entries): on the graph's edge list, the other parts' entries taken at "
               "its edges (GAT-like), never an N x N matrix"))


@register
class Hybrid(Interdependence):
    """Hybrid ξ: A = fusion(A_1, …, A_k) (eq 85), Hadamard A_g ∘ A_b (eq 86–87, e.g. graph mask ∘ bilinear), Σ w_i A_i, mean, max, min, median, Σ α_i A_i (eq 114), (⊔ A_i) W (eq 119) or (⊔ A_i) P Qᵀ (eq 120); optional normalisation.

    normalize = "softmax" with mask_zeros (default) is the paper's softmax over the non-zero entries (its "column"
    normalisation under Aᵀ is our row = output). weighted, median, concat_linear and concat_lowrank are the fusion
    entries of those names applied to the matrices, ⊔ along their output axis (A_i ∈ R^{m x m'} side by side,
    W ∈ R^{k·m' x n'}); learnable (weighted), fusion_out, fusion_rank, fusion_bias (concat) configure them.
    Default lowering: sums, weighted sums and concatenations are the fusion of the parts' outputs A_i z (kernel
    fused_parts: never a fused matrix; a concat bias b adds (Σ z) bᵀ); a Hadamard product with a 1-hop graph part
    runs on its edge list (kernel edge_hadamard: entries of the other parts gathered at the edges, segment softmax,
    index_add) — GAT-like without an N x N matrix; otherwise (max, min, median, normalised fusions) dense. Keys: plain keys go to every part declaring
    them, p<i>_<key> to part i (1-based).
    """

    name, family = "hybrid", "interdependence"
    example_call = 'hybrid(parts = ["chain", "pearson_correlation"])'
    HP = _HybridHP
    kernels = (FUSED_PARTS, EDGE_HADAMARD)

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
                         {pk: ctx.aux[hk] for pk, hk in keymap.items() if hk in ctx.aux}, ctx.heads, ctx.head)

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

    def scratch(self, ctx):
        """Every part's matrix (size x its output length) and its own intermediates: a dense fusion holds them
        all at once."""
        total = 0
        for p, km in self.parts:
            sub = self._sub_ctx(ctx, km)
            total = dim_add(total, dim_add(dim_mul(ctx.size, p.out_size(sub)), p.scratch(sub)))
        return total

    def steps(self, ctx):
        total = 0
        for p, km in self.parts:
            total = dim_add(total, p.steps(self._sub_ctx(ctx, km)))
        return total

    def build(self, ctx):
        from rpn2c.components.impl.xi_hybrid import _HybridXi

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
