"""Compression κ entries: gradients, pooling against torch and naive loops (cuboid, cylinder, sphere, every metric),
stateful modules (train/eval, state_dict), reproducible sampling and manifold embeddings, pinned errata."""

from __future__ import annotations

import contextlib
import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import rpn2c
from rpn2c.components.registry import REGISTRY, all_entries
from rpn2c.functional import structure
from rpn2c.lower.literal_forms import literal

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - comes with scikit-learn
    def threadpool_limits(n):
        return contextlib.nullcontext()

F64 = torch.float64


def kappa(name: str, **hp):
    entry = REGISTRY["compression"][name]
    return entry.cls(entry.schema(**hp))


def build(name: str, feat, reference: bool = False, **hp):
    """The default form, or with ``reference`` the oracle's literal form (``lower/literal_forms.py``)."""
    module = kappa(name, **hp).build(tuple(feat)).to(F64)
    return literal(module) if reference else module


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


# ------------------------------------------------------------------------------------------------ gradients
GRAD = [
    ("identity", {}, (4,)), ("reciprocal", {"eps": 0.01}, (4,)), ("linear", {"c": 0.5}, (4,)),
    ("linear", {"C": [[1.0], [0.5], [0.0], [2.0]]}, (4,)),
    *[("metric", {"metric": m}, (4,)) for m in ("max", "min", "sum", "mean", "prod", "median", "median_low", "l1",
                                                "l2", "linf", "lp", "entropy", "variance", "std", "skewness")],
    *[(f"{m}_compression", {}, (4,)) for m in ("max", "min", "sum", "mean", "prod", "median")],
    ("variance_threshold", {"k": 2}, (4,)), ("feature_clustering", {"k": 2, "output": "centroid"}, (4,)),
    ("feature_selection", {"k": 3}, (4,)), ("pca", {"k": 2, "center": True}, (4,)),
    ("random_projection", {"k": 3}, (4,)), ("dimension_reduction", {"k": 2}, (4,)),
    ("naive_probabilistic_compression", {"k": 2, "dist": "cauchy"}, (4,)),
    ("naive_uniform_probabilistic_compression", {"k": 3}, (4,)),
    ("naive_gamma_probabilistic_compression", {"k": 2, "output": "log_prob"}, (4,)),
    *[(f"naive_{d}_probabilistic_compression", {"k": 2}, (4,)) for d in ("normal", "cauchy", "chi2", "exponential",
                                                                         "laplace")],
    ("combinatorial_compression", {"d": 2, "k": 2}, (4,)),
    ("combinatorial_probabilistic_compression", {"d": 2, "k": 2}, (4,)),
    ("extended_compression", {"parts": ["max_compression", "pca(k = 2)"]}, (4,)),
    ("nested_compression", {"parts": ["random_projection(k = 3)", "metric(metric = \"l2\")"]}, (4,)),
    ("flatten", {}, (4,)),
    *[("patch_pool", {"metric": m, "size": 2, "stride": 1, "pad": 1}, (1, 3, 3))
      for m in ("max", "prod", "median", "lp", "std", "entropy")],
    ("patch_max", {"size": 2}, (2, 4, 4)), ("patch_min", {"size": 3, "pad": 1}, (1, 3, 4)),
    ("patch_mean", {"size": 3, "stride": 2, "pad": 1, "outside": "ignore"}, (1, 4, 4)),
    ("patch_mean", {"size": 3, "stride": 2, "pad": 1, "ceil_mode": True}, (1, 6, 5)),
    ("adaptive_pool", {"size": [3, 2]}, (1, 5, 3)), ("adaptive_pool", {"size": 3, "metric": "max"}, (1, 4, 5)),
    ("cuboid_pool", {"metric": "std", "half": 1}, (1, 4, 3)), ("cuboid_max", {"half": 1}, (1, 4, 3)),
    ("cuboid_min", {"half": 1, "stride": 2}, (1, 4, 3)), ("cuboid_mean", {"half": [0, 1]}, (1, 4, 3)),
    ("cylinder_pool", {"metric": "l1", "radius": 1}, (1, 4, 4)), ("cylinder_max", {"radius": 1}, (1, 4, 4)),
    ("cylinder_min", {"radius": 1, "depth": 1}, (1, 3, 3, 3)), ("cylinder_mean", {"radius": 2}, (1, 4, 4)),
    ("sphere_pool", {"metric": "median", "radius": 1}, (1, 3, 3, 3)), ("sphere_max", {"radius": 1}, (1, 3, 3, 3)),
    ("sphere_min", {"radius": 1}, (1, 3, 3, 3)), ("sphere_mean", {"radius": 1, "stride": 2}, (1, 3, 3, 3)),
]
NOT_DIFFERENTIABLE = {"manifold", "isomap", "lle", "mds", "spectral_embedding", "tsne"}  # fit on the batch, detached


