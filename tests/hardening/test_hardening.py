"""Hostile and careless specs end in located errors (file:line:col, a stable code, exit 1), within budgets.

Each test pins the exact code and position; the spec corpus (tests/spec_corpus/) holds the text-only cases, these
the ones that need a file system (symlinks, FIFOs, devices), standard input, the CLI or a tampered checkpoint.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import sys
from pathlib import Path

import pytest
import torch

import rpn2c
from rpn2c.check.budget import Limits, parse_size
from rpn2c.runtime.cli import main

SPEC = "model m {\n  input x: vector[B, 4]\n  y = head(x) { out = 2 }\n  return y\n}\n"


def _importing(path: str) -> str:
    return f'import "{path}" as lib\n' + SPEC


def _codes(exc: rpn2c.SpecError) -> list[tuple[str, int, int]]:
    return [(d.code, d.span.line, d.span.col) for d in exc.diagnostics]


def _check(tmp_path: Path, text: str | bytes, root: Path | None = None) -> list[tuple[str, int, int]]:
    main_file = tmp_path / "main.rpn"
    main_file.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check_file(main_file, root=root)
    for d in info.value.diagnostics:
        assert d.span.line >= 1 and d.span.col >= 1
    return _codes(info.value)


# ------------------------------------------------------------------------------------------------ file system
def test_symlink_loop(tmp_path):
    (tmp_path / "loop.rpn").symlink_to(tmp_path / "loop.rpn")
    assert _check(tmp_path, _importing("loop.rpn")) == [("E0512", 1, 1)]


def test_symlink_out_of_the_root_is_resolved_first(tmp_path):
    outside = tmp_path / "outside.rpn"
    outside.write_text("block b {\n  input x\n  return x\n}\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "inside.rpn").symlink_to(outside)
    assert _check(project, _importing("inside.rpn")) == [("E0502", 1, 1)]


def test_device_behind_a_symlink_is_never_opened(tmp_path):
    (tmp_path / "zero.rpn").symlink_to("/dev/zero")
    assert _check(tmp_path, _importing("zero.rpn")) == [("E0502", 1, 1)]  # outside the root once resolved
    # with the whole file system as the root, the device is inside it and refused as a special file
    assert _check(tmp_path, _importing("zero.rpn"), root=Path("/")) == [("E0514", 1, 1)]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe.rpn")  # opening it for reading would block forever
    assert _check(tmp_path, _importing("pipe.rpn")) == [("E0514", 1, 1)]
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check_file(tmp_path / "pipe.rpn")
    assert _codes(info.value) == [("E0514", 1, 1)]


def test_directory_nul_and_overlong_paths(tmp_path):
    (tmp_path / "sub").mkdir()
    assert _check(tmp_path, _importing("sub")) == [("E0513", 1, 1)]
    assert _check(tmp_path, _importing("a\x00.rpn")) == [("E0511", 1, 1)]
    assert _check(tmp_path, _importing("a" * 300 + ".rpn")) == [("E0512", 1, 1)]  # the file system's limit
    assert _check(tmp_path, _importing("a/" * 600 + "x.rpn")) == [("E0510", 1, 1)]  # ours, before it


def test_undecodable_import_is_located_in_the_imported_file(tmp_path):
    (tmp_path / "lib.rpn").write_bytes(b"block b {\n  input x # \xff\n  return x\n}\n")
    main_file = tmp_path / "main.rpn"
    main_file.write_text(_importing("lib.rpn"))
    with pytest.raises(rpn2c.SpecSyntaxError) as info:
        rpn2c.check_file(main_file)
    (d,) = info.value.diagnostics
    assert (d.code, d.span.line, d.span.col) == ("E0104", 2, 13) and d.span.file.endswith("/lib.rpn")
    assert "0xff" in d.message


def test_bytes_are_decoded_with_located_errors():
    with pytest.raises(rpn2c.SpecSyntaxError) as info:
        rpn2c.check(b"model m {\n  input x: vector[B, 4]\n  y = relu(x) \xc3(\n  return y\n}\n")
    assert _codes(info.value) == [("E0104", 3, 15)]


# ------------------------------------------------------------------------------------------------ parser bounds
def test_nesting_far_beyond_the_bound_is_one_located_error():
    deep = " + ".join(["1"] * 20_000)  # lark parses this without recursion; the transformer would not
    with pytest.raises(rpn2c.SpecSyntaxError) as info:
        rpn2c.check(f"model m(w = {deep}) {{\n  input x: vector[B, 4]\n  y = relu(x)\n  return y\n}}\n")
    assert _codes(info.value) == [("E0106", 1, 13)]


def test_source_size_bound():
    text = SPEC + "#" * 1_000_001
    with pytest.raises(rpn2c.SpecSyntaxError) as info:
        rpn2c.check(text)
    assert info.value.codes == ["E0107"]


# ------------------------------------------------------------------------------------------------ budgets
BIG = "model m {\n  input x: vector[B, 100000]\n  y = head(x) { out = 160000 }\n  return y\n}\n"
IMAGE = "model m {\n  input x: image[B, 3, 100000, 100000]\n  y = relu(x)\n  return y\n}\n"


def test_default_budgets_refuse_with_node_and_estimate():
    with pytest.raises(rpn2c.SpecResourceError) as info:
        rpn2c.check(BIG)
    (d,) = info.value.diagnostics
    assert (d.code, d.span.line, d.span.col) == ("E0601", 3, 7)
    assert "'y'" in d.message and "16,000,160,000" in d.message and "--max-params" in d.suggestion
    with pytest.raises(rpn2c.SpecResourceError) as info:
        rpn2c.check(IMAGE)
    assert _codes(info.value) == [("E0602", 2, 3)]
    assert "112 GiB per sample" in info.value.diagnostics[0].message


def test_budgets_are_raised_by_keyword_and_by_the_cli(tmp_path, capsys):
    assert rpn2c.check(BIG, limits={"max_params": 2 * 10**10}).param_count == 16_000_160_000
    assert rpn2c.check(IMAGE, limits=Limits(max_memory=300 * 2**30)).outputs == ["y"]
    spec = tmp_path / "big.rpn"
    spec.write_text(BIG)
    assert main(["check", str(spec)]) == 1
    assert main(["check", str(spec), "--max-params", "2e10"]) == 0
    spec.write_text(IMAGE)
    assert main(["check", str(spec), "--max-memory", "250GiB"]) == 0
    assert main(["check", str(spec), "--max-memory", "200GiB"]) == 1
    assert "E0602" in capsys.readouterr().err
    with pytest.raises(TypeError, match="max_parms"):
        rpn2c.check(SPEC, limits={"max_parms": 1})


def test_parse_size():
    assert parse_size("24GB") == 24 * 10**9 and parse_size("4GiB") == 4 * 2**30 and parse_size("2e9") == 2 * 10**9
    with pytest.raises(ValueError):
        parse_size("lots")


@pytest.mark.parametrize("setting, code, where", [
    ("heads = 1000000000", "E0603", (4, 11)),
    ("channels = 1000000000", "E0603", (4, 14)),
])
def test_check_work_does_not_depend_on_values(setting, code, where):
    """heads/channels/repeat of 10⁹ are refused before anything is expanded (the check stays instant)."""
    text = f"model m {{\n  input x: sequence[B, T, 8]\n  y = head(x) {{\n  {setting}\n    out = 2\n  }}\n  return y\n}}\n"
    with pytest.raises(rpn2c.SpecResourceError) as info:
        rpn2c.check(text)
    assert _codes(info.value) == [(code, *where)]


def test_repeat_is_charged_before_expansion():
    block = "block b {\n  input x\n  y = head(x) { out = 8 }\n  return y\n}\n"
    text = block + "model m {\n  input x: vector[B, 8]\n  y = repeat(n) b(x)\n  return y\n}\n"
    with pytest.raises(rpn2c.SpecResourceError) as info:
        rpn2c.check(text.replace("repeat(n)", "repeat(1000000000)"))
    assert _codes(info.value) == [("E0603", 8, 14)]
    assert len(rpn2c.check(text.replace("repeat(n)", "repeat(50)")).nodes()) == 51


# ------------------------------------------------------------------------------------------------ checks => runs
def test_heads_with_different_edge_lists_are_each_heads_own():
    """A layer whose heads name different edge lists equals the two heads built alone (concatenated)."""
    layer = Path(__file__).parents[1] / "spec_corpus" / "ok" / "heads_different_edges.rpn"
    torch.manual_seed(0)
    x, e1, e2 = torch.randn(5, 4, dtype=torch.float64), torch.randint(0, 5, (2, 9)), torch.randint(0, 5, (2, 4))
    for reference in (False, True):
        both = rpn2c.compile_file(layer, reference=reference).double()
        alone = []
        for name, edges, norm in (("a", e1, ""), ("b", e2, ', norm = "row"')):
            one = rpn2c.compile("model m {\n  input x: nodes[N, 4]\n  input e: edges[2, E]\n  y = head(x) {\n"
                                f"    xi_instance = graph(edges = e{norm})\n    out = 3\n  }}\n  return y\n}}\n",
                                reference=reference).double()
            one.load_state_dict({k.replace("y.", ""): v for k, v in both.state_dict().items()
                                 if k.startswith(f"y.heads.{name}.")} | {}, strict=False)
            one.y.psi.weight.data.copy_(both.y.heads[name].psi.weight)
            one.y.bias.data.copy_(both.y.heads[name].bias)
            alone.append(one(x, edges))
        torch.testing.assert_close(both(x, e1, e2), torch.cat(alone, -1))


def test_generated_specs_that_check_compile_and_run():
    """The fuzz harness's property on a small budget: every input ends in success or a located SpecError, and a
    spec that checks compiles and runs (python -m rpn2c.runtime.fuzz runs it at scale)."""
    from rpn2c.runtime.fuzz import run_range

    report = run_range(0, 120, time_limit=20.0)
    assert report.inputs == 120 and not report.failures, json.dumps(report.to_json()["failure_kinds"], indent=1)
    assert report.outcomes["ok"] >= 15  # the generators reach compile and forward, not only errors


@pytest.mark.slow
def test_fuzz_large_run():
    """The recorded run's property at 20,000 inputs on two processes (docs/reliability.md records 100,000)."""
    from rpn2c.runtime.fuzz import fuzz

    report = fuzz(20_000, workers=2, start=3_000_000)
    assert report.inputs == 20_000 and not report.failures, json.dumps(report.to_json()["failure_kinds"], indent=1)


