"""A clean check is a promise about the forward pass: the memory and step estimates cover every op (a ξ's hops, the
intermediates of inner κ, fabricated ψ, attribute matrices), and what the check cannot see (the sizes of the
symbolic dimensions) the compiled model sees before it allocates anything or loops: a located E0605 (memory) or
E0604 (steps)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

import rpn2c
from rpn2c.check.budget import Limits
from rpn2c.ir.estimate import node_elements, run_time_check
from rpn2c.runtime.fuzz import run_one

KERNEL = """model m {{
  input x: sequence[B, {t}, 8]
  y = head(x) {{
    xi_instance = exponential_kernel
    out = 4
  }}
  return y
}}
"""
MIB = {"max_memory": 2**20}


@settings(deadline=None)
@given(t=st.integers(1, 400))
def test_the_run_time_estimate_is_the_checks_with_the_symbols_sized(t):
    """Inputs of T items are refused at run time exactly when the spec with T written as a number is refused at
    check: one estimate, with the symbol sized."""
    graph = rpn2c.check(KERNEL.format(t="T"), limits=MIB)
    refusal = run_time_check(graph, {"B": 2, "T": t}, graph.limits)
    try:
        rpn2c.check(KERNEL.format(t=t), limits=MIB)
        fixed = None
    except rpn2c.SpecResourceError as exc:
        fixed = exc
    assert (refusal is None) == (fixed is None)
    if refusal is not None:
        assert refusal.codes == ["E0605"] and fixed.codes == ["E0602"]
        assert (refusal.diagnostics[0].span.line, refusal.diagnostics[0].span.col) == (3, 7)


def test_inputs_over_the_memory_budget_are_refused_before_anything_is_allocated():
    """200,000 items would make a 160 GB kernel matrix: the model refuses them, by the node, before the forward."""
    model = rpn2c.compile(KERNEL.format(t="T"))
    assert model(torch.randn(2, 5, 8)).shape == (2, 5, 4)
    with pytest.raises(rpn2c.SpecResourceError) as info:
        model(torch.randn(1, 200_000, 8))
    err = info.value
    assert err.codes == ["E0605"] and err.diagnostics[0].span.line == 3
    assert "T = 200,000" in str(err) and "the budget is 4 GiB" in str(err)
    assert model(torch.randn(3, 6, 8)).shape == (3, 6, 4)  # the verdict is per size: smaller inputs still run


def test_steps_that_grow_with_the_input_are_refused_at_run_time():
    """A bidirectional eq (80) chain runs one shift per item: its steps are T, known only from the input."""
    spec = ("model m {\n  input x: sequence[B, T, 3]\n  y = head(x) {\n"
            "    xi_instance = inverse_chain(direction = \"bidirectional\")\n    out = 2\n  }\n  return y\n}\n")
    model = rpn2c.compile(spec, limits={"max_work": 100})
    assert torch.isfinite(model(torch.randn(2, 50, 3))).all()
    with pytest.raises(rpn2c.SpecResourceError) as info:
        model(torch.randn(2, 500, 3))
    d = info.value.diagnostics[0]
    assert d.code == "E0604" and (d.span.line, d.span.col) == (4, 19) and "T = 500" in d.message


def test_the_fuzz_harness_counts_a_run_time_refusal_as_a_clear_one(monkeypatch):
    import rpn2c.runtime.fuzz as fuzz

    monkeypatch.setitem(fuzz.DIMS, "T", 2000)  # a 2,000 x 2,000 kernel matrix: 16 MB per sample
    out = run_one(KERNEL.format(t="T"), limits=Limits(max_memory=2**20))
    assert (out.status, out.detail) == ("ok", "refused at run time (E0605)")


@pytest.mark.parametrize("hops, accumulate, identity", [(300, False, True), (1000, True, False), (257, True, True)])
def test_many_hops_on_a_small_graph_are_squarings_equal_to_the_propagations(hops, accumulate, identity):
    from rpn2c.functional.structure.graph import graph_propagate, multihop_propagate, squaring_pays

    gen = torch.Generator().manual_seed(hops)
    n, e = 10, torch.randint(0, 10, (2, 30), generator=gen)
    w = torch.rand(30, generator=gen, dtype=torch.float64) / 3
    x = torch.randn(2, n, 3, generator=gen, dtype=torch.float64)
    assert squaring_pays(n, 30, hops, 6) and not squaring_pays(10_000, 30_000, hops, 6)
    got = multihop_propagate(x, e[0], e[1], w, n, hops, accumulate, identity)
    y, acc = x, (x if identity else torch.zeros_like(x))
    for _ in range(hops):
        y = graph_propagate(y, e[0], e[1], w, n)
        acc = acc + y
    want = acc if accumulate else y
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12 * float(want.abs().max()))


class _Largest(TorchDispatchMode):
    """The most elements any op makes (views and parameter reads excepted)."""

    VIEWS = ("view", "transpose", "expand", "unsqueeze", "permute", "aten.t.", "select", "slice", "as_strided",
             "alias", "detach", "squeeze", "unflatten", "reshape")

    def __init__(self):
        super().__init__()
        self.most = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not any(v in str(func) for v in self.VIEWS):
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor):
                    self.most = max(self.most, t.numel())
        return out


@pytest.mark.parametrize("head", [
    'xi_instance = rpn_interdependence(kappa = "taylor", kappa_d = 6, psi = "hm")',
    'kappa = nested(parts = ["taylor(d = 6)", "max_compression"])',
    "psi = hm(p = 2, q = 2)\n    out = 600",
    "xi_attribute = exponential_kernel",
    "xi_instance = attention(rank = 3000)",
    'pi = expansion(kappa = "taylor(d = 7)")',
    "psi = dual_lphm(r = 5000)",
])
def test_the_memory_estimate_covers_the_largest_tensor_of_the_forward(head):
    """Every tensor a forward pass makes (B = 1, both lowerings) is within the check's per-sample estimate plus
    the model's own parameters and buffers."""
    spec = f"model m {{\n  input x: sequence[B, 4, 4]\n  y = head(x) {{\n    {head}\n    out = 2\n  }}\n  return y\n}}\n"
    spec = spec.replace("out = 600\n    out = 2", "out = 600")
    graph = rpn2c.check(spec)
    estimate = sum(node_elements(n) for n in graph.nodes())
    for reference in (False, True):
        model = rpn2c.compile(spec, reference=reference)
        held = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
        mode = _Largest()
        with torch.no_grad(), mode:
            model(torch.randn(1, 4, 4))
        assert mode.most <= estimate + held, (reference, mode.most, estimate, held)


