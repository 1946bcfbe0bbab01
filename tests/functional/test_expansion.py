"""Tests for rpn2c.functional.expansion: closed forms, scipy references, layouts, dims, kappa(0), gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special as sp
import scipy.stats as st
import torch
from hypothesis import given, settings
from hypothesis import strategies as hs
from scipy.interpolate import BSpline

from rpn2c.functional import expansion as E

F64 = torch.float64


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=F64)


def rand(*shape: int, generator: torch.Generator | None = None) -> torch.Tensor:
    return torch.rand(*shape, generator=generator, dtype=F64)


def t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def per_degree(y: torch.Tensor, m: int) -> torch.Tensor:
    """[..., m*k] -> [..., m, k]."""
    return y.unflatten(-1, (m, -1))


XS = np.linspace(-1.7, 1.9, 23)


# ----------------------------------------------------------------------------------------------------------------------
# Orthogonal polynomials
# ----------------------------------------------------------------------------------------------------------------------


def test_hermite_closed_forms_and_scipy():
    x = t(XS)
    He = per_degree(E.hermite(x.unsqueeze(0), d=6), len(XS))[0].numpy()
    np.testing.assert_allclose(He[:, 0], XS)
    np.testing.assert_allclose(He[:, 1], XS**2 - 1)
    np.testing.assert_allclose(He[:, 2], XS**3 - 3 * XS, atol=1e-12)
    np.testing.assert_allclose(He[:, 3], XS**4 - 6 * XS**2 + 3, atol=1e-12)
    for n in range(1, 7):
        np.testing.assert_allclose(He[:, n - 1], sp.eval_hermitenorm(n, XS), atol=1e-10)
    H = per_degree(E.hermite(x.unsqueeze(0), d=5, kind="physicist"), len(XS))[0].numpy()
    for n in range(1, 6):
        np.testing.assert_allclose(H[:, n - 1], sp.eval_hermite(n, XS), atol=1e-9)
        # H_n(x) = 2^{n/2} He_n(sqrt(2) x)  (eq 123)
        np.testing.assert_allclose(H[:, n - 1], 2 ** (n / 2) * sp.eval_hermitenorm(n, math.sqrt(2) * XS), atol=1e-9)


def test_legendre_closed_forms_and_orthogonality():
    x = t(XS)
    P = per_degree(E.legendre(x, d=3), len(XS)).numpy()
    np.testing.assert_allclose(P[:, 1], (3 * XS**2 - 1) / 2, atol=1e-12)
    np.testing.assert_allclose(P[:, 2], (5 * XS**3 - 3 * XS) / 2, atol=1e-12)
    nodes, weights = np.polynomial.legendre.leggauss(20)
    d = 7
    V = per_degree(E.legendre(t(nodes), d=d), len(nodes)).numpy()   # [q, d]
    gram = V.T @ (weights[:, None] * V)
    np.testing.assert_allclose(gram, np.diag([2.0 / (2 * n + 1) for n in range(1, d + 1)]), atol=1e-12)


def test_chebyshev_cosine_identity_and_second_kind():
    theta = np.linspace(0.05, 3.1, 17)
    T = per_degree(E.chebyshev(t(np.cos(theta)), d=8), len(theta)).numpy()
    for n in range(1, 9):
        np.testing.assert_allclose(T[:, n - 1], np.cos(n * theta), atol=1e-12)
    U = per_degree(E.chebyshev(t(XS), d=6, kind=2), len(XS)).numpy()
    for n in range(1, 7):
        np.testing.assert_allclose(U[:, n - 1], sp.eval_chebyu(n, XS), atol=1e-9)


def test_fibonacci_lucas_worked_examples():
    x = t(XS)
    F = per_degree(E.fibonacci(x, d=5), len(XS)).numpy()
    L = per_degree(E.lucas(x, d=5), len(XS)).numpy()
    X = XS
    for got, want in zip(F.T, [np.ones_like(X), X, X**2 + 1, X**3 + 2 * X, X**4 + 3 * X**2 + 1]):
        np.testing.assert_allclose(got, want, atol=1e-12)
    for got, want in zip(L.T, [X, X**2 + 2, X**3 + 3 * X, X**4 + 4 * X**2 + 2, X**5 + 5 * X**3 + 5 * X]):
        np.testing.assert_allclose(got, want, atol=1e-12)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0, 2.5])
def test_laguerre_matches_scipy_and_paper_base_case(alpha):
    P = per_degree(E.laguerre(t(XS), d=6, alpha=alpha), len(XS)).numpy()
    np.testing.assert_allclose(P[:, 0], 1 + alpha - XS)            # eq (129), not the toolkit's 1 + alpha + x
    for n in range(1, 7):
        np.testing.assert_allclose(P[:, n - 1], sp.eval_genlaguerre(n, alpha, XS), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, -0.5), (-0.3, 2.0), (2.0, 0.0)])
def test_jacobi_matches_scipy(alpha, beta):
    xs = np.linspace(-1, 1, 19)
    P = per_degree(E.jacobi(t(xs), d=6, alpha=alpha, beta=beta), len(xs)).numpy()
    for n in range(1, 7):
        np.testing.assert_allclose(P[:, n - 1], sp.eval_jacobi(n, alpha, beta, xs), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("alpha", [0.25, 0.5, 1.0, 3.0])
def test_gegenbauer_matches_scipy_and_special_cases(alpha):
    C = per_degree(E.gegenbauer(t(XS), d=6, alpha=alpha), len(XS)).numpy()
    for n in range(1, 7):
        np.testing.assert_allclose(C[:, n - 1], sp.eval_gegenbauer(n, alpha, XS), rtol=1e-10, atol=1e-10)
    x = t(XS)
    torch.testing.assert_close(E.gegenbauer(x, d=5, alpha=0.5), E.legendre(x, d=5))
    torch.testing.assert_close(E.gegenbauer(x, d=5, alpha=1.0), E.chebyshev(x, d=5, kind=2))


def test_bessel_and_reverse_bessel_closed_forms():
    X = np.linspace(0.3, 1.8, 9)
    B = per_degree(E.bessel(t(X), d=5), len(X)).numpy()
    R = per_degree(E.reverse_bessel(t(X), d=5), len(X)).numpy()
    for n in range(1, 6):
        coef = [math.factorial(n + k) / (math.factorial(n - k) * math.factorial(k)) for k in range(n + 1)]
        b = sum(c * (X / 2) ** k for k, c in enumerate(coef))                     # eq (140)
        r = sum(c * X ** (n - k) / 2**k for k, c in enumerate(coef))             # eq (141)
        np.testing.assert_allclose(B[:, n - 1], b, rtol=1e-12)
        np.testing.assert_allclose(R[:, n - 1], r, rtol=1e-12)
        b_inv = sum(c * (1 / X / 2) ** k for k, c in enumerate(coef))
        np.testing.assert_allclose(R[:, n - 1], X**n * b_inv, rtol=1e-12)        # R_n(x) = x^n B_n(1/x)


def test_polynomial_layout_is_attribute_major():
    x = t([[0.3, -0.7, 1.1]])
    y = E.hermite(x, d=3)
    assert y.shape == (1, 9)
    for i in range(3):
        xi = x[0, i].item()
        torch.testing.assert_close(y[0, 3 * i: 3 * i + 3], t([xi, xi**2 - 1, xi**3 - 3 * xi]))


# ----------------------------------------------------------------------------------------------------------------------
# B-spline
# ----------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("G,k,lo,hi", [(5, 3, -1.0, 1.0), (4, 2, 0.0, 2.0), (7, 1, -3.0, 1.0), (3, 0, -1.0, 1.0)])
def test_bspline_partition_of_unity_and_scipy(G, k, lo, hi):
    xs = np.linspace(lo, hi, 41)[:-1] + 1e-9
    y = per_degree(E.bspline(t(xs), grid_size=G, order=k, grid_range=(lo, hi)), len(xs)).numpy()
    assert y.shape == (len(xs), G + k)
    np.testing.assert_allclose(y.sum(-1), 1.0, atol=1e-12)
    assert (y >= -1e-15).all()
    h = (hi - lo) / G
    knots = lo + (np.arange(G + 2 * k + 1) - k) * h
    ref = BSpline.design_matrix(xs, knots, k).toarray()
    np.testing.assert_allclose(y, ref, atol=1e-12)
    far = per_degree(E.bspline(t([lo - (k + 1.5) * h, hi + (k + 1.5) * h]), grid_size=G, order=k,
                               grid_range=(lo, hi)), 2).numpy()
    np.testing.assert_array_equal(far, 0.0)


# ----------------------------------------------------------------------------------------------------------------------
# Taylor, Fourier, trig families, RBF
# ----------------------------------------------------------------------------------------------------------------------


def test_taylor_kronecker_order_and_dims():
    x = t([[1.5, -2.0, 3.0]])
    y = E.taylor(x, d=3)
    assert y.shape[-1] == 3 + 9 + 27 == E.EXPANSIONS["taylor"].dim(3, d=3)
    torch.testing.assert_close(y[0, :3], x[0])
    torch.testing.assert_close(y[0, 3:12], torch.kron(x[0], x[0]))
    torch.testing.assert_close(y[0, 12:], torch.kron(torch.kron(x[0], x[0]), x[0]))
    assert y[0, 3 + 0 * 3 + 1] == x[0, 0] * x[0, 1]                      # index i*m + j
    torch.testing.assert_close(E.taylor(x, d=1), x)


@settings(max_examples=40, deadline=None)
@given(m=hs.integers(1, 5), n=hs.integers(1, 6), d=hs.integers(1, 3), lead=hs.lists(hs.integers(1, 3), max_size=2),
       bias=hs.booleans(), seed=hs.integers(0, 2**16))
def test_taylor_reconcile_is_kappa_then_linear_without_kappa(m, n, d, lead, bias, seed):
    """Per-degree ψ blocks: taylor(x)·Wᵀ + b, values and gradients (x, W, b), for any leading axes."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*lead, m, dtype=F64, generator=g, requires_grad=True)
    w = torch.randn(n, E.EXPANSIONS["taylor"].dim(m, d=d), dtype=F64, generator=g, requires_grad=True)
    b = torch.randn(n, dtype=F64, generator=g, requires_grad=True) if bias else None
    want = torch.nn.functional.linear(E.taylor(x, d=d), w, b)
    got = E.taylor_reconcile(x, w, b, d=d)
    torch.testing.assert_close(got, want)
    inputs = [x, w] + ([b] if bias else [])
    gy = torch.randn(want.shape, dtype=F64, generator=g)
    for a, e in zip(torch.autograd.grad(got, inputs, gy), torch.autograd.grad(want, inputs, gy)):
        torch.testing.assert_close(a, e)


