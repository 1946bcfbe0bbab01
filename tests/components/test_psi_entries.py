"""ψ registry entries: tinyBIG inventory coverage, counts = built parameters, closed forms on the built modules
(true Kronecker products, rank, VeRA eq 164, hypernet eq 166-167), factored apply, gradchecks, seeded persistent
buffers (state_dict round trips), default vs reference lowering, and the pinned errata decisions."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

import rpn2c
from rpn2c.components.registry import REGISTRY
from tests.test_lowering_equivalence import _rand, assert_equivalent

F64 = torch.float64
SETTINGS = settings(max_examples=20, deadline=None)

# tinyBIG's 15 reconciliation classes (tinybig_notes §1.3.3) -> the rpn2c spec that writes the same function
TINYBIG = {
    "constant_reconciliation": "constant(c = 0.5)",
    "zero_reconciliation": "zero",
    "one_reconciliation": "one",
    "constant_eye_reconciliation": "constant_eye",
    "identity_reconciliation": "identity",
    "masking_reconciliation": "masking(p = 0.5)",
    "duplicated_padding_reconciliation": "duplicated_padding(p = 2, q = 3)",
    "duplicated_diagonal_padding_reconciliation": "duplicated_diagonal_padding(p = 2, q = 3)",
    "lorr_reconciliation": "lorr(r = 2)",
    "hm_reconciliation": "hm(p = 2, q = 3)",
    "lphm_reconciliation": "lphm(p = 2, q = 3, r = 1)",
    "dual_lphm_reconciliation": "dual_lphm(p = 2, q = 3, r = 2)",
    "hypernet_reconciliation": "hypernet(l = 5, d = 7)",
    "random_matrix_adaption_reconciliation": "random_matrix_adaption(r = 2)",
    "random_matrix_hypernet_reconciliation": "random_matrix_hypernet(r = 2, l = 5, d = 7)",
}


def _entry(text: str):
    """A component instance from spec text `name(k = v, ...)`, validated by its schema as the checker does."""
    name, _, args = text.partition("(")
    kwargs = eval(f"dict({args.rstrip(')')})", {"true": True, "false": False, "none": None}) if args else {}
    entry = REGISTRY["reconciliation"][name.strip()]
    return entry.cls(entry.schema(**kwargs))


def _built(text: str, n: int, D: int, seed: int = 0):
    torch.manual_seed(seed)
    comp = _entry(text)
    assert comp.check(n, D) is None
    return comp, comp.build(n, D).double()


def test_every_tinybig_reconciliation_has_an_entry():
    assert len(TINYBIG) == 15
    for text in TINYBIG.values():
        name = text.split("(")[0]
        assert name in REGISTRY["reconciliation"], name
    assert REGISTRY["reconciliation"]["vera"].cls is REGISTRY["reconciliation"]["random_matrix_adaption"].cls


@pytest.mark.parametrize("tiny", sorted(TINYBIG))
def test_count_matrix_apply_and_lowerings(tiny):
    text = TINYBIG[tiny]
    n, D = 4, 6
    comp, psi = _built(text, n, D)
    learn = sum(p.numel() for p in psi.parameters())
    assert comp.count(n, D) == learn
    W = psi.matrix()
    assert W.shape == (n, D) and W.dtype == F64
    z = _rand(3, 2, D)
    torch.testing.assert_close(psi.apply(z), z @ W.T, rtol=1e-12, atol=1e-12)
    spec = f"model m {{ input x: vector[B, 6]  y = head(x) {{ psi = {text}  out = 4 }} return y }}"
    assert_equivalent(spec, {"x": _rand(3, 6)})
    items = f"model m {{ input x: sequence[B, 5, 6]  y = head(x) {{ psi = {text}  out = 4  channels = 2 }} return y }}"
    assert_equivalent(items, {"x": _rand(2, 5, 6)})


class _Apply(torch.nn.Module):
    def __init__(self, psi):
        super().__init__()
        self.psi = psi

    def forward(self, z):
        return self.psi.apply(z)


@pytest.mark.parametrize("tiny", sorted(TINYBIG))
def test_gradcheck_apply(tiny):
    _, psi = _built(TINYBIG[tiny], 4, 6)
    wrapper = _Apply(psi)
    names = [k for k, _ in wrapper.named_parameters()]
    leaves = [p.detach().clone().requires_grad_() for p in wrapper.parameters()]
    z = _rand(2, 6).requires_grad_()

    def f(z, *ws):
        return torch.func.functional_call(wrapper, dict(zip(names, ws)), (z,))

    assert torch.autograd.gradcheck(f, (z, *leaves))


# ------------------------------------------------------------------------------------------------ closed forms
def _np(t):
    return t.detach().cpu().numpy()


@SETTINGS
@given(p=st.integers(1, 3), q=st.integers(1, 3), s=st.integers(1, 3), t=st.integers(1, 3), r=st.integers(1, 3))
def test_kronecker_entries_are_numpy_kron_and_counts_match_the_catalog(p, q, s, t, r):
    n, D = p * s, q * t
    _, hm = _built(f"hm(p = {p}, q = {q})", n, D)
    np.testing.assert_allclose(_np(hm.matrix()), np.kron(_np(hm.A), _np(hm.B)), rtol=1e-12)
    _, lphm = _built(f"lphm(p = {p}, q = {q}, r = {r})", n, D)
    np.testing.assert_allclose(_np(lphm.matrix()), np.kron(_np(lphm.A), _np(lphm.S) @ _np(lphm.T)), rtol=1e-12)
    _, dual = _built(f"dual_lphm(p = {p}, q = {q}, r = {r})", n, D)
    np.testing.assert_allclose(_np(dual.matrix()),
                               np.kron(_np(dual.P) @ _np(dual.Q), _np(dual.S) @ _np(dual.T)), rtol=1e-12)
    # catalog §2.3 counts
    assert _entry(f"hm(p = {p}, q = {q})").count(n, D) == p * q + s * t
    assert _entry(f"lphm(p = {p}, q = {q}, r = {r})").count(n, D) == p * q + r * (s + t)
    assert _entry(f"dual_lphm(p = {p}, q = {q}, r = {r})").count(n, D) == r * (p + q + s + t)
    assert _entry(f"duplicated_padding(p = {p}, q = {q})").count(n, D) == s * t
    _, dup = _built(f"duplicated_padding(p = {p}, q = {q})", n, D)
    np.testing.assert_allclose(_np(dup.matrix()), np.kron(np.ones((p, q)), _np(dup.weight)))
    _, diag = _built(f"duplicated_diagonal_padding(p = {p}, q = {q})", n, D)
    np.testing.assert_allclose(_np(diag.matrix()), np.kron(np.eye(p, q), _np(diag.weight)))


def test_hm_is_not_the_toolkits_reshaped_outer_product():
    """tinyBIG bug 3: its einsum gives reshape(vec(A) vec(B)ᵀ); rpn2c's ψ is A ⊗ B."""
    _, hm = _built("hm(p = 2, q = 3)", 4, 6)
    A, B = _np(hm.A), _np(hm.B)
    outer = np.einsum("pq,st->psqt", A.reshape(1, -1), B.reshape(1, -1)).reshape(4, 6)
    assert not np.allclose(_np(hm.matrix()), outer)
    np.testing.assert_allclose(_np(hm.matrix()), np.kron(A, B))