def test_gradient_cases_cover_every_differentiable_compression():
    names = {e.name for e in all_entries() if e.family == "compression"}
    assert {n for n, _, _ in GRAD} == names - NOT_DIFFERENTIABLE


def _reset_sampler(mod):
    for m in mod.modules():
        if hasattr(m, "_calls"):
            m._calls = 0


@pytest.mark.parametrize("name,hp,feat", GRAD, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(GRAD)])
def test_gradcheck(name, hp, feat):
    grid = len(feat) > 1
    x = rand(1 if grid else 2, *feat, seed=len(name)).requires_grad_()
    if name in ("reciprocal", "metric") and hp.get("metric") in (None, "prod"):
        x = (x.detach().abs() + 0.5).requires_grad_()
    for reference in (False, True):
        mod = build(name, feat, reference, **hp).eval()

        def f(t):
            _reset_sampler(mod)  # the samplers draw a fresh index set per call; gradcheck needs one function
            return mod(t, grid=True) if grid else mod(t)

        assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-5, fast_mode=grid)


# ------------------------------------------------------------------------------------------------ metric compression
def test_metric_compressions_closed_forms_and_the_median_erratum():
    x = torch.tensor([[3.0, -1.0, 4.0, 1.5]], dtype=F64)
    a = x.numpy()[0]
    want = {"max_compression": a.max(), "min_compression": a.min(), "sum_compression": a.sum(),
            "mean_compression": a.mean(), "prod_compression": a.prod(), "median_compression": np.median(a)}
    for name, v in want.items():
        assert build(name, (4,))(x).item() == pytest.approx(v)
    # the toolkit's median_compression is torch.median, the LOWER median (1.5 here, numpy says 2.25)
    assert build("median_compression", (4,))(x).item() == pytest.approx(2.25)
    assert build("metric", (4,), metric="median_low")(x).item() == pytest.approx(torch.median(x).item())
    assert build("metric", (4,), metric="lp", p=3.0)(x).item() == pytest.approx((np.abs(a) ** 3).sum() ** (1 / 3))
    assert build("metric", (4,), metric="var", correction=1)(x).item() == pytest.approx(np.var(a, ddof=1))
    assert build("metric", (4,), metric="standard_deviation")(x).item() == pytest.approx(np.std(a))
    assert kappa("metric", metric="average").hp.metric == "mean"
    assert kappa("metric").flat_out(7) == 1


# ------------------------------------------------------------------------------------------------ pooling
def _both(name, feat, x, **hp):
    fast, ref = build(name, feat, False, **hp), build(name, feat, True, **hp)
    y = fast(x, grid=True)
    torch.testing.assert_close(y, ref(x, grid=True), rtol=1e-12, atol=1e-12)
    assert y.shape[1:] == kappa(name, **hp).features_out(feat)
    return y


def test_patch_pooling_equals_torch_pooling():
    x = rand(2, 3, 7, 6)
    torch.testing.assert_close(_both("patch_max", (3, 7, 6), x, size=2), F.max_pool2d(x, 2))
    torch.testing.assert_close(_both("patch_max", (3, 7, 6), x, size=3, stride=2, pad=1),
                               F.max_pool2d(x, 3, 2, 1))  # out-of-grid taps ignored, as MaxPool
    torch.testing.assert_close(_both("patch_mean", (3, 7, 6), x, size=3, stride=2, pad=1),
                               F.avg_pool2d(x, 3, 2, 1, count_include_pad=True))
    torch.testing.assert_close(_both("patch_mean", (3, 7, 6), x, size=3, stride=2, pad=1, outside="ignore"),
                               F.avg_pool2d(x, 3, 2, 1, count_include_pad=False))
    torch.testing.assert_close(_both("patch_min", (3, 7, 6), x, size=2, stride=1), -F.max_pool2d(-x, 2, 1))
    torch.testing.assert_close(_both("patch_pool", (3, 7, 6), x, metric="l2", size=2),
                               F.lp_pool2d(x, 2, 2))
    x3 = rand(1, 2, 4, 5, 3)
    torch.testing.assert_close(_both("patch_max", (2, 4, 5, 3), x3, size=2, dilation=[1, 2, 1], stride=1),
                               F.max_pool3d(x3, 2, 1, 0, dilation=(1, 2, 1)))
    x1 = rand(2, 2, 9)
    torch.testing.assert_close(_both("patch_mean", (2, 9), x1, size=3), F.avg_pool1d(x1, 3))


