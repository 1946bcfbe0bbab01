"""The built parser is kept in the user's cache folder and read back; a damaged, foreign or unwritable cache never
changes what a spec parses to."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# parse a spec with a bad line too: the error's text and place come from the parser's tables
PARSE = """
import json, sys
from rpn2c.errors import SpecError
from rpn2c.syntax.format import format_program
from rpn2c.syntax.parser import _parser, grammar_text, parse, parser_cache_file
good = format_program(parse(open("specs/transformer.rpn").read(), "specs/transformer.rpn"))
try:
    parse("model m {\\n  input x: vector[B, 3]\\n  y = linear(x, 4\\n  return y\\n}\\n", "bad.rpn")
except SpecError as e:
    bad = str(e)
print(json.dumps({"good": good, "bad": bad, "file": str(parser_cache_file(grammar_text()))}))
"""


def _parse(cache: Path) -> dict:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", PARSE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_parser_is_built_once_then_read_back_with_the_same_results(tmp_path):
    first = _parse(tmp_path)
    kept = Path(first["file"])
    assert kept.parent == tmp_path / "rpn2c" and kept.is_file() and kept.stat().st_size > 1000
    assert [p.name for p in kept.parent.iterdir()] == [kept.name]  # no temporary file left behind
    before = kept.stat().st_mtime_ns
    second = _parse(tmp_path)
    assert second == first and "bad.rpn:" in first["bad"]
    assert kept.stat().st_mtime_ns == before  # read, not written again


def test_a_damaged_cache_file_is_rebuilt(tmp_path):
    clean = _parse(tmp_path / "clean")
    kept = tmp_path / "damaged" / "rpn2c" / Path(clean["file"]).name
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"not a parser at all")
    again = _parse(tmp_path / "damaged")
    assert {k: v for k, v in again.items() if k != "file"} == {k: v for k, v in clean.items() if k != "file"}
    assert kept.read_bytes() != b"not a parser at all"  # replaced by a parser that is read back, not rebuilt:
    rebuilt = kept.stat().st_mtime_ns
    assert _parse(tmp_path / "damaged") == again and kept.stat().st_mtime_ns == rebuilt


def test_an_unwritable_cache_folder_is_skipped(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would go")
    clean = _parse(tmp_path / "clean")
    out = _parse(blocker)
    assert out["good"] == clean["good"] and out["bad"] == clean["bad"]
    assert blocker.read_text() == "a file where the cache folder would go"


def test_the_cache_file_is_named_by_the_grammar(monkeypatch, tmp_path):
    from rpn2c.syntax.parser import grammar_text, parser_cache_file

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    text = grammar_text()
    assert parser_cache_file(text) == parser_cache_file(text)
    assert parser_cache_file(text) != parser_cache_file(text + "\n// another grammar\n")