def test_taylor_reconcile_refuses_a_weight_of_the_wrong_width():
    with pytest.raises(ValueError, match="W has 11 columns, κ has 12"):
        E.taylor_reconcile(randn(2, 3), randn(4, 11), d=2)


def test_taylor_symmetric_unique_monomials():
    m, d = 4, 3
    x = rand(2, m) + 0.5
    ys = E.taylor(x, d=d, symmetric=True)
    want_D = sum(math.comb(m + k - 1, k) for k in range(1, d + 1))
    assert ys.shape[-1] == want_D == E.EXPANSIONS["taylor"].dim(m, d=d, symmetric=True)
    # degree-2 block: x_i x_j for i <= j in lexicographic order
    pairs = [(i, j) for i in range(m) for j in range(i, m)]
    torch.testing.assert_close(ys[:, m:m + len(pairs)], torch.stack([x[:, i] * x[:, j] for i, j in pairs], -1))
    # same monomials as the full Kronecker powers, each once
    yf = E.taylor(x, d=d)
    np.testing.assert_allclose(np.unique(np.round(yf[0].numpy(), 12)), np.unique(np.round(ys[0].numpy(), 12)))


def test_fourier_values_and_layouts():
    x = t([[0.3, -1.2]])
    y = E.fourier(x, P=4.0, N=3)
    assert y.shape == (1, 12)
    yy = y.reshape(1, 2, 3, 2)
    for i in range(2):
        for n in range(1, 4):
            a = 2 * math.pi * n * x[0, i].item() / 4.0
            assert yy[0, i, n - 1, 0].item() == pytest.approx(math.cos(a))
            assert yy[0, i, n - 1, 1].item() == pytest.approx(math.sin(a))
    # toolkit (block-major) layout: [cos_1(x), sin_1(x), cos_2(x), ...] each m wide
    blk = E.attribute_to_block(y, 6)
    torch.testing.assert_close(blk[0, :2], torch.cos(2 * math.pi * x[0] / 4.0))
    torch.testing.assert_close(blk[0, 2:4], torch.sin(2 * math.pi * x[0] / 4.0))
    torch.testing.assert_close(E.block_to_attribute(blk, 6), y)


