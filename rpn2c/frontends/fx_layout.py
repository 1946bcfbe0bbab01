"""fx handlers for layout changes torch writes with permute / view / flatten / expand / indexing, and for
torchvision's stochastic depth (``fx_import`` asks :func:`convert` first for every node).

    x.permute(0, 2, 3, 1)  ... per-position layers ...  .permute(0, 3, 1, 2)   -> to_items ... to_grid(size = [H, W])
    conv(x).flatten(2).transpose(1, 2)                                         -> to_items (ViT patch tokens)
    x.view(B, g, C // g, H, W).transpose(1, 2).reshape(B, C, H, W)             -> channel_shuffle(groups = g)
    gate.expand_as(x) * x                                                      -> mul (the size-1 axes broadcast)
    x[:, :, :-k] (a signal), x[:, a:b] (channels)                              -> slice_positions / slice_features
    stochastic_depth(x, p, mode, self.training)                                -> stochastic_depth(p, mode)

A channels-last grid ``[B, H, W, C]`` is kept as items ``[B, H·W, C]`` (one item per position, row-major), so that
nn.Linear, nn.LayerNorm(C), activations and elementwise ops act per position exactly as torch's do on the last
axis; the permute back to channels-first is ``to_grid``. Intermediate views (a grid flattened to ``[B, C, N]``, a
grid viewed as ``[B, g, C/g, ...]``, an expanded value) are held until the node that completes the pattern.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from rpn2c.frontends.kit import Value, lit

PASS = object()  # "not a layout node": fx_import converts it by its own table


@dataclass(eq=False)
class ChannelsLast:
    """A grid permuted to channels-last ``shape`` = [B, *S, C], held as items [B, ΠS, C]."""

    items: Value
    shape: tuple[int, ...]


@dataclass(eq=False)
class FlatGrid:
    """A grid [B, C, *S] flattened to [B, C, ΠS] (``x.flatten(2)``): awaiting ``transpose(1, 2)``."""

    grid: Value


@dataclass(eq=False)
class Grouped:
    """A grid [B, C, *S] viewed as [B, g, C/g, *S] (``swapped``: after ``transpose(1, 2)``)."""

    grid: Value
    groups: int
    swapped: bool = False


@dataclass(eq=False)
class Expanded:
    """``v.expand(...)`` / ``v.expand_as(x)`` of a value with size-1 axes: usable as an operand of add / mul / sub,
    where the spec's broadcast gives the same values."""

    value: Any
    shape: tuple[int, ...]


WRAPPERS = (ChannelsLast, FlatGrid, Grouped, Expanded)
_ELEMENTWISE = ("add", "mul", "sub", "iadd", "imul", "isub", "add_", "mul_", "sub_")


def _name(node: fx.Node) -> str:
    t = node.target
    return t if isinstance(t, str) else getattr(t, "__name__", "")


def _is_stochastic_depth(node: fx.Node) -> bool:
    t = node.target
    return node.op == "call_function" and getattr(t, "__name__", "") == "stochastic_depth" and \
        (getattr(t, "__module__", "") or "").startswith("torchvision.ops")


def _perm(node: fx.Node, nd: int, args: tuple, kwargs: dict) -> list[int] | None:
    """The axis order of a permute / transpose node (``y.shape[i] = x.shape[perm[i]]``), else None."""
    name = _name(node)
    if name == "permute":
        dims = list(args[1:]) or list(kwargs.get("dims", ()))
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = list(dims[0])
        return [d % nd for d in dims] if sorted(d % nd for d in dims) == list(range(nd)) else None
    if name in ("transpose", "swapaxes", "swapdims"):
        d0 = args[1] if len(args) > 1 else kwargs.get("dim0")
        d1 = args[2] if len(args) > 2 else kwargs.get("dim1")
        if not isinstance(d0, int) or not isinstance(d1, int):
            return None
        perm = list(range(nd))
        perm[d0 % nd], perm[d1 % nd] = perm[d1 % nd], perm[d0 % nd]
        return perm
    return None