def test_hm_default_blocks_are_closest_factors():
    comp = _entry("hm")
    assert comp.count(12, 30) == 3 * 5 + 4 * 6  # p = 3 (12 = 3·4), q = 5 (30 = 5·6)


@SETTINGS
@given(n=st.integers(2, 7), D=st.integers(2, 7), r=st.integers(1, 2))
def test_lorr_rank_and_count(n, D, r):
    r = min(r, n, D)
    comp, psi = _built(f"lorr(r = {r})", n, D)
    assert torch.linalg.matrix_rank(psi.matrix()) <= r
    assert comp.count(n, D) == r * (n + D)
    assert psi.B.shape == (D, r)  # eq (162) orientation (the toolkit stores r x D)
    assert (comp.check(2, 2) is not None) == (r > 2)


def test_constant_zero_one_eye_closed_forms():
    for text, ref in [("constant(c = -1.5)", -1.5 * np.ones((3, 5))), ("zero", np.zeros((3, 5))),
                      ("one", np.ones((3, 5))), ("eye", np.eye(3, 5))]:
        comp, psi = _built(text, 3, 5)
        assert comp.count(3, 5) == 0 and not list(psi.parameters())
        np.testing.assert_array_equal(_np(psi.matrix()), ref)
        assert psi.matrix().dtype == F64  # follows .double() without parameters
    _, wide = _built("eye", 5, 3)  # n > D pads with zeros, n < D keeps the first n
    z = _rand(2, 3)
    torch.testing.assert_close(wide.apply(z), torch.cat([z, torch.zeros(2, 2, dtype=F64)], -1))
    _, narrow = _built("eye", 2, 3)
    torch.testing.assert_close(narrow.apply(z), z[:, :2])