def test_trig_and_hyperbolic_families():
    x = t([[0.4, -0.9]])
    torch.testing.assert_close(E.hyperbolic(x).reshape(2, 3), torch.stack([x[0].sinh(), x[0].cosh(), x[0].tanh()], -1))
    torch.testing.assert_close(E.trigonometric(x).reshape(2, 3), torch.stack([x[0].sin(), x[0].cos(), x[0].tan()], -1))
    s = torch.sigmoid(x[0])
    torch.testing.assert_close(E.arc_hyperbolic(x).reshape(2, 3),
                               torch.stack([s.asinh(), (s + 1.01).acosh(), (0.99 * s).atanh()], -1))
    torch.testing.assert_close(E.arc_trigonometric(x).reshape(2, 3),
                               torch.stack([(0.99 * s).asin(), (0.99 * s).acos(), s.atan()], -1))
    z = t([[0.3, -0.5]])
    torch.testing.assert_close(E.arc_trigonometric(z, squash=False).reshape(2, 3),
                               torch.stack([z[0].asin(), z[0].acos(), z[0].atan()], -1))
    assert torch.isfinite(E.arc_hyperbolic(t([[-40.0, 40.0]]))).all()


def test_rbf_values():
    x = t([[0.25]])
    c = np.linspace(-1, 1, 5)
    g = E.gaussian_rbf(x, num_centres=5, sigma=0.5)
    q = E.inverse_quadratic_rbf(x, num_centres=5, sigma=0.5)
    np.testing.assert_allclose(g[0].numpy(), np.exp(-(((0.25 - c) / 0.5) ** 2)))
    np.testing.assert_allclose(q[0].numpy(), 1 / (1 + ((0.25 - c) / 0.5) ** 2))
    cc = t([0.0, 2.0])
    np.testing.assert_allclose(E.gaussian_rbf(x, centres=cc)[0].numpy(), np.exp(-(np.array([0.25, -1.75]) ** 2)))
    assert E.EXPANSIONS["gaussian_rbf"].dim(3, centres=cc) == 6


