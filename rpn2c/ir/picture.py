"""The IR graph as a picture: a layered layout computed here (no Graphviz binary), drawn as SVG or PNG.

Each node is a box (name, kind, recipe, parameters, the kernels the optimiser chose); each value's inferred type
sits on the edges that leave it; a ``return`` box collects the outputs. Layout: longest-path layers, long edges
split by virtual points, barycentre ordering sweeps that keep the fewest crossings, and x positions that pull
every box towards its neighbours without overlap (isotonic regression per layer). The nodes of each block use sit in a
labelled cluster; ``collapse=True`` draws one box per block use instead (``Graph.collapsed``). Text is measured with the
metrics of DejaVu Sans (bundled with matplotlib), so boxes fit their text. ``Graph._repr_svg_`` and
``CompiledModel._repr_svg_`` (Jupyter) and ``rpn2c graph --format svg|png`` all draw this picture.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from xml.sax.saxutils import escape, quoteattr

import networkx as nx

from rpn2c.ir import blocks

FONT = "DejaVu Sans"  # bundled with matplotlib: the metrics the boxes are sized with
FONT_FAMILY = "DejaVu Sans, Verdana, Helvetica, Arial, sans-serif"
TITLE, TEXT, SMALL = 13.0, 11.0, 10.0  # font sizes (px)
PAD_X, PAD_Y, LINE = 10.0, 7.0, 15.0  # box padding, line height of TEXT
NODE_GAP, LAYER_GAP, MARGIN = 28.0, 66.0, 16.0
WRAP = 46  # characters per recipe line
RETURN = "\x00return"  # the id of the return box (no spec name can collide)

# kind -> (fill, stroke)
COLOURS = {"input": ("#e8f5e9", "#43a047"), "head": ("#e3f2fd", "#1e88e5"), "layer": ("#e3f2fd", "#1e88e5"),
           "compress": ("#fff3e0", "#fb8c00"), "recurrent": ("#f3e5f5", "#8e24aa"), "op": ("#f5f5f5", "#757575"),
           "return": ("#eceff1", "#455a64"), "block": ("#ede7f6", "#5e35b1")}
INK, MUTED, KERNEL, EDGE = "#212121", "#616161", "#ad1457", "#78909c"


def describe(node) -> str:
    """A short recipe of a node: the components in each non-default slot."""
    if node.kind == "input":
        return "input"
    if node.kind == "op":
        return str(node.op)
    if node.kind == "block":
        n, copies = node.trace["nodes"], node.trace.get("copies", 1)
        return f"{n} nodes" + (f" ({copies} × {n // copies})" if copies > 1 else "")
    if node.kind == "recurrent":
        r = node.layer
        bits = [f"cell={r.cell}", "ξ=chain(state feedback)", f"H={r.hidden}"]
        if r.layers > 1:
            bits.append(f"layers={r.layers}")
        if r.bidirectional:
            bits.append("bidirectional")
        if r.kappa.name != "identity":
            bits.append(f"κ={r.kappa}")
        if r.kappa_state.name != "identity":
            bits.append(f"κ_state={r.kappa_state}")
        return " ".join(bits)
    spec = node.layer
    parts = []
    for h in spec.heads:
        bits = [f"{slot.replace('xi_', 'ξ_')}={use}" for slot, use in h.xi.items()]
        if h.kappa.name != "identity":
            bits.append(f"κ={h.kappa}")
        if h.psi.name not in ("identity", "eye") or spec.kind == "compress" and h.psi.name != "eye":
            bits.append(f"ψ={h.psi}")
        if h.channels > 1:
            bits.append(f"C={h.channels}")
        parts.append(" ".join(bits) or "perceptron")
    text = parts[0] if len(set(parts)) == 1 else " | ".join(parts)
    if len(spec.heads) > 1:
        text = f"{len(spec.heads)} heads{_kv_text(spec)}: {text}; fusion={spec.fusion}"
    if spec.pi.name != "zero":
        text += f"; π={spec.pi}"
    return text


def _kv_text(spec) -> str:
    """`` (kv_heads=2: W_k, ψ shared by 2 query heads each)`` for grouped key/value heads."""
    g = getattr(spec, "kv_heads", None)
    if g is None or g == len(spec.heads):
        return ""
    return f" (kv_heads={g}: W_k, ψ shared by {len(spec.heads) // g} query heads each)"


# ------------------------------------------------------------------------------------------------ text
@functools.lru_cache(maxsize=4096)
def text_width(text: str, size: float = TEXT, bold: bool = False) -> float:
    """Width in px of ``text`` set in DejaVu Sans at ``size`` px."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    prop = FontProperties(family=FONT, size=size, weight="bold" if bold else "normal")
    return float(TextToPath().get_text_width_height_descent(text, prop, ismath=False)[0])


