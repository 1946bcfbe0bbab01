"""Hybrid ξ graph ∘ bilinear (eq 86–87, the paper's best graph model) on the edge list: per-edge bilinear scores,
segment softmax and index_add aggregation in the default lowering, equal to the literal A_g ∘ A_b of the reference
lowering (float64, outputs and gradients) and never an N x N intermediate."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from rpn2c.components import REGISTRY
from rpn2c.components.base import XiContext
from rpn2c.components.registry import ValueRef
from rpn2c.components.impl.xi_attention import _BilinearXi
from rpn2c.components.impl.xi_graph import _GraphXi
from rpn2c.functional import structure
from rpn2c.functional.structure import bilinear
from tests.test_lowering_equivalence import _bool_mask, _compile_pair, _rand, assert_equivalent

F64 = torch.float64


@st.composite
def gat_specs(draw):
    """A head whose xi_instance is hybrid(graph, (low_rank_)bilinear) on a random small graph: isolated nodes,
    self-loops and duplicate edges included."""
    n = draw(st.integers(1, 7))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=12))
    if pairs and draw(st.booleans()):
        pairs += pairs[: draw(st.integers(1, len(pairs)))]  # duplicates
    edges = torch.tensor(pairs, dtype=torch.long).reshape(-1, 2).T.contiguous()
    inputs = {"x": _rand(2, n, 3), "edges": edges}
    decls = ["input x: sequence[B, %d, 3]" % n, "input edges: edges[2, E]"]
    kind = draw(st.sampled_from(["bilinear", "low_rank_bilinear", "parameterized_bilinear"]))
    args = [f'parts = ["graph", "{kind}"]', "edges = edges", f"softmax = {str(draw(st.booleans())).lower()}"]
    if kind == "low_rank_bilinear":
        args.append(f"rank = {draw(st.integers(1, 3))}")
    if kind != "parameterized_bilinear":
        args.append(f"bias = {str(draw(st.booleans())).lower()}")
    args += [f'normalize = "{draw(st.sampled_from(["none", "softmax", "softmax_column", "row", "column", "symmetric"]))}"',
             f'norm = "{draw(st.sampled_from(["none", "row", "column", "symmetric"]))}"',
             f"directed = {str(draw(st.booleans())).lower()}", f"self_loops = {str(draw(st.booleans())).lower()}",
             f"softmax_scale = {draw(st.sampled_from(['1.0', '0.5']))}"]
    if kind != "parameterized_bilinear" and draw(st.booleans()):
        args.append("causal = true")
    if draw(st.booleans()):
        inputs["ew"] = torch.rand(edges.shape[1], generator=torch.Generator().manual_seed(5), dtype=F64) + 0.1
        decls.append("input ew: edge_weight[E]")
        args.append("weight = ew")
    mask = draw(st.sampled_from(["none"] if kind == "parameterized_bilinear" else ["none", "key_padding", "attn_mask"]))
    if mask == "key_padding":
        pol = draw(st.sampled_from(["block_mask", "keep_mask"]))
        inputs["kp"] = _bool_mask((2, n), 7, keep=pol == "keep_mask")
        decls.append(f"input kp: {pol}[B, S]")
        args.append("key_padding = kp")
    elif mask == "attn_mask":
        pol = draw(st.sampled_from(["keep_mask", "additive_mask"]))
        inputs["am"] = _rand(n, n, seed=8) if pol == "additive_mask" else _bool_mask((n, n), 9)
        decls.append(f"input am: {pol}[T, S]")
        args.append("attn_mask = am")
    text = ("model g {\n  " + "\n  ".join(decls) + f"\n  y = head(x) {{ xi_instance = hybrid({', '.join(args)})"
            "  out = 2  bias = false  pi = zero }\n  return y\n}\n")
    return text, inputs


@settings(max_examples=25, deadline=None)
@given(gat_specs())
def test_graph_bilinear_hybrid_default_equals_reference(case):
    text, inputs = case
    fast, _ = _compile_pair(text)
    assert fast(**inputs).requires_grad
    assert_equivalent(text, inputs)


@pytest.mark.parametrize("softmax", ["true", "false"])
@pytest.mark.parametrize("normalize", ["none", "softmax", "column"])
def test_attribute_axis_graph_bilinear_hybrid_default_equals_reference(softmax, normalize):
    """parameterized_bilinear on the attribute axis: a graph over the 5 features, A = Xᵀ W X masked by it."""
    edges = torch.tensor([[0, 1, 2, 2, 3, 3], [1, 2, 2, 0, 1, 1]])  # node 4 isolated, a self-loop, a duplicate
    text = ('model h { input x: sequence[B, 3, 5] input edges: edges[2, E] y = head(x) { xi_attribute = hybrid(parts '
            f'= ["graph", "parameterized_bilinear"], edges = edges, p2_softmax = {softmax}, normalize = "{normalize}")'
            '  out = 3  bias = false  pi = zero } return y }')
    assert_equivalent(text, {"x": _rand(2, 3, 5), "edges": edges})


def test_graph_bilinear_hybrid_runs_on_edges_not_on_matrices(monkeypatch):
    """Isolated node 4, a duplicated edge and a self-loop; no part's dense matrix is ever built."""
    text = ('model g { input x: sequence[B, 5, 3] input edges: edges[2, E] y = head(x) { xi_instance = hybrid('
            'parts = ["graph", "low_rank_bilinear"], edges = edges, rank = 2, softmax = {sm}, normalize = "softmax") '
            ' out = 2 } return y }')
    edges = torch.tensor([[0, 1, 1, 2, 3, 3], [1, 2, 2, 2, 0, 1]])
    for sm in ("false", "true"):
        fast, ref = _compile_pair(text.replace("{sm}", sm))
        want = ref(x=_rand(2, 5, 3), edges=edges)
        for cls in (_BilinearXi, _GraphXi):
            monkeypatch.setattr(cls, "matrix", lambda *a, **k: pytest.fail("dense part matrix built"))
        got = fast(x=_rand(2, 5, 3), edges=edges)
        monkeypatch.undo()
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


