"""Fusion registry entries: tinyBIG's 20 fusions mapped, values vs naive NumPy, counts (eq 119-120 and the
reconciled concatenations), gradchecks, multi-head and multi-channel lowerings, and the pinned errata decisions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rpn2c
from rpn2c.components.registry import REGISTRY
from tests.test_lowering_equivalence import _rand, assert_equivalent

F64 = torch.float64
SETTINGS = settings(max_examples=20, deadline=None)

# tinyBIG's 20 fusion classes (tinybig_notes §1.3.6) -> the rpn2c fusion that computes the same function
TINYBIG = {
    "weighted_summation_fusion": "weighted(weights = [0.2, 0.3, 0.5], learnable = false)",
    "summation_fusion": "summation",
    "average_fusion": "average",
    "parameterized_weighted_summation_fusion": "parameterized_weighted_summation",
    "concatenation_fusion": "concatenation",
    "metric_fusion": "metric(metric = \"max\")",
    "max_fusion": "max",
    "min_fusion": "min",
    "sum_fusion": "sum",
    "mean_fusion": "mean",
    "prod_fusion": "prod",
    "median_fusion": "median(mode = \"lower\")",
    "l1_norm_fusion": "l1_norm",
    "l2_norm_fusion": "l2_norm",
    "parameterized_concatenation_fusion": "parameterized_concatenation(out = 4)",
    "lowrank_parameterized_concatenation_fusion": "lowrank_parameterized_concatenation(out = 4, r = 2)",
    "hm_parameterized_concatenation_fusion": "hm_parameterized_concatenation(out = 4, p = 2, q = 3)",
    "lphm_parameterized_concatenation_fusion": "lphm_parameterized_concatenation(out = 4, p = 2, q = 3, r = 1)",
    "dual_lphm_parameterized_concatenation_fusion": "dual_lphm_parameterized_concatenation(out = 4, p = 2, q = 2)",
    "random_matrix_adaption_parameterized_concatenation_fusion": "concat_vera(out = 4, r = 2)",
}
PAPER = ["hadamard", "product", "norm(p = 3.0)", "median", "weighted", "concat_linear(out = 5, bias = false)",
         "concat_lowrank(out = 3)"]


def _comp(text: str):
    name, _, args = text.partition("(")
    kwargs = eval(f"dict({args.rstrip(')')})", {"true": True, "false": False, "none": None}) if args else {}
    entry = REGISTRY["fusion"][name.strip()]
    return entry.cls(entry.schema(**kwargs))


def _layer(fusion: str, widths=(4, 4, 4), m: int = 5, items: bool = False) -> str:
    heads = " ".join(f"head h{i} {{ out = {w} }}" for i, w in enumerate(widths))
    x = f"sequence[B, 3, {m}]" if items else f"vector[B, {m}]"
    return f"model m {{ input x: {x}  y = layer(x) {{ {heads}  fusion = {fusion} }} return y }}"


def test_every_tinybig_fusion_has_an_entry():
    assert len(TINYBIG) == 20
    for text in TINYBIG.values():
        assert text.split("(")[0] in REGISTRY["fusion"], text
    # tinyBIG imports average_fusion as mean_fusion, then shadows it with metric mean_fusion: one function here
    assert REGISTRY["fusion"]["average"].cls is REGISTRY["fusion"]["mean"].cls


@pytest.mark.parametrize("fusion", [*TINYBIG.values(), *PAPER])
def test_multi_head_lowerings_agree_and_counts_match(fusion):
    widths = (2, 4, 6) if fusion.startswith(("concat", "parameterized_concat", "lowrank_", "hm_", "lphm_", "dual_")) \
        else (4, 4, 4)
    assert_equivalent(_layer(fusion, widths), {"x": _rand(3, 5)})
    assert_equivalent(_layer(fusion, widths, items=True), {"x": _rand(2, 3, 5)})


@pytest.mark.parametrize("fusion", ["sum", "max", "weighted", "concat", "concat_lowrank(out = 3)",
                                    "concat_hm(out = 4, p = 2, q = 2)", "concat_vera(out = 3)"])
def test_channel_fusion_lowerings(fusion):
    spec = (f"model m {{ input x: sequence[B, 3, 5]  y = head(x) {{ out = 4  channels = 2  channel_fusion = {fusion} }}"
            " return y }")
    assert_equivalent(spec, {"x": _rand(2, 3, 5)})
    img = (f"model m {{ input x: image[B, 2, 4, 4]  y = head(x) {{ xi_attribute = grid_patch(size = 3, pad = 1) "
           f"out = 4  channels = 2  channel_fusion = {fusion} }} return y }}")
    assert_equivalent(img, {"x": _rand(2, 2, 4, 4)})


# ------------------------------------------------------------------------------------------------ values
NAIVE = {
    "sum": lambda X: X.sum(0), "mean": lambda X: X.mean(0), "max": lambda X: X.max(0), "min": lambda X: X.min(0),
    "prod": lambda X: X.prod(0), "hadamard": lambda X: X.prod(0), "median": lambda X: np.median(X, 0),
    "l1_norm": lambda X: np.abs(X).sum(0), "l2_norm": lambda X: np.sqrt((X**2).sum(0)),
    "norm(p = 3.0)": lambda X: (np.abs(X) ** 3).sum(0) ** (1 / 3),
    "median(mode = \"lower\")": lambda X: np.sort(X, 0)[(X.shape[0] - 1) // 2],
    "metric(metric = \"l2_norm\")": lambda X: np.sqrt((X**2).sum(0)),
    "weighted(weights = [0.5, -1.0, 2.0, 0.25], learnable = false)": lambda X: np.tensordot([0.5, -1, 2, 0.25][:len(X)],
                                                                                             X, 1),
    "concat": lambda X: np.concatenate(list(X), -1),
}


@SETTINGS
@given(k=st.integers(1, 4), shape=st.lists(st.integers(1, 3), min_size=1, max_size=3), seed=st.integers(0, 99),
       name=st.sampled_from(sorted(NAIVE)))
def test_values_match_naive_numpy(k, shape, seed, name):
    if name.startswith("weighted"):
        name = name.replace("[0.5, -1.0, 2.0, 0.25]", str([0.5, -1.0, 2.0, 0.25][:k]))
    comp = _comp(name)
    xs = [_rand(*shape, seed=seed + i) for i in range(k)]
    dims = [shape[-1]] * k
    assert comp.check(dims) is None
    out = comp.build(dims).double()(xs)
    assert out.shape[-1] == comp.out_features(dims) and comp.count(dims) == 0
    ref_name = name if name in NAIVE else next(n for n in NAIVE if n.startswith("weighted"))
    ref = NAIVE[ref_name](np.stack([x.numpy() for x in xs]))
    np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-12, atol=1e-12)


def test_median_of_an_even_count_averages_the_middle_pair():
    xs = [torch.tensor([v], dtype=F64) for v in (4.0, 1.0, 3.0, 2.0)]
    assert _comp("median").build([1] * 4)(xs).item() == 2.5  # NumPy / textbook
    assert _comp("median(mode = \"lower\")").build([1] * 4)(xs).item() == 2.0  # torch.median


def test_max_ties_share_the_gradient():
    a = torch.tensor([1.0, 2.0], dtype=F64, requires_grad=True)
    b = torch.tensor([1.0, 0.0], dtype=F64, requires_grad=True)
    _comp("max").build([2, 2])([a, b]).sum().backward()
    assert a.grad.tolist() == [0.5, 1.0] and b.grad.tolist() == [0.5, 0.0]


def test_concatenation_is_feature_wise():
    """Erratum 17: the paper's "row-wise" ⊔ is, by its shapes (m x Σ n_i), a concatenation of features."""
    xs = [_rand(2, 3, 1), _rand(2, 3, 4, seed=4)]
    out = _comp("concat").build([1, 4])(xs)
    assert out.shape == (2, 3, 5)
    torch.testing.assert_close(out[..., 1:], xs[1])