def test_zero_padding_of_the_toolkit_vs_maxpool():
    """Catalog §3.6: tinyBIG's pooling reads 0 at out-of-grid taps; MaxPool ignores them (outside = "zero"/"ignore")."""
    x = -1.0 - rand(1, 1, 4, 4).abs()  # all negative: a zero pad wins every boundary max
    zero = _both("patch_max", (1, 4, 4), x, size=3, stride=1, pad=1, outside="zero")
    ign = _both("patch_max", (1, 4, 4), x, size=3, stride=1, pad=1)
    assert (zero[0, 0, 0, :] == 0).all() and (ign < 0).all()
    torch.testing.assert_close(ign, F.max_pool2d(x, 3, 1, 1))
    torch.testing.assert_close(zero, F.max_pool2d(F.pad(x, (1, 1, 1, 1)), 3, 1))


def _naive_pool(x, offsets, stride, metric, outside_value=0.0):
    """Python loop over centres c = q·stride and taps c + offset (zero padding): the oracle for eq (90)."""
    b, c = x.shape[:2]
    spatial = x.shape[2:]
    counts = [-(-L // s) for L, s in zip(spatial, stride)]
    out = torch.empty(b, c, *counts, dtype=x.dtype)
    for q in itertools.product(*(range(n) for n in counts)):
        vals = []
        for off in offsets.tolist():
            pos = [qi * s + o for qi, s, o in zip(q, stride, off)]
            inside = all(0 <= p < L for p, L in zip(pos, spatial))
            vals.append(x[(slice(None), slice(None), *pos)] if inside else torch.full((b, c), outside_value,
                                                                                        dtype=x.dtype))
        v = torch.stack(vals, -1)
        out[(slice(None), slice(None), *q)] = {"max": lambda t: t.amax(-1), "min": lambda t: t.amin(-1),
                                               "mean": lambda t: t.mean(-1), "sum": lambda t: t.sum(-1),
                                               "median": lambda t: t.median(-1).values if t.shape[-1] % 2 else
                                               t.sort(-1).values[..., t.shape[-1] // 2 - 1:t.shape[-1] // 2 + 1]
                                               .mean(-1), "l1": lambda t: t.abs().sum(-1)}[metric](v)
    return out


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(["cylinder", "sphere", "cuboid"]),
       st.sampled_from(["max", "min", "mean", "sum", "median", "l1"]),
       st.integers(1, 2), st.integers(1, 3), st.integers(0, 2))
def test_cylinder_sphere_cuboid_pooling_equal_a_naive_loop(shape, metric, r, stride, seed):
    spatial = (4, 5) if shape != "sphere" else (3, 4, 4)
    x = rand(2, 2, *spatial, seed=seed)
    if shape == "cylinder":
        offsets, hp = structure.cylinder_offsets(r, ndim=2), {"radius": r, "stride": stride}
    elif shape == "sphere":
        offsets, hp = structure.sphere_offsets(1), {"radius": 1, "stride": stride}
    else:
        offsets, hp = structure.cuboid_offsets((r, r - 1), (r - 1, r)), {"half": [r, r - 1], "half_after": [r - 1, r],
                                                                          "stride": stride}
    y = _both(f"{shape}_pool", (2, *spatial), x, metric=metric, outside="zero", **hp)
    torch.testing.assert_close(y, _naive_pool(x, offsets, (stride,) * len(spatial), metric))
    if metric in ("max", "min", "mean"):  # the fixed-metric entries; "auto" ignores out-of-grid taps for max/min
        fill = {"max": -math.inf, "min": math.inf, "mean": 0.0}[metric]
        z = _both(f"{shape}_{metric}", (2, *spatial), x, **hp)
        torch.testing.assert_close(z, _naive_pool(x, offsets, (stride,) * len(spatial), metric, fill))


def test_patch_counts_are_ceil_extent_over_stride_and_shapes_have_the_paper_sizes():
    """Erratum §8.5: 1 + floor(L/s) centres is off by one; ceil(L/s) (conv, toolkit, paper's own counts)."""
    assert kappa("cuboid_max", half=1, stride=2).features_out((3, 7, 8)) == (3, 4, 4)
    assert kappa("cylinder_mean", radius=2, stride=3).features_out((1, 9, 9)) == (1, 3, 3)
    for r, p in [(1, 5), (2, 13), (3, 29), (4, 49)]:
        assert kappa("cylinder_pool", radius=r).geometry(2).patch_size == p
    for r, p in [(1, 7), (2, 33)]:
        assert kappa("sphere_pool", radius=r).geometry(3).patch_size == p
    assert kappa("cuboid_pool", half=1).geometry(2).patch_size == 9


def test_cylinder_depth_bounds_are_both_honoured():
    """Catalog §3.2: tinyBIG's cylinder iterates k ∈ [−p'_d, p'_d] (ignores p_d); here depth ∈ [−p_d, p'_d]."""
    geo = kappa("cylinder_pool", radius=1, depth=2, depth_after=0).geometry(3)
    assert geo.patch_size == 5 * 3
    depths = {t[2] - geo.pad_before[2] for t in geo.tap_positions()}
    assert depths == {-2, -1, 0}
    x = rand(1, 1, 3, 3, 4)
    y = _both("cylinder_pool", (1, 3, 3, 4), x, metric="sum", radius=1, depth=2, depth_after=0, outside="zero")
    torch.testing.assert_close(y, _naive_pool(x, structure.cylinder_offsets(1, 2, 0), (1, 1, 1), "sum"))


def test_packing_strategies_and_conventions():
    """Erratum §8.7: cylinder denser_hexagonal d_h is (√2/2) r in the paper, (√3/2) r in the toolkit."""
    paper = kappa("cylinder_max", radius=4, packing="denser_hexagonal").geometry(2).stride
    toolkit = kappa("cylinder_max", radius=4, packing="denser_hexagonal", convention="toolkit").geometry(2).stride
    assert paper == (2, 4) and toolkit == (3, 4)
    assert kappa("cuboid_mean", half=1, packing="complete_square").geometry(2).stride == (2, 2)
    assert kappa("sphere_max", radius=2, packing="sparse_simple_cubic").geometry(3).stride == (4, 4, 4)
    assert kappa("sphere_max", radius=2, packing="sparse_hexagonal").geometry(3).stride == (4, 4, 3)
    assert kappa("sphere_max", radius=2, packing="sparse_hexagonal", convention="toolkit").geometry(3).stride == \
        (4, 4, 4)
    with pytest.raises(Exception, match="unknown cylinder packing"):
        kappa("cylinder_max", packing="densest_square")


def test_patch_pool_padding_modes_match_padded_torch_pooling():
    x = rand(1, 2, 5, 6)
    for mode, pad_mode in (("circular", "circular"), ("replicate", "replicate"), ("reflect", "reflect")):
        y = _both("patch_pool", (2, 5, 6), x, metric="max", size=3, pad=1, stride=1, padding_mode=mode)
        torch.testing.assert_close(y, F.max_pool2d(F.pad(x, (1, 1, 1, 1), mode=pad_mode), 3, 1))


# ------------------------------------------------------------------------------------------------ stateful
def _compress(kappa_text: str, m: int = 4):
    return f"model c {{ input x: vector[B, {m}]  y = compress(x) {{ kappa = {kappa_text} }}  return y }}"


def test_variance_threshold_learns_on_training_batches_and_round_trips():
    model = rpn2c.compile(_compress("variance_threshold(k = 2)")).double()
    scale = torch.tensor([0.1, 3.0, 0.2, 2.0], dtype=F64)
    x = rand(64, 4) * scale
    model.train()
    model(x=x)
    model.eval()
    y = model(x=x)
    torch.testing.assert_close(y, x[:, [1, 3]])  # top-2 running variance, ascending index order
    fresh = rpn2c.compile(_compress("variance_threshold(k = 2)")).double().eval()
    torch.testing.assert_close(fresh(x=x), x[:, :2])  # before any update: the first k
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(fresh(x=x), y)
    model.eval()
    model(x=rand(64, 4) * scale.flip(0))  # eval: frozen
    torch.testing.assert_close(model(x=x), y)


def test_pca_matches_svd_and_random_projection_survives_state_dict():
    x = rand(50, 4) @ torch.tensor([[3.0, 0, 0, 0], [1.0, 1.0, 0, 0], [0, 0, 0.3, 0], [0, 0.5, 0, 0.1]], dtype=F64)
    model = rpn2c.compile(_compress("pca(k = 2)")).double()
    model.train()
    model(x=x)
    model.eval()
    y = model(x=x)
    _, _, vt = torch.linalg.svd(x, full_matrices=False)
    v = vt[:2].T
    v = v * torch.sign(v.gather(0, v.abs().argmax(0, keepdim=True)))
    torch.testing.assert_close(y, x @ v)
    rp = rpn2c.compile(_compress("random_projection(k = 3, seed = 7)")).double()
    sd = rp.state_dict()
    key = next(k for k in sd if k.endswith(".R"))
    assert sd[key].shape == (4, 3)
    other = rpn2c.compile(_compress("random_projection(k = 3, seed = 8)")).double()
    assert not torch.equal(other.state_dict()[key], sd[key])  # a different seed draws another matrix ...
    other.load_state_dict(sd)  # ... and loading restores ours (tinyBIG bug §8.9 regenerates its random matrices)
    x = rand(5, 4)
    torch.testing.assert_close(other(x=x), x @ sd[key])
    torch.testing.assert_close(rp(x=x), x @ sd[key])


def test_samplers_are_reproducible_and_count_their_calls():
    x = rand(6, 5)
    for text in ("naive_probabilistic_compression(k = 3, dist = \"normal\", seed = 3)",
                 "naive_laplace_probabilistic_compression(k = 2, output = \"log_prob\")",
                 "combinatorial_compression(d = 2, k = 2, seed = 1)",
                 "combinatorial_probabilistic_compression(d = 2, k = 3, per_size = false)"):
        a, b = rpn2c.compile(_compress(text, 5)).double(), rpn2c.compile(_compress(text, 5)).double()
        ya1, ya2 = a(x=x), a(x=x)
        torch.testing.assert_close(b(x=x), ya1)
        assert not torch.equal(ya1, ya2) or "per_size" in text  # call 2 draws another sample
        c = rpn2c.compile(_compress(text, 5)).double()
        c.load_state_dict(a.state_dict())  # the call counter is a buffer
        torch.testing.assert_close(c(x=x), a(x=x))
    sel = rpn2c.compile(_compress("naive_uniform_probabilistic_compression(k = 2)", 5)).double()(x=x)
    assert all(set(row.tolist()) <= set(xr.tolist()) for row, xr in zip(sel, x))  # values of x, no transform
    assert kappa("combinatorial_compression", d=2, k=2).flat_out(5) == 2 * 3
    assert kappa("combinatorial_probabilistic_compression", d=3, k=2).flat_out(5) == 6
    fixed = rpn2c.compile(_compress("naive_probabilistic_compression(k = 2, fixed = true)", 5)).double()
    torch.testing.assert_close(fixed(x=x), fixed(x=x))  # one index set for every call


def test_manifold_embeddings_are_deterministic_fit_on_the_batch():
    pytest.importorskip("sklearn")
    x = rand(12, 4)
    with threadpool_limits(1):
        for text in ("isomap(k = 2, n_neighbors = 4)", "spectral_embedding(k = 2, n_neighbors = 4)",
                     "mds(k = 2, max_iter = 300)", "lle(k = 2, n_neighbors = 5)",
                     "tsne(k = 2, perplexity = 3.0, max_iter = 250)"):
            a, b = rpn2c.compile(_compress(text)).double(), rpn2c.compile(_compress(text)).double()
            ya = a(x=x)
            assert ya.shape == (12, 2) and not ya.requires_grad
            torch.testing.assert_close(b(x=x), ya, rtol=0, atol=0)
            torch.testing.assert_close(a(x=x[:6]), b(x=x[:6]), rtol=0, atol=0)
            assert not torch.allclose(a(x=x)[:6], a(x=x[:6]))  # transductive: the rows embed together
    for e in all_entries():
        if e.name in NOT_DIFFERENTIABLE:
            assert "fit on the batch" in (e.cls.__doc__ or "").lower(), e.name
