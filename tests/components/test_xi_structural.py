"""Structural interdependence entries: constant matrices, cylinder / sphere patches and packings, chain modes
(power / accumulate / inverse / exponential), graph multi-hop and PageRank — closed forms, errata pins and both
lowerings."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

import rpn2c
from rpn2c.components import REGISTRY
from rpn2c.components.base import XiContext
from rpn2c.components.registry import ValueRef
from rpn2c.components.xi import padding_matrix
from rpn2c.errors import SpecShapeError
from rpn2c.functional import structure
from tests.test_lowering_equivalence import _rand, assert_equivalent

F64 = torch.float64


def _comp(name, **hp):
    entry = REGISTRY["interdependence"][name]
    return entry.cls(entry.schema(**hp))


def _matrix(name, n, axis="instance", aux=None, **hp):
    for k in aux or {}:
        hp.setdefault(k, ValueRef(k))
    comp = _comp(name, **hp)
    aux_types = {k: None for k in (aux or {})}
    ctx = XiContext(axis, n, 3, 3, n if axis == "instance" else 2, aux_types)
    mod = comp.build(ctx).double()
    x = torch.zeros(1, n if axis == "instance" else 2, 3 if axis == "instance" else n, dtype=F64)
    return mod.matrix(x, x, aux or {}, n)


def _apply(name, z, axis="instance", aux=None, **hp):
    for k in aux or {}:
        hp.setdefault(k, ValueRef(k))
    comp = _comp(name, **hp)
    n = z.shape[-2] if axis == "instance" else z.shape[-1]
    ctx = XiContext(axis, n, z.shape[-1], z.shape[-1], z.shape[-2], {k: None for k in (aux or {})})
    return comp.build(ctx).double().apply(z, z, z, aux or {})


# ------------------------------------------------------------------------------------------------ constant
def test_constant_zero_one_matrices_and_out_size():
    torch.testing.assert_close(_matrix("constant", 3, c=0.5, out=2), torch.full((2, 3), 0.5, dtype=F64))
    torch.testing.assert_close(_matrix("constant", 3, "attribute", c=0.5, out=2), torch.full((3, 2), 0.5, dtype=F64))
    assert not _matrix("zero", 4).any() and bool((_matrix("one", 4) == 1).all())
    lit = [[1.0, 2.0], [0.0, 1.0], [3.0, 0.0]]  # rows = input positions, as the paper writes A
    torch.testing.assert_close(_matrix("constant", 3, matrix=lit), torch.tensor(lit, dtype=F64).T)
    torch.testing.assert_close(_matrix("constant", 3, "attribute", matrix=lit), torch.tensor(lit, dtype=F64))
    z = _rand(2, 3, 4)
    torch.testing.assert_close(_apply("constant", z, c=2.0, out=5), torch.full((5, 3), 2.0, dtype=F64) @ z)
    with pytest.raises(ValueError):
        REGISTRY["interdependence"]["constant"].schema(matrix=[[1.0], [1.0, 2.0]])
    text = "model c { input x: sequence[B, 5, 4] y = head(x) { xi_instance = constant(c = 0.5, out = 2)  out = 3 } return y }"
    assert str(rpn2c.check(text).node("y").type.items) == "2"
    with pytest.raises(SpecShapeError, match="3-row matrix"):
        rpn2c.check(text.replace("constant(c = 0.5, out = 2)", f"constant(matrix = {lit})"))


# ------------------------------------------------------------------------------------------------ patches
@pytest.mark.parametrize("shape, sizes", [("cylinder", [5, 13, 29, 49]), ("sphere", [7, 33, 123, 257])])
def test_patch_sizes_match_the_catalog_table(shape, sizes):
    rank = 2 if shape == "cylinder" else 3
    got = [_comp(f"{shape}_patch", radius=r).geometry(rank).patch_size for r in (1, 2, 3, 4)]
    assert got == sizes


def _naive_padding(spatial, stride, member, r, centred=True):
    """The paper's padding matrix by a coordinate loop: centres 0, s, 2s, … < L; taps in lexicographic order."""
    rank = len(spatial)
    rng = [range(-r, r + 1)] * rank
    taps = [d for d in itertools.product(*rng) if member(d)]
    centres = list(itertools.product(*(range(0, L, s) for L, s in zip(spatial, stride))))
    n = math.prod(spatial)
    a = np.zeros((n, len(centres) * len(taps)))
    for qi, c in enumerate(centres):
        for ti, d in enumerate(taps):
            pos = [ci + di for ci, di in zip(c, d)]
            if all(0 <= p < L for p, L in zip(pos, spatial)):
                flat = np.ravel_multi_index(pos, spatial)
                a[flat, qi * len(taps) + ti] = 1
    return a


