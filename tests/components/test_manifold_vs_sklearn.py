"""Manifold compressions κ equal scikit-learn called directly with the same settings on the same rows.

Each compiled `compress` layer with a manifold κ must return exactly what the scikit-learn estimator returns from
`fit_transform` on the batch's rows (float64, the layer's stated seed and solver), and the generic `manifold(method=…)`
entry must agree with the per-method entries."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

import rpn2c

sklearn_manifold = pytest.importorskip("sklearn.manifold")

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - comes with scikit-learn
    def threadpool_limits(n):
        return contextlib.nullcontext()


def _model(kappa_text: str, m: int = 4):
    return rpn2c.compile(f"model c {{ input x: vector[B, {m}]  y = compress(x) {{ kappa = {kappa_text} }}  "
                         f"return y }}").double()


def _rows(n=12, m=4, seed=0):
    return np.random.default_rng(seed).standard_normal((n, m))


def _mds_kwargs():
    import inspect

    return {"init": "random"} if "init" in inspect.signature(sklearn_manifold.MDS).parameters else {}


CASES = [
    ("isomap(k = 2, n_neighbors = 4)",
     lambda: sklearn_manifold.Isomap(n_components=2, n_neighbors=4, eigen_solver="dense")),
    ("lle(k = 2, n_neighbors = 5)",
     lambda: sklearn_manifold.LocallyLinearEmbedding(n_components=2, n_neighbors=5, eigen_solver="dense",
                                                     random_state=0)),
    ("spectral_embedding(k = 2, n_neighbors = 4, seed = 3)",
     lambda: sklearn_manifold.SpectralEmbedding(n_components=2, n_neighbors=4, random_state=3)),
    ("mds(k = 2, max_iter = 300, seed = 1)",
     lambda: sklearn_manifold.MDS(n_components=2, max_iter=300, random_state=1, **_mds_kwargs())),
    ("tsne(k = 2, perplexity = 3.0, max_iter = 250)",
     lambda: sklearn_manifold.TSNE(n_components=2, perplexity=3.0, max_iter=250, random_state=0)),
]


@pytest.mark.parametrize("text,estimator", CASES, ids=[c[0].split("(")[0] for c in CASES])
def test_manifold_compression_equals_sklearn_fit_transform(text, estimator):
    X = _rows()
    with threadpool_limits(1):
        got = _model(text)(x=torch.from_numpy(X))
        want = estimator().fit_transform(X)
    assert got.shape == want.shape == (12, 2)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10)


def test_generic_manifold_entry_equals_the_named_entries():
    X = torch.from_numpy(_rows(seed=1))
    with threadpool_limits(1):
        for method, extra in (("isomap", "n_neighbors = 4"), ("lle", "n_neighbors = 5"),
                              ("spectral_embedding", "n_neighbors = 4")):
            named = _model(f"{method}(k = 2, {extra})")(x=X)
            generic = _model(f'manifold(method = "{method}", k = 2, {extra})')(x=X)
            torch.testing.assert_close(generic, named, rtol=0, atol=0)


def test_isomap_equals_classical_mds_of_geodesic_distances():
    """Isomap's formula, independent of scikit-learn's estimator: shortest paths on the k-NN graph, double centering
    −½ J D² J, top-2 eigenvectors scaled by √λ (equal up to the sign of each column)."""
    from scipy.sparse.csgraph import shortest_path
    from sklearn.neighbors import kneighbors_graph

    X = _rows(seed=2)
    with threadpool_limits(1):
        got = _model("isomap(k = 2, n_neighbors = 4)")(x=torch.from_numpy(X)).numpy()
    G = kneighbors_graph(X, 4, mode="distance")
    D = shortest_path(G, method="D", directed=False)
    n = len(X)
    J = np.eye(n) - np.ones((n, n)) / n
    K = -0.5 * J @ (D ** 2) @ J
    w, V = np.linalg.eigh(K)
    idx = np.argsort(w)[::-1][:2]
    want = V[:, idx] * np.sqrt(w[idx])
    for j in range(2):
        s = np.sign(want[:, j] @ got[:, j])
        np.testing.assert_allclose(got[:, j], s * want[:, j], rtol=1e-8, atol=1e-8)
