"""The graph picture (rpn2c.ir.picture): an SVG that names every node, shape and kernel, with no boxes overlapping;
the same picture from Jupyter (``_repr_svg_``) and from ``rpn2c graph --format svg|png``."""

from __future__ import annotations

import itertools
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import rpn2c
from rpn2c.ir.picture import describe, layout, to_svg
from rpn2c.passes import optimize
from rpn2c.runtime.cli import main

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted((ROOT / "specs").rglob("*.rpn"))
NS = "{http://www.w3.org/2000/svg}"

# fan-out and fan-in with edges that skip layers: a, b, c all read x; the sum reads layers of three depths
BRANCHES = """
model branches {
  input x: vector[B, 16]
  a = head(x) { out = 16 }
  b = head(a) { out = 16 }
  c = head(b) { out = 16 }
  d = head(x) { out = 16 }
  s = add(add(a, c), d)
  y = head(s) { out = 4 }
  z = head(x) { out = 4 }
  return y, z
}
"""


def _graphs():
    out = [(p.relative_to(ROOT).as_posix(), optimize(rpn2c.check_file(p))) for p in SPECS]
    return out + [("branches", optimize(rpn2c.check(BRANCHES)))]


GRAPHS = _graphs()


def _texts(root) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter(f"{NS}text")]


def _overlap(a, b, gap=0.0) -> bool:
    return a[0] < b[0] + b[2] + gap and b[0] < a[0] + a[2] + gap and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def _rect(el) -> tuple[float, ...]:
    return tuple(float(el.get(k)) for k in ("x", "y", "width", "height"))


@pytest.mark.parametrize("name,graph", GRAPHS, ids=[n for n, _ in GRAPHS])
def test_svg_names_every_node_shape_and_kernel(name, graph):
    root = ET.fromstring(graph._repr_svg_())
    assert root.tag == f"{NS}svg"
    texts = _texts(root)
    nodes = {g.get("data-node"): g for g in root.iter(f"{NS}g") if g.get("class") == "node"}
    assert set(nodes) == {n.id for n in graph.nodes()} | {"return"}
    for n in graph.nodes():  # the box's first line is the node's name, then its kind
        lines = ["".join(t.itertext()) for t in nodes[n.id].iter(f"{NS}text")]
        assert lines[0] == n.id + (n.layer.kind if n.kind == "layer" else n.kind)
        kernel_text = " ".join(lines).replace("kernels: ", "")
        assert all(k in [s.strip(",") for s in kernel_text.split()] for k in n.plan), (n.id, n.plan, lines)
    shapes = [t for g in root.iter(f"{NS}g") if g.get("class") == "shape" for t in _texts(g)]
    producers = {u for u, _ in graph.g.edges} | set(graph.outputs)
    assert sorted(shapes) == sorted(str(graph.node(u).type) for u in producers)  # one label per producing node
    edges = [(g.get("data-source"), g.get("data-target")) for g in root.iter(f"{NS}g") if g.get("class") == "edge"]
    assert sorted(edges) == sorted(list(graph.g.edges) + [(o, "return") for o in graph.outputs])
    assert any(f"model {graph.name}" in t for t in texts)


@pytest.mark.parametrize("name,graph", GRAPHS, ids=[n for n, _ in GRAPHS])
def test_boxes_and_shape_labels_do_not_overlap(name, graph):
    root = ET.fromstring(graph._repr_svg_())
    width, height = float(root.get("width")), float(root.get("height"))
    rects = [_rect(g.find(f"{NS}rect")) for g in root.iter(f"{NS}g") if g.get("class") in ("node", "shape")]
    for r in rects:  # inside the canvas
        assert r[0] >= 0 and r[1] >= 0 and r[0] + r[2] <= width + 0.1 and r[1] + r[3] <= height + 0.1
    for a, b in itertools.combinations(rects, 2):
        assert not _overlap(a, b, gap=4.0), (a, b)