# ------------------------------------------------------------------------------------------------ CLI
def test_check_json_prints_diagnostics_on_errors(tmp_path, capsys):
    spec = tmp_path / "bad.rpn"
    spec.write_bytes(b"model m {\n  input x: vector[B, 4]\n  y = head(x) { out = zz }\n  return y\n}\n")
    assert main(["check", "--format", "json", str(spec)]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False
    (d,) = data["diagnostics"]
    assert {k: d[k] for k in ("code", "file", "line", "col", "end")} == {
        "code": "E0202", "file": str(spec), "line": 3, "col": 23, "end": {"line": 3, "col": 25}}
    assert set(d) >= {"message", "help"}


def test_check_reads_standard_input(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(SPEC.encode())))
    assert main(["check", "-"]) == 0
    assert capsys.readouterr().out.startswith("ok: -: model m, 10 parameters")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"model m {\n  input x: vector[B, 4] \xe9\n}\n")))
    assert main(["check", "--format", "json", "-"]) == 1
    (d,) = json.loads(capsys.readouterr().out)["diagnostics"]
    assert (d["code"], d["file"], d["line"], d["col"]) == ("E0104", "<stdin>", 2, 25)


def test_undecodable_file_is_a_spec_error_not_a_usage_error(tmp_path, capsys):
    spec = tmp_path / "latin1.rpn"
    spec.write_bytes(SPEC.replace("return y", "return y # caf\xe9").encode("latin-1"))
    assert main(["check", str(spec)]) == 1
    assert f"{spec}:4:17: error[E0104]" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ checkpoints
