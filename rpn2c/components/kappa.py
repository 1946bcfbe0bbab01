"""Data transformation κ: shared machinery of the expansion and compression entries.

The entries themselves live in :mod:`rpn2c.components.kappa_expansion` (with
:mod:`~rpn2c.components.kappa_probabilistic`, :mod:`~rpn2c.components.kappa_wavelets` and
:mod:`~rpn2c.components.kappa_patches`) and :mod:`rpn2c.components.kappa_compression` (with
:mod:`~rpn2c.components.kappa_pooling` and :mod:`~rpn2c.components.kappa_sampling`);
every one of them calls the pure maths of :mod:`rpn2c.functional.expansion` / :mod:`rpn2c.functional.compression` /
:mod:`rpn2c.functional.structure`.
This module holds what they share:

- :class:`FunctionalKappa`: an entry whose maths is the functional table's row of the entry's name (its function,
  dimension rule and elementwise flag), with the hyper-parameters mapped to the function's keyword arguments;
- :class:`CallModule`: the ``nn.Module`` calling a functional builder (tensor arguments become buffers);
- :func:`parse_part` / :class:`Part`: inner κ of ``extended`` / ``nested`` given by name and options, looked up
  only in the registry (a bad name is a schema error, never an import);
- the patch geometries of geometric compression / expansion (conv-style cuboid, the paper's centred cuboid,
  cylinder, sphere; stride or a named packing strategy) and the metric hyper-parameters φ of pooling.
"""

from __future__ import annotations

import ast as pyast
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Optional, TYPE_CHECKING, Union

from pydantic import Field, field_validator, model_validator

from rpn2c.components.base import Kappa, ShapeRuleError
from rpn2c.components.grid import CentredPatchHP, Geometry, IntOrList, PatchHP, _per_axis
from rpn2c.components.registry import HP, REGISTRY
from rpn2c.errors import did_you_mean
from rpn2c.functional import compression as FC
from rpn2c.functional import structure

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    import torch

__all__ = ["FunctionalKappa", "Part", "parse_part", "MetricHP", "METRIC_NAMES", "metric_kwargs"]


# ------------------------------------------------------------------------------------------------ functional κ
class FunctionalKappa(Kappa):
    """An entry whose maths is ``table[name]`` of a functional table (``spec`` overrides the key for entries
    with a hyper-parameter that picks the function, such as ``rbf(kind = ...)``).

    ``kwargs()`` maps the hyper-parameters to the function's keyword arguments (by default: the same names).
    Elementwise-ness, the per-attribute width and the flat dimension rule are the maths' own; the docs, defaults
    and aliases are the entry's (its docstring and ``HP``).
    """

    table: ClassVar[Any] = None

    def __init__(self, hp):
        super().__init__(hp)
        self.kw = self.kwargs()

    def kwargs(self) -> dict[str, Any]:
        return self.hp.model_dump()

    @property
    def spec(self):
        return self.table[self.name]

    @property
    def elementwise(self) -> bool:
        return self.spec.is_elementwise(**self.kw)

    def degree(self) -> int:
        return self.spec.width(**self.kw)

    def basis(self, x):
        return self.spec.fn(x.unsqueeze(-1), **self.kw)

    def stacked_basis(self, x, axis: int):
        """The basis with its d values stacked at ``axis`` (no layout copy), where the function supports it."""
        return self.spec.fn(x, **self.kw, axis=axis) if self.spec.stacks_degrees else None

    def value_at_zero(self):
        import torch

        if not self.elementwise:
            return None
        return self.basis(torch.zeros(1, dtype=torch.float64))[0]

    def flat_out(self, m):
        return self.spec.dim(m, **self.kw)

    def module(self, feat):
        from rpn2c.components.impl.kappa import CallModule

        return CallModule(self.spec.fn, self.kw, self.name)


# ------------------------------------------------------------------------------------------------ inner κ by name
@dataclass(frozen=True)
class Part:
    """One inner κ of a composite: the registry name and the validated component."""

    name: str
    component: Kappa

    def __str__(self) -> str:
        """Canonical text with every hyper-parameter (defaults included): parse_part reads it back."""
        args = ", ".join(f"{k} = {v!r}" for k, v in self.component.hp)
        return f"{self.name}({args})" if args else self.name


_WORDS = {"true": True, "false": False, "none": None, "True": True, "False": False, "None": None}


def _literal(node: pyast.AST) -> Any:
    if isinstance(node, pyast.Name) and node.id in _WORDS:
        return _WORDS[node.id]
    if isinstance(node, (pyast.List, pyast.Tuple)):
        return [_literal(e) for e in node.elts]
    try:
        return pyast.literal_eval(node)
    except ValueError:
        raise ValueError(f"option value {pyast.unparse(node)!r} is not a literal") from None


