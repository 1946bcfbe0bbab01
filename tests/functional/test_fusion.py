"""Tests for rpn2c.functional.fusion: each fusion against numpy, list vs stacked inputs, shape rules, gradchecks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rpn2c.functional import fusion as Fu

SETTINGS = settings(max_examples=25, deadline=None)
F64 = torch.float64


def _inputs(seed: int, k: int, shape: tuple[int, ...]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=F64) for _ in range(k)]


cases = st.tuples(
    st.integers(1, 5),  # k
    st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),  # common shape
    st.integers(0, 2**31 - 1),
)

NUMPY_REFS = {
    "sum": (Fu.sum_fusion, lambda a: a.sum(0)),
    "mean": (Fu.mean_fusion, lambda a: a.mean(0)),
    "max": (Fu.max_fusion, lambda a: a.max(0)),
    "min": (Fu.min_fusion, lambda a: a.min(0)),
    "prod": (Fu.prod_fusion, lambda a: a.prod(0)),
    "hadamard": (Fu.hadamard_fusion, lambda a: a.prod(0)),
    "median": (Fu.median_fusion, lambda a: np.median(a, axis=0)),
    "l1": (lambda xs: Fu.pnorm_fusion(xs, p=1), lambda a: np.abs(a).sum(0)),
    "l2": (lambda xs: Fu.pnorm_fusion(xs, p=2), lambda a: np.sqrt((a**2).sum(0))),
    "l3": (lambda xs: Fu.pnorm_fusion(xs, p=3), lambda a: (np.abs(a) ** 3).sum(0) ** (1 / 3)),
    "linf": (lambda xs: Fu.pnorm_fusion(xs, p=float("inf")), lambda a: np.abs(a).max(0)),
}


@pytest.mark.parametrize("name", sorted(NUMPY_REFS))
@SETTINGS
@given(c=cases)
def test_elementwise_fusion_matches_numpy(name, c):
    k, shape, seed = c
    fn, ref = NUMPY_REFS[name]
    xs = _inputs(seed, k, shape)
    expected = ref(np.stack([x.numpy() for x in xs]))
    out_list = fn(xs)
    out_stacked = fn(torch.stack(xs))
    assert out_list.shape == shape
    np.testing.assert_allclose(out_list.numpy(), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out_stacked, out_list)


@SETTINGS
@given(c=cases)
def test_median_lower_mode_is_torch_median(c):
    k, shape, seed = c
    X = torch.stack(_inputs(seed, k, shape))
    torch.testing.assert_close(Fu.median_fusion(X, mode="lower"), X.median(dim=0).values)
    if k % 2 == 0:  # even k: the two modes differ (mean of the middle pair vs the lower one)
        assert not torch.allclose(Fu.median_fusion(X), Fu.median_fusion(X, mode="lower"))


@SETTINGS
@given(c=cases)
def test_weighted_fusion(c):
    k, shape, seed = c
    xs = _inputs(seed, k, shape)
    w = torch.linspace(-1.0, 2.0, k, dtype=F64)
    expected = sum(w[i] * xs[i] for i in range(k))
    torch.testing.assert_close(Fu.weighted_fusion(xs, w), expected)
    torch.testing.assert_close(Fu.weighted_fusion(xs, [1.0] * k), Fu.sum_fusion(xs))
    torch.testing.assert_close(Fu.weighted_fusion(xs, [1.0 / k] * k), Fu.mean_fusion(xs))
    # per-feature weights [k, n] over the last axis
    wf = torch.randn(k, shape[-1], dtype=F64, generator=torch.Generator().manual_seed(seed))
    expected_f = sum(wf[i] * xs[i] for i in range(k))
    torch.testing.assert_close(Fu.weighted_fusion(xs, wf), expected_f)


@SETTINGS
@given(k=st.integers(1, 4), lead=st.lists(st.integers(1, 3), max_size=2).map(tuple),
       dims=st.lists(st.integers(1, 4), min_size=4, max_size=4), n=st.integers(1, 4), r=st.integers(1, 3),
       seed=st.integers(0, 2**31 - 1))
def test_concat_fusions(k, lead, dims, n, r, seed):
    dims = dims[:k]
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(*lead, d, generator=g, dtype=F64) for d in dims]
    Z = Fu.concat_fusion(xs)
    assert Z.shape == (*lead, Fu.concat_dim(dims))
    np.testing.assert_array_equal(Z.numpy(), np.concatenate([x.numpy() for x in xs], axis=-1))
    W = torch.randn(sum(dims), n, generator=g, dtype=F64)
    bias = torch.randn(n, generator=g, dtype=F64)
    torch.testing.assert_close(Fu.concat_linear_fusion(xs, W), Z @ W)
    torch.testing.assert_close(Fu.concat_linear_fusion(xs, W, bias), Z @ W + bias)
    P = torch.randn(sum(dims), r, generator=g, dtype=F64)
    Q = torch.randn(n, r, generator=g, dtype=F64)
    torch.testing.assert_close(Fu.concat_lowrank_fusion(xs, P, Q), Z @ (P @ Q.T))
    assert Fu.concat_linear_fusion(xs, W).shape[-1] == Fu.projection_dim(dims, n=n)


def test_stacked_concat_equals_list_concat():
    xs = _inputs(0, 3, (2, 5, 4))
    torch.testing.assert_close(Fu.concat_fusion(torch.stack(xs)), torch.cat(xs, dim=-1))


def test_shape_rules_and_errors():
    assert Fu.same_shape_dim([4, 4, 4]) == 4
    assert Fu.concat_dim([2, 3, 5]) == 10
    assert Fu.projection_dim([2, 3], n=7) == 7
    with pytest.raises(ValueError, match="equal input dims"):
        Fu.same_shape_dim([4, 5])
    with pytest.raises(ValueError, match="identically shaped"):
        Fu.sum_fusion([torch.zeros(2, 3), torch.zeros(2, 4)])
    with pytest.raises(ValueError, match="except the last axis"):
        Fu.concat_fusion([torch.zeros(2, 3), torch.zeros(3, 3)])
    with pytest.raises(ValueError, match="Σn_i=5 rows"):
        Fu.concat_linear_fusion([torch.zeros(2, 3), torch.zeros(2, 2)], torch.zeros(4, 1))
    with pytest.raises(ValueError, match="leading axis of size k=2"):
        Fu.weighted_fusion([torch.zeros(3), torch.zeros(3)], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="at least one"):
        Fu.mean_fusion([])
    with pytest.raises(ValueError, match="median mode"):
        Fu.median_fusion([torch.zeros(2)], mode="upper")


def test_registry_out_dims_and_param_counts():
    dims = [3, 3, 3]
    xs = _inputs(1, 3, (2, 3))
    hp = {"weighted": {"weights": torch.ones(3, dtype=F64)}}
    for name, spec in Fu.FUSIONS.items():
        if name in ("concat_linear", "concat_lowrank"):
            continue
        out = spec.fn(xs, **hp.get(name, {}))
        assert out.shape[-1] == spec.out_dim(dims), name
    assert Fu.FUSIONS["concat_linear"].num_params([2, 3, 4], n=5) == 9 * 5  # (Σn_i)·n
    assert Fu.FUSIONS["concat_linear"].num_params([2, 3, 4], n=5, bias=True) == 9 * 5 + 5
    assert Fu.FUSIONS["concat_lowrank"].num_params([2, 3, 4], n=5, r=2) == 2 * (9 + 5)  # r(Σn_i + n)
    assert Fu.FUSIONS["weighted"].num_params(dims, learnable=True) == 3
    assert Fu.FUSIONS["mean"].num_params(dims) == 0
    assert Fu.FUSIONS["concat_lowrank"].out_dim([2, 3, 4], n=5) == 5


def test_gradcheck_fusions():
    xs = [x.requires_grad_() for x in _inputs(2, 4, (2, 3))]
    w = torch.randn(4, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: Fu.weighted_fusion(list(a[:4]), a[4]), (*xs, w))
    assert torch.autograd.gradcheck(lambda *a: Fu.median_fusion(list(a)), tuple(xs))
    assert torch.autograd.gradcheck(lambda *a: Fu.pnorm_fusion(list(a), p=3), tuple(xs))
    P = torch.randn(12, 2, dtype=F64, requires_grad=True)
    Q = torch.randn(5, 2, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: Fu.concat_lowrank_fusion(list(a[:4]), a[4], a[5]), (*xs, P, Q))


def test_max_fusion_ties_share_gradient():
    a = torch.ones(3, dtype=F64, requires_grad=True)
    b = torch.ones(3, dtype=F64, requires_grad=True)
    Fu.max_fusion([a, b]).sum().backward()
    torch.testing.assert_close(a.grad, torch.full((3,), 0.5, dtype=F64))
    torch.testing.assert_close(b.grad, torch.full((3,), 0.5, dtype=F64))
