"""Learned and composed interdependence entries: parameterised matrices, bilinear forms with fabricated W, the
RPN-based ξ and hybrid fusions — count rules, closed forms, gradcheck, the GAT-like sparse path, both lowerings."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.autograd import gradcheck

import rpn2c
from rpn2c.components import REGISTRY
from rpn2c.components.base import XiContext
from rpn2c.components.registry import ValueRef
from rpn2c.errors import SpecError
from rpn2c.functional import reconciliation as recon
from tests.test_lowering_equivalence import _rand, assert_equivalent

F64 = torch.float64
EDGES = torch.tensor([[0, 1, 2, 3, 3, 4, 1, 1, 2], [1, 2, 3, 0, 4, 4, 0, 0, 2]])


def _build(name, axis="instance", n=5, m=4, aux=None, **hp):
    for k in aux or {}:
        hp.setdefault(k, ValueRef(k))
    entry = REGISTRY["interdependence"][name]
    comp = entry.cls(entry.schema(**hp))
    ctx = XiContext(axis, n if axis == "instance" else m, m, m, n, {k: None for k in (aux or {})})
    return comp, ctx, comp.build(ctx).double()


# ------------------------------------------------------------------------------------------------ parameterised
@pytest.mark.parametrize("name, hp, l", [
    ("parameterized", {"out": 3}, 3 * 5),
    ("lowrank_parameterized", {"r": 2}, 2 * (5 + 5)),
    ("hm_parameterized", {"out": 6, "p": 2, "q": 5}, 2 * 5 + 3 * 1),
    ("lphm_parameterized", {"out": 6, "p": 3, "q": 1, "r": 1}, 3 * 1 + 1 * (2 + 5)),
    ("dual_lphm_parameterized", {"out": 6, "p": 3, "q": 1, "r": 2}, 2 * (3 + 1 + 2 + 5)),
    ("rma_parameterized", {"r": 3}, 5 + 3),
])
def test_parameterized_count_rule_matches_the_module(name, hp, l):
    comp, ctx, mod = _build(name, **hp)
    assert comp.count(ctx) == l == sum(p.numel() for p in mod.parameters())
    out = hp.get("out", 5)
    assert comp.out_size(ctx) == out
    a = mod.matrix(None, None, {}, 5)
    assert a.shape == (out, 5)  # instance axis: row = output item
    z = _rand(2, 5, 3)
    torch.testing.assert_close(mod.apply(z, z, z, {}), a @ z)  # factored apply = literal matrix


def test_hm_matrix_is_a_true_kronecker_product():
    """Toolkit bug 3: its HM is a reshaped outer product; here A = A_p ⊗ B exactly (torch.kron)."""
    _, _, mod = _build("hm_parameterized", "attribute", m=4, out=6, p=2, q=2)
    psi = torch.kron(mod.fab.A, mod.fab.B)  # ψ ∈ R^{out x size}
    torch.testing.assert_close(mod.matrix(None, None, {}, 4), psi.T)
    outer = (mod.fab.A.reshape(-1, 1) @ mod.fab.B.reshape(1, -1)).reshape(6, 4)
    assert not torch.allclose(psi, outer)


def test_rma_random_factors_are_persistent_buffers():
    _, _, mod = _build("rma_parameterized", r=2)
    keys = set(mod.state_dict())
    assert {"fab.A", "fab.B"} <= keys and {"fab.lambda1", "fab.lambda2"} <= keys
    assert {n for n, _ in mod.named_parameters()} == {"fab.lambda1", "fab.lambda2"}


def test_parameterized_psi_keys_are_checked():
    schema = REGISTRY["interdependence"]["parameterized"].schema
    with pytest.raises(ValueError, match="takes: r"):
        schema(psi="lorr", p=2)
    with pytest.raises(ValueError):
        REGISTRY["interdependence"]["hm_parameterized"].schema(psi="lorr")
    text = "model p { input x: sequence[B, 5, 4] y = head(x) { xi_instance = hm_parameterized(p = 2, q = 2)  out = 2 } return y }"
    with pytest.raises(SpecError, match="divisible"):
        rpn2c.check(text)


# ------------------------------------------------------------------------------------------------ bilinear
def test_bilinear_closed_forms():
    x = _rand(2, 5, 4)
    _, _, mod = _build("parameterized_bilinear", "attribute", softmax=False, scale=1.0)
    w = mod.fab.W  # W ∈ R^{N x N}: A = XᵀWX (eq 55), attribute axis
    torch.testing.assert_close(mod.matrix(x, x, {}, 4), x.mT @ w.T @ x)
    _, _, inst = _build("hm_bilinear", "instance", softmax=True, p=2, q=2)
    w = torch.kron(inst.fab.A, inst.fab.B)  # W ∈ R^{Mq x Mc}, Kronecker-factored
    want = torch.softmax(x @ w @ x.mT / 2.0, dim=-1)  # scale 1/sqrt(Mc)
    torch.testing.assert_close(inst.matrix(x, x, {}, 5), want)
    z = _rand(2, 5, 3, seed=8)
    torch.testing.assert_close(inst.apply(z, x, x, {}), want @ z)


@pytest.mark.parametrize("name, hp", [("parameterized_bilinear", {}), ("lphm_bilinear", {"r": 1}),
                                      ("dual_lphm_bilinear", {"r": 1}), ("rma_bilinear", {}),
                                      ("lowrank_parameterized", {"r": 2}), ("rpn_interdependence",
                                                                            {"kappa": "chebyshev", "kappa_d": 2,
                                                                             "pi": "linear"})])
def test_gradcheck_parameters_and_inputs(name, hp):
    _, _, mod = _build(name, "instance", 4, 3, **hp)
    wrapper = _Matrix(mod)
    x = _rand(2, 4, 3, seed=5).requires_grad_()
    assert gradcheck(wrapper, (x,), eps=1e-6, atol=1e-5)
    for pname, p in wrapper.named_parameters():  # each parameter tensor against finite differences

        def g(v, pname=pname):
            return torch.func.functional_call(wrapper, {pname: v}, (x.detach(),), strict=False)

        assert gradcheck(g, (p.detach().clone().requires_grad_(),), eps=1e-6, atol=1e-5)


class _Matrix(torch.nn.Module):
    """The literal matrix of a built ξ as a module (for gradcheck / functional_call)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, t):
        return self.inner.matrix(t, t, {}, t.shape[-2])


