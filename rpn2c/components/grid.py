"""Grid patch geometry shared by grid interdependence (convolution) and patch compression (pooling).

A patch along one spatial axis is described in conv terms: ``kernel`` k taps spaced ``dilation`` d apart, windows
``stride`` s apart, ``pad_before``/``pad_after`` cells of padding. Window i starts at ``i*s - pad_before`` and the
number of windows is ``floor((L + pb + pa - d(k-1) - 1)/s) + 1``. The paper's centred patch (p, p') with centre
distance s is ``k = p+p'+1, pb = p, pa = p'``, which gives its ``ceil(L/s)`` patches (semantics.md).
Cylinder/sphere patches use a subset of the kernel box (``taps``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Literal, TYPE_CHECKING, Union

from pydantic import field_validator

from rpn2c.components.base import ShapeRuleError
from rpn2c.components.registry import HP
from rpn2c.functional import structure
from rpn2c.ir.types import Dim, dim_add, dim_mul, numel

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    import torch

IntOrList = Union[int, list[int]]


@dataclass(frozen=True)
class Geometry:
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    pad_before: tuple[int, ...]
    pad_after: tuple[int, ...]
    padding_mode: str = "zeros"
    taps: tuple[tuple[int, ...], ...] | None = None  # kernel-box positions used; None = the whole box
    row_shift: int = 0  # hexagonal packing: odd rows of patches shifted this many cells along axis 2
    layer_shift: tuple[tuple[int, int], ...] = ()  # sphere packings: depth layer k's shift (axes 1, 2), k mod len
    lattice: structure.Lattice | None = None  # centres at a packing's real-valued distances, rounded (replaces the
    # stride and shifts for the centres; the stride keeps the floored distances for reports)

    @property
    def staggered(self) -> bool:
        """Centres off the strided lattice (offset rows, depth layers or real-valued distances): no convolution or
        native pooling."""
        return bool(self.row_shift or self.layer_shift or self.lattice is not None)

    @property
    def rank(self) -> int:
        return len(self.kernel)

    @property
    def patch_size(self) -> int:
        if self.taps is not None:
            return len(self.taps)
        out = 1
        for k in self.kernel:
            out *= k
        return out

    def tap_positions(self) -> list[tuple[int, ...]]:
        """Kernel-box coordinates of the taps in row-major (conv weight flatten) order."""
        if self.taps is not None:
            return list(self.taps)
        return list(itertools.product(*(range(k) for k in self.kernel)))

    def out_extent(self, axis: int, length: Dim) -> Dim:
        if self.lattice is not None:  # centres q·d < L − ½ at the packing's real distance d
            if isinstance(length, int):
                return self.lattice.count(length, axis)
            return f"ceil(({length}-0.5)/{self.lattice.distances[axis]:.6g})"
        k, s, d = self.kernel[axis], self.stride[axis], self.dilation[axis]
        pb, pa = self.pad_before[axis], self.pad_after[axis]
        if s < 1 or d < 1 or k < 1:  # checked here for every geometry, whichever schema built it
            raise ShapeRuleError(f"patch size, stride and dilation must be >= 1, got size {k}, stride {s}, "
                                 f"dilation {d}")
        if isinstance(length, int):
            n = (length + pb + pa - d * (k - 1) - 1) // s + 1
            if n < 1:
                raise ShapeRuleError(
                    f"a patch of extent {d * (k - 1) + 1} does not fit an axis of length {length} "
                    f"with padding ({pb}, {pa})")
            return n
        if s > 1:
            return f"({length}+{pb + pa - d * (k - 1) - 1})//{s}+1"
        shift = pb + pa - d * (k - 1)
        return length if shift == 0 else f"{length}{shift:+d}"  # a size-preserving patch keeps the symbol

    def out_spatial(self, spatial: tuple[Dim, ...]) -> tuple[Dim, ...]:
        if len(spatial) != self.rank:
            raise ShapeRuleError(f"a {self.rank}-D patch cannot slide over a {len(spatial)}-D grid")
        if self.padding_mode in ("circular", "reflect"):  # torch's padding reads the grid once: pad <= L (< L)
            for n, b, a in zip(spatial, self.pad_before, self.pad_after):
                most = n if self.padding_mode == "circular" else n - 1
                if isinstance(n, int) and not isinstance(n, bool) and max(b, a) > most:
                    raise ShapeRuleError(f"{self.padding_mode} padding of {max(b, a)} cells on an axis of {n} "
                                         f"(at most {most}): lower pad, or use padding_mode = \"zeros\" or "
                                         "\"replicate\"")
        return tuple(self.out_extent(i, n) for i, n in enumerate(spatial))

    def kernel_mask(self, device=None) -> torch.Tensor:
        """Boolean kernel box marking the taps (all True for a cuboid)."""
        import torch

        if self.taps is None:
            return torch.ones(self.kernel, dtype=torch.bool, device=device)
        mask = torch.zeros(self.kernel, dtype=torch.bool, device=device)
        for t in self.tap_positions():
            mask[t] = True
        return mask

    def offsets(self, device=None) -> torch.Tensor:
        """LongTensor [p, rank]: dilated tap offsets from the window start, in conv weight flatten order."""
        import torch

        taps = torch.tensor(self.tap_positions(), dtype=torch.long, device=device).reshape(-1, self.rank)
        return taps * torch.tensor(self.dilation, dtype=torch.long, device=device)

    def structure_args(self, spatial: tuple[int, ...], device=None) -> dict:
        """Keyword arguments of the ``rpn2c.functional.structure`` patch builders for this geometry."""
        return {"extent": spatial, "offsets": self.offsets(device), "stride": self.stride,
                "pad_before": self.pad_before, "out_counts": self.out_spatial(spatial), "mode": self.padding_mode,
                "row_shift": self.row_shift, "layer_shift": self.layer_shift, "lattice": self.lattice}

    def reach(self, spatial: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
        """Per axis the kernel-box positions ``[lo, hi]`` of the taps that land inside the grid for some patch: tap
        ``j`` (offset ``j·d``) of a window starting at ``u`` reads ``u + j·d``, so ``j`` is kept when
        ``−u_max <= j·d <= L − 1 − u_min`` (:func:`rpn2c.functional.structure.reachable_offsets`); ``lo > hi``
        when no tap does."""
        span = structure.origin_span(spatial, self.stride, self.pad_before, self.out_spatial(spatial),
                                     self.row_shift, self.layer_shift, self.lattice)
        return tuple((max(0, -(-lo // d)), min(k - 1, hi // d))
                     for (lo, hi), k, d in zip(structure.reachable_offsets(spatial, span), self.kernel, self.dilation))

    def cut(self, spatial: tuple[int, ...]) -> Geometry:
        """This geometry cut to the taps that land inside the grid for some patch (:meth:`reach`; at least one): the
        kernel box shrunk to ``[lo, hi]`` per axis, the windows' starts moved by ``lo·d`` (``pad_before − lo·d``,
        which is negative where the first window starts inside the grid), so every kept tap reads the cell it read
        and the patches are the same. Under zero padding every other tap reads the fill value in every patch, so a
        reduction whose neutral element that value is gives the same result without them. Itself when nothing is
        cut (and for the padding modes that map every tap into the grid)."""
        if self.padding_mode != "zeros":
            return self
        box = self.reach(spatial)
        taps = None
        if self.taps is not None:
            kept = [t for t in self.taps if all(lo <= v <= hi for v, (lo, hi) in zip(t, box))]
            if len(kept) == len(self.taps):
                return self
            if not kept:  # no tap ever lands in the grid: keep the first (every patch reads only the fill)
                kept, box = [self.taps[0]], tuple((v, v) for v in self.taps[0])
            taps = tuple(tuple(v - lo for v, (lo, _) in zip(t, box)) for t in kept)
        elif all(lo == 0 and hi == k - 1 for (lo, hi), k in zip(box, self.kernel)):
            return self
        else:
            box = tuple((lo, hi) if lo <= hi else (0, 0) for lo, hi in box)
        kernel = tuple(hi - lo + 1 for lo, hi in box)
        before = tuple(b - lo * d for b, (lo, _), d in zip(self.pad_before, box, self.dilation))
        after = tuple(a - (k - 1 - hi) * d for a, (_, hi), k, d in zip(self.pad_after, box, self.kernel, self.dilation))
        return replace(self, kernel=kernel, pad_before=before, pad_after=after, taps=taps)

    def patch_index(self, spatial: tuple[int, ...], device=None) -> torch.Tensor:
        """LongTensor [P, p]: flat (row-major) source position of every tap of every patch, -1 outside the grid.

        Circular/reflect/replicate padding map outside taps back into the grid like ``torch.nn.functional.pad``.
        """
        return structure.patch_index(**self.structure_args(spatial, device))


def ceil_extension(geo: Geometry, spatial) -> tuple[int, ...]:
    """Cells of padding past ``pad_after`` that torch's ``ceil_mode`` adds per axis: the window count is
    ``ceil((L + pb + pa − d(k−1) − 1)/s) + 1``, less one when that last window would start at or past ``L + pb``
    (in the right padding); the extension makes the floor rule of :class:`Geometry` give that count."""
    extra = []
    for n, k, s, d, pb, pa in zip(spatial, geo.kernel, geo.stride, geo.dilation, geo.pad_before, geo.pad_after):
        span = d * (k - 1) + 1
        num = n + pb + pa - span
        out = -(-num // s) + 1  # a window longer than the padded axis by less than a stride still counts once
        if out < 1:
            extra.append(0)  # the window does not fit: Geometry.out_extent says so
            continue
        if (out - 1) * s >= n + pb:
            out -= 1
        extra.append(max(0, (out - 1) * s + span - (n + pb + pa)))
    return tuple(extra)


def index_elements(geo: Geometry, spatial: tuple[Dim, ...], taps: int) -> tuple[Dim, Dim]:
    """``(built, literal)`` float32 elements of the (patch, tap) index of ``taps`` taps per patch: what building it
    makes (``[P, p, rank]`` int64 positions, the flat index, its validity mask: at most ``(2·rank + 6)·P·p``) and
    the reference lowering's padding matrix ``[N + 1, P·p]`` (eq 67); symbolic where the grid is."""
    entries = numel((*geo.out_spatial(spatial), taps))
    return dim_mul(2 * geo.rank + 6, entries), dim_mul(dim_add(numel(spatial), 1), entries)


