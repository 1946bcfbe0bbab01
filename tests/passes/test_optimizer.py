"""The optimiser stage: rules as tables, decisions that drive the lowering, graph rewrites, explain.

Differential testing: on random valid programs, the default lowering with every rule, the default lowering with
each fired rule switched off, and the reference lowering (the paper's literal matrices) agree in float64 —
outputs and parameter gradients. Every rule has a targeted program on which it must fire.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode

import rpn2c
from rpn2c.passes import optimize, rule_names
from rpn2c.passes.rules import RULES
from rpn2c.runtime.cli import main

from tests.passes.programs import make_inputs, programs

ROOT = Path(__file__).resolve().parents[2]


def _build(text, reference=False, disable=()):
    from rpn2c.lower.build import CompiledModel

    graph = optimize(rpn2c.check(text), disable=disable)
    return CompiledModel(graph, reference=reference).double().eval(), graph


def _run(model, inputs):
    """Outputs, and gradients of a random projection of them w.r.t. parameters and floating inputs."""
    inputs = {k: v.detach().clone().requires_grad_(v.is_floating_point()) for k, v in inputs.items()}
    out = model(**inputs)
    out = out if isinstance(out, tuple) else (out,)
    w = [torch.randn(o.shape, dtype=o.dtype, generator=torch.Generator().manual_seed(7)) for o in out]
    model.zero_grad()
    sum((o * wi).sum() for o, wi in zip(out, w)).backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    grads.update({f"input {k}": v.grad for k, v in inputs.items() if v.grad is not None})
    return [o.detach() for o in out], grads


def _agree(a, b, what):
    (ya, ga), (yb, gb) = a, b
    for u, v in zip(ya, yb):
        assert_close(u, v, rtol=1e-9, atol=1e-9, msg=lambda m: f"{what}: outputs differ: {m}")
    for k in ga.keys() & gb.keys():
        assert_close(ga[k], gb[k], rtol=1e-8, atol=1e-9, msg=lambda m: f"{what}: grad of {k} differs: {m}")
    assert ga.keys() == gb.keys(), what


def _differential(text, inputs):
    """default (all rules) == reference == default without each fired rule; returns the rules that fired."""
    torch.manual_seed(0)
    full, graph = _build(text)
    state = full.state_dict()
    base = _run(full, inputs)
    ref, _ = _build(text, reference=True)
    ref.load_state_dict(state)
    _agree(base, _run(ref, inputs), "reference")
    fired = {d.rule for n in graph.nodes() for d in n.decisions} | {r.rule for r in graph.log}
    for rule in sorted(fired):
        alt, _ = _build(text, disable={rule})
        missing, unexpected = alt.load_state_dict(state, strict=False)
        dead = tuple(f"{r.node}." for r in graph.log if r.rule == "dead_code")
        assert not unexpected and all(k.startswith(dead) for k in missing), (rule, missing, unexpected)
        _agree(base, _run(alt, inputs), f"without {rule}")
    return fired


@given(programs())
def test_random_programs_agree_with_and_without_each_rule_and_with_the_reference(program):
    text, shapes, seed = program
    _differential(text, make_inputs(shapes, seed))


@given(programs())
def test_optimisation_is_idempotent(program):
    text, _, _ = program
    once = optimize(rpn2c.check(text))
    before = (once.content_hash(), {n.id: list(n.plan) for n in once.nodes()})
    twice = optimize(once)
    assert (twice.content_hash(), {n.id: list(n.plan) for n in twice.nodes()}) == before
    assert len(twice.log) == len(once.log)  # the second run rewrote nothing more


# ------------------------------------------------------------------------------------------------ coverage
IMG = "  input x: image[B, 2, 6, 6]\n"
SEQ = "  input x: sequence[B, 5, 4]\n"
TARGETS = {
    "conv": IMG + "  y = head(x) { xi_attribute = grid_patch(size = 3, pad = 1)  kappa = chebyshev(d = 2)  out = 3 }",
    "box_sum": IMG + '  y = head(x) { xi_attribute = grid_patch(size = 3, pad = 1, mode = "aggregation")  out = 3 }',
    "unfold_patches": IMG + "  y = head(x) { xi_attribute = grid_patch(size = 3, pad = 1)  kappa = taylor(d = 2)"
                            "  out = 2 }",
    "gather_patches": "  input x: volume[B, 1, 3, 4, 4]\n  y = head(x) { xi_attribute = grid_patch(size = 2)"
                      "  kappa = taylor(d = 2)  out = 2 }",
    "pool": IMG + "  y = compress(x) { kappa = patch_mean(size = 2) }",
    "unfold_kappa": IMG + "  y = compress(x) { kappa = patch_expansion(size = 3, pad = 1, stride = 2) }",
    "project_first": SEQ + "  y = head(x) { xi_instance = chain(hops = 2)  kappa = chebyshev(d = 3)  out = 2 }",
    "shared_kappa": SEQ + "  y = head(x) { xi_attribute = chain()  kappa = chebyshev(d = 2)  channels = 3"
                          "  out = 2 }",
    "linear": SEQ + "  y = head(x) { kappa = chebyshev(d = 2)  out = 3 }",
    "structured_xi": SEQ + '  y = head(x) { xi_instance = chain(direction = "bidirectional")  out = 4 }',
    "causal_sdpa": SEQ + "  y = head(x) { xi_instance = low_rank_bilinear(rank = 2, causal = true)  out = 4 }",
    "flex_window": SEQ + "  y = head(x) { xi_instance = low_rank_bilinear(rank = 2, window = 1)  out = 4 }",
    "fused_parts": SEQ + '  y = head(x) { xi_instance = hybrid(parts = ["chain", "pearson_correlation"], '
                         'fusion = "sum")  out = 3 }',
    "edge_hadamard": "  input x: nodes[N, 3]\n  input edges: edges[2, E]\n"
                     '  y = head(x) { xi_instance = hybrid(parts = ["graph", "low_rank_bilinear"], edges = edges, '
                     'rank = 2, normalize = "softmax")  out = 2 }',
    "linear_attention": SEQ + "  y = head(x) { xi_instance = linear_attention(rank = 2, causal = true)  out = 4 }",
    "fused_heads": SEQ + "  y = head(x) { heads = 3  xi_instance = low_rank_bilinear(rank = 2, causal = true)"
                         "  out = 4  fusion = concat_linear(out = 4) }",
    "degree_blocks": SEQ + "  y = head(x) { xi_attribute = chain()  kappa = taylor(d = 2)  out = 3 }",
    "drop_identity": SEQ + "  y = head(x) { xi_instance = identity  out = 3 }",
    "stacked_heads": SEQ + "  y = head(x) { heads = 3  kappa = chebyshev(d = 2)  out = 2  fusion = concat }",
    "chebyshev_heads": "  input x: nodes[N, 3]\n  input edges: edges[2, E]\n  y = layer(x) {\n"
                       "    head a { xi_instance = chebyshev_graph(edges = edges, order = 0)  out = 2 }\n"
                       "    head b { xi_instance = chebyshev_graph(edges = edges, order = 2)  out = 2  bias = false }\n"
                       "    fusion = sum\n  }",
    "fused_recurrent": SEQ + "  y = recurrent(x) { cell = lstm  out = 3  layers = 2 }",
    "time_loop": SEQ + "  y = recurrent(x) { cell = gru  out = 3  kappa_state = chebyshev(d = 2) }",
    "parallel_scan": SEQ + "  y = recurrent(x) { cell = linear  out = 3  layers = 2  bidirectional = true }",
    "dead_code": SEQ + "  z = head(x) { out = 7 }\n  y = head(x) { out = 2 }",
    "shared_xi": "  input x: nodes[N, 3]\n  input edges: edges[2, E]\n"
                 "  a = head(x) { xi_instance = graph(edges = edges, norm = \"symmetric\")  out = 4  post = [relu] }\n"
                 "  y = head(a) { xi_instance = graph(edges = edges, norm = \"symmetric\")  out = 2 }",
    "graph_spmm": "  input x: nodes[N, 3]\n  input edges: edges[2, E]\n"
                  "  y = head(x) { xi_instance = graph(edges = edges, hops = 2, mode = \"accumulate\")  out = 2 }",
    "common_op": IMG + "  a = flatten(x)\n  b = flatten(x)\n  c = relu(b)\n  s = add(a, c)\n"
                     "  y = head(s) { out = 2 }",
}


def test_every_rule_has_a_target_program():
    assert set(TARGETS) == set(rule_names())


@pytest.mark.parametrize("rule", sorted(TARGETS))
def test_each_rule_fires_on_its_target_and_keeps_the_function(rule):
    text = "model target {\n" + TARGETS[rule] + "\n  return y\n}\n"
    shape = (2, 2, 6, 6) if "image" in text else (2, 1, 3, 4, 4) if "volume" in text else (2, 5, 4)
    shapes = {"x": (5, 3), "edges": ("edges", 5, 9)} if "edges" in text else {"x": shape}
    fired = _differential(text, make_inputs(shapes, 3))
    assert rule in fired


def test_rules_are_declared_once_with_their_location_and_reference():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    for r in RULES:
        path, line = r.location.rsplit(":", 1)
        source = (ROOT / path).read_text(encoding="utf-8").splitlines()
        assert f'Rule("{r.name}"' in source[int(line) - 1], r.location
        assert r.why and r.paper and r.scope in ("head", "layer", "recurrent")
    with pytest.raises(ValueError, match="unknown optimiser rules"):
        optimize(rpn2c.check(TARGETS_TEXT["conv"]), disable={"no_such_rule"})


TARGETS_TEXT = {k: "model target {\n" + v + "\n  return y\n}\n" for k, v in TARGETS.items()}


# ------------------------------------------------------------------------------------------------ labels = what runs
class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _ops(model, x):
    with _Ops() as mode:
        model(x)
    return mode.seen


def test_kernels_run_exactly_where_their_rule_fired():
    text = (ROOT / "specs" / "cnn.rpn").read_text(encoding="utf-8")
    x = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    model, graph = _build(text)
    assert {n.id: n.plan for n in graph.nodes() if n.plan} == {"c1": ["conv"], "c2": ["conv"], "p1": ["pool"],
                                                               "p2": ["pool"], "h": ["linear"], "y": ["linear"]}
    seen = _ops(model, x)
    assert "convolution" in seen and "max_pool2d_with_indices" in seen
    plain, _ = _build(text, disable={"conv", "pool"})
    seen = _ops(plain, x)
    assert "convolution" not in seen and not any("pool" in op for op in seen)


def test_a_median_patch_pool_is_not_labelled_pooling():
    text = 'model m {\n  input x: image[B, 2, 4, 4]\n  y = compress(x) { kappa = patch_pool(size = 2, metric = "median") }' \
           "\n  return y\n}\n"
    model, graph = _build(text)
    assert graph.node("y").plan == []
    assert not any("pool" in op for op in _ops(model, torch.randn(1, 2, 4, 4, dtype=torch.float64)))


def test_dead_heads_neither_run_nor_count():
    text = TARGETS_TEXT["dead_code"]
    graph = optimize(rpn2c.check(text))
    assert "z" not in graph.g and graph.param_count == 4 * 2 + 2
    model, _ = _build(text)
    assert not any(k.startswith("z.") for k in model.state_dict())


# ------------------------------------------------------------------------------------------------ explain
def test_explain_locates_every_decision(capsys):
    spec = ROOT / "specs" / "cnn.rpn"
    assert main(["explain", str(spec), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rules = {(n["node"], d["rule"]) for n in data["nodes"] for d in n["decisions"]}
    assert rules == {("c1", "conv"), ("c2", "conv"), ("p1", "pool"), ("p2", "pool"), ("h", "linear"), ("y", "linear"),
                     ("h", "drop_identity"), ("y", "drop_identity")}  # the perceptrons' κ = id, inside F.linear
    c1 = next(n for n in data["nodes"] if n["node"] == "c1")
    assert c1["at"] == f"{spec}:16:8"
    conv = c1["decisions"][0]
    assert conv["defined_at"].startswith("rpn2c/passes/rules/grid.py:")
    assert conv["cost"]["flops_after"] < conv["cost"]["flops_before"]
    assert main(["explain", str(spec)]) == 0
    text = capsys.readouterr().out
    assert f"{spec}:16:8: c1 = head" in text and "conv   defined at rpn2c/passes/rules/grid.py:" in text


def test_check_kernel_column_is_the_explain_record(capsys):
    spec = ROOT / "specs" / "transformer.rpn"
    main(["check", str(spec), "--format", "json"])
    table = {n["name"]: set(n["kernels"]) for n in json.loads(capsys.readouterr().out)["nodes"]}
    main(["explain", str(spec), "--format", "json"])
    nodes = json.loads(capsys.readouterr().out)["nodes"]
    record = {n["node"]: {d["rule"] for d in n["decisions"] if d["slot"] != "identity"} for n in nodes}
    assert record and all(table[k] == v for k, v in record.items())
    # canonicalisations are in the record but choose no kernel, so the kernel column leaves them out
    assert any(d["rule"] == "drop_identity" for n in nodes for d in n["decisions"])
    assert not any("drop_identity" in v for v in table.values())
    main(["graph", str(spec), "--format", "dot"])
    assert "kernels: fused_heads" in capsys.readouterr().out


def test_two_gcn_layers_normalise_their_shared_edges_once_per_call():
    """CSE of interdependence: the edge normalisation runs once per forward, also where nothing is cached (as
    in a compiled graph); eagerly the one graph cache serves every layer and call."""
    from unittest import mock

    from rpn2c.functional.structure import graph_cache as cache

    text = (ROOT / "specs" / "gcn.rpn").read_text(encoding="utf-8")
    graph = optimize(rpn2c.check(text))
    assert [r.rule for r in graph.log] == ["shared_xi"]
    x, edges = torch.randn(34, 34, dtype=torch.float64), torch.randint(0, 34, (2, 60))
    for compiling in (True, False):
        for disable, calls in ((("graph_spmm",), 1), (("graph_spmm", "shared_xi"), 2 if compiling else 1)):
            model, _ = _build(text, disable=disable)
            cache.clear_graph_cache()
            with mock.patch.object(cache, "graph_norm_weights", wraps=cache.graph_norm_weights) as norm, \
                    mock.patch.object(cache.torch.compiler, "is_compiling", return_value=compiling):
                for _ in range(2):
                    model(x, edges)
            assert norm.call_count == (2 * calls if compiling else calls), (compiling, disable)


def test_graph_spmm_normalises_a_graph_once_across_layers_calls_and_compiled_calls():
    """Hoisting: the operator of rpn2c::graph_mm is built once per edge tensor and kept; an in-place edit or a
    new tensor builds it again; under torch.compile(fullgraph=True) the op is opaque, so the normalisation is
    not traced into every call."""
    from unittest import mock

    from rpn2c.functional.structure import graph_cache as cache

    text = (ROOT / "specs" / "gcn.rpn").read_text(encoding="utf-8")
    model, _ = _build(text)
    ref, _ = _build(text, reference=True)
    ref.load_state_dict(model.state_dict())
    g = torch.Generator().manual_seed(6)
    x, edges = torch.randn(40, 34, dtype=torch.float64, generator=g), torch.randint(0, 40, (2, 90), generator=g)
    cache.clear_graph_cache()
    with mock.patch.object(cache, "graph_norm_weights", wraps=cache.graph_norm_weights) as norm:
        for _ in range(3):
            assert_close(model(x, edges), ref(x, edges))
        assert norm.call_count == 1  # two layers, three calls
        edges[0, :4] = (edges[0, :4] + 1) % 40  # an in-place edit bumps the version counter
        assert_close(model(x, edges), ref(x, edges))
        other = edges.clone()
        assert_close(model(x, other), ref(x, other))
        assert norm.call_count == 3
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
        for _ in range(3):
            assert_close(compiled(x, other), ref(x, other))
        assert norm.call_count == 3  # the compiled program reads the cached operator too
    cache.clear_graph_cache()


def test_single_channel_expanded_conv_trains_in_float64():
    """Found by the large profile: with C = n = 1 the expanded input and the conv weight were strided views, and
    float64's slow_conv2d refuses a non-contiguous weight gradient."""
    text = ("model m {\n  input x: image[B, 1, 4, 4]\n  s = head(x) { xi_attribute = grid_patch(size = 3, pad = 1)"
            "  kappa = chebyshev(d = 2)  out = 1 }\n  f = flatten(s)\n  y = head(f) { out = 3 }\n  return y\n}\n")
    assert "conv" in _differential(text, make_inputs({"x": (2, 1, 4, 4)}, 0))