def _wrap(text: str, width: int = WRAP, sep: str = " ") -> list[str]:
    """Break ``text`` after ``sep`` so lines stay near ``width`` characters (never inside a word)."""
    lines, cur = [], ""
    for word in text.split(sep):
        piece = word if not cur else cur + sep + word
        if cur and len(piece) > width:
            lines.append(cur + sep.rstrip())
            cur = word
        else:
            cur = piece
    return lines + [cur] if cur else lines


@dataclass
class Run:
    """A run of text in one style."""

    text: str
    size: float = TEXT
    bold: bool = False
    colour: str = INK
    gap: float = 0.0  # space before the run (px)

    @property
    def width(self) -> float:
        return self.gap + text_width(self.text, self.size, self.bold)


@dataclass
class Box:
    """A node's box: top-left corner, size, lines of text runs, colours and a hover text."""

    id: str
    kind: str
    lines: list[list[Run]]
    hint: str = ""
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0
    h: float = 0.0

    def size(self) -> None:
        self.w = max(sum(s.width for s in line) for line in self.lines) + 2 * PAD_X
        self.h = sum(_line_height(line) for line in self.lines) + 2 * PAD_Y - 4


@dataclass
class Label:
    """A pill with a value's type, centred at (x, y)."""

    text: str
    x: float = 0.0
    y: float = 0.0

    @property
    def w(self) -> float:
        return text_width(self.text, SMALL) + 12

    h = 16.0


@dataclass
class Edge:
    """A routed edge: points from the source (below its label) to a port on the target's top."""

    source: str
    target: str
    role: str
    points: list[tuple[float, float]] = field(default_factory=list)
    left: bool = False  # the edge arrives from the right: its role text goes on the left of the arrow


@dataclass
class Cluster:
    """A frame around the boxes (and shape labels) of one block use, titled with the use and its block."""

    use: str
    title: str
    x: float
    y: float
    w: float
    h: float


@dataclass
class Layout:
    title: str
    width: float
    height: float
    boxes: list[Box]
    labels: list[Label]
    edges: list[Edge]
    clusters: list[Cluster] = field(default_factory=list)


def _line_height(line: list[Run]) -> float:
    return LINE + 3 if any(s.size >= TITLE for s in line) else LINE


def _box(node) -> Box:
    kind = node.layer.kind if node.layer is not None and node.kind == "layer" else node.kind
    shown = f"block {node.trace['block']}" if node.kind == "block" and node.trace.get("block") else kind
    if node.kind == "block" and node.trace.get("copies", 1) > 1:
        shown += f" × {node.trace['copies']}"
    lines = [[Run(node.id, TITLE, bold=True), Run(shown, TEXT, colour=MUTED, gap=8.0)]]
    if node.kind != "input":
        lines += [[Run(part)] for part in _wrap(describe(node))]
    if node.params:
        lines.append([Run(f"{node.params:,} parameters", SMALL, colour=MUTED)])
    if node.plan:
        kernels = _wrap(", ".join(node.plan), WRAP, sep=", ")
        lines += [[Run(("kernels: " if i == 0 else "") + k, SMALL, colour=KERNEL)] for i, k in enumerate(kernels)]
    return Box(node.id, kind, lines, hint=f"{node.label}\n{node.type}\n{node.span}")


