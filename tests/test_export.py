"""``rpn2c export``: the written torch.export program (and ONNX model) equals the module the checkpoint restores,
on random inputs of sizes other than the example's; unexportable specs and bad invocations are clear errors."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

import rpn2c
from rpn2c.data import Dataset
from rpn2c.lower.recurrent import RecurrentModule
from rpn2c.runtime import export_write
from rpn2c.runtime.cli import main
from rpn2c.runtime.export_cli import example_inputs
from rpn2c.train import checkpoint

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "specs"
HAS_ONNX = all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript", "onnxruntime"))
needs_onnx = pytest.mark.skipif(not HAS_ONNX, reason="onnx, onnxscript and onnxruntime not installed "
                                                     "(pip install 'rpn2c[export]')")


def _trained(spec: Path, tmp_path: Path) -> tuple[Path, torch.nn.Module]:
    """A checkpoint of ``spec`` whose weights are not the initial ones, and the module they give."""
    torch.manual_seed(0)
    model = rpn2c.compile_file(spec).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    graph = model.graph
    data = Dataset("made_up", "classification", (torch.zeros(2, 1), torch.zeros(2)), (torch.zeros(2, 1),
                   torch.zeros(2)), 2, None, "vector[B, 1]")
    ckpt = checkpoint.build(graph=graph, state_dict=model.state_dict(), spec_file=spec, spec_text=spec.read_text(),
                            config={"seed": 0}, epoch=1, metrics={}, history=[], dataset=data)
    return checkpoint.save(ckpt, tmp_path / "checkpoint.pt"), model


def _inputs(model, sizes: dict[str, int], dtype=torch.float32):
    out = []
    for name in model.graph.inputs:
        t = model.graph.node(name).type
        shape = [d if isinstance(d, int) else sizes[d] for d in (t.shape if t.batched else t.shape[1:])]
        out.append(torch.randn(shape, dtype=dtype))
    return out


def _export(capsys, *argv) -> tuple[int, str, str]:
    code = main(["export", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_mlp_checkpoint_exports_to_pt2_with_a_dynamic_batch(tmp_path, capsys):
    ckpt, model = _trained(SPECS / "mlp.rpn", tmp_path)
    code, out, err = _export(capsys, SPECS / "mlp.rpn", ckpt)
    assert code == 0, err
    path = tmp_path / "checkpoint.pt2"  # default: next to the checkpoint
    assert out.startswith(f"wrote {path}: torch.export program of model mlp (float32), weights from {ckpt}")
    assert "input x: vector[B, 30] (dynamic B)" in out and "checked: equals the module" in out
    program = torch.export.load(path)
    for batch in (1, 7, 33):  # never the example's batch of 4
        (x,) = _inputs(model, {"B": batch})
        torch.testing.assert_close(program.module()(x), model(x), rtol=1e-6, atol=1e-6)


def test_cnn_exports_in_float64_and_equals_the_module(tmp_path, capsys):
    ckpt, model = _trained(SPECS / "cnn.rpn", tmp_path)
    code, out, err = _export(capsys, SPECS / "cnn.rpn", ckpt, "--dtype", "float64", "--out", tmp_path / "cnn.pt2")
    assert code == 0, err
    assert "(float64)" in out and "(dynamic B)" in out
    program = torch.export.load(tmp_path / "cnn.pt2").module()
    model = model.double()
    (x,) = _inputs(model, {"B": 5}, torch.float64)
    torch.testing.assert_close(program(x), model(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec,sizes,dynamic", [
    pytest.param("transformer", {"B": 3, "T": 11}, "dynamic B, T", marks=pytest.mark.slow),
    ("rnn", {"B": 6, "T": 13}, "dynamic B, T"),  # the GRU's steps: one torch.scan, not unrolled
    pytest.param("rnn_chain", {"B": 2, "T": 13}, "dynamic B, T", marks=pytest.mark.slow)])
def test_sequence_models_export_with_their_dynamic_dims(tmp_path, capsys, spec, sizes, dynamic):
    ckpt, model = _trained(SPECS / f"{spec}.rpn", tmp_path)
    code, out, err = _export(capsys, SPECS / f"{spec}.rpn", ckpt)
    assert code == 0, err
    assert f"({dynamic})" in out
    program = torch.export.load(tmp_path / "checkpoint.pt2").module()
    xs = _inputs(model, sizes)
    torch.testing.assert_close(program(*xs), model(*xs), rtol=1e-5, atol=1e-5)


def test_graph_model_exports_with_dynamic_node_and_edge_counts(tmp_path, capsys):
    ckpt, model = _trained(SPECS / "gcn.rpn", tmp_path)
    code, out, err = _export(capsys, SPECS / "gcn.rpn", ckpt, "--dim", "N=12", "--dim", "E=30")
    assert code == 0, err
    assert "(dynamic N)" in out and "(dynamic E)" in out and "static shapes" not in out
    program = torch.export.load(tmp_path / "checkpoint.pt2").module()
    for n, e in ((12, 30), (40, 300), (300, 900)):  # sparser and denser graphs than the traced one
        x, edges = torch.randn(n, 34), torch.randint(0, n, (2, e))
        torch.testing.assert_close(program(x, edges), model(x, edges), rtol=1e-5, atol=1e-5)


def test_a_failed_dynamic_trace_falls_back_to_static_shapes(tmp_path, capsys, monkeypatch):
    ckpt, model = _trained(SPECS / "gcn.rpn", tmp_path)
    real = torch.export.export

    def no_dynamic(*args, dynamic_shapes=None, **kw):
        if dynamic_shapes is not None:
            raise RuntimeError("a dynamic dimension was specialised")
        return real(*args, **kw)

    monkeypatch.setattr(torch.export, "export", no_dynamic)
    code, out, err = _export(capsys, SPECS / "gcn.rpn", ckpt, "--dim", "N=12", "--dim", "E=30")
    assert code == 0, err
    assert "(fixed N=12)" in out and "(fixed E=30)" in out
    assert ("static N=12, E=30: with N, E dynamic torch.export cannot trace it (RuntimeError: a dynamic dimension "
            "was specialised)") in out
    x, edges = torch.randn(12, 34), torch.randint(0, 12, (2, 30))
    program = torch.export.load(tmp_path / "checkpoint.pt2").module()
    torch.testing.assert_close(program(x, edges), model(x, edges), rtol=1e-5, atol=1e-5)


@needs_onnx
@pytest.mark.parametrize("spec,sizes", [("mlp", {"B": 9}), pytest.param("transformer", {"B": 2, "T": 5},
                                                                         marks=pytest.mark.slow)])
def test_onnx_runs_in_onnxruntime_and_equals_the_module(tmp_path, capsys, spec, sizes):
    onnxruntime = pytest.importorskip("onnxruntime")
    ckpt, model = _trained(SPECS / f"{spec}.rpn", tmp_path)
    code, out, err = _export(capsys, SPECS / f"{spec}.rpn", ckpt, "--format", "onnx")
    assert code == 0, err
    assert "ONNX model" in out and "checked: equals the module" in out
    session = onnxruntime.InferenceSession(str(tmp_path / "checkpoint.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == model.graph.inputs
    assert [o.name for o in session.get_outputs()] == model.graph.outputs
    xs = _inputs(model, sizes)
    (got,) = session.run(None, {n: x.numpy() for n, x in zip(model.graph.inputs, xs)})
    torch.testing.assert_close(torch.from_numpy(got), model(*xs).detach(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("weights", ["--random-init", "checkpoint"])
def test_a_spec_that_cannot_be_traced_is_refused_where_it_says_so(tmp_path, capsys, weights):
    spec = tmp_path / "embed.rpn"
    spec.write_text("model embed {\n  input x: sequence[B, 6, 4]\n  y = head(x) {\n    kappa = manifold(k = 2)\n"
                    "    out = 3\n  }\n  return y\n}\n")
    if weights == "checkpoint":
        pytest.importorskip("sklearn")
        weights = _trained(spec, tmp_path)[0]
    code, out, err = _export(capsys, spec, weights, "--out", tmp_path / "e.pt2")
    assert code == 1 and out == ""
    assert f"model 'embed' cannot be exported:\n  {spec}:3:7: 'y' uses manifold (compression)" in err
    assert not (tmp_path / "e.pt2").exists()


def test_random_init_is_flagged_and_usage_errors(tmp_path, capsys):
    spec = SPECS / "mlp.rpn"
    code, _, err = _export(capsys, spec)
    assert code == 2 and "give a CHECKPOINT written by `rpn2c train`, or --random-init" in err
    code, _, err = _export(capsys, spec, tmp_path / "missing.pt")
    assert code == 2 and "no such checkpoint" in err
    code, _, err = _export(capsys, spec, "--random-init", "--dim", "B=0")
    assert code == 2 and "--dim B=0: expected NAME=SIZE" in err
    code, out, _ = _export(capsys, spec, "--random-init", "--out", tmp_path / "untrained.pt2")
    assert code == 0 and "RANDOM weights (--random-init, seed 0): not a trained model" in out.splitlines()[0]
    ckpt, _ = _trained(SPECS / "cnn.rpn", tmp_path)  # another spec's checkpoint
    code, _, err = _export(capsys, spec, ckpt)
    assert code == 1 and "trained on a different spec" in err


def test_a_dim_the_spec_does_not_have_is_refused_with_the_closest(tmp_path, capsys):
    """A misspelt ``--dim t=16`` is a usage error naming the inputs' dimensions, not silently ignored."""
    out = tmp_path / "m.pt2"
    code, _, err = _export(capsys, SPECS / "rnn.rpn", "--random-init", "--dim", "t=16", "--out", out)
    assert code == 2 and "--dim t=16: model 'rnn' has no dimension 't' (its inputs' symbolic dimensions: B, T); " \
        "did you mean 'T'?" in err
    assert not out.exists()