# ----------------------------------------------------------------------------------------------------------------------
# Probabilistic and combinatorial
# ----------------------------------------------------------------------------------------------------------------------


def _squash(v):
    return 0.99 / (1 + np.exp(-v)) + 0.001


def test_probabilistic_families_match_scipy():
    X = np.linspace(-2.5, 2.5, 11)
    x = t(X)
    refs = {
        "normal": lambda p, v: st.norm.logpdf(v, p[0], p[1]),
        "cauchy": lambda p, v: st.cauchy.logpdf(v, p[0], p[1]),
        "laplace": lambda p, v: st.laplace.logpdf(v, p[0], p[1]),
        "chi2": lambda p, v: st.chi2.logpdf(_squash(v), p[0]),
        "gamma": lambda p, v: st.gamma.logpdf(_squash(v), p[0], scale=1 / p[1]),
        "exponential": lambda p, v: st.expon.logpdf(_squash(v), scale=1 / p[0]),
    }
    for dist, ref in refs.items():
        fam = E.PROB_FAMILIES[dist]
        y = per_degree(E.EXPANSIONS[dist].fn(x), len(X)).numpy()
        assert y.shape == (len(X), len(fam))
        for j, p in enumerate(fam):
            np.testing.assert_allclose(y[:, j], ref(p, X), rtol=1e-10, atol=1e-10, err_msg=f"{dist} {p}")
        naive = E.EXPANSIONS[f"naive_{dist}"].fn(x).numpy()
        np.testing.assert_allclose(naive, ref(fam[0], X), rtol=1e-10)
    h = per_degree(E.hybrid_probabilistic(x), len(X)).numpy()
    want = [st.norm.logpdf(X), st.cauchy.logpdf(X), st.chi2.logpdf(_squash(X), 1), st.gamma.logpdf(_squash(X), 0.5),
            st.laplace.logpdf(X), st.expon.logpdf(_squash(X))]
    np.testing.assert_allclose(h, np.stack(want, -1), rtol=1e-10)


def test_combinatorial_tuples_layout():
    x = t([[10.0, 20.0, 30.0, 40.0]])
    y = E.combinatorial(x, d=2)
    pairs = [(a, b) for a in range(4) for b in range(a + 1, 4)]
    want = [10, 20, 30, 40] + [v for a, b in pairs for v in (x[0, a].item(), x[0, b].item())]
    np.testing.assert_allclose(y[0].numpy(), want)
    assert y.shape[-1] == E.EXPANSIONS["combinatorial"].dim(4, d=2) == 4 + 2 * 6
    assert E.combinatorial(x, d=2, with_replacement=True).shape[-1] == 4 + 2 * 10


