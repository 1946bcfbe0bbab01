"""Tests for rpn2c.functional.kernels: every kernel against a naive per-pair reference, statistical kernels against
numpy/scipy, kernel identities, and the matrix normalizations."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest
import scipy.spatial.distance as ssd
import scipy.special
import scipy.stats
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rpn2c.functional import kernels as K

SETTINGS = settings(max_examples=25, deadline=None)
F64 = torch.float64


def _rand(seed: int, *shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=F64)


def _naive(pair, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Double loop over columns: A[i, j] = pair(X[:, i], Y[:, j])."""
    A = np.empty((X.shape[1], Y.shape[1]))
    for i in range(X.shape[1]):
        for j in range(Y.shape[1]):
            A[i, j] = pair(X[:, i], Y[:, j])
    return A


def _mink(x, y, p):
    return np.abs(x - y).max() if p == math.inf else (np.abs(x - y) ** p).sum() ** (1.0 / p)


def _canberra(x, y):
    den = np.abs(x) + np.abs(y)
    num = np.abs(x - y)
    return np.where(den == 0, 0.0, num / np.where(den == 0, 1.0, den)).sum()


# name -> (kernel callable taking (X, Y), naive pair function taking (x, y))
NUMERIC_CASES = {
    "linear": (K.linear_kernel, lambda x, y: x @ y),
    "polynomial": (partial(K.polynomial_kernel, c=0.5, d=3), lambda x, y: (x @ y + 0.5) ** 3),
    "tanh": (partial(K.hyperbolic_tangent_kernel, alpha=0.3, c=0.1), lambda x, y: np.tanh(0.3 * (x @ y) + 0.1)),
    "exponential_l1": (partial(K.exponential_kernel, gamma=0.7), lambda x, y: np.exp(-0.7 * np.abs(x - y).sum())),
    "exponential_2sq": (
        partial(K.exponential_kernel, gamma=0.7, norm="2sq"),
        lambda x, y: np.exp(-0.7 * ((x - y) ** 2).sum()),
    ),
    "cosine": (K.cosine_similarity_kernel, lambda x, y: x @ y / (np.linalg.norm(x) * np.linalg.norm(y))),
    "minkowski_3": (partial(K.minkowski_kernel, p=3.0), lambda x, y: 1 - _mink(x, y, 3.0)),
    "minkowski_1.5_exp": (partial(K.minkowski_kernel, p=1.5, form="exp"), lambda x, y: np.exp(-_mink(x, y, 1.5))),
    "manhattan": (K.manhattan_kernel, lambda x, y: 1 - np.abs(x - y).sum()),
    "euclidean": (K.euclidean_kernel, lambda x, y: 1 - np.sqrt(((x - y) ** 2).sum())),
    "chebyshev": (K.chebyshev_kernel, lambda x, y: 1 - np.abs(x - y).max()),
    "chebyshev_exp": (partial(K.chebyshev_kernel, form="exp"), lambda x, y: np.exp(-np.abs(x - y).max())),
    "gaussian_rbf": (
        partial(K.gaussian_rbf_kernel, sigma=1.3),
        lambda x, y: np.exp(-((x - y) ** 2).sum() / (2 * 1.3**2)),
    ),
    "laplacian": (partial(K.laplacian_kernel, sigma=0.8), lambda x, y: np.exp(-np.abs(x - y).sum() / 0.8)),
    "canberra": (K.canberra_kernel, lambda x, y: np.exp(-_canberra(x, y))),
    "hybrid": (
        partial(K.hybrid_kernel, kernels=[K.linear_kernel, K.gaussian_rbf_kernel], weights=[0.5, 2.0]),
        lambda x, y: 0.5 * (x @ y) + 2.0 * np.exp(-((x - y) ** 2).sum() / 2),
    ),
}

dims = st.tuples(st.integers(2, 7), st.integers(1, 5), st.integers(1, 4), st.integers(0, 2**31 - 1))


