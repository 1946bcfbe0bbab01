"""Every registered κ compiled in a tiny spec, default lowering vs reference lowering (outputs, gradients, counts).

One spec per registry entry (a coverage test keeps the table complete), plus hypothesis draws of elementwise κ under
a grid patch ξ (the convolution path, where zero padding reads κ(0)) and of patch pooling geometries and metrics.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rpn2c
from rpn2c.components.registry import REGISTRY, all_entries
from tests.test_lowering_equivalence import _rand, assert_equivalent

try:  # scikit-learn's OpenMP threads spin badly on a shared 2-core machine: run the manifold κ single-threaded
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - comes with scikit-learn
    def threadpool_limits(n):
        return contextlib.nullcontext()

MANIFOLD = {"manifold", "isomap", "lle", "mds", "spectral_embedding", "tsne"}


def _vector(kappa: str, m: int = 3, out: int = 2, compress: bool = False) -> str:
    body = f"kappa = {kappa}" + ("" if compress else f"  out = {out}")
    return f"model v {{\n  input x: vector[B, {m}]\n  y = {'compress' if compress else 'head'}(x) {{ {body} }}\n" \
           f"  return y\n}}\n"


def _items(kappa: str, n: int = 3, m: int = 3, out: int = 2) -> str:
    return (f"model s {{\n  input x: sequence[B, {n}, {m}]\n  y = head(x) {{ kappa = {kappa}  out = {out} }}\n"
            f"  return y\n}}\n")


def _grid(kappa: str, cin: int = 2, spatial=(4, 5), xi: str = "grid_patch(size = 3, pad = 1)", out: int = 2) -> str:
    dims = ", ".join(map(str, spatial))
    return (f"model g {{\n  input x: grid[B, {cin}, {dims}]\n  y = head(x) {{ xi_attribute = {xi}  kappa = {kappa}"
            f"  out = {out} }}\n  return y\n}}\n")


def _pool(kappa: str, cin: int = 2, spatial=(5, 5)) -> str:
    dims = ", ".join(map(str, spatial))
    return f"model p {{\n  input x: grid[B, {cin}, {dims}]\n  y = compress(x) {{ kappa = {kappa} }}\n  return y\n}}\n"


def _pool_then_head(kappa: str, cin: int = 2, spatial=(5, 5)) -> str:
    dims = ", ".join(map(str, spatial))
    return (f"model p {{\n  input x: grid[B, {cin}, {dims}]\n  p = compress(x) {{ kappa = {kappa} }}\n"
            f"  f = flatten(p)\n  y = head(f) {{ out = 2 }}\n  return y\n}}\n")


# (entry name, spec text, input shape without the batch axis)
EXP = [
    ("identity", _vector("identity"), (3,)),
    ("reciprocal", _vector("reciprocal(eps = 0.01)"), (3,)),
    ("linear", _vector("linear(c = -1.5)"), (3,)),
    ("linear", _vector("linear(C = [[1.0, 2.0], [0.5, 0.0], [1.0, -1.0]])"), (3,)),
    ("taylor", _vector("taylor(d = 3)"), (3,)),
    ("taylor", _items("taylor(d = 2, symmetric = true)"), (3, 3)),
    ("fourier", _vector("fourier(P = 3.0, N = 2)"), (3,)),
    ("trigonometric", _vector('trigonometric(functions = ["cos", "sin"])'), (3,)),
    ("hyperbolic", _vector("hyperbolic"), (3,)),
    ("arc_trigonometric", _vector("arc_trigonometric"), (3,)),
    ("arc_hyperbolic", _vector('arc_hyperbolic(functions = ["atanh"])'), (3,)),
    ("rbf", _vector('rbf(kind = "inverse_quadratic", num_centres = 4, low = -2.0, high = 2.0)'), (3,)),
    ("gaussian_rbf", _vector("gaussian_rbf(epsilon = 2.0, num_centres = 3)"), (3,)),
    ("inverse_quadratic_rbf", _vector("inverse_quadratic_rbf(centres = [-1.0, 0.5])"), (3,)),
    ("naive_probabilistic", _vector('naive_probabilistic(dist = "gamma", params = [2.0, 1.5])'), (3,)),
    *[(f"naive_{d}", _vector(f"naive_{d}"), (3,)) for d in ("normal", "cauchy", "chi2", "gamma", "laplace",
                                                            "exponential")],
    ("probabilistic", _vector('probabilistic(dist = "laplace", params = [[0.0, 1.0], [1.0, 0.5]])'), (3,)),
    *[(f"probabilistic_{d}", _vector(f"probabilistic_{d}"), (3,)) for d in ("normal", "cauchy", "chi2", "gamma",
                                                                            "laplace", "exponential")],
    ("hybrid_probabilistic", _vector("hybrid_probabilistic"), (3,)),
    ("combinatorial", _vector("combinatorial(d = 2)"), (3,)),
    ("combinatorial_normal", _vector("combinatorial_normal(d = 2, rho = 0.3, scale = 2.0)"), (3,)),
    ("bspline", _vector("bspline(grid = 3, order = 2, low = -2.0, high = 2.0)"), (3,)),
    ("chebyshev", _vector("chebyshev(d = 3, kind = 2)"), (3,)),
    ("jacobi", _vector("jacobi(d = 3, alpha = 0.5, beta = 2.0)"), (3,)),
    ("hermite", _vector('hermite(d = 3, kind = "physicist")'), (3,)),
    ("laguerre", _vector("laguerre(d = 3, alpha = 0.5)"), (3,)),
    ("legendre", _vector("legendre(d = 4)"), (3,)),
    ("gegenbauer", _vector("gegenbauer(d = 3, alpha = 1.5)"), (3,)),
    ("bessel", _vector("bessel(d = 3)"), (3,)),
    ("reverse_bessel", _vector("reverse_bessel(d = 3)"), (3,)),
    ("fibonacci", _vector("fibonacci(d = 4)"), (3,)),
    ("lucas", _vector("lucas(d = 3)"), (3,)),
    ("wavelet", _vector('wavelet(mother = "dog", s = 2, t = 2, sigma_2 = 3.0)'), (3,)),
    ("haar_wavelet", _vector("harr_wavelet(t = 2, b = 0.5)"), (3,)),
    ("beta_wavelet", _vector("beta_wavelet(alpha = 2.0, beta = 3.0)"), (3,)),
    ("ricker_wavelet", _vector('ricker(d = 2, order2 = "concat")', m=2), (2,)),
    ("shannon_wavelet", _vector("shannon_wavelet(s = 2)"), (3,)),
    ("meyer_wavelet", _vector("meyer_wavelet(d = 2)", m=2), (2,)),
    ("dog_wavelet", _vector("dog_wavelet(sigma_1 = 0.5)"), (3,)),
    ("extended", _vector('extended(parts = ["chebyshev(d = 2)", "identity"])'), (3,)),
    ("extended", _vector('extended(parts = ["taylor", "fourier(N = 1)"])'), (3,)),
    ("nested", _vector('nested(parts = ["chebyshev(d = 2)", "fourier(N = 1)"])'), (3,)),
    ("nested", _vector('nested(parts = ["pca(k = 2)", "taylor(d = 2)"])'), (3,)),
    ("patch_expansion", _pool_then_head("patch_expansion(size = 2, stride = 2)"), (2, 5, 5)),
    ("cuboid_expansion", _pool_then_head("cuboid_expansion(half = 1, stride = 2)"), (2, 5, 5)),
    ("cylinder_expansion", _pool_then_head("cylinder_expansion(radius = 1, stride = 2)"), (2, 5, 5)),
    ("sphere_expansion", _pool_then_head("sphere_expansion(radius = 1, stride = 2)", spatial=(3, 4, 3)), (2, 3, 4, 3)),
]

COMP = [
    ("identity", _vector("identity_compression", compress=True), (3,)),
    ("reciprocal", _vector("reciprocal_compression", compress=True), (3,)),
    ("linear", _vector("linear_compression(C = [[1.0], [2.0], [3.0]])", compress=True), (3,)),
    ("metric", _vector('metric(metric = "entropy")', m=4, compress=True), (4,)),
    ("metric", _vector('metric(metric = "lp", p = 3.0)', m=4, compress=True), (4,)),
    *[(f"{n}_compression", _vector(f"{n}_compression", m=4, compress=True), (4,))
      for n in ("max", "min", "sum", "mean", "prod", "median")],
    ("variance_threshold", _vector("variance_threshold(k = 2)", compress=True), (3,)),
    ("feature_clustering", _vector('feature_clustering(k = 2, output = "centroid")', compress=True), (3,)),
    ("feature_selection", _vector('feature_selection(n_feature = 2, method = "feature_clustering")', compress=True),
     (3,)),
    ("pca", _vector("pca(k = 2, center = true)", compress=True), (3,)),
    ("random_projection", _vector('random_projection(k = 2, kind = "sparse", seed = 3)', compress=True), (3,)),
    ("dimension_reduction", _vector('dimension_reduction(method = "random_projection", k = 2)', compress=True), (3,)),
    ("manifold", _vector('manifold(method = "smacof", k = 2, max_iter = 250)', compress=True), (3,)),
    ("isomap", _vector("isomap(k = 2, n_neighbors = 3)", compress=True), (3,)),
    ("lle", _vector("lle(k = 1, n_neighbors = 3)", compress=True), (3,)),
    ("mds", _vector("mds(k = 2)", compress=True), (3,)),
    ("spectral_embedding", _vector("spectral_embedding(k = 2, n_neighbors = 3)", compress=True), (3,)),
    ("tsne", _vector("tsne(k = 2, perplexity = 2.0, max_iter = 250)", compress=True), (3,)),
    ("naive_probabilistic_compression",
     _vector('naive_probabilistic_compression(k = 2, dist = "normal", output = "log_prob")', compress=True), (3,)),
    *[(f"naive_{d}_probabilistic_compression", _vector(f"naive_{d}_probabilistic_compression(k = 2)"), (3,))
      for d in ("uniform", "normal", "cauchy", "chi2", "exponential", "gamma", "laplace")],
    ("combinatorial_compression", _vector("combinatorial_compression(d = 2, k = 2)"), (3,)),
    ("combinatorial_probabilistic_compression", _vector("combinatorial_probabilistic_compression(d = 2, k = 2)"),
     (3,)),
    ("extended_compression",
     _vector('extended_compression(parts = ["max_compression", "metric(metric = \\"std\\")"])'), (3,)),
    ("nested_compression", _vector('nested_compression(parts = ["pca(k = 2)", "sum_compression"])'), (3,)),
    ("flatten", _vector("flatten", compress=True), (3,)),  # on a grid: see the flatten() op
    ("patch_pool", _pool('patch_pool(metric = "median", size = 2)'), (2, 5, 5)),
    ("patch_pool", _pool_then_head('patch_pool(metric = "l2", size = 3, pad = 1, stride = 2)'), (2, 5, 5)),
    ("patch_max", _pool_then_head('patch_max(size = 3, pad = 1, outside = "zero")'), (2, 5, 5)),
    ("patch_min", _pool("patch_min(size = 3, pad = 1, stride = 1)"), (2, 5, 5)),
    ("patch_mean", _pool_then_head('patch_mean(size = 3, pad = 1, stride = 1, outside = "ignore")'), (2, 5, 5)),
    ("adaptive_pool", _pool_then_head("adaptive_pool(size = [2, 3])"), (2, 5, 5)),
    ("adaptive_pool", _pool('adaptive_pool(size = 3, metric = "max")'), (2, 5, 5)),
    ("cuboid_pool", _pool('cuboid_pool(metric = "variance", half = 1)'), (2, 5, 5)),
    ("cuboid_max", _pool('cuboid_max(half = 1, packing = "complete_square")'), (2, 5, 5)),
    ("cuboid_min", _pool("cuboid_min(half = [0, 1], half_after = [1, 1], stride = 2)"), (2, 5, 5)),
    ("cuboid_mean", _pool_then_head("cuboid_mean(half = 1, stride = 2)"), (2, 5, 5)),
    ("cylinder_pool", _pool_then_head('cylinder_pool(metric = "mean", radius = 2, stride = 2)'), (2, 5, 5)),
    ("cylinder_max", _pool_then_head("cylinder_max(radius = 1)"), (2, 5, 5)),
    ("cylinder_min", _pool('cylinder_min(radius = 1, outside = "zero")'), (2, 5, 5)),
    ("cylinder_mean", _pool_then_head("cylinder_mean(radius = 1, depth = 1, depth_after = 0)", spatial=(3, 4, 3)),
     (2, 3, 4, 3)),
    ("sphere_pool", _pool('sphere_pool(metric = "sum", radius = 1, packing = "sparse_simple_cubic")',
                          spatial=(3, 4, 3)), (2, 3, 4, 3)),
    ("sphere_max", _pool_then_head("sphere_max(radius = 1, stride = 2)", spatial=(3, 4, 3)), (2, 3, 4, 3)),
    ("sphere_min", _pool("sphere_min(radius = 1)", spatial=(3, 3, 3)), (2, 3, 3, 3)),
    ("sphere_mean", _pool_then_head("sphere_mean(radius = 1)", spatial=(3, 4, 3)), (2, 3, 4, 3)),
]


def _fix_compress(cases):
    """The compression cases written with _vector(...) default to a head; make them compress() blocks."""
    out = []
    for name, text, shape in cases:
        if "head(x)" in text and "out = 2" in text and text.startswith("model v"):
            text = text.replace("head(x)", "compress(x)").replace("  out = 2", "")
        out.append((name, text, shape))
    return out


COMP = _fix_compress(COMP)


def test_every_expansion_and_compression_entry_is_compiled_here():
    covered_exp = {n for n, _, _ in EXP}
    covered_comp = {n for n, _, _ in COMP}
    assert covered_exp == {e.name for e in all_entries() if e.family == "expansion"}
    assert covered_comp == {e.name for e in all_entries() if e.family == "compression"}
    for name, text, _ in EXP + COMP:  # the spec really uses that entry (directly or by an alias)
        used = text.split("kappa = ")[1].split("(")[0].split(" ")[0].strip()
        fam = "expansion" if (name, text, _) in EXP else "compression"
        entry = REGISTRY[fam].get(used) or REGISTRY["compression" if fam == "expansion" else "expansion"].get(used)
        assert entry is not None and entry.cls.name == name, (name, used)


@pytest.mark.parametrize("name,text,shape", EXP, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(EXP)])
def test_expansion_lowerings_agree(name, text, shape):
    assert f"[B, {', '.join(map(str, shape))}]" in text
    assert_equivalent(text, {"x": _rand(6, *shape)})


@pytest.mark.parametrize("name,text,shape", COMP, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(COMP)])
def test_compression_lowerings_agree(name, text, shape):
    assert f"[B, {', '.join(map(str, shape))}]" in text
    if name in MANIFOLD:
        pytest.importorskip("sklearn")
    with threadpool_limits(1):
        assert_equivalent(text, {"x": _rand(6, *shape)})


def test_stateful_compressions_agree_in_training_mode():
    """Training batches update the statistics identically in both lowerings (then eval freezes them)."""
    for kappa in ("pca(k = 2)", "variance_threshold(k = 2)", "feature_clustering(k = 2)"):
        text = _vector(kappa, m=4, compress=True)
        fast, ref = rpn2c.compile(text).double(), rpn2c.compile(text, reference=True).double()
        for seed in range(3):
            x = _rand(8, 4, seed=seed) * torch.tensor([3.0, 0.1, 1.0, 2.0], dtype=torch.float64)
            torch.testing.assert_close(fast(x=x), ref(x=x), rtol=1e-10, atol=1e-10)
        fast.eval(), ref.eval()
        x = _rand(5, 4, seed=9)
        torch.testing.assert_close(fast(x=x), ref(x=x), rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------------------------------------ hypothesis
ELEMENTWISE = ["chebyshev(d = 2)", "reciprocal(eps = 0.1)", "hermite(d = 2)", "laguerre(d = 2, alpha = 0.5)",
               "bessel(d = 2)", "fibonacci(d = 3)", "lucas(d = 2)", "fourier(N = 1)", "gaussian_rbf(num_centres = 2)",
               "naive_normal", "probabilistic_chi2", "meyer_wavelet(s = 2)", "shannon_wavelet", "ricker_wavelet",
               "trigonometric", "hyperbolic", "arc_hyperbolic", "legendre(d = 3)", "jacobi(d = 2)",
               "gegenbauer(d = 2, alpha = 0.75)", "reverse_bessel(d = 2)", "linear(c = 3.0)", "hybrid_probabilistic",
               'extended(parts = ["legendre", "fourier(N = 1)"])', 'nested(parts = ["bessel", "hermite"])',
               "combinatorial_normal(d = 1)", "taylor(d = 1)", "beta_wavelet(alpha = 2.0)", "dog_wavelet"]


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(ELEMENTWISE), st.integers(1, 2), st.integers(3, 5), st.integers(1, 2), st.integers(0, 1),
       st.sampled_from(["zeros", "circular", "reflect", "replicate"]))
def test_elementwise_kappa_in_a_convolution(kappa, cin, size, stride, pad, mode):
    """Padding-mode grid ξ + elementwise κ = native convolution of κ(padded grid); padded cells read κ(0)."""
    xi = f'grid_patch(size = 2, stride = {stride}, pad = {pad}, padding_mode = "{mode}")'
    assert_equivalent(_grid(kappa, cin, (size, size + 1), xi), {"x": _rand(2, cin, size, size + 1) * 1.5})


SHAPES = st.sampled_from(["patch", "cuboid", "cylinder", "sphere"])
METRICS = ["max", "min", "sum", "mean", "prod", "median", "median_low", "l1", "l2", "linf", "lp", "entropy",
           "variance", "std", "skewness"]


@settings(max_examples=15, deadline=None)
@given(SHAPES, st.sampled_from(METRICS), st.integers(1, 2), st.integers(1, 2), st.sampled_from(["auto", "zero",
                                                                                                 "ignore"]),
       st.data())
def test_pooling_geometries_and_metrics(shape, metric, r, stride, outside, data):
    if outside == "ignore" and metric not in ("max", "min", "sum", "mean", "prod", "l1", "l2", "linf", "lp"):
        outside = "zero"
    spatial = (3, 4, 3) if shape == "sphere" else (4, 5)
    common = f'metric = "{metric}", outside = "{outside}"'
    if shape == "patch":
        mode = data.draw(st.sampled_from(["zeros", "circular", "replicate"]))
        kappa = f'patch_pool({common}, size = {r + 1}, pad = {r}, stride = {stride}, padding_mode = "{mode}")'
    elif shape == "cuboid":
        kappa = f"cuboid_pool({common}, half = {r}, half_after = {r - 1}, stride = {stride})"
    elif shape == "cylinder":
        kappa = f"cylinder_pool({common}, radius = {r}, stride = {stride})"
    else:
        kappa = f"sphere_pool({common}, radius = 1, stride = {stride})"
    x = _rand(2, 2, *spatial)
    if metric in ("prod",):
        x = x * 0.5 + 1.0
    assert_equivalent(_pool_then_head(kappa, 2, spatial), {"x": x})