class _MaxNumel(TorchDispatchMode):
    """The largest numel of any tensor an op returns."""

    def __init__(self):
        super().__init__()
        self.max = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.max = max(self.max, t.numel())
        return out


def _gat_module(n, part, **hp):
    entry = REGISTRY["interdependence"]["hybrid"]
    comp = entry.cls(entry.schema(parts=["graph", part], edges=ValueRef("edges"), **hp))
    return comp.build(XiContext("instance", n, 8, 8, n, {"edges": None})).double()


@pytest.mark.parametrize("part, hp", [
    ("low_rank_bilinear", dict(rank=4, softmax=False, normalize="softmax")),
    ("bilinear", dict(softmax=True, causal=True, normalize="row")),
])
def test_graph_bilinear_hybrid_allocates_o_of_edges_not_n_squared(monkeypatch, part, hp):
    """N = 3000, E = 10000, forward and backward: every intermediate is O(E·m) (softmax = true parts: plus the
    row normaliser's blocks of 8 query rows), against N² = 9e6 for the dense form."""
    n, e = 3000, 10000
    monkeypatch.setattr(bilinear, "LSE_BLOCK", 8 * n)
    edges = torch.randint(0, n, (2, e), generator=torch.Generator().manual_seed(0))
    mod = _gat_module(n, part, **hp)
    x = _rand(1, n, 8).requires_grad_()
    with _MaxNumel() as rec:
        y = mod.hadamard_on_edges(x, x, x, {"edges": edges})
        y.square().sum().backward()
    assert y.shape == (1, n, 8) and x.grad.abs().sum() > 0
    assert rec.max <= e * 8 < n * n // 100


def test_duplicate_merge_is_cached_for_a_fixed_graph(monkeypatch):
    n = 6
    edges = torch.tensor([[0, 1, 1, 2, 5, 5], [1, 2, 2, 3, 0, 5]])
    mod = _gat_module(n, "low_rank_bilinear", rank=2, softmax=False, normalize="softmax")
    x = _rand(2, n, 8)
    calls = []
    merge = structure.coalesce_edges
    monkeypatch.setattr(structure, "coalesce_edges", lambda *a, **k: calls.append(1) or merge(*a, **k))
    y1 = mod.hadamard_on_edges(x, x, x, {"edges": edges})
    y2 = mod.hadamard_on_edges(x, x, x, {"edges": edges})
    assert len(calls) == 1 and torch.equal(y1, y2)
    edges[1, 0] = 4  # modified in place: merged again, and the result follows the new graph
    y3 = mod.hadamard_on_edges(x, x, x, {"edges": edges})
    assert len(calls) == 2
    torch.testing.assert_close(y3, mod.matrix(x, x, {"edges": edges}, n) @ x)


@pytest.mark.compile
@pytest.mark.parametrize("part, args, normalize", [
    ("bilinear", "softmax = false", "softmax"),  # the paper's cora_hybrid
    ("bilinear", "softmax = true, causal = true, key_padding = kp", "row"),
    ("low_rank_bilinear", "rank = 2, softmax = true, window = 1, attn_mask = am", "softmax_column"),
    ("parameterized_bilinear", "softmax = true", "symmetric"),
])
def test_graph_bilinear_hybrid_compiles_as_one_graph_to_the_eager_result(part, args, normalize):
    """Duplicate edges, a self-loop and an isolated node: the fixed-size duplicate merge, the masks at the edges and
    the blocked row normaliser trace with ``fullgraph=True`` and equal eager in outputs and input gradients."""
    text = ('model g { input x: sequence[B, 5, 3] input edges: edges[2, E] input kp: keep_mask[B, S] '
            'input am: additive_mask[T, S] y = head(x) { xi_instance = hybrid(parts = ["graph", "' + part + '"], '
            f'edges = edges, directed = false, {args}, normalize = "{normalize}")  out = 2 }} return y }}')
    edges = torch.tensor([[0, 1, 1, 2, 3, 3, 2], [1, 2, 2, 2, 0, 1, 0]])
    inputs = {"x": _rand(2, 5, 3), "edges": edges, "kp": _bool_mask((2, 5), 7), "am": _rand(5, 5, seed=8)}
    fast, _ = _compile_pair(text)
    torch._dynamo.reset()
    compiled = torch.compile(fast, fullgraph=True, backend="aot_eager")
    xs = [inputs["x"].clone().requires_grad_() for _ in range(2)]
    want, have = fast(**{**inputs, "x": xs[0]}), compiled(**{**inputs, "x": xs[1]})
    torch.testing.assert_close(have, want, rtol=1e-10, atol=1e-12)
    r = torch.randn(want.shape, generator=torch.Generator().manual_seed(4), dtype=F64)
    (want * r).sum().backward()
    (have * r).sum().backward()
    torch.testing.assert_close(xs[1].grad, xs[0].grad, rtol=1e-10, atol=1e-12)