@pytest.mark.parametrize("case", sorted(NUMERIC_CASES))
@SETTINGS
@given(dims=dims)
def test_numeric_kernel_matches_naive_double_loop(case, dims):
    b, m, my, seed = dims
    kern, pair = NUMERIC_CASES[case]
    X, Y = _rand(seed, b, m), _rand(seed + 1, b, my)
    np.testing.assert_allclose(kern(X).numpy(), _naive(pair, X.numpy(), X.numpy()), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(kern(X, Y).numpy(), _naive(pair, X.numpy(), Y.numpy()), rtol=1e-10, atol=1e-10)


@SETTINGS
@given(dims=dims)
def test_anisotropic_rbf_matches_naive(dims):
    b, m, my, seed = dims
    X, Y = _rand(seed, b, m), _rand(seed + 1, b, my)
    a = torch.linspace(0.1, 2.0, b, dtype=F64)
    pair = lambda x, y: np.exp(-((x - y) * a.numpy() * (x - y)).sum())
    np.testing.assert_allclose(K.anisotropic_rbf_kernel(X, Y, a=a).numpy(), _naive(pair, X.numpy(), Y.numpy()),
                               rtol=1e-10, atol=1e-12)
    # scalar a is the isotropic RBF with 2σ² = 1/a
    np.testing.assert_allclose(K.anisotropic_rbf_kernel(X, a=0.5).numpy(),
                               K.gaussian_rbf_kernel(X, sigma=1.0).numpy(), rtol=1e-12)


@SETTINGS
@given(dims=dims, p=st.sampled_from([1.0, 2.0, 3.0, math.inf]))
def test_distances_match_scipy_cdist(dims, p):
    b, m, my, seed = dims
    X, Y = _rand(seed, b, m), _rand(seed + 1, b, my)
    ref = ssd.cdist(X.numpy().T, Y.numpy().T, "chebyshev" if p == math.inf else "minkowski",
                    **({} if p == math.inf else {"p": p}))
    np.testing.assert_allclose(K.minkowski_distance(X, Y, p=p).numpy(), ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(K.canberra_distance(X, Y).numpy(), ssd.cdist(X.numpy().T, Y.numpy().T, "canberra"),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(K.sq_euclidean_distance(X, Y).numpy(), ssd.cdist(X.numpy().T, Y.numpy().T) ** 2,
                               rtol=1e-9, atol=1e-10)


def test_canberra_zero_over_zero_is_zero():
    X = torch.tensor([[0.0, 0.0, 1.0], [2.0, 0.0, -1.0]], dtype=F64)
    D = K.canberra_distance(X)
    assert torch.isfinite(D).all()
    np.testing.assert_allclose(D.numpy(), ssd.cdist(X.numpy().T, X.numpy().T, "canberra"))


def test_leading_batch_axes_are_independent():
    X = _rand(3, 2, 3, 6, 4)
    for name, spec in K.KERNELS.items():
        if name == "hybrid":
            fn = partial(spec.fn, kernels=[K.linear_kernel, K.cosine_similarity_kernel], weights=[1.0, -1.0])
        else:
            fn = spec.fn
        A = fn(X)
        assert A.shape == (2, 3, 4, 4), name
        torch.testing.assert_close(A[1, 2], fn(X[1, 2]), msg=name)
    # X batched, Y unbatched: broadcast
    Y = _rand(4, 6, 5)
    torch.testing.assert_close(K.gaussian_rbf_kernel(X, Y)[0, 1], K.gaussian_rbf_kernel(X[0, 1], Y))


def test_paper_vs_toolkit_forms_differ():
    X = _rand(5, 6, 4)
    assert not torch.allclose(K.exponential_kernel(X), K.exponential_kernel(X, norm="2sq"))
    assert not torch.allclose(K.minkowski_kernel(X), K.minkowski_kernel(X, form="exp"))
    with pytest.raises(ValueError, match="norm"):
        K.exponential_kernel(X, norm=3)
    with pytest.raises(ValueError, match="form"):
        K.minkowski_kernel(X, form="nope")
    with pytest.raises(ValueError, match="b axis"):
        K.linear_kernel(X, _rand(1, 5, 4))


# ------------------------------------------------------------------------------------------------ properties


@SETTINGS
@given(dims=dims)
def test_similarity_diagonals_and_symmetry(dims):
    b, m, _, seed = dims
    X = _rand(seed, b, m)
    ones = torch.ones(m, dtype=F64)
    for A in (K.cosine_similarity_kernel(X), K.gaussian_rbf_kernel(X, sigma=0.7), K.laplacian_kernel(X),
              K.exponential_kernel(X), K.euclidean_kernel(X), K.chebyshev_kernel(X), K.canberra_kernel(X)):
        torch.testing.assert_close(A, A.mT)
        torch.testing.assert_close(A.diagonal(), ones)


@SETTINGS
@given(dims=dims, sigma=st.floats(0.2, 5.0))
def test_gaussian_rbf_gram_is_psd(dims, sigma):
    b, m, _, seed = dims
    A = K.gaussian_rbf_kernel(_rand(seed, b, m + 3), sigma=sigma)
    assert torch.linalg.eigvalsh(A).min() > -1e-10


def test_cosine_zero_column_is_safe():
    X = _rand(0, 5, 3)
    X[:, 1] = 0.0
    A = K.cosine_similarity_kernel(X)
    assert torch.isfinite(A).all()
    assert (A[1] == 0).all() and (A[:, 1] == 0).all()
    torch.testing.assert_close(A.diagonal()[[0, 2]], torch.ones(2, dtype=F64))


# ------------------------------------------------------------------------------------------------ statistical

stat_dims = st.tuples(st.integers(3, 9), st.integers(1, 5), st.integers(1, 4), st.integers(0, 2**31 - 1))


@SETTINGS
@given(dims=stat_dims)
def test_pearson_matches_numpy_corrcoef(dims):
    b, m, my, seed = dims
    X, Y = _rand(seed, b, m), _rand(seed + 1, b, my)
    A = K.pearson_correlation_kernel(X)
    np.testing.assert_allclose(A.numpy(), np.atleast_2d(np.corrcoef(X.numpy(), rowvar=False)), atol=1e-12)
    C = np.corrcoef(np.concatenate([X.numpy(), Y.numpy()], axis=1), rowvar=False)
    np.testing.assert_allclose(K.pearson_correlation_kernel(X, Y).numpy(), C[:m, m:], atol=1e-12)
    assert torch.equal(A, A.mT) or torch.allclose(A, A.mT, atol=1e-15)
    assert A.abs().max() <= 1.0
    torch.testing.assert_close(A.diagonal(), torch.ones(m, dtype=F64))
    # eq (37) literally, population std, per pair
    pair = lambda x, y: (((x - x.mean()) / x.std()) * ((y - y.mean()) / y.std())).sum() / len(x)
    np.testing.assert_allclose(A.numpy(), _naive(pair, X.numpy(), X.numpy()), atol=1e-12)


def test_pearson_constant_column_gives_zero_not_nan():
    X = _rand(1, 6, 3)
    X[:, 2] = 0.1  # centering leaves round-off, not exact zeros
    for kern in (K.pearson_correlation_kernel, K.rv_coefficient_kernel, K.gaussian_mutual_information_kernel):
        A = kern(X)
        assert torch.isfinite(A).all()
        assert (A[2] == 0).all() and (A[:, 2] == 0).all(), kern.__name__


def _cov2(x, y):
    return np.cov(np.stack([x, y]))  # ddof 1


@SETTINGS
@given(dims=stat_dims)
def test_rv_coefficient_is_eq38_and_squared_correlation(dims):
    b, m, my, seed = dims
    X, Y = _rand(seed, b, m), _rand(seed + 1, b, my)

    def eq38(x, y):
        S = _cov2(x, y)
        sxy, syx = S[0, 1], S[1, 0]
        return (sxy * syx) / math.sqrt(S[0, 0] ** 2 * S[1, 1] ** 2)

    A = K.rv_coefficient_kernel(X)
    np.testing.assert_allclose(A.numpy(), _naive(eq38, X.numpy(), X.numpy()), atol=1e-12)
    np.testing.assert_allclose(K.rv_coefficient_kernel(X, Y).numpy(), _naive(eq38, X.numpy(), Y.numpy()), atol=1e-12)
    np.testing.assert_allclose(A.numpy(), np.atleast_2d(np.corrcoef(X.numpy(), rowvar=False)) ** 2, atol=1e-12)
    torch.testing.assert_close(A.diagonal(), torch.ones(m, dtype=F64))  # not the toolkit's 0
    assert A.min() >= 0 and A.max() <= 1


@SETTINGS
@given(b=st.integers(4, 10), p=st.integers(1, 4), q=st.integers(1, 4), seed=st.integers(0, 2**31 - 1))
def test_multivariate_rv_coefficient_matches_trace_formula(b, p, q, seed):
    X, Y = _rand(seed, b, p), _rand(seed + 1, b, q)
    S = np.cov(np.concatenate([X.numpy(), Y.numpy()], axis=1), rowvar=False)
    Sx, Sy, Sxy = S[:p, :p], S[p:, p:], S[:p, p:]
    ref = np.trace(Sxy @ Sxy.T) / math.sqrt(np.trace(Sx @ Sx) * np.trace(Sy @ Sy))
    np.testing.assert_allclose(K.rv_coefficient(X, Y).item(), ref, rtol=1e-10)
    np.testing.assert_allclose(K.rv_coefficient(X, X).item(), 1.0, rtol=1e-12)
    if p == 1 and q == 1:
        np.testing.assert_allclose(K.rv_coefficient(X, Y).item(), np.corrcoef(X[:, 0], Y[:, 0])[0, 1] ** 2)


@SETTINGS
@given(dims=stat_dims)
def test_gaussian_mutual_information_matches_determinant_formula(dims):
    b, m, my, seed = dims
    X, Y = _rand(seed, b, m), _rand(seed + 1, b, my)

    def eq39(x, y):
        S = _cov2(x, y)
        det = np.linalg.det(S)
        return 0.5 * math.log(S[0, 0] * S[1, 1] / det) if det > 1e-14 else np.inf  # diagonal: +inf in theory

    eps = 1e-6
    A = K.gaussian_mutual_information_kernel(X, eps=eps)
    ref = _naive(eq39, X.numpy(), X.numpy()) if m > 1 else np.zeros((1, 1))
    # off-diagonal pairs below the cap (with b = 3, |ρ| ≈ 1 happens: those are capped by design)
    below_cap = 0.5 * math.log(1 / (10 * eps))
    off = ~np.eye(m, dtype=bool) & (ref < below_cap)
    np.testing.assert_allclose(A.numpy()[off], ref[off], rtol=1e-8, atol=1e-10)
    # documented finite diagonal: ½ log(1/eps)
    np.testing.assert_allclose(A.diagonal().numpy(), 0.5 * math.log(1 / eps), rtol=1e-12)
    assert A.min() >= 0
    torch.testing.assert_close(A, A.mT)
    refxy = _naive(eq39, X.numpy(), Y.numpy())
    ok = refxy < below_cap
    np.testing.assert_allclose(K.gaussian_mutual_information_kernel(X, Y).numpy()[ok], refxy[ok], rtol=1e-8, atol=1e-10)
    assert (K.gaussian_mutual_information_kernel(X, Y).numpy() <= 0.5 * math.log(1 / eps) + 1e-12).all()
    A0 = K.gaussian_mutual_information_kernel(X, diagonal=0.0)
    assert (A0.diagonal() == 0).all()
    np.testing.assert_allclose(A0.numpy()[off], ref[off], rtol=1e-8, atol=1e-10)


@SETTINGS
@given(dims=dims)
def test_kl_divergence_matches_scipy(dims):
    b, m, my, seed = dims
    X, Y = _rand(seed, b, m), _rand(seed + 1, b, my)
    P = scipy.special.softmax(X.numpy(), axis=0)
    Q = scipy.special.softmax(Y.numpy(), axis=0)
    ref = np.array([[scipy.stats.entropy(P[:, i], Q[:, j]) for j in range(my)] for i in range(m)])
    np.testing.assert_allclose(K.kl_divergence_kernel(X, Y).numpy(), ref, rtol=1e-9, atol=1e-12)
    A = K.kl_divergence_kernel(X)
    assert (A.diagonal() == 0).all() and A.min() >= -1e-12
    # abs/sum normalization
    eps = 1e-12
    Pa = (np.abs(X.numpy()) + eps) / (np.abs(X.numpy()) + eps).sum(0)
    Qa = (np.abs(Y.numpy()) + eps) / (np.abs(Y.numpy()) + eps).sum(0)
    ref_a = np.array([[scipy.stats.entropy(Pa[:, i], Qa[:, j]) for j in range(my)] for i in range(m)])
    np.testing.assert_allclose(K.kl_divergence_kernel(X, Y, normalize="abs_sum").numpy(), ref_a,
                               rtol=1e-9, atol=1e-12)


def test_covariance_matches_numpy():
    X = _rand(7, 6, 4)
    np.testing.assert_allclose(K.covariance(X).numpy(), np.cov(X.numpy(), rowvar=False), atol=1e-12)
    with pytest.raises(ValueError, match="b > ddof"):
        K.covariance(X[:1])


# ------------------------------------------------------------------------------------------------ gradients


def test_gradcheck_kernels():
    X = _rand(11, 5, 4).requires_grad_()
    Y = _rand(12, 5, 3).requires_grad_()
    fns = [
        K.euclidean_kernel, K.gaussian_rbf_kernel, K.cosine_similarity_kernel, K.pearson_correlation_kernel,
        K.gaussian_mutual_information_kernel, K.kl_divergence_kernel, K.rv_coefficient_kernel, K.canberra_kernel,
        partial(K.kl_divergence_kernel, normalize="abs_sum"),
    ]
    for fn in fns:
        assert torch.autograd.gradcheck(fn, (X, Y)), fn


def test_gradients_finite_at_zero_distance_and_constant_columns():
    X = _rand(13, 5, 4)
    X[:, 3] = 2.0  # constant column
    X[:, 2] = X[:, 1]  # duplicate column: zero distance off the diagonal
    X.requires_grad_()
    for fn in (K.euclidean_kernel, K.chebyshev_kernel, K.pearson_correlation_kernel, K.gaussian_rbf_kernel,
               K.gaussian_mutual_information_kernel, K.cosine_similarity_kernel):
        (g,) = torch.autograd.grad(fn(X).sum(), X)
        assert torch.isfinite(g).all(), fn


# ------------------------------------------------------------------------------------------------ normalizations


def _sym_adj(seed: int, m: int, isolated: int | None = None) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    A = (torch.rand(m, m, generator=g, dtype=F64) < 0.5).to(F64) * torch.rand(m, m, generator=g, dtype=F64)
    A = A + A.mT
    if isolated is not None:
        A[isolated] = 0
        A[:, isolated] = 0
    return A


@SETTINGS
@given(m=st.integers(2, 7), seed=st.integers(0, 2**31 - 1))
def test_degree_normalization_identities(m, seed):
    A = _sym_adj(seed, m, isolated=0)
    R = K.degree_normalize(A, "row")
    C = K.degree_normalize(A, "column")
    rs, cs = A.sum(-1), A.sum(-2)
    torch.testing.assert_close(R.sum(-1), (rs > 0).to(F64))
    torch.testing.assert_close(C.sum(-2), (cs > 0).to(F64))
    assert (R[0] == 0).all() and torch.isfinite(R).all()
    # dense D^{-1/2} A D^{-1/2}
    dinv = torch.where(rs > 0, rs.clamp_min(1e-300) ** -0.5, torch.zeros_like(rs))
    dense = torch.diag(dinv) @ A @ torch.diag(dinv)
    torch.testing.assert_close(K.degree_normalize(A, "symmetric"), dense)
    torch.testing.assert_close(K.degree_normalize(A, "row_column"), dense)
    torch.testing.assert_close(K.degree_normalize(A, "symmetric", degree="split"), dense)


def test_symmetric_normalization_fixes_toolkit_row_column():
    A = torch.tensor([[0.0, 1, 1, 1], [1, 0, 0, 0], [1, 0, 0, 1], [1, 0, 1, 0]], dtype=F64)
    d = A.sum(-1)
    dense = torch.diag(d**-0.5) @ A @ torch.diag(d**-0.5)
    ours = K.degree_normalize(A, "symmetric")
    torch.testing.assert_close(ours, dense)
    # toolkit: divide by sqrt(rowsum), then by sqrt(colsum of the intermediate matrix)
    inter = A / d.sqrt().unsqueeze(-1)
    toolkit = inter / inter.sum(-2, keepdim=True).sqrt()
    assert not torch.allclose(toolkit, dense)
    # rectangular split mode: D_r^{-1/2} A D_c^{-1/2}
    B = _rand(2, 3, 5).abs()
    split = torch.diag(B.sum(-1) ** -0.5) @ B @ torch.diag(B.sum(-2) ** -0.5)
    torch.testing.assert_close(K.degree_normalize(B, "symmetric", degree="split"), split)
    with pytest.raises(ValueError, match="square"):
        K.degree_normalize(B, "symmetric")


@SETTINGS
@given(m=st.integers(1, 6), n=st.integers(1, 6), scale=st.floats(0.1, 3.0), seed=st.integers(0, 2**31 - 1))
def test_softmax_normalization(m, n, scale, seed):
    A = _rand(seed, m, n)
    torch.testing.assert_close(K.softmax_normalize(A, "row", scale=scale), torch.softmax(scale * A, -1))
    torch.testing.assert_close(K.softmax_normalize(A, "column").sum(-2), torch.ones(n, dtype=F64))
    # masking exact zeros, with one fully zero row
    g = torch.Generator().manual_seed(seed)
    Am = A * (torch.rand(m, n, generator=g, dtype=F64) < 0.6)
    Am[0] = 0
    P = K.softmax_normalize(Am, "row", scale=scale, mask_zeros=True)
    assert torch.isfinite(P).all()
    assert (P[Am == 0] == 0).all()
    assert (P[0] == 0).all()
    nz = (Am != 0).any(-1)
    torch.testing.assert_close(P.sum(-1)[nz], torch.ones(int(nz.sum()), dtype=F64))
    for i in range(m):  # naive: softmax over the non-zero entries of each row
        keep = Am[i] != 0
        if keep.any():
            torch.testing.assert_close(P[i, keep], torch.softmax(scale * Am[i, keep], -1))
    Pc = K.softmax_normalize(Am, "column", mask_zeros=True)
    torch.testing.assert_close(Pc, K.softmax_normalize(Am.mT, "row", mask_zeros=True).mT)


def test_masked_softmax_gradient_is_finite():
    A = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 2.0]], dtype=F64, requires_grad=True)
    P = K.softmax_normalize(A, "row", mask_zeros=True, scale=0.5)
    (g,) = torch.autograd.grad((P * torch.arange(3.0, dtype=F64)).sum(), A)
    assert torch.isfinite(g).all()
    # the zero pattern is data (a discontinuity), so differentiate w.r.t. the non-zero entries only
    mask = A.detach() != 0

    def f(v):
        return K.softmax_normalize(torch.zeros_like(A).masked_scatter(mask, v), "row", mask_zeros=True)

    assert torch.autograd.gradcheck(f, (A.detach()[mask].clone().requires_grad_(),))


