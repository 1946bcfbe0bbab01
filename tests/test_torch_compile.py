"""torch.compile of compiled specs: every shipped spec (``specs/``, ``specs/paper/``, ``examples/specs/``) is one
graph with no break, and compiles with ``fullgraph=True`` to the eager outputs and gradients (aot_eager for all,
inductor for the five backbones)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

import rpn2c
from rpn2c.components.sequence import random_tokens
from rpn2c.functional import structure as S

pytestmark = pytest.mark.compile

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
INPUTS = {"cnn": (3, 1, 8, 8), "transformer": (2, 5, 32)}
SPEC_DIRS = (SPECS, SPECS / "paper", ROOT / "examples" / "specs")
# every model of every shipped spec file: (path, model name)
MODELS = [(p, m) for d in SPEC_DIRS for p in sorted(d.glob("*.rpn"))
          for m in re.findall(r"^model\s+(\w+)", p.read_text(encoding="utf-8"), re.M)]
IDS = [f"{p.relative_to(ROOT).with_suffix('')}:{m}" for p, m in MODELS]
SIZES = {"B": 2, "T": 5, "N": 7, "E": 20}  # symbolic dims; any other name gets 4


def _pair(name, backend, reference=False):
    text = (SPECS / f"{name}.rpn").read_text(encoding="utf-8")
    torch.manual_seed(0)
    eager = rpn2c.compile(text, reference=reference).double().eval()
    torch.manual_seed(0)
    compiled = rpn2c.compile(text, reference=reference, torch_compile={"backend": backend}).double().eval()
    compiled._orig_mod.load_state_dict(eager.state_dict())
    x = torch.randn(*INPUTS[name], dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    return eager, compiled, x


def random_inputs(graph, seed=1):
    """Valid random inputs for a checked graph, read from its declared input types (float64)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for nid in graph.inputs:
        t = graph.node(nid).type
        shape = [d if isinstance(d, int) else SIZES.get(d, 4) for d in t.shape]
        if not t.batched:
            shape = shape[1:]
        if t.time_major:
            shape = [shape[1], shape[0], *shape[2:]]
        if t.kind == "edges":
            out.append(torch.randint(0, SIZES["N"], shape, generator=g))
        elif t.kind == "tokens":
            out.append(random_tokens(graph, nid, shape, g))
        elif t.kind == "mask" and t.mask_mode in ("keep", "block"):
            m = torch.rand(shape, generator=g) < 0.5
            if len(shape) >= 2 and shape[-1] == shape[-2]:  # every query keeps itself: no all-blocked row
                eye = torch.eye(shape[-1], dtype=torch.bool)
                m = m | eye if t.mask_mode == "keep" else m & ~eye
            out.append(m)
        elif t.kind == "edge_weight":
            out.append(torch.rand(shape, generator=g, dtype=torch.float64) + 0.1)
        else:
            out.append(torch.randn(shape, generator=g, dtype=torch.float64))
    return out


def _spec_pair(path, model, compile_opts=None):
    text = path.read_text(encoding="utf-8")
    graph = rpn2c.check(text, str(path), model=model, path=path)
    torch.manual_seed(0)
    eager = rpn2c.compile(text, str(path), model=model, path=path).double().eval()
    compiled = None
    if compile_opts is not None:
        compiled = rpn2c.compile(text, str(path), model=model, path=path, torch_compile=compile_opts).double().eval()
        compiled._orig_mod.load_state_dict(eager.state_dict())
    return graph, eager, compiled


def _outputs_and_grads(module, params, inputs, seed=2):
    """Outputs and the gradients of a fixed random projection of them w.r.t. parameters and float inputs."""
    xs = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    ys = module(*xs)
    ys = ys if isinstance(ys, tuple) else (ys,)
    g = torch.Generator().manual_seed(seed)
    loss = sum((y * torch.randn(y.shape, generator=g, dtype=y.dtype)).sum() for y in ys)
    leaves = [p for _, p in params] + [x for x in xs if x.requires_grad]
    return [y.detach() for y in ys], torch.autograd.grad(loss, leaves, allow_unused=True)


def _assert_matches_eager(eager, compiled, inputs, rtol=1e-9, atol=1e-10):
    want, want_g = _outputs_and_grads(eager, list(eager.named_parameters()), inputs)
    have, have_g = _outputs_and_grads(compiled, list(compiled._orig_mod.named_parameters()), inputs)
    assert len(have) == len(want)
    for h, w in zip(have, want):
        assert torch.isfinite(w).all()
        assert_close(h, w, rtol=rtol, atol=atol)
    assert len(have_g) == len(want_g) and any(g is not None for g in want_g)
    for h, w in zip(have_g, want_g):
        assert (h is None) == (w is None)
        if w is not None:
            assert_close(h, w, rtol=rtol, atol=atol)