# ------------------------------------------------------------------------------------------------ RPN-based
def test_rpn_interdependence_closed_forms():
    x = _rand(2, 5, 4)
    comp, ctx, mod = _build("rpn_interdependence", "attribute", out=3)  # columnwise: A[i, :] = ψ x_i (κ = id)
    w = mod.fab.W  # ψ' ∈ R^{out x N}
    torch.testing.assert_close(mod.matrix(x, x, {}, 4), x.mT @ w.T)
    assert comp.out_size(ctx) == 3 and comp.count(ctx) == 3 * 5
    comp, ctx, mod = _build("rpn_interdependence", "instance", form="flatten", out=2, pi="linear")
    w, lin = mod.fab.W, mod.pi  # eq (58): flatten(X) -> R^{size·out}, reshaped, rows = input positions
    flat = x.flatten(-2)
    want = (flat @ w.T + lin(flat)).reshape(2, 5, 2).mT
    torch.testing.assert_close(mod.matrix(x, x, {}, 5), want)
    assert comp.count(ctx) == 10 * 20 + (10 * 20 + 10)
    with pytest.raises(ValueError, match="kappa_"):
        REGISTRY["interdependence"]["rpn_interdependence"].schema(d=2)
    with pytest.raises(ValueError, match="kappa"):
        REGISTRY["interdependence"]["rpn_interdependence"].schema(kappa="chain")


# ------------------------------------------------------------------------------------------------ hybrid
def _hybrid_pair(normalize, scale=1.0, **hp):
    """The hybrid's default (sparse) apply and its literal matrix, on the same weights."""
    _, _, mod = _build("hybrid", aux={"edges": EDGES}, parts=["graph", "parameterized_bilinear"],
                       p2_softmax=False, normalize=normalize, softmax_scale=scale, **hp)
    x, z = _rand(2, 5, 4), _rand(2, 5, 3, seed=7)
    return mod, x, z