def test_project_first_fires_only_where_the_cost_model_says_it_saves_work():
    """A(κψᵀ) = (Aκ)ψᵀ: reconciling first pays when n ≤ D; widening (n > D) keeps ξ on κ's output."""
    def plan(out):
        text = (f"model m {{\n  input x: sequence[B, 6, 4]\n  y = head(x) {{ xi_instance = chain(hops = 2)  "
                f"out = {out} }}\n  return y\n}}\n")
        node = optimize(rpn2c.check(text)).node("y")
        return node.plan, text

    narrow, text = plan(3)
    wide, wide_text = plan(16)
    assert "project_first" in narrow and "project_first" not in wide
    assert "project_first" not in _differential(wide_text, make_inputs({"x": (2, 6, 4)}, 1))


class _Shapes(TorchDispatchMode):
    """The shape of every tensor an op returns."""

    def __init__(self):
        super().__init__()
        self.shapes = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for o in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(o, torch.Tensor) and o.dim():
                self.shapes.add(tuple(o.shape))
        return out


@pytest.mark.parametrize("view, x", [("sequence[B, 5, 6]", (2, 5, 6)), ("image[B, 2, 6, 6]", (2, 2, 6, 6))])
def test_degree_blocks_never_builds_the_kronecker_powers(view, x):
    """κ = [z, z⊗z] has 6 + 36 = 42 columns per row (an item, or a patch of 2·3·3 = 18 taps: 18 + 324 = 342); with
    the rule no tensor of that width exists, forward or backward, and the function is the literal one."""
    xi = "  xi_attribute = grid_patch(size = 3, pad = 1)" if "image" in view else ""
    text = f"model m {{\n  input x: {view}\n  y = head(x) {{{xi}  kappa = taylor(d = 2)  out = 4 }}\n  return y\n}}\n"
    rows, width = (2 * 5, 42) if "sequence" in view else (2 * 36, 342)
    fired = _differential(text, make_inputs({"x": x}, 2))
    assert "degree_blocks" in fired
    for disable, built in (((), False), (("degree_blocks",), True)):
        model, _ = _build(text, disable=disable)
        inp = torch.randn(*x, dtype=torch.float64, requires_grad=True)
        with _Shapes() as mode:
            model(inp).sum().backward()
        kappa = [s for s in mode.shapes if s[-1] == width and math.prod(s) >= rows * width]  # not W's gradient
        assert bool(kappa) == built, (disable, kappa)