@pytest.mark.parametrize("rho", [0.0, 0.4, -0.2])
def test_combinatorial_normal_matches_torch_mvn(rho):
    m, d, loc, scale = 4, 3, 0.3, 1.7
    x = randn(5, m)
    y = E.combinatorial_normal(x, d=d, loc=loc, scale=scale, rho=rho)
    assert y.shape == (5, E.EXPANSIONS["combinatorial_normal"].dim(m, d=d)) == (5, 4 + 6 + 4)
    col = 0
    for r in range(1, d + 1):
        cov = scale**2 * ((1 - rho) * torch.eye(r, dtype=F64) + rho * torch.ones(r, r, dtype=F64))
        mvn = torch.distributions.MultivariateNormal(torch.full((r,), loc, dtype=F64), covariance_matrix=cov)
        for comb in E.combination_index(m, r).tolist():
            torch.testing.assert_close(y[:, col], mvn.log_prob(x[:, comb]))
            col += 1
    assert col == y.shape[-1]
    # d = 1, standard: the naive normal expansion (toolkit default)
    torch.testing.assert_close(E.combinatorial_normal(x), E.EXPANSIONS["naive_normal"].fn(x))


# ----------------------------------------------------------------------------------------------------------------------
# Wavelets
# ----------------------------------------------------------------------------------------------------------------------


def test_wavelet_mother_known_values():
    np.testing.assert_array_equal(E.haar(t([-0.1, 0.0, 0.25, 0.5, 0.75, 1.0, 1.2])).numpy(), [0, 1, 1, -1, -1, 0, 0])
    sig = 1.3
    assert E.ricker(t([0.0]), sigma=sig).item() == pytest.approx(2 / (math.sqrt(3 * sig) * math.pi**0.25))
    assert E.ricker(t([sig]), sigma=sig).item() == pytest.approx(0.0, abs=1e-15)
    assert E.shannon(t([0.0])).item() == pytest.approx(1.0)
    assert E.shannon(t([0.5])).item() == pytest.approx(-2 / math.pi)
    z = np.array([0.3, -1.7, 2.2])
    np.testing.assert_allclose(E.shannon(t(z)).numpy(), (np.sin(2 * np.pi * z) - np.sin(np.pi * z)) / (np.pi * z))
    assert E.meyer(t([0.0])).item() == pytest.approx(2 / 3 + 4 / (3 * math.pi))
    assert E.dog(t([0.0]), sigma_1=1.0, sigma_2=2.0).item() == pytest.approx((1 - 0.5) / math.sqrt(2 * math.pi))
    assert E.beta_mother(t([0.0]), alpha=2.0, beta=2.0).item() == pytest.approx(1.5)       # 6·u(1-u) at u = 1/2
    np.testing.assert_allclose(E.beta_mother(t([0.2, 1.5]), alpha=2.0, beta=3.0, domain="support").numpy(),
                               [12 * 0.2 * 0.8**2, 0.0])


def _meyer_direct(z):
    return (np.sin(2 * np.pi * z / 3) + 4 / 3 * z * np.cos(4 * np.pi * z / 3)) / (np.pi * z - 16 * np.pi / 9 * z**3)


def test_meyer_removable_singularities():
    z = np.array([0.1, -0.4, 0.7, 0.8, -1.3, 2.5])
    np.testing.assert_allclose(E.meyer(t(z)).numpy(), _meyer_direct(z), rtol=1e-12)
    # |tau| = 3/4 is 0/0 in eq (157): limit 2/(3π), continuous from both sides, in float64 and float32
    for dt, tol in ((torch.float64, 1e-9), (torch.float32, 2e-4)):
        pts = torch.tensor([0.75, -0.75], dtype=dt)
        v = E.meyer(pts)
        assert torch.isfinite(v).all()
        np.testing.assert_allclose(v.double().numpy(), 2 / (3 * math.pi), rtol=tol)
        for delta in (1e-2, 3e-3, 1e-3, 1e-4, 1e-5):
            zz = np.array([0.75 - delta, 0.75 + delta, -0.75 + delta])
            got = E.meyer(torch.tensor(zz, dtype=dt)).double().numpy()
            np.testing.assert_allclose(got, _meyer_direct(zz.astype(np.float64)), rtol=5 * tol, atol=5 * tol)
    g = torch.tensor([0.75, 0.0], dtype=F64, requires_grad=True)
    E.meyer(g).sum().backward()
    assert torch.isfinite(g.grad).all()


def test_shannon_gradient_at_zero_is_finite():
    g = torch.tensor([0.0, 0.5], dtype=F64, requires_grad=True)
    E.shannon(g).sum().backward()
    assert torch.isfinite(g.grad).all()


