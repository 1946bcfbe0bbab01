"""fx handlers for tensors a model reads or makes in ``forward`` rather than through a converted module
(``fx_import`` asks :func:`convert` first for every node).

    self.pos_embedding + x, self.gamma * x         -> param p: sequence[1, T, d] / image[1, C, 1, 1]; add / mul
    torch.cat([self.cls.expand(B, -1, -1), x], 1)  -> param cls: sequence[1, 1, d]; concat_items(cls, x)
    F.linear(h, self.enc.weight.t(), self.bias)    -> a head with psi = tied(enc, transpose = true) (sharing.py)
    F.layer_norm(x, s, self.w, self.b)             -> layer_norm with those tensors as its affine
    F.embedding(ids, self.table)                   -> embedding(ids, ...) holding that table
    x + self.pos(torch.arange(t))                  -> learned_position(x, max_len = L) (its table: the embedding's)
    ids.eq(pad) / ids == pad                        -> token_mask(ids, pad = p) (a key padding mask)
    attn_mask = torch.ones(t, t).triu(1).bool()     -> causal = true (any causal mask made from sizes)

A parameter read in forward becomes a spec ``param`` (its own tensor, linked to the torch one) or, where a module's
converter can take it (F.linear / F.layer_norm / F.embedding), the weights of the equivalent module: the same torch
tensor, so a weight also read by another module stays one tensor (``sharing.py``).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from rpn2c.frontends import fx_layout
from rpn2c.frontends.kit import Context, Value, lit

PASS = object()  # "reads no parameter": fx_import converts the node by its own tables

_ELEMENTWISE = {operator.add: "add", operator.iadd: "add", torch.add: "add", "add": "add", operator.mul: "mul",
                operator.imul: "mul", torch.mul: "mul", "mul": "mul", operator.sub: "sub", operator.isub: "sub",
                torch.sub: "sub", "sub": "sub"}
_GRID = {3: "signal", 4: "image", 5: "volume"}


@dataclass(eq=False)
class Attr:
    """A parameter or buffer read in forward (``self.<target>``), as viewed: ``shape`` (after unsqueeze / view /
    indexing with None), ``transpose`` (after ``.t()`` / ``.T``); ``expanded`` after ``.expand``."""

    node: fx.Node
    target: str
    tensor: torch.Tensor
    shape: tuple[int, ...]
    transpose: bool = False
    expanded: bool = False


@dataclass(eq=False)
class Positions:
    """``emb(torch.arange(n))``: rows 0..n−1 of an embedding's table, one per position."""

    module: nn.Embedding
    path: str
    n: int
    scale: float = 1.0  # times a constant (x-transformers' AbsolutePositionalEmbedding: dim ** -0.5)


@dataclass(eq=False)
class Rows:
    """A batch-first sequence ``[B, T, F]`` viewed as its rows ``[B·T, F]`` (``x.view(-1, x.size(-1))``): usable
    only as the input of ``torch.addmm(b, rows, W)`` (GPT-2's ``Conv1D``), a linear head on every item."""

    x: Value


class CausalMask:
    """A causal attention mask made from sizes in forward: the attention converters read it as ``causal = true``."""


def attr(conv, node: fx.Node) -> Attr:
    t = conv.gm.get_parameter(node.target) if _is_param(conv.gm, node.target) else conv.gm.get_buffer(node.target)
    return Attr(node, str(node.target), t, tuple(t.shape))


def _is_param(gm, target) -> bool:
    try:
        gm.get_parameter(target)
        return True
    except AttributeError:
        return False