def test_export_takes_the_budgets_and_holds_inputs_to_them(tmp_path, capsys):
    """``--max-memory`` reaches the check and the compiled model: inputs over it are refused by the node (E0605)
    and no file is left; the default budget exports the same model."""
    from rpn2c.runtime.cli import main

    spec = tmp_path / "k.rpn"
    spec.write_text(KERNEL.format(t="T"), encoding="utf-8")
    command = ["export", str(spec), "--random-init", "--dim", "T=600", "--out", str(tmp_path / "k.pt2")]
    assert main([*command, "--max-memory", "1MB"]) == 1
    err = capsys.readouterr().err
    assert "error[E0605]" in err and f"{spec}:3:7" in err and "T = 600" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.rpn"]
    assert main(command) == 0 and (tmp_path / "k.pt2").is_file()


@pytest.mark.parametrize("command", ["explain", "graph", "show", "train"])
def test_every_spec_command_takes_the_budgets(tmp_path, capsys, command):
    """The budgets are options of every command that checks a spec: a parameter budget the model exceeds ends in
    its located E0601 before any data is read or anything is built."""
    from rpn2c.runtime.cli import main

    spec = tmp_path / "k.rpn"
    spec.write_text(KERNEL.format(t="T"), encoding="utf-8")
    extra = ["--data", "basic_motions", "--out", str(tmp_path / "run")] if command == "train" else []
    code = main([command, str(spec), *extra, "--max-params", "5"])
    err = capsys.readouterr().err
    assert code == 1 and "error[E0601]" in err and f"{spec}:3:7" in err, err