# ------------------------------------------------------------------------------------------------ layout
def _layers(g: nx.DiGraph) -> dict[str, int]:
    """Longest-path layering; sources sit one layer above their first consumer."""
    layer: dict[str, int] = {}
    for v in nx.lexicographical_topological_sort(g):
        preds = list(g.predecessors(v))
        layer[v] = max((layer[u] + 1 for u in preds), default=0)
    for v in g.nodes:  # pull inputs down next to their first consumer
        if g.in_degree(v) == 0 and g.out_degree(v):
            layer[v] = min(layer[w] for w in g.successors(v)) - 1
    return layer


def _crossings(order: list[list[str]], down: dict[str, list[str]], pos: dict[str, int]) -> int:
    total = 0
    for row in order[:-1]:
        ends = [(pos[u], pos[v]) for u in row for v in down.get(u, ())]
        ends.sort()
        for i in range(len(ends)):
            for j in range(i + 1, len(ends)):
                if ends[j][1] < ends[i][1] and ends[j][0] != ends[i][0]:
                    total += 1
    return total


def _order(order: list[list[str]], up: dict[str, list[str]], down: dict[str, list[str]], sweeps: int = 8):
    """Barycentre sweeps, keeping the ordering with the fewest crossings (ties: the earlier one)."""

    def positions(o):
        return {v: i for row in o for i, v in enumerate(row)}

    best, best_cost = [list(r) for r in order], _crossings(order, down, positions(order))
    cur = [list(r) for r in order]
    for sweep in range(sweeps):
        rows = range(1, len(cur)) if sweep % 2 == 0 else range(len(cur) - 2, -1, -1)
        nbrs = up if sweep % 2 == 0 else down
        for r in rows:
            pos = positions(cur)
            key = {}
            for i, v in enumerate(cur[r]):
                ns = nbrs.get(v, ())
                key[v] = (sum(pos[n] for n in ns) / len(ns), i) if ns else (float(i), i)
            cur[r] = sorted(cur[r], key=key.__getitem__)
        cost = _crossings(cur, down, positions(cur))
        if cost < best_cost:
            best, best_cost = [list(r) for r in cur], cost
    return best


def _pack(row: list[str], width: dict[str, float], want: dict[str, float]) -> dict[str, float]:
    """Centres for ``row`` (left to right) closest to ``want`` in least squares with no overlap (pool adjacent
    violators on the offsets)."""
    offsets, o = [], 0.0
    for i, v in enumerate(row):
        if i:
            o += (width[row[i - 1]] + width[v]) / 2 + NODE_GAP
        offsets.append(o)
    blocks: list[list] = []  # [sum, count, first index]
    for i, v in enumerate(row):
        blocks.append([want[v] - offsets[i], 1, i])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c, _ = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out = {}
    for k, (s, c, first) in enumerate(blocks):
        last = blocks[k + 1][2] if k + 1 < len(blocks) else len(row)
        for i in range(first, last):
            out[row[i]] = s / c + offsets[i]
    return out