def convert(conv, node: fx.Node, args: tuple, kwargs: dict) -> Any:
    """The node's spec value when it is a layout node (or reads a held view), else :data:`PASS`."""
    flat: list = []
    fx.node.map_aggregate((args, kwargs), flat.append)
    held = [a for a in flat if isinstance(a, WRAPPERS)]
    if _is_stochastic_depth(node):
        return _stochastic_depth(conv, node, args, kwargs)
    if held:
        return _on_held(conv, node, args, kwargs, held)
    if node.op not in ("call_method", "call_function") or not args:
        return PASS
    x, name, out = args[0], _name(node), conv.values.get(node)
    if name in ("expand", "expand_as") and (hasattr(x, "vector") or isinstance(x, Value)) and \
            isinstance(out, torch.Tensor):  # a value (or a per-sample vector viewed as [B, C, 1, ...]) with size-1 axes
        return x if isinstance(x, Value) and tuple(out.shape) == x.shape else Expanded(x, tuple(out.shape))
    if not isinstance(x, Value):
        return PASS
    nd = len(x.shape)
    if x.kind is None and nd in (4, 5) and _perm(node, nd, args, kwargs) == [0, *range(2, nd), 1]:
        conv.ctx(node).grid_input(x, nd - 2)  # a model input permuted to channels-last: a channels-first grid
    if x.kind != "grid" or not isinstance(out, torch.Tensor):
        return PASS
    if name in ("permute", "transpose", "swapaxes", "swapdims") and nd > 3:
        if _perm(node, nd, args, kwargs) == [0, *range(2, nd), 1]:
            ctx = conv.ctx(node)
            y = ctx.op("to_items", [x], kind="items", prefix="pos", time_major=False,
                       shape=(x.shape[0], math.prod(x.shape[2:]), x.shape[1]),
                       comment=f"{ctx.where()} -> to_items: channels-last [B, *S, C] is one item per position "
                               "(row-major); per-position layers act on the items")
            return ChannelsLast(y, tuple(out.shape))
    if name in ("flatten", "view", "reshape") and tuple(out.shape) == x.shape:
        return x  # flatten(2) of a signal, a view to its own shape
    if name in ("flatten", "view", "reshape") and nd > 3 and \
            tuple(out.shape) == (*x.shape[:2], math.prod(x.shape[2:])):
        return FlatGrid(x)
    if name in ("view", "reshape") and out.ndim in (3, 4, 5) and tuple(out.shape[:2]) == x.shape[:2] and \
            math.prod(out.shape[2:]) == math.prod(x.shape[2:]):
        return _regrid(conv, node, x, tuple(out.shape[2:]))
    if name in ("view", "reshape") and out.ndim == nd + 1 and out.shape[0] == x.shape[0] \
            and out.shape[1] * out.shape[2] == x.shape[1] and tuple(out.shape[3:]) == tuple(x.shape[2:]):
        return Grouped(x, int(out.shape[1]))
    if name == "getitem" and x.batched:
        return _slice_grid(conv, node, x, args[1])
    return PASS