@pytest.mark.parametrize("r, stride, spatial", [(1, (1, 1), (4, 5)), (2, (2, 1), (5, 6)), (2, (3, 2), (7, 5))])
def test_cylinder_membership_equals_a_naive_coordinate_loop(r, stride, spatial):
    geo = _comp("cylinder_patch", radius=r, stride=list(stride)).geometry(2)
    got = padding_matrix(geo, spatial, F64, None).numpy()
    np.testing.assert_array_equal(got, _naive_padding(spatial, stride, lambda d: d[0] ** 2 + d[1] ** 2 <= r * r, r))


@pytest.mark.parametrize("r, stride", [(1, (1, 1, 1)), (2, (2, 1, 3))])
def test_sphere_membership_equals_a_naive_coordinate_loop(r, stride):
    spatial = (4, 3, 5)
    geo = _comp("sphere_patch", radius=r, stride=list(stride)).geometry(3)
    got = padding_matrix(geo, spatial, F64, None).numpy()
    np.testing.assert_array_equal(got, _naive_padding(spatial, stride, lambda d: sum(v * v for v in d) <= r * r, r))


def test_cylinder_depth_range_honours_both_bounds():
    """Toolkit bug (catalog §3.2): it iterates k ∈ [−p'_d, p'_d]; here ∇k ∈ [−p_d, p'_d]."""
    geo = _comp("cylinder_patch", radius=1, depth=2, depth_after=0).geometry(3)
    assert geo.kernel == (3, 3, 3) and geo.patch_size == 5 * 3
    assert geo.pad_before == (1, 1, 2) and geo.pad_after == (1, 1, 0)