def test_masking_semantics():
    comp, psi = _built("masking(p = 0.3, seed = 4)", 60, 50)
    M = psi.mask
    assert set(torch.unique(M).tolist()) <= {0.0, 1.0}
    assert abs(M.mean().item() - 0.3) < 0.03  # p is the kept fraction (the toolkit's rand < p)
    torch.testing.assert_close(psi.matrix(), psi.weight * M)
    assert comp.count(60, 50) == 3000  # the paper's l = nD: masked entries are counted
    psi.apply(_rand(2, 50)).sum().backward()
    assert (psi.weight.grad[M == 0] == 0).all()
    for p, value in [(0.0, 0.0), (1.0, 1.0)]:
        assert (_built(f"masking(p = {p})", 4, 6)[1].mask == value).all()
    _, given_ = _built("masking(mask = [[1, 0, 1, 0, 1, 0], [0, 1, 0, 1, 0, 1], [1, 1, 1, 0, 0, 0], "
                       "[0, 0, 0, 1, 1, 1]])", 4, 6)
    assert given_.mask[2].tolist() == [1, 1, 1, 0, 0, 0]
    assert "mask" in given_.state_dict()


def test_random_matrix_adaption_is_eq_164_with_n_plus_r_parameters():
    comp, psi = _built("random_matrix_adaption(r = 3, seed = 7)", 5, 8)
    assert comp.count(5, 8) == 5 + 3 and {k for k, _ in psi.named_parameters()} == {"lambda1", "lambda2"}
    ref = np.diag(_np(psi.lambda1)) @ _np(psi.A) @ np.diag(_np(psi.lambda2)) @ _np(psi.B).T
    np.testing.assert_allclose(_np(psi.matrix()), ref, rtol=1e-12)
    _, big = _built("vera(r = 16)", 200, 300)  # eq (163): A, B ~ N(0, 1) with the default std
    assert abs(big.A.std().item() - 1) < 0.05 and abs(big.B.mean().item()) < 0.05
    assert abs(big.matrix().std().item() - 1 / 900 ** 0.5) < 0.004  # starts at nn.Linear's entry scale


def test_hypernets_are_eq_166_and_167():
    sig = lambda a: 1 / (1 + np.exp(-a))  # noqa: E731
    comp, hn = _built("hypernet(l = 5, d = 7, seed = 1)", 3, 4)
    assert comp.count(3, 4) == 5
    np.testing.assert_allclose(_np(hn.matrix()), (sig(_np(hn.w) @ _np(hn.H1)) @ _np(hn.H2)).reshape(3, 4))
    comp, rm = _built("random_matrix_hypernet(l = 5, d = 7, r = 2, seed = 1)", 3, 4)
    assert comp.count(3, 4) == 5
    H1, H2 = _np(rm.P) @ _np(rm.Q).T, _np(rm.S) @ _np(rm.T).T  # eq (167) = eq (166) with low-rank H1, H2
    np.testing.assert_allclose(_np(rm.matrix()), (sig(_np(rm.w) @ H1) @ H2).reshape(3, 4), rtol=1e-10)
    # default std "fan_in": H1 ~ N(0, 1/l), H2 ~ N(0, 1/d) (the paper's N(0, 1) saturates ψ at std ~ sqrt(d/4))
    _, big = _built("hypernet(l = 400, d = 300)", 10, 20)
    assert abs(big.H1.std().item() * 400 ** 0.5 - 1) < 0.05 and abs(big.H2.std().item() * 300 ** 0.5 - 1) < 0.05
    assert abs(_built("hypernet(l = 400, d = 30, std = 1.0)", 2, 2)[1].H1.std().item() - 1) < 0.05