# 0.1-0.3 G parameters: eager and compiled forward + backward take 15-90 s each on 2 CPU cores
HEAVY = {"cifar10_cylinder4_densest_4x256", "cifar10_cuboid3_densest", "cifar10_cylinder4_compress_every2"}
# the one-graph trace of a model whose fullgraph compile runs in CI adds nothing (fullgraph=True already fails on a
# break): CI traces the heavy ones only, the rest runs with -m slow
TRACED = [pytest.param(p, m, id=i, marks=() if p.stem in HEAVY else pytest.mark.slow) for (p, m), i in zip(MODELS, IDS)]


@pytest.mark.parametrize("path, model", TRACED)
def test_spec_traces_as_one_graph(path, model):
    """``torch._dynamo.explain``: one graph, no break, and the reasons where there are."""
    torch._dynamo.reset()
    graph, eager, _ = _spec_pair(path, model)
    explained = torch._dynamo.explain(eager)(*random_inputs(graph))
    reasons = [str(r.reason).splitlines()[0] for r in explained.break_reasons]
    assert (explained.graph_count, explained.graph_break_count, reasons) == (1, 0, [])


# models whose compile takes 7-9 s here: the classical Hopfield update's loop over neurons, and the second Swin
# (its classifier, `swin`, compiles in CI); Qwen2 and Qwen3, the Llama decoder with biases or query/key norms (`llama`
# compiles in CI)
SLOW_MODELS = {"hopfield_classical", "swin_model", "qwen2", "qwen3"}
AOT_MODELS = [pytest.param(p, m, id=i, marks=pytest.mark.slow if p.stem in HEAVY or m in SLOW_MODELS else ())
              for (p, m), i in zip(MODELS, IDS)]


@pytest.mark.parametrize("path, model", AOT_MODELS)
def test_spec_fullgraph_aot_eager_matches_eager(path, model):
    torch._dynamo.reset()
    graph, eager, compiled = _spec_pair(path, model, {"fullgraph": True, "backend": "aot_eager"})
    _assert_matches_eager(eager, compiled, random_inputs(graph))


GRAPH_CASES = [  # (directed, normalization, self_loops, symmetrize)
    (True, "symmetric", None, "max"),
    (True, "column", True, "max"),
    (False, "row", True, "max"),
    (False, "symmetric", None, "sum"),
    (False, "none", False, "max"),
]


@pytest.mark.parametrize("directed, norm, loops, sym", GRAPH_CASES)
def test_graph_normalisation_compiles_to_the_eager_adjacency(directed, norm, loops, sym):
    """Duplicates, self-loops (some repeated) and negative weights: the normalisation traces as one graph and
    its fixed-length edge list gives the eager adjacency and weight gradients."""
    torch._dynamo.reset()
    n = 6
    ei = torch.tensor([[0, 1, 1, 2, 2, 3, 4, 0, 5, 3], [1, 0, 1, 2, 2, 4, 3, 1, 0, 5]])
    w0 = torch.tensor([0.5, 2.0, 1.5, 0.7, 0.4, -0.5, 3.0, 0.25, 1.2, 0.9], dtype=torch.float64)

    def adjacency(edges, w):
        src, dst, ww = S.graph_norm_weights(edges, n, w, loops, norm, directed, symmetrize=sym)
        return torch.zeros(n, n, dtype=ww.dtype).index_put((dst, src), ww, accumulate=True)

    explained = torch._dynamo.explain(adjacency)(ei, w0)
    assert (explained.graph_count, len(explained.break_reasons)) == (1, 0)  # no data-dependent shapes
    torch._dynamo.reset()
    compiled = torch.compile(adjacency, fullgraph=True, backend="aot_eager")
    w1, w2 = w0.clone().requires_grad_(), w0.clone().requires_grad_()
    want = S.graph_adjacency(ei, n, w1, directed=directed, self_loops=loops, normalization=norm, symmetrize=sym)
    have = compiled(ei, w2)
    assert_close(have, want, rtol=1e-12, atol=1e-12)
    assert_close(adjacency(ei, w0), want.detach(), rtol=1e-12, atol=1e-12)
    r = torch.randn(n, n, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    (want * r).sum().backward()
    (have * r).sum().backward()
    assert_close(w2.grad, w1.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(INPUTS))
@pytest.mark.parametrize("reference", [False, True], ids=["default", "reference"])
def test_aot_eager_matches_eager(name, reference):
    torch._dynamo.reset()
    eager, compiled, x = _pair(name, "aot_eager", reference)
    y = eager(x)
    assert_close(compiled(x), y, rtol=1e-10, atol=1e-10)
    w = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(2))
    (compiled(x) * w).sum().backward()
    grads = {k: p.grad.clone() for k, p in compiled._orig_mod.named_parameters()}
    eager.zero_grad()
    (eager(x) * w).sum().backward()
    for k, p in eager.named_parameters():
        assert_close(grads[k], p.grad, rtol=1e-9, atol=1e-9)


BACKBONES = {p.stem: (p, m) for p, m in MODELS
             if p.parent == SPECS and p.stem in ("cnn", "rnn", "gcn", "transformer", "mlp")}
# inductor on 2 CPU cores takes 15-70 s per spec (forward + backward): only gcn runs in the CI suite
INDUCTOR = [pytest.param(n, marks=() if n == "gcn" else pytest.mark.slow) for n in sorted(BACKBONES)]


