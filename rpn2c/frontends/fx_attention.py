"""Recognisers that find multi-head attention written out in a traced graph (transformers' BERT, GPT-2, Llama, ...)
and map it onto the spec's attention head: H heads of a low-rank bilinear instance ξ, fused by ``concat_linear``.

    q = q_proj(x).view(B, T, -1, D).transpose(1, 2)        # heads: [B, T, H·D] -> [B, H, T, D]   (k, v alike)
    q, k = q·cos + rotate_half(q)·sin, ...                  # rotary (optional; cos/sin from positions 0..T−1)
    k, v = repeat_kv(k), repeat_kv(v)                       # grouped heads (or SDPA's enable_gqa)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=…, scale=1/√D)
    y = o_proj(o.transpose(1, 2).reshape(B, T, H·D))        #  -> attention(rank = D, causal, rotary = θ), heads = H,
                                                            #     kv_heads = G, fusion = concat_linear(out = o_proj)

Each pattern is a function over fx nodes (``PATTERNS`` lists them with their text). A projection is an
``nn.Linear`` call, GPT-2's ``Conv1D`` (``addmm(b, x.view(-1, F), W).view(...)``, ``W`` stored ``[in, out]``), or
one part of a packed projection split along the features (``c_attn(x).split(E, dim=2)``). A key/value read through
an empty cache (``torch.cat([past, k], dim=-2)`` with ``past`` empty) is the key/value itself.

:func:`find` returns the matches by their anchor node (the output projection's result) and, for an attention
core it could not map, the reason (``misses``: the driver names it when conversion reaches that core).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from rpn2c.frontends.fx_match import Miss, ancestors, calls as _is, name as _name
from rpn2c.frontends.fx_masks import _feeding, padding_mask
from rpn2c.frontends.fx_position_bias import RelativeBias, relative_bias
from rpn2c.frontends.fx_timm import fused_qkv
from rpn2c.frontends.fx_match import shape as _shape
from rpn2c.frontends.fx_match import users as _users


@dataclass
class Projection:
    """A linear map of ``x``: an ``nn.Linear`` (``module``) or a Conv1D's tensors (``weight``/``bias`` targets,
    ``transpose``: W stored ``[in, out]``); ``part``: the [start, stop) features of a packed projection."""

    x: fx.Node
    nodes: set[fx.Node]
    module: str | None = None
    weight: str | None = None
    bias: str | None = None
    transpose: bool = False
    width: int = 0
    part: tuple[int, int] | None = None
    packed: Projection | None = None

    @property
    def key(self) -> Any:
        return self.packed.module or self.packed.weight if self.packed else self.module or self.weight


@dataclass
class Match:
    """One attention block found in the graph."""

    x: fx.Node
    anchor: fx.Node
    q: Projection
    k: Projection
    v: Projection
    out: Projection
    heads: int
    kv_heads: int
    rank: int
    causal: bool
    rotary: float | None = None
    nodes: set[fx.Node] = field(default_factory=set)
    core: fx.Node | None = None
    padding: fx.Node | None = None  # the padding-mask input read as key_padding
    scale: float | None = None  # the logit scale when it is not 1/√D
    bias: RelativeBias | None = None  # a per-head relative position bias added to the scores
    qk_norm: tuple | None = None  # the (query, key) RMSNorms per head (fx_norms.Match each)
    softmax_upcast: bool = False  # the softmax in float32, cast back (x-transformers' Attend, Llama's eager form)


def is_sdpa(node: fx.Node) -> bool:
    return node.op == "call_function" and _name(node.target) == "scaled_dot_product_attention"


def _only_user(node: fx.Node, what: str) -> fx.Node:
    users = _users(node)
    if len(users) != 1:
        raise Miss(f"{what} '{node.name}' is read {len(users)} times (the attention form reads it once)")
    return users[0]


_TRANSPOSE = ("transpose", torch.transpose)
_RESHAPE = ("view", "reshape", torch.reshape)
_PASS = ("contiguous", "clone")


def _swaps_1_2(values: dict, node: fx.Node) -> bool:
    """``node`` exchanges axes 1 and 2 of a 4-D tensor (``transpose(1, 2)``, ``permute(0, 2, 1, 3)``)."""
    shape = _shape(values, node.args[0])
    if shape is None or len(shape) != 4:
        return False
    if _is(node, *_TRANSPOSE):
        dims = tuple(d % 4 for d in node.args[1:3])
        return sorted(dims) == [1, 2]
    if _is(node, "permute", torch.permute):
        dims = node.args[1] if len(node.args) == 2 and isinstance(node.args[1], (tuple, list)) else node.args[1:]
        return tuple(d % 4 for d in dims) == (0, 2, 1, 3)
    return False


def _identity(gm: fx.GraphModule, node: fx.Node) -> bool:
    """A call of an ``nn.Identity`` (timm's ``q_norm`` / ``k_norm`` / ``norm`` when off): the value passes."""
    return node.op == "call_module" and type(gm.get_submodule(node.target)) is nn.Identity


# ------------------------------------------------------------------------------------------------ projections
def _linear_module(gm: fx.GraphModule, node: fx.Node) -> Projection | None:
    if node.op != "call_module":
        return None
    m = gm.get_submodule(node.target)
    if type(m) is not nn.Linear:
        return None
    return Projection(node.args[0], {node}, module=str(node.target), width=m.out_features,
                      bias="bias" if m.bias is not None else None)


def _conv1d(values: dict, node: fx.Node) -> Projection | None:
    """GPT-2's Conv1D: ``addmm(b, x.view(-1, F), W).view(*x.shape[:-1], out)``."""
    if not _is(node, *_RESHAPE):
        return None
    mm = node.args[0]
    if not _is(mm, torch.addmm) or len(mm.args) != 3:
        return None
    b, rows, w = mm.args
    if not (_is(rows, *_RESHAPE) and all(isinstance(t, fx.Node) and t.op == "get_attr" for t in (b, w))):
        return None
    x = rows.args[0]
    shape, out = _shape(values, x), _shape(values, node)
    if shape is None or out is None or out[:-1] != shape[:-1] or len(shape) != 3:
        return None
    return Projection(x, {node, mm, rows, b, w}, weight=str(w.target), bias=str(b.target), transpose=True,
                      width=out[-1])


def _full_projection(gm: fx.GraphModule, values: dict, node: fx.Node) -> Projection | None:
    return _linear_module(gm, node) or _conv1d(values, node)


def _projection(gm: fx.GraphModule, values: dict, node: fx.Node) -> Projection:
    """The projection whose output is ``node`` [B, T, H·D]: whole, or one part of a split packed projection."""
    p = _full_projection(gm, values, node)
    if p is not None:
        return p
    if _is(node, operator.getitem) and _is(node.args[0], "split", torch.split):
        split, index = node.args
        src = split.args[0]
        packed = _full_projection(gm, values, src)
        dim = split.kwargs.get("dim", split.args[2] if len(split.args) > 2 else 0)
        if packed is None or not isinstance(index, int) or dim % 3 != 2:
            raise Miss(f"'{node.name}' is a part of '{src.name}', which is no linear projection split along the "
                       "features")
        parts = values.get(split)
        sizes = [t.shape[-1] for t in parts]
        start = sum(sizes[:index])
        return Projection(packed.x, {node, split} | packed.nodes, width=sizes[index],
                          part=(start, start + sizes[index]), packed=packed)
    raise Miss(f"'{node.name}' (split into heads) is no nn.Linear, Conv1D or part of a split projection")


# ------------------------------------------------------------------------------------------------ operand walk
@dataclass
class _Operand:
    proj: Projection
    heads: int
    dims: int
    nodes: set[fx.Node]
    rotary: tuple[fx.Node, fx.Node] | None = None
    repeat: int = 1
    norm: Any = None  # an RMSNorm over each head's features (fx_norms.Match): Qwen3's q_norm / k_norm
    factor: float = 1.0  # a constant the heads are multiplied by (x-transformers' q * (scale / default_scale))


def _empty_cache(values: dict, node: fx.Node) -> fx.Node | None:
    """``torch.cat([past, t], dim=-2)`` with ``past`` empty (a fresh cache) -> ``t``."""
    if not _is(node, torch.cat) or not node.args or not isinstance(node.args[0], (tuple, list)):
        return None
    parts = list(node.args[0])
    dim = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else 0)
    if len(parts) != 2 or dim not in (-2, 2):
        return None
    past = values.get(parts[0])
    return parts[1] if isinstance(past, torch.Tensor) and past.numel() == 0 else None