@pytest.mark.parametrize("mode", ["row", "column", "all"])
def test_mean_std_normalization(mode):
    A = _rand(21, 2, 4, 5)
    dims = {"row": (-1,), "column": (-2,), "all": (-2, -1)}[mode]
    N = K.mean_std_normalize(A, mode, eps=0.0)
    torch.testing.assert_close(N.mean(dims), torch.zeros_like(N.mean(dims)))
    torch.testing.assert_close(N.std(dims, correction=0), torch.ones_like(N.mean(dims)))
    Nu = K.mean_std_normalize(A, mode, eps=0.0, unbiased=True)
    torch.testing.assert_close(Nu.std(dims, correction=1), torch.ones_like(N.mean(dims)))
    with pytest.raises(ValueError):
        K.mean_std_normalize(A, "diag")


def test_registry_is_complete():
    assert set(K.KERNELS) >= {
        "linear", "polynomial", "hyperbolic_tangent", "exponential", "cosine_similarity", "minkowski", "manhattan",
        "euclidean", "chebyshev", "gaussian_rbf", "laplacian", "anisotropic_rbf", "canberra", "hybrid",
        "kl_divergence", "pearson_correlation", "rv_coefficient", "mutual_information",
    }
    X = _rand(0, 6, 4)
    for spec in K.KERNELS.values():
        if spec.symmetric and spec.name != "hybrid":
            A = spec.fn(X)
            torch.testing.assert_close(A, A.mT, msg=spec.name)


def test_everything_follows_the_input_device_and_dtype():
    # meta tensors: any hard-coded CPU tensor in the maths would raise a device mismatch
    for dev, dt in (("meta", torch.float32), ("cpu", torch.float32)):
        X = torch.randn(7, 5, device=dev, dtype=dt)
        for name, spec in K.KERNELS.items():
            fn = partial(spec.fn, kernels=[K.linear_kernel, K.cosine_similarity_kernel]) if name == "hybrid" else spec.fn
            A = fn(X)
            assert A.device.type == dev and A.dtype == dt and A.shape == (5, 5), name
        A = torch.randn(5, 5, device=dev, dtype=dt)
        for out in (K.degree_normalize(A, "symmetric"), K.softmax_normalize(A, mask_zeros=True),
                    K.mean_std_normalize(A, "all")):
            assert out.device.type == dev and out.dtype == dt