def layout(graph) -> Layout:
    """Place every box, label and edge of ``graph``'s picture."""
    g = nx.DiGraph()
    boxes = {n.id: _box(n) for n in graph.nodes()}
    boxes[RETURN] = Box(RETURN, "return", [[Run("return", TEXT, bold=True)]],
                        hint="outputs: " + ", ".join(graph.outputs))
    for b in boxes.values():
        b.size()
        g.add_node(b.id)
    roles = {}
    for u, v, d in graph.g.edges(data=True):
        g.add_edge(u, v)
        roles[u, v] = ", ".join((d["role"], *d.get("also", ())))
    for o in graph.outputs:
        g.add_edge(o, RETURN)
        roles[o, RETURN] = "return"
    labels = {u: Label(str(graph.node(u).type)) for u in g.nodes if g.out_degree(u)}
    layer = _layers(g)
    # long edges pass through one virtual point per layer crossed
    chains: dict[tuple[str, str], list[str]] = {}
    up: dict[str, list[str]] = {}
    down: dict[str, list[str]] = {}
    width = {v: max(boxes[v].w, labels[v].w if v in labels else 0.0) for v in g.nodes}
    for u, v in sorted(g.edges, key=lambda e: (layer[e[0]], e)):
        chain = [u] + [f"\x00{u}\x00{v}\x00{k}" for k in range(layer[u] + 1, layer[v])] + [v]
        for a, b in zip(chain, chain[1:]):
            down.setdefault(a, []).append(b)
            up.setdefault(b, []).append(a)
        for k, d in enumerate(chain[1:-1]):
            layer[d] = layer[u] + 1 + k
            width[d] = 8.0
        chains[u, v] = chain
    depth = max(layer.values()) + 1
    order: list[list[str]] = [[] for _ in range(depth)]
    topo = {v: i for i, v in enumerate(nx.lexicographical_topological_sort(g))}
    for v in sorted(layer, key=lambda v: (topo[v] if v in topo else topo[v.split("\x00")[1]], v)):
        order[layer[v]].append(v)
    order = _order(order, up, down)
    # x: pull towards neighbours, alternating down and up sweeps, then both ways
    x: dict[str, float] = {}
    for row in order:
        x.update(_pack(row, width, {v: 0.0 for v in row}))
    virtual = {d: chain[1:-1] for chain in chains.values() for d in chain[1:-1]}
    for sweep in range(8):
        rows = order if sweep % 2 == 0 else order[::-1]
        for row in rows:
            want = {}
            for v in row:
                if sweep >= 4 and v in virtual:  # last sweeps: a long edge runs straight where it can
                    ns = virtual[v]
                elif sweep >= 4:
                    ns = up.get(v, []) + down.get(v, [])
                else:
                    ns = (up if sweep % 2 == 0 else down).get(v, [])
                want[v] = sum(x[n] for n in ns) / len(ns) if ns else x[v]
            x.update(_pack(row, width, want))
    # y: layer bands, boxes centred in their band
    title = f"model {graph.name} · {graph.param_count:,} parameters"
    top = MARGIN + 26.0
    band_top, band_h = [], []
    for row in order:
        h = max((boxes[v].h for v in row if v in boxes), default=0.0)
        band_top.append(top)
        band_h.append(h)
        top += h + LAYER_GAP
    left = min(x[v] - width[v] / 2 for v in x)
    shift = MARGIN - left
    for v in x:
        x[v] += shift
    for v, b in boxes.items():
        k = layer[v]
        b.x, b.y = x[v] - b.w / 2, band_top[k] + (band_h[k] - b.h) / 2
    for u, lab in labels.items():
        lab.x, lab.y = x[u], boxes[u].y + boxes[u].h + 4 + lab.h / 2
    # edges: from under the source's label to a port on the target (ports ordered by where edges come from)
    edges = []
    ports: dict[str, list[tuple[str, str]]] = {}
    for (u, v), chain in chains.items():
        ports.setdefault(v, []).append((u, chain[-2]))
    port_x = {}
    for v, ins in ports.items():
        ins.sort(key=lambda p: (x[p[1]], p[0]))
        b = boxes[v]
        named = [text_width(t, SMALL) + 14 for u, _ in ins if (t := role_text(roles[u, v]))]
        step = min(max([24.0, *named]), (b.w - 16) / max(len(ins) - 1, 1))
        for i, (u, _) in enumerate(ins):
            port_x[u, v] = x[v] + (i - (len(ins) - 1) / 2) * step
    for (u, v), chain in sorted(chains.items()):
        pts = [(x[u], labels[u].y + labels[u].h / 2)]
        for d in chain[1:-1]:
            k = layer[d]
            pts += [(x[d], band_top[k]), (x[d], band_top[k] + band_h[k])]
        pts.append((port_x[u, v], boxes[v].y))
        edges.append(Edge(u, v, roles[u, v], pts, left=pts[-2][0] > pts[-1][0] + 0.5))  # text away from the curve
    right = max(max(x[v] + width[v] / 2 for v in x), MARGIN + text_width(title, TITLE, True))
    return Layout(title, right + MARGIN, top - LAYER_GAP + MARGIN, [boxes[v] for v in sorted(boxes, key=str)],
                  [labels[u] for u in sorted(labels)], edges, _clusters(graph, boxes, labels))