@pytest.mark.parametrize("normalize", ["none", "softmax", "softmax_column", "row", "column", "symmetric"])
def test_gat_like_hybrid_sparse_path_equals_dense_masked_form(normalize):
    mod, x, z = _hybrid_pair(normalize, 0.5)
    a = mod.matrix(x, x, {"edges": EDGES}, 5)
    g = torch.zeros(5, 5, dtype=F64).index_put_((EDGES[1], EDGES[0]), torch.ones(9, dtype=F64), accumulate=True)
    logits = x @ mod.parts[1].fab.W @ x.mT  # no 1/√r without softmax (eq 86; docs/semantics.md)
    fused = g * logits  # eq (86): A_g ∘ A_b, duplicate edges add up
    if normalize == "softmax":  # eq (87): softmax over the non-zero entries (the paper's column = our row)
        want = torch.softmax((0.5 * fused).masked_fill(fused == 0, float("-inf")), dim=-1).nan_to_num(0.0)
        torch.testing.assert_close(a, want)
        torch.testing.assert_close(a.sum(-1)[:, g.sum(-1) > 0], torch.ones(2, 5, dtype=F64)[:, g.sum(-1) > 0])
    elif normalize == "none":
        torch.testing.assert_close(a, fused)
    torch.testing.assert_close(mod.hadamard_on_edges(z, x, x, {"edges": EDGES}), a @ z)  # kernel edge_hadamard
    torch.testing.assert_close(mod.apply(z, x, x, {"edges": EDGES}), a @ z)


def test_sparse_hadamard_path_never_builds_the_graph_matrix(monkeypatch):
    mod, x, z = _hybrid_pair("softmax")
    monkeypatch.setattr(type(mod.parts[0]), "matrix", lambda *a, **k: pytest.fail("dense graph matrix built"))
    monkeypatch.setattr(type(mod.parts[1]), "matrix", lambda *a, **k: pytest.fail("dense bilinear built"))
    y = mod.hadamard_on_edges(z, x, x, {"edges": EDGES})
    assert y.shape == (2, 5, 3)


