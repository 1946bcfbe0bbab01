"""The op → torch table of the default lowering: exactly one emitter per op of a rewritten layer or recurrent term.

An emitter ``EMITTERS[op](term, site)`` is called once, when the layer is built, with the term and the plain facts
of its head (``Site``); it returns ``run(layer, *args)``, the op's torch computation, which reads the layer's
parameters at call time (so moving, converting or loading the model needs nothing else). Semantic ops that no rule
rewrote run their general form (``xi`` by its module's ``apply``, ``patches`` by index: no padding matrix,
``recur`` by its module's step loop); kernel ops run their kernel. The paper's literal forms are the oracle's alone
(``lower/reference.py``, ``lower/literal_forms.py``, which this module never imports). ``lower/program.py`` orders
the calls. A kernel whose choice depends on run-time facts declares its fallback as a predicate on its record
(``rpn2c.ir.kernels``), which the emitter calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from rpn2c.components.grid import pad_pairs
from rpn2c.components.registry import kernels
from rpn2c.functional import structure
from rpn2c.functional.expansion import taylor_reconcile
from rpn2c.ir.kernels import ATTEND_ARGS, RECURRENT_ARGS, XI_ARGS, Kernel, declared
from rpn2c.ir.terms import SEMANTIC_OPS, Term
from rpn2c.lower.attention import packed_attention
from rpn2c.lower.parts import channel, fuse, fuse_channels

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


@dataclass(frozen=True)
class Site:
    """What an emitter may read when the layer is built: plain data only (programs are shared by copies)."""

    head: str | None  # the head's name; None for a layer-level op
    multi: bool  # the layer keeps its heads in ``layer.heads`` (else the layer is the head)
    spec: Any = None  # HeadSpec
    trace: Any = None  # HeadTrace
    grid_out: bool = False  # the layer's output is a grid (fusions read the channel axis)
    x_grid: bool = False  # the layer's input is a grid (the remainder reads the channel axis)
    fn: Callable | None = None  # a processing step that is a plain activation: the function itself
    share: str | None = None  # a ξ the graph rewrite shared_xi merged with others: computed once per forward

    def holder(self, layer):
        return layer.heads[self.head] if self.multi else layer


def _named(fn: Callable, op: str) -> Callable:
    fn.__name__ = fn.__qualname__ = f"rpn2c_{op}"  # the generated program names each call after its op
    return fn


def reads(*roles: str):
    """An emitter's argument signature (``lower/program.py`` wires it): ``args`` the term's own arguments, ``z`` its
    first, ``query`` / ``context`` the layer's processed input and context, ``aux`` the extra inputs, ``grid`` the
    grid input on a grid head (absent elsewhere)."""

    def mark(fn):
        fn.reads = roles
        return fn

    return mark


def signature(op_emitter) -> tuple[str, ...]:
    return getattr(op_emitter, "reads", ("args",))


# ------------------------------------------------------------------------------------------------ layer ops
def process_slot(t: Term) -> tuple[str, int]:
    """Where the module of the processing term ``t`` sits: ``("pre", i)`` and ``("post", i)`` on the layer,
    ``("head_post", i)`` on its head (a head's own processing, before the head fusion)."""
    return {"pre": "pre", "head": "head_post"}.get(t.key.stage, "post"), t.key.index


def _process(t: Term, s: Site):
    if s.fn is not None:  # an activation: the function, no module call
        fn = s.fn
        return lambda layer, y: fn(y)
    name, i = process_slot(t)
    if name == "head_post":
        return lambda layer, y: s.holder(layer).head_post[i](y)
    if name == "pre":
        return lambda layer, y: layer.pre[i](y)
    return lambda layer, y: layer.post[i](y)


def _remainder(t: Term, s: Site):
    if s.x_grid:
        return lambda layer, y, raw: y + layer.pi(raw.movedim(1, -1)).movedim(-1, 1)
    return lambda layer, y, raw: y + layer.pi(raw)


def _fuse_heads(t: Term, s: Site):
    return lambda layer, *ys: fuse(layer.fusion, list(ys), s.grid_out)


def _head_posts(layer, outs):
    for i, hd in enumerate(layer._holders()):
        for p in getattr(hd, "head_post", ()):
            outs[i] = p(outs[i])
    return outs


@reads("query", "context", "aux")
def _fused_sdpa(t: Term, s: Site):
    """H packed attention heads (``lower/attention.py``): args (query, data, aux); the attention kernel and the
    fusion's form are the rule's typed argument (``rules/attention.FusedHeads``)."""
    kernel, fuse_out = t.info["arg"].kernel, t.info["arg"].fuse_out

    def run(layer, q, data, aux):
        out = packed_attention(layer, q, data, own_aux(layer.first_attention, aux), layer._fold_v_bias, fuse_out,
                               kernel)
        if fuse_out:
            return out
        return fuse(layer.fusion, _head_posts(layer, out), s.grid_out)

    return run


@reads("context")
def _stacked_linear(t: Term, s: Site):
    """Identical perceptron heads: κ once, one F.linear with the heads' ψ rows (and biases) stacked."""

    def run(layer, data):
        holders = layer._holders()
        k = holders[0].kappa(data)
        weight = torch.cat([hd.psi.weight for hd in holders])
        bias = torch.cat([hd.bias for hd in holders]) if holders[0].bias is not None else None
        ys = F.linear(k, weight, bias).split([hd.psi.weight.shape[0] for hd in holders], dim=-1)
        return fuse(layer.fusion, list(ys), s.grid_out)

    return run


@reads("context", "aux")
def _chebyshev_sum(t: Term, s: Site):
    """A ChebNet layer, Σ_h T_{k_h}(L̃) ψ_h(κ_h(X)) + Σ_h b_h, as one Clenshaw recurrence over the heads' orders
    (K − 1 propagations for orders 0 … K − 1; the heads' own terms, k propagations each, do not run)."""

    def run(layer, data, aux):
        ys, bias, xi = {}, None, None
        for hd in layer._holders():
            xi = channel(hd.xi_instance, 0)
            y = channel(hd.psi, 0).apply(hd.kappa(data))
            k = xi.hp.order
            ys[k] = ys[k] + y if k in ys else y
            if hd.bias is not None:
                bias = hd.bias if bias is None else bias + hd.bias
        out = xi.polynomial_sum(ys, own_aux(xi, aux))
        return out if bias is None else out + bias

    return run


# ------------------------------------------------------------------------------------------------ ξ ops
def _xi_with(kernel: Kernel | None):
    """ξ on ``z`` (query ``q``, context ``c``): by its module's ``apply`` (its own form: structured where the ξ
    is, its matrix where the matrix is the parameter; an affine ξ by its GEMM and bias), or the declared
    ``kernel`` bound to its module (``Kernel.bind``: the method, or its fallback where the fallback's predicate
    holds). A vector head's ξ sees its one item as ``[B, 1, M]``."""

    @reads(*XI_ARGS)
    def build(t: Term, s: Site):
        slot, ch = t.info["slot"], t.info["channel"] or 0
        vec = s.trace.view == "vector"

        def run(layer, z, q, c, aux):
            m = channel(getattr(s.holder(layer), slot), ch)
            if vec:
                z, q, c = z.unsqueeze(1), q.unsqueeze(1), c.unsqueeze(1)
            own = own_aux(m, aux)
            if s.share is not None and "_memo" in aux:
                own["_share"] = (aux["_memo"], s.share)
            if kernel is None:
                y = m.apply(z, q, c, own)
            elif kernel.args == ATTEND_ARGS:  # an attention kernel: on the projected queries and keys
                y = m.apply(z, q, c, own, attend=kernel.bind(m))
            else:
                y = kernel.bind(m)(z, q, c, own)
            return y.squeeze(1) if vec else y

        return run

    return build


def _declared_kernel(t: Term, s: Site):
    """A kernel op its component declares (``rpn2c.ir.kernels.Kernel``): the record found from the term's
    component, run by :func:`_xi_with` (a ξ's) or :func:`_recurrence` (a cell's)."""
    kernel = declared(t.info["use"].component, t.op)
    return (_recurrence if kernel.args == RECURRENT_ARGS else _xi_with)(kernel)(t, s)


def own_aux(m, aux: dict) -> dict:
    """The layer's extra inputs (keyed by value id) as ``m`` reads them: keyed by its hyper-parameter names."""
    return {k: aux[v] for k, v in m.aux_keys.items() if v in aux}


# ------------------------------------------------------------------------------------------------ recurrent ops
def _recurrence(kernel: Kernel | None):
    """A recurrent layer's op on its module (``lower/recurrent.RecurrentModule``): the form its cell declares bound
    to the module (``rnn_fused`` the fused kernel, ``parallel_scan`` the scan, ``time_loop`` the step loop; the
    fallback where its predicate holds), or, for ``recur`` (no rule fired), the general form: the recurrence
    ``h_t = cell(κ(x_t) W_ihᵀ + b_ih, κ_s(h_{t−1}) W_hhᵀ + b_hh)`` step by step."""

    @reads(*RECURRENT_ARGS)
    def build(t: Term, s: Site):
        if kernel is None:
            return lambda rec, x, state=None, cell_state=None: rec.loop(x, state, cell_state)
        return lambda rec, x, state=None, cell_state=None: kernel.bind(rec)(x, state, cell_state)

    return build


# ------------------------------------------------------------------------------------------------ κ, ψ, bias
def _expand(t: Term, s: Site):
    if t.info.get("grid"):
        return lambda layer, x: s.holder(layer).kappa(x, grid=True)
    return lambda layer, z: s.holder(layer).kappa(z)


def _pool(t: Term, s: Site):
    return lambda layer, x: s.holder(layer).kappa.pool(x)


def _kappa_unfold(t: Term, s: Site):
    return lambda layer, x: s.holder(layer).kappa.im2col(x)


def _reconcile(t: Term, s: Site):
    c, g = t.info["channel"] or 0, s.spec.groups

    def run(layer, k):
        psi = channel(s.holder(layer).psi, c)
        if g == 1:
            return psi.apply(k)
        w = psi.matrix().unflatten(0, (g, -1))  # [g, n/g, D/g]: ψ block-diagonal over the feature groups
        return torch.einsum("...gd,gnd->...gn", k.unflatten(-1, (g, -1)), w).flatten(-2)

    return run


def _on_grid(s: Site, fn):
    """A grid head's ``[B, P, n]`` result back on the output grid ``[B, n, *P]`` (a view); args end with the
    head's grid input, whose spatial size fixes P."""
    if s.trace.view != "grid":
        return lambda layer, y, *_: fn(layer, y)
    geo = s.trace.geometry

    def run(layer, y, x):
        y = fn(layer, y)
        return y.transpose(1, 2).reshape(x.shape[0], y.shape[-1], *geo.out_spatial(tuple(x.shape[2:])))

    return run


@reads("args", "grid")
def _bias(t: Term, s: Site):
    return _on_grid(s, lambda layer, y: y if s.holder(layer).bias is None else y + s.holder(layer).bias)


@reads("args", "grid")
def _linear(t: Term, s: Site):
    c = t.info["channel"] or 0

    def run(layer, k):
        hd = s.holder(layer)
        return F.linear(k, channel(hd.psi, c).weight, hd.bias)

    return _on_grid(s, run)


@reads("args", "grid")
def _degree_linear(t: Term, s: Site):
    c, d = t.info["channel"] or 0, s.spec.kappa.component.hp.d

    def run(layer, z):
        hd = s.holder(layer)
        return taylor_reconcile(z, channel(hd.psi, c).weight, hd.bias, d=d)

    return _on_grid(s, run)


def _fuse_channels(t: Term, s: Site):
    return lambda layer, *ys: fuse_channels(s.holder(layer), list(ys), s.grid_out)


# ------------------------------------------------------------------------------------------------ grid ops
def _pad(x, geo):
    pads = pad_pairs(geo)
    if not any(pads):
        return x
    mode = {"zeros": "constant"}.get(geo.padding_mode, geo.padding_mode)
    return F.pad(x, pads, mode=mode)


def conv_padding(kappa_name: str, geo) -> tuple[int, ...] | None:
    """The padding a convolution can apply itself: symmetric zero padding read by an identity κ (any other κ
    must see κ(0) in the padded cells, so the grid is padded explicitly); None otherwise."""
    if kappa_name == "identity" and geo.padding_mode == "zeros" and tuple(geo.pad_before) == tuple(geo.pad_after):
        return tuple(geo.pad_before)
    return None


def _conv(t: Term, s: Site):
    """Padding-mode grid ξ + elementwise κ + ψ (+ tied bias) of one channel as one convolution: ψ's rows reshaped
    to the kernel, κ applied to the (padded) grid first, zero padding the convolution's own where κ is the
    identity."""
    h, geo, c = s.spec, s.trace.geometry, t.info["channel"] or 0
    kappa = h.kappa.component
    d, p, g = kappa.degree(), geo.patch_size, h.groups
    own_padding = conv_padding(kappa.name, geo)
    conv = _CONV[geo.rank]

    def run(layer, x):
        hd = s.holder(layer)
        if own_padding is not None:
            xp, padding = x, own_padding
        else:
            xp, padding = _pad(x, geo), 0
            if kappa.name != "identity":
                xp = hd.kappa(xp, grid=True)  # [B, C·d, ...]; padded cells read κ(0)
        w = channel(hd.psi, c).matrix()  # [n, (C/g)·p·d]
        n, cg = w.shape[0], x.shape[1] // g
        if d > 1:
            w = w.reshape(n, cg, p, d).transpose(2, 3)
        w = w.reshape(n, cg * d, p)
        if geo.taps is not None:  # a tap subset: its kernel-box positions, zero elsewhere
            w = w.new_zeros(n, cg * d, math.prod(geo.kernel)).index_copy(-1, hd.tap_pos, w)
        w = w.reshape(n, cg * d, *geo.kernel).contiguous()  # size-1 axes can leave a strided view
        tied = hd.bias is not None and h.bias == "tied"
        y = conv(xp, w, hd.bias if tied else None, stride=geo.stride, padding=padding, dilation=geo.dilation,
                 groups=g)
        if hd.bias is not None and not tied:
            y = y + hd.bias.transpose(0, 1).reshape(1, -1, *y.shape[2:])
        return y

    return run


def _gather_patches(t: Term, s: Site):
    """Patches by index (out-of-grid taps read 0): ``[B, P, C·p]``, or ``[B, P, C]`` summed in aggregation mode; the
    index of a known grid is a buffer."""
    geo, summed = s.trace.geometry, t.info.get("mode") == "aggregation"

    def run(layer, x):
        b, cin = x.shape[:2]
        index = getattr(s.holder(layer), "patch_index", None)
        if index is None:
            index = geo.patch_index(tuple(x.shape[2:]), device=x.device)  # [P, p]
        taps = structure.gather_patches(x.reshape(b, cin, -1), index, dim=-1)  # [B, C, P, p]
        if summed:  # aggregation mode: each patch summed, [B, P, C]
            return taps.sum(-1).transpose(1, 2)
        return taps.permute(0, 2, 1, 3).flatten(2)

    return run


def _unfold(t: Term, s: Site):
    """Padding-mode patches of a 1-D or 2-D grid by im2col (``F.unfold``): ``[B, P, C·p]``, channel-major taps."""
    geo = s.trace.geometry
    own = geo.padding_mode == "zeros" and tuple(geo.pad_before) == tuple(geo.pad_after)

    def run(layer, x):
        c = x.shape[1]
        xp, padding = (x, tuple(geo.pad_before)) if own else (_pad(x, geo), (0,) * geo.rank)
        cols = structure.im2col(xp, geo.kernel, geo.stride, geo.dilation, padding)  # [B, C·box, P]
        if geo.taps is not None:  # kernel-box positions of the taps (a buffer built with the head)
            cols = cols.unflatten(1, (c, -1)).index_select(2, s.holder(layer).tap_pos).flatten(1, 2)
        return cols.transpose(1, 2)

    return run


def _box_sum(t: Term, s: Site):
    """Aggregation-mode patches (each patch summed): a depthwise convolution with the patch mask, ``[B, P, C]``."""
    geo = s.trace.geometry

    def run(layer, x):
        y = structure.box_sum(_pad(x, geo), geo.kernel_mask(x.device), geo.stride, geo.dilation)
        return y.flatten(2).transpose(1, 2)

    return run


# ------------------------------------------------------------------------------------------------ the table
EMITTERS: dict[str, Callable[[Term, Site], Callable]] = {
    # semantic ops (what runs where no rule rewrote them: each op's general form, the module's own; the
    # paper's literal forms are the oracle's, lower/reference.py)
    "xi": _xi_with(None),
    "patches": _gather_patches,
    "expand": _expand,
    "reconcile": _reconcile,
    "bias": _bias,
    "fuse_channels": _fuse_channels,
    "fuse_heads": _fuse_heads,
    "remainder": _remainder,
    "process": _process,
    "recur": _recurrence(None),
    # kernel ops
    "xi_kernel": _xi_with(None),
    "conv": _conv,
    "box_sum": _box_sum,
    "unfold": _unfold,
    "gather_patches": _gather_patches,
    "pool": _pool,
    "kappa_unfold": _kappa_unfold,
    "linear": _linear,
    "degree_linear": _degree_linear,
    "fused_sdpa": _fused_sdpa,
    "stacked_linear": _stacked_linear,
    "chebyshev_sum": _chebyshev_sum,
}


def op_table() -> dict[str, Callable[[Term, Site], Callable]]:
    """Every op's emitter: the layer ops above and each kernel op the components declare (a ξ's, a cell's; all
    families loaded)."""
    return {**EMITTERS, **dict.fromkeys(kernels(), _declared_kernel)}


def kernel_ops() -> tuple[str, ...]:
    """Every kernel op: the layer table's and the kernels the components declare."""
    return tuple(op for op in op_table() if op not in SEMANTIC_OPS)


def emitter(t: Term, s: Site) -> Callable:
    """The bound computation of term ``t`` (named after its op in the generated program)."""
    build = EMITTERS.get(t.op, _declared_kernel)
    return _named(build(t, s), t.op)