def convert(conv, node: fx.Node, args: tuple, kwargs: dict) -> Any:
    """The node's spec value when it reads a parameter, positions or a mask made in forward, else :data:`PASS`."""
    flat: list = []
    fx.node.map_aggregate((args, kwargs), flat.append)
    if any(isinstance(a, fx_layout.WRAPPERS) for a in flat):
        return PASS  # a held layout view: fx_layout unwraps it and converts the node again (convert_with)
    mine = [a for a in flat if isinstance(a, (Attr, Positions))]
    if node.op == "call_function" and node.target in (F.linear, F.layer_norm, F.embedding) and mine:
        return _as_module(conv, node, args, kwargs)
    if node.op == "call_function" and node.target is torch.addmm and len(args) == 3 and isinstance(args[1], Rows):
        return _addmm_rows(conv, node, args, kwargs)
    if not mine:
        if node.op == "call_module":
            return _module_call(conv, node, args, kwargs)
        scaled = _scalar(conv, node, args, kwargs)
        if scaled is not PASS:
            return scaled
        if node.op in ("call_method", "call_function") and node.target in ("eq", operator.eq, torch.eq, "ne",
                                                                           operator.ne, torch.ne):
            return _token_mask(conv, node, args)
        return PASS
    first = args[0] if args else None
    name = node.target
    out = conv.values.get(node)
    if isinstance(first, Positions) and name in ("unsqueeze", "expand", "expand_as", torch.unsqueeze,
                                                 operator.getitem, "contiguous", "to"):
        return first  # positions viewed as [1, T, d] / [B, T, d]: added to the sequence all the same
    if isinstance(first, Attr) and not isinstance(first.tensor, nn.Parameter) and isinstance(out, torch.Tensor) \
            and len(mine) == 1 and not any(isinstance(a, Value) for a in flat):
        return out  # a buffer sliced or cast (a registered causal mask): a tensor made in forward
    if isinstance(first, Attr) and isinstance(out, torch.Tensor) and len(mine) == 1:
        if name in ("t", torch.t) or (name in ("transpose", torch.transpose) and first.tensor.ndim == 2) or \
                (name is getattr and args[1] in ("T", "mT") and first.tensor.ndim == 2):
            return replace(first, transpose=not first.transpose, shape=tuple(out.shape))
        if name in ("expand", "expand_as", "repeat"):
            return replace(first, expanded=True)
        if name in ("unsqueeze", "view", "reshape", torch.unsqueeze, torch.reshape, operator.getitem, "contiguous",
                    "to", "type_as", "float", "double") and out.numel() == first.tensor.numel():
            return replace(first, shape=tuple(out.shape))
    if name in _ELEMENTWISE and len(args) == 2:
        return _elementwise(conv, node, _ELEMENTWISE[name], args, kwargs)
    if name in (torch.cat, torch.concat, torch.concatenate):
        parts = args[0] if args else kwargs.get("tensors")
        named = [free(conv, node, p, _like(parts, p)) if isinstance(p, Attr) else p for p in parts]
        return conv.dispatch(node, (named, *args[1:]), kwargs)
    what = mine[0].target if isinstance(mine[0], Attr) else f"{mine[0].path}(arange)"
    kind = "a buffer" if isinstance(mine[0], Attr) and not isinstance(mine[0].tensor, nn.Parameter) else "a parameter"
    conv.fail(node, f"it reads '{what}' directly in forward ({kind}): a tensor read in forward converts as an "
                    "operand of add / mul / sub / cat (a spec `param`), a weight of F.linear / F.layer_norm / "
                    "F.embedding, a module's own statistics and affine in F.batch_norm, or through .t() / .expand() / "
                    ".unsqueeze() / .view() on the way there")


def _scalar(conv, node: fx.Node, args: tuple, kwargs: dict) -> Any:
    """``x * c``, ``c * x``, ``x / c`` with a Python number c = the processing ``scale(by = c)``; ``x + P`` with P
    the sinusoidal table of x's length and width (a positional-encoding buffer) = ``sinusoidal_position(x)``."""
    name = node.target
    if len(args) != 2 or kwargs:
        return PASS
    a, b = args
    if name in (operator.mul, torch.mul, "mul", operator.truediv, torch.div, "div") and \
            (isinstance(a, Value) != isinstance(b, Value)):
        x, c = (a, b) if isinstance(a, Value) else (b, a)
        if not isinstance(c, (int, float)) or isinstance(c, bool) or (name in (operator.truediv, torch.div, "div")
                                                                      and x is not a):
            return PASS
        by = float(c) if name in (operator.mul, torch.mul, "mul") else 1.0 / float(c)
        ctx = conv.ctx(node)
        y, _ = ctx.process(conv.typed(ctx, x), "scale", f"by = {by!r}")
        return y
    if name in (operator.add, torch.add, "add") and any(isinstance(v, torch.Tensor) for v in args):
        x, p = (a, b) if isinstance(a, Value) else (b, a)
        if isinstance(x, Value) and isinstance(p, torch.Tensor) and x.kind == "items" and not x.time_major and \
                _is_sinusoidal(p, x.shape[1], x.shape[2]):
            ctx = conv.ctx(node)
            return ctx.op("sinusoidal_position", [x], prefix="pos",
                          comment=f"{ctx.where()} -> sinusoidal_position: x + P, P[t, 2i] = sin(t/10000^(2i/d)), "
                                  "P[t, 2i+1] = cos(...) (a positional-encoding table made or stored in the model)")
    return PASS