def test_child_wavelet_matches_eq_151_and_layout():
    a, b, s, tt = 2.0, 0.5, 3, 2
    x = t([[0.7, -0.4]])
    y = E.wavelet(x, mother="ricker", a=a, b=b, s=s, t=tt, sigma=0.8)
    assert y.shape == (1, 2 * s * tt)
    yy = y.reshape(2, s, tt)
    for i in range(2):
        for si in range(s):
            for ti in range(tt):
                arg = (x[0, i].item() - ti * b * a**si) / a**si
                want = a ** (-si / 2) * E.ricker(t([arg]), sigma=0.8).item()
                assert yy[i, si, ti].item() == pytest.approx(want, rel=1e-12)


def test_wavelet_order2_kron_vs_concat():
    x = randn(3, 2)
    k1 = E.wavelet(x, mother="meyer", s=2, t=2)
    D1 = k1.shape[-1]
    kron = E.wavelet(x, mother="meyer", s=2, t=2, d=2)
    assert kron.shape[-1] == D1**2 == E.EXPANSIONS["meyer_wavelet"].dim(2, s=2, t=2, d=2)
    torch.testing.assert_close(kron, (k1.unsqueeze(-1) * k1.unsqueeze(-2)).flatten(-2))
    torch.testing.assert_close(kron[1], torch.kron(k1[1], k1[1]))
    cat = E.wavelet(x, mother="meyer", s=2, t=2, d=2, order2="concat")
    assert cat.shape[-1] == D1 + D1**2 == E.EXPANSIONS["meyer_wavelet"].dim(2, s=2, t=2, d=2, order2="concat")
    torch.testing.assert_close(cat[:, :D1], k1)
    torch.testing.assert_close(cat[:, D1:], kron)
    assert not E.EXPANSIONS["meyer_wavelet"].is_elementwise(d=2)
    assert E.EXPANSIONS["meyer_wavelet"].is_elementwise(d=1)


def test_beta_wavelet_is_elementwise_unlike_toolkit():
    # the toolkit sigmoids the whole batch when any tau leaves [0, 1]; ours never couples entries
    a = E.EXPANSIONS["beta_wavelet"].fn
    x1 = t([[0.3, 0.6]])
    x2 = t([[0.3, 5.0]])
    torch.testing.assert_close(a(x1, alpha=2.0, beta=3.0)[0, 0], a(x2, alpha=2.0, beta=3.0)[0, 0])


# ----------------------------------------------------------------------------------------------------------------------
# Basic, composition
# ----------------------------------------------------------------------------------------------------------------------


def test_reciprocal_safe_and_not_in_place():
    x = t([0.0, 1e-9, -1e-9, 2.0, -4.0])
    x0 = x.clone()
    y = E.reciprocal(x)
    torch.testing.assert_close(x, x0)
    np.testing.assert_allclose(y.numpy(), [1e6, 1e6, -1e6, 0.5, -0.25])
    torch.testing.assert_close(E.reciprocal(t([0.0, 0.0])), t([1e6, 1e6]))


def test_linear():
    x = randn(4, 3)
    C = randn(3, 5)
    torch.testing.assert_close(E.linear(x, C=C), x @ C)
    torch.testing.assert_close(E.linear(x, c=2.5), 2.5 * x)
    assert E.EXPANSIONS["linear"].dim(3, C=C) == 5
    assert E.EXPANSIONS["linear"].is_elementwise(c=2.0) and not E.EXPANSIONS["linear"].is_elementwise(C=C)
    with pytest.raises(ValueError):
        E.linear(x, C=randn(4, 2))


def test_extended_and_nested():
    x = randn(2, 3)
    parts = [("hermite", {"d": 2}), ("fourier", {"N": 1, "P": 2.0})]
    y = E.extended(x, parts=parts)
    torch.testing.assert_close(y, torch.cat([E.hermite(x, d=2), E.fourier(x, N=1, P=2.0)], -1))
    assert y.shape[-1] == E.EXPANSIONS["extended"].dim(3, parts=parts) == 6 + 6
    z = E.nested(x, parts=parts)
    torch.testing.assert_close(z, E.fourier(E.hermite(x, d=2), N=1, P=2.0))
    assert z.shape[-1] == E.EXPANSIONS["nested"].dim(3, parts=parts) == 12
    assert E.EXPANSIONS["nested"].is_elementwise(parts=parts)
    assert not E.EXPANSIONS["nested"].is_elementwise(parts=[("taylor", {"d": 2})])