RECURRENT = """model m {{
  input x: sequence[B, T, {d}]
  s = recurrent(x) {{
    cell = {cell}
    out = {h}
    layers = {layers}
    bidirectional = {bi}
  }}
  return s
}}
"""


@settings(deadline=None, max_examples=15)
@given(cell=st.sampled_from(["diagonal", "linear"]), h=st.integers(1, 6), d=st.integers(1, 4), t=st.integers(1, 6),
       layers=st.integers(1, 2), bi=st.booleans())
def test_the_reference_estimate_covers_a_linear_recurrences_literal_matrices(cell, h, d, t, layers, bi):
    """The reference lowering of a linear cell builds seed 004's block-Toeplitz ``L`` ``[T·H, T·H]`` and ``W_RNN``
    (a diagonal λ made a dense ``H × H`` first): its largest tensor is within the reference estimate."""
    from rpn2c.ir.estimate import reference_elements

    spec = RECURRENT.format(cell=cell, h=h, d=d, layers=layers, bi=str(bi).lower())
    model = rpn2c.compile(spec, reference=True)
    graph = model.graph
    sizes = {"B": 1, "T": t}
    literal = sum(reference_elements(n, sizes) for n in graph.nodes())
    assert literal >= (t * h) ** 2  # L itself
    held = sum(p.numel() for p in model.parameters())
    mode = _Largest()
    with torch.no_grad(), mode:
        model(torch.randn(1, t, d))
    assert mode.most <= literal + sum(node_elements(n, sizes) for n in graph.nodes()) + held


def test_the_reference_lowering_refuses_a_literal_matrix_over_the_budget_before_building_it(tmp_path, capsys):
    """A diagonal cell of 100,000 states: the default lowering scans in O(T·H); the reference (what ``rpn2c show``
    draws) would build ``diag(λ)``, 80 GB, and ``L``, 7.6 TiB: it is refused at the node (E0606) before any
    allocation, and ``show`` says so, located, with no traceback."""
    from rpn2c.runtime.cli import main

    text = RECURRENT.format(cell="diagonal", h=100_000, d=2, layers=1, bi="false")
    x = torch.randn(1, 8, 2)
    assert rpn2c.compile(text)(x).shape == (1, 8, 100_000)
    mode = _Largest()
    with pytest.raises(rpn2c.SpecResourceError) as info, mode:
        rpn2c.compile(text, reference=True)(x)
    d = info.value.diagnostics[0]
    assert d.code == "E0606" and (d.span.line, d.span.col) == (3, 7) and "T = 8" in d.message
    assert mode.most < 10**6  # refused before the matrices
    spec = tmp_path / "big.rpn"
    spec.write_text(text, encoding="utf-8")
    assert main(["show", str(spec), "--out", str(tmp_path / "big.png")]) == 1
    err = capsys.readouterr().err
    assert f"{spec}:3:7: error[E0606]" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.rpn"]


GRAPH = """model g(features = 8, hidden = 4) {{
  input x: nodes[N, features]
  input edges: edges[2, E]
  y = head(x) {{
    xi_instance = {xi}
    out = hidden
  }}
  return y
}}
"""
PROPAGATING = ['graph(edges = edges, norm = "symmetric", self_loops = true)', "graph(edges = edges, hops = 2)",
               'pagerank(edges = edges, norm = "column")']


@pytest.mark.parametrize("xi", PROPAGATING)
def test_a_graph_that_propagates_on_its_edges_is_charged_its_edges_not_n_squared(xi):
    """A ξ that propagates over its edge list never has an N×N matrix in the default lowering (gather/index_add per
    hop): 2,000,000 nodes and 20,000,000 edges are within the 4 GiB budget (an N×N charge said 14.6 TiB); the
    reference lowering builds the literal matrix, so it refuses them at the node (E0606)."""
    graph = rpn2c.check(GRAPH.format(xi=xi))
    sizes = {"N": 2_000_000, "E": 20_000_000}
    assert run_time_check(graph, sizes, graph.limits) is None
    refusal = run_time_check(graph, sizes, graph.limits, reference=True)
    assert refusal is not None and refusal.codes == ["E0606"] and refusal.diagnostics[0].span.line == 4
    # a dense instance ξ on the same items is still charged its N×N matrix
    dense = rpn2c.check(GRAPH.format(xi="exponential_kernel"))
    assert run_time_check(dense, sizes, dense.limits).codes == ["E0605"]


