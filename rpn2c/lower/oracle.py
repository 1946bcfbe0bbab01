"""The reference lowering's layer, built on its own: the oracle the default lowering is checked against.

``ReferenceLayer`` builds every part from the registry, puts the literal form of each part that has one in place
(``lower/literal_forms.py``: the padding matrix of a patch κ, the pooling matrices, ...) and computes each head with
``lower/reference.py`` (every matrix materialised as the paper writes it). It shares
no construction code with the default layer (``lower/heads.py``): the differential tests load one ``state_dict``
into two independent builds, so a wrong shape, slot, tie or packing in either shows. It names its tensors as the
IR's layouts say (``rpn2c/ir/layout.py``: identical attention heads packed as torch packs them), which both
lowerings follow.
"""

from __future__ import annotations

import torch
from torch import nn

from rpn2c.components.base import XiContext
from rpn2c.ir.graph import head_slots
from rpn2c.ir.layout import AttentionLayout, attention_layout
from rpn2c.lower import reference
from rpn2c.lower.attention import per_head_keys, migrate_per_head
from rpn2c.lower.literal_forms import literal
from rpn2c.lower.parts import fuse


def _head_type(out, width: int):
    shape = list(out.shape)
    shape[1 if out.kind == "grid" else -1] = width
    return out.with_shape(shape)


