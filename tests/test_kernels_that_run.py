"""What ``rpn2c explain`` reports is what runs: for every shipped spec, each op of every rewritten layer term is
called once per forward (no other op runs), and each kernel op's own torch operation shows in the dispatch trace.
A kernel op with a declared run-time fallback (``Kernel.fallback``) runs the fallback exactly under its condition."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import rpn2c
from rpn2c.components.registry import kernels as declared_kernels
from rpn2c.lower.emitters import EMITTERS, signature
from rpn2c.runtime.explain import explain_json
from rpn2c.runtime.export_cli import example_inputs

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "specs").glob("*.rpn")) + sorted((ROOT / "examples" / "specs").glob("*.rpn"))

# the torch operation that only this kernel op dispatches (a substring of the aten / custom op name)
SIGNATURE = {
    "conv": ("convolution",),
    "pool": ("max_pool", "convolution"),
    "unfold": ("im2col",),
    "box_sum": ("convolution",),
    "spmm": ("graph_mm",),
    "sdpa_causal": ("scaled_dot_product",),
    "fused_sdpa": ("scaled_dot_product",),
    "flex_attention": ("window_attention", "scaled_dot_product"),
    "linear": ("addmm", "mm"),
    "stacked_linear": ("addmm", "mm"),
    "degree_linear": ("addmm", "mm"),
}


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names[str(func)] += 1
        return func(*args, **(kwargs or {}))


def _describes(op: str) -> bool:
    """A multi-head kernel (``fused_sdpa``, ``stacked_linear``, ``chebyshev_sum``) reads the layer's query and
    context, not its heads' terms: its emitter's signature takes neither ``z`` nor ``args`` (lower/program.py)."""
    return op in EMITTERS and not {"z", "args"} & set(signature(EMITTERS[op]))


def _computed(root):
    """The distinct subterms that compute: under a multi-head kernel the head terms only describe it (it reads
    the layer's query and context, which do compute: lower/program.py)."""
    seen, stack = set(), [(root, False)]
    while stack:
        t, described = stack.pop()
        if id(t) in seen or t.op == "input":
            continue
        seen.add(id(t))
        if not (described and t.info.get("head") is not None):
            yield t
        stack.extend((a, described or (t.info.get("head") is None and _describes(t.op))) for a in t.args)


def _traced_steps(model):
    """Wrap every layer's and recurrent layer's program steps to count the ops that run."""
    ran = Counter()
    for nid, path, kind, _ in model._steps:
        module = model.get_submodule(path)
        if kind not in ("layer", "recurrent"):
            continue

        def wrap(step, nid=nid):
            def run(layer, *args):
                ran[(nid, step.op)] += 1
                return step.run(layer, *args)
            return type(step)(step.op, run, step.args)

        module.program = [wrap(s) for s in module.program]
    model.emit()
    return ran


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_op_of_the_rewritten_terms_runs_and_nothing_else(path):
    model = rpn2c.compile_file(path).eval()
    ran = _traced_steps(model)
    values, _ = example_inputs(model.graph)
    ops = _Ops()
    with torch.no_grad(), ops:
        model(*values)
    want = Counter()
    for node in model.graph.nodes():
        if node.kind in ("layer", "recurrent") and node.terms:
            want.update((node.id, t.op) for t in _computed(node.terms[1]))
    assert ran == want
    kernels = {t.op for n in model.graph.nodes() if n.terms for t in n.terms[1].walk()}
    for op in kernels & set(SIGNATURE):
        if op in declared_kernels() and declared_kernels()[op].fallback is not None:
            continue  # checked below, with its condition
        assert any(sig in name for sig in SIGNATURE[op] for name in ops.names), (op, sorted(ops.names))


def _gcn(weight_grad: bool):
    text = ("model g {\n  input x: nodes[N, 4]\n  input edges: edges[2, E]\n  input w: edge_weight[E]\n"
            "  y = head(x) { xi_instance = graph(edges = edges, weight = w)  out = 3 }\n  return y\n}\n")
    model = rpn2c.compile(text).double()
    x = torch.randn(5, 4, dtype=torch.float64)
    edges = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])
    w = torch.rand(5, dtype=torch.float64, requires_grad=weight_grad)
    return model, (x, edges, w)


@pytest.mark.parametrize("weight_grad", [False, True])
def test_spmm_runs_its_declared_fallback_exactly_when_edge_weights_need_gradients(weight_grad):
    model, inputs = _gcn(weight_grad)
    node = explain_json(model.graph)["nodes"][0]
    assert "spmm" in node["rewritten"] and node["fallbacks"]["spmm"]["runs"] == "gather_scatter"
    assert "gradients" in node["fallbacks"]["spmm"]["when"]
    ops = _Ops()
    with ops:
        model(*inputs).sum().backward()
    spmm = any("graph_mm" in name for name in ops.names)
    scatter = any("index_add" in name or "scatter" in name for name in ops.names)
    assert spmm != weight_grad and scatter == weight_grad, sorted(ops.names)


def test_pagerank_solve_is_not_reported_as_spmm():
    for method, spmm in (("power", True), ("solve", False)):
        text = (f"model m {{\n  input x: nodes[N, 4]\n  input edges: edges[2, E]\n  y = head(x) {{ xi_instance = "
                f'pagerank(edges = edges, method = "{method}")  out = 3 }}\n  return y\n}}\n')
        model = rpn2c.compile(text).double()
        node = explain_json(model.graph)["nodes"][0]
        assert ("graph_spmm" in [d["rule"] for d in node["decisions"]]) == spmm
        ops = _Ops()
        with ops:
            model(torch.randn(6, 4, dtype=torch.float64), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]))
        assert any("graph_mm" in name for name in ops.names) == spmm