def _clusters(graph, boxes: dict[str, Box], labels: dict[str, Label]) -> list[Cluster]:
    out = []
    for use, nodes in blocks.block_uses(graph).items():
        parts = [(b.x, b.y, b.x + b.w, b.y + b.h) for b in (boxes[v] for v in nodes)]
        parts += [(lab.x - lab.w / 2, lab.y - lab.h / 2, lab.x + lab.w / 2, lab.y + lab.h / 2)
                  for lab in (labels[v] for v in nodes if v in labels)]
        x0, y0 = min(p[0] for p in parts) - 10, min(p[1] for p in parts) - 22
        x1, y1 = max(p[2] for p in parts) + 10, max(p[3] for p in parts) + 8
        name = blocks.block_name(graph, use, nodes)
        out.append(Cluster(use, f"{use} · block {name}" if name else use, x0, y0, x1 - x0, y1 - y0))
    return out


def _path(points: list[tuple[float, float]]) -> list[tuple[str, list[tuple[float, float]]]]:
    """Segments of an edge: vertical-tangent cubic curves between layers, straight runs through virtual points."""
    segs = []
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if abs(x0 - x1) < 0.5:
            segs.append(("L", [(x1, y1)]))
        else:
            k = (y1 - y0) / 2
            segs.append(("C", [(x0, y0 + k), (x1, y1 - k), (x1, y1)]))
    return segs


def _arrow(x: float, y: float) -> list[tuple[float, float]]:
    return [(x, y), (x - 4.0, y - 8.0), (x + 4.0, y - 8.0)]


def role_text(role: str) -> str | None:
    """What an edge's roles (``"x, context"``: one value in two roles) are worth printing: the context and named
    auxiliary inputs, not the main input ``x``, an operation's positional arguments (``arg0``) or ``return``."""
    names = [r.removeprefix("aux:") for r in role.split(", ") if r not in ("x", "return") and not r.startswith("arg")]
    return ", ".join(names) or None


