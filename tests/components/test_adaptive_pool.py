"""κ adaptive_pool (torch's adaptive bins: unequal, overlapping) and ceil_mode patch pooling: both lowerings equal
torch's pooling in float64 (outputs and input gradients) in 1-D, 2-D and 3-D; shape rules, schema and errors."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from rpn2c.components.base import ShapeRuleError
from rpn2c.components.registry import REGISTRY
from rpn2c.functional import compression as FC
from rpn2c.lower.literal_forms import literal

F64 = torch.float64
ADAPTIVE = {("mean", 1): F.adaptive_avg_pool1d, ("mean", 2): F.adaptive_avg_pool2d, ("mean", 3): F.adaptive_avg_pool3d,
            ("max", 1): F.adaptive_max_pool1d, ("max", 2): F.adaptive_max_pool2d, ("max", 3): F.adaptive_max_pool3d}


def kappa(name, **hp):
    entry = REGISTRY["compression"][name]
    return entry.cls(entry.schema(**hp))


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def assert_equals_torch(name, feat, want_fn, hp, seed=0, native=False):
    """Both lowerings (and the native ``pool`` kernel op where asked) equal ``want_fn``: outputs, input grads."""
    x = rand(2, *feat, seed=seed).requires_grad_()
    want = want_fn(x)
    w = rand(*want.shape, seed=seed + 1)
    (g_want,) = torch.autograd.grad((want * w).sum(), x)
    k = kappa(name, **hp)
    assert k.features_out(tuple(feat)) == tuple(want.shape[1:])
    assert k.count(tuple(feat)) == 0
    mods = [k.build(tuple(feat)).to(F64), literal(k.build(tuple(feat))).to(F64)]  # default, reference
    runs = [m.forward for m in mods] + ([mods[0].pool] if native else [])
    for run in runs:
        got = run(x)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        (g,) = torch.autograd.grad((got * w).sum(), x)
        torch.testing.assert_close(g, g_want, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------------ adaptive_pool
@pytest.mark.parametrize("spatial, size", [
    ((10,), [7]), ((5,), [8]), ((6,), [3]), ((10, 10), [7, 7]), ((6, 4), [2, 3]), ((5, 7), [3, 4]), ((7, 7), [1, 1]),
    ((5, 4, 6), [2, 3, 4]), ((3, 3, 3), [2, 2, 2]),
])
@pytest.mark.parametrize("metric", ["mean", "max"])
def test_adaptive_pool_equals_torch(spatial, size, metric):
    fn = ADAPTIVE[metric, len(spatial)]
    assert_equals_torch("adaptive_pool", (3, *spatial), lambda x: fn(x, size), {"size": size, "metric": metric})


def test_adaptive_pool_one_size_for_every_axis_and_shape_rules():
    k = kappa("adaptive_pool", size=3)
    assert k.features_out((2, 10, 7)) == (2, 3, 3)
    assert k.hp.metric == "mean"
    with pytest.raises(ShapeRuleError, match="2 values but the grid has 3"):
        kappa("adaptive_pool", size=[2, 2]).features_out((2, 4, 4, 4))
    with pytest.raises(ShapeRuleError, match="flat features"):
        k.features_out((8,))
    with pytest.raises(ShapeRuleError, match="not 4-D"):
        k.features_out((1, 2, 2, 2, 2))
    with pytest.raises(ValidationError):
        kappa("adaptive_pool", size=0)
    with pytest.raises(ValidationError):
        kappa("adaptive_pool", size=2, metric="median")


def test_adaptive_bins_and_pooling_matrix():
    assert FC.adaptive_bins(10, 7) == [(0, 2), (1, 3), (2, 5), (4, 6), (5, 8), (7, 9), (8, 10)]
    assert FC.adaptive_bins(3, 5) == [(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)]
    index = FC.adaptive_bin_index((2, 3), (1, 2))
    assert index.tolist() == [[0, 1, 3, 4], [1, 2, 4, 5]]
    p = FC.adaptive_pool_matrix((5,), (3,), dtype=F64)
    x = rand(4, 5)
    torch.testing.assert_close(x @ p, F.adaptive_avg_pool1d(x.unsqueeze(1), 3).squeeze(1))
    torch.testing.assert_close(p.sum(0), torch.ones(3, dtype=F64))


@pytest.mark.parametrize("metric", ["mean", "max"])
def test_adaptive_pool_gradcheck(metric):
    x = rand(1, 2, 5, 4).requires_grad_()
    for reference in (False, True):
        mod = kappa("adaptive_pool", size=[3, 3], metric=metric).build((2, 5, 4)).to(F64)
        mod = literal(mod) if reference else mod
        assert torch.autograd.gradcheck(mod, (x,), eps=1e-6, atol=1e-5)


# ------------------------------------------------------------------------------------------------ ceil_mode
def _cases():
    for rank, (n, k, s, p, d) in itertools.product((1, 2, 3), [(5, 2, 2, 0, 1), (6, 3, 2, 1, 1), (8, 3, 3, 1, 1),
                                                              (6, 2, 3, 1, 1), (8, 3, 2, 1, 2), (7, 3, 2, 0, 1)]):
        yield rank, (n,) + tuple(range(n - 1, n - rank, -1))[: rank - 1], k, s, p, d


@pytest.mark.parametrize("rank, spatial, k, s, p, d", list(_cases()))
def test_ceil_mode_max_equals_torch(rank, spatial, k, s, p, d):
    pool = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[rank - 1]
    assert_equals_torch("patch_max", (2, *spatial), lambda x: pool(x, k, s, p, d, ceil_mode=True),
                        {"size": k, "stride": s, "pad": p, "dilation": d, "ceil_mode": True}, native=True)


@pytest.mark.parametrize("outside", ["zero", "ignore"])
@pytest.mark.parametrize("rank, spatial, k, s, p, d", [c for c in _cases() if c[-1] == 1])
def test_ceil_mode_mean_equals_torch_divisor(rank, spatial, k, s, p, d, outside):
    """outside = "zero" is count_include_pad=True (divisor: taps inside the padded grid), "ignore" False."""
    pool = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[rank - 1]
    assert_equals_torch("patch_mean", (2, *spatial),
                        lambda x: pool(x, k, s, p, ceil_mode=True, count_include_pad=outside == "zero"),
                        {"size": k, "stride": s, "pad": p, "ceil_mode": True, "outside": outside}, native=True)


def test_ceil_mode_other_metrics_and_errors():
    x = rand(1, 2, 5, 5)
    y = literal(kappa("patch_pool", metric="sum", size=2, ceil_mode=True).build((2, 5, 5))).to(F64)(x)
    torch.testing.assert_close(y, F.avg_pool2d(x, 2, ceil_mode=True, divisor_override=1))
    with pytest.raises(ShapeRuleError, match="cannot skip"):
        kappa("patch_pool", metric="median", size=2, ceil_mode=True).features_out((2, 5, 5))
    assert kappa("patch_pool", metric="median", size=2, ceil_mode=True).features_out((2, 6, 6)) == (2, 3, 3)
    with pytest.raises(ShapeRuleError, match="padding_mode"):
        kappa("patch_max", size=2, ceil_mode=True, padding_mode="reflect").features_out((2, 5, 5))