# ------------------------------------------------------------------------------------------------ factored apply
class _MaxNumel(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.max_numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for o in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(o, torch.Tensor):
                self.max_numel = max(self.max_numel, o.numel())
        return out


@pytest.mark.parametrize("text", ["constant(c = 2.0)", "eye", "lorr(r = 2)", "hm(p = 3, q = 5)",
                                  "lphm(p = 3, q = 5, r = 2)", "dual_lphm(p = 3, q = 5, r = 2)",
                                  "duplicated_padding(p = 3, q = 5)", "duplicated_diagonal_padding(p = 3, q = 5)",
                                  "random_matrix_adaption(r = 2)"])
def test_apply_never_forms_the_n_by_D_matrix(text):
    n, D = 12, 60
    _, psi = _built(text, n, D)
    psi.spec = dataclasses.replace(psi.spec, fabricate=_forbidden)  # apply must not call the dense form
    x = _rand(2, D)
    with torch.no_grad(), _MaxNumel() as rec:
        psi.apply(x)
    assert 0 < rec.max_numel < n * D, rec.max_numel


def _forbidden(*a, **k):
    raise AssertionError("apply fabricated the dense matrix")


# ------------------------------------------------------------------------------------------------ buffers
RANDOM = ["masking(p = 0.5, seed = {s})", "random_matrix_adaption(r = 2, seed = {s})",
          "hypernet(l = 4, d = 6, seed = {s})", "random_matrix_hypernet(r = 2, l = 4, d = 6, seed = {s})"]


@pytest.mark.parametrize("template", RANDOM)
def test_frozen_matrices_are_seeded_persistent_buffers(template):
    """tinyBIG bug 9: its random matrices were plain attributes, so a checkpoint did not restore the function."""
    spec = "model m {{ input x: vector[B, 6]  y = head(x) {{ psi = {psi}  out = 4 }} return y }}"
    torch.manual_seed(0)
    a = rpn2c.compile(spec.format(psi=template.format(s=1))).double()
    torch.manual_seed(1)  # different weights and a different seed: different frozen matrices
    b = rpn2c.compile(spec.format(psi=template.format(s=2))).double()
    x = _rand(3, 6)
    frozen = [k for k, _ in a.named_buffers() if k in a.state_dict()]
    assert frozen and all(not torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in frozen)
    assert not torch.allclose(a(x), b(x))
    b.load_state_dict(a.state_dict())
    torch.testing.assert_close(b(x), a(x), rtol=0, atol=0)
    torch.manual_seed(5)  # same seed hyper-parameter: the same frozen matrices whatever the torch RNG state
    c = rpn2c.compile(spec.format(psi=template.format(s=1))).double()
    for k in frozen:
        assert torch.equal(c.state_dict()[k], a.state_dict()[k])
    assert all(not b.requires_grad for b in c.buffers())


def test_dtype_follows_the_module():
    for text in ["hm", "constant", "vera", "masking", "hypernet(l = 3, d = 4)"]:
        _, psi = _built(text, 4, 6)
        psi = psi.float()
        assert psi.matrix().dtype == torch.float32 and psi.apply(torch.ones(2, 6)).dtype == torch.float32


def test_shape_rule_errors_are_located_diagnostics():
    for text, msg in [("hm(p = 3)", "not divisible by p=3"), ("lphm(q = 4)", "not divisible by q=4"),
                      ("duplicated_padding(p = 3)", "not divisible"), ("lorr(r = 5)", "exceeds"),
                      ("masking(mask = [[1, 0]])", "mask is 1 x 2")]:
        with pytest.raises(rpn2c.SpecError) as exc:
            rpn2c.check(f"model m {{ input x: vector[B, 6]  y = head(x) {{ psi = {text}  out = 4 }} return y }}")
        assert exc.value.diagnostics[0].code == "E0402" and msg in exc.value.diagnostics[0].message
    for bad in ["masking(p = 1.5)", "vera(std = -1.0)", "hm(p = 0)", "hypernet(l = 0)"]:
        with pytest.raises(rpn2c.SpecError) as exc:
            rpn2c.check(f"model m {{ input x: vector[B, 6]  y = head(x) {{ psi = {bad}  out = 4 }} return y }}")
        assert exc.value.diagnostics[0].code == "E0303"


def test_conv_psi_is_the_n_by_D_kernel_matrix():
    """Erratum 16: eq (171) writes the conv ψ(w) = I ⊗ w as (p·p_count) x p_count (transposed, and "reshape(X)" for
    reshape(W)); rpn2c's conv ψ is the n x D = C_out x (C_in·p) kernel matrix, applied to every patch."""
    torch.manual_seed(0)
    model = rpn2c.compile("model m { input x: image[B, 2, 5, 5]  y = head(x) { xi_attribute = grid_patch(size = 3, "
                          "pad = 1)  out = 4  bias = false } return y }").double()
    W = model.y.psi.weight
    assert W.shape == (4, 2 * 9)
    x = _rand(1, 2, 5, 5)
    ref = torch.nn.functional.conv2d(x, W.reshape(4, 2, 3, 3), padding=1)
    torch.testing.assert_close(model(x), ref)