def pad_pairs(geo: Geometry) -> list[int]:
    """``F.pad`` argument for the geometry's padding (last axis first; a negative pad crops)."""
    pads: list[int] = []
    for b, a in zip(reversed(geo.pad_before), reversed(geo.pad_after)):
        pads += [b, a]
    return pads


def pool_plan(geo: Geometry, spatial: tuple[int, ...], ignore: bool, ceil_mode: bool):
    """``(geometry, grid, prepad, ignore)`` a pooling runs with: torch's ``ceil_mode`` adds partial last windows
    (:func:`ceil_extension`) whose taps past the padded grid are skipped; with zero padding read as 0 the grid is
    padded explicitly first (``prepad``, ``F.pad`` pairs), so that every out-of-grid tap left is one past the padded
    grid and is skipped."""
    extra = ceil_extension(geo, spatial) if ceil_mode else (0,) * geo.rank
    prepad: list[int] = []
    if any(extra):
        if not ignore and (any(geo.pad_before) or any(geo.pad_after)):
            prepad = pad_pairs(geo)
            spatial = tuple(n + b + a for n, b, a in zip(spatial, geo.pad_before, geo.pad_after))
            geo = replace(geo, pad_before=(0,) * geo.rank, pad_after=(0,) * geo.rank)
        geo = replace(geo, pad_after=tuple(a + e for a, e in zip(geo.pad_after, extra)))
        ignore = True
    return geo, tuple(spatial), prepad, ignore and geo.padding_mode == "zeros"