@pytest.mark.parametrize("name,graph", GRAPHS, ids=[n for n, _ in GRAPHS])
def test_edges_run_down_from_source_to_a_port_on_the_target(name, graph):
    lay = layout(graph)
    box = {("return" if b.kind == "return" else b.id): b for b in lay.boxes}
    for e in lay.edges:
        src, dst = box[e.source], box["return" if e.target.endswith("return") else e.target]
        (x0, y0), (x1, y1) = e.points[0], e.points[-1]
        assert abs(x0 - (src.x + src.w / 2)) < 0.5 and y0 > src.y + src.h  # leaves below the source's centre
        assert abs(y1 - dst.y) < 1e-6 and dst.x < x1 < dst.x + dst.w  # arrives on the target's top edge
        assert all(b[1] >= a[1] for a, b in zip(e.points, e.points[1:]))  # always downwards


def test_every_line_of_text_fits_its_box():
    """Boxes are sized from measured text: every line fits, with padding."""
    from rpn2c.ir.picture import PAD_X

    for _, graph in GRAPHS:
        for b in layout(graph).boxes:
            assert max(sum(s.width for s in line) for line in b.lines) + 2 * PAD_X <= b.w + 1e-6


def test_compiled_model_graph_and_cli_draw_the_same_svg(capsys):
    spec = ROOT / "specs" / "cnn.rpn"
    model = rpn2c.compile_file(spec)
    assert main(["graph", str(spec), "--format", "svg"]) == 0
    out = capsys.readouterr().out
    assert out == model._repr_svg_() == optimize(rpn2c.check_file(spec))._repr_svg_()
    assert "kernels: conv" in out and "image[B, 16, 8, 8]" in out


def test_checked_graph_draws_without_kernels():
    graph = rpn2c.check_file(ROOT / "specs" / "cnn.rpn")  # not optimised: no kernel chosen yet
    svg = graph._repr_svg_()
    ET.fromstring(svg)
    assert "kernels:" not in svg and "c1" in svg and describe(graph.node("c1")) in svg