@pytest.mark.parametrize("name", INDUCTOR)
def test_inductor_fullgraph_matches_eager(name):
    torch._dynamo.reset()
    path, model = BACKBONES[name]
    graph, eager, compiled = _spec_pair(path, model, {"fullgraph": True, "backend": "inductor"})
    _assert_matches_eager(eager, compiled, random_inputs(graph), rtol=1e-9, atol=1e-9)


def test_compiled_lstm_keeps_the_fused_kernel_as_one_opaque_op():
    """torch <= 2.13 cannot differentiate oneDNN's LSTM kernel under AOTAutograd (pytorch/pytorch#158007): inside
    a compiled graph on CPU the kernel is the custom op ``rpn2c::lstm`` (not a loop over time steps), and with two
    bidirectional layers and initial states it equals eager in outputs and every gradient, in float64; in training
    mode the backward replays the forward's tape (no tape is left behind)."""
    from rpn2c.functional import rnn_op

    torch._dynamo.reset()
    seen = []

    def record(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    text = _cell_text("lstm")
    graph = rpn2c.check(text)
    torch.manual_seed(0)
    eager = rpn2c.compile(text).double()
    compiled = torch.compile(rpn2c.compile(text).double(), backend=record, fullgraph=True)
    compiled._orig_mod.load_state_dict(eager.state_dict())
    inputs = [x.double() for x in random_inputs(graph)]
    rnn_op._TAPES.clear()
    _assert_matches_eager(eager, compiled, inputs, rtol=1e-10, atol=1e-12)
    assert "rpn2c.lstm.default" in seen and not any("lstm_cell" in t or "sigmoid" in t for t in seen), seen
    assert compiled.training and not rnn_op._TAPES


def test_compiled_lstm_inference_calls_the_native_kernel():
    """Without gradients nothing is differentiated, so the compiled graph calls torch's LSTM kernel itself (its
    output layout is known to the compiler: no opaque op and no contiguous copy), under inductor too."""
    torch._dynamo.reset()
    seen = []

    def record(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    inner = torch.nn.LSTM(4, 5, batch_first=True, num_layers=2)
    spec = rpn2c.from_torch(inner, (torch.randn(2, 3, 4),))
    model = rpn2c.compile(spec.text).eval()
    model.load_state_dict(spec.state_dict)
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = inner(x)[0]
        assert_close(torch.compile(model, backend=record, fullgraph=True)(x), want)
        assert "rpn2c.lstm.default" not in seen and any("lstm" in t for t in seen), seen
        torch._dynamo.reset()
        assert_close(torch.compile(model, fullgraph=True)(x), want, rtol=1e-5, atol=1e-6)


def test_compiled_lstm_trains_on_cpu_with_inductor():
    """The opaque ``rpn2c::lstm`` under inductor: outputs and gradients equal the eager fused kernel."""
    torch._dynamo.reset()
    inner = torch.nn.LSTM(4, 5, batch_first=True)
    spec = rpn2c.from_torch(inner, (torch.randn(2, 3, 4),))
    eager = rpn2c.compile(spec.text)
    eager.load_state_dict(spec.state_dict)
    compiled = rpn2c.compile(spec.text, torch_compile={"fullgraph": True})
    compiled._orig_mod.load_state_dict(spec.state_dict)
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    y, y_ref = compiled(x), eager(x)
    assert_close(y, y_ref, rtol=1e-5, atol=1e-6)
    y.square().sum().backward()
    y_ref.square().sum().backward()
    for (name, p), q in zip(compiled._orig_mod.named_parameters(), eager.parameters()):
        assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)


def _cell_text(cell: str) -> str:
    states = "  input h0: state[4, B, 3]\n" + ("  input c0: state[4, B, 3]\n" if cell == "lstm" else "")
    settings = "    state = h0\n" + ("    cell_state = c0\n" if cell == "lstm" else "")
    return (f"model m {{\n  input x: sequence[B, 5, 4]\n{states}  y = recurrent(x) {{\n    cell = {cell}\n    out = 3\n"
            f"    layers = 2\n    bidirectional = true\n{settings}  }}\n  return y\n}}\n")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_every_cell_trains_under_inductor_with_layers_directions_and_states(cell, dtype):
    """Two bidirectional layers with initial states (and the LSTM's cell state): fullgraph inductor equals eager in
    outputs and in the gradients of every parameter, initial state and input (80-240 s each on 2 CPU cores)."""
    torch._dynamo.reset()
    text = _cell_text(cell)
    graph = rpn2c.check(text)
    torch.manual_seed(0)
    eager = rpn2c.compile(text).to(dtype)
    compiled = rpn2c.compile(text, torch_compile={"fullgraph": True}).to(dtype)
    compiled._orig_mod.load_state_dict(eager.state_dict())
    inputs = [x.to(dtype) for x in random_inputs(graph)]
    assert len(inputs) == (3 if cell == "lstm" else 2)
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-9, "atol": 1e-10}
    _assert_matches_eager(eager, compiled, inputs, **tol)