def native_pooling(geo: Geometry, metric: str) -> bool:
    """Whether a patch compression is a native pooling kernel: zero padding, rank 1-3, max/min over full boxes
    (max_pool), or sum/mean over any patch mask (a depthwise convolution)."""
    return (geo.padding_mode == "zeros" and 1 <= geo.rank <= 3 and not geo.staggered
            and (metric in ("sum", "mean") or (metric in ("max", "min") and geo.taps is None)))


def positive_per_axis(v: IntOrList) -> IntOrList:
    """Validator of a per-axis size: one int or a non-empty list, every value >= 1."""
    vals = [v] if isinstance(v, int) else v
    if not vals or any(x < 1 for x in vals):
        raise ValueError("must be >= 1")
    return v


def _per_axis(value: IntOrList, rank: int, what: str) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * rank
    if len(value) != rank:
        raise ShapeRuleError(f"{what} has {len(value)} values but the grid has {rank} spatial axes")
    return tuple(value)


class PatchHP(HP):
    """Conv-style patch hyper-parameters (kernel size, stride, padding, dilation, padding mode)."""

    size: IntOrList
    stride: IntOrList = 1
    pad: Union[int, list[int], Literal["same", "valid"]] = 0
    pad_after: IntOrList | None = None
    dilation: IntOrList = 1
    padding_mode: Literal["zeros", "circular", "reflect", "replicate"] = "zeros"

    @field_validator("size", "stride", "dilation")
    @classmethod
    def _positive(cls, v):
        return positive_per_axis(v)

    @field_validator("pad", "pad_after")
    @classmethod
    def _non_negative(cls, v):
        vals = [v] if isinstance(v, int) else (v if isinstance(v, list) else [])
        if any(x < 0 for x in vals):
            raise ValueError("must be >= 0")
        return v

    def geometry(self, rank: int, taps=None) -> Geometry:
        k = _per_axis(self.size, rank, "size")
        s = _per_axis(self.stride, rank, "stride")
        d = _per_axis(self.dilation, rank, "dilation")
        if self.pad == "valid":
            pb = (0,) * rank
            pa = pb
        elif self.pad == "same":
            if any(x != 1 for x in s):
                raise ShapeRuleError("pad = \"same\" needs stride 1 (as in torch)")
            total = tuple(di * (ki - 1) for ki, di in zip(k, d))
            pb = tuple(t // 2 for t in total)
            pa = tuple(t - b for t, b in zip(total, pb))
        else:
            pb = _per_axis(self.pad, rank, "pad")
            pa = pb
        if self.pad_after is not None:
            pa = _per_axis(self.pad_after, rank, "pad_after")
        return Geometry(k, s, d, pb, pa, self.padding_mode, taps)


class CentredPatchHP(HP):
    """The paper's centred cuboid patch: half-extents ``(p, p')`` per axis and centre distance ``stride``."""

    half: IntOrList = 1
    half_after: IntOrList | None = None
    stride: IntOrList = 1

    def geometry(self, rank: int, taps=None) -> Geometry:
        pb = _per_axis(self.half, rank, "half")
        pa = _per_axis(self.half_after, rank, "half_after") if self.half_after is not None else pb
        k = tuple(b + a + 1 for b, a in zip(pb, pa))
        return Geometry(k, _per_axis(self.stride, rank, "stride"), (1,) * rank, pb, pa, "zeros", taps)