def test_weighted_fusion_parameters():
    comp = _comp("weighted")
    assert comp.count([3, 3, 3]) == 3
    mod = comp.build([3, 3, 3]).double()
    torch.testing.assert_close(mod.weights, torch.full((3,), 1 / 3, dtype=F64))  # default start: the average
    xs = [_rand(2, 3, seed=s) for s in range(3)]
    mod(xs).sum().backward()
    torch.testing.assert_close(mod.weights.grad, torch.stack([x.sum() for x in xs]))
    assert _comp("weighted(weights = [1.0, 2.0], learnable = false)").count([3, 3]) == 0


# ------------------------------------------------------------------------------------------------ projections
def _concat_input(dims, seed=0):
    return [_rand(2, d, seed=seed + i) for i, d in enumerate(dims)]


def test_concat_linear_is_eq_119():
    comp = _comp("concat_linear(out = 3)")
    dims = [2, 4]
    assert comp.count(dims) == 6 * 3 + 3
    mod = comp.build(dims).double()
    xs = _concat_input(dims)
    Z = np.concatenate([x.numpy() for x in xs], -1)
    W = mod.linear.weight.detach().numpy().T  # eq (119)'s W ∈ R^{(Σ n_i) x n}, stored as nn.Linear's weight
    assert W.shape == (6, 3)
    np.testing.assert_allclose(mod(xs).detach().numpy(), Z @ W + mod.linear.bias.detach().numpy())
    assert _comp("concat_linear").out_features(dims) == 6  # default n = Σ n_i


