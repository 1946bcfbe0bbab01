"""What the checker and the optimiser know about each value of a spec, by its place in the text: the checked graph
of every model, and for each ``input``/assignment of each model or block the nodes it elaborates to (one
*instance* per use: a block used twice has two). Inlay hints, value hovers, code lenses and the "view output"
command of :mod:`rpn2c.runtime.lsp` read it.

Node ids follow the checker's naming: a value ``v`` of a block used as ``y = enc(...)`` is node ``y.v``; the
``i``-th copy of ``y = repeat(n, enc(...))`` prefixes ``y.i.``; an operation nested in an argument is ``v_op``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rpn2c.check.elaborate import elaborate
from rpn2c.check.loader import Unit, load
from rpn2c.errors import Diagnostic, Span, SpecError
from rpn2c.ir.graph import Graph
from rpn2c.syntax import ast

LAYER_KINDS = ("layer", "recurrent")


@dataclass(frozen=True)
class Instance:
    """One elaboration of a value: the node that produces it and the nodes that make it."""

    model: str
    output: str | None
    nodes: tuple[str, ...]


@dataclass
class Value:
    """An ``input`` or assignment of a definition: its name's place (0-based) and its instances."""

    definition: str
    name: str
    kind: str  # input | head | compress | recurrent | layer | op | block | repeat | alias
    line: int
    col: int
    span: Span
    instances: list[Instance] = field(default_factory=list)

    @property
    def end_col(self) -> int:
        return self.col + len(self.name)


@dataclass
class Analysis:
    """Every diagnostic of a text, the checked graph of each model that checks, and its values."""

    text: str
    file: str
    diagnostics: list[Diagnostic]
    graphs: dict[str, Graph]
    unit: Unit | None = None
    sources: dict[str, str] = field(default_factory=dict)
    values: list[Value] = field(default_factory=list)
    _optimised: dict[str, Graph] = field(default_factory=dict, repr=False)

    def value_at(self, line: int, col: int) -> Value | None:
        """The value whose name (in its binding) covers ``(line, col)``."""
        return next((v for v in self.values if v.line == line and v.col <= col <= v.end_col), None)

    def optimised(self, model: str) -> Graph:
        """``model``'s graph after the optimiser (its kernels), built once."""
        if model not in self._optimised:
            from rpn2c.passes import optimize

            self._optimised[model] = optimize(elaborate(self.unit, dict(self.sources), model))
        return self._optimised[model]

    def node(self, inst: Instance, nid: str | None = None):
        nid = inst.output if nid is None else nid
        g = self.graphs.get(inst.model)
        return g.node(nid) if g is not None and nid is not None and nid in g.g else None

    def params(self, inst: Instance) -> int:
        g = self.graphs[inst.model]
        return sum(g.node(n).params for n in inst.nodes if n in g.g)


def analyse(text: str, file: str = "<string>", *, path: Path | None = None, root: Path | None = None) -> Analysis:
    """Check ``text``: a parse error, or each model's checker errors in one list (a file of blocks only is checked
    for what the loader sees: imports and duplicate names), with the graphs of the models that check."""
    try:
        unit, sources = load(text, file, path=path, root=root)
    except SpecError as exc:
        return Analysis(text, file, list(exc.diagnostics), {})
    models = [d.name for d in unit.program.definitions if d.kind == "model"]
    found: dict[tuple, Diagnostic] = {}
    graphs: dict[str, Graph] = {}
    for name in models or [None]:
        try:
            graphs[name] = elaborate(unit, dict(sources), name)
        except SpecError as exc:
            for d in exc.diagnostics:
                if models or d.code != "E0505":  # a library of blocks is not an error
                    found.setdefault((d.code, d.span, d.message), d)
    diagnostics = sorted(found.values(), key=lambda d: (d.span.file != file, d.span.line, d.span.col, d.code))
    out = Analysis(text, file, diagnostics, graphs, unit, sources)
    _values(out)
    return out