def test_an_example_size_of_one_says_why_the_dim_is_static(tmp_path, capsys):
    """torch.export fixes a size-1 example dimension: the summary says so and how to keep it dynamic."""
    code, out, err = _export(capsys, SPECS / "mlp.rpn", "--random-init", "--dim", "B=1", "--out", tmp_path / "m.pt2")
    assert code == 0, err
    assert "  input x: vector[B, 30] (fixed B=1)" in out.splitlines()
    assert ("  static B=1: torch.export fixes a dimension whose example size is 1; an example size of 2 or more "
            "(--dim) keeps it dynamic") in out.splitlines()


@needs_onnx
def test_graph_model_exports_to_onnx_without_the_spmm_custom_op(tmp_path, capsys):
    """ONNX has no operator for rpn2c::csr_mm: the ONNX model takes gather/scatter_add, same weights, same outputs."""
    onnxruntime = pytest.importorskip("onnxruntime")
    ckpt, model = _trained(SPECS / "gcn.rpn", tmp_path)
    assert any(d.rule == "graph_spmm" for n in model.graph.nodes() for d in n.decisions)
    code, out, err = _export(capsys, SPECS / "gcn.rpn", ckpt, "--format", "onnx", "--dim", "N=300", "--dim", "E=900")
    assert code == 0, err
    session = onnxruntime.InferenceSession(str(tmp_path / "checkpoint.onnx"), providers=["CPUExecutionProvider"])
    x, edges = torch.randn(250, 34), torch.randint(0, 250, (2, 700))
    (got,) = session.run(None, {"x": x.numpy(), "edges": edges.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), model(x, edges).detach(), rtol=1e-5, atol=1e-5)


