"""The per-layer table of a checked graph (``rpn2c check``, ``print(graph)``): name, kind, output type, parameter
count, recipe and the kernels the optimiser chose (empty before ``rpn2c.passes.optimize``)."""

from __future__ import annotations

from rpn2c.ir.picture import describe


def layer_table(graph) -> list[dict]:
    return [{"name": n.id, "kind": n.layer.kind if n.layer else n.kind, "recipe": describe(n),
             "type": str(n.type), "params": n.params, "kernels": list(n.plan), "tie": n.tie} for n in graph.nodes()]


RECIPE_WIDTH = 60  # characters per line of the recipe column


def wrap_outside_calls(text: str, width: int = RECIPE_WIDTH) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken only at spaces outside brackets: never inside a
    call (a call longer than ``width`` keeps a line of its own)."""
    words, depth, cur = [], 0, ""
    for ch in text:
        depth = depth + (ch in "([{") - (ch in ")]}" and depth > 0)
        if ch == " " and depth == 0:
            words.append(cur)
            cur = ""
        else:
            cur += ch
    lines, line = [], ""
    for w in [*words, cur]:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    return [*lines, line]


def render_table(graph) -> str:
    """The table; a long recipe continues on the next lines (broken between its parts, never inside a call)."""
    rows = [("name", "kind", "output", "params", ["recipe"], "kernels")]
    for r in layer_table(graph):
        params = f"tied to {r['tie']}" if r["tie"] else f"{r['params']:,}"
        rows.append((r["name"], r["kind"], r["type"], params, wrap_outside_calls(r["recipe"]), ",".join(r["kernels"])))
    rows.append(("total", "", "", f"{graph.param_count:,}", [""], ""))
    widths = [max(len(line) for r in rows for line in (r[i] if i == 4 else [r[i]])) for i in range(len(rows[0]))]
    lines = []
    for k, r in enumerate(rows):
        for j, recipe in enumerate(r[4]):
            cells = [c if j == 0 else "" for c in r]
            cells[4] = recipe
            lines.append("  ".join(c.ljust(w) if i != 3 else c.rjust(w)
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip())
        if k == 0 or k == len(rows) - 2:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary(graph) -> str:
    """``model NAME: N parameters, hash H`` and the table."""
    return (f"model {graph.name}: {graph.param_count:,} parameters, hash {graph.content_hash()[:12]}\n"
            + render_table(graph))


def html(graph) -> str:
    """The picture (SVG) above the table, for notebooks."""
    from xml.sax.saxutils import escape

    from rpn2c.ir.picture import to_svg

    return f"<div>{to_svg(graph)}</div>\n<pre>{escape(summary(graph))}</pre>"