def test_bad_hyper_parameters_raise():
    x = randn(2, 3)
    for f, kw in [(E.hermite, {"d": 0}), (E.bspline, {"grid_size": 0}), (E.wavelet, {"order2": "x", "d": 2}),
                  (E.wavelet, {"mother": "nope"}), (E.wavelet, {"mother": "haar", "sigma": 1.0}),
                  (E.jacobi, {"alpha": -2.0}), (E.gaussian_rbf, {"sigma": 0.0}), (E.taylor, {"d": 1.5})]:
        with pytest.raises(ValueError):
            f(x, **kw)


# ----------------------------------------------------------------------------------------------------------------------
# Registry-wide properties: dims, elementwise flag, kappa(0), dtype, gradients
# ----------------------------------------------------------------------------------------------------------------------


def hp_for(name: str, m: int, d: int, flag: bool = False) -> dict:
    """Hyper-parameters exercising ``name`` with 'degree' d (1..3)."""
    poly = {"chebyshev": {"kind": 1 + flag}, "jacobi": {"alpha": 0.5, "beta": 1.5}, "hermite": {},
            "laguerre": {"alpha": 0.7}, "legendre": {}, "gegenbauer": {"alpha": 1.5}, "bessel": {},
            "reverse_bessel": {}, "fibonacci": {}, "lucas": {}}
    if name in poly:
        return {"d": d, **poly[name]}
    wave_own = {"beta_wavelet": {"alpha": 2.0, "beta": 3.0}, "ricker_wavelet": {"sigma": 0.9},
                "dog_wavelet": {"sigma_1": 0.8, "sigma_2": 1.6}}
    if name.endswith("_wavelet"):
        return {"s": d, "t": 2, "a": 2.0, "b": 0.5, "d": 1 + flag, **wave_own.get(name, {})}
    table = {
        "identity": {}, "reciprocal": {}, "hyperbolic": {}, "arc_hyperbolic": {}, "trigonometric": {},
        "arc_trigonometric": {}, "hybrid_probabilistic": {},
        "linear": {"C": torch.linspace(-1, 1, m * (d + 1), dtype=F64).reshape(m, d + 1)},
        "taylor": {"d": d, "symmetric": flag},
        "fourier": {"N": d, "P": 3.0},
        "gaussian_rbf": {"num_centres": d + 1, "sigma": 0.7},
        "inverse_quadratic_rbf": {"num_centres": d + 2, "grid_range": (-2.0, 1.0)},
        "combinatorial": {"d": min(d, m), "with_replacement": flag},
        "combinatorial_normal": {"d": min(d, m), "rho": 0.3 if flag else 0.0},
        "bspline": {"grid_size": d + 1, "order": d},
        "wavelet": {"mother": "dog", "s": 2, "t": d, "d": 1 + flag, "order2": "concat"},
        "extended": {"parts": [("legendre", {"d": d}), ("trigonometric", {})]},
        "nested": {"parts": [("legendre", {"d": d}), ("gaussian_rbf", {"num_centres": 2})]},
    }
    if name in table:
        return table[name]
    if name.startswith("naive_"):
        return {}
    return {"params": E.PROB_FAMILIES[name][:d]}      # probabilistic families


NAMES = sorted(E.EXPANSIONS)


@settings(max_examples=80, deadline=None)
@given(name=hs.sampled_from(NAMES), m=hs.integers(1, 5), d=hs.integers(1, 3), b=hs.integers(1, 3),
       flag=hs.booleans())
def test_dims_follow_dim_rule(name, m, d, b, flag):
    spec = E.EXPANSIONS[name]
    hp = hp_for(name, m, d, flag)
    x = rand(b, 2, m) * 1.6 - 0.8
    y = spec.fn(x, **hp)
    assert y.shape == (b, 2, spec.dim(m, **hp))
    assert y.dtype == x.dtype


@settings(max_examples=60, deadline=None)
@given(name=hs.sampled_from(NAMES), m=hs.integers(2, 5), d=hs.integers(1, 3), flag=hs.booleans(),
       seed=hs.integers(0, 2**16))