def _rotary(values: dict, node: fx.Node) -> tuple[fx.Node, fx.Node, fx.Node, set] | None:
    """``x·cos + rotate_half(x)·sin`` with ``rotate_half(x) = cat(−x[..., h:], x[..., :h])`` -> (x, cos, sin)."""
    if not _is(node, operator.add, torch.add) or len(node.args) != 2:
        return None
    a, b = node.args
    for plain, turned in ((a, b), (b, a)):
        if not (_is(plain, operator.mul, torch.mul) and _is(turned, operator.mul, torch.mul)):
            continue
        for x, cos in (plain.args, plain.args[::-1]):
            for cat, sin in (turned.args, turned.args[::-1]):
                if _is(cat, torch.cat) and _rotate_half_of(values, cat, x):
                    neg, first = cat.args[0]
                    return x, cos, sin, {node, plain, turned, cat, neg, neg.args[0], first}
    return None


def _rotate_half_of(values: dict, cat: fx.Node, x: Any) -> bool:
    parts = cat.args[0]
    dim = cat.kwargs.get("dim", cat.args[1] if len(cat.args) > 1 else 0)
    if not isinstance(x, fx.Node) or not isinstance(parts, (tuple, list)) or len(parts) != 2 or dim != -1:
        return False
    neg, first = parts
    if not _is(neg, operator.neg, torch.neg, "neg"):
        return False
    second = neg.args[0]
    half = (_shape(values, x) or (0,))[-1] // 2
    return all(_is(p, operator.getitem) and p.args[0] is x and _last_axis_slice(values, p) == want
               for p, want in ((first, (0, half)), (second, (half, 2 * half))))


