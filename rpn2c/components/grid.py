"""Grid patch geometry shared by grid interdependence (convolution) and patch compression (pooling).

A patch along one spatial axis is described in conv terms: ``kernel`` k taps spaced ``dilation`` d apart, windows
``stride`` s apart, ``pad_before``/``pad_after`` cells of padding. Window i starts at ``i*s - pad_before`` and the
number of windows is ``floor((L + pb + pa - d(k-1) - 1)/s) + 1``. The paper's centred patch (p, p') with centre
distance s is ``k = p+p'+1, pb = p, pa = p'``, which gives its ``ceil(L/s)`` patches (semantics.md).
Cylinder/sphere patches use a subset of the kernel box (``taps``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal, Union

import torch
from pydantic import field_validator

from rpn2c.components.base import ShapeRuleError
from rpn2c.components.registry import HP
from rpn2c.ir.types import Dim

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
        k, s, d = self.kernel[axis], self.stride[axis], self.dilation[axis]
        pb, pa = self.pad_before[axis], self.pad_after[axis]
        if isinstance(length, int):
            n = (length + pb + pa - d * (k - 1) - 1) // s + 1
            if n < 1:
                raise ShapeRuleError(
                    f"a patch of extent {d * (k - 1) + 1} does not fit an axis of length {length} "
                    f"with padding ({pb}, {pa})")
            return n
        return f"({length}+{pb + pa - d * (k - 1) - 1})//{s}+1" if s > 1 else f"{length}{pb + pa - d * (k - 1):+d}"

    def out_spatial(self, spatial: tuple[Dim, ...]) -> tuple[Dim, ...]:
        if len(spatial) != self.rank:
            raise ShapeRuleError(f"a {self.rank}-D patch cannot slide over a {len(spatial)}-D grid")
        return tuple(self.out_extent(i, n) for i, n in enumerate(spatial))

    def kernel_mask(self, device=None) -> torch.Tensor:
        """Boolean kernel box marking the taps (all True for a cuboid)."""
        mask = torch.zeros(self.kernel, dtype=torch.bool, device=device)
        for t in self.tap_positions():
            mask[t] = True
        return mask

    def patch_index(self, spatial: tuple[int, ...], device=None) -> torch.Tensor:
        """LongTensor [P, p]: flat (row-major) source position of every tap of every patch, -1 outside the grid.

        Circular/reflect/replicate padding map outside taps back into the grid like ``torch.nn.functional.pad``.
        """
        outs = self.out_spatial(spatial)
        taps = torch.tensor(self.tap_positions(), dtype=torch.long, device=device).reshape(-1, self.rank)
        centers = torch.cartesian_prod(*(torch.arange(o, device=device) for o in outs)).reshape(-1, self.rank)
        stride = torch.tensor(self.stride, device=device)
        dil = torch.tensor(self.dilation, device=device)
        pb = torch.tensor(self.pad_before, device=device)
        coords = (centers * stride - pb)[:, None, :] + (taps * dil)[None, :, :]  # [P, p, rank]
        size = torch.tensor(spatial, device=device)
        if self.padding_mode == "circular":
            coords = coords % size
        elif self.padding_mode == "replicate":
            coords = torch.minimum(torch.clamp(coords, min=0), size - 1)
        elif self.padding_mode == "reflect":
            period = 2 * (size - 1)
            c = coords.abs() % torch.clamp(period, min=1)
            coords = torch.where(c >= size, period - c, c)
        inside = ((coords >= 0) & (coords < size)).all(-1)
        flat = torch.zeros(coords.shape[:2], dtype=torch.long, device=device)
        for ax in range(self.rank):
            flat = flat * spatial[ax] + coords[..., ax]
        return torch.where(inside, flat, torch.full_like(flat, -1))


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
        vals = [v] if isinstance(v, int) else v
        if not vals or any(x < 1 for x in vals):
            raise ValueError("must be >= 1")
        return v

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
        if self.padding_mode != "zeros" and any(b != a for b, a in zip(pb, pa)) and self.padding_mode == "reflect":
            pass  # reflect with asymmetric padding is fine for index maps
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
