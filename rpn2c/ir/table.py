"""The per-layer table of a checked graph (``rpn2c check``, ``print(graph)``): name, kind, output type, parameter
count, recipe and the kernels the optimiser chose (empty before ``rpn2c.passes.optimize``)."""

from __future__ import annotations

from rpn2c.ir.graph import Graph
from rpn2c.ir.picture import describe


def layer_table(graph: Graph) -> list[dict]:
    return [{"name": n.id, "kind": n.layer.kind if n.layer else n.kind, "recipe": describe(n),
             "type": str(n.type), "params": n.params, "kernels": list(n.plan), "tie": n.tie} for n in graph.nodes()]


def render_table(graph: Graph) -> str:
    rows = [("name", "kind", "output", "params", "recipe", "kernels")]
    for r in layer_table(graph):
        params = f"tied to {r['tie']}" if r["tie"] else f"{r['params']:,}"
        rows.append((r["name"], r["kind"], r["type"], params, r["recipe"], ",".join(r["kernels"])))
    rows.append(("total", "", "", f"{graph.param_count:,}", "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    widths[4] = min(widths[4], 60)
    lines = []
    for k, r in enumerate(rows):
        cells = [r[i][:widths[i]].ljust(widths[i]) if i != 3 else r[i].rjust(widths[i]) for i in range(len(r))]
        lines.append("  ".join(cells).rstrip())
        if k == 0 or k == len(rows) - 2:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary(graph: Graph) -> str:
    """``model NAME: N parameters, hash H`` and the table."""
    return (f"model {graph.name}: {graph.param_count:,} parameters, hash {graph.content_hash()[:12]}\n"
            + render_table(graph))


def html(graph: Graph) -> str:
    """The picture (SVG) above the table, for notebooks."""
    from xml.sax.saxutils import escape

    from rpn2c.ir.picture import to_svg

    return f"<div>{to_svg(graph)}</div>\n<pre>{escape(summary(graph))}</pre>"