def _last_axis_slice(values: dict, node: fx.Node) -> tuple[int, int] | None:
    index = node.args[1]
    if not isinstance(index, tuple) or len(index) != 2 or index[0] is not Ellipsis or not isinstance(index[1], slice):
        return None
    n = (_shape(values, node.args[0]) or (0,))[-1]
    s = index[1]
    start, stop, step = slice(_int(values, s.start), _int(values, s.stop), s.step).indices(n)
    return (start, stop) if step == 1 else None


def _int(values: dict, v: Any) -> Any:
    return values.get(v) if isinstance(v, fx.Node) else v


def _repeat_kv(values: dict, node: fx.Node) -> tuple[fx.Node, int, set] | None:
    """transformers' ``repeat_kv``: ``x[:, :, None].expand(B, G, n, T, D).reshape(B, G·n, T, D)`` -> (x, n)."""
    if not _is(node, *_RESHAPE) or not _is(node.args[0], "expand"):
        return None
    expand = node.args[0]
    lifted = expand.args[0]
    if not _is(lifted, operator.getitem):
        return None
    x = lifted.args[0]
    before, after = _shape(values, x), _shape(values, node)
    if before is None or after is None or len(before) != 4 or after[1] % before[1] or \
            _shape(values, lifted) != (before[0], before[1], 1, *before[2:]):
        return None
    return x, after[1] // before[1], {node, expand, lifted}


def _operand(gm: fx.GraphModule, values: dict, node: fx.Node, what: str, norms: dict) -> _Operand:
    """Walk back from an attention operand [B, H, T, D] to its projection (``norms``: the RMSNorms by anchor)."""
    nodes: set[fx.Node] = set()
    rotary, repeat, factor = None, 1, 1.0
    while True:
        if _is(node, *_PASS) or _identity(gm, node):
            nodes.add(node)
            node = node.args[0]
            continue
        if _is(node, operator.mul, torch.mul) and len(node.args) == 2 and isinstance(node.args[0], fx.Node) and \
                _constant(values, node.args[1]) is not None:  # q * c, c made from sizes
            factor *= _constant(values, node.args[1])
            nodes.add(node)
            node = node.args[0]
            continue
        inner = _empty_cache(values, node)
        if inner is not None:
            nodes |= {node, node.args[0][0]}
            node = inner
            continue
        rep = _repeat_kv(values, node)
        if rep is not None:
            node, repeat, more = rep[0], repeat * rep[1], rep[2]
            nodes |= more
            continue
        rot = _rotary(values, node)
        if rot is not None and rotary is None:
            node, rotary = rot[0], (rot[1], rot[2])
            nodes |= rot[3]
            continue
        break
    fused = fused_qkv(values, node)
    if fused is not None:  # timm's qkv(x).reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0)[i]
        src, index, heads, dims, more = fused
        packed = _full_projection(gm, values, src)
        if packed is None:
            raise Miss(f"the {what} '{node.name}' unbinds '{src.name}', which is no linear projection")
        e = heads * dims
        proj = Projection(packed.x, more | packed.nodes, width=e, part=(index * e, (index + 1) * e), packed=packed)
        return _Operand(proj, heads, dims, nodes | proj.nodes, rotary, repeat)
    if not (_is(node, *_TRANSPOSE, "permute", torch.permute) and _swaps_1_2(values, node)):
        raise Miss(f"the {what} '{node.name}' is not a projection's output split into heads "
                   "(x.view(B, T, H, D).transpose(1, 2))")
    split, norm = node.args[0], None
    if split in norms and _shape(values, norms[split].x) == _shape(values, split):  # RMSNorm of each head's D
        norm = norms[split]
        nodes |= norm.nodes
        split = norm.x
    shape, flat = _shape(values, split), _shape(values, split.args[0]) if isinstance(split, fx.Node) else None
    if not _is(split, *_RESHAPE) or shape is None or flat is None or len(shape) != 4 or \
            flat != (shape[0], shape[1], shape[2] * shape[3]):
        raise Miss(f"the {what} '{node.name}' transposes no [B, T, H·D] -> [B, T, H, D] view")
    nodes |= {node, split}
    proj = _projection(gm, values, split.args[0])
    nodes |= proj.nodes
    return _Operand(proj, shape[2], shape[3], nodes, rotary, repeat, norm, factor)


