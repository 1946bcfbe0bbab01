"""The layer module: heads, channel and head fusion, remainder and processing, in both lowerings.

The default heads compute ``A_i κ(Z A_a) ψᵀ`` with the kernels the optimiser chose (``node.decisions``, see
``rpn2c/passes/rules``): convolutions, pooling, shifts, gather/scatter and scaled_dot_product_attention. A kernel
is used only when its rule fired; otherwise the next form of its slot runs. ``reference=True`` hands every head
to ``lower/reference.py`` (the oracle: each matrix materialised as the paper writes it); the layer's head fusion,
remainder and processing are the components' own and shared by both.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rpn2c.ir.trace import HeadTrace
from rpn2c.components.base import XiContext
from rpn2c.functional.expansion import taylor_reconcile
from rpn2c.ir.layout import attention_layout
from rpn2c.lower.attention import PackedHeads, packed_attention
from rpn2c.lower import reference as literal
from rpn2c.ir.graph import HeadSpec, LayerSpec
from rpn2c.ir.types import TensorType

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_PAD_MODES = {"zeros": "constant", "circular": "circular", "reflect": "reflect", "replicate": "replicate"}


def _build_head(holder: nn.Module, h: HeadSpec, t: HeadTrace, x: TensorType, data: TensorType, aux_types,
                reference: bool, kernels: frozenset, shares: dict | None = None) -> None:
    """Register the head's parts on ``holder`` (the layer itself for single-head layers)."""
    holder.spec, holder.trace, holder.kernels = h, t, kernels
    c = h.channels
    feat = (t.mz,) if not t.grid_kappa else (data.features, *data.spatial)
    holder.kappa = h.kappa.component.build(feat, reference)
    if hasattr(holder.kappa, "select_kernels"):  # e.g. native pooling, only where the `pool` rule fired
        holder.kappa.select_kernels(kernels)
    n = h.out if h.out is not None else t.d
    if not t.grid_kappa:
        psis = [h.psi.component.build(n, t.d // h.groups) for _ in range(c)]
        holder.psi = psis[0] if c == 1 else nn.ModuleList(psis)
    for slot, use in h.xi.items():
        comp = use.component
        if getattr(comp, "kind", "") == "grid":
            continue
        axis = "attribute" if slot.startswith("xi_attribute") else "instance"
        size = {"xi_attribute": t.m, "xi_instance_prior": data.items, "xi_instance": t.nz,
                "xi_attribute_post": t.dk}[slot]
        ctx = XiContext(axis, size, x.features, data.features, x.items if x.kind == "items" else None,
                        {k: aux_types[r.name] for k, r in comp.value_refs()})
        mods = [comp.build(ctx) for _ in range(c if comp.count(ctx) else 1)]
        for m in mods:
            m.axis = axis
            m.aux_keys = {k: r.name for k, r in comp.value_refs()}  # hyper-parameter -> value id
            if "causal_sdpa" in kernels and hasattr(m, "is_causal_kernel"):
                m.is_causal_kernel = True  # rule causal_sdpa: SDPA's is_causal, no materialised mask
            if "flex_window" in kernels and hasattr(m, "flex_kernel"):
                m.flex_kernel = True  # rule flex_window: FlexAttention with a band block mask where it runs
            if "graph_spmm" in kernels and hasattr(m, "sparse_kernel"):
                m.sparse_kernel = True  # rule graph_spmm: the adjacency as one CSR/dense operand
            if shares and f"{h.name}:{slot}" in shares and hasattr(m, "share_key"):
                m.share_key = shares[f"{h.name}:{slot}"]  # rule shared_xi: one computation per forward
        holder.add_module(slot, mods[0] if len(mods) == 1 else nn.ModuleList(mods))
    geo = t.geometry
    if geo is not None and geo.taps is not None:  # kernel-box positions of a patch's taps, built once
        pos = torch.tensor([_flat(tp, geo.kernel) for tp in geo.tap_positions()], dtype=torch.long)
        holder.register_buffer("tap_pos", pos, persistent=False)
    if geo is not None and "gather_patches" in kernels and all(isinstance(v, int) for v in data.spatial):
        # hoisted: the (patch, tap) source index of a known grid is built once, not on every call
        holder.register_buffer("patch_index", geo.patch_index(tuple(data.spatial)), persistent=False)
    if h.bias == "tied":
        holder.bias = nn.Parameter(torch.zeros(n))
    elif h.bias == "untied":
        rows = t.n_out if t.view != "vector" else 1
        holder.bias = nn.Parameter(torch.zeros(rows, n))
    else:
        holder.bias = None
    if c > 1:
        holder.channel_fusion = h.channel_fusion.component.build([n] * c)


class LayerModule(nn.Module):
    """One IR ``layer`` node: ``post(fuse_h(fuse_c(A_i κ(Z A_a) ψ_cᵀ + b)) + π(x))``."""

    def __init__(self, spec: LayerSpec, traces: list[HeadTrace], x: TensorType, ctx: TensorType | None,
                 aux_types: dict, out: TensorType, kernels: dict, reference: bool, shares: dict | None = None):
        super().__init__()
        self.reference = reference
        if reference:  # the oracle never runs an optimiser decision
            kernels, shares = {}, None
        self.layer_kernels = frozenset(kernels.get(None, ()))

        def head_kernels(name):
            return frozenset(kernels.get(name, ()))

        self.x_kind, self.out_kind = x.kind, out.kind
        pre_t = x
        # empty processing lists stay plain tuples: a module each would cost build time for nothing
        self.pre = nn.ModuleList([u.component.build(pre_t) for u in spec.pre]) if spec.pre else ()
        data = ctx if ctx is not None else x
        self.has_context = ctx is not None
        if len(spec.heads) == 1:
            _build_head(self, spec.heads[0], traces[0], x, data, aux_types, reference,
                        head_kernels(spec.heads[0].name), shares)
            self.head_modules = None
        else:
            self.heads = nn.ModuleDict()
            for h, t in zip(spec.heads, traces):
                holder = nn.Module()
                _build_head(holder, h, t, x, data, aux_types, reference, head_kernels(h.name), shares)
                self.heads[h.name] = holder
        self._ties = []  # (module, parameter name, module holding it): a tied head's parts read its target's
        for h, t, hd in zip(spec.heads, traces, self._holders()):
            if h.post:
                hd.head_post = nn.ModuleList([u.component.build(_with_features(out, t.n)) for u in h.post])
            if h.tie is not None:
                self._ties += _tie(hd, self.heads[h.tie])
        self._bind_ties()
        self.fusion = spec.fusion.component.build([t.n for t in traces]) if spec.fusion is not None else None
        self.packed = self._pack_attention(spec, traces, x, data, aux_types)
        self._fused_attention = self.packed is not None and "fused_heads" in self.layer_kernels
        if self._fused_attention:
            hp = spec.heads[0].xi["xi_instance"].component.hp
            # V's bias joins the GEMM unless a mask can leave a query with no key (then A's row is 0, b is not)
            self._fold_v_bias = hp.attn_mask is None and hp.key_padding is None and hp.window is None
            self._fuse_out = spec.fusion.name == "concat_linear" and not any(h.post for h in spec.heads)
        pi = spec.pi.component
        self.pi = pi.build(x.features, out.features) if pi.name != "zero" else None
        self.post = nn.ModuleList([u.component.build(out) for u in spec.post]) if spec.post else ()

    def _holders(self):
        return [self] if not hasattr(self, "heads") else list(self.heads.values())

    def _pack_attention(self, spec, traces, x, data, aux_types) -> PackedHeads | None:
        """Identical attention heads keep their projections packed, as ``nn.MultiheadAttention`` does
        (``rpn2c/ir/layout.py``); checkpoints with per-head tensors still load."""
        xi = spec.heads[0].xi.get("xi_instance")
        keys = getattr(xi.component.hp, "keys", None) if xi is not None else None
        key_features = aux_types[keys.name].features if keys is not None else data.features
        layout = attention_layout(spec, traces, x.features, key_features, data.features)
        if layout is None:
            return None
        single = not hasattr(self, "heads")
        packed = PackedHeads(self, [("" if single else f"heads.{name}.", hd) for name, hd in
                                    ([("", self)] if single else self.heads.items())], layout)
        self._register_load_state_dict_pre_hook(self._migrate_heads)
        return packed

    def _migrate_heads(self, state_dict, prefix, *args):
        self.packed.migrate(state_dict, prefix)

    @property
    def first_attention(self):
        """The first packed head's ξ module: the masks and kernel flags all the heads share."""
        return self._holders()[0].xi_instance

    def bind_views(self) -> None:
        """Per-head tensors as views of packed ones (a no-op for layers without packed heads)."""
        if self.packed is not None:
            self.packed.bind_views(self)

    def _bind_ties(self):
        """Point each tied head's parameters at its target's (per call: conversions may replace them)."""
        for mod, name, src in self._ties:
            mod.__dict__[name] = getattr(src, name)

    def _head_post(self, outs):
        """Each head's own processing (``post`` inside a ``head name { ... }``), before the head fusion."""
        for i, hd in enumerate(self._holders()):
            for p in getattr(hd, "head_post", ()):
                outs[i] = p(outs[i])
        return outs

    def forward(self, x, context=None, aux=None):
        aux = aux or {}
        if self._ties:
            self._bind_ties()
        raw = x
        for p in self.pre:
            x = p(x)
        data = context if context is not None else x
        if self.packed is not None and not self._fused_attention:
            self.packed.bind_views(self)
        y = None
        if self.reference:  # the oracle: lower/reference.py, nothing of the default heads below
            outs = [literal.head(hd, x, data, lambda m: own_aux(m, aux), self.out_kind == "grid")
                    for hd in self._holders()]
        elif self._fused_attention:  # rule fused_heads: kernel op fused_sdpa
            outs = packed_attention(self, x, data, aux, self._fold_v_bias, self._fuse_out)
            if self._fuse_out:
                y, outs = outs, None
        elif "stacked_heads" in self.layer_kernels:
            outs = self._stacked_heads(data)
        else:
            outs = [self._head(hd, x, data, aux) for hd in self._holders()]
        if y is None:
            outs = self._head_post(outs)
            y = literal.fuse(self.fusion, outs, self.out_kind == "grid") if self.fusion is not None else outs[0]
        if self.pi is not None:
            y = y + (self.pi(raw.movedim(1, -1)).movedim(-1, 1) if self.x_kind == "grid" else self.pi(raw))
        for p in self.post:
            y = p(y)
        return y

    # ------------------------------------------------------------------------------------------- one head
    def _head(self, hd, x, data, aux):
        t: HeadTrace = hd.trace
        if t.grid_kappa:
            return hd.kappa(data, grid=True)
        if t.view == "grid":
            return self._grid_head(hd, data)
        vec = t.view == "vector" and bool(hd.spec.xi)  # without ξ a vector head needs no item axis
        q = x.unsqueeze(1) if vec else x
        z0 = data.unsqueeze(1) if vec else data
        y = self._items_head(hd, q, z0, aux)
        return y.squeeze(1) if vec else y

    def _stacked_heads(self, data):
        """Identical perceptron heads (rule ``stacked_heads``): κ once, one F.linear with ψ rows stacked."""
        holders = self._holders()
        k = holders[0].kappa(data)
        weight = torch.cat([hd.psi.weight for hd in holders])
        bias = torch.cat([hd.bias for hd in holders]) if holders[0].bias is not None else None
        return list(F.linear(k, weight, bias).split([hd.psi.weight.shape[0] for hd in holders], dim=-1))

    def _fuse_channels(self, hd, ys):
        return literal.fuse_channels(hd, ys, self.out_kind == "grid")

    def _add_bias(self, hd, y):
        return y if hd.bias is None else y + hd.bias

    def _items_head(self, hd, q, z0, aux):
        h: HeadSpec = hd.spec
        shared = z_shared = None
        before = [getattr(hd, slot) for slot in ("xi_attribute", "xi_instance_prior") if slot in h.xi]
        one_z = not any(isinstance(m, nn.ModuleList) for m in before)  # no per-channel ξ: one (interned) term
        ys = []
        for c in range(h.channels):
            if shared is not None:
                k = shared
            else:
                z = z_shared
                if z is None:
                    z = z0
                    for mod in before:
                        z = _xi(mod, c, z, q, z0, aux)
                    if one_z:
                        z_shared = z
                if "degree_blocks" in hd.kernels:  # κ never built: ψ by degree blocks, bias included
                    ys.append(_degree_linear(hd, c, z))
                    continue
                k = hd.kappa(z)
                if "shared_kappa" in hd.kernels:
                    shared = k
            psi = literal.channel(hd.psi, c)
            if "project_first" in hd.kernels:
                y = _xi(getattr(hd, "xi_instance"), c, _reconcile(h, psi, k), q, z0, aux)
            else:
                if "xi_instance" in h.xi:
                    k = _xi(getattr(hd, "xi_instance"), c, k, q, z0, aux)
                if "xi_attribute_post" in h.xi:
                    k = _xi(getattr(hd, "xi_attribute_post"), c, k, q, z0, aux)
                if "linear" in hd.kernels:  # ψ and the bias in one addmm
                    ys.append(F.linear(k, psi.weight, hd.bias))
                    continue
                y = _reconcile(h, psi, k)
            ys.append(self._add_bias(hd, y))
        return self._fuse_channels(hd, ys)

    # ------------------------------------------------------------------------------------------- grid heads
    def _grid_head(self, hd, x):
        h: HeadSpec = hd.spec
        t: HeadTrace = hd.trace
        geo = t.geometry
        b = x.shape[0]
        out_sp = geo.out_spatial(tuple(x.shape[2:]))
        mode = h.xi["xi_attribute"].component.mode
        if "conv" in hd.kernels:
            ys = self._conv(hd, x, geo)
        else:
            z = self._patches(x, geo, mode, hd.kernels, getattr(hd, "tap_pos", None),
                              getattr(hd, "patch_index", None))  # [B, P, C·p|C]
            blocks = "degree_blocks" in hd.kernels  # κ never built: ψ by degree blocks, bias included
            k = None if blocks else hd.kappa(z)
            ys = []
            for c in range(h.channels):
                if blocks:
                    ys.append(_degree_linear(hd, c, z))
                    continue
                psi = literal.channel(hd.psi, c)
                if "linear" in hd.kernels:  # ψ and the bias in one addmm
                    ys.append(F.linear(k, psi.weight, hd.bias))
                    continue
                ys.append(self._add_bias(hd, _reconcile(h, psi, k)))
            ys = [y.transpose(1, 2).reshape(b, y.shape[-1], *out_sp) for y in ys]  # [B, n, *S], a view
        return self._fuse_channels(hd, ys)

    def _patches(self, x, geo, mode, kernels=frozenset(), tap_pos=None, index=None):
        b, cin = x.shape[:2]
        flat = x.reshape(b, cin, -1)
        if mode == "padding" and "unfold_patches" in kernels:
            return _unfold(x, geo, tap_pos)
        if mode == "aggregation" and "box_sum" in kernels:
            kernel = geo.kernel_mask(x.device).to(x.dtype).expand(cin, 1, *geo.kernel)
            xp = _pad(x, geo)
            y = _CONV[geo.rank](xp, kernel, stride=geo.stride, dilation=geo.dilation, groups=cin)
            return y.flatten(2).transpose(1, 2)
        if index is None:
            index = geo.patch_index(tuple(x.shape[2:]), device=x.device)  # [P, p]
        taps = flat[:, :, index.clamp(min=0)] * (index >= 0)  # [B, C, P, p], zeros outside
        if mode == "aggregation":
            return taps.sum(-1).transpose(1, 2)  # [B, P, C]
        return taps.permute(0, 2, 1, 3).flatten(2)

    def _conv(self, hd, x, geo):
        """Padding-mode grid ξ + elementwise κ + ψ as one convolution per head (channels stacked).

        Zero padding goes to the convolution itself when κ(0) = 0 is not needed (identity κ, symmetric pads);
        a tied bias is the convolution's bias; a single channel needs no concatenation.
        """
        h: HeadSpec = hd.spec
        kappa = h.kappa.component
        d = kappa.degree()
        cin = x.shape[1]
        padding = conv_padding(kappa.name, geo)
        if padding is not None:
            xp = x
        else:
            xp, padding = _pad(x, geo), 0
            if kappa.name != "identity":
                xp = hd.kappa(xp, grid=True)  # [B, C·d, ...]; padded cells read κ(0)
        p, g = geo.patch_size, h.groups
        cg = cin // g  # input channels per group
        weights = []
        for c in range(h.channels):
            w = literal.channel(hd.psi, c).matrix()  # [n, (C/g)·p·d]
            n = w.shape[0]
            if d > 1:
                w = w.reshape(n, cg, p, d).transpose(2, 3)
            w = w.reshape(n, cg * d, p)
            if geo.taps is not None:
                full = w.new_zeros(n, cg * d, math.prod(geo.kernel))
                w = full.index_copy(-1, hd.tap_pos, w)
            weights.append(w.reshape(n, cg * d, *geo.kernel).contiguous())  # size-1 axes can leave a strided view
        conv = _CONV[geo.rank]
        tied = hd.bias is not None and h.bias == "tied"
        if g == 1:
            weight = weights[0] if len(weights) == 1 else torch.cat(weights)
            bias = None
            if tied:
                bias = hd.bias if len(weights) == 1 else hd.bias.repeat(len(weights))
            y = conv(xp, weight, bias, stride=geo.stride, padding=padding, dilation=geo.dilation)
            ys = [y] if h.channels == 1 else list(y.chunk(h.channels, dim=1))
        else:  # grouped: one convolution per channel keeps each channel's output blocks contiguous
            ys = [conv(xp, w, hd.bias if tied else None, stride=geo.stride, padding=padding, dilation=geo.dilation,
                       groups=g) for w in weights]
        if hd.bias is not None and not tied:
            ys = [y + hd.bias.transpose(0, 1).reshape(1, -1, *y.shape[2:]) for y in ys]
        return ys


def _with_features(t: TensorType, n: int) -> TensorType:
    """``t`` with its feature (grid: channel) axis of width ``n``: the type of one head's output."""
    shape = list(t.shape)
    shape[1 if t.kind == "grid" else -1] = n
    return t.with_shape(shape)


def _tie(holder: nn.Module, target: nn.Module) -> list[tuple[nn.Module, str, nn.Module]]:
    """Drop ``holder``'s own head parameters (not its ``head_post``): it reads ``target``'s at the same paths, so
    ``state_dict`` holds each tensor once and the gradients of both heads accumulate in it."""
    links = []
    for path, _ in list(holder.named_parameters()):
        if path.startswith("head_post."):
            continue
        owner, _, name = path.rpartition(".")
        mod = holder.get_submodule(owner)
        del mod._parameters[name]
        links.append((mod, name, target.get_submodule(owner)))
    return links


def conv_padding(kappa_name: str, geo) -> tuple[int, ...] | None:
    """The padding a convolution can apply itself: symmetric zero padding read by an identity κ (any other κ
    must see κ(0) in the padded cells, so the grid is padded explicitly); None otherwise."""
    if kappa_name == "identity" and geo.padding_mode == "zeros" and tuple(geo.pad_before) == tuple(geo.pad_after):
        return tuple(geo.pad_before)
    return None


def _unfold(x, geo, tap_pos=None):
    """Padding-mode patches of a 1-D or 2-D grid by im2col (``F.unfold``): ``[B, P, C·p]``, channel-major taps.

    Symmetric zero padding is im2col's own; any other padding is applied to the grid first, so the windows are
    those of the patch geometry. A tap subset (cylinder/sphere) keeps only its kernel-box positions.
    """
    b, c = x.shape[:2]
    # symmetric zero padding is im2col's own (no padded copy of the grid); other padding is applied first
    own = geo.padding_mode == "zeros" and tuple(geo.pad_before) == tuple(geo.pad_after)
    xp, padding = (x, tuple(geo.pad_before)) if own else (_pad(x, geo), (0,) * geo.rank)
    kernel, stride, dilation = geo.kernel, geo.stride, geo.dilation
    if geo.rank == 1:
        xp, kernel, stride, dilation, padding = (xp.unsqueeze(2), (1, *kernel), (1, *stride), (1, *dilation),
                                                 (0, *padding))
    cols = F.unfold(xp, kernel, dilation=dilation, padding=padding, stride=stride)  # [B, C·box, P]
    if tap_pos is not None:  # kernel-box positions of the taps (a buffer built with the head)
        cols = cols.unflatten(1, (c, -1)).index_select(2, tap_pos).flatten(1, 2)
    return cols.transpose(1, 2)


def _degree_linear(hd, c, z):
    """Rule ``degree_blocks``: ``taylor(z)·ψ_cᵀ + b`` by ψ's degree blocks, without κ."""
    return taylor_reconcile(z, literal.channel(hd.psi, c).weight, hd.bias, d=hd.spec.kappa.component.hp.d)


def _reconcile(h: HeadSpec, psi, k):
    """``k ψᵀ``; with ``groups = g`` ψ is block-diagonal: group j's outputs read only feature block j. Applied
    factored (ψ's own ``apply``) and contracted per group; the reference materialises ψ (``lower/reference.py``).
    """
    g = h.groups
    if g == 1:
        return psi.apply(k)
    w = psi.matrix().unflatten(0, (g, -1))  # [g, n/g, D/g]
    y = torch.einsum("...gd,gnd->...gn", k.unflatten(-1, (g, -1)), w)
    return y.flatten(-2)


def _flat(tap, kernel):
    idx = 0
    for c, k in zip(tap, kernel):
        idx = idx * k + c
    return idx


def _pad(x, geo):
    pads = []
    for b, a in zip(reversed(geo.pad_before), reversed(geo.pad_after)):
        pads += [b, a]
    if not any(pads):
        return x
    return F.pad(x, pads, mode=_PAD_MODES[geo.padding_mode])


def own_aux(m, aux: dict) -> dict:
    """The layer's extra inputs (keyed by value id) as ``m`` reads them: keyed by its hyper-parameter names."""
    own = {k: aux[v] for k, v in getattr(m, "aux_keys", {}).items() if v in aux}
    if "_memo" in aux:
        own["_memo"] = aux["_memo"]
    return own


def _xi(mod, c, z, q, data, aux):
    m = literal.channel(mod, c)
    return m.apply(z, q, data, own_aux(m, aux))
