"""A hypothesis strategy for random *valid* rpn2c programs across families, with inputs to run them on.

A program is a random chain of stages over one of three data kinds, with a dead branch and a duplicated
operation thrown in:
- images: grid heads (padding or aggregation patches, elementwise or non-elementwise κ, channels, groups) and
  patch compressions (max / mean / median), then flatten and a vector head;
- sequences: item heads with chain or attention interdependence (one or several identical heads), recurrent
  layers (with or without a state expansion), then pooling over items and a vector head;
- graphs: graph-interdependence heads on an edge list;
- vectors: heads and multi-head layers with random κ, ψ (dense, low-rank, masked, VeRA), π, channel counts and
  channel / head fusions (also a head fusion on a single head).
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

ELEMENTWISE = ["identity", "chebyshev(d = 2)", "legendre(d = 2)"]
NON_ELEMENTWISE = ["taylor(d = 2)"]


@st.composite
def _image_program(draw):
    c, hw = draw(st.integers(1, 3)), draw(st.sampled_from([4, 6, 8]))
    lines = [f"  input x: image[B, {c}, {hw}, {hw}]"]
    cur, feats, size = "x", c, hw
    for i in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["grid", "grid", "compress"]))
        if kind == "compress" and size >= 2 and size % 2 == 0:
            metric = draw(st.sampled_from(["patch_max(size = 2)", "patch_mean(size = 2)",
                                           'patch_pool(size = 2, metric = "median")']))
            lines.append(f"  s{i} = compress({cur}) {{ kappa = {metric} }}")
            size //= 2
        else:
            mode = draw(st.sampled_from(["padding", "padding", "aggregation"]))
            kappa = draw(st.sampled_from(ELEMENTWISE + NON_ELEMENTWISE)) if mode == "padding" else "identity"
            out = draw(st.integers(1, 4))
            groups = draw(st.sampled_from([1, feats])) if mode == "padding" and kappa == "identity" else 1
            out = out * groups
            channels = draw(st.integers(1, 2))
            fusion = "  channel_fusion = concat" if channels > 1 and draw(st.booleans()) else ""
            lines.append(f"  s{i} = head({cur}) {{ xi_attribute = grid_patch(size = 3, pad = 1, mode = \"{mode}\")"
                         f"  kappa = {kappa}  out = {out}  groups = {groups}  channels = {channels}{fusion} }}")
            feats = out * (channels if fusion else 1)
        cur = f"s{i}"
    lines.append(f"  f = flatten({cur})")
    lines.append(f"  f2 = flatten({cur})")  # a duplicate: merged by common_op
    lines.append(f"  dead = head(f2) {{ out = 3 }}")  # reaches no output: removed by dead_code
    lines.append("  y = head(f) { out = 3 }")
    return lines, {"x": (2, c, hw, hw)}


@st.composite
def _sequence_program(draw):
    t, f = draw(st.integers(1, 5)), draw(st.sampled_from([4, 6]))
    lines = [f"  input x: sequence[B, {t}, {f}]"]
    cur = "x"
    for i in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["chain", "attention", "recurrent"]))
        if kind == "chain":
            hops = draw(st.integers(1, 3))
            direction = draw(st.sampled_from(["forward", "bidirectional"]))
            kappa = draw(st.sampled_from(["identity", "chebyshev(d = 2)"]))
            ch = draw(st.integers(1, 2))
            lines.append(f"  s{i} = head({cur}) {{ xi_instance = chain(hops = {hops}, direction = \"{direction}\")"
                         f"  kappa = {kappa}  channels = {ch}  out = {f} }}")
        elif kind == "attention":
            heads = draw(st.integers(1, 3))
            causal = str(draw(st.booleans())).lower()
            lines.append(f"  s{i} = head({cur}) {{ heads = {heads}  xi_instance = low_rank_bilinear(rank = 2, "
                         f"causal = {causal})  out = {f}  fusion = concat_linear(out = {f}) }}")
        else:
            cell = draw(st.sampled_from(["gru", "lstm", "rnn"]))
            state = "  kappa_state = chebyshev(d = 2)" if draw(st.booleans()) else ""
            lines.append(f"  s{i} = recurrent({cur}) {{ cell = {cell}  out = {f}{state} }}")
        cur = f"s{i}"
    lines.append(f"  p = pool_items({cur})")
    lines.append("  y = head(p) { out = 2 }")
    return lines, {"x": (2, t, f)}


@st.composite
def _graph_program(draw):
    n, f = draw(st.integers(2, 7)), draw(st.sampled_from([3, 5]))
    lines = [f"  input x: nodes[N, {f}]", "  input edges: edges[2, E]"]
    cur = "x"
    for i in range(draw(st.integers(1, 2))):
        norm = draw(st.sampled_from(["symmetric", "row", "none"]))
        kappa = draw(st.sampled_from(["identity", "chebyshev(d = 2)"]))
        lines.append(f"  s{i} = head({cur}) {{ xi_instance = graph(edges = edges, norm = \"{norm}\", "
                     f"self_loops = true)  kappa = {kappa}  out = {f} }}")
        cur = f"s{i}"
    lines.append(f"  y = head({cur}) {{ out = 2 }}")
    e = draw(st.integers(1, 3 * n))
    return lines, {"x": (n, f), "edges": ("edges", n, e)}


PSI = ["identity", "lorr(r = 2)", "masking(p = 0.5)", "vera(r = 2)"]
CHANNEL_FUSION = ["mean", "sum", "max", "concat", "weighted"]
POST = ["", "  post = [relu]", "  post = [tanh]", "  post = [layer_norm]"]


@st.composite
def _head_body(draw, width, out):
    """Settings of one vector head reading ``width`` features (κ, ψ, out, channels): (text, output width)."""
    kappa = draw(st.sampled_from(["identity", "chebyshev(d = 2)"] + (["taylor(d = 2)"] if width <= 4 else [])))
    psi = draw(st.sampled_from(PSI))
    ch = draw(st.integers(1, 3))
    fusion = draw(st.sampled_from(CHANNEL_FUSION)) if ch > 1 else "mean"
    body = f"kappa = {kappa}  psi = {psi}  out = {out}  channels = {ch}  channel_fusion = {fusion}"
    return body, out * ch if fusion == "concat" else out


@st.composite
def _vector_program(draw):
    """Tabular data: heads and multi-head layers with random κ, ψ, π, channels, fusions and processing."""
    f = draw(st.sampled_from([3, 4, 6]))
    lines = [f"  input x: vector[B, {f}]"]
    cur, width = "x", f
    for i in range(draw(st.integers(1, 3))):
        out = draw(st.sampled_from([2, 3, 4]))
        if draw(st.booleans()):
            body, new_width = draw(_head_body(width, out))
            if draw(st.integers(0, 3)) == 0:  # a head fusion on the single head (it changes the width)
                new_width = draw(st.sampled_from([2, 5]))
                body += f"  fusion = concat_linear(out = {new_width})"
            heads = f"{{ {body}"
        else:
            bodies = [draw(_head_body(width, out)) for _ in range(draw(st.integers(2, 3)))]
            widths = [w for _, w in bodies]
            fusion = draw(st.sampled_from(["concat", "mean", "sum", f"concat_linear(out = {out})"]))
            if fusion in ("mean", "sum") and len(set(widths)) > 1:
                fusion = "concat"
            new_width = sum(widths) if fusion == "concat" else out if fusion.startswith("concat_") else widths[0]
            parts = " ".join(f"head h{j} {{ {b} }}" for j, (b, _) in enumerate(bodies))
            heads = f"{{ {parts}  fusion = {fusion}"
        pis = ["zero", "linear"] + (["identity"] if new_width == width else [])
        pi = draw(st.sampled_from(pis))
        kind = "head" if heads.startswith("{ kappa") else "layer"
        lines.append(f"  s{i} = {kind}({cur}) {heads}  pi = {pi}{draw(st.sampled_from(POST))} }}")
        cur, width = f"s{i}", new_width
    lines.append(f"  y = head({cur}) {{ out = 2 }}")
    return lines, {"x": (3, f)}


@st.composite
def programs(draw):
    """(spec text, input shapes, seed)."""
    lines, shapes = draw(st.one_of(_image_program(), _sequence_program(), _graph_program(), _vector_program()))
    text = "model random {\n" + "\n".join(lines) + "\n  return y\n}\n"
    return text, shapes, draw(st.integers(0, 2**16))


def make_inputs(shapes: dict, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in shapes.items():
        if shape[0] == "edges":
            _, n, e = shape
            out[name] = torch.randint(0, n, (2, e), generator=g)
        else:
            out[name] = torch.randn(*shape, dtype=torch.float64, generator=g)
    return out