def test_degree_blocks_fires_only_where_the_cost_model_says_it_adds_no_work():
    """d = 2: blocks cost n·m more multiply-adds and save the m² products of κ, so they pay while n ≤ m."""
    def plan(out, channels=1):
        text = (f"model m {{\n  input x: sequence[B, 3, 4]\n  y = head(x) {{ kappa = taylor(d = 2)  out = {out}"
                f"  channels = {channels} }}\n  return y\n}}\n")
        return optimize(rpn2c.check(text)).node("y").plan

    assert "degree_blocks" in plan(4) and "degree_blocks" not in plan(5)
    assert plan(5) == ["linear"]
    assert "degree_blocks" not in plan(3, channels=3)  # κ once for three channels is cheaper than blocks thrice


def test_unfold_keeps_only_the_taps_of_a_cylinder_patch():
    """im2col reads the whole kernel box; a cylinder patch keeps its taps (a buffer built once per head)."""
    text = ("model m {\n  input x: image[B, 2, 6, 6]\n  y = head(x) { xi_attribute = cylinder_patch(radius = 1, "
            "depth = 0)  kappa = taylor(d = 2)  out = 3 }\n  return y\n}\n")
    assert "unfold_patches" in _differential(text, make_inputs({"x": (2, 2, 6, 6)}, 5))
    model, _ = _build(text)
    assert model.y.tap_pos.tolist() == [1, 3, 4, 5, 7]  # the plus-shaped taps of a radius-1 disc in a 3x3 box