# ------------------------------------------------------------------------------------------------ values
def _values(a: Analysis) -> None:
    """Walk each checked model as the checker did, recording every value's instances."""
    by_place: dict[tuple, Value] = {}
    lines = {f: t.splitlines() for f, t in a.sources.items()}

    def record(defn: ast.Definition, stmt, kind: str, inst: Instance) -> None:
        key = (stmt.span.file, stmt.span.line, stmt.span.col)
        if key not in by_place:
            line, col = stmt.span.line - 1, stmt.span.col - 1
            if isinstance(stmt, ast.Input):  # the name follows the keyword
                src = lines.get(stmt.span.file, [])
                m = re.compile(r"input\s+").match(src[line], col) if line < len(src) else None
                col = m.end() if m else col
            by_place[key] = Value(defn.name, stmt.name, kind, line, col, stmt.span)
        by_place[key].instances.append(inst)

    for model, g in a.graphs.items():
        defn = a.unit.program.definition(model)
        if defn is not None:
            _Walk(g, model, record).body(a.unit, defn, "", None)
    a.values = sorted((v for v in by_place.values() if v.span.file == a.file), key=lambda v: (v.line, v.col))


class _Walk:
    def __init__(self, g: Graph, model: str, record):
        self.g, self.model, self.record = g, model, record

    def _known(self, nid: str | None) -> str | None:
        return nid if nid is not None and nid in self.g.g else None

    def _under(self, prefix: str) -> tuple[str, ...]:
        return tuple(n for n in self.g.g if n.startswith(prefix))

    def body(self, unit: Unit, defn: ast.Definition, prefix: str, inputs: list[str | None] | None) -> str | None:
        env: dict[str, str | None] = {}
        k, out = 0, None
        for stmt in defn.body:
            if isinstance(stmt, ast.Input):
                if inputs is None:
                    nid = self._known(prefix + stmt.name)
                    nodes = (nid,) if nid else ()
                else:
                    nid, nodes = (inputs[k] if k < len(inputs) else None), ()
                k += 1
                env[stmt.name] = nid
                self.record(defn, stmt, "input", Instance(self.model, nid, nodes))
            elif isinstance(stmt, ast.Assign):
                nid, nodes, kind = self.value(unit, stmt.name, stmt.value, prefix, env)
                env[stmt.name] = nid
                self.record(defn, stmt, kind, Instance(self.model, nid, nodes))
            elif isinstance(stmt, ast.Return) and out is None and stmt.names:
                out = env.get(stmt.names[0])
        return out

    def value(self, unit: Unit, name: str, v, prefix: str, env: dict):
        if isinstance(v, (ast.HeadExpr, ast.LayerExpr)):
            nid = self._known(prefix + name)
            return nid, (nid,) if nid else (), v.kind if isinstance(v, ast.HeadExpr) else "layer"
        if isinstance(v, ast.RepeatExpr):
            target = _block(unit, v.call.func)
            current = self.arg(v.call.args[0], prefix, f"{name}.0", env) if v.call.args else None
            i = 0
            while target is not None and self._under(f"{prefix}{name}.{i}."):
                rest = [self.arg(a, prefix, f"{name}.{i}", env) for a in v.call.args[1:]]
                current = self.body(*target, f"{prefix}{name}.{i}.", [current, *rest])
                i += 1
            return current, self._under(f"{prefix}{name}."), "repeat"
        if isinstance(v, ast.Call):
            target = _block(unit, v.func)
            if target is None:
                nid = self._known(prefix + name)
                return nid, (nid,) if nid else (), "op"
            args = [self.arg(a, prefix, name, env) for a in v.args]
            out = self.body(*target, f"{prefix}{name}.", args)
            return out, self._under(f"{prefix}{name}."), "block"
        if isinstance(v, ast.Name):
            return env.get(v.text), (), "alias"
        return None, (), "op"

    def arg(self, e, prefix: str, owner: str, env: dict) -> str | None:
        if isinstance(e, ast.Name):
            return env.get(e.text)
        if isinstance(e, ast.Call):
            return self._known(f"{prefix}{owner}_{e.func.parts[-1]}")
        return None


def _block(unit: Unit, func: ast.Name) -> tuple[Unit, ast.Definition] | None:
    if len(func.parts) == 1:
        d = unit.program.definition(func.parts[0])
        return (unit, d) if d is not None else None
    sub = unit.imports.get(func.parts[0]) if len(func.parts) == 2 else None
    d = sub.program.definition(func.parts[1]) if sub is not None else None
    return (sub, d) if d is not None else None


# ------------------------------------------------------------------------------------------------ presentation
def _types(a: Analysis, v: Value) -> list[str]:
    out: list[str] = []
    for inst in v.instances:
        n = a.node(inst)
        if n is not None and n.type is not None and str(n.type) not in out:
            out.append(str(n.type))
    return out