@pytest.mark.parametrize("xi", PROPAGATING)
@pytest.mark.parametrize("n, e", [(5, 12), (9, 30)])
def test_the_estimates_cover_a_propagating_graphs_largest_tensor_in_both_lowerings(xi, n, e):
    """Every tensor a forward pass makes is within the per-node estimate (default) plus the literal matrices
    (reference), with the model's parameters and buffers."""
    from rpn2c.ir.estimate import reference_elements

    graph = rpn2c.check(GRAPH.format(xi=xi))
    sizes = {"N": n, "E": e}
    estimate = sum(node_elements(node, sizes) for node in graph.nodes())
    literal = sum(reference_elements(node, sizes) for node in graph.nodes())
    g = torch.Generator().manual_seed(n)
    x, edges = torch.randn(n, 8, generator=g), torch.randint(0, n, (2, e), generator=g)
    for reference, bound in ((False, estimate), (True, estimate + literal)):
        model = rpn2c.compile(GRAPH.format(xi=xi), reference=reference)
        held = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
        mode = _Largest()
        with torch.no_grad(), mode:
            model(x, edges)
        assert mode.most <= bound + held, (reference, mode.most, bound, held)
    assert literal >= n * n


POOL = """model m {{
  input x: image[B, 2, 14, 14]
  y = compress(x) {{
    kappa = {kappa}
  }}
  return y
}}
"""


@pytest.mark.parametrize("kappa", [
    "cuboid_max(half = 1000)",
    "cuboid_mean(half = 300, stride = 3)",
    'cuboid_pool(metric = "l2", half = 40, half_after = 2)',
    'cuboid_pool(metric = "variance", half = 5)',
    'patch_pool(metric = "median", size = 9, pad = 4, stride = 2, padding_mode = "replicate")',
    "cylinder_max(radius = 60)",
    "cuboid_expansion(half = 3, stride = 2)",
])
def test_the_estimates_cover_what_a_pooling_builds_and_runs(kappa):
    """A pooling's (patch, tap) index is built when the model is: every tensor made while compiling and in a forward
    pass (both lowerings, B = 1) is within the check's estimate, the reference lowering's padding matrix within its
    literal charge; the buffers are not excused (they are what the estimate must charge). A window far wider than
    the grid is within it because only its taps that reach the grid are built."""
    from rpn2c.ir.estimate import reference_elements

    spec = POOL.format(kappa=kappa)
    graph = rpn2c.check(spec)
    estimate = sum(node_elements(n) for n in graph.nodes())
    literal = sum(reference_elements(n) for n in graph.nodes())
    assert estimate * 4 < 2**28  # each is a few MB at most
    for reference, bound in ((False, estimate), (True, estimate + literal)):
        mode = _Largest()
        with torch.no_grad(), mode:
            model = rpn2c.compile(spec, reference=reference)
            model(torch.randn(1, 2, 14, 14))
        assert mode.most <= bound, (reference, mode.most, bound)


def test_a_pooling_whose_index_would_not_fit_is_refused_at_check():
    """A variance over a 2001 × 2001 window on 14 × 14 reads every tap (a 0 read outside counts): its index of 785
    million entries is charged, and refused (E0602, located) before anything is built."""
    with pytest.raises(rpn2c.SpecResourceError) as info:
        rpn2c.check(POOL.format(kappa='cuboid_pool(metric = "variance", half = 1000)'))
    d = info.value.diagnostics[0]
    assert d.code == "E0602" and (d.span.line, d.span.col) == (3, 7)


CONV = """model m {{
  input x: image[B, 2, {h}, {w}]
  y = head(x) {{
    xi_attribute = {xi}
    out = 3
  }}
  return y
}}
"""