def test_png_and_svg_files_from_the_command_line(tmp_path, capsys):
    spec = ROOT / "specs" / "gcn.rpn"
    assert main(["graph", str(spec), "--format", "png", "--out", str(tmp_path / "g.png")]) == 0
    data = (tmp_path / "g.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    lay = layout(optimize(rpn2c.check_file(spec)))
    assert abs(width - lay.width * 2) <= 1 and abs(height - lay.height * 2) <= 1  # 2 px per SVG unit
    assert 300 < width < 4000 and 300 < height < 4000
    assert main(["graph", str(spec), "--format", "svg", "--out", str(tmp_path / "g.svg")]) == 0
    assert (tmp_path / "g.svg").read_text() == to_svg(optimize(rpn2c.check_file(spec)))
    assert capsys.readouterr().out == ""


def test_report_and_picture_share_the_recipe():
    from rpn2c.runtime import report

    assert report.describe is describe


# ------------------------------------------------------------------------------------------------ block uses
ENCODER6 = (ROOT / "specs" / "transformer.rpn").read_text(encoding="utf-8").split("model ")[0] + """
model encoder6(d = 32) {
  input x: sequence[B, T, d]
  h = repeat(6) encoder(x, d = d)
  z = encoder(h)
  y = head(z) { out = 4 }
  return y
}
"""


def _boxes(root) -> dict[str, tuple[float, ...]]:
    return {g.get("data-node"): _rect(g.find(f"{NS}rect")) for g in root.iter(f"{NS}g") if g.get("class") == "node"}


def test_repeated_blocks_are_framed_and_labelled_one_cluster_per_use():
    graph = optimize(rpn2c.check(ENCODER6))
    root = ET.fromstring(to_svg(graph))
    clusters = {g.get("data-use"): g for g in root.iter(f"{NS}g") if g.get("class") == "cluster"}
    assert list(clusters) == [f"h.{i}" for i in range(6)] + ["z"]
    boxes = _boxes(root)
    for use, g in clusters.items():
        assert "".join(g.find(f"{NS}text").itertext()) == f"{use} · block encoder"
        frame = _rect(g.find(f"{NS}rect"))
        inside = [n for n, r in boxes.items() if _overlap(frame, r)]
        assert sorted(inside) == sorted(n.id for n in graph.nodes() if n.id.startswith(use + "."))
        for n in inside:  # each of the use's boxes lies within its frame
            r = boxes[n]
            assert frame[0] < r[0] and r[0] + r[2] < frame[0] + frame[2]
            assert frame[1] < r[1] and r[1] + r[3] < frame[1] + frame[3]


def test_collapsed_pictures_draw_one_box_per_block_use_and_one_per_repeat(capsys):
    """``h = repeat(6) encoder(x)`` is one box ``block encoder × 6`` holding all six copies; ``z = encoder(h)``
    (a use of its own) another."""
    graph = optimize(rpn2c.check(ENCODER6))
    full, small = ET.fromstring(to_svg(graph)), ET.fromstring(to_svg(graph, collapse=True))
    boxes = _boxes(small)
    assert set(boxes) == {"x", "h", "z", "y", "return"}
    assert len(_boxes(full)) == 1 + 7 * 5 + 2
    assert float(small.get("height")) < float(full.get("height")) / 5
    edges = [(g.get("data-source"), g.get("data-target")) for g in small.iter(f"{NS}g") if g.get("class") == "edge"]
    assert sorted(edges) == sorted([("x", "h"), ("h", "z"), ("z", "y"), ("y", "return")])

    def text(node):
        return "".join(t for g in small.iter(f"{NS}g") if g.get("data-node") == node for t in g.itertext())

    stack = sum(n.params for n in graph.nodes() if n.id.startswith("h."))
    one = sum(n.params for n in graph.nodes() if n.id.startswith("z."))
    assert stack == 6 * one
    assert "block encoder × 6" in text("h") and "30 nodes (6 × 5)" in text("h")
    assert f"{stack:,} parameters" in text("h")
    assert "block encoder" in text("z") and "×" not in text("z") and f"{one:,} parameters" in text("z")
    assert "fused_heads" in text("h") and "sequence[B, T, 32]" in "".join(small.itertext())
    assert not [g for g in small.iter(f"{NS}g") if g.get("class") == "cluster"]


def test_a_collapsed_block_use_is_located_at_its_call():
    """Hovering a collapsed use shows where the use is written (the call), not its block's last statement."""
    lines = ENCODER6.splitlines()
    graph = optimize(rpn2c.check(ENCODER6, "e.rpn")).collapsed()
    for use, call in (("h", "encoder(x, d = d)"), ("z", "encoder(h)")):
        span = graph.node(use).span
        assert lines[span.line - 1].index(call) == span.col - 1, (use, span)


def test_a_tied_repeat_collapses_to_the_parameters_of_one_copy():
    spec = ENCODER6.replace("repeat(6)", "repeat(6, tie = true)")
    graph = optimize(rpn2c.check(spec))
    small = ET.fromstring(to_svg(graph, collapse=True))
    text = "".join(t for g in small.iter(f"{NS}g") if g.get("data-node") == "h" for t in g.itertext())
    one = sum(n.params for n in graph.nodes() if n.id.startswith("z."))
    assert "block encoder × 6" in text and f"{one:,} parameters" in text


def test_the_command_line_collapses_pictures_only(tmp_path, capsys):
    spec = tmp_path / "encoder6.rpn"
    spec.write_text(ENCODER6, encoding="utf-8")
    assert main(["graph", str(spec), "--format", "svg", "--collapse"]) == 0
    assert capsys.readouterr().out == to_svg(optimize(rpn2c.check_file(spec)), collapse=True)
    assert main(["graph", str(spec), "--format", "dot", "--collapse"]) == 2
    assert "--collapse applies to pictures" in capsys.readouterr().err
