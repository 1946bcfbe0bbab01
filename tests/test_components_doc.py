"""docs/components.md is generated from the registry and must be current; `rpn2c components` lists every entry."""

from __future__ import annotations

import json
from pathlib import Path

from rpn2c.components.registry import FAMILIES, all_entries
from rpn2c.runtime import docgen
from rpn2c.runtime.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "components.md"


def test_components_md_is_current():
    """Fails when a registry entry changed without regenerating the doc (CI catches stale docs)."""
    expected = docgen.render_components_markdown()
    current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    assert current == expected, f"docs/components.md is stale: run `{docgen.GENERATED_BY}`"


def test_docgen_check_and_write(tmp_path, capsys):
    path = tmp_path / "components.md"
    assert docgen.main(["--check", str(path)]) == 1
    assert "stale" in capsys.readouterr().err
    assert docgen.main(["--write", str(path)]) == 0
    assert docgen.main(["--check", str(path)]) == 0
    path.write_text(path.read_text() + "edited\n")
    assert docgen.main(["--check", str(path)]) == 1


def test_markdown_has_every_entry_with_its_hyperparameters_and_full_docstring():
    text = docgen.render_components_markdown()
    positions = [text.index(f"\n## {fam}\n") for fam in FAMILIES if any(e.family == fam for e in all_entries())]
    assert positions == sorted(positions)  # families in registry order
    for e in all_entries():
        section = text.split(f"\n### `{e.name}`\n")
        assert len(section) >= 2, e.name
        body = next(s for s in section[1:] if docgen.docstring(e) in s.split("\n### ")[0])
        body = body.split("\n### ")[0]
        for alias in e.cls.aliases:
            assert f"`{alias}`" in body
        for key, f in e.schema.model_fields.items():
            default = ... if f.is_required() else f.default
            assert f"| `{key}` | " in body and docgen.value_text(default).replace("|", "\\|") in body, (e.name, key)
    assert "| `r` | int | 2 | rank |" in text  # lorr
    assert "| `p` | int \\| none | none |" in text  # hm's optional block grid
    assert "Aliases: `constant_eye`" in text


def test_type_and_value_texts():
    from typing import Literal, Optional, Union

    assert docgen.type_text(Optional[int]) == "int | none"
    assert docgen.type_text(Union[float, Literal["fan_in"]]) == 'float | "fan_in"'
    assert docgen.type_text(list[list[float]]) == "list[list[float]]"
    assert docgen.value_text(True) == "true" and docgen.value_text(None) == "none"
    assert docgen.value_text("x") == '"x"' and docgen.value_text([1, 2.5]) == "[1, 2.5]"
    assert docgen.value_text(...) == "required"


def test_cli_lists_every_entry(capsys):
    assert main(["components", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    listed = {(c["family"], c["name"]): c for c in data}
    for e in all_entries():
        c = listed[(e.family, e.name)]
        assert c["aliases"] == list(e.cls.aliases) and c["doc"] == e.doc
        assert [h["name"] for h in c["hyperparameters"]] == list(e.schema.model_fields)
    assert len(listed) == len(all_entries())
    assert main(["components"]) == 0
    table = capsys.readouterr().out
    blocks = {}
    for block in table.split("\n\n"):
        head, *rows = block.strip().splitlines()
        blocks[head.split(" — ")[0]] = rows
    for e in all_entries():
        line = next((ln for ln in blocks[e.family] if ln.startswith(f"  {e.name}(") or ln.startswith(f"  {e.name} ")),
                    None)
        assert line is not None and all(f"{k}=" in line for k in e.schema.model_fields), e.name
    assert main(["components", "--format", "markdown"]) == 0
    assert capsys.readouterr().out == docgen.render_components_markdown()
    assert main(["components", "--format", "markdown", "--family", "fusion"]) == 0
    assert "## fusion" in capsys.readouterr().out
    assert main(["components", "--family", "nope"]) == 2