@SETTINGS
@given(dims=st.lists(st.integers(1, 4), min_size=1, max_size=3), n=st.integers(1, 5), r=st.integers(1, 3),
       bias=st.booleans())
def test_concat_lowrank_is_eq_120(dims, n, r, bias):
    comp = _comp(f"concat_lowrank(out = {n}, r = {r}, bias = {str(bias).lower()})")
    assert comp.count(dims) == r * (sum(dims) + n) + (n if bias else 0)
    mod = comp.build(dims).double()
    assert sum(p.numel() for p in mod.parameters()) == comp.count(dims)
    xs = _concat_input(dims)
    W = mod.P.detach().numpy() @ mod.Q.detach().numpy().T
    assert np.linalg.matrix_rank(W) <= r
    Z = np.concatenate([x.numpy() for x in xs], -1)
    ref = Z @ W + (mod.bias.detach().numpy() if bias else 0)
    np.testing.assert_allclose(mod(xs).detach().numpy(), ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("text,count,kron", [
    ("concat_hm(out = 4, p = 2, q = 3, bias = false)", 2 * 3 + 2 * 2, lambda m: np.kron(m.A, m.B)),
    ("concat_lphm(out = 4, p = 2, q = 3, r = 1, bias = false)", 2 * 3 + 1 * (2 + 2), lambda m: np.kron(m.A, m.S @ m.T)),
    ("concat_dual_lphm(out = 4, p = 2, q = 3, r = 2, bias = false)", 2 * (2 + 3 + 2 + 2),
     lambda m: np.kron(m.P @ m.Q, m.S @ m.T)),
    ("concat_vera(out = 4, r = 3, bias = false)", 4 + 3,
     lambda m: np.diag(m.lambda1) @ m.A @ np.diag(m.lambda2) @ m.B.T),
])
def test_reconciled_concatenations_are_true_kronecker_and_counted(text, count, kron):
    comp = _comp(text)
    dims = [2, 4]  # Σ n_i = 6 = q·t
    assert comp.check(dims) is None and comp.count(dims) == count
    mod = comp.build(dims).double()
    assert sum(p.numel() for p in mod.parameters()) == count
    tensors = {k: v.detach().numpy() for k, v in mod.psi.tensors().items()}
    W = kron(type("T", (), tensors))  # ψ ∈ R^{n x Σ n_i}
    xs = _concat_input(dims)
    Z = np.concatenate([x.numpy() for x in xs], -1)
    np.testing.assert_allclose(mod(xs).detach().numpy(), Z @ W.T, rtol=1e-10, atol=1e-12)
    assert _comp(text.replace("bias = false", "bias = true")).count(dims) == count + 4


@pytest.mark.parametrize("text", ["weighted", "concat_linear(out = 3)", "concat_lowrank(out = 3)", "max", "median",
                                  "l2_norm", "concat_hm(out = 2, p = 2, q = 2)", "concat_vera(out = 3)", "prod"])
def test_gradcheck(text):
    dims = [4, 4]
    mod = _comp(text).build(dims).double()
    names = [k for k, _ in mod.named_parameters()]
    leaves = [p.detach().clone().requires_grad_() for p in mod.parameters()]
    xs = [_rand(2, 4, seed=s).requires_grad_() for s in range(2)]

    def f(a, b, *ws):
        return torch.func.functional_call(mod, dict(zip(names, ws)), ([a, b],))

    assert torch.autograd.gradcheck(f, (*xs, *leaves))


def test_shape_rule_errors():
    for fusion, widths, msg in [("sum", (4, 8), "equal widths"), ("weighted(weights = [1.0])", (4, 4), "1 weights"),
                                ("concat_hm(out = 5, p = 2)", (4, 4), "not divisible by p=2")]:
        with pytest.raises(rpn2c.SpecError) as exc:
            rpn2c.check(_layer(fusion, widths))
        assert exc.value.diagnostics[0].code == "E0402" and msg in exc.value.diagnostics[0].message
