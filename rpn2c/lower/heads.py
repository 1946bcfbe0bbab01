"""The default lowering's layer module: heads, channel and head fusion, remainder and processing.

The module holds the layer's parts (κ, ψ, ξ modules, biases, fusions, processing) and its program: the rewritten
term as steps, one emitter per op (``lower/program.py``, ``lower/emitters.py``), which the forward interprets and
the model's generated code inlines. Nothing here chooses a kernel. The reference lowering builds its layers on its
own (``lower/oracle.py``).
"""

from __future__ import annotations

import torch
from torch import nn

from rpn2c.ir.trace import HeadTrace
from rpn2c.components.base import XiContext
from rpn2c.components.impl.processing import Apply
from rpn2c.ir.layout import attention_layout
from rpn2c.lower.attention import PackedHeads
from rpn2c.lower.emitters import process_slot
from rpn2c.lower.program import layer_program, run_program
from rpn2c.ir.graph import HEAD_SLOT, HeadSpec, LayerSpec
from rpn2c.ir.types import TensorType



def _build_head(holder: nn.Module, h: HeadSpec, t: HeadTrace, x: TensorType, data: TensorType, aux_types,
                ops: frozenset, place: tuple[int, int] = (0, 1)) -> None:
    """Register the head's parts on ``holder`` (the layer itself for single-head layers); ``ops`` are the ops of
    the head's rewritten term (what will run); ``place``: (its index, the layer's head count)."""
    holder.spec, holder.trace = h, t
    c = h.channels
    feat = (t.mz,) if not t.grid_kappa else (data.features, *data.spatial)
    holder.kappa = h.kappa.component.build(feat)
    n = h.out if h.out is not None else t.d
    if not t.grid_kappa:
        psis = [h.psi.component.build(n, t.d // h.groups) for _ in range(c)]
        holder.psi = psis[0] if c == 1 else nn.ModuleList(psis)
    for slot, use in h.xi.items():
        comp = use.component
        if comp.kind == "grid":
            continue
        axis, size = HEAD_SLOT[slot].axis, HEAD_SLOT[slot].size(t)
        ctx = XiContext(axis, size, x.features, data.features, x.items if x.kind == "items" else None,
                        {k: aux_types[r.name] for k, r in comp.value_refs()}, place[1], place[0])
        mods = [comp.build(ctx) for _ in range(c if comp.count(ctx) else 1)]
        for m in mods:
            m.axis = axis
            m.aux_keys = {k: r.name for k, r in comp.value_refs()}  # hyper-parameter -> value id
        holder.add_module(slot, mods[0] if len(mods) == 1 else nn.ModuleList(mods))
    geo = t.geometry
    if geo is not None and geo.taps is not None:  # kernel-box positions of a patch's taps, built once
        pos = torch.tensor([_flat(tp, geo.kernel) for tp in geo.tap_positions()], dtype=torch.long)
        holder.register_buffer("tap_pos", pos, persistent=False)
    if geo is not None and ("gather_patches" in ops or "patches" in ops) and all(isinstance(v, int) for v in data.spatial):
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
                 aux_types: dict, out: TensorType, node, preds: dict):
        super().__init__()
        term = node.terms[1] if node.terms else None

        def head_ops(name):  # the ops of the head's rewritten term: the parts they need are built
            return frozenset(t.op for t in term.walk() if t.info.get("head") == name) if term else frozenset()

        self.x_kind, self.out_kind = x.kind, out.kind
        pre_t = x
        # empty processing lists stay plain tuples: a module each would cost build time for nothing
        self.pre = nn.ModuleList([u.component.build(pre_t) for u in spec.pre]) if spec.pre else ()
        data = ctx if ctx is not None else x
        self.has_context = ctx is not None
        if len(spec.heads) == 1:
            _build_head(self, spec.heads[0], traces[0], x, data, aux_types, head_ops(spec.heads[0].name))
            self.head_modules = None
        else:
            self.heads = nn.ModuleDict()
            for i, (h, t) in enumerate(zip(spec.heads, traces)):
                holder = nn.Module()
                _build_head(holder, h, t, x, data, aux_types, head_ops(h.name), (i, len(spec.heads)))
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
        self._fused_attention = term is not None and any(t.op == "fused_sdpa" for t in term.walk())
        if self._fused_attention:
            hp = spec.heads[0].xi["xi_instance"].component.hp
            # V's bias joins the GEMM unless a mask can leave a query with no key (then A's row is 0, b is not)
            self._fold_v_bias = (hp.attn_mask is None and hp.key_padding is None and hp.window is None
                                and hp.regions is None)
        pi = spec.pi.component
        self.pi = pi.build(x.features, out.features) if pi.name != "zero" else None
        self.post = nn.ModuleList([u.component.build(out) for u in spec.post]) if spec.post else ()
        self.program = () if term is None else layer_program(node, preds, hasattr(self, "heads"),
                                                             out.kind == "grid", x.kind == "grid", self._activation)
        self.input_ids = (preds["x"], preds.get("context"))

    def _activation(self, t):
        """The plain function of the processing step ``t`` stands for, or None (a module with state or mode)."""
        name, i = process_slot(t)
        hd = self.heads[t.key.head] if name == "head_post" and hasattr(self, "heads") else self
        mod = getattr(hd, name)[i]
        return mod.fn if isinstance(mod, Apply) else None

    def _holders(self):
        return [self] if not hasattr(self, "heads") else list(self.heads.values())

    def _pack_attention(self, spec, traces, x, data, aux_types) -> PackedHeads | None:
        """Identical attention heads keep their projections packed, as ``nn.MultiheadAttention`` does
        (``rpn2c/ir/layout.py``); checkpoints with per-head tensors still load."""
        layout = attention_layout(spec, traces, x.features, data.features, aux_types)
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

    @property
    def needs_prologue(self) -> bool:
        return bool(self._ties) or (self.packed is not None and not self._fused_attention)

    def prologue(self) -> None:
        """Per call, before any head reads its parameters: tied heads read their target's, per-head forms read
        views of packed attention tensors (conversions such as ``.double()`` replace the storage)."""
        if self._ties:
            self._bind_ties()
        if self.packed is not None and not self._fused_attention:
            self.packed.bind_views(self)

    def forward(self, x, context=None, aux=None):
        """The rewritten term's program (lower/program.py); the generated model program inlines the same steps."""
        self.prologue()
        return run_program(self, self.program, dict(zip(self.input_ids, (x, context))), aux or {})


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


def _flat(tap, kernel):
    idx = 0
    for c, k in zip(tap, kernel):
        idx = idx * k + c
    return idx


