"""``docs/components.md``, generated from the component registry (never edited by hand).

``python -m rpn2c.runtime.docgen --write docs/components.md`` regenerates the file; ``--check docs/components.md``
exits 1 when it is stale (the test suite runs the same comparison). ``rpn2c components --format markdown`` prints
the same text.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import types
import typing
from pathlib import Path

import rpn2c.components  # noqa: F401  (the registry: each family module is imported when first read)
from rpn2c.components.registry import FAMILIES, Entry, all_entries

GENERATED_BY = "python -m rpn2c.runtime.docgen --write docs/components.md"


def type_text(annotation) -> str:
    """A hyper-parameter type in spec terms: ``int | none``, ``"padding" | "aggregation"``, ``list[float]``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(value_text(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("none" if a is type(None) else type_text(a) for a in args)
    if origin in (list, tuple, dict):
        return f"{origin.__name__}[{', '.join(type_text(a) for a in args)}]"
    if annotation is type(None):
        return "none"
    name = getattr(annotation, "__name__", None)
    return name if name else str(annotation).replace("typing.", "")


def value_text(v) -> str:
    """A default value written as a spec literal."""
    if v is ...:
        return "required"
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value_text(x) for x in v) + "]"
    return repr(v)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def docstring(entry: Entry) -> str:
    return inspect.cleandoc(entry.cls.__doc__ or "(undocumented)")


def _entry_markdown(entry: Entry) -> list[str]:
    lines = [f"### `{entry.name}`", ""]
    if entry.cls.aliases:
        lines += ["Aliases: " + ", ".join(f"`{a}`" for a in entry.cls.aliases), ""]
    fields = entry.schema.model_fields
    if fields:
        lines += ["| hyper-parameter | type | default | description |", "|---|---|---|---|"]
        for key, f in fields.items():
            default = ... if f.is_required() else f.default
            lines.append(f"| `{key}` | {_cell(type_text(f.annotation))} | {_cell(value_text(default))} | "
                         f"{_cell(f.description or '')} |")
        lines.append("")
    else:
        lines += ["No hyper-parameters.", ""]
    lines += [docstring(entry), ""]
    lines += ["Example (`rpn2c components " + entry.name + "` prints it; the compile tests run it):", "",
              "```", entry.example.rstrip("\n"), "```", ""]
    if entry.compile_limitation:
        lines += [f"Not compiled with `torch.compile(fullgraph=True)`: {entry.compile_limitation}", ""]
    return lines


def render_components_markdown(family: str | None = None) -> str:
    """Every registry entry (aliases folded in), families in registry order, entries by name."""
    entries = [e for e in all_entries() if family is None or e.family == family]
    lines = ["# rpn2c components", "",
             f"<!-- generated from the component registry by `{GENERATED_BY}`; do not edit by hand -->", "",
             "Every function a spec can name, by family. A spec writes `name` or `name(key = value, ...)`; "
             "unknown names and keys are errors. The first docstring line is the formula shown by "
             "`rpn2c components`; further lines record conventions and errata decisions. Each entry ends with "
             "a minimal runnable example, the spec the catalog-wide `torch.compile` test runs.", ""]
    counts = []
    for fam, title in FAMILIES.items():
        n = sum(1 for e in entries if e.family == fam)
        if n:
            counts.append(f"| [{fam}](#{fam}) | {_cell(title)} | {n} |")
    lines += ["| family | what | entries |", "|---|---|---|", *counts, ""]
    for fam, title in FAMILIES.items():
        fam_entries = [e for e in entries if e.family == fam]
        if not fam_entries:
            continue
        lines += [f"## {fam}", "", f"{title}.", ""]
        for e in fam_entries:
            lines += _entry_markdown(e)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rpn2c.runtime.docgen", description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", metavar="PATH", help="exit 1 if PATH differs from the generated text")
    g.add_argument("--write", metavar="PATH", help="(re)write PATH")
    g.add_argument("--print", action="store_true", help="print the generated text")
    args = p.parse_args(argv)
    text = render_components_markdown()
    if args.print:
        sys.stdout.write(text)
        return 0
    if args.write:
        Path(args.write).write_text(text, encoding="utf-8")
        return 0
    path = Path(args.check)
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    if current != text:
        sys.stderr.write(f"{path} is stale: run `{GENERATED_BY}`\n")
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
