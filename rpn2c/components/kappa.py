"""Data transformation κ: the expansions and compressions of the compiler's core set."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from rpn2c.components.base import Kappa, ShapeRuleError
from rpn2c.components.grid import Geometry, PatchHP
from rpn2c.components.registry import HP, register


@register
class Identity(Kappa):
    """κ(x) = x (D = m)."""

    name, family = "identity", "expansion"
    elementwise = True

    def basis(self, x):
        return x.unsqueeze(-1)

    def value_at_zero(self):
        return torch.zeros(1, dtype=torch.float64)


class _DegreeHP(HP):
    d: int = Field(2, ge=1, le=16, description="highest order")


@register
class Taylor(Kappa):
    """Taylor expansion κ(x) = [x, x⊗x, ..., x^{⊗d}] (Kronecker powers), D = Σ_{k=1..d} m^k."""

    name, family = "taylor", "expansion"

    class HP(_DegreeHP):
        pass

    def flat_out(self, m):
        return sum(m**k for k in range(1, self.hp.d + 1))

    def module(self, feat):
        return _Taylor(self.hp.d)


class _Taylor(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.d = d

    def forward(self, x):
        terms, power = [x], x
        for _ in range(self.d - 1):
            power = (power.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2)
            terms.append(power)
        return torch.cat(terms, dim=-1)


@register
class Chebyshev(Kappa):
    """Chebyshev (first kind) κ(x) = [T_1(x), ..., T_d(x)], T_{n+1} = 2x T_n − T_{n−1}; D = m·d."""

    name, family = "chebyshev", "expansion"
    elementwise = True

    class HP(_DegreeHP):
        pass

    def degree(self):
        return self.hp.d

    def basis(self, x):
        terms = [torch.ones_like(x), x]
        for _ in range(self.hp.d - 1):
            terms.append(2 * x * terms[-1] - terms[-2])
        return torch.stack(terms[1:], dim=-1)

    def value_at_zero(self):
        return self.basis(torch.zeros(1, dtype=torch.float64))[0]


@register
class BSpline(Kappa):
    """KAN-style B-spline basis κ(x) = [B_{j,k}(x)] on a uniform grid over [low, high]; D = m·(grid + order)."""

    name, family = "bspline", "expansion"
    elementwise = True

    class HP(HP):
        grid: int = Field(5, ge=1, le=256, description="number of grid intervals")
        order: int = Field(3, ge=0, le=8)
        low: float = -1.0
        high: float = 1.0

    def degree(self):
        return self.hp.grid + self.hp.order

    def knots(self, like):
        h = (self.hp.high - self.hp.low) / self.hp.grid
        idx = torch.arange(-self.hp.order, self.hp.grid + self.hp.order + 1, dtype=like.dtype, device=like.device)
        return self.hp.low + idx * h

    def basis(self, x):
        t = self.knots(x)
        xe = x.unsqueeze(-1)
        b = ((xe >= t[:-1]) & (xe < t[1:])).to(x.dtype)
        for k in range(1, self.hp.order + 1):
            left = (xe - t[: -(k + 1)]) / (t[k:-1] - t[: -(k + 1)]) * b[..., :-1]
            right = (t[k + 1:] - xe) / (t[k + 1:] - t[1:-k]) * b[..., 1:]
            b = left + right
        return b

    def value_at_zero(self):
        return self.basis(torch.zeros(1, dtype=torch.float64))[0]


# ------------------------------------------------------------------------------------------------ compression
class _PoolHP(PatchHP):
    stride: int | list[int] | None = None  # default: the patch size (non-overlapping)


class _PatchPool(Kappa):
    """Shared by patch pooling compressions: κ maps a grid [C, *S] to [C, *S'] (one value per patch)."""

    family = "compression"
    grid_only = True
    HP = _PoolHP
    reduce: str = ""

    def geometry(self, rank: int) -> Geometry:
        hp = self.hp
        stride = hp.size if hp.stride is None else hp.stride
        return PatchHP(size=hp.size, stride=stride, pad=hp.pad, pad_after=hp.pad_after, dilation=hp.dilation,
                       padding_mode=hp.padding_mode).geometry(rank)

    def features_out(self, feat):
        if len(feat) < 2:
            raise ShapeRuleError(f"{self.name} pools over a grid; the input has flat features {feat}")
        return (feat[0], *self.geometry(len(feat) - 1).out_spatial(tuple(feat[1:])))

    def build(self, feat, reference=False):
        geo = self.geometry(len(feat) - 1)
        return _PatchPoolModule(geo, tuple(feat[1:]), self.reduce, reference)


@register
class PatchMax(_PatchPool):
    """Patch max pooling: κ(x)_q = max_{j ∈ patch(q)} x_j (out-of-grid taps are ignored, as MaxPool)."""

    name = "patch_max"
    aliases = ("max_pool",)
    reduce = "max"


@register
class PatchMean(_PatchPool):
    """Patch mean pooling: κ(x)_q = (1/p) Σ_{j ∈ patch(q)} x_j (zero padding counted, as AvgPool)."""

    name = "patch_mean"
    aliases = ("mean_pool", "avg_pool")
    reduce = "mean"


class _PatchPoolModule(nn.Module):
    def __init__(self, geo: Geometry, spatial, reduce: str, reference: bool):
        super().__init__()
        self.geo, self.spatial, self.reduce, self.reference = geo, spatial, reduce, reference
        # the gather index serves the reference and every pooling the native kernels cannot express
        self.register_buffer("index", geo.patch_index(spatial), persistent=False)

    def forward(self, x, grid=True):
        geo = self.geo
        if not self.reference and geo.padding_mode == "zeros" and geo.rank <= 3 and _symmetric(geo):
            pool = {1: (F.max_pool1d, F.avg_pool1d), 2: (F.max_pool2d, F.avg_pool2d),
                    3: (F.max_pool3d, F.avg_pool3d)}[geo.rank][0 if self.reduce == "max" else 1]
            if self.reduce == "max":
                return pool(x, geo.kernel, geo.stride, geo.pad_before, geo.dilation)
            if all(d == 1 for d in geo.dilation):
                return pool(x, geo.kernel, geo.stride, geo.pad_before, count_include_pad=True)
        return _pool_by_gather(x, self.index, self.reduce, geo)

    def extra_repr(self):
        return f"{self.reduce}, kernel={self.geo.kernel}, stride={self.geo.stride}, reference={self.reference}"


def _symmetric(geo: Geometry) -> bool:
    return geo.pad_before == geo.pad_after and all(2 * p <= k for p, k in zip(geo.pad_before, geo.kernel))


def _pool_by_gather(x, index, reduce, geo):
    """Literal form: gather each patch (x A with one-hot A), reduce over the p taps."""
    b, c = x.shape[:2]
    flat = x.reshape(b, c, -1)
    valid = index >= 0
    taps = flat[:, :, index.clamp(min=0)]  # [B, C, P, p]
    if reduce == "max":
        out = taps.masked_fill(~valid, float("-inf")).amax(-1)
    else:
        out = taps.masked_fill(~valid, 0.0).sum(-1) / index.shape[1]
    spatial_out = geo.out_spatial(tuple(x.shape[2:]))
    return out.reshape(b, c, *spatial_out)


@register
class Flatten(Kappa):
    """Flatten compression: a grid [C, *S] becomes a flat vector of C·ΠS features (channel-major)."""

    name, family = "flatten", "compression"

    def features_out(self, feat):
        n = 1
        for f in feat:
            n *= f
        return (n,)

    def build(self, feat, reference=False):
        return _FlattenModule()


class _FlattenModule(nn.Module):
    def forward(self, x, grid=False):
        return x.flatten(1) if grid else x

