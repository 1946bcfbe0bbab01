"""Kernel interdependence entries (rpn2c/components/xi_kernels.py): orientation and per-sample batching, closed forms
against numpy/scipy, normalisations, gradcheck, both lowerings, and the shape rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.spatial.distance as ssd
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.autograd import gradcheck

import rpn2c
from rpn2c.components import REGISTRY
from rpn2c.components.base import XiContext
from rpn2c.components.xi_kernels import KERNEL_ENTRIES
from rpn2c.errors import SpecShapeError
from tests.test_lowering_equivalence import _rand, assert_equivalent

F64 = torch.float64


def _module(name, axis="instance", n=5, m=4, **hp):
    entry = REGISTRY["interdependence"][name]
    comp = entry.cls(entry.schema(**hp))
    size = n if axis == "instance" else m
    ctx = XiContext(axis, size, m, m, n, {})
    comp.out_size(ctx)
    return comp.build(ctx).double()


def _matrix(name, x, axis="instance", **hp):
    mod = _module(name, axis, x.shape[-2], x.shape[-1], **hp)
    return mod.matrix(x, x, {}, x.shape[-2] if axis == "instance" else x.shape[-1])


# ------------------------------------------------------------------------------------------------ closed forms
def test_pearson_equals_numpy_corrcoef_per_sample_on_both_axes():
    x = _rand(3, 6, 4)
    a_attr = _matrix("pearson_correlation", x, "attribute")
    a_inst = _matrix("pearson_correlation", x, "instance")
    assert a_attr.shape == (3, 4, 4) and a_inst.shape == (3, 6, 6)
    for b in range(3):  # samples never interact: each sample's matrix is its own corrcoef
        np.testing.assert_allclose(a_attr[b].numpy(), np.corrcoef(x[b].numpy(), rowvar=False), atol=1e-12)
        np.testing.assert_allclose(a_inst[b].numpy(), np.corrcoef(x[b].numpy()), atol=1e-12)


def test_rbf_equals_cdist_formula():
    x = _rand(2, 5, 3)
    sigma = 0.7
    got = _matrix("gaussian_rbf_kernel", x, "instance", sigma=sigma)
    for b in range(2):
        d2 = ssd.cdist(x[b].numpy(), x[b].numpy(), "sqeuclidean")
        np.testing.assert_allclose(got[b].numpy(), np.exp(-d2 / (2 * sigma**2)), atol=1e-12)
    got_a = _matrix("gaussian_rbf_kernel", x, "attribute", sigma=sigma)
    d2 = ssd.cdist(x[0].numpy().T, x[0].numpy().T, "sqeuclidean")
    np.testing.assert_allclose(got_a[0].numpy(), np.exp(-d2 / (2 * sigma**2)), atol=1e-12)


@pytest.mark.parametrize("name, metric, f", [
    ("laplacian_kernel", "cityblock", lambda d: np.exp(-d / 0.5)),
    ("exponential_kernel", "cityblock", lambda d: np.exp(-2.0 * d)),
    ("euclidean_kernel", "euclidean", lambda d: 1 - d),
    ("manhattan_kernel", "cityblock", lambda d: 1 - d),
    ("chebyshev_kernel", "chebyshev", lambda d: 1 - d),
    ("minkowski_kernel", "minkowski", lambda d: 1 - d),
    ("cosine_similarity", "cosine", lambda d: 1 - d),
    ("canberra_kernel", "canberra", lambda d: np.exp(-d)),
])
def test_distance_kernels_equal_scipy(name, metric, f):
    hp = {"laplacian_kernel": {"sigma": 0.5}, "exponential_kernel": {"gamma": 2.0},
          "minkowski_kernel": {"p": 3.0}}.get(name, {})
    x = _rand(1, 6, 3)
    got = _matrix(name, x, "instance", **hp)[0].numpy()
    kw = {"p": 3.0} if metric == "minkowski" else {}
    np.testing.assert_allclose(got, f(ssd.cdist(x[0].numpy(), x[0].numpy(), metric, **kw)), atol=1e-10)


def test_inner_product_family_and_statistics():
    x = _rand(2, 5, 4)
    g = x[0].numpy() @ x[0].numpy().T  # instance axis: <x_i, x_j> over rows
    np.testing.assert_allclose(_matrix("linear_kernel", x)[0].numpy(), g, atol=1e-12)
    np.testing.assert_allclose(_matrix("polynomial_kernel", x, c=1.0, d=3)[0].numpy(), (g + 1) ** 3, atol=1e-9)
    np.testing.assert_allclose(_matrix("hyperbolic_tangent_kernel", x, alpha=0.3, c=-0.2)[0].numpy(),
                               np.tanh(0.3 * g - 0.2), atol=1e-12)
    rho = np.corrcoef(x[0].numpy())
    np.testing.assert_allclose(_matrix("rv_coefficient", x)[0].numpy(), rho**2, atol=1e-12)
    mi = _matrix("mutual_information", x, diagonal=0.0)[0].numpy()
    off = ~np.eye(5, dtype=bool)
    np.testing.assert_allclose(mi[off], -0.5 * np.log(1 - rho[off] ** 2), atol=1e-10)
    assert np.all(np.diag(mi) == 0)  # toolkit's zero diagonal on request (erratum 11)
    a = [0.5, 2.0, 1.0, 0.1]
    diff = x[0].numpy()[:, None, :] - x[0].numpy()[None, :, :]
    np.testing.assert_allclose(_matrix("anisotropic_rbf_kernel", x, a=a)[0].numpy(),
                               np.exp(-(diff**2 * np.array(a)).sum(-1)), atol=1e-12)


def test_orientation_of_the_asymmetric_kl_kernel():
    """Output j gathers input i with weight k(v_i, v_j): instance A[j, i] = KL(p_i ‖ p_j), attribute A[i, j]."""
    x = _rand(1, 4, 3)
    p = torch.softmax(x[0], dim=-1).numpy()  # instance axis: rows become distributions over their M entries
    kl = np.array([[np.sum(p[i] * np.log(p[i] / p[j])) for j in range(4)] for i in range(4)])
    np.testing.assert_allclose(_matrix("kl_divergence", x, "instance")[0].numpy(), kl.T, atol=1e-12)
    pc = torch.softmax(x[0], dim=0).numpy()
    klc = np.array([[np.sum(pc[:, i] * np.log(pc[:, i] / pc[:, j])) for j in range(3)] for i in range(3)])
    np.testing.assert_allclose(_matrix("kl_divergence", x, "attribute")[0].numpy(), klc, atol=1e-12)


def test_cross_kernel_compares_context_rows_with_query_rows():
    q, c = _rand(1, 3, 4), _rand(1, 5, 4, seed=9)
    mod = _module("gaussian_rbf_kernel", "instance", 5, 4)
    a = mod.matrix(q, c, {}, 5)[0].numpy()
    np.testing.assert_allclose(a, np.exp(-ssd.cdist(q[0].numpy(), c[0].numpy(), "sqeuclidean") / 2), atol=1e-12)


@pytest.mark.parametrize("norm", ["row", "column", "symmetric", "softmax", "softmax_column", "mean_std",
                                  "mean_std_column", "mean_std_all"])
def test_normalisations_act_on_the_output_orientation(norm):
    x = _rand(2, 5, 4).abs()
    for axis in ("instance", "attribute"):
        raw = _matrix("gaussian_rbf_kernel", x, axis)
        a = _matrix("gaussian_rbf_kernel", x, axis, norm=norm)
        r, rr = (a, raw) if axis == "instance" else (a.mT, raw.mT)  # row = output
        if norm in ("row", "softmax"):
            torch.testing.assert_close(r.sum(-1), torch.ones(r.shape[:-1], dtype=F64))
        elif norm in ("column", "softmax_column"):
            torch.testing.assert_close(r.sum(-2), torch.ones(r.shape[:-2] + r.shape[-1:], dtype=F64))
        elif norm == "symmetric":
            d = rr.sum(-1).rsqrt()
            torch.testing.assert_close(r, d[..., :, None] * rr * d[..., None, :])
        else:
            dims = {"mean_std": (-1,), "mean_std_column": (-2,), "mean_std_all": (-2, -1)}[norm]
            torch.testing.assert_close(r.mean(dims), torch.zeros_like(r.mean(dims)), atol=1e-12, rtol=0)


def test_centered_option_subtracts_vector_means():
    x = _rand(1, 5, 4)
    got = _matrix("linear_kernel", x, "attribute", centered=True)[0]
    xc = x[0] - x[0].mean(0)
    torch.testing.assert_close(got, xc.T @ xc)


def test_hybrid_kernel_is_the_weighted_sum():
    x = _rand(2, 5, 4)
    got = _matrix("hybrid_kernel", x, parts=["gaussian_rbf_kernel", "linear_kernel"], weights=[0.7, -0.3],
                  p1_sigma=2.0)
    want = 0.7 * _matrix("gaussian_rbf_kernel", x, sigma=2.0) - 0.3 * _matrix("linear_kernel", x)
    torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="kernel"):
        REGISTRY["interdependence"]["hybrid_kernel"].schema(parts=["chain", "linear_kernel"])


# ------------------------------------------------------------------------------------------------ gradients
@pytest.mark.parametrize("name", sorted(KERNEL_ENTRIES))
def test_gradcheck_through_every_kernel(name):
    hp = {"anisotropic_rbf_kernel": {"a": [0.5, 1.0, 2.0]}, "polynomial_kernel": {"c": 0.5, "d": 3}}.get(name, {})
    mod = _module(name, "instance", 4, 3, **hp)
    x = _rand(2, 4, 3, seed=11).requires_grad_()
    assert gradcheck(lambda t: mod.matrix(t, t, {}, 4), (x,), eps=1e-6, atol=1e-5)
    mod_a = _module(name, "attribute", 4, 3, **({"a": [0.5, 1.0, 2.0, 3.0]} if "a" in hp else hp), norm="softmax")
    assert gradcheck(lambda t: mod_a.matrix(t, t, {}, 3), (x,), eps=1e-6, atol=1e-5)


# ------------------------------------------------------------------------------------------------ lowerings
def _spec(slot, xi, n=5, m=4, extra=""):
    return (f"model k {{ input x: sequence[B, {n}, {m}] {extra} y = head(x) {{ {slot} = {xi}  kappa = chebyshev(d = 2)"
            f"  out = 3 }} return y }}")


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(KERNEL_ENTRIES)), slot=st.sampled_from(["xi_instance", "xi_attribute",
                                                                           "xi_instance_prior"]),
       norm=st.sampled_from(["none", "row", "softmax", "mean_std_all"]), centered=st.booleans())
def test_default_equals_reference_lowering(name, slot, norm, centered):
    extra = ""
    if name == "anisotropic_rbf_kernel":
        extra = ", a = [0.5, 1.0, 2.0, 0.1, 1.5]" if slot == "xi_attribute" else ", a = [0.5, 1.0, 2.0, 0.1]"
    xi = f'{name}(norm = "{norm}", centered = {str(centered).lower()}{extra})'
    assert_equivalent(_spec(slot, xi), {"x": _rand(2, 5, 4)})


def test_cross_attention_like_kernel_head_lowers_equally():
    text = ('model k { input x: sequence[B, 5, 4] input mem: sequence[B, 3, 4] '
            'y = head(x, context = mem) { xi_instance = laplacian_kernel(norm = "softmax")  out = 2 } return y }')
    assert_equivalent(text, {"x": _rand(2, 5, 4), "mem": _rand(2, 3, 4, seed=6)})
    assert rpn2c.check(text).param_count == 2 * 4 + 2  # a kernel ξ has no parameters: ψ (2 x 4) + bias


# ------------------------------------------------------------------------------------------------ shape rules
@pytest.mark.parametrize("text, match", [
    ("model k { input x: vector[B, 4]  y = head(x) { xi_attribute = pearson_correlation  out = 2 } return y }",
     "item axis"),
    (_spec("xi_attribute_post", "linear_kernel").replace("chebyshev(d = 2)", "chebyshev(d = 3)"), "columns"),
    ('model k { input x: sequence[B, 5, 4] input mem: sequence[B, 3, 2] '
     'y = head(x, context = mem) { xi_instance = linear_kernel  out = 2 } return y }', "same width"),
    (_spec("xi_instance", "anisotropic_rbf_kernel(a = [1.0, 2.0])"), "scales"),
])
def test_shape_rule_errors(text, match):
    with pytest.raises(SpecShapeError, match=match):
        rpn2c.check(text)


def test_hyper_parameter_bounds():
    schema = REGISTRY["interdependence"]
    for name, bad in [("gaussian_rbf_kernel", {"sigma": 0.0}), ("minkowski_kernel", {"p": 0.5}),
                      ("mutual_information", {"eps": 2.0}), ("polynomial_kernel", {"d": -1}),
                      ("kl_divergence", {"dist": "l2"}), ("linear_kernel", {"norm": "l1"})]:
        with pytest.raises(ValueError):
            schema[name].schema(**bad)
    assert schema["minkowski_kernel"].schema(p="inf").p == "inf"
    assert math.isinf(schema["minkowski_kernel"].cls(schema["minkowski_kernel"].schema(p="inf")).kernel_kwargs()["p"])
