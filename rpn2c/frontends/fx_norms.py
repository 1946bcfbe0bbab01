"""The RMSNorm recogniser: RMS normalisation written out in a traced forward becomes one ``rms_norm`` op.

    h = x.to(torch.float32)                                 # optional: LlamaRMSNorm's upcast
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    y = self.weight * h.to(x.dtype)                         # optional weight; the cast back when upcast
        -> rms_norm(x, eps = eps[, upcast = true][, affine = false])

With the upcast the spec normalises in float32 whatever the input dtype, in the library's order of operations, so a
float64 model equals the library's (whose norm runs in float32). A norm that computes only the variance in float32
and scales the wide input by it (T5's) is another form and is not matched.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
import torch.fx as fx

from rpn2c.frontends.fx_match import Miss, calls as _is, shape as _shape, users as _users


@dataclass
class Match:
    x: fx.Node
    anchor: fx.Node
    eps: float
    upcast: bool
    weight: str | None
    nodes: set[fx.Node]


_MUL = (operator.mul, torch.mul, "mul")
_CAST = ("to", "float", "type")


def _cast_dtype(values: dict, node: fx.Node) -> torch.dtype | None:
    v = values.get(node)
    return v.dtype if _is(node, *_CAST) and isinstance(v, torch.Tensor) else None


def _other(node: fx.Node, one: fx.Node) -> object:
    a, b = node.args[:2]
    return b if a is one else a if b is one else None


def _squares(node: object, h: fx.Node) -> bool:
    if _is(node, "pow", torch.pow):
        return node.args[0] is h and node.args[1] == 2
    return _is(node, *_MUL) and node.args[0] is h and node.args[1] is h


def _match(values: dict, r: fx.Node) -> Match | None:
    """The norm around ``r = rsqrt(mean(h²) + eps)``, or None."""
    add = r.args[0]
    if not _is(add, operator.add, torch.add) or len(add.args) != 2 or not isinstance(add.args[1], float):
        return None
    mean = add.args[0]
    if not _is(mean, "mean", torch.mean) or not mean.kwargs.get("keepdim", len(mean.args) > 2 and mean.args[2]):
        return None
    dim = mean.args[1] if len(mean.args) > 1 else mean.kwargs.get("dim")
    if dim not in (-1, (-1,), [-1]):
        return None
    sq = mean.args[0]
    h = sq.args[0] if isinstance(sq, fx.Node) and sq.args else None
    if not isinstance(h, fx.Node) or not _squares(sq, h):
        return None
    users = _users(r)
    if len(users) != 1 or not _is(users[0], *_MUL):
        return None
    if _cast_dtype(values, h) == torch.float32 and _other(users[0], r) is h.args[0]:
        raise Miss("the variance is computed in float32 and scales the wider input (T5LayerNorm's form): rms_norm "
                   "normalises in one dtype (upcast = true: the whole norm in float32, LlamaRMSNorm's form)")
    if _other(users[0], r) is not h:
        return None
    normed = users[0]
    upcast = _cast_dtype(values, h) == torch.float32
    x = h.args[0] if upcast else h
    nodes = {add, mean, sq, r, normed} | ({h} if upcast else set())
    if upcast and set(_users(h)) != {sq, normed}:
        return None
    end = normed
    if upcast:
        back = _users(normed)
        if len(back) != 1 or _cast_dtype(values, back[0]) != values[x].dtype:
            return None
        end = back[0]
        nodes.add(end)
    weight = None
    users = _users(end)
    if len(users) == 1 and _is(users[0], *_MUL):
        w = _other(users[0], end)
        if isinstance(w, fx.Node) and w.op == "get_attr" and _shape(values, w) == _shape(values, x)[-1:]:
            weight, end = str(w.target), users[0]
            nodes |= {w, end}
    return Match(x, end, float(add.args[1]), upcast, weight, nodes)


def find(gm: fx.GraphModule, values: dict) -> tuple[dict[fx.Node, Match], dict[fx.Node, str]]:
    found, misses = {}, {}
    for node in gm.graph.nodes:
        if _is(node, torch.rsqrt, "rsqrt"):
            try:
                m = _match(values, node)
            except Miss as err:
                misses[node] = str(err)
                continue
            if m is not None:
                found[m.anchor] = m
    return found, misses


def emit(conv, node: fx.Node, m: Match):
    """``rms_norm(x, eps = …)`` for match ``m`` (at its anchor ``node``), its weight linked."""
    from rpn2c.frontends.kit import lit

    ctx = conv.ctx(node)
    x = conv.typed(ctx, conv.value(node, conv.env[m.x], "norm input"))
    options = [f"eps = {lit(m.eps)}"] + (["upcast = true"] if m.upcast else []) + \
              ([] if m.weight else ["affine = false"])
    path, _ = conv._owner(node)
    local = path[len(conv.path):].lstrip(".") if conv.path else path
    y = ctx.op("rms_norm", [x], ", ".join(options), name=conv.b.fresh(conv.base + local, "norm"),
               comment=f"[{path}] RMSNorm written out -> rms_norm"
                       + (": normalised in float32 and cast back, as the library does" if m.upcast else ""))
    if m.weight:
        conv.b.link(f"{y.name}.weight", conv.path, conv.module, m.weight, None, False, None)
    return y
