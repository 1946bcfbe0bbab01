"""Start-up follows the work: importing the package, checking, formatting, explaining and drawing a spec, listing
the components and the data sets, ``rpn2c --help``, a refused ``train`` and the language server's first diagnostic
import neither torch nor ``torch._dynamo`` (importing torch alone costs seconds), nor an LSP library (the server speaks
JSON-RPC itself; ``lsprotocol.types`` alone is a third of a second). A command that builds and runs a model imports
torch but not ``torch._dynamo`` (seconds more), which only compiling and exporting need, nor scikit-learn and its
scipy and pandas to read a data file that scikit-learn ships.

Each case runs in a fresh interpreter (``sys.modules`` of this test process already holds torch) and reports which
of the heavy modules it loaded; the language server is driven over stdio with real LSP messages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "torch._dynamo", "pygls", "lsprotocol")  # the server needs no LSP library either
REPORT = "import sys; print(json.dumps([m for m in HEAVY if m in sys.modules]))"


def _python(code: str, *args: str, stdin: bytes | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", f"import json; HEAVY = {HEAVY!r}\n{code}", *args], input=stdin,
                          capture_output=True, cwd=cwd, env=env, timeout=120)


def _loaded(proc: subprocess.CompletedProcess) -> list[str]:
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def test_importing_the_package_and_checking_every_spec_and_registry_example_import_no_torch():
    """Every shape rule and parameter count works without torch: each shipped spec and each entry's example."""
    proc = _python("import pathlib, rpn2c, rpn2c.syntax, rpn2c.check, rpn2c.components, rpn2c.passes, rpn2c.ir\n"
                   "from rpn2c.components.registry import all_entries\n"
                   "specs = sorted(pathlib.Path('specs').rglob('*.rpn'))\n"
                   "assert len(specs) >= 5 and all(rpn2c.check_file(p).param_count > 0 for p in specs)\n"
                   "examples = [rpn2c.check(e.example, e.name) for e in all_entries()]\n"
                   "assert len(examples) > 200\n" + REPORT)
    assert _loaded(proc) == []


def test_the_public_names_that_need_torch_still_resolve():
    proc = _python("import rpn2c\nassert callable(rpn2c.from_torch) and rpn2c.TorchSpec.__name__ == 'TorchSpec'\n"
                   "assert 'from_torch' in dir(rpn2c)\n"
                   "from rpn2c.components.base import XiModule\nimport torch\nassert issubclass(XiModule, torch.nn.Module)\n"
                   + REPORT)
    assert "torch" in _loaded(proc)


def test_a_built_model_still_runs():
    """The implementation classes are imported when a model is built: compiling and running works as before."""
    spec = "model m {\n  input x: vector[B, 4]\n  y = head(x) {\n    kappa = chebyshev\n    out = 3\n  }\n  return y\n}\n"
    proc = _python(f"import rpn2c, torch\nm = rpn2c.compile({spec!r})\n"
                   "assert m(torch.randn(2, 4)).shape == (2, 3)\n" + REPORT)
    assert "torch" in _loaded(proc)


@pytest.mark.parametrize("argv", [["--help"], ["check", "specs/cnn.rpn"], ["fmt", "specs/cnn.rpn"],
                                  ["check", "--format", "json", "specs/mlp.rpn"], ["components"]])
def test_cli_commands_that_need_no_tensors_import_no_torch(argv):
    proc = _python("import sys\nfrom rpn2c.runtime.cli import main\ntry:\n    code = main(sys.argv[1:])\n"
                   "except SystemExit as exc:\n    code = exc.code\nassert code == 0, code\n" + REPORT, *argv)
    assert _loaded(proc) == []


def _in_turn(commands: list[list[str]], watched: tuple[str, ...]) -> list[list[str]]:
    """Run the ``rpn2c`` commands one after the other in one fresh interpreter: after each, which of the
    ``watched`` modules are loaded (what a command loads stays loaded, so a list that must stay empty is checked
    for every command at the price of one interpreter)."""
    code = ("import contextlib, io, sys\nfrom rpn2c.runtime.cli import main\n"
            f"for argv in {commands!r}:\n    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        assert main(argv) == 0, argv\n"
            f"    print('loaded:', json.dumps([m for m in {watched!r} if m in sys.modules]))\n")
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr.decode()
    return [json.loads(line.split(":", 1)[1]) for line in proc.stdout.decode().splitlines()
            if line.startswith("loaded:")]


def test_explaining_drawing_and_listing_components_and_data_sets_import_no_torch():
    commands = [["data"], ["data", "--format", "json"], ["components", "chebyshev"], ["explain", "specs/gcn.rpn"],
                ["explain", "--format", "json", "specs/rnn.rpn"], ["graph", "specs/cnn.rpn"],
                ["graph", "--format", "mermaid", "specs/gcn.rpn"], ["graph", "--format", "svg", "specs/rnn.rpn"]]
    assert _in_turn(commands, HEAVY) == [[]] * len(commands)