def test_elementwise_flag_means_commutes_with_gather(name, m, d, flag, seed):
    spec = E.EXPANSIONS[name]
    hp = hp_for(name, m, d, flag)
    if not spec.is_elementwise(**hp) or name == "linear":
        return
    g = torch.Generator().manual_seed(seed)
    x = rand(3, m, generator=g) * 1.6 - 0.8
    idx = torch.randint(0, m, (m + 2,), generator=g)       # a gather (with repeats) on the attribute axis
    k = spec.width(**hp)
    y = spec.fn(x, **hp)
    gathered = y.unflatten(-1, (m, k))[:, idx].flatten(-2)
    torch.testing.assert_close(spec.fn(x[:, idx], **hp), gathered)


_ZERO_PRESERVING = ("identity", "linear", "taylor", "combinatorial")  # κ(0) = 0 for every hyper-parameter choice


def test_value_at_zero():
    zero = torch.zeros(3, dtype=F64)
    for name in _ZERO_PRESERVING:
        assert torch.count_nonzero(E.EXPANSIONS[name].fn(zero, **hp_for(name, 3, 2))) == 0, name
    # nonzero-at-zero examples from the catalog (§2.1.2)
    zero = torch.zeros(1, dtype=F64)
    assert E.hermite(zero, d=2).tolist() == [0.0, -1.0]
    assert E.laguerre(zero, d=1, alpha=0.5).tolist() == [1.5]
    assert E.bessel(zero, d=3).tolist() == [1.0, 1.0, 1.0]
    assert E.fibonacci(zero, d=1).tolist() == [1.0]
    assert E.lucas(zero, d=2).tolist() == [0.0, 2.0]


def test_float32_in_float32_out():
    x = torch.randn(2, 3, dtype=torch.float32)
    for name in NAMES:
        hp = hp_for(name, 3, 2)
        if name == "linear":
            hp = {"C": hp["C"].float()}
        assert E.EXPANSIONS[name].fn(x, **hp).dtype == torch.float32, name


@pytest.mark.parametrize("name", [n for n in NAMES if n != "haar_wavelet"])  # haar: piecewise constant
def test_gradcheck(name):
    spec = E.EXPANSIONS[name]
    g = torch.Generator().manual_seed(7)
    mag = rand(2, 3, generator=g) * 0.7 + 0.15
    sign = torch.where(rand(2, 3, generator=g) < 0.5, -1.0, 1.0).to(F64)
    x = (mag * sign).requires_grad_(True)
    hp = hp_for(name, 3, 2, flag=True) if name != "wavelet" else hp_for(name, 3, 2)
    assert torch.autograd.gradcheck(lambda v: spec.fn(v, **hp), (x,), eps=1e-6, atol=1e-5, rtol=1e-4)


# ------------------------------------------------------------------------------------------------ grid layout
_STACKING = sorted(k for k, spec in E.EXPANSIONS.items() if spec.stacks_degrees)


@settings(max_examples=25, deadline=None)
@given(name=hs.sampled_from(_STACKING), d=hs.integers(1, 4), c=hs.integers(1, 3), h=hs.integers(1, 4),
       seed=hs.integers(0, 2**16))
def test_degrees_stacked_at_an_axis_equal_the_flat_basis_moved_there(name, d, c, h, seed):
    """fn(x, axis=2) is the conv layout [B, C, d, *S] of the flat basis, computed without a layout copy."""
    x = torch.randn(2, c, h, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) * 0.7
    fn = E.EXPANSIONS[name].fn
    flat = fn(x.unsqueeze(-1), d=d).movedim(-1, 2)
    stacked = fn(x, d=d, axis=2)
    torch.testing.assert_close(stacked, flat, rtol=1e-12, atol=1e-12)
    assert stacked.is_contiguous() and stacked.shape == (2, c, d, h, 3)


def test_the_three_term_families_all_stack_their_degrees():
    assert set(_STACKING) == {"chebyshev", "jacobi", "hermite", "laguerre", "legendre", "gegenbauer", "bessel",
                              "reverse_bessel", "fibonacci", "lucas"}


def test_combination_index_made_while_torch_export_traces_is_not_reused_eagerly():
    """The index is cached as tuples, not as a tensor: one made under the trace is fake, and an eager call after an
    export (``rpn2c export`` runs the module to check the program) received it and raised."""
    from rpn2c.functional.expansion import combination_index

    class Pairs(torch.nn.Module):
        def forward(self, x):
            return x[..., combination_index(7, 2)].prod(-1)

    x = torch.randn(3, 7, dtype=torch.float64)
    torch.export.export(Pairs(), (x,))
    want = torch.stack([x[:, i] * x[:, j] for i in range(7) for j in range(i + 1, 7)], -1)
    assert torch.equal(Pairs()(x), want)