def _is_sinusoidal(p: torch.Tensor, t: int, d: int) -> bool:
    """``p`` ([T, d] or [1, T, d]) is the sinusoidal table sinusoidal_position adds, to float32 precision."""
    if p.shape not in ((t, d), (1, t, d)) or not p.is_floating_point() or d % 2:
        return False
    pos = torch.arange(t, dtype=torch.float64)[:, None]
    freq = torch.exp(-torch.arange(0, d, 2, dtype=torch.float64) * torch.log(torch.tensor(10000.0)) / d)
    table = torch.zeros(t, d, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return bool(torch.allclose(p.reshape(t, d).double(), table, atol=1e-5))


def _like(parts, p) -> Value:
    other = next((q for q in parts if isinstance(q, Value)), None)
    if other is None:
        raise ValueError("no value to type the parameter by")
    return other


def free(conv, node: fx.Node, a: Attr, like: Value) -> Value:
    """The parameter ``a`` as a spec ``param`` typed like ``like`` (its axes padded to ``like``'s rank, the sample
    axis 1), linked to the torch tensor."""
    ctx = conv.ctx(node)
    like = conv.typed(ctx, like)  # an undecided model input is typed by its rank first
    rank = len(like.shape)
    if a.transpose or len(a.shape) > rank or like.kind not in ("vector", "items", "grid") or like.time_major:
        conv.fail(node, f"'{a.target}' {list(a.shape)} beside a {like.kind} value {list(like.shape)}: a parameter "
                        "read in forward is a spec `param` of the value's layout, without a sample axis")
    shape = (1,) * (rank - len(a.shape)) + tuple(a.shape)
    if shape[0] != 1:
        conv.fail(node, f"'{a.target}' has {shape[0]} rows on the sample axis: a `param` has one copy for all "
                        "samples (a leading 1, or no sample axis)")
    if like.kind == "items" and not like.batched:
        ctor = "nodes"
    elif like.kind == "items":
        ctor = "sequence"
        if shape[1] > 1:
            ctx.fix_items(like)  # a learned table per position: the item count is that length
    elif like.kind == "grid":
        ctor = _GRID[rank]
    else:
        ctor = "vector"
    text = f"{ctor}[{', '.join(map(str, shape))}]"
    v = ctx.free(text, a.target, like.kind, shape, prefix=_base(a.target), link_shape=shape,
                 comment=f"{ctx.where()}: self.{a.target} {list(a.tensor.shape)}, read in forward: a learnable "
                         f"tensor {text}")
    v.layout = like.layout
    return v


def _base(target: str) -> str:
    return target.replace(".", "_")


def _elementwise(conv, node: fx.Node, fn: str, args: tuple, kwargs: dict) -> Value:
    a, b = args
    pos = a if isinstance(a, Positions) else b if isinstance(b, Positions) else None
    if pos is not None:
        x = b if pos is a else a
        if fn == "mul" and isinstance(x, (int, float)) and not isinstance(x, bool):
            return replace(pos, scale=pos.scale * float(x))
        if fn != "add" or not isinstance(x, Value) or x.kind != "items" or x.time_major:
            conv.fail(node, "positions from an embedding of torch.arange convert when added to a batch-first "
                            "sequence (x + pos(arange(T)))")
        ctx = Context(conv.b, pos.module, pos.path, [x], {}, None, _base(pos.path) or "pos")
        scaled = "" if pos.scale == 1.0 else f", scale = {lit(pos.scale)}"
        y = ctx.op("learned_position", [x], f"max_len = {pos.module.num_embeddings}{scaled}", prefix="pos",
                   shape=x.shape, comment=f"[{pos.path}] {pos.path}(arange(T)) added to the sequence: learned "
                                          f"positions x + {'s·' if scaled else ''}P[:T], P = the embedding's table "
                                          f"({pos.module.num_embeddings} rows)")
        ctx.param(f"{y.name}.weight", "weight")
        y.layout, y.items_from = x.layout, x.items_from
        return y
    values = [x for x in args if isinstance(x, Value)]
    if not values:
        conv.fail(node, f"{fn} of two tensors read in forward: one operand must be computed from the inputs")
    named = tuple(free(conv, node, x, values[0]) if isinstance(x, Attr) else x for x in args)
    return conv.dispatch(node, named, kwargs)


def _addmm_rows(conv, node: fx.Node, args: tuple, kwargs: dict) -> Value:
    """``torch.addmm(b, x.view(-1, F), W)`` (GPT-2's ``Conv1D``: W is [F, out]) = ``F.linear(x, Wᵀ, b)`` on every
    item of the sequence x: a linear head whose ψ is linked to W transposed; the result keeps x's [B, T] axes (the
    ``view`` back to them is then the value itself)."""
    bias, rows, w = args
    if kwargs or not isinstance(w, Attr) or not isinstance(bias, Attr) or w.transpose or len(w.shape) != 2 \
            or bias.shape != (w.shape[1],):
        conv.fail(node, "addmm of a sequence's rows converts as a linear head only as addmm(self.bias [out], rows, "
                        "self.weight [in, out])")
    y = _as_module(conv, node, (rows.x, replace(w, transpose=True, shape=w.shape[::-1]), bias), {}, F.linear)
    y.shape = (*rows.x.shape[:-1], w.shape[1])
    return y


def _as_module(conv, node: fx.Node, args: tuple, kwargs: dict, target: Any = None) -> Value:
    """F.linear / F.layer_norm / F.embedding with tensors read in forward = the module holding those tensors,
    converted by its converter; a transposed read (``w.t()``) is linked to the torch tensor as transposed."""
    t = target or node.target
    names = {F.linear: ("input", "weight", "bias"), F.layer_norm: ("input", "normalized_shape", "weight", "bias",
                                                                    "eps"),
             F.embedding: ("input", "weight", "padding_idx")}[t]
    defaults = {"max_norm": None, "norm_type": 2.0, "scale_grad_by_freq": False, "sparse": False}
    o = {k: v for k, v in {**dict(zip(names, args)), **kwargs}.items() if not (k in defaults and v == defaults[k])}
    extra = set(o) - set(names)
    if extra:
        conv.fail(node, f"option(s) {sorted(extra)} have no spec form")
    tensors = {k: v for k, v in o.items() if isinstance(v, Attr)}
    for k, v in tensors.items():
        if v.expanded or v.shape != (tuple(v.tensor.shape)[::-1] if v.transpose else tuple(v.tensor.shape)):
            conv.fail(node, f"its {k} is self.{v.target} viewed as {list(v.shape)}: only the tensor itself or its "
                            "transpose converts")
    if t is F.linear:
        w = o["weight"]
        if not isinstance(w, Attr):
            conv.fail(node, "F.linear's weight must be a parameter of the model")
        out_f, in_f = w.shape
        module = nn.Linear(in_f, out_f, bias=o.get("bias") is not None)
    elif t is F.layer_norm:
        shape = o["normalized_shape"]
        module = nn.LayerNorm(shape, eps=o.get("eps", 1e-5), elementwise_affine=o.get("weight") is not None,
                              bias=o.get("bias") is not None)
    else:
        w = o["weight"]
        if not isinstance(w, Attr) or w.transpose:
            conv.fail(node, "F.embedding's table must be a parameter of the model")
        module = nn.Embedding(*w.shape, padding_idx=o.get("padding_idx"))
    for k, v in tensors.items():  # the torch tensors themselves where unviewed: the links point at them
        if not v.transpose:
            setattr(module, k, v.tensor if isinstance(v.tensor, nn.Parameter) else nn.Parameter(v.tensor))
        else:
            setattr(module, k, nn.Parameter(v.tensor.detach().t()))
    x = o["input"]
    before = set(conv.b.links)
    y = conv.leaf(node, module.to(dtype=next(iter(tensors.values())).tensor.dtype), x)
    for k, v in tensors.items():
        if not v.transpose:
            continue
        held = getattr(module, k)
        for name in set(conv.b.links) - before:
            if conv.b.sources.get(name) is held:  # relink to the torch tensor, read transposed
                link = conv.b.links[name]
                conv.b.links[name] = replace(link, source=conv.b.torch_names[id(v.tensor)],
                                             transpose=not link.transpose)
                conv.b.sources[name] = v.tensor
                conv.b.source_shapes[conv.b.links[name].source] = tuple(v.tensor.shape)
    return y


def _module_call(conv, node: fx.Node, args: tuple, kwargs: dict) -> Any:
    """An embedding of ``torch.arange(n)`` is :class:`Positions`; a causal mask made from sizes and passed to a
    module is :class:`CausalMask` (the attention converters read it as ``causal = true``); fx_import refuses any
    other tensor made in forward."""
    sub = conv.gm.get_submodule(node.target)
    if isinstance(sub, nn.Embedding) and len(args) == 1 and isinstance(args[0], torch.Tensor) and _is_arange(args[0]):
        return Positions(sub, conv._qual(str(node.target)), int(args[0].shape[-1]))
    made = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor) and is_causal(a)]
    if not made:
        return PASS
    swap = {id(a): CausalMask() for a in made}
    return conv.dispatch(node, tuple(swap.get(id(a), a) for a in args),
                         {k: swap.get(id(v), v) for k, v in kwargs.items()})