def test_help_the_data_sets_and_formatting_import_neither_the_checker_nor_arrays():
    """What only reads text needs no hyper-parameter schemas (pydantic), arrays or tensors."""
    commands = [["--help"], ["data"], ["fmt", "specs/cnn.rpn"]]
    assert _in_turn(commands, ("pydantic", "numpy", "torch")) == [[]] * 3


def test_a_refused_training_run_imports_no_torch(tmp_path):
    """``rpn2c train`` into a folder holding another run refuses before building anything."""
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    proc = _python("import sys\nfrom rpn2c.runtime.cli import main\nassert main(sys.argv[1:]) == 2\n" + REPORT,
                   "train", "specs/mlp.rpn", "--data", "iris", "--out", str(tmp_path))
    assert "already holds" in proc.stderr.decode()
    assert _loaded(proc) == []


# a model built and run needs torch, not its compiler nor the scientific stack a data file was once read through
RUNTIME = ("torch", "torch._dynamo", "torch._inductor", "sympy", "sklearn", "scipy", "pandas")


def test_models_built_and_trained_eagerly_never_import_the_compiler():
    """A fused recurrent kernel (compiled, a custom op), a graph ξ's cached SpMM (a custom op, run eagerly too) and a
    convolution: forward and backward in training mode, forward in evaluation mode."""
    code = ("import torch, rpn2c\nfrom rpn2c.runtime.export_cli import example_inputs\n"
            "for spec in ('specs/rnn.rpn', 'specs/gcn.rpn', 'specs/cnn.rpn'):\n"
            "    model = rpn2c.compile_file(spec)\n    x, _ = example_inputs(model.graph)\n"
            "    model(*x).sum().backward()\n    with torch.no_grad():\n        model.eval()(*x)\n"
            f"print(json.dumps([m for m in {RUNTIME!r} if m in sys.modules]))\n")
    assert _loaded(_python("import sys\n" + code)) == ["torch"]


def test_a_manifold_compression_built_and_run_eagerly_never_imports_the_compiler():
    """t-SNE and Isomap κ (scikit-learn on the host) are kept out of dynamo's tracing only once dynamo is imported:
    building and running them imports torch and scikit-learn, not ``torch._dynamo``."""
    spec = ("model m {\n  input x: vector[B, 6]\n  y = head(x) {\n    kappa = KAPPA\n    psi = eye\n  }\n"
            "  return y\n}\n")
    code = ("import torch, rpn2c\n"
            "for kappa in ('tsne(k = 2)', 'isomap(k = 2)'):\n"
            f"    model = rpn2c.compile({spec!r}.replace('KAPPA', kappa))\n"
            "    assert torch.isfinite(model(torch.randn(12, 6))).all()\n"
            f"print(json.dumps([m for m in {RUNTIME!r} if m in sys.modules]))\n")
    assert "torch._dynamo" not in _loaded(_python("import sys\n" + code))


