"""The command line: check tables and errors, graph exports, fmt, components, exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rpn2c.runtime.cli import main

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "specs").glob("*.rpn"))


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_check_prints_a_table_for_every_shipped_spec(capsys, path):
    code, out, err = run(capsys, "check", str(path))
    assert code == 0, err
    assert out.startswith(f"ok: {path}")
    assert "total" in out and "params" in out


def test_check_reports_every_error_located(capsys, tmp_path):
    bad = tmp_path / "bad.rpn"
    bad.write_text("model m {\n  input x: vector[B, 4]\n  y = head(x) { kappa = chebishev(d = 2)  out = 3 }\n"
                   "  z = head(q) { out = 2 }\n  return y\n}\n")
    code, out, err = run(capsys, "check", str(bad))
    assert code == 1 and out == ""
    assert f"{bad}:3:25: error[E0201]: unknown expansion or compression component 'chebishev'" in err
    assert "did you mean 'chebyshev'?" in err
    assert f"{bad}:4:12: error[E0202]: unknown value 'q'" in err
    assert "^^^^^^^^^" in err and "2 errors found" in err
    assert "Traceback" not in err


def test_usage_errors_exit_2(capsys, tmp_path):
    assert run(capsys, "check", str(tmp_path / "missing.rpn"))[0] == 2
    assert run(capsys, "frobnicate")[0] == 2


@pytest.mark.parametrize("fmt", ["dot", "mermaid", "json"])
def test_graph_exports(capsys, fmt):
    code, out, _ = run(capsys, "graph", str(ROOT / "specs" / "gcn.rpn"), "--format", fmt)
    assert code == 0
    if fmt == "json":
        data = json.loads(out)
        assert {n["id"] for n in data["nodes"]} == {"x", "edges", "h", "y"}
    elif fmt == "dot":
        assert out.startswith('digraph "gcn"') and '"x" -> "h"' in out
    else:
        assert out.startswith("flowchart TD") and "n_x -->" in out


def test_fmt_is_idempotent_and_check_mode(capsys, tmp_path):
    messy = tmp_path / "m.rpn"
    messy.write_text("# c\nmodel m{input x:vector[B,4] y=head(x){out=2} return y}\n")
    code, out, _ = run(capsys, "fmt", str(messy))
    assert code == 0
    assert out == "# c\nmodel m {\n  input x: vector[B, 4]\n  y = head(x) {\n    out = 2\n  }\n  return y\n}\n"
    assert run(capsys, "fmt", "--check", str(messy))[0] == 1
    assert run(capsys, "fmt", "--write", str(messy))[0] == 0
    assert messy.read_text() == out
    assert run(capsys, "fmt", "--check", str(messy))[0] == 0


def test_components_listing(capsys):
    code, out, _ = run(capsys, "components", "--format", "json")
    data = json.loads(out)
    names = {(c["family"], c["name"]) for c in data}
    assert ("interdependence", "grid_patch") in names and ("reconciliation", "lorr") in names
    lorr = next(c for c in data if c["name"] == "lorr")
    assert lorr["hyperparameters"][0] == {"name": "r", "type": "int", "default": 2, "required": False}


def test_python_dash_m_runs_the_cli():
    proc = subprocess.run([sys.executable, "-m", "rpn2c", "check", str(ROOT / "specs" / "mlp.rpn")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "ok:" in proc.stdout
