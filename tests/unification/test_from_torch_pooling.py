"""from_torch on pooling geometry beyond kernel = stride: adaptive pooling onto any output size (torch's unequal,
overlapping bins become κ adaptive_pool), and ceil_mode max/avg pooling (a partial last window, its taps past the
padded grid skipped; avg's divisor as torch's, with and without count_include_pad), in 1-D, 2-D and 3-D. Every
conversion equals torch in float64 in both lowerings: outputs, parameter gradients and input gradients."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import rpn2c

from tests.unification.unification_helpers import assert_matches_torch, compile_or_skip, rand

CONV = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
MAX = {1: nn.MaxPool1d, 2: nn.MaxPool2d, 3: nn.MaxPool3d}
AVG = {1: nn.AvgPool1d, 2: nn.AvgPool2d, 3: nn.AvgPool3d}
ADAPTIVE_AVG = {1: nn.AdaptiveAvgPool1d, 2: nn.AdaptiveAvgPool2d, 3: nn.AdaptiveAvgPool3d}
ADAPTIVE_MAX = {1: nn.AdaptiveMaxPool1d, 2: nn.AdaptiveMaxPool2d, 3: nn.AdaptiveMaxPool3d}


def assert_pool_matches_torch(pool, spatial, seed=0):
    """conv -> pool -> flatten equals torch (outputs, parameter gradients, input gradients) in both lowerings."""
    rank = len(spatial)
    torch.manual_seed(seed)
    module = nn.Sequential(CONV[rank](2, 3, 1), pool, nn.Flatten()).double().eval()
    x = rand(2, 2, *spatial, seed=seed)
    spec = assert_matches_torch(module, (x,))
    xr = x.clone().requires_grad_()
    want = module(xr)
    w = rand(*want.shape, seed=seed + 1)
    (grad_want,) = torch.autograd.grad((want * w).sum(), xr)
    for reference in (False, True):
        model = compile_or_skip(spec, reference).double()
        xc = x.clone().requires_grad_()
        (grad,) = torch.autograd.grad((model(xc) * w).sum(), xc)
        torch.testing.assert_close(grad, grad_want, rtol=1e-10, atol=1e-12)
    return spec


@pytest.mark.parametrize("rank, spatial, size", [
    (1, (10,), 7), (1, (5,), 8), (1, (9,), (4,)),
    (2, (10, 10), 7), (2, (6, 4), (2, 3)), (2, (5, 7), (3, None)),
    (3, (5, 4, 6), (2, 3, 4)), (3, (3, 5, 3), 2),
])
@pytest.mark.parametrize("kind", ["avg", "max"])
def test_adaptive_pooling_onto_any_size(rank, spatial, size, kind):
    """Sizes that do not divide the input are κ adaptive_pool: bins [floor(iL/S), ceil((i+1)L/S)) per axis."""
    pool = (ADAPTIVE_AVG if kind == "avg" else ADAPTIVE_MAX)[rank](size)
    spec = assert_pool_matches_torch(pool, spatial)
    assert f'metric = "{"mean" if kind == "avg" else "max"}"' in spec.text
    assert "adaptive_pool(size = " in spec.text


def test_adaptive_pooling_that_divides_stays_a_patch_pooling():
    spec = assert_pool_matches_torch(nn.AdaptiveAvgPool2d((3, 2)), (6, 4))
    assert "patch_mean(size = 2)" in spec.text and "adaptive_pool" not in spec.text


CEIL = [  # (kernel, stride, padding, dilation) that add a partial last window on the given length
    (2, 2, 0, 1, 5), (3, 2, 0, 1, 6), (3, 2, 1, 1, 6), (3, 3, 1, 1, 8), (2, 3, 1, 1, 6), (3, 2, 1, 2, 8),
    (3, 2, 0, 1, 7),  # no partial window: the spec has no ceil_mode
]


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("k, s, p, d, length", CEIL)
def test_max_pool_ceil_mode(rank, k, s, p, d, length):
    spatial = (length,) + tuple(range(length - 1, length - rank, -1))[: rank - 1]
    spec = assert_pool_matches_torch(MAX[rank](k, s, p, dilation=d, ceil_mode=True), spatial)
    adds = any(_windows(n, k, s, p, d, True) != _windows(n, k, s, p, d, False) for n in spatial)
    assert ("ceil_mode = true" in spec.text) == adds


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("k, s, p, d, length", [c for c in CEIL if c[3] == 1])
def test_avg_pool_ceil_mode_and_count_include_pad(rank, k, s, p, d, length, count_include_pad):
    """torch's divisor: the taps inside the padded grid (count_include_pad) or inside the grid, never those past."""
    spatial = (length,) + tuple(range(length - 1, length - rank, -1))[: rank - 1]
    pool = AVG[rank](k, s, p, ceil_mode=True, count_include_pad=count_include_pad)
    spec = assert_pool_matches_torch(pool, spatial)
    assert ('outside = "ignore"' in spec.text) == (not count_include_pad and p > 0)


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_avg_pool_count_include_pad_false_without_ceil_mode(rank):
    assert_pool_matches_torch(AVG[rank](3, 2, 1, count_include_pad=False), (5,) * rank)


def test_refusals_are_located():
    module = nn.Sequential(nn.Conv2d(2, 3, 1), nn.AvgPool2d(2, divisor_override=3)).double()
    with pytest.raises(rpn2c.SpecError, match="divisor_override"):
        rpn2c.from_torch(module, (rand(1, 2, 4, 4),))
    module = nn.Sequential(nn.Conv2d(2, 3, 1), nn.AdaptiveMaxPool2d(3, return_indices=True)).double()
    with pytest.raises(rpn2c.SpecError, match="return_indices"):
        rpn2c.from_torch(module, (rand(1, 2, 5, 5),))


def _windows(n, k, s, p, d, ceil):
    num = n + 2 * p - d * (k - 1) - 1
    if not ceil:
        return num // s + 1
    out = -(-num // s) + 1
    return out - 1 if (out - 1) * s >= n + p else out
