"""Human- and tool-readable reports: the per-layer table of ``rpn2c check`` and the component listing."""

from __future__ import annotations

import dataclasses

from rpn2c.components.registry import FAMILIES, Component, Entry, all_entries, unknown_hint
from rpn2c.ir.graph import Graph, Use
from rpn2c.ir.picture import describe  # noqa: F401  (the recipe text, shared with the graph picture)
from rpn2c.ir.table import layer_table, render_table  # noqa: F401  (the table of `rpn2c check`, print(graph))


def _default_text(v) -> str:
    if v is ...:
        return "required"
    return repr(v)


def components_json(family: str | None = None, entries: list[Entry] | None = None) -> list[dict]:
    out = []
    for e in all_entries() if entries is None else entries:
        if family and e.family != family:
            continue
        out.append({
            "name": e.name, "family": e.family, "doc": e.doc, "aliases": list(e.cls.aliases),
            "hyperparameters": [{"name": n, "type": t, "default": None if d is ... else d, "required": d is ...}
                                for n, t, d in e.hyperparameters()],
            "example": e.example, "compile_limitation": e.compile_limitation,
        })
    return out


def find_components(name: str, family: str | None = None) -> tuple[list[Entry], str | None]:
    """The entries named ``name`` (or aliased so), in every family or one; else none and the help naming what
    ``name`` most likely meant (another library's name for an entry, or the closest names)."""
    entries = [e for e in all_entries() if (family is None or e.family == family)]
    found = [e for e in entries if name == e.name or name in e.cls.aliases]
    return found, None if found else unknown_hint(name, (family,) if family else None)


def component_text(entry: Entry) -> str:
    """One entry in full: doc, aliases, hyper-parameters, its runnable example and any compile limitation."""
    from rpn2c.runtime.docgen import docstring, type_text, value_text

    lines = [f"{entry.name} — {entry.family}: {FAMILIES[entry.family]}"]
    if entry.cls.aliases:
        lines.append(f"aliases: {', '.join(entry.cls.aliases)}")
    lines += ["", docstring(entry), ""]
    fields = entry.schema.model_fields
    lines.append("hyper-parameters:" if fields else "no hyper-parameters")
    for key, f in fields.items():
        default = value_text(... if f.is_required() else f.default)
        lines.append(f"  {key}: {type_text(f.annotation)} = {default}" + (f"  ({f.description})" if f.description
                                                                           else ""))
    lines += ["", "example:", entry.example.rstrip("\n")]
    if entry.compile_limitation:
        lines += ["", f"torch.compile(fullgraph=True): not supported: {entry.compile_limitation}"]
    return "\n".join(lines)


def _uses(obj):
    """Every component use inside a layer, recurrent layer or op (composite parts included)."""
    if isinstance(getattr(obj, "component", None), Component):  # a use, or a composite's inner part
        yield obj if isinstance(obj, Use) else Use(obj.component)
        yield from _uses(getattr(obj.component, "parts", None))
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _uses(getattr(obj, f.name))
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _uses(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _uses(v)


def compile_limitations(graph: Graph) -> list[dict]:
    """The components of ``graph`` that ``torch.compile(fullgraph=True)`` cannot compile, with the reason."""
    out, seen = [], set()
    for node in graph.nodes():
        for use in _uses([node.layer, node.op]):
            cls = type(use.component)
            reason = cls.compile_limitation
            if reason and (node.id, cls) not in seen:
                seen.add((node.id, cls))
                out.append({"node": node.id, "component": cls.name, "family": cls.family, "reason": reason})
    return out


def components_table(family: str | None = None) -> str:
    lines = []
    for fam, title in FAMILIES.items():
        if family and fam != family:
            continue
        entries = [e for e in all_entries() if e.family == fam]
        if not entries:
            continue
        lines.append(f"{fam} — {title} ({len(entries)})")
        for e in entries:
            hps = ", ".join(f"{n}={_default_text(d)}" for n, _, d in e.hyperparameters())
            alias = f" (aka {', '.join(e.cls.aliases)})" if e.cls.aliases else ""
            lines.append(f"  {e.name}{alias}({hps})")
            lines.append(f"      {e.doc}")
        lines.append("")
    return "\n".join(lines).rstrip()
