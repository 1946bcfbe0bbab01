"""The spectral graph ξ ``chebyshev_graph`` (seed 001 §7.5; ChebNet) and ``examples/specs/chebnet.rpn``.

Checked against constructions written from the definitions, not from the implementation: the Laplacian and the
Chebyshev recurrence built in numpy from a dense adjacency; the seed's polynomial kernel Σ α_k L^k with α
converted from the Chebyshev coefficients by numpy.polynomial; and torch_geometric's ``ChebConv`` (normalization
"sym", λ_max = 2). Both lowerings, float64; the default lowering never builds an n x n matrix.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.polynomial import chebyshev as npcheb
from numpy.polynomial import polynomial as nppoly
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

import rpn2c
from rpn2c.functional.structure import chebyshev

SPEC = Path(__file__).resolve().parents[2] / "examples" / "specs" / "chebnet.rpn"


def _numpy_operator(edges, weight, n, norm, lambda_max, scale):
    """M = 2L/λ_max − I (or L) from the definitions: A[dst, src] = Σ w without self-loops, d_j = Σ_i A[i, j]."""
    a = np.zeros((n, n))
    for (s, t), w in zip(edges.T, weight):
        if s != t:
            a[t, s] += w
    d = a.sum(0)
    eye = np.eye(n)
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
    lap = {"none": np.diag(d) - a, "sym": eye - np.diag(np.sqrt(inv)) @ a @ np.diag(np.sqrt(inv)),
           "rw": eye - a @ np.diag(inv)}[norm]
    return 2.0 * lap / lambda_max - eye if scale else lap


def _numpy_filter(m, order, basis):
    ts = [np.eye(len(m)), m]
    for _ in range(order):
        ts.append(2 * m @ ts[-1] - ts[-2] if basis == "chebyshev" else m @ ts[-1])
    return ts[order]


@st.composite
def _graphs(draw):
    n = draw(st.integers(1, 7))
    e = draw(st.integers(0, 14))
    src = draw(st.lists(st.integers(0, n - 1), min_size=e, max_size=e))
    dst = draw(st.lists(st.integers(0, n - 1), min_size=e, max_size=e))
    weight = draw(st.lists(st.floats(0.1, 3.0), min_size=e, max_size=e))
    return n, np.array([src, dst], dtype=np.int64).reshape(2, e), np.array(weight)


def _head(norm, lambda_max, scale, order, basis, weighted):
    xi = (f'chebyshev_graph(edges = edges{", weight = w" if weighted else ""}, order = {order}, norm = "{norm}", '
          f'lambda_max = {lambda_max}, scale = {str(scale).lower()}, basis = "{basis}")')
    extra = "  input w: edge_weight[E]\n" if weighted else ""
    return (f"model m {{\n  input x: nodes[N, 3]\n  input edges: edges[2, E]\n{extra}  y = head(x) {{\n"
            f"    xi_instance = {xi}\n    psi = eye\n    out = 3\n    bias = false\n  }}\n  return y\n}}\n")


@lru_cache(maxsize=None)
def _models(*key):
    text = _head(*key)
    return [rpn2c.compile(text, reference=r).double() for r in (False, True)]


@settings(max_examples=40, deadline=None)
@given(graph=_graphs(), norm=st.sampled_from(["sym", "rw", "none"]), lambda_max=st.sampled_from([2.0, 1.5, 3.0]),
       scale=st.booleans(), order=st.integers(0, 4), basis=st.sampled_from(["chebyshev", "power"]),
       weighted=st.booleans())
def test_filter_equals_the_numpy_construction_in_both_lowerings(graph, norm, lambda_max, scale, order, basis,
                                                                 weighted):
    n, edges, weight = graph
    if not weighted:
        weight = np.ones(edges.shape[1])
    x = np.random.default_rng(n).standard_normal((n, 3))
    want = _numpy_filter(_numpy_operator(edges, weight, n, norm, lambda_max, scale), order, basis) @ x
    args = [torch.tensor(x), torch.tensor(edges)] + ([torch.tensor(weight)] if weighted else [])
    for model in _models(norm, lambda_max, scale, order, basis, weighted):
        assert_close(model(*args), torch.tensor(want), rtol=1e-10, atol=1e-10)


def test_the_literal_operator_and_filter_are_the_numpy_ones():
    rng = np.random.default_rng(0)
    edges = rng.integers(0, 6, size=(2, 12))
    w = rng.uniform(0.5, 2, 12)
    for norm in ("sym", "rw", "none"):
        m = chebyshev.laplacian_matrix(torch.tensor(edges), torch.tensor(w), 6, norm, 2.0, True, torch.float64,
                                       torch.device("cpu"))
        want = _numpy_operator(edges, w, 6, norm, 2.0, True)
        assert_close(m, torch.tensor(want))
        for k in range(5):
            assert_close(chebyshev.polynomial_matrix(m, k), torch.tensor(_numpy_filter(want, k, "chebyshev")))


def test_chebyshev_filters_are_the_seeds_polynomial_kernel():
    """Σ_k θ_k T_k(L̃) = Σ_k α_k L^k (seed 001 §7.5), α from θ: T_k to monomials in x (numpy's cheb2poly), then
    x = (2/λ_max) l − 1."""
    rng = np.random.default_rng(1)
    edges = np.array([[0, 1, 1, 2, 2, 3, 3, 0, 0, 2], [1, 0, 2, 1, 3, 2, 0, 3, 2, 0]])
    n, lam, theta = 4, 2.0, rng.standard_normal(4)
    lap = _numpy_operator(edges, np.ones(10), n, "sym", lam, scale=False)
    in_x = npcheb.cheb2poly(theta)  # Σ θ_k T_k(x) as Σ c_j x^j
    alpha = np.zeros(len(in_x))
    sub = np.array([-1.0, 2.0 / lam])  # x = (2/λ) l − 1 as a polynomial in l
    power = np.array([1.0])
    for c in in_x:
        alpha[: len(power)] += c * power
        power = nppoly.polymul(power, sub)
    seed_form = sum(a * np.linalg.matrix_power(lap, k) for k, a in enumerate(alpha))
    x = rng.standard_normal((n, 3))
    want = seed_form @ x
    got = 0
    for k, t in enumerate(theta):
        for model in _models("sym", 2.0, True, k, "chebyshev", False):
            out = model(torch.tensor(x), torch.tensor(edges))
        got = got + t * out
    assert_close(got, torch.tensor(want), rtol=1e-12, atol=1e-12)
    # the seed's kernel written directly: scale = false, basis = "power" is L^k
    got = sum(a * _models("sym", 2.0, False, k, "power", False)[0](torch.tensor(x), torch.tensor(edges))
              for k, a in enumerate(alpha))
    assert_close(got, torch.tensor(want), rtol=1e-12, atol=1e-12)


def _chebnet(reference):
    model = rpn2c.compile_file(SPEC, reference=reference).double().eval()
    return model


def test_chebnet_spec_equals_pyg_chebconv_in_both_lowerings():
    from torch_geometric.nn import ChebConv
    from torch_geometric.utils import to_undirected

    torch.manual_seed(0)
    edges = to_undirected(torch.randint(0, 9, (2, 20)))
    x = torch.randn(9, 34, dtype=torch.float64)
    c1 = ChebConv(34, 16, K=3, normalization="sym").double()
    c2 = ChebConv(16, 2, K=3, normalization="sym").double()
    want = c2(torch.relu(c1(x, edges, lambda_max=2.0)), edges, lambda_max=2.0)
    state = {}
    for layer, conv in (("h", c1), ("y", c2)):
        for k, lin in enumerate(conv.lins):
            state[f"{layer}.heads.t{k}.psi.weight"] = lin.weight.detach().clone()
        state[f"{layer}.heads.t0.bias"] = conv.bias.detach().clone()
    assert sum(v.numel() for v in state.values()) == sum(p.numel() for c in (c1, c2) for p in c.parameters())
    for reference in (False, True):
        model = _chebnet(reference)
        model.load_state_dict(state, strict=True)
        assert_close(model(x, edges), want, rtol=1e-12, atol=1e-12)


def test_the_default_lowering_builds_no_dense_matrix(monkeypatch):
    """The literal builders are the reference lowering's: the default forward never calls them."""
    def refuse(*a, **k):
        raise AssertionError("a dense structural matrix was built")

    model = _chebnet(False)
    monkeypatch.setattr(chebyshev, "laplacian_matrix", refuse)
    monkeypatch.setattr(chebyshev, "polynomial_matrix", refuse)
    edges = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    y = model(torch.randn(3, 34, dtype=torch.float64), edges)
    assert y.shape == (3, 2)
    with pytest.raises(AssertionError, match="dense"):
        _chebnet(True)(torch.randn(3, 34, dtype=torch.float64), edges)


@pytest.mark.parametrize("setting, code, at, says", [
    ("xi_attribute = chebyshev_graph(edges = edges)", "E0402", "5:20", "is instance interdependence"),
    ("xi_instance = chebyshev_graph(edges = edges, order = -1)", "E0303", "5:50", "'order' of 'chebyshev_graph'"),
    ("xi_instance = chebyshev_graph(edges = edges, norm = \"symmetric\")", "E0303", "5:50", "'sym', 'rw' or 'none'"),
    ("xi_instance = chebyshev_graph(edges = x)", "E0402", "5:19", "must name a edges input, got nodes[N, 3]"),
])
def test_bad_settings_are_located_errors(setting, code, at, says):
    text = (f"model m {{\n  input x: nodes[N, 3]\n  input edges: edges[2, E]\n  y = head(x) {{\n    {setting}\n"
            f"    out = 2\n  }}\n  return y\n}}\n")
    with pytest.raises(rpn2c.SpecError) as err:
        rpn2c.check(text, "m.rpn")
    d = err.value.diagnostics[0]
    assert d.code == code and f"{d.span.line}:{d.span.col}" == at, (d.code, d.span, d.message)
    assert says in d.message


class _CountScatters(TorchDispatchMode):
    """Counts the sparse propagations a forward runs: each is one ``scatter_add`` over the edge list."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.scatter_add, torch.ops.aten.scatter_add_):
            self.count += 1
        return func(*args, **(kwargs or {}))


def _layer(orders, norm="sym", basis="chebyshev", widths=(5, 3)):
    heads = "".join(f"    head t{i} {{\n      xi_instance = chebyshev_graph(edges = edges, order = {k}, norm = \"{norm}\", "
                    f"basis = \"{basis}\")\n      out = {widths[1]}\n{'' if i == 0 else '      bias = false' + chr(10)}"
                    f"    }}\n" for i, k in enumerate(orders))
    return (f"model m {{\n  input x: nodes[N, {widths[0]}]\n  input edges: edges[2, E]\n  y = layer(x) {{\n{heads}"
            f"    fusion = sum\n  }}\n  return y\n}}\n")


def _compiled(text, reference=False, disable=()):
    from rpn2c.lower.build import CompiledModel
    from rpn2c.passes import optimize

    return CompiledModel(optimize(rpn2c.check(text), disable=disable), reference=reference).double().eval()


def _propagations(model, *inputs):
    with _CountScatters() as counter:
        out = model(*inputs)
    return out, counter.count


@pytest.mark.parametrize("k", [2, 3, 5, 8])
def test_a_chebnet_layer_runs_k_minus_one_propagations(k):
    """K heads of orders 0 … K−1 share one recurrence: K − 1 sparse propagations (PyG's ChebConv runs K − 1),
    where the heads one by one run Σ_k k = K(K − 1)/2 (the rule switched off); the values are the oracle's."""
    torch.manual_seed(k)
    edges = torch.randint(0, 8, (2, 20))
    x = torch.randn(8, 5, dtype=torch.float64)
    text = _layer(range(k))
    fast, slow, oracle = _compiled(text), _compiled(text, disable={"chebyshev_heads"}), _compiled(text, True)
    slow.load_state_dict(fast.state_dict())
    oracle.load_state_dict(fast.state_dict())
    got, n_fast = _propagations(fast, x, edges)
    want, n_slow = _propagations(slow, x, edges)
    assert (n_fast, n_slow) == (k - 1, k * (k - 1) // 2)
    assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert_close(got, oracle(x, edges), rtol=1e-12, atol=1e-12)


def test_the_shipped_chebnet_runs_two_propagations_per_layer():
    edges = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    _, count = _propagations(_chebnet(False), torch.randn(4, 34, dtype=torch.float64), edges)
    assert count == 2 * 2  # two layers of K = 3


@settings(max_examples=25, deadline=None)
@given(orders=st.lists(st.integers(0, 6), min_size=2, max_size=4), norm=st.sampled_from(["sym", "rw", "none"]),
       basis=st.sampled_from(["chebyshev", "power"]), graph=_graphs())
def test_any_orders_sum_by_one_recurrence_equal_to_the_oracle(orders, norm, basis, graph):
    """Orders in any order, repeated or with gaps, either basis: the layer is Σ_h T_{k_h}(L̃) X Θ_h + b (numpy),
    with max k_h propagations; outputs and gradients equal the reference lowering's."""
    n, edges, _ = graph
    text = _layer(orders, norm, basis)
    fast, oracle = _compiled(text), _compiled(text, True)
    oracle.load_state_dict(fast.state_dict())
    x = torch.randn(n, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(n), requires_grad=True)
    e = torch.tensor(edges)
    got, count = _propagations(fast, x, e)
    assert count == max(orders)
    m = _numpy_operator(edges, np.ones(edges.shape[1]), n, norm, 2.0, True)
    want = sum(_numpy_filter(m, k, basis) @ x.detach().numpy() @ fast.y.heads[f"t{i}"].psi.weight.detach().numpy().T
               for i, k in enumerate(orders)) + fast.y.heads["t0"].bias.detach().numpy()
    assert_close(got, torch.tensor(want), rtol=1e-10, atol=1e-10)
    ref = oracle(x, e)
    assert_close(got, ref, rtol=1e-12, atol=1e-12)
    w = torch.randn_like(got)
    mine = torch.autograd.grad((got * w).sum(), [x, *fast.parameters()])
    theirs = torch.autograd.grad((ref * w).sum(), [x, *oracle.parameters()])
    for a, b in zip(mine, theirs):
        assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_heads_that_are_not_one_chebnet_filter_keep_their_own_terms():
    """Two Laplacians, a fusion other than sum, or a head with its own activation: no shared recurrence."""
    from rpn2c.passes import optimize

    def fired(text):
        return any("chebyshev_heads" in n.plan for n in optimize(rpn2c.check(text)).nodes())

    base = _layer([0, 1, 2])
    assert fired(base)
    assert not fired(base.replace('order = 2, norm = "sym"', 'order = 2, norm = "rw"'))
    assert not fired(base.replace("fusion = sum", "fusion = concat"))
    assert not fired(base.replace("      bias = false\n    }\n    head t2", "      bias = false\n      post = [relu]\n"
                                                                          "    }\n    head t2"))