# ------------------------------------------------------------------------------------------------ output side
def _merge(values: dict, core: fx.Node) -> tuple[fx.Node, set]:
    """Follow the core's output [B, H, T, D] through transpose(1, 2) and reshape to [B, T, H·D]."""
    node, nodes, swapped = core, set(), False
    while True:
        user = _only_user(node, "the attention output")
        shape, out = _shape(values, node), _shape(values, user)
        if _is(user, *_PASS) or (_is(user, *_RESHAPE) and out == shape):
            pass
        elif not swapped and _is(user, *_TRANSPOSE, "permute", torch.permute) and _swaps_1_2(values, user):
            swapped = True
        elif swapped and _is(user, *_RESHAPE) and out is not None and len(out) == 3 and shape is not None and \
                out == (shape[0], shape[1], shape[2] * shape[3]):
            nodes.add(user)
            return user, nodes
        else:
            raise Miss(f"the attention output is read by '{user.name}', not merged back to [B, T, H·D] "
                       "(o.transpose(1, 2).reshape(B, T, -1))")
        nodes.add(user)
        node = user


def _output_projection(gm: fx.GraphModule, values: dict, merged: fx.Node) -> tuple[Projection, fx.Node]:
    """The projection reading the merged heads, and the node holding its result."""
    node, passed = merged, set()
    while True:
        user = _only_user(node, "the merged heads")
        if not (_is(user, *_PASS) or _identity(gm, user)):
            break
        node = user
        passed.add(user)
    p = _linear_module(gm, user)
    if p is not None and p.x is node:
        p.nodes |= passed
        return p, user
    if _is(user, *_RESHAPE) and len(_users(user)) == 1:
        end = _users(_users(user)[0])
        p = _conv1d(values, end[0]) if len(end) == 1 else None
        if p is not None and p.x is node:
            p.nodes |= passed
            return p, end[0]
    raise Miss(f"the merged heads are read by '{user.name}', not by a linear output projection (o_proj)")


# ------------------------------------------------------------------------------------------------ the block
def _core(node: fx.Node) -> dict:
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    out = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False,
           "softmax_upcast": False}
    out.update(zip(names, node.args))
    out.update(node.kwargs)
    return out


_MATMUL = (torch.matmul, operator.matmul, "matmul")