# ------------------------------------------------------------------------------------------------ graph_spmm
GCN2 = """model g(f = 3) {
  input x: nodes[N, f]
  input edges: edges[2, E]
  a = head(x) { xi_instance = graph(edges = edges, norm = "symmetric")  out = 4  post = [relu] }
  b = head(a) { xi_instance = pagerank(edges = edges, norm = "column", tol = 1e-13)  out = 4 }
  y = head(b) { xi_instance = graph(edges = edges, norm = "symmetric")  out = 2 }
  return y
}
"""


@pytest.mark.parametrize("nodes, edges, layout", [(200, 600, "csr"), (12, 60, "dense")])
def test_graph_spmm_builds_the_operator_once_in_the_layout_the_density_asks(nodes, edges, layout):
    """Sparse graphs run CSR SpMM, dense ones a GEMM; the operator is built on the first call, shared by the
    layers whose ξ is the same (shared_xi) and reused while the edge tensor comes back unmodified; outputs and
    gradients equal the gather/scatter form and the reference."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(nodes, 3, dtype=torch.float64, generator=g)
    ei = torch.randint(0, nodes, (2, edges), generator=g)
    fired = _differential(GCN2, {"x": x, "edges": ei})
    assert "graph_spmm" in fired
    from rpn2c.functional import structure

    from rpn2c.functional.structure import graph_cache as cache

    built = []

    def spy(*args, **kw):
        built.append(real(*args, **kw))
        return built[-1]

    real, cache._build = cache._build, spy
    try:
        cache.clear_graph_cache()
        model, _ = _build(GCN2)
        y0 = model(x=x, edges=ei)
        assert len(built) == 2 and {op.layout for op in built} == {layout}  # graph (shared by a, y) + pagerank
        assert torch.equal(model(x=x, edges=ei), y0) and len(built) == 2  # reused while the edges are unchanged
        ei.add_(0)  # an in-place write bumps the version: the operators are rebuilt
        model(x=x, edges=ei)
        assert len(built) == 4
    finally:
        cache._build = real
        cache.clear_graph_cache()


def test_graph_spmm_falls_back_to_gather_scatter_for_weights_that_need_gradients():
    text = """model w {
  input x: nodes[N, 3]
  input edges: edges[2, E]
  input ew: edge_weight[E]
  y = head(x) { xi_instance = graph(edges = edges, weight = ew, norm = "row")  out = 2 }
  return y
}
"""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(30, 3, dtype=torch.float64, generator=g)
    ei = torch.randint(0, 30, (2, 90), generator=g)
    ew = torch.rand(90, dtype=torch.float64, generator=g, requires_grad=True)
    model, _ = _build(text)
    ref, _ = _build(text, reference=True)
    ref.load_state_dict(model.state_dict())
    y = model(x=x, edges=ei, ew=ew)
    (gw,) = torch.autograd.grad(y.square().sum(), ew)
    (gr,) = torch.autograd.grad(ref(x=x, edges=ei, ew=ew).square().sum(), ew)
    assert_close(gw, gr, rtol=1e-9, atol=1e-10)


# ------------------------------------------------------------------------------------------------ the oracle
def _kernels_forbidden(monkeypatch):
    """Every default-lowering form of ξ and ψ raises: only the literal matrices may run."""
    from rpn2c.components.impl.base import PsiModule, XiModule

    def forbidden(*_a, **_k):
        raise AssertionError("the reference lowering ran a default kernel")

    def subclasses(c):
        for s in c.__subclasses__():
            yield s
            yield from subclasses(s)

    for base in (XiModule, PsiModule):
        for cls in (base, *subclasses(base)):
            if "apply" in vars(cls):
                monkeypatch.setattr(cls, "apply", forbidden)


@given(programs())
def test_the_reference_lowering_never_runs_a_default_kernel(program):
    text, shapes, seed = program
    ref, _ = _build(text, reference=True)
    inputs = make_inputs(shapes, seed)
    with pytest.MonkeyPatch.context() as mp:
        _kernels_forbidden(mp)
        ref(**inputs)


def test_the_forbidden_kernels_are_what_the_default_lowering_runs(monkeypatch):
    """The guard above can fail: the default GCN propagates through ξ.apply and ψ.apply."""
    from tests.test_specs import random_inputs

    fast = rpn2c.compile_file(ROOT / "specs" / "gcn.rpn").double().eval()
    inputs = random_inputs(fast.graph)
    _kernels_forbidden(monkeypatch)
    with pytest.raises(AssertionError, match="default kernel"):
        fast(*inputs)


@pytest.mark.parametrize("spec", sorted(p.name for p in (ROOT / "specs").glob("*.rpn")))
def test_shipped_specs_reference_runs_on_literal_matrices_only(spec, monkeypatch):
    from tests.test_specs import random_inputs

    ref = rpn2c.compile_file(ROOT / "specs" / spec, reference=True).double().eval()
    inputs = random_inputs(ref.graph)
    _kernels_forbidden(monkeypatch)
    out = ref(*inputs)
    assert all(torch.isfinite(o).all() for o in (out if isinstance(out, tuple) else (out,)))


def test_graph_spmm_operator_built_for_inference_is_rebuilt_for_training():
    """A CSR operator first built under no_grad lacks Aᵀ; the next training step builds it again with Aᵀ."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(200, 3, dtype=torch.float64, generator=g)
    ei = torch.randint(0, 200, (2, 600), generator=g)
    model, _ = _build(GCN2)
    with torch.no_grad():
        y0 = model(x=x, edges=ei)
    y = model(x=x, edges=ei)
    assert_close(y.detach(), y0)
    y.square().sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_graph_spmm_exports_with_dynamic_sizes_and_holds_for_any_density():
    """Symbolic node and edge counts: the layout is CSR without a size guard, so one exported program serves
    sparse and dense graphs alike."""
    from torch.export import Dim

    model = rpn2c.compile_file(ROOT / "specs" / "gcn.rpn").eval()
    g = torch.Generator().manual_seed(5)
    x, ei = torch.randn(50, 34, generator=g), torch.randint(0, 50, (2, 200), generator=g)
    program = torch.export.export(model, (x, ei), dynamic_shapes=(({0: Dim.AUTO}, {1: Dim.AUTO}),)).module()
    assert any("graph_mm" in str(n.target) for n in program.graph.nodes)
    for n, e in ((70, 333), (400, 1200), (5, 100)):
        x2, e2 = torch.randn(n, 34, generator=g), torch.randint(0, n, (2, e), generator=g)
        assert_close(program(x2, e2), model(x2, e2), rtol=1e-5, atol=1e-6)


def test_gather_patches_builds_its_index_once_with_the_head():
    """Hoisting: a known grid's (patch, tap) source index is a buffer of the head, not rebuilt per call."""
    from unittest import mock

    from rpn2c.functional import structure

    text = TARGETS_TEXT["gather_patches"]
    model, _ = _build(text)
    assert model.y.patch_index.shape == (2 * 3 * 3, 8)  # 2x2x2 windows on a 3x4x4 volume
    x = torch.randn(2, 1, 3, 4, 4, dtype=torch.float64)
    with mock.patch.object(structure, "patch_index", wraps=structure.patch_index) as built:
        y = model(x)
    assert built.call_count == 0
    ref, _ = _build(text, reference=True)
    ref.load_state_dict(model.state_dict())
    assert_close(y, ref(x), rtol=1e-12, atol=1e-12)