@pytest.mark.parametrize("shape", ["cuboid", "cylinder", "sphere"])
def test_every_packing_strategy_sets_the_stride_and_ceil_patch_count(shape):
    rank = 3 if shape == "sphere" else 2
    spatial = (9, 8, 7)[:rank]
    size = {"cuboid": "half = 2", "cylinder": "radius = 2", "sphere": "radius = 2"}[shape]
    params = {"cuboid": (2, 2), "cylinder": (2,), "sphere": 2}[shape]
    for conv in ("paper", "toolkit"):
        for strategy in structure.packing_strategies(shape):
            stride = structure.packing_stride(shape, strategy, params, conv)
            geo = _comp("geometric_patch", shape=shape, packing=strategy, packing_convention=conv, centres="cells",
                        **({"half": 2} if shape == "cuboid" else {"radius": 2})).geometry(rank)
            assert geo.stride == stride
            text = (f"model p {{ input x: grid[B, 1, {', '.join(map(str, spatial))}] y = head(x) {{ xi_attribute = "
                    f'geometric_patch(shape = "{shape}", {size}, packing = "{strategy}", packing_convention = '
                    f'"{conv}", centres = "cells")  out = 2 }} return y }}')
            out = rpn2c.check(text).node("y").type.spatial
            assert tuple(out) == tuple(-(-L // s) for L, s in zip(spatial, stride)), (strategy, conv)
    # erratum 7: the cylinder's denser hexagonal d_h is (√2/2)r in the paper and (√3/2)r in the toolkit
    assert structure.packing_stride("cylinder", "denser_hexagonal", (4,)) == (2, 4)
    assert _comp("cylinder_patch", radius=4, packing="denser_hexagonal",
                 packing_convention="toolkit").geometry(2).stride == (3, 4)


@settings(max_examples=12, deadline=None)
@given(case=st.sampled_from([
    ('cylinder_patch(radius = 1{s})', "grid[B, 2, 5, 4]", (2, 2, 5, 4)),
    ('cylinder_patch(radius = 2, stride = 2{s})', "grid[B, 1, 6, 5]", (2, 1, 6, 5)),
    ('cylinder_patch(radius = 1, depth = 1, depth_after = 0{s})', "grid[B, 1, 3, 4, 3]", (2, 1, 3, 4, 3)),
    ('sphere_patch(radius = 1{s})', "grid[B, 1, 3, 4, 3]", (2, 1, 3, 4, 3)),
    ('geometric_patch(shape = "cylinder", radius = 2, packing = "complete_hexagonal"{s})', "grid[B, 1, 7, 6]",
     (2, 1, 7, 6)),
    ('geometric_patch(shape = "cuboid", half = 1, packing = "complete_square"{s})', "grid[B, 1, 5, 6]", (2, 1, 5, 6)),
]), style=st.sampled_from(["", ', style = "conv", pad = "same"', ', style = "conv", pad = 1, dilation = 2',
                           ', style = "conv", pad = 2, padding_mode = "reflect"']),
   mode=st.sampled_from(["padding", "aggregation"]), kappa=st.sampled_from(["identity", "chebyshev(d = 2)"]))
def test_patch_heads_default_equals_reference(case, style, mode, kappa):
    xi, decl, shape = case
    if "stride" in xi and "same" in style or "packing" in xi and "same" in style:
        style = ""
    if "dilation" in style and "radius = 2" in xi:
        style = ', style = "conv", pad = 1'
    text = (f"model g {{ input x: {decl}  y = head(x) {{ xi_attribute = {xi.format(s=style)[:-1]}, mode = \"{mode}\")"
            f"  kappa = {kappa}  out = 3 }} return y }}")
    assert_equivalent(text, {"x": _rand(*shape)})


def test_patch_option_validation():
    with pytest.raises(ValueError, match="conv"):
        REGISTRY["interdependence"]["cylinder_patch"].schema(pad=1)
    with pytest.raises(ValueError, match="either stride or packing"):
        REGISTRY["interdependence"]["sphere_patch"].schema(stride=2, packing="dense_hexagonal")
    with pytest.raises(ValueError, match="cylinder packing"):
        REGISTRY["interdependence"]["cylinder_patch"].schema(packing="sparse_simple_cubic")
    with pytest.raises(ValueError, match="radius"):
        REGISTRY["interdependence"]["geometric_patch"].schema(shape="cuboid", radius=2)


# ------------------------------------------------------------------------------------------------ chain
def _chain_a(n, direction="forward", s=0.0):
    a = structure.chain_matrix(n, direction == "bidirectional", s != 0, s, dtype=F64)
    return a.T if direction == "backward" else a


def test_chain_orientation_and_paper_errata():
    a = _matrix("chain", 4)
    assert a[1, 0] == 1 and a[0, 1] == 0  # row = output: item t relies on t − 1 (eq 74 transposed, semantics.md)
    # erratum 12: accumulate includes I (eq 78); the toolkit's Σ_{k≥1} is include_identity = false
    acc = _matrix("chain", 5, mode="accumulate", hops=2)
    torch.testing.assert_close(acc, torch.eye(5, dtype=F64) + _chain_a(5) + _chain_a(5) @ _chain_a(5))
    torch.testing.assert_close(_matrix("chain", 5, mode="accumulate", hops=2, include_identity=False),
                               acc - torch.eye(5, dtype=F64))
    # erratum 12: the toolkit's multi-hop chain (A + I)^h is self_loop = true; the paper's A^h is the default
    torch.testing.assert_close(_matrix("multihop_chain", 5), _chain_a(5) @ _chain_a(5))
    torch.testing.assert_close(_matrix("multihop_chain", 5, self_loop=True),
                               torch.linalg.matrix_power(_chain_a(5) + torch.eye(5, dtype=F64), 2))
    # the legacy flag equals the mode
    torch.testing.assert_close(_matrix("chain", 5, accumulate=True, hops=3), _matrix("chain", 5, mode="accumulate",
                                                                                       hops=3))


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 9), direction=st.sampled_from(["forward", "backward", "bidirectional"]),
       s=st.sampled_from([0.0, 0.5, -1.0]), alpha=st.sampled_from([1.0, 0.3, -0.2, 2.0]))
