"""The README cannot go stale: its quick start is what CI runs, and every shown command output is reproduced here."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

import rpn2c
from rpn2c.data import available, load
from rpn2c.runtime.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _ci_module():
    spec = importlib.util.spec_from_file_location("readme_commands", ROOT / ".ci" / "readme_commands.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_quick_start_is_two_complete_commands_that_ci_runs():
    cmds = _ci_module().quick_start(README)
    for cmd in cmds.values():  # each does its own set-up, with torch pinned to the CPU wheel
        assert cmd.startswith("pip install torch==2.13.0 -e ") and " && " in cmd
    assert cmds["main"].endswith("rpn2c train specs/cnn.rpn --data digits")
    assert (ROOT / "specs" / "cnn.rpn").is_file()
    assert '-e ".[test]"' in cmds["test"] and 'python -m pytest -m "not slow and not gpu"' in cmds["test"]
    section = README.split("## Quick start", 1)[1]  # a newcomer makes the virtualenv first (CI makes its own)
    venv = section.index("```sh\npython -m venv .venv && source .venv/bin/activate\n```")
    assert venv < min(section.index(cmds["main"]), section.index(cmds["test"]))
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "readme_commands.py test" in ci and "readme_commands.py main" in ci and "-m venv" in ci
    assert "pytest" not in ci.replace("pytest command", "")  # CI never restates the test command


@pytest.mark.parametrize("text, message", [
    ("# x\n## Quick start\n```bash\npip install -e .\n```\n## Next\n", "exactly two commands"),
    ("## Quick start\n```bash\na && pytest\nb && pytest\n```\n## Next\n", "one pytest command"),
    ("## Intro\n", "no '## Quick start'"),
])
def test_quick_start_parser_refuses_a_malformed_block(text, message):
    with pytest.raises(ValueError, match=message):
        _ci_module().quick_start(text)


def _console_examples():
    """(command, expected output lines) for each '$ rpn2c ...' in the README's console blocks."""
    for block in re.findall(r"^```console\n(.*?)^```", README, re.S | re.M):
        cmd, out = None, []
        for line in block.splitlines():
            if line.startswith("$ "):
                if cmd:
                    yield cmd, out
                cmd, out = line[2:], []
            else:
                out.append(line)
        if cmd:
            yield cmd, out


def _matches(expected: list[str], actual: list[str]) -> bool:
    """Line-by-line equality where an expected '...' line stands for any number of lines."""
    pattern = "\n".join(".*?" if ln.strip() == "..." else re.escape(ln.rstrip()) for ln in expected)
    return re.fullmatch(pattern, "\n".join(ln.rstrip() for ln in actual), re.S) is not None


EXAMPLES = list(_console_examples())


def test_the_readme_shows_command_output():
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("cmd, expected", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_readme_console_output_is_what_the_command_prints(cmd, expected, capsys, monkeypatch):
    argv = shlex.split(cmd)
    assert argv[0] == "rpn2c"
    monkeypatch.chdir(ROOT)
    main(argv[1:])
    out, err = capsys.readouterr()
    actual = (out + err).rstrip("\n").splitlines()
    assert _matches(expected, actual), "README shows:\n" + "\n".join(expected) + "\nthe command prints:\n" + \
        "\n".join(actual)


def test_the_readme_spec_is_the_shipped_program():
    """Comments aside, the spec the README shows is specs/cnn.rpn (the same content hash)."""
    block = re.search(r"^```\n(# cnn\.rpn .*?)^```", README, re.S | re.M)
    assert block is not None
    shipped = (ROOT / "specs" / "cnn.rpn").read_text(encoding="utf-8")
    assert rpn2c.check(block[1]).content_hash() == rpn2c.check(shipped).content_hash()


def test_the_readme_lists_every_data_set_and_each_loads():
    """The `rpn2c data` table in the README names every built-in set (its output is checked above), and each of
    them loads where its package is installed."""
    block = re.search(r"^\$ rpn2c data\n(.*?)^```", README, re.S | re.M)
    assert block is not None
    names = [ln.split()[0] for ln in block[1].splitlines()[2:] if ln.strip() and ln != "..."]
    assert names == list(available())
    for name in names:
        try:
            ds = load(name)
        except ImportError as exc:  # an optional package this environment lacks: the error names it
            assert "pip install" in str(exc) or "root=DIR" in str(exc), exc
            continue
        assert len(ds.train[0]) > 0 and len(ds.test[0]) > 0, name


def test_the_readme_names_every_operation_of_the_registry():
    """The README's operation list is the registry's `op` family: every name (aliases too), nothing else."""
    from rpn2c.components.registry import REGISTRY

    bullet = re.search(r"^- \*\*Operations\*\*(.*?)^- \*\*", README, re.S | re.M)
    assert bullet is not None
    text = bullet[1].split("and every processing function")[0]
    named = set(re.findall(r"`(\w+)\(", text)) | set(re.findall(r"\((?:also|the registry's) `(\w+)`\)", text))
    named -= {"normal"}  # the initialiser of the `param` example
    assert named == set(REGISTRY["op"]), (sorted(set(REGISTRY["op"]) - named), sorted(named - set(REGISTRY["op"])))