PAGERANK = """model m {
  input x: nodes[N, 4]
  input edges: edges[2, E]
  h = head(x) {
    xi_instance = pagerank(edges = edges, alpha = 0.09)
    out = 3
  }
  y = head(h) {
    xi_instance = pagerank(edges = edges, alpha = 0.09)
    out = 2
  }
  return y
}
"""


@needs_onnx
def test_pagerank_exports_to_onnx_with_dynamic_graphs_and_its_power_steps_as_one_loop(tmp_path, capsys):
    """Two identical PageRank ξ of 170 power steps each, shared by the optimiser: the dynamic trace once failed
    (a symbolic node count as a memo key: "unhashable type: non-nested SymInt") and the steps were unrolled into
    2 × 170 propagations (minutes to trace and convert). Now N and E stay dynamic and each ξ's steps are one
    ``Loop``; the program equals the module in float64 on a graph of another size."""
    onnx, onnxruntime = pytest.importorskip("onnx"), pytest.importorskip("onnxruntime")
    spec, out = tmp_path / "pr.rpn", tmp_path / "pr.onnx"
    spec.write_text(PAGERANK, encoding="utf-8")
    code = main(["export", str(spec), "--random-init", "--format", "onnx", "--dtype", "float64", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0 and "(dynamic N)" in text and "(dynamic E)" in text, text
    ops = [n.op_type for n in onnx.load(str(out)).graph.node]
    assert ops.count("Loop") == 2 and ops.count("ScatterElements") == 0, ops
    torch.manual_seed(0)
    model = rpn2c.compile(PAGERANK).double().eval()
    x, edges = torch.randn(13, 4, dtype=torch.float64), torch.randint(0, 13, (2, 40))
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": x.numpy(), "edges": edges.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), model(x, edges).detach(), rtol=1e-12, atol=1e-12)


def test_pagerank_exports_to_pt2_with_its_power_steps_as_one_loop_on_the_cached_operator(tmp_path, capsys):
    """The pt2 program keeps the graph_spmm kernel: each ξ's 170 steps on it are one ``while_loop`` (the unrolled
    steps took minutes to trace), N and E dynamic, equal to the module at another size."""
    spec, out = tmp_path / "pr.rpn", tmp_path / "pr.pt2"
    spec.write_text(PAGERANK, encoding="utf-8")
    assert main(["export", str(spec), "--random-init", "--dtype", "float64", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "(dynamic N)" in text and "(dynamic E)" in text, text
    program = torch.export.load(str(out))
    calls = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert calls.count("while_loop") == 2 and not any("graph_mm" in c for c in calls), calls
    torch.manual_seed(0)
    model = rpn2c.compile(PAGERANK).double().eval()
    x, edges = torch.randn(13, 4, dtype=torch.float64), torch.randint(0, 13, (2, 40))
    torch.testing.assert_close(program.module()(x, edges), model(x, edges).detach(), rtol=1e-12, atol=1e-12)


KERNELS = """model m {{
  input x: sequence[B, T, 6]
  y = head(x) {{
    pre = [softplus]
    xi_instance = {first}
    out = 4
  }}
  z = head(y) {{
    xi_instance = {second}
    out = 3
  }}
  return z
}}
"""


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("first,second", [("manhattan_kernel", "euclidean_kernel"),
                                          ("chebyshev_distance", "minkowski_kernel(p = 3)")])
def test_distance_kernels_and_softplus_export_to_onnx(tmp_path, capsys, dtype, first, second):
    """ONNX has no cdist and onnxruntime no float64 Softplus: both go out as plain arithmetic, and the program
    equals the module at another length (the command's own check, and here once more in onnxruntime)."""
    onnxruntime = pytest.importorskip("onnxruntime")
    spec = tmp_path / "k.rpn"
    spec.write_text(KERNELS.format(first=first, second=second), encoding="utf-8")
    out = tmp_path / "k.onnx"
    code = main(["export", str(spec), "--random-init", "--format", "onnx", "--dtype", dtype, "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    torch.manual_seed(0)
    model = rpn2c.compile(spec.read_text(), str(spec)).to(getattr(torch, dtype)).eval()
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    x = torch.randn(3, 11, 6, dtype=getattr(torch, dtype))
    (got,) = session.run(None, {"x": x.numpy()})
    tol = 1e-12 if dtype == "float64" else 1e-5
    torch.testing.assert_close(torch.from_numpy(got), model(x).detach(), rtol=tol, atol=tol)


def _line_col(spec: Path, text: str) -> str:
    """``LINE:COL`` of the first ``text`` in ``spec``."""
    for i, line in enumerate(spec.read_text().splitlines(), 1):
        if text in line:
            return f"{i}:{line.index(text) + 1}"
    raise AssertionError(text)


def test_a_program_that_fails_its_check_is_removed_and_the_old_file_kept(tmp_path, capsys, monkeypatch):
    spec, target = SPECS / "mlp.rpn", tmp_path / "mlp.pt2"
    target.write_bytes(b"an earlier export")
    monkeypatch.setattr(export_write, "difference", lambda ours, theirs: float("inf"))
    code, out, err = _export(capsys, spec, "--random-init", "--out", target)
    assert code == 1 and out == "" and "Traceback" not in err
    assert err == (f"rpn2c: error: {spec}:{_line_col(spec, 'model mlp')}: model 'mlp' cannot be exported to pt2: "
                   "the written program differs from the module on inputs x[4, 30] (ArithmeticError: relative "
                   "difference inf from the module)\n")
    assert [p.name for p in tmp_path.iterdir()] == ["mlp.pt2"] and target.read_bytes() == b"an earlier export"


def test_a_dim_whose_dynamic_program_fails_at_another_size_is_exported_static(tmp_path, capsys, monkeypatch):
    """A shape guard naming input 0's axis 1 (T) at the other size: T static, B still dynamic, the reason printed."""
    real = export_write._runner

    def guarded(fmt, path):
        run = real(fmt, path)

        def check(inputs):
            if inputs[0].shape[1] != 8:
                raise AssertionError("Guard failed: args_0.size()[1] <= 8")
            return run(inputs)
        return check

    monkeypatch.setattr(export_write, "_runner", guarded)
    spec, target = ROOT / "examples" / "specs" / "swiglu.rpn", tmp_path / "s.pt2"
    code, out, err = _export(capsys, spec, "--random-init", "--out", target)
    assert code == 0, err
    assert "input x: sequence[B, T, 8] (dynamic B, fixed T=8)" in out
    assert ("static T=8: with B, T dynamic the written program fails on inputs x[5, 9, 8] (AssertionError: Guard "
            "failed: args_0.size()[1] <= 8)") in out
    assert "checked: equals the module on fresh random inputs (x[4, 8, 8]) and (x[5, 8, 8])" in out
    assert [p.name for p in tmp_path.iterdir()] == ["s.pt2"]
    torch.manual_seed(0)
    model = rpn2c.compile_file(spec).eval()
    x = torch.randn(7, 8, 8)
    torch.testing.assert_close(torch.export.load(target).module()(x), model(x), rtol=1e-5, atol=1e-5)


def test_a_trace_failure_is_located_at_the_node_and_leaves_no_file(tmp_path, capsys, monkeypatch):
    def broken(self, x, state=None, cell_state=None):
        raise RuntimeError("no trace today")

    monkeypatch.setattr(RecurrentModule, "forward", broken)
    spec = SPECS / "rnn.rpn"
    code, out, err = _export(capsys, spec, "--random-init", "--out", tmp_path / "r.pt2")
    assert code == 1 and out == "" and "Traceback" not in err
    assert err == (f"rpn2c: error: {spec}:{_line_col(spec, 'recurrent(e)')}: model 'rnn' cannot be exported to pt2: "
                   "torch.export cannot trace it (RuntimeError: no trace today)\n")
    assert list(tmp_path.iterdir()) == []


def test_a_conversion_failure_is_located_at_the_node_owning_the_nearest_parameter():
    """torch.onnx names the exported graph's node it could not translate; the error points at the spec node whose
    parameter feeds it most directly (here: the last head's weight and bias, read by the last linear)."""
    spec = SPECS / "mlp.rpn"
    model = rpn2c.compile_file(spec).eval()
    inputs, names = example_inputs(model.graph)
    program = export_write.trace(model, inputs, names, {"B"})
    last = [n.name for n in program.graph.nodes if n.op == "call_function" and "linear" in str(n.target)][-1]
    try:
        try:
            raise LookupError("No ONNX function found")
        except LookupError as inner:
            raise RuntimeError(f"Error when translating node %{last} : [num_users=1]") from inner
    except RuntimeError as exc:
        where = export_write.locate(exc, model, model.graph, program, "the model")
        assert export_write.reason(exc) == "LookupError: No ONNX function found"
    assert where == f"{spec}:{_line_col(spec, 'head(h2)')}"


def test_an_unwritable_target_is_an_error_not_a_traceback(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    code, out, err = _export(capsys, SPECS / "mlp.rpn", "--random-init", "--out", tmp_path / "file" / "m.pt2")
    assert code == 1 and out == "" and err.startswith(f"rpn2c: error: cannot write {tmp_path / 'file' / 'm.pt2'}: ")


def test_rrelu_exports_to_onnx_as_its_eval_form(tmp_path, capsys):
    """Found by the fuzz lanes: torch's eval RReLU still dispatches its random-noise operator, which ONNX cannot
    translate; the spec's eval RReLU is the leaky ReLU it equals, and exports."""
    pytest.importorskip("onnxruntime")
    spec = tmp_path / "r.rpn"
    spec.write_text("model m {\n  input x: sequence[B, T, 4]\n  y = rrelu(x, lower = 0.1, upper = 0.3)\n"
                    "  return y\n}\n", encoding="utf-8")
    assert main(["export", str(spec), "--random-init", "--format", "onnx", "--out", str(tmp_path / "r.onnx")]) == 0
    model = rpn2c.compile(spec.read_text()).eval()
    x = torch.randn(2, 5, 4)
    torch.testing.assert_close(model(x), torch.nn.functional.rrelu(x, 0.1, 0.3, training=False), rtol=0, atol=0)
    assert model.train()(x).shape == x.shape  # training keeps the random slopes


def test_edges_of_a_graph_over_features_are_made_up_within_the_features(tmp_path, capsys):
    """Found by the export lane: a graph ξ on the attribute axis indexes 3 features, and the export's made-up
    edge lists indexed 8 nodes, so the export's own check refused its inputs. Edge ids now stay below every width
    the model has, and the export checks at two sizes."""
    spec = tmp_path / "attr.rpn"
    spec.write_text("model m {\n  input x: sequence[B, T, 3]\n  input edges: edges[2, E]\n  y = head(x) {\n"
                    "    xi_attribute_post = pagerank_graph(edges = edges, iters = 2)\n    out = 1\n  }\n"
                    "  return y\n}\n", encoding="utf-8")
    graph = rpn2c.check(spec.read_text())
    for seed in range(3):
        (_, edges), _ = example_inputs(graph, {"E": 40}, seed=seed)
        assert int(edges.max()) < 3
    out = tmp_path / "attr.pt2"
    assert main(["export", str(spec), "--random-init", "--out", str(out)]) == 0, capsys.readouterr().err
    assert out.is_file() and "checked: equals the module" in capsys.readouterr().out


def test_edges_are_made_up_within_the_nodes_each_graph_runs_over(tmp_path, capsys):
    """Found by the export lane: a batched set of 3 items under a graph ξ got edge ids up to 8 (the default node
    count), and the export failed with an unlocated error from its own inputs. Each edge list's ids now stay below
    the axis of every graph ξ it feeds: 3 nodes here, 5 features for the second list."""
    spec = tmp_path / "set.rpn"
    spec.write_text("model m {\n  input x: set[B, 3, 5]\n  input edges: edges[2, E]\n  input feats: edges[2, F]\n"
                    "  y = head(x) {\n    xi_instance = chebyshev_graph(edges = edges, scale = false)\n    out = 2\n  }\n"
                    "  z = head(x) {\n    xi_attribute = pagerank_graph(edges = feats, iters = 2)\n    out = 2\n  }\n"
                    "  s = add(y, z)\n  return s\n}\n", encoding="utf-8")
    graph = rpn2c.check(spec.read_text())
    for seed in range(3):
        (_, edges, feats), _ = example_inputs(graph, {"E": 40, "F": 40}, seed=seed)
        assert int(edges.max()) == 2 and int(feats.max()) == 4
    out = tmp_path / "set.pt2"
    assert main(["export", str(spec), "--random-init", "--out", str(out)]) == 0, capsys.readouterr().err
    assert out.is_file() and "checked: equals the module" in capsys.readouterr().out