def test_exponential_mode_equals_scipy_expm(n, direction, s, alpha):
    a = _chain_a(n, direction, s)
    want = torch.from_numpy(scipy.linalg.expm(alpha * a.numpy()))
    hp = dict(direction=direction, alpha=alpha, self_loop=s != 0, self_scaling=s if s else 1.0)
    torch.testing.assert_close(_matrix("exponential_chain", n, **hp), want, rtol=1e-10, atol=1e-12)
    z = _rand(2, n, 3)
    torch.testing.assert_close(_apply("exponential_chain", z, **hp), want @ z, rtol=1e-9, atol=1e-10)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 9), direction=st.sampled_from(["forward", "backward", "bidirectional"]),
       s=st.sampled_from([0.0, 0.5]), alpha=st.sampled_from([1.0, 0.3, -0.25, 2.0]))
def test_inverse_mode_equals_numpy_inv(n, direction, s, alpha):
    if direction == "bidirectional" and abs(alpha) * (2 + s) >= 1:
        with pytest.raises(ValueError, match="inverse_approx"):
            _comp("chain", direction=direction, mode="inverse", alpha=alpha, self_loop=s != 0, self_scaling=s or 1)
        return
    if direction != "bidirectional" and alpha * s == 1:
        return
    a = _chain_a(n, direction, s)
    want = torch.from_numpy(np.linalg.inv(np.eye(n) - alpha * a.numpy()))
    hp = dict(direction=direction, mode="inverse", alpha=alpha, self_loop=s != 0, self_scaling=s if s else 1.0)
    torch.testing.assert_close(_matrix("chain", n, **hp), want, rtol=1e-10, atol=1e-12)
    z = _rand(2, n, 3)
    torch.testing.assert_close(_apply("chain", z, **hp), want @ z, rtol=1e-9, atol=1e-10)


def test_inverse_approx_is_the_papers_reciprocal_form():
    n = 6
    torch.testing.assert_close(_matrix("inverse_chain", n), torch.tril(torch.ones(n, n, dtype=F64)))  # (I − A)⁻¹
    a = _chain_a(n, "bidirectional")  # I − A may be singular: the paper's fallback Σ_{k<n} A^k (eq 78, h = n − 1)
    torch.testing.assert_close(_matrix("inverse_chain", n, direction="bidirectional"),
                               sum(torch.linalg.matrix_power(a, k) for k in range(n)))
    with pytest.raises(ValueError, match="without self-loop"):
        _comp("inverse_chain", self_loop=True)


@pytest.mark.parametrize("norm", ["row", "column", "symmetric"])
def test_chain_normalisations_are_degree_normalisations_of_the_literal_matrix(norm):
    m = _matrix("chain", 6, mode="accumulate", hops=2, direction="bidirectional", norm=norm)
    raw = _matrix("chain", 6, mode="accumulate", hops=2, direction="bidirectional")
    if norm == "row":
        torch.testing.assert_close(m.sum(-1), torch.ones(6, dtype=F64))
    elif norm == "column":
        torch.testing.assert_close(m.sum(-2), torch.ones(6, dtype=F64))
    else:
        d = raw.sum(-1).rsqrt()
        torch.testing.assert_close(m, d[:, None] * raw * d[None, :])


@settings(max_examples=25, deadline=None)
@given(direction=st.sampled_from(["forward", "backward", "bidirectional"]),
       mode=st.sampled_from(["power", "accumulate", "inverse", "inverse_approx", "exponential"]),
       norm=st.sampled_from(["none", "row", "column", "symmetric"]), loop=st.booleans(),
       slot=st.sampled_from(["xi_instance", "xi_attribute", "xi_instance_prior", "xi_attribute_post"]),
       hops=st.integers(0, 3))
