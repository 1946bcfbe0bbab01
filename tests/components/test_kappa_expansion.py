"""Expansion κ entries: gradients (float64 gradcheck), κ(0), closed forms and textbook identities, pinned errata.

Conventions checked here: Hermite is the probabilists' He_n by default (He_3 = x³ − 3x), the physicists' H_n with
kind = "physicist" (H_3 = 8x³ − 12x); Laguerre is the generalized L_n^{(α)} with L_1 = 1 + α − x; Jacobi and
Gegenbauer are scipy's; Bessel y_n and reverse Bessel θ_n are Grosswald's; every polynomial family starts at order 1.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special as sp
import scipy.stats as sst
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from rpn2c.components.registry import REGISTRY, all_entries
from rpn2c.lower.literal_forms import literal

F64 = torch.float64


def kappa(name: str, **hp):
    entry = REGISTRY["expansion"][name]
    return entry.cls(entry.schema(**hp))


def apply(name: str, x: torch.Tensor, **hp) -> torch.Tensor:
    """κ on flat features [..., m] through the built module (the code path both lowerings use)."""
    k = kappa(name, **hp)
    return k.build((x.shape[-1],)).to(F64)(x)


def basis(name: str, x: torch.Tensor, **hp) -> torch.Tensor:
    """[..., m] -> [..., m, degree] for an elementwise κ."""
    k = kappa(name, **hp)
    assert k.elementwise
    return apply(name, x, **hp).unflatten(-1, (x.shape[-1], k.degree()))


XS = torch.linspace(-1.7, 1.9, 23, dtype=F64)


# ------------------------------------------------------------------------------------------------ gradients
GRAD_CASES = [
    ("identity", {}), ("reciprocal", {"eps": 0.05}), ("linear", {"c": -2.0}),
    ("linear", {"C": [[1.0, 0.5], [2.0, 0.0], [-1.0, 1.0]]}), ("taylor", {"d": 3}), ("taylor", {"symmetric": True}),
    ("fourier", {"N": 2, "P": 3.0}), ("trigonometric", {}), ("hyperbolic", {"functions": ["tanh", "sinh"]}),
    ("arc_trigonometric", {}), ("arc_hyperbolic", {}), ("arc_hyperbolic", {"squash": False, "functions": ["asinh"]}),
    ("rbf", {"kind": "inverse_quadratic", "num_centres": 3}), ("gaussian_rbf", {"num_centres": 4}),
    ("inverse_quadratic_rbf", {"centres": [0.0, 0.3]}),
    ("naive_probabilistic", {"dist": "cauchy"}), ("naive_normal", {}), ("naive_cauchy", {}), ("naive_chi2", {}),
    ("naive_gamma", {}), ("naive_laplace", {"params": [3.0, 1.0]}), ("naive_exponential", {}),
    ("probabilistic", {"dist": "gamma"}), ("probabilistic_normal", {}), ("probabilistic_cauchy", {}),
    ("probabilistic_chi2", {}), ("probabilistic_gamma", {}), ("probabilistic_laplace", {"params": [[5.0, 1.0]]}),
    ("probabilistic_exponential", {}), ("hybrid_probabilistic", {}), ("combinatorial", {"d": 3}),
    ("combinatorial_normal", {"d": 2, "rho": 0.4}), ("bspline", {}), ("bspline", {"grid": 2, "order": 2}),
    ("chebyshev", {"d": 4}), ("chebyshev", {"kind": 2}), ("jacobi", {"d": 3}), ("hermite", {"d": 4}),
    ("hermite", {"kind": "physicist"}), ("laguerre", {"d": 3}), ("legendre", {"d": 3}), ("gegenbauer", {"d": 3}),
    ("bessel", {"d": 3}), ("reverse_bessel", {"d": 3}), ("fibonacci", {"d": 4}), ("lucas", {"d": 4}),
    ("wavelet", {}), ("wavelet", {"mother": "meyer", "s": 2, "t": 2, "d": 2}), ("ricker_wavelet", {"sigma": 0.7}),
    ("shannon_wavelet", {"t": 2}), ("meyer_wavelet", {}), ("dog_wavelet", {"d": 2, "order2": "concat"}),
    ("beta_wavelet", {"alpha": 2.0, "beta": 3.0}), ("extended", {"parts": ["legendre", "taylor"]}),
    ("extended", {"parts": ["legendre", "fourier(N = 1)"]}), ("nested", {"parts": ["chebyshev", "hermite"]}),
    ("nested", {"parts": ["taylor", "combinatorial(d = 2)"]}),
]


def test_gradient_cases_cover_every_flat_expansion():
    grid_only = {e.name for e in all_entries() if e.family == "expansion" and e.cls.grid_only}
    assert {n for n, _ in GRAD_CASES} | grid_only | {"haar_wavelet"} == \
        {e.name for e in all_entries() if e.family == "expansion"}


@pytest.mark.parametrize("name,hp", GRAD_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(GRAD_CASES)])
def test_gradcheck(name, hp):
    g = torch.Generator().manual_seed(len(name))
    x = (torch.rand(2, 3, generator=g, dtype=F64) * 1.6 - 0.8).requires_grad_()
    mod = kappa(name, **hp).build((3,)).to(F64)
    assert torch.autograd.gradcheck(mod, (x,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name,hp,shape", [("patch_expansion", {"size": 2}, (1, 2, 4, 4)),
                                           ("cuboid_expansion", {"half": 1, "stride": 2}, (1, 2, 4, 3)),
                                           ("cylinder_expansion", {"radius": 1}, (1, 1, 4, 4)),
                                           ("sphere_expansion", {"radius": 1, "stride": 2}, (1, 1, 3, 3, 3))])
def test_gradcheck_patch_expansions(name, hp, shape):
    x = torch.randn(*shape, dtype=F64, generator=torch.Generator().manual_seed(0)).requires_grad_()
    for reference in (False, True):
        mod = kappa(name, **hp).build(shape[1:])
        mod = literal(mod) if reference else mod
        assert torch.autograd.gradcheck(lambda t: mod(t, grid=True), (x,))


def test_haar_is_piecewise_constant():
    x = torch.linspace(-1, 2, 13, dtype=F64).reshape(1, -1).requires_grad_()
    y = apply("haar_wavelet", x)
    assert not y.requires_grad  # no gradient path: d/dx = 0 almost everywhere (documented non-differentiable)


# ------------------------------------------------------------------------------------------------ κ(0)
def _elementwise_defaults():
    out = []
    for e in all_entries():
        if e.family != "expansion" or e.cls.grid_only:
            continue
        hp = {"parts": ["chebyshev", "fourier(N = 1)"]} if e.name in ("extended", "nested") else {}
        k = e.cls(e.schema(**hp))
        if k.elementwise:
            out.append((e.name, hp))
    return out


@pytest.mark.parametrize("name,hp", _elementwise_defaults(), ids=lambda v: v if isinstance(v, str) else "")
def test_value_at_zero_is_kappa_of_zero(name, hp):
    """Zero padding of a grid head reads κ(0): value_at_zero must equal κ applied to zeros, per attribute."""
    k = kappa(name, **hp)
    v = k.value_at_zero()
    y = apply(name, torch.zeros(2, 3, dtype=F64), **hp)
    torch.testing.assert_close(y, v.repeat(3).expand(2, -1), rtol=0, atol=0)
    assert torch.isfinite(v).all()


def test_known_values_at_zero():
    cases = {
        ("hermite", 4): [0.0, -1.0, 0.0, 3.0], ("legendre", 4): [0.0, -0.5, 0.0, 0.375],
        ("chebyshev", 4): [0.0, -1.0, 0.0, 1.0], ("bessel", 3): [1.0, 1.0, 1.0],
        ("reverse_bessel", 3): [1.0, 3.0, 15.0], ("fibonacci", 4): [1.0, 0.0, 1.0, 0.0],
        ("lucas", 4): [0.0, 2.0, 0.0, 2.0], ("laguerre", 2): [2.0, 3.0],  # α = 1: L_n^{(1)}(0) = n + 1
    }
    for (name, d), want in cases.items():
        torch.testing.assert_close(kappa(name, d=d).value_at_zero(), torch.tensor(want, dtype=F64))
    assert kappa("reciprocal").value_at_zero().item() == pytest.approx(1e6)
    torch.testing.assert_close(kappa("fourier", N=2).value_at_zero(), torch.tensor([1.0, 0, 1, 0], dtype=F64))
    assert kappa("meyer_wavelet").value_at_zero().item() == pytest.approx(2 / 3 + 4 / (3 * math.pi))
    assert kappa("naive_normal").value_at_zero().item() == pytest.approx(-0.5 * math.log(2 * math.pi))
    assert kappa("identity").value_at_zero().tolist() == [0.0]
    assert kappa("taylor", d=2).value_at_zero() is None  # not elementwise


# ------------------------------------------------------------------------------------------------ polynomials
def test_hermite_both_conventions():
    x = XS.reshape(-1, 1)
    he = basis("hermite", x, d=5)[:, 0]
    torch.testing.assert_close(he[:, 2], x[:, 0] ** 3 - 3 * x[:, 0])  # He_3 = x³ − 3x (probabilists', eq 124)
    h = basis("hermite", x, d=5, kind="physicist")[:, 0]
    torch.testing.assert_close(h[:, 2], 8 * x[:, 0] ** 3 - 12 * x[:, 0])  # H_3 = 8x³ − 12x
    for n in range(1, 6):
        np.testing.assert_allclose(he[:, n - 1], sp.eval_hermitenorm(n, XS.numpy()), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(h[:, n - 1], sp.eval_hermite(n, XS.numpy()), rtol=1e-12, atol=1e-10)


def test_legendre_orthogonality_by_quadrature():
    nodes, weights = np.polynomial.legendre.leggauss(12)
    p = basis("legendre", torch.tensor(nodes).reshape(-1, 1), d=5)[:, 0].numpy()  # [12, 5]
    gram = (p * weights[:, None]).T @ p
    np.testing.assert_allclose(gram, np.diag([2 / (2 * n + 1) for n in range(1, 6)]), atol=1e-12)


@settings(max_examples=20, deadline=None)
@given(st.floats(0.0, math.pi))
def test_chebyshev_trigonometric_identities(theta):
    x = torch.tensor([[math.cos(theta)]], dtype=F64)
    t = basis("chebyshev", x, d=6)[0, 0]
    u = basis("chebyshev", x, d=6, kind=2)[0, 0]
    for n in range(1, 7):
        assert t[n - 1].item() == pytest.approx(math.cos(n * theta), abs=1e-10)  # T_n(cos θ) = cos nθ
        assert u[n - 1].item() * math.sin(theta) == pytest.approx(math.sin((n + 1) * theta), abs=1e-9)


@pytest.mark.parametrize("alpha", [-0.5, 0.0, 1.0, 2.5])
def test_laguerre_matches_scipy_and_pins_the_toolkit_sign_bug(alpha):
    y = basis("laguerre", XS.reshape(-1, 1), d=4, alpha=alpha)[:, 0]
    for n in range(1, 5):
        np.testing.assert_allclose(y[:, n - 1], sp.eval_genlaguerre(n, alpha, XS.numpy()), rtol=1e-11, atol=1e-11)
    # erratum (catalog §8.8): tinyBIG's L_1 = 1 + α + x; the correct L_1 = 1 + α − x
    torch.testing.assert_close(y[:, 0], 1 + alpha - XS)
    assert not torch.allclose(y[:, 0], 1 + alpha + XS)


@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, 2.0), (-0.5, 0.0)])
def test_jacobi_matches_scipy(alpha, beta):
    y = basis("jacobi", XS.reshape(-1, 1), d=4, alpha=alpha, beta=beta)[:, 0]
    for n in range(1, 5):
        np.testing.assert_allclose(y[:, n - 1], sp.eval_jacobi(n, alpha, beta, XS.numpy()), rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 1.75])
def test_gegenbauer_matches_scipy_and_special_cases(alpha):
    x = XS.reshape(-1, 1)
    y = basis("gegenbauer", x, d=4, alpha=alpha)[:, 0]
    for n in range(1, 5):
        np.testing.assert_allclose(y[:, n - 1], sp.eval_gegenbauer(n, alpha, XS.numpy()), rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(basis("gegenbauer", x, d=4, alpha=0.5), basis("legendre", x, d=4))  # α = 1/2
    torch.testing.assert_close(basis("gegenbauer", x, d=4, alpha=1.0), basis("chebyshev", x, d=4, kind=2))


def test_bessel_and_reverse_bessel_closed_forms():
    x = XS
    b = basis("bessel", x.reshape(-1, 1), d=3)[:, 0]
    torch.testing.assert_close(b[:, 1], 3 * x**2 + 3 * x + 1)                       # y_2
    torch.testing.assert_close(b[:, 2], 15 * x**3 + 15 * x**2 + 6 * x + 1)         # y_3
    r = basis("reverse_bessel", x.reshape(-1, 1), d=3)[:, 0]
    torch.testing.assert_close(r[:, 1], x**2 + 3 * x + 3)                           # θ_2
    torch.testing.assert_close(r[:, 2], x**3 + 6 * x**2 + 15 * x + 15)             # θ_3
    # erratum (eq 143 prints B for R): the literal misprint R_3 = 5 B_2 + x² B_1 would give another polynomial
    misprint = 5 * (3 * x**2 + 3 * x + 1) + x**2 * (x + 1)
    assert not torch.allclose(r[:, 2], misprint)
    # θ_n(x) = x^n y_n(1/x)
    xs = torch.tensor([0.5, 2.0, -1.5], dtype=F64)
    y_inv = basis("bessel", (1 / xs).reshape(-1, 1), d=3)[:, 0]
    torch.testing.assert_close(basis("reverse_bessel", xs.reshape(-1, 1), d=3)[:, 0],
                               y_inv * torch.stack([xs, xs**2, xs**3], -1))


def test_fibonacci_and_lucas_sequences_at_one_and_worked_examples():
    one = torch.ones(1, 1, dtype=F64)
    assert basis("fibonacci", one, d=10)[0, 0].tolist() == [1, 1, 2, 3, 5, 8, 13, 21, 34, 55]
    assert basis("lucas", one, d=8)[0, 0].tolist() == [1, 3, 4, 7, 11, 18, 29, 47]
    x = XS
    f = basis("fibonacci", x.reshape(-1, 1), d=5)[:, 0]
    torch.testing.assert_close(f[:, 4], x**4 + 3 * x**2 + 1)  # F_5
    lu = basis("lucas", x.reshape(-1, 1), d=5)[:, 0]
    torch.testing.assert_close(lu[:, 4], x**5 + 5 * x**3 + 5 * x)  # L_5


def test_polynomial_layout_is_attribute_major():
    x = torch.tensor([[0.3, -0.7]], dtype=F64)
    y = apply("legendre", x, d=3)
    want = [x[0, 0], (3 * x[0, 0] ** 2 - 1) / 2, (5 * x[0, 0] ** 3 - 3 * x[0, 0]) / 2,
            x[0, 1], (3 * x[0, 1] ** 2 - 1) / 2, (5 * x[0, 1] ** 3 - 3 * x[0, 1]) / 2]
    torch.testing.assert_close(y[0], torch.stack(want))


def test_bspline_partition_of_unity_and_scipy():
    from scipy.interpolate import BSpline

    x = torch.linspace(-1, 0.999, 17, dtype=F64).reshape(-1, 1)
    y = basis("bspline", x, grid=4, order=3)[:, 0]
    torch.testing.assert_close(y.sum(-1), torch.ones(17, dtype=F64))
    h = 2 / 4
    knots = -1 + (np.arange(4 + 2 * 3 + 1) - 3) * h
    for j in range(7):
        ref = BSpline.basis_element(knots[j:j + 5], extrapolate=False)(x[:, 0].numpy())
        np.testing.assert_allclose(y[:, j], np.nan_to_num(ref), atol=1e-12)


def test_taylor_kronecker_and_symmetric():
    x = torch.tensor([[1.0, 2.0, 3.0]], dtype=F64)
    y = apply("taylor", x, d=2)
    torch.testing.assert_close(y[0, 3:], torch.outer(x[0], x[0]).reshape(-1))  # x⊗x, index i·m + j
    ys = apply("taylor", x, d=3, symmetric=True)
    assert ys.shape[-1] == 3 + 6 + 10 == kappa("taylor", d=3, symmetric=True).flat_out(3)
    assert kappa("taylor", d=3).flat_out(3) == 3 + 9 + 27


# ------------------------------------------------------------------------------------------------ other families
def test_fourier_and_trigonometric_values():
    x = torch.tensor([[0.25]], dtype=F64)
    y = apply("fourier", x, P=2.0, N=2)[0]  # [cos πx, sin πx, cos 2πx, sin 2πx] at x = 1/4
    torch.testing.assert_close(y, torch.tensor([math.cos(math.pi / 4), math.sin(math.pi / 4), 0.0, 1.0], dtype=F64))
    t = apply("trigonometric", torch.tensor([[0.4, -1.1]], dtype=F64), functions=["tan", "sin"])[0]
    torch.testing.assert_close(t, torch.tensor([math.tan(0.4), math.sin(0.4), math.tan(-1.1), math.sin(-1.1)],
                                               dtype=F64))
    h = apply("hyperbolic", torch.tensor([[0.5]], dtype=F64))[0]
    torch.testing.assert_close(h, torch.tensor([math.sinh(0.5), math.cosh(0.5), math.tanh(0.5)], dtype=F64))
    s = 1 / (1 + math.exp(-0.5))
    a = apply("arc_hyperbolic", torch.tensor([[0.5]], dtype=F64))[0]
    torch.testing.assert_close(a, torch.tensor([math.asinh(s), math.acosh(s + 1.01), math.atanh(0.99 * s)],
                                               dtype=F64))
    a = apply("arc_trigonometric", torch.tensor([[0.5]], dtype=F64))[0]
    torch.testing.assert_close(a, torch.tensor([math.asin(0.99 * s), math.acos(0.99 * s), math.atan(s)], dtype=F64))


def test_rbf_values_and_the_epsilon_spelling():
    x = torch.tensor([[0.2]], dtype=F64)
    c = torch.linspace(-1, 1, 5, dtype=F64)
    torch.testing.assert_close(apply("gaussian_rbf", x, num_centres=5, sigma=0.5)[0],
                               torch.exp(-((0.2 - c) / 0.5) ** 2))
    # tinyBIG multiplies by ε (its gaussian is exp(−(ε(x − c))²), not exp(−((x − c)/ε)²) as its notes say)
    torch.testing.assert_close(apply("gaussian_rbf", x, num_centres=5, epsilon=2.0),
                               apply("gaussian_rbf", x, num_centres=5, sigma=0.5))
    torch.testing.assert_close(apply("rbf", x, kind="inverse_quadratic", num_centres=5)[0],
                               1 / (1 + (0.2 - c) ** 2))
    torch.testing.assert_close(apply("inverse_quadratic_rbf", x, centres=[0.2, 1.2])[0],
                               torch.tensor([1.0, 0.5], dtype=F64))


def test_probabilistic_matches_scipy():
    x = XS.reshape(-1, 1)
    u = (0.99 / (1 + np.exp(-XS.numpy())) + 0.001)  # tinyBIG's squash onto a positive support
    np.testing.assert_allclose(apply("naive_normal", x)[:, 0], sst.norm.logpdf(XS.numpy()), rtol=1e-12)
    np.testing.assert_allclose(apply("naive_laplace", x, params=[0.5, 2.0])[:, 0],
                               sst.laplace.logpdf(XS.numpy(), 0.5, 2.0), rtol=1e-12)
    np.testing.assert_allclose(apply("naive_gamma", x, params=[2.0, 3.0])[:, 0],
                               sst.gamma.logpdf(u, 2.0, scale=1 / 3.0), rtol=1e-12)
    np.testing.assert_allclose(apply("naive_probabilistic", x, dist="chi2", params=[3.0])[:, 0],
                               sst.chi2.logpdf(u, 3.0), rtol=1e-12)
    np.testing.assert_allclose(apply("naive_exponential", x, params=[2.0])[:, 0], sst.expon.logpdf(u, scale=0.5),
                               rtol=1e-12)
    fam = apply("probabilistic_cauchy", x).reshape(-1, 6)
    for j, (loc, scale) in enumerate([(0.0, 1.0), (0.0, 0.5), (1.0, 1.0), (1.0, 0.5), (-1.0, 1.0), (-1.0, 0.5)]):
        np.testing.assert_allclose(fam[:, j], sst.cauchy.logpdf(XS.numpy(), loc, scale), rtol=1e-12)
    assert apply("probabilistic_chi2", x).shape[-1] == 2
    hyb = apply("hybrid_probabilistic", x).reshape(-1, 6)
    np.testing.assert_allclose(hyb[:, 3], sst.gamma.logpdf(u, 0.5), rtol=1e-12)
    # squash = false evaluates the raw value (positive laws then need x > 0)
    pos = torch.tensor([[0.5, 2.0]], dtype=F64)
    np.testing.assert_allclose(apply("naive_gamma", pos, squash=False, params=[2.0, 1.0])[0],
                               sst.gamma.logpdf([0.5, 2.0], 2.0), rtol=1e-12)


def test_combinatorial_layout_and_normal_log_density():
    x = torch.tensor([[1.0, 2.0, 3.0]], dtype=F64)
    y = apply("combinatorial", x, d=2)[0]
    assert y.tolist() == [1, 2, 3, 1, 2, 1, 3, 2, 3]
    z = apply("combinatorial_normal", x, d=2, rho=0.5, scale=2.0)[0]
    cov2 = 4.0 * torch.tensor([[1.0, 0.5], [0.5, 1.0]], dtype=F64)
    mvn = torch.distributions.MultivariateNormal(torch.zeros(2, dtype=F64), cov2)
    assert z.shape == (6,)
    assert z[3].item() == pytest.approx(mvn.log_prob(x[0, [0, 1]]).item())
    assert z[0].item() == pytest.approx(sst.norm.logpdf(1.0, 0, 2.0))
    assert kappa("combinatorial_normal").elementwise and not kappa("combinatorial_normal", d=2).elementwise


def test_linear_and_reciprocal():
    x = torch.tensor([[1.0, -2.0, 0.0]], dtype=F64)
    torch.testing.assert_close(apply("linear", x, c=2.5), 2.5 * x)
    C = [[1.0, 0.0], [0.5, 1.0], [2.0, 2.0]]
    torch.testing.assert_close(apply("linear", x, C=C), x @ torch.tensor(C, dtype=F64))
    before = x.clone()
    y = apply("reciprocal", x)
    assert torch.equal(x, before)  # tinyBIG bug §8.11: its reciprocal writes into its input
    assert y[0].tolist() == [1.0, -0.5, 1e6]


# ------------------------------------------------------------------------------------------------ wavelets
def _mother(name, tau, **hp):
    """The mother φ(τ): scale 0, shift 0 (a^0 = 1)."""
    return apply(name, tau.reshape(-1, 1), **hp)[:, 0]


def test_ricker_normalisation_erratum_and_zero_integral():
    tau = torch.linspace(-30, 30, 60001, dtype=F64)
    psi = _mother("ricker_wavelet", tau, sigma=1.0)
    assert torch.trapezoid(psi, tau).item() == pytest.approx(0.0, abs=1e-9)   # admissibility: ∫ψ = 0
    assert torch.trapezoid(psi**2, tau).item() == pytest.approx(1.0, rel=1e-9)  # unit energy (erratum §8.9)
    assert psi[30000].item() == pytest.approx(2 / (math.sqrt(3) * math.pi ** 0.25))
    psi2 = _mother("ricker", tau, sigma=2.0)
    assert torch.trapezoid(psi2**2, tau).item() == pytest.approx(1.0, rel=1e-9)  # also for σ ≠ 1


def test_haar_shannon_meyer_dog_beta_values():
    tau = torch.tensor([-0.1, 0.0, 0.25, 0.5, 0.75, 1.0], dtype=F64)
    assert _mother("haar_wavelet", tau).tolist() == [0.0, 1.0, 1.0, -1.0, -1.0, 0.0]
    assert _mother("harr", tau).tolist() == [0.0, 1.0, 1.0, -1.0, -1.0, 0.0]  # tinyBIG's spelling
    sh = _mother("shannon_wavelet", torch.tensor([0.0, 0.5, 0.25], dtype=F64))
    ref = [(math.sin(2 * math.pi * t) - math.sin(math.pi * t)) / (math.pi * t) for t in (0.5, 0.25)]
    torch.testing.assert_close(sh, torch.tensor([1.0, *ref], dtype=F64))
    t = torch.tensor([0.3, 1.2], dtype=F64)
    num = torch.sin(2 * math.pi * t / 3) + 4 / 3 * t * torch.cos(4 * math.pi * t / 3)
    torch.testing.assert_close(_mother("meyer", t), num / (math.pi * t - 16 * math.pi / 9 * t**3))
    near = _mother("meyer", torch.tensor([0.75 - 1e-7, 0.75, 0.75 + 1e-7], dtype=F64))
    assert torch.isfinite(near).all() and (near.max() - near.min()).item() < 1e-5  # removable singularity at 3/4
    np.testing.assert_allclose(_mother("dog", t, sigma_1=0.5, sigma_2=1.5),
                               sst.norm.pdf(t.numpy(), 0, 0.5) - sst.norm.pdf(t.numpy(), 0, 1.5), rtol=1e-12)
    u = 1 / (1 + np.exp(-t.numpy()))
    np.testing.assert_allclose(_mother("beta_wavelet", t, alpha=2.0, beta=3.0), sst.beta.pdf(u, 2.0, 3.0),
                               rtol=1e-12)


def test_beta_wavelet_is_elementwise_unlike_the_toolkit():
    """tinyBIG squashes the whole batch only when some τ leaves [0, 1]: one entry then depends on the others."""
    a = torch.tensor([[0.3, 0.6]], dtype=F64)
    b = torch.tensor([[0.3, 5.0]], dtype=F64)
    ya, yb = apply("beta_wavelet", a, alpha=2.0, beta=2.0), apply("beta_wavelet", b, alpha=2.0, beta=2.0)
    assert ya[0, 0].item() == yb[0, 0].item()
    sup = apply("beta_wavelet", torch.tensor([[0.3, -0.2, 1.5]], dtype=F64), alpha=2.0, beta=2.0, domain="support")
    np.testing.assert_allclose(sup[0], [sst.beta.pdf(0.3, 2, 2), 0.0, 0.0], rtol=1e-12)


def test_child_wavelets_and_order_two_erratum():
    x = torch.tensor([[0.7, -0.4]], dtype=F64)
    k1 = apply("ricker_wavelet", x, a=2.0, b=0.5, s=2, t=3)
    assert k1.shape == (1, 2 * 2 * 3)
    z = 0.7 / 2 - 2 * 0.5  # attribute 0, scale σ = 1, shift τ = 2: a^{−1/2} φ(x/a − τb)
    phi = 2 / (math.sqrt(3) * math.pi ** 0.25) * (1 - z * z) * math.exp(-z * z / 2)
    assert k1[0, 5].item() == pytest.approx(phi / math.sqrt(2))
    # erratum (catalog §8.10): order 2 is κ1 ⊗ κ1 (paper); tinyBIG concatenates [κ1, κ1 ⊗ κ1]
    kron = apply("ricker_wavelet", x, d=2)
    base = apply("ricker_wavelet", x)
    torch.testing.assert_close(kron[0], torch.outer(base[0], base[0]).reshape(-1))
    cat = apply("ricker_wavelet", x, d=2, order2="concat")
    torch.testing.assert_close(cat[0], torch.cat([base[0], kron[0]]))
    assert kappa("wavelet", d=2).flat_out(3) == 9 and kappa("wavelet", d=2, order2="concat").flat_out(3) == 12
    assert kappa("wavelet").elementwise and not kappa("wavelet", d=2).elementwise
    torch.testing.assert_close(apply("wavelet", x, mother="dog", s=2), apply("dog_wavelet", x, s=2))


# ------------------------------------------------------------------------------------------------ composites
def test_extended_and_nested_compose_registry_entries():
    x = torch.tensor([[0.3, -0.6, 0.9]], dtype=F64)
    ext = apply("extended", x, parts=["chebyshev(d = 2)", "identity"])  # elementwise: per attribute [T1, T2, x]
    cheb = basis("chebyshev", x, d=2)
    torch.testing.assert_close(ext[0], torch.cat([cheb[0], x[0].unsqueeze(-1)], -1).reshape(-1))
    ext2 = apply("extended", x, parts=["taylor(d = 2)", "legendre"])  # not elementwise: block concatenation
    torch.testing.assert_close(ext2, torch.cat([apply("taylor", x, d=2), apply("legendre", x)], -1))
    nest = apply("nested", x, parts=["chebyshev(d = 2)", "fourier(N = 1, P = 4.0)"])
    torch.testing.assert_close(nest, apply("fourier", apply("chebyshev", x, d=2), N=1, P=4.0))
    nest2 = apply("nested", x, parts=["taylor(d = 2)", "hermite"])
    torch.testing.assert_close(nest2, apply("hermite", apply("taylor", x, d=2)))
    assert kappa("nested", parts=["taylor(d = 2)", "hermite(d = 3)"]).flat_out(3) == 12 * 3
    assert kappa("extended", parts=["taylor(d = 2)", "hermite(d = 3)"]).flat_out(3) == 12 + 9


# ------------------------------------------------------------------------------------------------ geometric
def test_patch_expansion_is_unfold_and_cylinder_is_a_masked_gather():
    x = torch.randn(2, 3, 5, 6, dtype=F64, generator=torch.Generator().manual_seed(1))
    for reference in (False, True):
        form = literal if reference else (lambda m: m)
        mod = form(kappa("patch_expansion", size=3, pad=1, stride=2).build((3, 5, 6)))
        y = mod(x, grid=True)
        assert y.shape == (2, 27, 3, 3)
        torch.testing.assert_close(y.flatten(2), F.unfold(x, 3, padding=1, stride=2))
        cyl = form(kappa("cylinder_expansion", radius=1).build((3, 5, 6)))(x, grid=True)
        assert cyl.shape == (2, 3 * 5, 5, 6)
        xp = F.pad(x, (1, 1, 1, 1))
        taps = [(0, 1), (1, 0), (1, 1), (1, 2), (2, 1)]  # the disc r = 1, lexicographic
        naive = torch.stack([xp[:, :, i:i + 5, j:j + 6] for i, j in taps], 2).reshape(2, 15, 5, 6)
        torch.testing.assert_close(cyl, naive)
    sph = kappa("sphere_expansion", radius=1).features_out((2, 3, 3, 3))
    assert sph == (2 * 7, 3, 3, 3)
    assert kappa("cuboid_expansion", half=1, stride=2).features_out((1, 5, 6)) == (9, 3, 3)  # ceil(L/s)
