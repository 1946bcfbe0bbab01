"""The relative-position-bias recogniser: a per-head bias a library adds to the attention scores, made in forward
from positions alone and one learned table (T5's ``compute_bias``), becomes ``relative_bias(x, heads = H, ...)``.

    rel = arange(S)[None, :] - arange(T)[:, None]                  # j − i, from sizes only
    bucket = _relative_position_bucket(rel, bidirectional, nb, md)  # any integer code
    b = self.relative_attention_bias(bucket).permute(2, 0, 1)[None]  # nn.Embedding(nb, H) -> [1, H, T, S]
        -> b = relative_bias(x, heads = H, buckets = nb, max_distance = md[, bidirectional = false])

It is identified by what it computes, not by the library's code (as the masks of ``fx_masks``): the subgraph reads
the model's inputs only through their sizes and one ``nn.Embedding`` [nb, H]; re-run with the sequence length set
to probe lengths, its bucket codes fix ``bidirectional`` and ``max_distance`` (T5's bucket function over the
offsets of a long probe), and its bias must equal ``relative_bias``'s on every probe.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx as fx
from torch import nn

from rpn2c.frontends.fx_match import Miss, ancestors

_LONG = 384  # the probe length that fixes max_distance (offsets up to 383 are checked)


@dataclass
class RelativeBias:
    node: fx.Node  # the bias [1, H, T, S]
    table: str  # the nn.Embedding's target in the graph module
    heads: int
    buckets: int
    bidirectional: bool
    max_distance: int
    nodes: set[fx.Node]


def _lengths(gm: fx.GraphModule, values: dict, up: set[fx.Node], t: int) -> list[fx.Node]:
    """The sizes the subgraph reads that equal the length ``t`` (ints read out of a ``torch.Size``)."""
    out = []
    for n in gm.graph.nodes:
        if n in up and type(values.get(n)) is int and values[n] == t and n.args and \
                isinstance(values.get(n.args[0]), torch.Size):
            out.append(n)
    return out


def _rerun(gm: fx.GraphModule, values: dict, up: set[fx.Node], lengths: list[fx.Node], length: int,
           want: list[fx.Node]) -> list:
    """``want`` recomputed with every node of ``lengths`` set to ``length`` (the rest of ``up`` as recorded)."""
    interp = fx.Interpreter(gm, garbage_collect_values=False)
    interp.env = dict(values)
    changed = set(lengths)
    for n in lengths:
        interp.env[n] = length
    with torch.no_grad():
        for n in gm.graph.nodes:
            if n in up and n not in changed and any(a in changed for a in n.all_input_nodes):
                interp.env[n] = interp.run_node(n)
                changed.add(n)
    return [interp.env[n] for n in want]


def _settings(codes: torch.Tensor, buckets: int) -> tuple[bool, int]:
    """``(bidirectional, max_distance)`` of T5's bucket function giving ``codes`` [L, L] (the smallest distance)."""
    from rpn2c.functional.position_bias import t5_buckets

    offsets = torch.cat([-torch.arange(codes.shape[0] - 1, 0, -1), torch.arange(codes.shape[1])])
    seen = torch.cat([codes[1:, 0].flip(0), codes[0]])
    for bidirectional in (True, False):
        exact = (buckets // 2 if bidirectional else buckets) // 2
        near = offsets.abs() < exact  # exact buckets, whatever the distance
        if exact < 1 or not torch.equal(t5_buckets(offsets, bidirectional, buckets, exact + 1)[near], seen[near]):
            continue
        for distance in range(exact + 1, 4 * codes.shape[0]):
            if exact >= 1 and torch.equal(t5_buckets(offsets, bidirectional, buckets, distance), seen):
                return bidirectional, distance
    raise Miss("the bias table is indexed by no T5 bucket of the key − query offset")


def relative_bias(gm: fx.GraphModule, values: dict, node: fx.Node) -> RelativeBias | None:
    """The relative bias ``node`` computes (None when it reads the inputs' values or no one embedding table;
    raises :class:`Miss` when it has that form but other values)."""
    from rpn2c.functional.position_bias import bucketed_bias

    value = values.get(node)
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.dim() != 4 or value.shape[0] != 1:
        return None
    up = ancestors(node, through_sizes=False)
    if any(n.op == "placeholder" for n in up):
        return None
    tables = [n for n in up if n.op == "call_module" and isinstance(gm.get_submodule(n.target), nn.Embedding)]
    if len(tables) != 1 or any(n.op == "get_attr" for n in up):
        return None
    table = tables[0]
    weight = gm.get_submodule(table.target).weight
    heads, t, s = value.shape[1:]
    if weight.shape[1] != heads or t != s:
        raise Miss(f"the bias [1, {heads}, {t}, {s}] reads a table {list(weight.shape)}: a relative bias of one "
                   "sequence has a [buckets, H] table")
    lengths = _lengths(gm, values, up, t)
    codes, = _rerun(gm, values, up, lengths, _LONG, [table.args[0]])
    bidirectional, distance = _settings(codes, weight.shape[0])
    for length in (t, t + 3, 2 * t + 5):
        got, = _rerun(gm, values, up, lengths, length, [node])
        want = bucketed_bias(weight.detach(), length, length, bidirectional, distance)
        if tuple(got.shape) != (1, heads, length, length) or not torch.equal(got[0], want.to(got.dtype)):
            raise Miss(f"the bias for {length} items is not T5's bucketed bias of its table (bidirectional = "
                       f"{bidirectional}, max_distance = {distance})")
    nodes = {n for n in up if isinstance(values.get(n), torch.Tensor)}  # sizes stay readable by the rest
    return RelativeBias(node, str(table.target), heads, weight.shape[0], bidirectional, distance, nodes)


def emit(conv, node: fx.Node, bias: RelativeBias, x):
    """The ``relative_bias`` value of ``bias`` on the sequence ``x`` (made once, read by every attention given it)."""
    if bias.node in conv.shared:
        return conv.shared[bias.node]
    ctx = conv.ctx(node)
    path = conv._qual(bias.table)
    options = f"heads = {bias.heads}, buckets = {bias.buckets}, max_distance = {bias.max_distance}" + \
        ("" if bias.bidirectional else ", bidirectional = false")
    v = ctx.op("relative_bias", [x], options, name=conv.b.fresh(conv.base + "position_bias", "bias"),
               kind="head_bias", shape=(bias.heads, *_shape(conv, bias.node)[-2:]),
               comment=f"[{path}] a per-head bias of the key − query offset's buckets (probed) -> relative_bias")
    conv.b.link(f"{v.name}.weight", path, conv.gm.get_submodule(bias.table), "weight", None, False, None)
    conv.shared[bias.node] = v
    return v


def _shape(conv, node: fx.Node) -> tuple[int, ...]:
    return tuple(conv.values[node].shape)