def inlay_label(a: Analysis, v: Value) -> str | None:
    """``: sequence[B, T, 32] · 4,288 params`` (every distinct type and count when a block is used with several)."""
    types = _types(a, v)
    if not types:
        return None
    label = ": " + " | ".join(types)
    counts = []
    for inst in v.instances:
        p = a.params(inst)
        if p and f"{p:,}" not in counts:
            counts.append(f"{p:,}")
    if counts and v.kind not in ("input", "alias"):
        label += " · " + " | ".join(counts) + " params"
    if len(v.instances) > 1:
        label += f" ({len(v.instances)} uses)"
    return label


def value_markdown(a: Analysis, v: Value) -> str:
    """A value's type, shape, parameter count and chosen kernels, for each of its instances."""
    lines = [f"**{v.name}** — {v.kind} in {_definition_kind(a, v)} `{v.definition}`", ""]
    lines += ["| node | type | shape | parameters | kernels |", "|---|---|---|---|---|"]
    for inst in v.instances:
        n = a.node(inst)
        if n is None or n.type is None:
            continue
        kernels = _kernels(a, inst)
        shape = " × ".join(str(d) for d in n.type.shape)
        lines.append(f"| `{inst.output}` ({inst.model}) | `{n.type}` | {shape} ({n.type.kind}) | "
                     f"{a.params(inst):,} | {', '.join(kernels) or '—'} |")
    return "\n".join(lines)


def _definition_kind(a: Analysis, v: Value) -> str:
    d = a.unit.program.definition(v.definition) if a.unit else None
    return d.kind if d is not None else "definition"


def _kernels(a: Analysis, inst: Instance) -> list[str]:
    """The optimiser's rules that fired on the instance's layers, each once, in order."""
    g = a.optimised(inst.model)
    out: list[str] = []
    for nid in inst.nodes:
        if nid in g.g:
            out += [k for k in g.node(nid).plan if k not in out]
    return out


def value_kernels(a: Analysis, v: Value) -> list[str]:
    """The optimiser's rules that fired on any instance of ``v``, each once, in order."""
    out: list[str] = []
    for inst in v.instances:
        out += [k for k in _kernels(a, inst) if k not in out]
    return out


def layer_values(a: Analysis) -> list[Value]:
    """Values that elaborate to at least one layer (what a code lens offers to explain)."""
    return [v for v in a.values if v.kind not in ("input", "alias") and any(
        (n := a.node(inst, nid)) is not None and n.kind in LAYER_KINDS for inst in v.instances for nid in inst.nodes)]


def view_output(a: Analysis, v: Value) -> dict:
    """The optimiser's ``explain`` for the layers of ``v`` and the lines of the generated program that run them."""
    from rpn2c.lower.build import CompiledModel
    from rpn2c.runtime.explain import render_explain

    explain, code = [], []
    for inst in v.instances:
        g = a.optimised(inst.model)
        nodes = {nid for nid in inst.nodes if nid in g.g}
        sections = render_explain(g).split("\n\n")[1:]
        explain += [s for s in sections if any(f": {nid} = " in s.splitlines()[0] for nid in nodes)]
        model = CompiledModel(g)
        paths = {nid: path for nid, path, _, _ in model._steps}  # where each node's module sits
        code += [f"# model {inst.model}: {v.name} ({', '.join(sorted(nodes))})",
                 *program_lines(model.program_source, {paths[n] for n in nodes if n in paths})]  # an input: none
    title = f"{v.name} ({v.kind} in {v.definition})"
    markdown = "\n".join([f"### {title}", "", "```text", *("\n\n".join(explain) or "no layer").splitlines(), "```",
                          "", "```python", *code, "```"])
    return {"title": title, "explain": "\n\n".join(explain), "code": "\n".join(code), "markdown": markdown}


def program_lines(source: str, nids: set[str]) -> list[str]:
    """The lines of a generated program that run the modules at paths ``nids``: a layer's ``x = self.<path>`` and
    the steps that follow it, and module calls ``self.<path>(...)``."""
    out, current = [], None
    for line in source.splitlines():
        attr = re.match(r"\s*\w+ = self\.([\w.]+)$", line)
        call = re.match(r"\s*\w+ = self\.([\w.]+)\(", line)
        if attr:
            current = attr[1]
        elif call or line.strip().startswith("return"):
            current = None
        owner = attr[1] if attr else call[1] if call else current
        if owner in nids:
            out.append(line.strip())
    return out