class _Payload:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_tampered_checkpoint_is_refused_and_runs_nothing(tmp_path, monkeypatch):
    from rpn2c.train.checkpoint import load
    from rpn2c.train.config import TrainError

    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "checkpoint.pt"
    torch.save({"format": "rpn2c-checkpoint", "payload": _Payload()}, bad)
    with pytest.raises(TrainError, match="not a loadable rpn2c checkpoint"):
        load(bad)
    raw = tmp_path / "raw.pt"
    raw.write_bytes(pickle.dumps(_Payload()))
    with pytest.raises(TrainError, match="raw.pt"):
        load(raw)
    assert not (tmp_path / "pwned").exists()


# ------------------------------------------------------------------------------------------------ code and data
@pytest.mark.parametrize("call, code", [("eval(x)", "E0201"), ("os.system(x)", "E0202"), ("__import__(x)", "E0201")])
def test_a_spec_names_only_registry_entries(call, code):
    """Names resolve in the component registry and the file's own blocks, never in Python."""
    with pytest.raises(rpn2c.SpecError) as info:
        rpn2c.check(f"model m {{\n  input x: vector[B, 4]\n  y = {call}\n  return y\n}}\n")
    assert _codes(info.value) == [(code, 3, 7)]


def test_malformed_user_data_files_name_the_file(tmp_path):
    from rpn2c.data.formats import load_path

    (tmp_path / "s.csv").write_text("a,b\n1,2\n3,\n")
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / "train-images-idx3-ubyte").write_bytes(b"junk")
    (tmp_path / "cifar").mkdir()
    for name in ("data_batch_1", "test_batch"):
        (tmp_path / "cifar" / name).write_bytes(pickle.dumps([1, 2, 3]))
    (tmp_path / "cora").mkdir()
    (tmp_path / "cora" / "cora.content").write_text("1\t0\tA\n2\tB\n")
    (tmp_path / "cora" / "cora.cites").write_text("")
    for kind, path, where in (("csv", "s.csv", "s.csv: data row 2"),
                              ("mnist", "mnist", "train-images-idx3-ubyte: bad IDX magic"),
                              ("cifar", "cifar", "data_batch_1"), ("cora", "cora", "cora.content:2:")):
        with pytest.raises((ValueError, OSError)) as info:
            load_path(kind, tmp_path / path)
        assert where in str(info.value), (kind, str(info.value))


def test_the_compiler_leaves_the_garbage_collector_as_it_found_it():
    """check/compile pause the cyclic collector while they allocate and restore it, on errors too."""
    import gc

    text = "model m {\n  input x: vector[B, 4]\n  y = head(x) { out = 2 }\n  return y\n}\n"
    assert gc.isenabled()
    rpn2c.compile(text)
    assert gc.isenabled()
    with pytest.raises(rpn2c.SpecError):
        rpn2c.check(text.replace("out = 2", "out = -2"))
    assert gc.isenabled()
    gc.disable()
    try:
        rpn2c.check(text)
        assert not gc.isenabled()
    finally:
        gc.enable()