def _split(item: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], dict):
        return item[0], dict(item[1])
    if not isinstance(item, str):
        raise ValueError(f"an inner κ is a string like \"chebyshev(d = 3)\", got {item!r}")
    try:
        node = pyast.parse(item.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError(f"cannot read inner κ {item!r}; write it as \"name\" or \"name(key = value, ...)\"") from None
    if isinstance(node, pyast.Name):
        return node.id, {}
    if isinstance(node, pyast.Call) and isinstance(node.func, pyast.Name) and not node.args \
            and all(k.arg is not None for k in node.keywords):
        return node.func.id, {k.arg: _literal(k.value) for k in node.keywords}
    raise ValueError(f"cannot read inner κ {item!r}; write it as \"name\" or \"name(key = value, ...)\"")


def parse_part(item: Any, families: tuple[str, ...]) -> Part:
    """An inner κ (``"name"``, ``"name(k = v, ...)"`` or ``(name, {k: v})``) validated against the registry."""
    name, options = _split(item)
    entry = next((REGISTRY[f][name] for f in families if name in REGISTRY[f]), None)
    if entry is None:
        known = sorted({n for f in families for n in REGISTRY[f]})
        hint = did_you_mean(name, known)
        hint = f"; {hint}" if hint else ""
        raise ValueError(f"unknown inner κ {name!r}{hint}")
    if entry.cls.grid_only:
        raise ValueError(f"'{name}' needs grid features and cannot be an inner κ (flat features only)")
    try:
        hp = entry.schema(**options)
    except Exception as exc:  # pydantic ValidationError -> a plain message for the outer schema
        msgs = "; ".join(f"{'.'.join(map(str, e['loc'])) or name}: {e['msg']}" for e in getattr(exc, "errors",
                                                                                                  lambda: [])())
        raise ValueError(f"inner κ {name!r}: {msgs or exc}") from None
    return Part(name, entry.cls(hp))


# ------------------------------------------------------------------------------------------------ patch metrics φ
METRIC_NAMES: tuple[str, ...] = tuple(FC.METRICS) + tuple(FC._METRIC_ALIASES)
_IGNORABLE = {"max": -math.inf, "min": math.inf, "sum": 0.0, "mean": 0.0, "prod": 1.0, "l1": 0.0, "l2": 0.0,
              "linf": 0.0, "lp": 0.0}


class MetricHP(HP):
    """The patch (or vector) mapping φ and its options."""

    metric: Literal[METRIC_NAMES] = "max"  # type: ignore[valid-type]
    p: float = Field(2.0, gt=0, description="order of the lp norm (metric = lp)")
    eps: float = Field(1e-12, gt=0, description="smoothing of entropy")
    correction: int = Field(0, ge=0, le=1, description="variance/std: 0 population (default), 1 sample (toolkit)")

    @field_validator("metric")
    @classmethod
    def _canonical(cls, v):
        return FC._METRIC_ALIASES.get(v, v)


def metric_kwargs(hp) -> dict[str, Any]:
    """The functional ``reduce`` keyword arguments for ``hp.metric``."""
    return {"lp": {"p": hp.p}, "entropy": {"eps": hp.eps}, "variance": {"correction": hp.correction},
            "std": {"correction": hp.correction}}.get(hp.metric, {})


def cut_exact(metric: str, ignore: bool) -> bool:
    """Whether the taps that read the zero-padding fill in every patch may be left out of a pooling of ``metric``: an
    ignored tap reads φ's neutral element; a tap read as 0 adds nothing to a sum or a norm, and a mean is their sum
    over the whole patch's size."""
    return metric in _IGNORABLE if ignore else metric in ("sum", "mean", "l1", "l2", "linf", "lp")


def ignore_fill(metric: str) -> float:
    """The neutral element read by out-of-grid taps when they are ignored (max: −inf, min: +inf, prod: 1, ...)."""
    return _IGNORABLE[metric]


class PoolHP(MetricHP):
    """φ plus how out-of-grid taps count (zero padding only)."""

    outside: Literal["auto", "zero", "ignore"] = Field(
        "auto", description="zero: taps read 0 (paper/toolkit); ignore: taps are skipped (MaxPool, AvgPool "
                            "count_include_pad=False); auto: ignore for max/min, zero otherwise")

    @model_validator(mode="after")
    def _ignorable(self):
        if self.outside == "ignore" and self.metric not in _IGNORABLE:
            raise ValueError(f"outside = \"ignore\" is defined for {sorted(_IGNORABLE)}, not {self.metric!r}")
        return self

    def ignores_outside(self) -> bool:
        return self.outside == "ignore" or (self.outside == "auto" and self.metric in ("max", "min"))


# ------------------------------------------------------------------------------------------------ patch shapes
class ConvPatchHP(PatchHP):
    """Conv-style cuboid patch (kernel size, stride, padding, dilation); stride defaults to the size."""

    stride: Optional[IntOrList] = None  # type: ignore[assignment]

    def to_geometry(self, rank: int) -> Geometry:
        stride = self.size if self.stride is None else self.stride
        return PatchHP(size=self.size, stride=stride, pad=self.pad, pad_after=self.pad_after, dilation=self.dilation,
                       padding_mode=self.padding_mode).geometry(rank)


class _PackingHP(HP):
    packing: Optional[str] = Field(None, description="a packing strategy name (sets the stride; catalog §3.4)")
    convention: Literal["paper", "toolkit"] = "paper"
    centres: Literal["lattice", "cells"] = Field(
        "lattice", description="packing centres: the paper's real-valued lattice rounded per centre, or its distances "
        "floored to whole cells")

    def _lattice(self, shape: str, size_params) -> structure.Lattice | None:
        """The packing's real-valued centres (``centres = "lattice"``) unless they are whole cells anyway."""
        if self.centres != "lattice" or self.packing is None:
            return None
        lat = structure.packing_lattice(shape, self.packing, size_params, self.convention)
        return None if lat.whole else lat

    def _packed_stride(self, shape: str, size_params) -> tuple[int, ...]:
        try:
            return structure.packing_stride(shape, self.packing, size_params, self.convention)
        except ValueError as exc:
            raise ShapeRuleError(str(exc)) from None

    @model_validator(mode="after")
    def _one_stride(self):
        if "centres" in self.model_fields_set and self.packing is None:
            raise ValueError("centres places the centres of a packing: give packing")
        if self.packing is not None:
            if "stride" in self.model_fields_set:
                raise ValueError("give either stride or packing, not both")
            shape = getattr(self, "_shape", "cuboid")
            names = structure.packing_strategies(shape)
            if self.packing not in names:
                raise ValueError(f"unknown {shape} packing {self.packing!r}; known: {', '.join(names)}")
        return self


class CentredCuboidHP(_PackingHP, CentredPatchHP):
    """The paper's centred cuboid (half-extents p before, p' after per axis); stride = centre distance."""

    _shape: ClassVar[str] = "cuboid"

    def to_geometry(self, rank: int) -> Geometry:
        geo = self.geometry(rank)
        if self.packing is None:
            return geo
        stride = self._packed_stride("cuboid", _per_axis(self.half, rank, "half"))
        return Geometry(geo.kernel, stride, geo.dilation, geo.pad_before, geo.pad_after, "zeros", None)


def _offsets_geometry(offsets: list[tuple[int, ...]], before: tuple[int, ...], after: tuple[int, ...],
                      stride: tuple[int, ...], packing: str | None, shape: str,
                      lattice: structure.Lattice | None = None) -> Geometry:
    """A centred patch given by centre-relative offsets as a masked kernel box (taps = offset + before); a
    hexagonal packing offsets every other row of centres (:func:`structure.packing_row_shift`), a sphere packing
    its depth layers too (:func:`structure.packing_layer_shift`)."""
    rank = len(before)
    taps = tuple(tuple(v + b for v, b in zip(row, before)) for row in offsets)
    kernel = tuple(b + a + 1 for b, a in zip(before, after))
    return Geometry(kernel, stride, (1,) * rank, before, after, "zeros", taps,
                    structure.packing_row_shift(packing, stride), structure.packing_layer_shift(shape, packing, stride),
                    lattice)


class CylinderHP(_PackingHP):
    """Cylinder patch (eq 65): a disc of radius r on the first two spatial axes × a depth range on the third."""

    _shape: ClassVar[str] = "cylinder"
    radius: int = Field(1, ge=0, le=64)
    depth: int = Field(0, ge=0, le=64, description="depth before (p_d); 3-D grids only")
    depth_after: Optional[int] = Field(None, ge=0, le=64, description="depth after (p'_d); default = depth")
    stride: IntOrList = 1

    def to_geometry(self, rank: int) -> Geometry:
        r, pd = self.radius, self.depth
        pa = pd if self.depth_after is None else self.depth_after
        if rank not in (2, 3):
            raise ShapeRuleError(f"a cylinder patch needs a 2-D or 3-D grid, got {rank}-D")
        if rank == 2 and (pd or pa):
            raise ShapeRuleError("a cylinder on a 2-D grid is a disc: it has no depth range")
        offsets = structure.cylinder_rows(r, pd, pa, ndim=rank)
        before = (r, r, pd)[:rank]
        after = (r, r, pa)[:rank]
        lattice = None
        if self.packing is not None:
            stride = self._packed_stride("cylinder", (r,) if rank == 2 else (r, pd))
            lattice = self._lattice("cylinder", (r,) if rank == 2 else (r, pd))
        else:
            stride = _per_axis(self.stride, rank, "stride")
        return _offsets_geometry(offsets, before, after, stride, self.packing, self._shape, lattice)


class SphereHP(_PackingHP):
    """Sphere (ball) patch (eq 65): ∇i² + ∇j² + ∇k² ≤ r² on a 3-D grid."""

    _shape: ClassVar[str] = "sphere"
    radius: int = Field(1, ge=0, le=32)
    stride: IntOrList = 1

    def to_geometry(self, rank: int) -> Geometry:
        if rank != 3:
            raise ShapeRuleError(f"a sphere patch needs a 3-D grid, got {rank}-D")
        r = self.radius
        stride = self._packed_stride("sphere", r) if self.packing is not None else _per_axis(self.stride, 3, "stride")
        lattice = self._lattice("sphere", r) if self.packing is not None else None
        return _offsets_geometry(structure.sphere_rows(r), (r,) * 3, (r,) * 3, stride, self.packing, self._shape,
                                 lattice)


PatchShapeHP = Union[ConvPatchHP, CentredCuboidHP, CylinderHP, SphereHP]


# ------------------------------------------------------------------------------------------------ composites
def parts_hp(families: tuple[str, ...]) -> type[HP]:
    """Schema of a composite: ``parts`` = inner κ by name and options, validated against ``families``."""

    class PartsHP(HP):
        parts: list[Any] = Field(..., min_length=1, description='inner κ: ["name", "name(key = value, ...)", ...]')

        @field_validator("parts")
        @classmethod
        def _resolve(cls, v):
            # stored as canonical text (every option spelt out): plain data for the IR, its hash and display
            return [str(parse_part(item, families)) for item in v]

    return PartsHP


class Composite(Kappa):
    """Base of ``extended`` (concatenation) and ``nested`` (composition) κ over registry entries."""

    concat: ClassVar[bool] = True
    part_families: ClassVar[tuple[str, ...]] = ("expansion", "compression")

    def __init__(self, hp):
        super().__init__(hp)
        self.parts = [parse_part(text, self.part_families) for text in hp.parts]

    @property
    def components(self) -> list[Kappa]:
        return [p.component for p in self.parts]

    @property
    def elementwise(self) -> bool:
        return all(k.elementwise for k in self.components)

    def degree(self) -> int:
        ks = [k.degree() for k in self.components]
        return sum(ks) if self.concat else math.prod(ks)

    def basis(self, x):
        import torch

        if self.concat:
            return torch.cat([k.basis(x) for k in self.components], dim=-1)
        first, *rest = self.components
        y = first.basis(x)
        for k in rest:
            y = k.basis(y).flatten(-2)
        return y

    def value_at_zero(self):
        import torch

        return self.basis(torch.zeros(1, dtype=torch.float64))[0] if self.elementwise else None

    def _feats(self, m: int) -> list[int]:
        """Input width of every part (all m for concatenation; chained for composition), then the output."""
        widths = [m]
        for k in self.components:
            widths.append(k.features_out((m if self.concat else widths[-1],))[0])
        return widths

    def flat_out(self, m):
        widths = self._feats(m)
        return sum(widths[1:]) if self.concat else widths[-1]

    def count(self, feat):
        if self.elementwise:
            return 0
        widths = self._feats(feat[0])
        return sum(k.count((feat[0] if self.concat else w,)) for k, w in zip(self.components, widths))

    def scratch(self, feat):
        """A composition holds each inner output (all but the last width); every part its own intermediates."""
        if len(feat) != 1:
            return 0
        widths = self._feats(feat[0])
        own = sum(k.scratch((feat[0] if self.concat else w,)) for k, w in zip(self.components, widths))
        return own + (0 if self.concat else sum(widths[1:-1]))

    def build(self, feat):
        from rpn2c.components.impl.kappa import _Chain

        if self.elementwise:
            return super().build(feat)
        if len(feat) != 1:
            raise ShapeRuleError(f"{self.name} needs flat features, got a grid {feat}; flatten() first")
        widths = self._feats(feat[0])
        mods = [k.build((feat[0] if self.concat else w,)) for k, w in zip(self.components, widths)]
        return _Chain(mods, self.concat)
