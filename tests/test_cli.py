"""The command line: check tables and errors, graph exports, fmt, components, exit codes."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


# ------------------------------------------------------------------------------------------------ what outputs say
@pytest.mark.parametrize("fmt, what", [("svg", "SVG picture"), ("png", "PNG picture"), ("dot", "Graphviz DOT"),
                                       ("mermaid", "Mermaid flowchart"), ("json", "IR graph as JSON")])
def test_graph_out_says_what_it_wrote(capsys, tmp_path, fmt, what):
    out = tmp_path / f"g.{fmt}"
    code, stdout, err = run(capsys, "graph", str(ROOT / "specs" / "gcn.rpn"), "--format", fmt, "--out", str(out))
    assert code == 0 and stdout == ""
    assert err == f"wrote {out}: {what} of model gcn, {out.stat().st_size:,} bytes\n"
    if fmt != "png":  # the file holds what standard output would have
        assert out.read_text(encoding="utf-8") == run(capsys, "graph", str(ROOT / "specs" / "gcn.rpn"), "--format",
                                                      fmt)[1]


CROSS = """model m {
  input x: sequence[B, T, 4]
  input c: sequence[B, S, 4]
  y = head(x, context = c) { xi_instance = attention(rank = 2) out = 4 }
  z = sub(y, x)
  return z
}
"""


@pytest.mark.parametrize("fmt, edge", [("mermaid", r'-->\|"([^"]*)"\|'), ("dot", r'-> "[^"]*" \[label="([^"]*)"\]')])
def test_graph_edges_are_labelled_by_named_roles_and_types_only(capsys, tmp_path, fmt, edge):
    spec = tmp_path / "m.rpn"
    spec.write_text(CROSS)
    code, out, _ = run(capsys, "graph", str(spec), "--format", fmt)
    labels = sorted(re.findall(edge, out))
    if fmt == "mermaid":
        labels = [t.replace("#91;", "[").replace("#93;", "]") for t in labels]
    assert code == 0 and labels == ["context: sequence[B, S, 4]", "sequence[B, T, 4]", "sequence[B, T, 4]",
                                    "sequence[B, T, 4]"]  # x → y, x → z (a − b's b), y → z: no 'arg1:', no 'x:'


def test_check_wraps_a_long_recipe_between_its_parts_never_inside_a_call(capsys):
    code, out, _ = run(capsys, "check", str(ROOT / "specs" / "transformer.rpn"))
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("y.attn "))
    start = lines[1].index("recipe")
    recipe = " ".join(line[start:].split("  ")[0].strip() for line in lines[at:at + 2])
    assert code == 0 and recipe == ("4 heads: ξ_instance=low_rank_bilinear(bias=True, rank=8); "
                                    "fusion=concat_linear(out=32); π=identity")
    assert lines[at + 1][:start].strip() == ""  # a continuation line: the other cells are blank
    for line in lines[2:]:  # every recipe line closes the calls it opens
        cell = line[start:].split("  ")[0]
        assert cell.count("(") == cell.count(")"), line


WORD = st.from_regex(r"[a-zξκ_=;]{1,12}", fullmatch=True)
CALL = st.builds(lambda f, args: f"{f}({', '.join(args)})", WORD, st.lists(WORD, min_size=1, max_size=4))


@given(st.lists(st.one_of(WORD, CALL), min_size=1, max_size=12), st.integers(8, 60))
def test_recipe_lines_are_whole_parts_within_the_width(parts, width):
    """A recipe wraps between its parts (words and calls), each line within the width unless one part is longer."""
    from rpn2c.ir.table import wrap_outside_calls

    lines = wrap_outside_calls(" ".join(parts), width)
    rest = list(parts)
    for line in lines:  # each line is a run of whole parts
        k = next(k for k in range(1, len(rest) + 1) if " ".join(rest[:k]) == line)
        assert len(line) <= width or k == 1
        if k < len(rest):  # and the next part did not fit
            assert len(line) + 1 + len(rest[k]) > width
        rest = rest[k:]
    assert rest == []


def test_explain_shows_identical_heads_once_and_the_kappa_a_kernel_absorbed(capsys, tmp_path):
    spec = tmp_path / "m.rpn"
    spec.write_text("model m {\n  input g: image[B, 3, 8, 8]\n  c = head(g) {\n    kappa = chebyshev(d = 2)\n"
                    "    xi_attribute = grid_patch(size = 3, pad = 1)\n    out = 4\n  }\n  return c\n}\n")
    code, out, _ = run(capsys, "explain", str(spec))
    assert code == 0 and "  rewritten  conv[tied; κ=chebyshev](input(g))" in out
    code, out, _ = run(capsys, "explain", str(ROOT / "specs" / "transformer.rpn"))
    # packed attention heads run as one kernel on the layer input: the heads' terms, which do not run, are not shown
    assert "fuse_heads[concat_linear](4 × bias[tied](" in out and "fused_sdpa[concat_linear; 4 heads](input(x))" in out
    heads = tmp_path / "h.rpn"
    heads.write_text("model h {\n  input x: sequence[B, 5, 4]\n  y = head(x) {\n    heads = 4\n    kappa = chebyshev(d = 3)"
                     "\n    xi_instance = chain(hops = 2)\n    out = 2\n    fusion = concat\n  }\n  return y\n}\n")
    code, out, _ = run(capsys, "explain", str(heads))
    assert "  order      project_first × 4 heads [h0, h1, h2, h3]   defined at" in out
    assert "[head h1]" not in out
    code, out, _ = run(capsys, "explain", str(heads), "--format", "json")
    node = json.loads(out)["nodes"][0]  # the record for tools keeps every head
    assert node["rewritten"].count("xi_kernel[chain]") == 4
    assert [d["head"] for d in node["decisions"] if d["rule"] == "project_first"] == ["h0", "h1", "h2", "h3"]


@pytest.mark.parametrize("argv", [["graph", "{spec}", "--format", "svg", "--out", "{out}"],
                                  ["show", "{spec}", "--layer", "c1", "--out", "{out}"]])
def test_an_out_path_that_cannot_be_written_is_a_usage_error(capsys, tmp_path, argv):
    """--out under a path that is a file: a usage error naming the path, never a traceback."""
    (tmp_path / "f").write_text("")
    spec, out = ROOT / "specs" / "cnn.rpn", tmp_path / "f" / "x.png"
    code, _, err = run(capsys, *[a.format(spec=spec, out=out) for a in argv])
    assert code == 2 and err.startswith("rpn2c: error: cannot write ") and "Traceback" not in err
    assert str(tmp_path / "f") in err and (tmp_path / "f").is_file()


def test_lsp_started_at_a_terminal_says_it_waits_for_an_editor(capsys, monkeypatch):
    """``rpn2c lsp`` typed at a terminal would wait silently: it says what it is waiting for (and still serves)."""
    import io

    class Terminal(io.TextIOWrapper):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdin", Terminal(io.BytesIO(b"")))
    code, out, err = run(capsys, "lsp")
    assert code == 0 and out == ""
    assert err.startswith("rpn2c lsp: the language server reads LSP messages on standard input from an editor")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    code, _, err = run(capsys, "lsp")
    assert code == 0 and err == ""