def test_a_manifold_compression_compiled_breaks_the_graph_around_scikit_learn():
    """Once dynamo is imported the host embedding is ``torch.compiler.disable``d: torch.compile runs it eagerly (a
    graph break, not a trace of scikit-learn) and gives the eager output."""
    import torch

    from rpn2c.functional.compression_modules import ManifoldCompression

    module = ManifoldCompression(2, method="isomap")
    x = torch.randn(10, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    compiled = torch.compile(module, backend="eager")
    torch.testing.assert_close(compiled(x), module(x))


def test_the_recurrent_kernels_constant_mark_is_the_one_dynamo_sets():
    """``rnn_op`` marks its trace-time constants itself: ``torch.compiler.assume_constant_result`` would import
    dynamo to set the same attribute."""
    import torch

    from rpn2c.functional import rnn_op

    assert vars(rnn_op._constant_result(lambda: 0)) == vars(torch.compiler.assume_constant_result(lambda: 0))
    assert all(vars(f) == {"_dynamo_marked_constant": True} for f in (rnn_op.exporting, rnn_op._onednn_enabled))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """One epoch of ``specs/mlp.rpn`` on breast_cancer (its data file read the way every run reads it)."""
    from rpn2c.runtime.cli import main

    out = tmp_path_factory.mktemp("run")
    assert main(["train", str(ROOT / "specs" / "mlp.rpn"), "--data", "breast_cancer", "--epochs", "1",
                 "--out", str(out), "--quiet"]) == 0
    return out / "best.pt"


def test_evaluating_predicting_and_showing_a_checkpoint_import_torch_and_nothing_of_the_compiler(checkpoint,
                                                                                                  tmp_path):
    ckpt, spec = str(checkpoint), "specs/mlp.rpn"
    commands = [["eval", spec, ckpt],
                ["predict", spec, ckpt, "--data", "breast_cancer", "--out", str(tmp_path / "p.csv")],
                ["show", spec, "--checkpoint", ckpt, "--layer", "y", "--out", str(tmp_path / "y.png")]]
    assert _in_turn(commands, RUNTIME) == [["torch"]] * 3


# what `rpn2c eval` may import beyond torch: the checker's libraries, the data catalog, and of rpn2c only the
# stages a model's check, build and evaluation run (no export, editor, training-settings or drawing module)
EVAL_NEVER = ("torch._dynamo", "rpn2c.runtime.export_write", "rpn2c.runtime.export_onnx", "rpn2c.runtime.lsp",
              "rpn2c.runtime.lsp_wire", "rpn2c.runtime.lsp_worker", "rpn2c.train.config", "rpn2c.runtime.report",
              "rpn2c.runtime.dimension_fit", "rpn2c.ir.picture", "matplotlib", "onnx", "sklearn", "networkx")


def test_evaluating_a_checkpoint_imports_only_what_the_evaluation_runs(checkpoint):
    """Every module ``eval`` imports that ``import torch`` does not is a package of the IR (pydantic), the parser
    (lark), numpy or the standard library, or a module of rpn2c's stages that evaluation runs; not networkx (the
    IR's graph is :class:`rpn2c.ir.digraph.DiGraph`: importing networkx runs its whole package, about 0.2 s)."""
    code = ("import sys\nimport torch\nbefore = set(sys.modules)\nfrom rpn2c.runtime.cli import main\n"
            f"assert main(['eval', 'specs/mlp.rpn', {str(checkpoint)!r}]) == 0\n"
            "print(json.dumps(sorted(set(sys.modules) - before)))\n")
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr.decode()
    new = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert not [m for m in new if m.startswith(EVAL_NEVER)]
    third_party = {m.split(".")[0] for m in new if not m.startswith("_")} - set(sys.stdlib_module_names) - {
        "rpn2c", "torch", "cython_runtime"}  # torch's own submodules it loads on first use (not its compiler)
    assert third_party <= {"pydantic", "pydantic_core", "annotated_types", "typing_inspection",
                           "typing_extensions", "lark", "regex", "interegular", "numpy", "yaml", "atomicwrites"}
    assert {"pydantic", "lark"} <= third_party


def _frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return f"Content-Length: {len(body)}\r\n\r\n".encode() + body


# the server, with a hook reporting the heavy modules it loaded once it has exited
SERVER = "import atexit, sys\natexit.register(lambda: open(sys.argv[1], 'w').write(json.dumps(\n" \
         "    [m for m in HEAVY if m in sys.modules])))\nfrom rpn2c.runtime.cli import main\nsys.exit(main(['lsp']))\n"


def test_the_language_server_publishes_its_first_diagnostics_without_torch(tmp_path):
    spec = tmp_path / "bad.rpn"
    head, _, tail = (ROOT / "specs" / "cnn.rpn").read_text(encoding="utf-8").rpartition("\n  return ")
    text = f"{head}\n  return nowhere_{tail}"  # an unknown name: the checker, not only the parser, has to run
    uri = spec.as_uri()
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}}},
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        {"jsonrpc": "2.0", "method": "textDocument/didOpen",
         "params": {"textDocument": {"uri": uri, "languageId": "rpn", "version": 1, "text": text}}},
    ]
    report = tmp_path / "loaded.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen([sys.executable, "-c", f"import json; HEAVY = {HEAVY!r}\n{SERVER}", str(report)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, env=env)
    try:
        server.stdin.write(b"".join(_frame(m) for m in messages))
        server.stdin.flush()
        diagnostics = None
        while diagnostics is None:  # read frames until the diagnostics of the opened file arrive
            length = 0
            while (line := server.stdout.readline().strip()):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            message = json.loads(server.stdout.read(length))
            if message.get("method") == "textDocument/publishDiagnostics" and message["params"]["uri"] == uri:
                diagnostics = message["params"]["diagnostics"]
        server.stdin.write(_frame({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
                           + _frame({"jsonrpc": "2.0", "method": "exit"}))
        server.stdin.flush()
        server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
    assert diagnostics and any("nowhere_" in d["message"] for d in diagnostics)  # a real check ran
    assert json.loads(report.read_text()) == []


def test_a_model_command_pauses_the_collector_until_its_model_is_built(checkpoint, monkeypatch):
    """Each full collection during start-up walks every object torch loaded (one landed in networkx's gml module,
    0.13 s of ``rpn2c eval``'s imports): the collector is paused from the command's start to its model built,
    then resumes with start-up's objects frozen, and is as it was when the command ends."""
    import gc

    from rpn2c.runtime import workflow
    from rpn2c.runtime.cli import main
    from rpn2c.train import loop

    seen = {}
    checked, evaluate = workflow._graph, loop.evaluate

    def graph(*a, **k):
        seen["checking"] = gc.isenabled()
        return checked(*a, **k)

    def evaluating(*a, **k):
        seen["evaluating"] = gc.isenabled()
        return evaluate(*a, **k)

    monkeypatch.setattr(workflow, "_graph", graph)
    monkeypatch.setattr(loop, "evaluate", evaluating)
    assert gc.isenabled()
    assert main(["eval", str(ROOT / "specs" / "mlp.rpn"), str(checkpoint)]) == 0
    assert seen == {"checking": False, "evaluating": True} and gc.isenabled() and gc.get_freeze_count() > 0