def test_chain_default_equals_reference(direction, mode, norm, loop, slot, hops):
    loop = loop and mode != "inverse_approx"
    alpha = 0.2 if mode == "inverse" and direction == "bidirectional" else 0.7
    xi = (f'chain(direction = "{direction}", mode = "{mode}", norm = "{norm}", self_loop = {str(loop).lower()}, '
          f"self_scaling = 0.5, hops = {hops}, alpha = {alpha})")
    text = f"model c {{ input x: sequence[B, 6, 3] y = head(x) {{ {slot} = {xi}  out = 2 }} return y }}"
    assert_equivalent(text, {"x": _rand(2, 6, 3)})


class _Shapes(TorchDispatchMode):
    """Records the shape of every tensor an op returns."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.shapes.append(tuple(t.shape))
        return out


def _no_square(fn, n):
    with _Shapes() as rec:
        fn()
    assert rec.shapes and not [s for s in rec.shapes if sum(d >= n for d in s) >= 2]


def test_default_lowering_builds_no_n_by_n_tensor():
    """Chains run as shifts / scans / DSTs, graphs and PageRank as gather/index_add: nothing n x n is allocated."""
    n = 64
    z = _rand(1, n, 2)
    ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
    for hp in (dict(mode="inverse", alpha=0.5), dict(mode="exponential", direction="bidirectional"),
               dict(mode="inverse", direction="bidirectional", alpha=0.3), dict(mode="inverse_approx"),
               dict(mode="accumulate", hops=3, norm="symmetric", direction="backward"),
               dict(mode="exponential", alpha=-2.0, norm="row")):
        _no_square(lambda hp=hp: _apply("chain", z, **hp), n)
    for name, hp in (("multihop_graph", dict(norm="symmetric", mode="accumulate")),
                     ("pagerank", dict(norm="column")), ("graph", dict(norm="row", directed=False))):
        _no_square(lambda name=name, hp=hp: _apply(name, z, aux={"edges": ring}, **hp), n)


# ------------------------------------------------------------------------------------------------ graph
EDGES = torch.tensor([[0, 1, 2, 3, 3, 4, 1, 2], [1, 2, 3, 0, 4, 0, 0, 4]])


def test_symmetric_norm_is_kipf_gcn_with_self_loops_by_default():
    """Erratum 13 / semantics.md: symmetric = D^{-1/2}(A+I)D^{-1/2} (self-loops on unless self_loops = false)."""
    n = 5
    a = torch.zeros(n, n, dtype=F64)
    a[EDGES[1], EDGES[0]] = 1
    a = torch.maximum(a, a.T) + torch.eye(n, dtype=F64)
    d = a.sum(-1).rsqrt()
    want = d[:, None] * a * d[None, :]
    got = _matrix("graph", n, aux={"edges": EDGES}, norm="symmetric", directed=False)
    torch.testing.assert_close(got, want)
    no_loop = _matrix("graph", n, aux={"edges": EDGES}, norm="symmetric", directed=False, self_loops=False)
    assert torch.all(no_loop.diagonal() == 0)


def test_papers_eq_177_is_a_hybrid_sum_of_row_graph_and_identity():
    n = 5
    got = _matrix("hybrid", n, aux={"edges": EDGES}, parts=["graph", "identity"], fusion="sum", norm="row",
                  directed=False)
    a = torch.zeros(n, n, dtype=F64)
    a[EDGES[1], EDGES[0]] = 1
    a = torch.maximum(a, a.T)
    torch.testing.assert_close(got, a / a.sum(-1, keepdim=True) + torch.eye(n, dtype=F64))


@settings(max_examples=15, deadline=None)
@given(hops=st.integers(0, 4), mode=st.sampled_from(["power", "accumulate"]), incl=st.booleans())
def test_gcn_normalised_multihop_equals_dense_matrix_power(hops, mode, incl):
    n = 5
    s = _matrix("graph", n, aux={"edges": EDGES}, norm="symmetric", directed=False)
    want = torch.linalg.matrix_power(s, hops) if mode == "power" else \
        sum((torch.linalg.matrix_power(s, k) for k in range(0 if incl else 1, hops + 1)), torch.zeros(n, n, dtype=F64))
    hp = dict(norm="symmetric", directed=False, hops=hops, mode=mode, include_identity=incl)
    torch.testing.assert_close(_matrix("multihop_graph", n, aux={"edges": EDGES}, **hp), want)
    z = _rand(2, n, 3)
    torch.testing.assert_close(_apply("multihop_graph", z, aux={"edges": EDGES}, **hp), want @ z)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), alpha=st.sampled_from([0.15, 0.3, 0.5]))
def test_pagerank_equals_networkx(seed, alpha):
    n = 7
    g = nx.gnp_random_graph(n, 0.35, seed=seed, directed=True)
    for v in range(n):  # no dangling nodes: networkx redistributes their mass, eq (84) does not
        g.add_edge(v, (v + 1) % n)
    edges = torch.tensor(list(g.edges()), dtype=torch.long).T
    m = _matrix("pagerank", n, aux={"edges": edges}, alpha=alpha)
    r = m @ torch.full((n,), 1.0 / n, dtype=F64)
    want = nx.pagerank(g, alpha=1 - alpha, tol=1e-14, max_iter=10_000)
    np.testing.assert_allclose(r.numpy(), [want[v] for v in range(n)], atol=1e-9)
    z = _rand(2, n, 3)
    torch.testing.assert_close(_apply("pagerank", z, aux={"edges": edges}, alpha=alpha), m @ z, rtol=1e-10,
                               atol=1e-10)


def test_pagerank_needs_a_normalised_graph_for_power_iteration():
    with pytest.raises(ValueError, match="solve"):
        REGISTRY["interdependence"]["pagerank"].schema(edges=ValueRef("e"), norm="none")
    m = _matrix("pagerank", 5, aux={"edges": EDGES}, norm="none", method="solve", alpha=0.8)
    a = torch.zeros(5, 5, dtype=F64)
    a[EDGES[1], EDGES[0]] = 1
    torch.testing.assert_close(m, 0.8 * torch.linalg.inv(torch.eye(5, dtype=F64) - 0.2 * a))


@settings(max_examples=20, deadline=None)
@given(xi=st.sampled_from([
    'graph(edges = edges, norm = "{norm}", mode = "accumulate", hops = 2)',
    'multihop_graph(edges = edges, norm = "{norm}", directed = false)',
    'pagerank(edges = edges, norm = "{norm}", alpha = 0.3)',
    'pagerank(edges = edges, norm = "{norm}", method = "solve")',
]), norm=st.sampled_from(["row", "column", "symmetric"]), slot=st.sampled_from(["xi_instance", "xi_attribute"]),
       weighted=st.booleans())
def test_graph_family_default_equals_reference(xi, norm, slot, weighted):
    n, m = (5, 3) if slot == "xi_instance" else (3, 5)
    args = xi.format(norm=norm)
    inputs = {"x": _rand(2, n, m), "edges": EDGES}
    decl = "input edges: edges[2, E]"
    if weighted:
        inputs["ew"] = torch.rand(EDGES.shape[1], generator=torch.Generator().manual_seed(4), dtype=F64) + 0.1
        decl += " input ew: edge_weight[E]"
        args = args[:-1] + ", weight = ew)"
    text = f"model g {{ input x: sequence[B, {n}, {m}] {decl} y = head(x) {{ {slot} = {args}  out = 2 }} return y }}"
    assert_equivalent(text, inputs)


@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_chain_spectral_apply_diagonalises_the_path_graph(n):
    """structure.chain_spectral_apply (added with this catalog): f(T) x by DST-I equals the dense f(T) x."""
    t = structure.chain_matrix(n, True, dtype=F64)
    x = _rand(3, n, 2)
    torch.testing.assert_close(structure.chain_spectral_apply(x, lambda lam: lam), t @ x)
    torch.testing.assert_close(structure.chain_spectral_apply(x, lambda lam: lam**3 - 2 * lam),
                               (torch.linalg.matrix_power(t, 3) - 2 * t) @ x)
    torch.testing.assert_close(structure.chain_spectral_apply(x.transpose(1, 2), torch.exp, dim=-1),
                               (torch.linalg.matrix_exp(t) @ x).transpose(1, 2))
