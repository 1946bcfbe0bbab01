"""Start-up stays fast: importing the package, checking and formatting a spec, ``rpn2c --help`` and the language
server's first diagnostic import neither torch nor ``torch._dynamo`` (importing torch alone costs seconds), nor an LSP
library (the server speaks JSON-RPC itself; ``lsprotocol.types`` alone is a third of a second).

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