@pytest.mark.parametrize("xi, h, w", [
    ("grid_patch(size = 3, pad = 1)", 12, 10),
    ('grid_patch(size = 5, stride = 2, dilation = 2, pad = 3, padding_mode = "reflect")', 13, 9),
    ('grid_patch(size = 3, pad = 1, mode = "aggregation")', 12, 10),
    ("cuboid_patch(half = 2, stride = 2)", 11, 11),
    ("grid_patch(size = 3, pad = 1)", "H", "W"),
])
def test_the_estimates_cover_what_a_grid_head_builds_and_runs(xi, h, w):
    """A convolution's patches: every tensor made while compiling and in a forward pass (both lowerings, B = 1) is
    within the check's estimate (the patch matrix, the (patch, tap) index), the reference lowering's padding or
    aggregation matrix ``[N + 1, P·p]`` within its literal charge, a symbolic grid's sized by the input."""
    from rpn2c.ir.estimate import reference_elements

    spec = CONV.format(xi=xi, h=h, w=w)
    graph = rpn2c.check(spec)
    sizes = {"B": 1, "H": 12, "W": 10}
    estimate = sum(node_elements(n, sizes) for n in graph.nodes())
    literal = sum(reference_elements(n, sizes) for n in graph.nodes())
    assert literal >= 12 * 10 * 10  # at least N × P
    x = torch.randn(1, 2, *(sizes.get(v, v) for v in (h, w)))
    for reference, bound in ((False, estimate), (True, estimate + literal)):
        mode = _Largest()
        with torch.no_grad(), mode:
            model = rpn2c.compile(spec, reference=reference)
            model(x)
        held = sum(p.numel() for p in model.parameters())
        assert mode.most <= bound + held, (reference, mode.most, bound, held)


def test_a_convolutions_literal_matrix_is_charged_in_the_dtype_it_is_built_in(tmp_path, capsys):
    """A LeNet whose image is 1000 × 8 (seed 7310009312 of the fuzz lanes, ``rpn2c show``): the reference lowering's
    padding matrix of the first convolution is 8,001 × 72,000, 2.1 GiB in float32 but 4.3 GiB in float64, where
    ``show`` runs it. It is charged in the model's dtype, so the reference model in float64 refuses it at the node
    (E0606) before building it, the same model in float32 runs where the budget holds its matrix, and ``show``
    says so, located, without a traceback."""
    from rpn2c.runtime.cli import main

    text = (Path(__file__).parents[2] / "specs" / "cnn.rpn").read_text(encoding="utf-8")
    big = text.replace("image[B, 1, 8, 8]", "image[B, 1, 1000, 8]")
    graph = rpn2c.check(big)
    assert run_time_check(graph, {"B": 1}, graph.limits, reference=True) is None  # float32: 2.1 GiB
    refusal = run_time_check(graph, {"B": 1}, graph.limits, reference=True, itemsize=8)
    line = next(i for i, s in enumerate(big.splitlines(), 1) if s.strip().startswith("c1 = head"))
    assert refusal.codes == ["E0606"] and refusal.diagnostics[0].span.line == line
    assert "'c1'" in refusal.diagnostics[0].message
    # the same at a size a test can run: a budget between the float32 and the float64 matrix
    small = text.replace("image[B, 1, 8, 8]", "image[B, 1, 96, 8]")  # the matrix: 769 × 6,912
    budget = {"max_memory": 32 * 2**20}
    x = torch.randn(1, 1, 96, 8)
    assert rpn2c.compile(small, reference=True, limits=budget).eval()(x).shape == (1, 10)
    model = rpn2c.compile(small, reference=True, limits=budget).double().eval()
    mode = _Largest()
    with pytest.raises(rpn2c.SpecResourceError) as info, torch.no_grad(), mode:
        model(x.double())
    assert info.value.codes == ["E0606"] and info.value.diagnostics[0].span.line == line
    assert mode.most < 769 * 6912  # refused before the matrix
    spec = tmp_path / "cnn.rpn"
    spec.write_text(small, encoding="utf-8")
    assert main(["show", str(spec), "--format", "json", "--max-memory", "32MiB"]) == 1
    err = capsys.readouterr().err
    assert f"{spec}:{line}:" in err and "error[E0606]" in err and "Traceback" not in err