def _constant(values: dict, x: Any) -> float | None:
    """A Python number, or a 0-d tensor made in forward from sizes alone (GPT-2's ``torch.full([], √D)``)."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    v = values.get(x) if isinstance(x, fx.Node) else None
    if isinstance(v, torch.Tensor) and v.dim() == 0 and _input_free(x):
        return float(v)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and _input_free(x):  # a number computed from sizes
        return float(v)
    return None


def _eager(values: dict, node: fx.Node, gm: fx.GraphModule | None = None) -> tuple[dict, set[fx.Node]] | None:
    """Attention written out: ``softmax(q @ k.transpose(-2, -1) · scale [+ mask], dim=-1) [dropout] @ v`` (or
    ``einsum``; the scores ``masked_fill``'ed by a causal mask; the softmax in float32 and cast back) -> the
    arguments SDPA would take (``softmax_upcast`` besides), and the nodes of the core (None when ``node`` is no
    such product)."""
    import torch.nn.functional as F

    if _einsum(node, "av"):
        p, v = node.args[1:3]
    elif _is(node, *_MATMUL) and len(node.args) == 2:
        p, v = node.args
    else:
        return None
    nodes = {node}
    if _is(p, F.dropout) and not p.kwargs.get("training", p.args[2] if len(p.args) > 2 else True):
        nodes.add(p)
        p = p.args[0]
    if isinstance(p, fx.Node) and p.op == "call_module" and values.get(p) is not None and \
            p.meta.get("nn_module_stack") is not None and _dropout_module(p):  # an nn.Dropout (eval)
        nodes.add(p)
        p = p.args[0]
    cast = None
    if _is(p, "to", "type_as", "type"):
        nodes.add(p)
        cast, p = p, p.args[0]
    if not _is(p, F.softmax, torch.softmax, "softmax"):
        return None
    dim = p.kwargs.get("dim", p.args[1] if len(p.args) > 1 else None)
    if dim not in (-1, 3):
        return None
    dtype = p.kwargs.get("dtype")
    nodes.add(p)
    scores, mask, causal = p.args[0], None, False
    if _is(scores, "masked_fill") and len(scores.args) == 3 and gm is not None:  # x-transformers' causal mask
        blocked, fill = scores.args[1], scores.args[2]
        t, s_ = values[scores].shape[-2:]
        future = torch.ones(t, s_, dtype=torch.bool).triu(s_ - t + 1)
        b = values.get(blocked)
        if not (isinstance(fill, float) and fill <= torch.finfo(values[scores].dtype).min and _input_free(blocked)
                and isinstance(b, torch.Tensor) and b.dtype == torch.bool and b.shape[-2:] == (t, s_)
                and bool((b == future).all())):
            raise Miss("the scores are masked_fill'ed by no causal mask made from sizes (the future blocked by the "
                       "dtype's lowest value)")
        causal = True
        nodes |= {scores} | _feeding(gm, blocked)
        scores = scores.args[0]
    if _is(scores, operator.add, torch.add) and len(scores.args) == 2:
        a, b = scores.args
        scores, mask = (a, b) if _is(a, *_MATMUL, operator.mul, operator.truediv) else (b, a)
        nodes.add(p.args[0])
    scale = 1.0
    if _is(scores, operator.mul, operator.truediv) and _constant(values, scores.args[1]) is not None:
        c = _constant(values, scores.args[1])
        scale = c if scores.target is operator.mul else 1 / c
        nodes.add(scores)
        scores = scores.args[0]
    if _einsum(scores, "qk"):
        q, key = scores.args[1:3]
    elif _is(scores, *_MATMUL):
        q, kt = scores.args
        if not (_is(kt, *_TRANSPOSE) and tuple(d % 4 for d in kt.args[1:3]) in ((2, 3), (3, 2))):
            return None
        nodes.add(kt)
        key = kt.args[0]
    else:
        return None
    upcast = dtype is not None and dtype != values[scores].dtype
    if upcast and (dtype != torch.float32 or cast is None or values[cast].dtype != values[scores].dtype):
        raise Miss(f"the softmax runs in {dtype} and is not cast back to the scores' {values[scores].dtype} "
                   "(softmax_upcast: a float32 softmax, cast back)")
    nodes.add(scores)
    return {"query": q, "key": key, "value": v, "attn_mask": mask, "dropout_p": 0.0, "is_causal": causal,
            "scale": scale, "enable_gqa": False, "softmax_upcast": upcast}, nodes


def _dropout_module(node: fx.Node) -> bool:
    stack = node.meta.get("nn_module_stack") or {}
    return any(t == node.target and issubclass(cls, nn.Dropout) for t, cls in stack.values())


def _einsum(node: Any, form: str) -> bool:
    """``torch.einsum`` over [B, H, ·, ·] operands: ``"qk"`` = q @ kᵀ (``b h i d, b h j d -> b h i j``), ``"av"``
    = a @ v (``b h i j, b h j d -> b h i d``), whatever the letters."""
    if not _is(node, torch.einsum) or len(node.args) != 3 or not isinstance(node.args[0], str):
        return False
    try:
        ins, out = node.args[0].replace(" ", "").split("->")
        a, b = ins.split(",")
    except ValueError:
        return False
    if not all(len(t) == 4 for t in (a, b, out)) or not a[:2] == b[:2] == out[:2]:
        return False
    if form == "qk":
        return a[3] == b[3] and out[2:] == a[2] + b[2] and a[2] != b[2]
    return a[3] == b[2] and out[2:] == a[2] + b[3] and len(set(a[2:] + b[3])) == 3


def _theta(values: dict, cos: fx.Node, dims: int) -> float:
    """The rotary base θ whose cos table (``rpn2c.functional.rotary``) is the library's on the example."""
    from rpn2c.functional.rotary import frequencies, full_tables

    freqs = [v for v in map(values.get, ancestors(cos)) if isinstance(v, torch.Tensor) and tuple(v.shape) == (dims // 2,)
             and v.is_floating_point()]
    if not freqs or dims < 4:
        raise Miss("the rotary cos/sin tables come from no frequency vector inv_freq [D/2]")
    f = freqs[0].float()
    guess = float(f[1]) ** (-dims / 2)
    table = values[cos]
    for theta in (float(f"{guess:.6g}"), float(f"{guess:.4g}"), guess):
        if torch.equal(frequencies(dims, theta), f):
            want, _ = full_tables(table.shape[-2], f, table.dtype)
            if torch.equal(table.reshape(-1, *table.shape[-2:])[0], want):
                return theta
            raise Miss("the rotary cos table is not that of positions 0..T−1 (position ids or a scaling differ)")
    raise Miss("the rotary frequencies are not base^(−2i/D) of one base")


def _input_free(node: fx.Node) -> bool:
    """``node`` reads the model's inputs only through their sizes (a table made from positions 0..T−1)."""
    return all(n.op != "placeholder" for n in ancestors(node, through_sizes=False))


def match(gm: fx.GraphModule, values: dict, core: fx.Node, o: dict, core_nodes: set[fx.Node],
          norms: dict | None = None) -> Match:
    """The attention block around the attention core ``core`` (SDPA's arguments ``o``; raises :class:`Miss`);
    ``norms``: the graph's RMSNorms by anchor, read as query/key norms where they normalise each head."""
    causal, padding, bias, bias_nodes = bool(o["is_causal"]), None, None, set()
    if o["attn_mask"] is not None:
        if causal:
            raise Miss("is_causal with an attn_mask")
        bias, mask, bias_nodes = _split_bias(gm, values, o["attn_mask"])
        if mask is not None:
            padding = padding_mask(gm, values, mask)
            causal = padding.causal
    if o["dropout_p"]:
        raise Miss(f"dropout_p={o['dropout_p']} drops attention weights in eval")
    q, k, v = (_operand(gm, values, o[n], n, norms or {}) for n in ("query", "key", "value"))
    qk_norm = _qk_norm(q.norm, k.norm, v.norm)
    if v.rotary is not None or (q.rotary is None) != (k.rotary is None):
        raise Miss("rotary positions turn the query and the key, not the value")
    if q.rotary and q.rotary != k.rotary:
        raise Miss("the query and the key are turned by different cos/sin tables")
    if len({q.proj.x, k.proj.x, v.proj.x}) != 1:
        raise Miss("the query, key and value read different inputs (cross-attention is not mapped yet)")
    if not (q.dims == k.dims == v.dims):
        raise Miss(f"head widths differ (q {q.dims}, k {k.dims}, v {v.dims})")
    if k.heads != v.heads or k.repeat != v.repeat or q.repeat != 1:
        raise Miss("the key and value have different head groupings")
    groups = k.heads * k.repeat
    if groups != q.heads and not (o["enable_gqa"] and q.heads % k.heads == 0):
        raise Miss(f"{q.heads} query heads over {k.heads} key heads")
    if v.factor != 1.0:
        raise Miss(f"the values are multiplied by {v.factor}")
    scale = (q.dims ** -0.5 if o["scale"] is None else float(o["scale"])) * q.factor * k.factor
    scale = None if math.isclose(scale, q.dims ** -0.5, rel_tol=1e-12) else scale
    theta = None
    if q.rotary is not None:
        if not all(_input_free(t) for t in q.rotary):
            raise Miss("the rotary tables read the inputs' values (position ids computed from the data)")
        theta = _theta(values, q.rotary[0], q.dims)
    merged, out_nodes = _merge(values, core)
    out, anchor = _output_projection(gm, values, merged)
    nodes = q.nodes | k.nodes | v.nodes | out_nodes | out.nodes | core_nodes | (padding.nodes if padding else set())
    if bias is not None:
        if bias.heads != q.heads:
            raise Miss(f"the relative bias has {bias.heads} heads, the attention {q.heads}")
        nodes |= bias.nodes | bias_nodes
    return Match(q.proj.x, anchor, q.proj, k.proj, v.proj, out, q.heads, k.heads, q.dims, causal, theta, nodes, core,
                 padding.input if padding is not None else None, scale, bias, qk_norm, bool(o["softmax_upcast"]))


def _qk_norm(q: Any, k: Any, v: Any) -> tuple | None:
    """``(q norm, k norm)`` when both the queries and the keys are RMS-normalised per head alike (Qwen3)."""
    if q is None and k is None and v is None:
        return None
    if v is not None or q is None or k is None:
        raise Miss("an RMSNorm per head normalises " + ("the values" if v is not None else "only one of the query "
                   "and the key") + " (qk_norm normalises both the queries and the keys)")
    if (q.eps, q.upcast, q.variance) != (k.eps, k.upcast, k.variance) or not (q.weight and k.weight):
        raise Miss("the query and key norms differ in ε, dtype or weights (qk_norm: one ε, a weight each)")
    if q.variance:
        raise Miss("the query/key norm takes only the variance in float32 (qk_norm normalises in one dtype)")
    return q, k


def _split_bias(gm: fx.GraphModule, values: dict, mask: fx.Node) -> tuple[RelativeBias | None, Any, set]:
    """An attn_mask as (a relative position bias, the rest of the mask, the nodes joining them): the bias alone,
    ``bias + mask``, ``where(keep, bias, lowest)`` (T5 with a padding mask), or no bias at all."""
    node, passed = mask, set()
    while _is(node, *_PASS):
        passed.add(node)
        node = node.args[0]
    bias = relative_bias(gm, values, node)
    if bias is not None:
        return bias, None, passed
    if _is(node, operator.add, torch.add) and len(node.args) == 2 and all(isinstance(a, fx.Node) for a in node.args):
        for one, other in (node.args, node.args[::-1]):
            bias = relative_bias(gm, values, one)
            if bias is not None:
                return bias, other, passed | {node}
    if _is(node, torch.where) and len(node.args) == 3 and isinstance(node.args[2], float) and \
            node.args[2] <= torch.finfo(values[node].dtype).min:  # where(keep, bias, lowest): the bias, masked
        bias = relative_bias(gm, values, node.args[1]) if isinstance(node.args[1], fx.Node) else None
        if bias is not None:
            return bias, node.args[0], passed | {node}
    return None, mask, set()


def find(gm: fx.GraphModule, values: dict) -> tuple[dict[fx.Node, Match], dict[fx.Node, str]]:
    """The attention blocks of the graph by anchor, and the reason for each core not mapped."""
    from rpn2c.frontends import fx_norms

    found: dict[fx.Node, Match] = {}
    misses: dict[fx.Node, str] = {}
    norms = fx_norms.find(gm, values)[0]
    for node in gm.graph.nodes:
        try:
            core = (_core(node), {node}) if is_sdpa(node) else _eager(values, node, gm)
            if core is not None:
                m = match(gm, values, node, *core, norms)
                found[m.anchor] = m
        except Miss as err:
            misses[node] = str(err)
    return found, misses


PATTERNS = {
    "heads": "x.view(B, T, H, D).transpose(1, 2) of a projection -> the heads of one attention head statement",
    "sdpa": "F.scaled_dot_product_attention(q, k, v, is_causal, scale = 1/√D) -> attention(rank = D, causal)",
    "eager": "softmax(q @ k.transpose(-2, -1) · 1/√D [+ mask], -1) @ v (or einsum) -> the same; a float32 softmax "
             "cast back -> softmax_upcast = true; a causal masked_fill -> causal = true",
    "rotary": "q·cos + rotate_half(q)·sin (cos/sin of positions 0..T−1) -> attention(rotary = θ)",
    "repeat_kv": "x[:, :, None].expand(...).reshape(...) or SDPA's enable_gqa -> kv_heads = G",
    "packed": "c_attn(x).split(E, dim=2) (GPT-2's Conv1D) -> the packed in_proj_weight, transposed",
    "fused": "qkv(x).reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0) (timm) -> the packed in_proj_weight",
    "identity": "nn.Identity calls on the way (timm's q_norm, k_norm, norm when off) -> passed through",
    "cache": "torch.cat([empty past, k], dim=-2) -> k",
    "mask": "an attn_mask built from a padding-mask input [B, S] (probed) -> key_padding (keep_mask), causal",
    "merge": "o.transpose(1, 2).reshape(B, T, H·D) then a linear o_proj -> fusion = concat_linear",
    "qk_norm": "norm(q_proj(x).view(B, T, H, D)) of the queries and keys (an RMSNorm over D) -> qk_norm = \"rms\"",
    "bias": "an attn_mask made from the offset's buckets and one table (fx_position_bias) -> attn_mask = "
            "relative_bias(...), scale as given",
}


# ------------------------------------------------------------------------------------------------ emission
def _tensor(conv, p: Projection, what: str) -> tuple[str, nn.Module, str, bool] | None:
    """(path, module, local name, transpose) of a whole projection's ``what`` (weight | bias), None if absent."""
    if p.module is not None:
        m = conv.gm.get_submodule(p.module)
        return (conv._qual(p.module), m, what, False) if getattr(m, what) is not None else None
    local = p.weight if what == "weight" else p.bias
    return (conv.path, conv.module, local, p.transpose and what == "weight") if local else None


def _link_packed(conv, compiled: str, parts: list[Projection], what: str) -> bool:
    """Link the q, k, v ``what`` into ``compiled`` (their rows stacked); False when they have none."""
    whole = [p.packed or p for p in parts]
    tensors = [_tensor(conv, p, what) for p in whole]
    if not any(tensors):
        return False
    if not all(tensors):
        conv.fail(parts[0].x, f"some of the query, key and value projections have a {what}, others not: the "
                              "attention ξ's q/k biases and the value bias come together")
    if all(p.packed is not None for p in parts):
        if len({p.key for p in parts}) != 1:
            conv.fail(parts[0].x, "the query, key and value are parts of different packed projections")
        bounds = [p.part for p in parts]
        if [b for pair in bounds for b in pair] != [0, bounds[0][1], bounds[0][1], bounds[1][1], bounds[1][1],
                                                    whole[0].width]:
            conv.fail(parts[0].x, "the packed projection's parts are not the query, key and value in this order")
        path, module, local, transpose = tensors[0]
        conv.b.link(compiled, path, module, local, None, transpose, None)
        return True
    if any(p.packed is not None for p in parts):
        conv.fail(parts[0].x, "the query, key and value mix packed and separate projections")
    conv.b.link_stacked(compiled, tensors)
    return True


def emit(conv, node: fx.Node, m: Match):
    """The attention head statement for match ``m`` (at its anchor ``node``)."""
    from rpn2c.frontends.kit import lit

    x = conv.value(node, conv.env[m.x], "attention input")
    ctx = conv.ctx(node)
    width = _shape(conv.values, m.x)[-1]
    ctx.sequence(x, width, "T", True, "query")
    path, _ = conv._owner(m.core)
    name = conv.b.fresh(conv.base + (path[len(conv.path):].lstrip(".") if conv.path else path), "attn")
    e = _shape(conv.values, node)[-1]
    out_bias = _tensor(conv, m.out, "bias")
    xi = [f"rank = {m.rank}"] + (["causal = true"] if m.causal else []) + \
         ([f"rotary = {lit(m.rotary)}"] if m.rotary is not None else []) + \
         ([f"scale = {lit(m.scale)}"] if m.scale is not None else [])
    if m.softmax_upcast:
        xi.append("softmax_upcast = true")
    if m.qk_norm is not None:
        qn = m.qk_norm[0]
        xi += ['qk_norm = "rms"', f"qk_norm_eps = {lit(qn.eps)}"] + (["qk_norm_upcast = true"] if qn.upcast else [])
    uses = []
    if m.bias is not None:  # T5's relative position bias: head h adds slice h to its scores
        from rpn2c.frontends import fx_position_bias

        b = fx_position_bias.emit(conv, node, m.bias, x)
        xi.append(f"attn_mask = {b.name}")
        uses.append(b)
    if m.padding is not None:  # 1 = attend, as the library reads it
        pad = conv.value(node, conv.env[m.padding], "padding mask")
        sym = x.items_from[0].item_dims.get(x.items_from[1]) if x.items_from else None
        ctx.declare(pad, "mask", f"keep_mask[B, {sym if isinstance(sym, str) else pad.shape[1]}]")
        xi.append(f"key_padding = {pad.name}")
        uses.append(pad)
    before = len(conv.b.stmts)
    settings = ([f"heads = {m.heads}"] if m.heads > 1 else []) + \
               ([f"kv_heads = {m.kv_heads}"] if m.kv_heads != m.heads else [])
    comment = [f"[{path}] attention written out ({_name(m.core.target)}): {m.heads} heads of rank {m.rank}"
               + (f", {m.kv_heads} key/value heads" if m.kv_heads != m.heads else "")
               + (", causal" if m.causal else "") + (f", rotary θ = {lit(m.rotary)}" if m.rotary else "")
               + (", a relative position bias" if m.bias else "") + (", RMSNorm of each head's q and k"
                                                                        if m.qk_norm else ""),
               f"  q/k/v projections -> the packed in_proj_weight; {m.out.module or m.out.weight} -> concat_linear"]
    y = ctx.head(x, settings + ["xi_instance = attention(...)", f"out = {m.rank}", "bias = false",
                                f"fusion = concat_linear(out = {e}{'' if out_bias else ', bias = false'})"],
                 comment=comment, name=name, out_kind="items", out_shape=_shape(conv.values, node), uses=uses)
    stmt = conv.b.stmts[before]
    biased = _link_packed(conv, f"{name}.in_proj_bias", [m.q, m.k, m.v], "bias")
    _link_packed(conv, f"{name}.in_proj_weight", [m.q, m.k, m.v], "weight")
    if biased:
        xi.insert(1, "bias = true")
        stmt.settings.remove("bias = false")
    stmt.settings[stmt.settings.index("xi_instance = attention(...)")] = f"xi_instance = attention({', '.join(xi)})"
    if m.qk_norm is not None:  # γ_q, γ_k [D], shared by the heads
        for which, norm in zip("qk", m.qk_norm):
            conv.b.link(f"{name}.{which}_norm_weight", conv.path, conv.module, norm.weight, None, False, None)
    w = _tensor(conv, m.out, "weight")
    conv.b.link(f"{name}.fusion.linear.weight", *w[:3], None, w[3], None)
    if out_bias:
        conv.b.link(f"{name}.fusion.linear.bias", *out_bias[:3], None, False, None)
    y.items_from = x.items_from
    return y
