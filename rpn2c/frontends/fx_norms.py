"""The RMSNorm recogniser: RMS normalisation written out in a traced forward becomes one ``rms_norm`` op.

    h = x.to(torch.float32)                                 # optional: LlamaRMSNorm's upcast
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    y = self.weight * h.to(x.dtype)                         # optional weight; the cast back when upcast
        -> rms_norm(x, eps = eps[, upcast = true][, affine = false])

    v = x.to(torch.float32).pow(2).mean(-1, keepdim=True)  # T5LayerNorm: only the variance in float32
    y = self.weight * (x * torch.rsqrt(v + eps))           #   -> rms_norm(x, eps = eps, upcast_variance = true)

With the upcast the spec normalises in float32 whatever the input dtype, in the library's order of operations, so a
float64 model equals the library's (whose norm runs in float32); T5's form keeps the input's precision and takes
only the mean square in float32, and ``upcast_variance`` does the same.
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
    variance: bool = False  # only mean(x²) in float32 (T5LayerNorm)


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
    variance = _cast_dtype(values, h) == torch.float32 and _other(users[0], r) is h.args[0]
    if variance:  # T5LayerNorm: x * rsqrt(mean(float32(x)²) + eps), x at its own precision
        if _users(h) != [sq]:
            raise Miss("the float32 copy of the input is read outside the mean square")
        x, normed = h.args[0], users[0]
        nodes, end = {h, add, mean, sq, r, normed}, normed
        back = _users(normed)
        if len(back) == 1 and _cast_dtype(values, back[0]) == values[x].dtype:  # the cast back of a half input
            end = back[0]
            nodes.add(end)
        return _weighted(values, Match(x, end, float(add.args[1]), False, None, nodes, variance=True))
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
    return _weighted(values, Match(x, end, float(add.args[1]), upcast, None, nodes))


def _weighted(values: dict, m: Match) -> Match:
    """``m`` extended by its scale ``self.weight * y`` when one follows."""
    users = _users(m.anchor)
    if len(users) == 1 and _is(users[0], *_MUL):
        w = _other(users[0], m.anchor)
        if isinstance(w, fx.Node) and w.op == "get_attr" and _shape(values, w) == _shape(values, m.x)[-1:]:
            m.weight, m.anchor = str(w.target), users[0]
            m.nodes |= {w, m.anchor}
    return m


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
              (["upcast_variance = true"] if m.variance else []) + ([] if m.weight else ["affine = false"])
    path, _ = conv._owner(node)
    local = path[len(conv.path):].lstrip(".") if conv.path else path
    y = ctx.op("rms_norm", [x], ", ".join(options), name=conv.b.fresh(conv.base + local, "norm"),
               comment=f"[{path}] RMSNorm written out -> rms_norm"
                       + (": normalised in float32 and cast back, as the library does" if m.upcast else "")
                       + (": the mean square in float32, as the library takes it" if m.variance else ""))
    if m.weight:
        conv.b.link(f"{y.name}.weight", conv.path, conv.module, m.weight, None, False, None)
    return y


# ------------------------------------------------------------------------------------------------ weighted LayerNorm
@dataclass
class Scaled:
    """``ln(x) * (w + c)`` with ``ln`` an ``nn.LayerNorm`` without affine and ``w`` a parameter [F] read in forward
    (x-transformers' LayerNorm, ``c = 1`` with ``unit_offset``): ``layer_norm(bias = false, offset = c)``, weight ``w``."""

    x: fx.Node
    anchor: fx.Node
    norm: str
    weight: str
    nodes: set[fx.Node]
    offset: float = 0.0


def _parameter(values: dict, node: object, width: int) -> tuple[str, set, float] | None:
    """``self.w`` or ``self.w + c`` of shape [width] -> (target, nodes, offset c)."""
    if _is(node, operator.add, torch.add) and len(node.args) == 2 and isinstance(node.args[1], (int, float)) \
            and not isinstance(node.args[1], bool):
        found = _parameter(values, node.args[0], width)
        if found and len(_users(node)) == 1 and not found[2]:
            return found[0], found[1] | {node}, float(node.args[1])
        return None
    if isinstance(node, fx.Node) and node.op == "get_attr" and _shape(values, node) == (width,):
        return str(node.target), {node}, 0.0
    return None


def find_scaled(gm: fx.GraphModule, values: dict) -> tuple[dict[fx.Node, Scaled], dict[fx.Node, str]]:
    from torch import nn

    found, misses = {}, {}
    for node in gm.graph.nodes:
        if node.op != "call_module":
            continue
        ln = gm.get_submodule(node.target)
        users = _users(node)
        if type(ln) is not nn.LayerNorm or ln.elementwise_affine or len(ln.normalized_shape) != 1 or \
                len(users) != 1 or not _is(users[0], *_MUL):
            continue
        w = _parameter(values, _other(users[0], node), ln.normalized_shape[0])
        if w is None:
            misses[users[0]] = "the LayerNorm's output is scaled by no parameter [F] (self.gamma [+ c])"
            continue
        found[users[0]] = Scaled(node.args[0], users[0], str(node.target), w[0], {node, users[0]} | w[1], w[2])
    return found, misses


def emit_scaled(conv, node: fx.Node, m: Scaled):
    """``layer_norm(x, eps, bias = false)`` with its weight linked to the parameter."""
    from rpn2c.frontends.kit import lit

    ln = conv.gm.get_submodule(m.norm)
    ctx = conv.ctx(node)
    x = conv.typed(ctx, conv.value(node, conv.env[m.x], "norm input"))
    path, _ = conv._owner(node)
    local = path[len(conv.path):].lstrip(".") if conv.path else path
    offset = f", offset = {lit(m.offset)}" if m.offset else ""
    y = ctx.op("layer_norm", [x], f"eps = {lit(float(ln.eps))}, bias = false{offset}",
               name=conv.b.fresh(conv.base + local, "norm"),
               comment=f"[{path or 'root'}] LayerNorm without affine times a parameter -> layer_norm(bias = false)")
    conv.b.link(f"{y.name}.weight", conv.path, conv.module, m.weight, None, False, None)
    return y