def test_gat_like_hybrid_allocates_nothing_n_by_n():
    from torch.utils._python_dispatch import TorchDispatchMode

    n = 48
    ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
    _, _, mod = _build("hybrid", n=n, aux={"edges": ring}, parts=["graph", "parameterized_bilinear"],
                       p2_softmax=False, normalize="softmax")
    x, z = _rand(1, n, 4), _rand(1, n, 3, seed=2)
    shapes = []

    class Rec(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            shapes.extend(tuple(t.shape) for t in (out if isinstance(out, (tuple, list)) else (out,))
                          if isinstance(t, torch.Tensor))
            return out

    with Rec():
        mod.hadamard_on_edges(z, x, x, {"edges": ring})
    assert shapes and not [s for s in shapes if sum(d >= n for d in s) >= 2]


def test_hybrid_key_routing_and_errors():
    schema = REGISTRY["interdependence"]["hybrid"].schema
    with pytest.raises(ValueError, match="no part takes"):
        schema(parts=["chain", "graph"], edges=ValueRef("e"), sigma=1.0)
    with pytest.raises(ValueError, match="part 3"):
        schema(parts=["chain", "graph"], edges=ValueRef("e"), p3_norm="row")
    with pytest.raises(ValueError, match="cannot be fused"):
        schema(parts=["grid_patch", "chain"], size=3)
    with pytest.raises(ValueError, match="weights"):
        schema(parts=["chain", "one"], fusion="hadamard", weights=[1.0, 2.0])
    hp = schema(parts=["chain", "chain"], p1_direction="backward", norm="row")
    comp = REGISTRY["interdependence"]["hybrid"].cls(hp)
    assert [p.hp.direction for p, _ in comp.parts] == ["backward", "forward"]
    assert [p.hp.norm for p, _ in comp.parts] == ["row", "row"]  # a plain key goes to every part declaring it
    assert comp.kind == "static"
    assert REGISTRY["interdependence"]["hybrid"].cls(schema(parts=["chain", "pearson"])).kind == "data"


# ------------------------------------------------------------------------------------------------ lowerings
LEARNED = [
    "parameterized(out = 3)", "lowrank_parameterized(r = 1)", "rma_parameterized(r = 2)",
    'parameterized(psi = "hypernet", l = 3, d = 4)', 'parameterized(psi = "masking", p = 0.5)',
    "parameterized_bilinear(softmax = {sm})", "lphm_bilinear(softmax = {sm}, r = 1)",
    "rma_bilinear(softmax = {sm})", 'parameterized_bilinear(psi = "lorr", r = 2, softmax = {sm}, scale = 0.5)',
    'rpn_interdependence(kappa = "chebyshev", kappa_d = 2, psi = "lorr", psi_r = 2, pi = "linear")',
    'rpn_interdependence(form = "flatten", kappa = "taylor", kappa_d = 2, psi = "lorr", psi_r = 1, out = 2)',
]
HYBRIDS = [
    'hybrid(parts = ["graph", "low_rank_bilinear"], edges = edges, rank = 2, softmax = false, normalize = "{norm}")',
    'hybrid(parts = ["graph", "parameterized_bilinear"], edges = edges, p2_softmax = false, normalize = "{norm}")',
    'hybrid(parts = ["graph", "gaussian_rbf_kernel"], edges = edges, p1_norm = "row", normalize = "{norm}")',
    'hybrid(parts = ["graph", "identity"], edges = edges, norm = "row", fusion = "sum", normalize = "{norm}")',
    'hybrid(parts = ["chain", "pearson_correlation"], normalize = "{norm}")',
    'hybrid(parts = ["chain", "graph", "cosine_similarity"], edges = edges, fusion = "mean", normalize = "{norm}")',
    'hybrid(parts = ["chain", "one"], fusion = "max", normalize = "{norm}")',
    'hybrid_kernel(parts = ["gaussian_rbf_kernel", "linear_kernel"], weights = [0.7, 0.3], normalize = "{norm}")',
]


@settings(max_examples=25, deadline=None)
@given(xi=st.sampled_from(LEARNED), sm=st.booleans(), slot=st.sampled_from(["xi_instance", "xi_attribute",
                                                                             "xi_instance_prior"]),
       channels=st.integers(1, 2))
def test_learned_default_equals_reference(xi, sm, slot, channels):
    xi = xi.format(sm=str(sm).lower())
    if slot == "xi_attribute" and "out = 2" in xi:
        xi = xi.replace("out = 2", "out = 3")
    text = (f"model l {{ input x: sequence[B, 5, 4] y = head(x) {{ {slot} = {xi}  out = 3  channels = {channels} }}"
            " return y }")
    assert_equivalent(text, {"x": _rand(2, 5, 4)})


@settings(max_examples=25, deadline=None)
@given(xi=st.sampled_from(HYBRIDS), norm=st.sampled_from(["none", "softmax", "row", "column", "symmetric",
                                                          "mean_std"]),
       slot=st.sampled_from(["xi_instance", "xi_instance_prior"]))
def test_hybrid_default_equals_reference(xi, norm, slot):
    text = (f"model h {{ input x: sequence[B, 5, 4] input edges: edges[2, E] y = head(x) {{ {slot} = "
            f"{xi.format(norm=norm)}  out = 3 }} return y }}")
    assert_equivalent(text, {"x": _rand(2, 5, 4), "edges": EDGES})


def test_attribute_hybrid_and_cross_bilinear_lower_equally():
    text = ('model h { input x: sequence[B, 3, 5] input edges: edges[2, E] y = head(x) { xi_attribute = hybrid(parts '
            '= ["graph", "parameterized_bilinear"], edges = edges, p2_softmax = false, normalize = "softmax")  out = 3 '
            '} return y }')
    assert_equivalent(text, {"x": _rand(2, 3, 5), "edges": EDGES})
    text = ('model c { input x: sequence[B, 5, 4] input mem: sequence[B, 3, 2] y = head(x, context = mem) { '
            'xi_instance = dual_lphm_bilinear(r = 1, p = 2, q = 2)  out = 2 } return y }')
    assert_equivalent(text, {"x": _rand(2, 5, 4), "mem": _rand(2, 3, 2, seed=3)})
    assert rpn2c.check(text).param_count == recon.get_reconciliation("dual_lphm").num_params(4, 2, r=1, p=2, q=2) + \
        2 * 2 + 2


def test_out_changing_posterior_attribute_xi():
    """An attribute-post ξ that changes the width acts on κ's width (HeadTrace.dk), not on its own output's."""
    text = "model p { input x: sequence[B, 5, 4] y = head(x) { xi_attribute_post = parameterized(out = 3)  out = 2 } return y }"
    assert_equivalent(text, {"x": _rand(2, 5, 4)})


@pytest.mark.parametrize("modes", [("block", "keep"), ("add", "block")])
@pytest.mark.parametrize("causal, window", [(False, None), (True, 1), (False, 2)])
def test_hybrid_edge_masks_are_the_bilinear_parts_masks(modes, causal, window):
    """The masks a bilinear part adds at the edges are the entries of its dense mask, and that dense mask is
    ``structure.additive_mask`` of the part's settings (index band and literal band alike)."""
    from types import SimpleNamespace

    from rpn2c.components.impl.xi_attention import _BilinearXi
    from rpn2c.functional import structure

    entry = REGISTRY["interdependence"]["low_rank_bilinear"]
    hp = entry.schema(rank=2, causal=causal, window=window, attn_mask=ValueRef("am"), key_padding=ValueRef("kp"))
    types = {"attn_mask": SimpleNamespace(mask_mode=modes[0]), "key_padding": SimpleNamespace(mask_mode=modes[1])}
    part = _BilinearXi(hp, 4, 4, 2, types)
    g = torch.Generator().manual_seed(0)
    am = torch.randn(5, 6, generator=g, dtype=F64) if modes[0] == "add" else torch.rand(5, 6, generator=g) < 0.5
    aux = {"attn_mask": am, "key_padding": torch.rand(2, 6, generator=g) < 0.5}
    for literal in (False, True):
        dense = part._additive_mask(aux, 5, 6, F64, None, literal=literal)
        shared = structure.additive_mask(5, 6, F64, None, causal=causal, window=window, attn_mask=am,
                                         attn_mode=modes[0], key_padding=aux["key_padding"],
                                         padding_mode=modes[1], literal=literal)
        assert torch.equal(shared, dense)
    dst, src = torch.tensor([0, 4, 2, 3, 1]), torch.tensor([5, 0, 2, 3, 1])
    assert torch.equal(part.entry_bias(aux, 5, 6)(dst, src, F64), dense[..., dst, src])


@pytest.mark.parametrize("softmax", [True, False])
@pytest.mark.parametrize("full", [True, False])
def test_bilinear_entries_are_the_entries_of_its_matrix(softmax, full):
    """``_BilinearXi.entries`` (what a hybrid gathers at its edges) equals the literal masked matrix at (dst, src)."""
    from types import SimpleNamespace

    from rpn2c.components.impl.xi_attention import _BilinearXi

    name = "bilinear" if full else "low_rank_bilinear"
    hp = REGISTRY["interdependence"][name].schema(**({} if full else {"rank": 2}), softmax=softmax, causal=True,
                                                  window=2, attn_mask=ValueRef("am"))
    part = _BilinearXi(hp, 4, 3, None if full else 2, {"attn_mask": SimpleNamespace(mask_mode="add")}).double()
    q, c = _rand(2, 5, 4), _rand(2, 5, 3)
    aux = {"attn_mask": _rand(5, 5)}
    dst, src = torch.tensor([0, 4, 2, 3, 1, 4, 2]), torch.tensor([0, 0, 2, 1, 1, 3, 4])
    torch.testing.assert_close(part.entries(q, c, aux, dst, src), part.matrix(q, c, aux)[..., dst, src],
                               rtol=1e-12, atol=1e-14)