def _is_arange(t: torch.Tensor) -> bool:
    """Positions 0..n−1 along the last axis (broadcast over any leading axes)."""
    if t.dtype.is_floating_point or t.dtype == torch.bool or t.ndim < 1:
        return False
    return bool(torch.equal(t, torch.arange(t.shape[-1], device=t.device).expand_as(t)))


def is_causal(m: torch.Tensor) -> bool:
    """A square mask that blocks exactly the keys after each query: bool True (or float −inf) above the diagonal,
    False (0) on and below it."""
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] < 2:
        return False
    upper = torch.ones(m.shape, dtype=torch.bool, device=m.device).triu(1)
    if m.dtype == torch.bool:
        return bool(torch.equal(m, upper))
    if m.is_floating_point():
        return bool(torch.isneginf(m[upper]).all() and (m[~upper] == 0).all())
    return False


def _token_mask(conv, node: fx.Node, args: tuple) -> Any:
    """``ids.eq(pad)`` / ``ids == pad`` (``ne`` / ``!=``: a keep mask) of token ids = token_mask."""
    if len(args) != 2 or not isinstance(args[0], Value) or not isinstance(args[1], int) or isinstance(args[1], bool):
        return PASS
    ids = args[0]
    ctx = conv.ctx(node)
    ctx.declare(ids, "tokens", f"tokens[B, {ids.shape[1]}]" if len(ids.shape) == 2 else "tokens[B, T]")
    keep = node.target in ("ne", operator.ne, torch.ne)
    y = ctx.op("token_mask", [ids], f"pad = {args[1]}" + (", keep = true" if keep else ""), kind="mask",
               prefix="mask", comment=f"{ctx.where()} -> token_mask: True where ids {'!=' if keep else '=='} "
                                      f"{args[1]}")
    y.dtype = torch.bool
    return y


_FACTORIES = ("ones", "zeros", "empty", "full", "rand", "randn")


class factory_sizes:
    """While tracing: ``torch.ones(t, t)`` with traced sizes ``t`` is traced as ``torch.ones((t, t))`` (fx passes
    a factory's sizes as separate arguments to its torch-function handler, which refuses them)."""

    def __enter__(self):
        # fx's stack-trace record imports torch._dynamo on the trace's first node anyway; imported under these
        # patches, dynamo would take them for torch's factories and refuse the real ones in every later compile
        import torch._dynamo  # noqa: F401

        self.saved = {name: getattr(torch, name) for name in _FACTORIES}
        for name, fn in self.saved.items():
            setattr(torch, name, _packing(fn, name == "full"))
        return self

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(torch, name, fn)


def _packing(fn, has_fill: bool):
    def factory(*args, **kwargs):
        sizes, rest = (args[:-1], args[-1:]) if has_fill and len(args) > 2 else (args, ())
        if len(sizes) > 1 and any(isinstance(a, fx.Proxy) for a in sizes):
            return fn(tuple(sizes), *rest, **kwargs)
        return fn(*args, **kwargs)

    return factory
