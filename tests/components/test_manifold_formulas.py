"""Manifold compressions κ against their formulas in numpy, without scikit-learn's estimators (which the κ call):
LLE (barycentric weights with the regularised local Gram, the bottom eigenvectors of (I − W)ᵀ(I − W)), spectral
embedding (the normalised Laplacian of the symmetrised k-NN graph, eigenvectors divided by √degree), metric MDS
(SMACOF stops at a fixed point of the Guttman transform, below the classical solution's stress) and t-SNE (its KL
divergence from the perplexity-calibrated P, far below a random layout's). Isomap and PCA have theirs in
test_manifold_vs_sklearn.py and test_kappa_compression.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rpn2c

pytest.importorskip("sklearn")

X = np.random.default_rng(0).standard_normal((12, 4))
N = len(X)
DIST = np.linalg.norm(X[:, None] - X[None], axis=-1)


def _embed(kappa_text: str) -> np.ndarray:
    model = rpn2c.compile(f"model c {{ input x: vector[B, 4]  y = compress(x) {{ kappa = {kappa_text} }}  "
                          "return y }").double()
    return model(x=torch.from_numpy(X)).numpy()


def _neighbours(k):
    """The k nearest other rows of each row (Euclidean)."""
    return np.argsort(DIST, axis=1, kind="stable")[:, 1:k + 1]


def _equal_up_to_sign(got, want):
    for j in range(want.shape[1]):
        s = np.sign(want[:, j] @ got[:, j])
        np.testing.assert_allclose(got[:, j], s * want[:, j], rtol=1e-8, atol=1e-9)


def test_lle_is_the_bottom_of_the_reconstruction_operator():
    """w_i = argmin ‖x_i − Σ_j w_ij x_j‖ over its 5 neighbours, Σ_j w_ij = 1: solve (C + 10⁻³ tr(C) I) w = 1 with
    C = Z Zᵀ, Z = X_N(i) − x_i, normalise; the embedding is the eigenvectors 2…k+1 of (I − W)ᵀ(I − W)."""
    k, reg = 5, 1e-3
    w = np.zeros((N, N))
    for i, nb in enumerate(_neighbours(k)):
        z = X[nb] - X[i]
        c = z @ z.T
        c += np.eye(k) * reg * np.trace(c)
        sol = np.linalg.solve(c, np.ones(k))
        w[i, nb] = sol / sol.sum()
    _, vecs = np.linalg.eigh((np.eye(N) - w).T @ (np.eye(N) - w))
    _equal_up_to_sign(_embed("lle(k = 2, n_neighbors = 5)"), vecs[:, 1:3])


def test_spectral_embedding_is_the_normalised_laplacians_bottom():
    """A: each row linked to its 4 nearest rows counting itself (3 others), symmetrised ½(A + Aᵀ), no self-loops;
    L = I − D^{-1/2} A D^{-1/2}; the eigenvectors 2…k+1 of L divided by √degree (the first is constant)."""
    a = np.zeros((N, N))
    for i, nb in enumerate(_neighbours(3)):
        a[i, nb] = 1
    a = 0.5 * (a + a.T)
    d = a.sum(1)
    vals, vecs = np.linalg.eigh(np.eye(N) - a / np.sqrt(np.outer(d, d)))
    assert vals[0] == pytest.approx(0, abs=1e-12) and vals[1] > 1e-3  # one component: the first is trivial
    want = vecs[:, 1:3] / np.sqrt(d)[:, None]
    _equal_up_to_sign(_embed("spectral_embedding(k = 2, n_neighbors = 4, seed = 3)"), want)


def _stress(y):
    d = np.linalg.norm(y[:, None] - y[None], axis=-1)
    return ((d - DIST) ** 2).sum() / 2


def _guttman(y):
    """SMACOF's update Y⁺ = B(Y) Y / n, B_ij = −δ_ij / d_ij(Y) (i ≠ j), B_ii = −Σ_{j≠i} B_ij."""
    d = np.linalg.norm(y[:, None] - y[None], axis=-1)
    b = -np.divide(DIST, d, out=np.zeros_like(d), where=d > 0)
    np.fill_diagonal(b, 0)
    np.fill_diagonal(b, -b.sum(1))
    return b @ y / len(y)


def test_mds_is_a_stationary_point_of_the_stress():
    """Metric MDS minimises σ(Y) = Σ_{i<j} (‖y_i − y_j‖ − δ_ij)² by SMACOF from a random start: its result is a fixed
    point of the Guttman transform (to SMACOF's stopping tolerance) with a stress below classical MDS's (top-2
    eigenvectors of −½ J Δ² J). A local minimum: SMACOF from the classical start reaches a lower one here."""
    y = _embed("mds(k = 2, max_iter = 300, seed = 1)")
    y = y - y.mean(0)
    step = _guttman(y)
    assert np.linalg.norm(step - y) / np.linalg.norm(y) < 2e-3
    assert _stress(step) <= _stress(y) + 1e-9  # the majorisation never increases the stress
    j = np.eye(N) - 1 / N
    vals, vecs = np.linalg.eigh(-0.5 * j @ DIST ** 2 @ j)
    classical = vecs[:, -2:] * np.sqrt(vals[-2:])
    assert _stress(y) < 0.5 * _stress(classical)


def _joint_p(perplexity):
    """t-SNE's P: per row a Gaussian over the others with the bandwidth whose entropy is log(perplexity) (bisection),
    then P = (P_{j|i} + P_{i|j}) / 2N."""
    d2 = DIST ** 2
    p = np.zeros((N, N))
    for i in range(N):
        others = np.arange(N) != i
        lo, hi = 1e-12, 1e6
        for _ in range(200):
            beta = np.sqrt(lo * hi)
            row = np.exp(-(d2[i, others] - d2[i, others].min()) * beta)
            row /= row.sum()
            entropy = -(row * np.log(np.maximum(row, 1e-300))).sum()
            lo, hi = (beta, hi) if entropy > np.log(perplexity) else (lo, beta)
        p[i, others] = row
    return (p + p.T) / (2 * N)


def _kl(p, y):
    """KL(P ‖ Q), Q_ij ∝ (1 + ‖y_i − y_j‖²)⁻¹ (Student-t, one degree of freedom)."""
    q = 1 / (1 + ((y[:, None] - y[None]) ** 2).sum(-1))
    np.fill_diagonal(q, 0)
    q /= q.sum()
    m = p > 0
    return float((p[m] * np.log(p[m] / q[m])).sum())


def test_tsne_minimises_its_kl_divergence():
    p = _joint_p(3.0)
    assert p.sum() == pytest.approx(1.0) and np.allclose(p, p.T)
    y = _embed("tsne(k = 2, perplexity = 3.0, max_iter = 1000)")
    rng = np.random.default_rng(1)
    random_layouts = [_kl(p, rng.standard_normal((N, 2)) * y.std()) for _ in range(20)]
    assert _kl(p, y) < 0.4 < min(random_layouts)