# ------------------------------------------------------------------------------------------------ SVG
def _f(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


def to_svg(graph, collapse: bool = False) -> str:
    """The picture as a standalone SVG document (deterministic: equal graphs give equal text); ``collapse`` draws
    one box per block use."""
    lay = layout(graph.collapsed() if collapse else graph)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_f(lay.width)}" height="{_f(lay.height)}" '
           f'viewBox="0 0 {_f(lay.width)} {_f(lay.height)}" font-family="{FONT_FAMILY}" font-size="{_f(TEXT)}">',
           f"<title>{escape(lay.title)}</title>",
           f'<rect width="100%" height="100%" fill="#ffffff"/>',
           f'<text x="{_f(MARGIN)}" y="{_f(MARGIN + 13)}" font-size="{_f(TITLE)}" font-weight="bold" '
           f'fill="{INK}">{escape(lay.title)}</text>',
           *(f'<g class="cluster" data-use={quoteattr(c.use)}><rect x="{_f(c.x)}" y="{_f(c.y)}" '
             f'width="{_f(c.w)}" height="{_f(c.h)}" rx="8" fill="none" stroke="{COLOURS["block"][1]}" '
             f'stroke-dasharray="5,3"/><text x="{_f(c.x + 8)}" y="{_f(c.y + 14)}" font-size="{_f(SMALL)}" '
             f'font-weight="bold" fill="{COLOURS["block"][1]}">{escape(c.title)}</text></g>' for c in lay.clusters),
           '<g class="edges">']
    for e in lay.edges:
        d = f"M{_f(e.points[0][0])},{_f(e.points[0][1])}"
        for cmd, pts in _path(e.points[:-1] + [(e.points[-1][0], e.points[-1][1] - 7)]):
            d += " " + cmd + " ".join(f"{_f(px)},{_f(py)}" for px, py in pts)
        tip = _arrow(*e.points[-1])
        out.append(f'<g class="edge" data-source={quoteattr(e.source)} data-target={quoteattr(_name(e.target))} '
                   f'data-role={quoteattr(e.role)}><path d="{d}" fill="none" stroke="{EDGE}" stroke-width="1.3"/>'
                   f'<polygon points="{" ".join(f"{_f(a)},{_f(b)}" for a, b in tip)}" fill="{EDGE}"/></g>')
        role = role_text(e.role)
        if role:
            tx, ty = e.points[-1]
            anchor = ' text-anchor="end"' if e.left else ""
            out.append(f'<text x="{_f(tx - 5 if e.left else tx + 5)}" y="{_f(ty - 10)}" font-size="{_f(SMALL)}" '
                       f'font-style="italic" fill="{MUTED}"{anchor}>{escape(role)}</text>')
    out.append("</g>")
    out.append('<g class="shapes">')
    for lab in lay.labels:
        out.append(f'<g class="shape"><rect x="{_f(lab.x - lab.w / 2)}" y="{_f(lab.y - lab.h / 2)}" '
                   f'width="{_f(lab.w)}" height="{_f(lab.h)}" rx="8" fill="#ffffff" stroke="{EDGE}"/>'
                   f'<text x="{_f(lab.x)}" y="{_f(lab.y + 3.5)}" font-size="{_f(SMALL)}" text-anchor="middle" '
                   f'fill="{INK}">{escape(lab.text)}</text></g>')
    out.append("</g>")
    out.append('<g class="nodes">')
    for b in lay.boxes:
        fill, stroke = COLOURS.get(b.kind, COLOURS["op"])
        rx = 14 if b.kind in ("input", "return") else 5
        out.append(f'<g class="node" data-node={quoteattr(_name(b.id))}><title>{escape(b.hint)}</title>'
                   f'<rect x="{_f(b.x)}" y="{_f(b.y)}" width="{_f(b.w)}" height="{_f(b.h)}" rx="{rx}" '
                   f'fill="{fill}" stroke="{stroke}" stroke-width="1.4"/>')
        for (tx, ty), line in _line_positions(b):
            spans = "".join(f'<tspan{_dx(s)} font-size="{_f(s.size)}"{_bold(s)} fill="{s.colour}">{escape(s.text)}'
                            "</tspan>" for s in line)
            out.append(f'<text x="{_f(tx)}" y="{_f(ty)}">{spans}</text>')
        out.append("</g>")
    out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _dx(s: Run) -> str:
    return f' dx="{_f(s.gap)}"' if s.gap else ""


def _bold(s: Run) -> str:
    return ' font-weight="bold"' if s.bold else ""


def _name(box_id: str) -> str:
    return "return" if box_id == RETURN else box_id


def _line_positions(b: Box):
    """(baseline start, spans) for each line of a box; the return box's single line is centred."""
    y = b.y + PAD_Y
    for line in b.lines:
        h = _line_height(line)
        y += h
        x = b.x + PAD_X if b.kind != "return" else b.x + (b.w - sum(s.width for s in line)) / 2
        yield (x, y - 4), line
