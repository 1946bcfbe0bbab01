"""The graph picture rasterised with matplotlib: the layout of :mod:`rpn2c.ir.picture`, drawn as PNG."""

from __future__ import annotations

import io

from rpn2c.ir.picture import (COLOURS, EDGE, FONT, INK, MARGIN, MUTED, SMALL, TITLE, Layout, Run, _arrow,
                               _line_positions, _path, layout, role_text)

def render_png(lay: Layout, scale: float = 2.0) -> bytes:
    """A laid-out picture rasterised with matplotlib (``scale`` pixels per SVG unit)."""
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyBboxPatch, PathPatch, Polygon
    from matplotlib.path import Path as MPath

    fig = Figure(figsize=(lay.width / 72, lay.height / 72), dpi=72)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, lay.width)
    ax.set_ylim(lay.height, 0)
    ax.axis("off")

    def text(x, y, s: Run, **kw):
        ax.text(x, y, s.text, fontsize=s.size, fontfamily=FONT, fontweight="bold" if s.bold else "normal",
                color=s.colour, va="baseline", **kw)

    text(MARGIN, MARGIN + 13, Run(lay.title, TITLE, bold=True))
    for c in lay.clusters:
        ax.add_patch(FancyBboxPatch((c.x, c.y), c.w, c.h, boxstyle="round,pad=0,rounding_size=8", fill=False,
                                    edgecolor=COLOURS["block"][1], linestyle=(0, (5, 3)), linewidth=1.0))
        text(c.x + 8, c.y + 14, Run(c.title, SMALL, bold=True, colour=COLOURS["block"][1]))
    for e in lay.edges:
        verts, codes = [e.points[0]], [MPath.MOVETO]
        for cmd, pts in _path(e.points[:-1] + [(e.points[-1][0], e.points[-1][1] - 7)]):
            verts += pts
            codes += [MPath.LINETO] if cmd == "L" else [MPath.CURVE4] * 3
        ax.add_patch(PathPatch(MPath(verts, codes), fill=False, edgecolor=EDGE, linewidth=1.3))
        ax.add_patch(Polygon(_arrow(*e.points[-1]), closed=True, facecolor=EDGE, edgecolor="none"))
        role = role_text(e.role)
        if role:
            tx, ty = e.points[-1]
            text(tx - 5 if e.left else tx + 5, ty - 10, Run(role, SMALL, colour=MUTED), fontstyle="italic",
                 ha="right" if e.left else "left")
    for lab in lay.labels:
        ax.add_patch(FancyBboxPatch((lab.x - lab.w / 2, lab.y - lab.h / 2), lab.w, lab.h,
                                    boxstyle="round,pad=0,rounding_size=8", facecolor="#ffffff", edgecolor=EDGE,
                                    linewidth=1.0, mutation_aspect=1))
        ax.text(lab.x, lab.y + 3.5, lab.text, fontsize=SMALL, fontfamily=FONT, color=INK, ha="center",
                va="baseline")
    for b in lay.boxes:
        fill, stroke = COLOURS.get(b.kind, COLOURS["op"])
        r = min(14 if b.kind in ("input", "return") else 5, b.h / 2)
        ax.add_patch(FancyBboxPatch((b.x, b.y), b.w, b.h, boxstyle=f"round,pad=0,rounding_size={r}",
                                    facecolor=fill, edgecolor=stroke, linewidth=1.4, mutation_aspect=1))
        for (tx, ty), line in _line_positions(b):
            for s in line:
                text(tx + s.gap, ty, s)
                tx += s.width
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=72 * scale, facecolor="#ffffff")
    return buf.getvalue()


def to_png(graph, scale: float = 2.0, collapse: bool = False) -> bytes:
    """The same picture rasterised with matplotlib (``scale`` pixels per SVG unit)."""
    return render_png(layout(graph.collapsed() if collapse else graph), scale)
