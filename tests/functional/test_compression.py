"""Tests for rpn2c.functional.compression: metrics vs numpy/scipy, random matrices, stateful modules."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import scipy.stats as st
import torch
from hypothesis import given, settings
from hypothesis import strategies as hs
from hypothesis.extra import numpy as hnp

from rpn2c.functional import compression as C
from rpn2c.functional import expansion as E

F64 = torch.float64


def t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


# ----------------------------------------------------------------------------------------------------------------------
# (a) metrics
# ----------------------------------------------------------------------------------------------------------------------

NP_REF = {
    "max": lambda a: a.max(-1),
    "min": lambda a: a.min(-1),
    "sum": lambda a: a.sum(-1),
    "mean": lambda a: a.mean(-1),
    "prod": lambda a: a.prod(-1),
    "median": lambda a: np.median(a, -1),
    "median_low": lambda a: np.sort(a, -1)[..., (a.shape[-1] - 1) // 2],
    "l1": lambda a: np.abs(a).sum(-1),
    "l2": lambda a: np.sqrt((a * a).sum(-1)),
    "linf": lambda a: np.abs(a).max(-1),
    "variance": lambda a: np.var(a, -1),
    "std": lambda a: np.std(a, -1),
    "skewness": lambda a: st.skew(a, -1),
    "entropy": lambda a: st.entropy(np.abs(a) + 1e-12, axis=-1),
}

finite = hs.floats(-5, 5, allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=25, deadline=None)
@given(a=hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=2, min_side=2, max_side=7), elements=finite))
def test_metrics_match_numpy_scipy(a):
    a = a + np.linspace(0, 1e-3, a.shape[-1])   # keep rows non-constant for skewness
    x = t(a)
    for name, ref in NP_REF.items():
        np.testing.assert_allclose(C.reduce(x, name).numpy(), ref(a), rtol=1e-9, atol=1e-9, err_msg=name)
    np.testing.assert_allclose(C.reduce(x, "lp", p=3.0).numpy(), (np.abs(a) ** 3).sum(-1) ** (1 / 3), rtol=1e-9)
    np.testing.assert_allclose(C.reduce(x, "variance", correction=1).numpy(), np.var(a, -1, ddof=1), rtol=1e-9)


def test_positive_means_and_mode():
    a = np.array([[1.0, 2.0, 4.0, 8.0], [0.5, 3.0, 3.0, 9.0]])
    x = t(a)
    np.testing.assert_allclose(C.reduce(x, "geometric_mean").numpy(), st.gmean(a, axis=-1))
    np.testing.assert_allclose(C.reduce(x, "harmonic_mean").numpy(), st.hmean(a, axis=-1))
    assert C.reduce(t([0.0, 2.0]), "harmonic_mean").item() == 0.0
    assert C.reduce(t([0.0, 2.0]), "geometric_mean").item() == 0.0
    ints = np.array([[3, 1, 3, 1, 2], [5, 5, 4, 4, 4], [7, 6, 8, 9, 10]], dtype=np.float64)
    want = st.mode(ints, axis=-1, keepdims=False).mode          # scipy also breaks ties towards the smallest value
    np.testing.assert_array_equal(C.reduce(t(ints), "mode").numpy(), want)
    np.testing.assert_array_equal(want, [1, 4, 6])


def test_reduce_axis_keepdim_aliases_and_edge_cases():
    x = torch.randn(4, 5, 3, dtype=F64)
    torch.testing.assert_close(C.reduce(x, "median", dim=1), t(np.median(x.numpy(), 1)))
    assert C.reduce(x, "max", dim=0, keepdim=True).shape == (1, 5, 3)
    torch.testing.assert_close(C.reduce(x, "var"), C.reduce(x, "variance"))
    assert C.reduce(torch.zeros(3, 4, dtype=F64), "entropy").allclose(t([math.log(4)] * 3))
    assert C.reduce(torch.ones(2, 4, dtype=F64), "skewness").eq(0).all()
    with pytest.raises(ValueError):
        C.reduce(x, "nope")
    assert C.metric_compression(x, metric="sum").shape == (4, 5, 1)


def test_patch_reduce_pads_with_zero():
    x = t([[-1.0, -2.0, 5.0, 3.0]])
    idx = torch.tensor([[0, 1, -1], [1, 2, 3], [-1, -1, 3]])
    torch.testing.assert_close(C.patch_reduce(x, idx, "max"), t([[0.0, 5.0, 3.0]]))
    torch.testing.assert_close(C.patch_reduce(x, idx, "mean"), t([[-1.0, 2.0, 1.0]]))
    torch.testing.assert_close(C.patch_reduce(x, idx, "min", pad_value=-math.inf), t([[-math.inf, -2.0, -math.inf]]))
    # non-overlapping windows == max_pool1d
    y = torch.randn(2, 12, dtype=F64)
    win = torch.arange(12).reshape(4, 3)
    torch.testing.assert_close(C.patch_reduce(y, win, "max"), torch.nn.functional.max_pool1d(y.unsqueeze(1), 3)[:, 0])


def test_metric_gradients():
    x = (torch.rand(2, 5, dtype=F64) + 0.2).requires_grad_(True)
    for name, spec in C.METRICS.items():
        if spec.differentiable and name not in ("max", "min", "median", "median_low", "linf"):
            assert torch.autograd.gradcheck(lambda v, n=name: C.reduce(v, n), (x,)), name


# ----------------------------------------------------------------------------------------------------------------------
# (b) stateless compressions and random matrices
# ----------------------------------------------------------------------------------------------------------------------


def test_registry_dims():
    x = torch.randn(3, 6, dtype=F64)
    R = C.gaussian_random_matrix(6, 2, dtype=F64)
    cases = {"identity": {}, "reciprocal": {}, "linear": {"C": torch.randn(6, 4, dtype=F64)},
             "metric": {"metric": "l2"},
             "random_projection": {"R": R}, "max_compression": {}, "median_compression": {},
             "extended": {"parts": [("max_compression", {}), ("random_projection", {"R": R})]},
             "nested": {"parts": [("random_projection", {"R": R}), ("metric", {"metric": "sum"})]}}
    for name, spec in C.COMPRESSIONS.items():
        hp = cases.get(name, {})
        y = spec.fn(x, **hp)
        assert y.shape == (3, spec.dim(6, **hp)), name
    torch.testing.assert_close(C.COMPRESSIONS["extended"].fn(x, **cases["extended"]),
                               torch.cat([x.amax(-1, keepdim=True), x @ R], -1))
    torch.testing.assert_close(C.COMPRESSIONS["nested"].fn(x, **cases["nested"]), (x @ R).sum(-1, keepdim=True))


def test_random_matrices_reproducible_and_distributed():
    g1 = C.gaussian_random_matrix(200, 50, seed=3, dtype=F64)
    torch.testing.assert_close(g1, C.gaussian_random_matrix(200, 50, seed=3, dtype=F64))
    assert not torch.equal(g1, C.gaussian_random_matrix(200, 50, seed=4, dtype=F64))
    assert abs(g1.var().item() * 50 - 1.0) < 0.05 and abs(g1.mean().item()) < 0.01
    s = 1 / 3
    sp = C.sparse_random_matrix(300, 40, density=s, seed=1, dtype=F64)
    v = math.sqrt(1 / (s * 40))
    vals = set(np.round(np.unique(sp.numpy()), 12))
    assert vals <= {0.0, round(v, 12), round(-v, 12)}
    nz = (sp != 0).double().mean().item()
    assert abs(nz - s) < 0.02
    assert abs((sp > 0).double().mean().item() - s / 2) < 0.02
    # Johnson–Lindenstrauss: squared norms preserved in expectation (E|xR|² = |x|²)
    x = torch.randn(500, 300, dtype=F64)
    R = C.gaussian_random_matrix(300, 400, seed=0, dtype=F64)
    ratio = ((x @ R).pow(2).sum(-1) / x.pow(2).sum(-1)).mean().item()
    assert abs(ratio - 1) < 0.05
    assert C.sparse_random_matrix(100, 5).ne(0).double().mean().item() == pytest.approx(0.1, abs=0.05)  # 1/sqrt(m)


# ----------------------------------------------------------------------------------------------------------------------
# (c) stateful compressions
# ----------------------------------------------------------------------------------------------------------------------


def _roundtrip(module: torch.nn.Module, fresh: torch.nn.Module, x: torch.Tensor) -> None:
    fresh.load_state_dict(module.state_dict())
    module.eval()
    fresh.eval()
    torch.testing.assert_close(fresh(x), module(x))


def test_incremental_variance_threshold():
    torch.manual_seed(0)
    scales = t([0.1, 3.0, 0.5, 2.0, 1.0, 0.2])
    batches = [torch.randn(32, 6, dtype=F64) * scales for _ in range(4)]
    mod = C.IncrementalVarianceThreshold(6, 3, max_updates=3).double()
    for b in batches:
        out = mod(b)
    assert mod.frozen and int(mod.n_updates) == 3
    want = torch.stack([b.var(0, correction=0) for b in batches[:3]]).mean(0)   # eq (97): mean of batch variances
    torch.testing.assert_close(mod.mean_variance, want)
    assert mod.selected.tolist() == sorted(torch.topk(want, 3).indices.tolist()) == [1, 3, 4]
    torch.testing.assert_close(out, batches[-1][:, [1, 3, 4]])
    _roundtrip(mod, C.IncrementalVarianceThreshold(6, 3, max_updates=3).double(), batches[0])
    fresh = C.IncrementalVarianceThreshold(6, 3, max_updates=3).double()
    fresh.load_state_dict(mod.state_dict())
    assert fresh.frozen                                    # counter restored, so it stays frozen in training too
    # eval mode does not update
    m2 = C.IncrementalVarianceThreshold(6, 2).double().eval()
    m2(batches[0])
    assert int(m2.n_updates) == 0 and m2.selected.tolist() == [0, 1]


def _grouped_data(n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, 3, generator=g, dtype=F64)                  # independent zero-mean group signals
    groups = [[0, 3, 5], [1, 4], [2, 6, 7]]
    scale = {0: 1.0, 3: 2.0, 5: 0.5, 1: 0.7, 4: 1.5, 2: 3.0, 6: 1.0, 7: 0.3}
    X = torch.empty(n, 8, dtype=F64)
    for gi, cols in enumerate(groups):
        for c in cols:
            X[:, c] = scale[c] * (base[:, gi] + 0.05 * torch.randn(n, generator=g, dtype=F64))
    return X, groups, scale


def test_incremental_feature_clustering_selects_top_variance_per_cluster():
    X, groups, scale = _grouped_data()
    mod = C.IncrementalFeatureClustering(8, 3).double()
    for chunk in X.split(50):
        mod(chunk)
    assert int(mod.n_updates) == 4
    labels = mod.labels.tolist()
    for cols in groups:
        assert len({labels[c] for c in cols}) == 1
    assert len(set(labels)) == 3
    top = sorted(max(cols, key=lambda c: scale[c]) for cols in groups)
    assert mod.selected.tolist() == top == [2, 3, 4]
    mod.eval()
    torch.testing.assert_close(mod(X), X[:, top])
    cen = C.IncrementalFeatureClustering(8, 3, output="centroid").double()
    for chunk in X.split(50):
        cen(chunk)
    cen.eval()
    y = cen(X)
    want = torch.stack([X[:, [c for c in range(8) if labels[c] == j]].mean(-1) for j in range(3)], -1)
    torch.testing.assert_close(y, want)
    _roundtrip(mod, C.IncrementalFeatureClustering(8, 3).double(), X[:10])


def test_incremental_pca_matches_batch_svd():
    torch.manual_seed(1)
    A = torch.randn(6, 6, dtype=F64)
    batches = [torch.randn(40, 6, dtype=F64) @ A + 0.5 for _ in range(3)]
    Xall = torch.cat(batches)
    for center in (False, True):
        mod = C.IncrementalPCA(6, 3, center=center).double()
        for b in batches:
            mod(b)
        Z = Xall - Xall.mean(0) if center else Xall
        _, svals, Vh = torch.linalg.svd(Z, full_matrices=False)
        V = Vh[:3].T
        # same subspace and same vectors up to sign
        torch.testing.assert_close(mod.components.abs(), V.abs(), atol=1e-8, rtol=1e-8)
        torch.testing.assert_close(mod.components.T @ mod.components, torch.eye(3, dtype=F64))
        torch.testing.assert_close(mod.explained_variance, svals[:3] ** 2 / Xall.shape[0])
        pivot = mod.components.abs().argmax(0)
        assert (mod.components[pivot, torch.arange(3)] > 0).all()
        mod.eval()
        y = mod(Xall)
        torch.testing.assert_close(y, (Z if center else Xall) @ mod.components)
        _roundtrip(mod, C.IncrementalPCA(6, 3, center=center).double(), batches[0])
    frozen = C.IncrementalPCA(6, 2, max_updates=1).double()
    frozen(batches[0])
    comp = frozen.components.clone()
    frozen(batches[1])
    torch.testing.assert_close(frozen.components, comp)


def test_random_projection_module_roundtrip():
    mod = C.RandomProjection(10, 4, kind="sparse", density=0.5, seed=11)
    x = torch.randn(3, 10)
    torch.testing.assert_close(mod(x), x @ C.sparse_random_matrix(10, 4, density=0.5, seed=11))
    other = C.RandomProjection(10, 4, kind="sparse", density=0.5, seed=12)
    assert not torch.equal(other.R, mod.R)
    _roundtrip(mod, other, x)


def test_naive_probabilistic_sampling_deterministic_and_sorted():
    m, d = 7, 3
    coded = torch.arange(m, dtype=F64).expand(50, m)               # value == attribute index
    a = C.NaiveProbabilisticCompression(m, d, seed=5)
    b = C.NaiveProbabilisticCompression(m, d, seed=5)
    c = C.NaiveProbabilisticCompression(m, d, seed=6)
    outs_a = [a(coded) for _ in range(3)]
    outs_b = [b(coded) for _ in range(3)]
    for ya, yb in zip(outs_a, outs_b):
        torch.testing.assert_close(ya, yb)
    assert not torch.equal(outs_a[0], c(coded))
    assert not torch.equal(outs_a[0], outs_a[1])                       # fresh draw per call
    y = outs_a[0]
    assert (y[:, 1:] > y[:, :-1]).all()                              # ascending, no repeats
    # state_dict carries the call counter: a restored module continues the same stream
    fresh = C.NaiveProbabilisticCompression(m, d, seed=5)
    fresh.load_state_dict(a.state_dict())
    torch.testing.assert_close(fresh(coded), a(coded))


def test_naive_probabilistic_uniform_frequencies():
    m, d, n = 5, 2, 4000
    coded = torch.arange(m, dtype=F64).expand(n, m)
    y = C.NaiveProbabilisticCompression(m, d, seed=1)(coded).long()
    freq = torch.bincount(y.flatten(), minlength=m).double() / n
    torch.testing.assert_close(freq, torch.full((m,), d / m, dtype=F64), atol=0.03, rtol=0)


def test_naive_probabilistic_weighting_and_log_prob():
    x = torch.full((200, 6), 5.0, dtype=F64)
    x[:, 2] = 0.0                                                    # by far the most likely under N(0, 1)
    mod = C.NaiveProbabilisticCompression(6, 1, dist="normal", normalize=False, output="value", seed=0)
    assert (mod(x) == 0.0).all()
    lp = C.NaiveProbabilisticCompression(6, 1, dist="normal", normalize=False, output="log_prob", seed=0)(x)
    torch.testing.assert_close(lp, torch.full_like(lp, -0.5 * math.log(2 * math.pi)))
    z = torch.randn(4, 6, dtype=F64)
    norm = C.NaiveProbabilisticCompression(6, 6, dist="laplace", output="normalized", seed=0)(z)
    torch.testing.assert_close(norm, E.positive_squash(z))             # d = m keeps all, sorted: f(x) itself
    wr = C.NaiveProbabilisticCompression(3, 8, dist="normal", with_replacement=True, seed=0)
    assert wr(torch.randn(5, 3, dtype=F64)).shape == (5, 8)


def test_naive_probabilistic_fixed_is_a_gather():
    mod = C.NaiveProbabilisticCompression(9, 4, fixed=True, seed=3)
    x = torch.randn(6, 9)
    idx = mod.fixed_index
    assert idx.tolist() == sorted(set(idx.tolist())) and len(idx) == 4
    torch.testing.assert_close(mod(x), x[:, idx])
    torch.testing.assert_close(mod(x), mod(x))
    _roundtrip(mod, C.NaiveProbabilisticCompression(9, 4, fixed=True, seed=99), x)
    with pytest.raises(ValueError):
        C.NaiveProbabilisticCompression(9, 4, dist="normal", fixed=True)


def test_combinatorial_probabilistic_compression():
    m, k, d = 5, 3, 2
    x = torch.randn(7, m, dtype=F64)
    mod = C.CombinatorialProbabilisticCompression(m, k=k, d=d, seed=2)
    y = mod(x)
    assert y.shape == (7, mod.out_dim) == (7, d * k)
    u = E.positive_squash(x)
    for r in range(1, k + 1):
        allp = E.combinatorial_normal(u, d=r)[:, -math.comb(m, r):]        # the size-r block
        block = y[:, (r - 1) * d: r * d]
        for i in range(7):
            for v in block[i]:
                assert torch.isclose(allp[i], v).any()
    vals = C.CombinatorialProbabilisticCompression(m, k=2, d=2, output="value", seed=2)
    coded = torch.arange(m, dtype=F64).expand(4, m)
    yv = vals(coded)
    assert yv.shape == (4, vals.out_dim) == (4, 2 * 1 + 2 * 2)
    pairs = yv[:, 2:].reshape(4, 2, 2)
    assert (pairs[..., 0] < pairs[..., 1]).all()                       # valid lexicographic 2-subsets
    pooled = C.CombinatorialProbabilisticCompression(m, k=2, d=4, per_size=False, seed=0)
    assert pooled(x).shape == (7, 4)
    twin = C.CombinatorialProbabilisticCompression(m, k=k, d=d, seed=2)
    torch.testing.assert_close(twin(x), y)
    with pytest.raises(ValueError):
        C.CombinatorialProbabilisticCompression(m, k=2, d=2, per_size=False, output="value")


def test_manifold_compression_optional():
    pytest.importorskip("sklearn")
    x = torch.randn(30, 6, dtype=F64, requires_grad=True)
    y = C.ManifoldCompression(2, method="isomap", n_neighbors=5)(x)
    assert y.shape == (30, 2) and not y.requires_grad and y.dtype == F64


def test_manifold_compression_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.manifold", None)
    with pytest.raises(ImportError, match="scikit-learn"):
        C.ManifoldCompression(2)