class ReferenceLayer(nn.Module):
    """``post(fuse_h(fuse_c(A_i κ(Z A_a) ψ_cᵀ + b)) + π(x))``, literally."""

    program = ()  # nothing to inline: the generated program calls the layer

    def __init__(self, spec, traces, x, ctx, aux_types: dict, out):
        super().__init__()
        self.x_kind, self.out_kind = x.kind, out.kind
        data = ctx if ctx is not None else x
        self.pre = nn.ModuleList(u.component.build(x) for u in spec.pre)
        self.post = nn.ModuleList(u.component.build(out) for u in spec.post)
        many = len(spec.heads) > 1
        if many:
            self.heads = nn.ModuleDict({h.name: nn.Module() for h in spec.heads})
        for i, (h, t) in enumerate(zip(spec.heads, traces)):
            self._literal_head(self.heads[h.name] if many else self, h, t, x, data, aux_types, out,
                               (i, len(spec.heads)))
        self.fusion = spec.fusion.component.build([t.n for t in traces]) if spec.fusion is not None else None
        self.pi = spec.pi.component.build(x.features, out.features) if spec.pi.name != "zero" else None
        self.pi_each = spec.pi_in_terms  # eq 30: π inside every (head, channel) term
        self._borrowed: list[tuple[nn.Module, str, nn.Module]] = []  # a tied head reads its target's tensors
        for h in spec.heads:
            if h.tie is not None:
                self._borrow(self.heads[h.name], self.heads[h.tie])
        self.layout = attention_layout(spec, traces, x.features, data.features, aux_types)
        if self.layout is not None:
            self._pack(self.layout)
        literal(self)  # every part that has a literal form computes by it
        self.bind_views()

    @staticmethod
    def _literal_head(hd: nn.Module, h, t, x, data, aux_types, out, place: tuple[int, int]) -> None:
        """Head ``place[0]`` of ``place[1]`` (a per-head attention mask gives it its slice)."""
        hd.spec, hd.trace = h, t
        hd.kappa = h.kappa.component.build((data.features, *data.spatial) if t.grid_kappa else (t.mz,))
        width = t.d if h.out is None else h.out
        if not t.grid_kappa:
            psi = [h.psi.component.build(width, t.d // h.groups) for _ in range(h.channels)]
            hd.psi = nn.ModuleList(psi) if h.channels > 1 else psi[0]
        for slot in head_slots(h):
            comp = h.xi[slot.name].component
            if comp.kind == "grid":  # the patch matrix: built by lower/reference.py from the trace's geometry
                continue
            refs = dict(comp.value_refs())
            ctx = XiContext(slot.axis, slot.size(t), x.features, data.features,
                            x.items if x.kind == "items" else None, {k: aux_types[r.name] for k, r in refs.items()},
                            place[1], place[0])
            mods = [comp.build(ctx) for _ in range(h.channels if comp.count(ctx) else 1)]
            for m in mods:
                m.axis, m.aux_keys = slot.axis, {k: r.name for k, r in refs.items()}
            hd.add_module(slot.name, nn.ModuleList(mods) if len(mods) > 1 else mods[0])
        rows = 1 if t.view == "vector" else t.n_out
        hd.bias = {"tied": lambda: nn.Parameter(torch.zeros(width)),
                   "untied": lambda: nn.Parameter(torch.zeros(rows, width))}.get(h.bias, lambda: None)()
        if h.channels > 1:
            hd.channel_fusion = h.channel_fusion.component.build([width] * h.channels)
        if h.post:
            hd.head_post = nn.ModuleList(u.component.build(_head_type(out, t.n)) for u in h.post)

    def _borrow(self, hd: nn.Module, target: nn.Module) -> None:
        """``hd`` keeps its modules (and buffers) but none of its parameters: it reads ``target``'s."""
        own = dict(hd.named_parameters())
        for path in own:
            if path.startswith("head_post."):
                continue
            where, _, name = path.rpartition(".")
            module = hd.get_submodule(where) if where else hd
            module._parameters.pop(name)
            self._borrowed.append((module, name, target.get_submodule(where) if where else target))

    def _holders(self) -> list[nn.Module]:
        return list(self.heads.values()) if hasattr(self, "heads") else [self]

    # ------------------------------------------------------------------------------------------- packing
    def _pack(self, layout: AttentionLayout) -> None:
        """Move the heads' projections into the packed tensors (their values kept)."""
        self._keys = per_head_keys(layout, ["heads." + n + "." for n in self.heads] if hasattr(self, "heads")
                                   else [""])
        values = {}  # (part, row block, bias): a key/value group's tensors are its first head's
        for path, part, _, block, bias, transpose in self._keys:
            where, _, name = path.rpartition(".")
            module = self.get_submodule(where) if where else self
            t = module._parameters.pop(name)
            values.setdefault((part, block, bias), t.detach().t() if transpose else t.detach())
        groups = ([("in_proj_weight", [p for p, _, _ in layout.parts])] if layout.packed
                  else [(f"{p}_proj_weight", [p]) for p, _, _ in layout.parts])
        for name, parts in groups:
            self.register_parameter(name, nn.Parameter(torch.cat([values[(p, h, False)] for p in parts
                                                                  for h in range(layout.blocks(p))])))
        if layout.biased:
            self.in_proj_bias = nn.Parameter(torch.cat([values[(p, h, True)] for p in layout.biased
                                                        for h in range(layout.blocks(p))]))
        for norm in layout.norms:  # one for all heads
            self.register_parameter(f"{norm}_weight", nn.Parameter(values[(norm, 0, False)]))
        self._register_load_state_dict_pre_hook(
            lambda sd, prefix, *_: migrate_per_head(sd, prefix, self.layout, self._keys))

    def bind_views(self) -> None:
        """Tied heads read their target's tensors; packed heads' tensors are slices of the packed ones (rows
        grouped by part, then by head; a query head's W_k and ψ are its key/value group's rows). Per call: a
        conversion (``.double()``) replaces the storage."""
        for module, name, source in self._borrowed:
            module.__dict__[name] = getattr(source, name)
        if self.layout is None:
            return
        lay, start, weight_start = self.layout, {}, 0
        for part, per_head, _ in lay.parts:
            start[part] = weight_start if lay.packed else 0
            weight_start += lay.blocks(part) * per_head
        bias_start, at = {}, 0
        for part in lay.biased:
            bias_start[part] = at
            at += lay.blocks(part) * lay.per_head(part)
        for path, part, _, block, bias, transpose in self._keys:  # block: the head's, or for k, v its group's
            where, _, name = path.rpartition(".")
            module = self.get_submodule(where) if where else self
            if part in lay.norms:
                module.__dict__[name] = getattr(self, f"{part}_weight")
                continue
            r = lay.per_head(part)
            if bias:
                t = self.in_proj_bias[bias_start[part] + block * r: bias_start[part] + (block + 1) * r]
            else:
                w = self.in_proj_weight if lay.packed else getattr(self, f"{part}_proj_weight")
                t = w[start[part] + block * r: start[part] + (block + 1) * r]
            module.__dict__[name] = t.t() if transpose else t

    # ------------------------------------------------------------------------------------------- forward
    def forward(self, x, context=None, aux=None):
        aux = aux or {}
        self.bind_views()
        raw = x
        for p in self.pre:
            x = p(x)
        data = context if context is not None else x
        grid = self.out_kind == "grid"

        def aux_of(m):
            return {k: aux[v] for k, v in m.aux_keys.items() if v in aux}

        pi = None
        if self.pi is not None:
            pi = self.pi(raw.movedim(1, -1)).movedim(-1, 1) if self.x_kind == "grid" else self.pi(raw)
        each = pi is not None and self.pi_each
        outs = []
        for hd in self._holders():
            y = reference.head(hd, x, data, aux_of, grid, (lambda v: v + pi) if each else None)
            for p in getattr(hd, "head_post", ()):
                y = p(y)
            outs.append(y)
        y = fuse(self.fusion, outs, grid) if self.fusion is not None else outs[0]
        if pi is not None and not each:
            y = y + pi
        for p in self.post:
            y = p(y)
        return y
