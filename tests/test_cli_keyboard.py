"""The language at the keyboard: --param on every spec command, `rpn2c data`, a readable printed graph, an
`explain` whose header agrees with its rows, the MLP spec on shipped data, and block errors naming the use."""

from __future__ import annotations

import argparse
import glob
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rpn2c
from rpn2c.data import available, load
from rpn2c.data.registry import catalog
from rpn2c.passes import optimize
from rpn2c.runtime.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "specs" / "mlp.rpn"
SHIPPED = sorted(glob.glob(str(ROOT / "specs" / "*.rpn")) + glob.glob(str(ROOT / "specs" / "paper" / "*.rpn")))


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------------------------ --param
def _spec_commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: p for name, p in sub.choices.items()
            if any(a.dest == "spec" for a in p._actions if not a.option_strings)}


def test_every_command_that_reads_a_spec_takes_param():
    commands = _spec_commands()
    assert {"check", "graph", "explain", "show", "export", "train", "eval", "predict"} <= set(commands)
    for name, parser in commands.items():
        if name == "fmt":  # formats the text: no model is built
            continue
        assert any("--param" in a.option_strings for a in parser._actions), name


def test_param_changes_what_check_graph_and_explain_see(capsys):
    want = rpn2c.check_file(MLP, params={"hidden": 8, "features": 5})
    code, out, err = _run(capsys, "check", MLP, "--param", "hidden=8", "--param", "features=5", "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    assert got["params"] == want.param_count != rpn2c.check_file(MLP).param_count
    assert got["hash"] == want.content_hash()
    code, out, _ = _run(capsys, "graph", MLP, "--param", "features=13")
    assert code == 0 and "vector[B, 13]" in out and "vector[B, 30]" not in out
    code, out, _ = _run(capsys, "explain", MLP, "--param", "classes=7")
    assert code == 0 and re.search(r"y = head  vector\[B, 7\]", out)


def test_param_reaches_show_and_export(capsys, tmp_path):
    out_json = tmp_path / "h1.json"
    code, _, err = _run(capsys, "show", MLP, "--layer", "h1", "--view", "matrix", "--format", "json",
                        "--param", "features=5", "--param", "hidden=3", "--out", out_json)
    assert code == 0, err
    assert json.loads(out_json.read_text())["shape"] == [3, 5]
    code, out, err = _run(capsys, "export", MLP, "--random-init", "--param", "features=4", "--out",
                          tmp_path / "m.pt2")
    assert code == 0, err
    assert "input x: vector[B, 4] (dynamic B)" in out


def test_a_bad_param_is_a_located_error_or_a_usage_error(capsys):
    code, _, err = _run(capsys, "check", MLP, "--param", "hiden=3")
    assert code == 1 and "error[E0302]: 'mlp' has no parameter 'hiden'" in err and "did you mean 'hidden'" in err
    code, _, err = _run(capsys, "graph", MLP, "--param", "hidden")
    assert code == 2 and "--param hidden: expected NAME=VALUE" in err


# ------------------------------------------------------------------------------------------------ rpn2c data
def test_data_lists_every_built_in_set(capsys):
    code, out, _ = _run(capsys, "data")
    assert code == 0
    rows = out.split("\n\n")[0].splitlines()[2:]
    assert [r.split()[0] for r in rows] == list(available()) and len(rows) == 13
    assert re.search(r"^basic_motions\s+classification\s+sequence\[B, 100, 6\]\s+4 classes\s+sktime$", out, re.M)
    code, out, _ = _run(capsys, "data", "--format", "json")
    entries = json.loads(out)
    assert {e["name"]: e for e in entries}["sunspots"]["target_dim"] == 1


def test_data_through_the_installed_entry_point():
    proc = subprocess.run([sys.executable, "-m", "rpn2c", "data", "--format", "json"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert [e["name"] for e in json.loads(proc.stdout)] == list(available())


def test_the_listing_agrees_with_the_data_sets_it_lists():
    """Each entry's task, input type and classes (or target width) are those of the loaded data set."""
    checked = 0
    for e in catalog():
        try:
            ds = load(e["name"])
        except ImportError:  # an optional package this environment lacks
            continue
        assert (e["task"], e["input"]) == (ds.task, ds.input_spec), e["name"]
        assert e.get("classes", e.get("target_dim")) == (ds.num_classes or ds.target_dim), e["name"]
        checked += 1
    assert checked >= 11


# ------------------------------------------------------------------------------------------------ print(graph)
def test_a_printed_graph_is_the_check_table(capsys):
    graph = optimize(rpn2c.check(MLP.read_text()))
    text = str(graph)
    assert repr(graph) == text and "sources=" not in text and "\\n" not in text
    lines = text.splitlines()
    assert lines[0] == f"model mlp: {graph.param_count:,} parameters, hash {graph.content_hash()[:12]}"
    assert lines[1].split() == ["name", "kind", "output", "params", "recipe", "kernels"]
    assert lines[-1].split() == ["total", f"{graph.param_count:,}"]
    code, out, _ = _run(capsys, "check", MLP)
    assert code == 0 and out.splitlines()[1:] == lines[1:]  # the same table as `rpn2c check`


def test_notebook_forms_show_the_table_and_the_optimised_kernels():
    graph = optimize(rpn2c.check(MLP.read_text()))

    class Printer:  # IPython's pretty printer, as much of it as _repr_pretty_ uses
        text_ = ""

        def text(self, s):
            self.text_ += s

    p = Printer()
    graph._repr_pretty_(p, False)
    assert p.text_ == repr(graph) and re.search(r"^h1 .* linear$", p.text_, re.M)
    html = graph._repr_html_()
    assert "<svg" in html and "<pre>" in html and "h2" in html and "linear" in html


# ------------------------------------------------------------------------------------------------ explain
@pytest.mark.parametrize("path", SHIPPED, ids=[Path(p).name for p in SHIPPED])
def test_explain_header_counts_what_its_rows_show(path, capsys):
    code, out, err = _run(capsys, "explain", path)
    assert code == 0, err
    head = re.match(r"model \w+: (\d+) of (\d+) layers? rewritten, (\d+) rules? fired", out)
    assert head, out.splitlines()[0]
    rewritten, layers, fired = map(int, head.groups())
    assert len(re.findall(r"^  rewritten  ", out, re.M)) == rewritten
    assert len(re.findall(r"^\S+\.rpn:\d+:\d+: \S+ = ", out, re.M)) == layers
    rows = re.findall(r"(?: × (\d+) heads \[[^]]*\])?   defined at ", out)  # a row for identical heads counts each
    assert sum(int(n or 1) for n in rows) == fired
    for m in re.finditer(r"estimated: (\S+ \S+) → (\S+ \S+), (\S+ \S+) → (\S+ \S+) per sample", out):
        assert (m[1], m[3]) != (m[2], m[4]), m[0]  # a rule that changes nothing is not listed


def test_explain_counts_a_rule_with_no_effect_but_does_not_list_it(capsys):
    spec = ROOT / "specs" / "rnn_chain.rpn"
    graph = optimize(rpn2c.check_file(spec))
    idle = [d for n in graph.nodes() for d in n.decisions
            if d.cost is not None and (d.cost.flops_before, d.cost.bytes_before) == (d.cost.flops_after,
                                                                                     d.cost.bytes_after)]
    assert idle and {d.rule for d in idle} == {"project_first"}
    code, out, _ = _run(capsys, "explain", spec)
    assert f"(and {len(idle)} with no estimated effect, not shown: project_first)" in out.splitlines()[0]
    assert "project_first" not in "\n".join(out.splitlines()[1:])
    code, out, _ = _run(capsys, "explain", spec, "--format", "json")
    flags = [d["effect"] for n in json.loads(out)["nodes"] for d in n["decisions"] if d["rule"] == "project_first"]
    assert flags == [False] * len(idle)


def test_explain_shows_no_rewritten_term_for_a_layer_left_as_written(capsys, tmp_path):
    spec = tmp_path / "plain.rpn"
    spec.write_text('model m {\n  input x: sequence[B, T, 4]\n  y = pool_items(x, how = "mean")\n  return y\n}\n')
    code, out, _ = _run(capsys, "explain", spec)
    assert code == 0 and out.startswith("model m: 0 of 0 layers rewritten, 0 rules fired")
    assert "rewritten  " not in out


# ------------------------------------------------------------------------------------------------ mlp.rpn
def test_the_mlp_spec_trains_on_a_shipped_flat_data_set_as_it_is(capsys, tmp_path):
    code, out, err = _run(capsys, "train", MLP, "--data", "breast_cancer", "--epochs", "1", "--out", tmp_path / "r",
                          "--quiet")
    assert code == 0, err
    assert out.startswith("trained mlp (")


# ------------------------------------------------------------------------------------------------ block uses
BLOCK_TWICE = """block pool(d = 2) {
  input x
  p = compress(x) {
    kappa = patch_max(size = d)
  }
  return p
}
model m {
  input x: image[B, 1, 8, 8]
  a = pool(x, d = 2)
  b = pool(a, d = 8)
  return b
}
"""


def test_an_error_inside_a_block_used_twice_names_the_use(capsys, tmp_path):
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(BLOCK_TWICE, "two.rpn")
    (d,) = info.value.diagnostics
    assert (d.code, d.span.line) == ("E0402", 4)
    span, note = d.notes[-1]
    assert (span.line, span.col) == (11, 7) and note == "in this use of block 'pool' (d = 8)"
    assert all(s.line != 10 for s, _ in d.notes)  # the use that fits is not blamed
    spec = tmp_path / "two.rpn"
    spec.write_text(BLOCK_TWICE)
    code, _, err = _run(capsys, "check", spec)
    assert code == 1 and f"note: {spec}:11:7: in this use of block 'pool' (d = 8)" in err
    assert "  11 |   b = pool(a, d = 8)" in err


def test_nested_block_uses_each_get_a_note():
    text = BLOCK_TWICE.replace("model m {", "block twice(k = 2) {\n  input x\n  y = pool(x, d = k)\n  return y\n}\n"
                                            "model m {")
    text = text.replace("  a = pool(x, d = 2)\n  b = pool(a, d = 8)\n  return b",
                        "  a = twice(x)\n  b = twice(a, k = 8)\n  return b")
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(text)
    (d,) = info.value.diagnostics
    assert [n for _, n in d.notes[-2:]] == ["in this use of block 'pool' (d = k)",
                                            "in this use of block 'twice' (k = 8)"]