def _on_held(conv, node: fx.Node, args: tuple, kwargs: dict, held: list) -> Any:
    name, out = _name(node), conv.values.get(node)
    w = held[0]
    if name in ("contiguous", "clone"):
        return w
    if isinstance(w, FlatGrid) and _perm(node, 3, args, kwargs) == [0, 2, 1]:
        ctx = conv.ctx(node)
        y = ctx.op("to_items", [w.grid], kind="items", prefix="tokens", time_major=False,
                   comment=f"{ctx.where()} -> to_items: flatten(2).transpose(1, 2) makes each position a token "
                           "(row-major), its channels the features")
        return y
    if isinstance(w, FlatGrid) and len(held) == 1:  # read as a signal [B, C, ΠS]
        sig = _regrid(conv, node, w.grid, (math.prod(w.grid.shape[2:]),))
        return conv.convert_with(node, {w: sig})
    if isinstance(w, Grouped) and not w.swapped and _perm(node, len(w.grid.shape) + 1, args, kwargs) == \
            [0, 2, 1, *range(3, len(w.grid.shape) + 1)]:
        return Grouped(w.grid, w.groups, True)
    if isinstance(w, Grouped) and w.swapped and name in ("view", "reshape", "flatten") and \
            isinstance(out, torch.Tensor) and tuple(out.shape) == w.grid.shape:
        ctx = conv.ctx(node)
        return ctx.op("channel_shuffle", [w.grid], f"groups = {w.groups}", kind="grid", prefix="shuffle",
                      comment=f"{ctx.where()} -> channel_shuffle: view(B, {w.groups}, C/{w.groups}, ...)"
                              ".transpose(1, 2) then back to [B, C, ...] permutes the channels")
    if isinstance(w, Expanded) and name in _ELEMENTWISE and len(held) == 1:
        return conv.convert_with(node, {w: w.value})
    if isinstance(w, ChannelsLast) and all(isinstance(h, ChannelsLast) for h in held):
        return _per_position(conv, node, args, kwargs, held)
    conv.fail(node, held_message(w))


_HELD_USES = {
    ChannelsLast: "on channels-last values only per-position operations convert (Linear, LayerNorm over the "
                  "channels, activations, elementwise ops), and the permute back to channels-first",
    FlatGrid: "a flattened grid converts as patch tokens, flatten(2).transpose(1, 2), or as a signal",
    Grouped: "a grid viewed in channel groups converts only as a channel shuffle, "
             "view(B, g, C // g, ...).transpose(1, 2).reshape(B, C, ...)",
    Expanded: "an expanded value converts only as an operand of add, mul or sub (where it broadcasts)",
}


def held_message(w) -> str:
    """Why a held view cannot be used where it is (it reached a node that completes no pattern)."""
    return f"it reads {_held_text(w)}; {_HELD_USES[type(w)]}"


def _held_text(w) -> str:
    if isinstance(w, ChannelsLast):
        return f"a channels-last grid {list(w.shape)}"
    if isinstance(w, FlatGrid):
        return f"a grid {list(w.grid.shape)} flattened to [B, C, N]"
    if isinstance(w, Grouped):
        return f"a grid {list(w.grid.shape)} viewed in {w.groups} channel groups"
    return f"a value expanded to {list(w.shape)}"


def _per_position(conv, node: fx.Node, args: tuple, kwargs: dict, held: list) -> Any:
    """A node on channels-last values: converted on their items (torch's shapes seen as [B, ΠS, C]); its result
    is channels-last again, or the permute back is to_grid."""
    w = held[0]
    nd = len(w.shape)
    if _perm(node, nd, args, kwargs) == [0, nd - 1, *range(1, nd - 1)]:
        ctx = conv.ctx(node)
        size = list(w.shape[1:-1])
        return ctx.op("to_grid", [w.items], f"size = {lit(size)}", kind="grid", prefix="grid",
                      comment=f"{ctx.where()} -> to_grid: back to channels-first, item n at position n (row-major)")
    out = conv.values.get(node)
    if not isinstance(out, torch.Tensor) or out.ndim != nd or tuple(out.shape[:-1]) != w.shape[:-1]:
        conv.fail(node, held_message(w))
    inputs = [n for n in node.all_input_nodes if isinstance(conv.env.get(n), ChannelsLast)]
    saved = {n: conv.values[n] for n in (*inputs, node)}
    try:
        for n in (*inputs, node):
            t = conv.values[n]
            conv.values[n] = t.reshape(t.shape[0], -1, t.shape[-1])
        y = conv.convert_with(node, {h: h.items for h in held})
    finally:
        conv.values.update(saved)
    if not isinstance(y, Value) or y.kind != "items":
        conv.fail(node, held_message(w))
    return ChannelsLast(y, tuple(out.shape))


