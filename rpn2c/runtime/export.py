"""IR graph export: Graphviz DOT and Mermaid, shapes on the edges; the drawn picture (SVG, PNG) lives with the IR
(``rpn2c.ir.picture``) so that graphs and compiled models draw themselves in Jupyter."""

from __future__ import annotations

from rpn2c.ir.graph import Graph
from rpn2c.ir.picture import role_text, to_svg  # noqa: F401  (re-exported: every graph format in one place)
from rpn2c.ir.picture_png import to_png  # noqa: F401
from rpn2c.runtime.report import describe


def _edge_label(graph: Graph, source: str, data: dict) -> str:
    """The value's type, after the role it plays where that has a name (``context: nodes[N, 16]``)."""
    role = role_text(", ".join((data["role"], *data.get("also", ()))))
    return f"{role}: {graph.node(source).type}" if role else str(graph.node(source).type)


def _dot_escape(text: str) -> str:
    out = text.replace("\\", "\\\\").replace('"', '\\"')
    for ch in "<>{}|":
        out = out.replace(ch, "\\" + ch)
    return out


def to_dot(graph: Graph) -> str:
    lines = [f'digraph "{_dot_escape(graph.name)}" {{', "  rankdir=TB;", '  node [shape=record, fontname="Helvetica"];']
    for n in graph.nodes():
        label = f"{n.id}|{describe(n)}|{n.type}"
        if n.params:
            label += f"|{n.params:,} params"
        if n.plan:
            label += f"|kernels: {', '.join(n.plan)}"
        shape = ", shape=ellipse" if n.kind == "input" else ""
        text = _dot_escape(label).replace("\\|", "|") if shape == "" else _dot_escape(f"{n.id}: {n.type}")
        lines.append(f'  "{_dot_escape(n.id)}" [label="{{{text}}}"{shape}];' if not shape
                     else f'  "{_dot_escape(n.id)}" [label="{text}"{shape}];')
    for u, v, d in sorted(graph.g.edges(data=True)):
        lines.append(f'  "{_dot_escape(u)}" -> "{_dot_escape(v)}" [label="{_dot_escape(_edge_label(graph, u, d))}"];')
    for o in graph.outputs:
        lines.append(f'  "{_dot_escape(o)}" -> "return";')
    lines.append('  "return" [shape=doublecircle, label="return"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _mermaid_id(nid: str) -> str:
    return "n_" + "".join(c if c.isalnum() else "_" for c in nid)


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;").replace("[", "#91;").replace("]", "#93;")


def to_mermaid(graph: Graph) -> str:
    lines = ["flowchart TD"]
    for n in graph.nodes():
        label = f"{n.id}<br/>{describe(n)}<br/>{n.type}"
        if n.plan:
            label += f"<br/>kernels: {', '.join(n.plan)}"
        if n.kind == "input":
            lines.append(f'  {_mermaid_id(n.id)}(["{_mermaid_text(label)}"])')
        else:
            lines.append(f'  {_mermaid_id(n.id)}["{_mermaid_text(label)}"]')
    for u, v, d in sorted(graph.g.edges(data=True)):
        lines.append(f'  {_mermaid_id(u)} -->|"{_mermaid_text(_edge_label(graph, u, d))}"| {_mermaid_id(v)}')
    for o in graph.outputs:
        lines.append(f"  {_mermaid_id(o)} --> return((return))")
    return "\n".join(lines) + "\n"