def _regrid(conv, node: fx.Node, x: Value, size: tuple[int, ...]) -> Value:
    """A grid [B, C, *S] viewed as [B, C, *S'] (ΠS = ΠS', row-major): to_items, then to_grid(size = S')."""
    ctx = conv.ctx(node)
    pos = ctx.op("to_items", [x], kind="items", prefix="pos", time_major=False,
                 shape=(x.shape[0], math.prod(x.shape[2:]), x.shape[1]),
                 comment=f"{ctx.where()}: {list(x.shape)} viewed as {[*x.shape[:2], *size]}: the positions in "
                         "row-major order as items ...")
    return ctx.op("to_grid", [pos], f"size = {lit(list(size))}", kind="grid", prefix="grid",
                  shape=(*x.shape[:2], *size), comment="  ... placed back row-major on the new grid")


def _slice_grid(conv, node: fx.Node, x: Value, index: Any) -> Any:
    """``x[:, a:b]`` (channels) and ``x[:, :, s:e, ...]`` (positions) of a grid: slice_features / slice_positions."""
    parts = list(index) if isinstance(index, tuple) else [index]
    if Ellipsis in parts:
        i = parts.index(Ellipsis)
        parts[i:i + 1] = [slice(None)] * (len(x.shape) - len(parts) + 1)
    full = slice(None)
    if not parts or parts[0] != full or len(parts) > len(x.shape) or \
            not all(isinstance(p, slice) and p.step in (None, 1) for p in parts):
        return PASS
    ctx = conv.ctx(node)
    y = x
    for axis, p in enumerate(parts[1:], start=1):
        if p == full:
            continue
        bounds = f"start = {p.start or 0}" + ("" if p.stop is None else f", stop = {p.stop}")
        shape = list(y.shape)
        shape[axis] = len(range(shape[axis])[p])
        if axis == 1:
            y = ctx.op("slice_features", [y], bounds, kind="grid", prefix="chan", shape=shape,
                       comment=f"{ctx.where()} -> slice_features: channels [{p.start or ''}:{p.stop or ''}]")
        else:
            y = ctx.op("slice_positions", [y], f"axis = {axis - 2}, {bounds}", kind="grid", prefix="crop",
                       shape=shape, comment=f"{ctx.where()} -> slice_positions: positions [{p.start or ''}:"
                                            f"{p.stop or ''}] of spatial axis {axis - 2}")
    return y


def _stochastic_depth(conv, node: fx.Node, args: tuple, kwargs: dict) -> Value:
    """torchvision's ``stochastic_depth(x, p, mode, training)``: the stochastic_depth processing, which is the
    identity in eval and drops rows (mode "row") or the batch ("batch") in training by torchvision's own draws.
    Tracing runs in eval mode, so ``training=self.training`` reads False: the spec follows the model's mode."""
    names = ("input", "p", "mode", "training")
    o = dict(zip(names, args))
    o.update({k: v for k, v in kwargs.items() if k in names})
    x = o.get("input")
    if not isinstance(x, Value):
        conv.fail(node, "its input is not a value computed from the model's inputs")
    if o.get("training", True) is True:
        conv.fail(node, "training=True drops rows even in eval mode; pass training=self.training")
    p, mode = o.get("p"), o.get("mode")
    if not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0 or mode not in ("row", "batch"):
        conv.fail(node, f"p={p!r}, mode={mode!r}: torchvision needs 0 <= p <= 1 and mode 'row' or 'batch'")
    if x.time_major:
        conv.fail(node, "a time-first sequence: torch would draw per time step, the spec per sample")
    ctx = conv.ctx(node)
    y, _ = ctx.process(x, "stochastic_depth", f"p = {lit(float(p))}, mode = {lit(mode)}",
                       comment=f"drops the branch per {'sample' if mode == 'row' else 'batch'} in training, "
                               "the identity in eval")
    return y
