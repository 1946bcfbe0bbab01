"""The ``nn.Module`` implementations of :mod:`rpn2c.components.xi_hybrid` (imported when a model is built)."""

from __future__ import annotations

import weakref

import torch
from torch import nn

from rpn2c.components.impl.base import XiModule
from rpn2c.functional import kernels, structure


class _HybridXi(XiModule):
    def __init__(self, parts, keymaps, hp, axis, fusion=None):
        super().__init__()
        self.parts, self.keymaps, self.hp, self.axis = nn.ModuleList(parts), keymaps, hp, axis
        self.weights = hp.weights
        self.fusion = fusion  # the fusion entry's module (weighted, median, concat_*), else None
        self._merge_cache = None  # ((src, dst, w) weakrefs, key, merged entries) of the last edge list seen

    def _aux(self, i, aux):
        return {pk: aux[hk] for pk, hk in self.keymaps[i].items() if hk in aux}

    def _entry_fuse(self, ts):
        """The fusion entry on matrices or outputs ``ts`` along their output axis (the last for the attribute axis,
        the item axis -2 for the instance axis: it is moved last and back)."""
        inst = self.axis == "instance"
        ts = torch.broadcast_tensors(*[t.mT if inst else t for t in ts])
        y = self.fusion(list(ts))
        return y.mT if inst else y

    def _concat_bias(self):
        """The bias of a concat_* fusion entry; None for the others (weighted and median have none)."""
        return getattr(getattr(self.fusion, "linear", self.fusion), "bias", None)

    def _fuse(self, mats):
        f = self.hp.fusion
        if self.fusion is not None:  # built for the entry fusions only (weighted, median, concat_*)
            return self._entry_fuse(mats)
        if f == "hadamard":
            out = mats[0]
            for a in mats[1:]:
                out = out * a
            return out
        if f in ("sum", "mean"):
            w = self.weights or [1.0] * len(mats)
            out = sum((wi * a for wi, a in zip(w[1:], mats[1:])), w[0] * mats[0])
            return out / len(mats) if f == "mean" else out
        out = mats[0]
        for a in mats[1:]:
            out = torch.maximum(out, a) if f == "max" else torch.minimum(out, a)
        return out

    def matrix(self, q, c, aux, size=None):
        a = self._fuse([p.matrix(q, c, self._aux(i, aux), size) for i, p in enumerate(self.parts)])
        if self.hp.normalize == "none":
            return a
        r = a if self.axis == "instance" else a.transpose(-1, -2)
        r = kernels.normalize_matrix(r, self.hp.normalize, self.hp.softmax_scale, self.hp.mask_zeros)
        return r if self.axis == "instance" else r.transpose(-1, -2)

    # ``apply`` (inherited): the fused matrix times z, for every fusion. The kernels below avoid the matrix where
    # their record (components/xi_hybrid.py) applies; the rules fused_parts and edge_hadamard choose them.
    def apply_parts(self, z, q, c, aux):
        """Kernel ``fused_parts`` (sum, mean, weighted, concat_*; unnormalised): the parts' outputs A_i z fused."""
        f = self.hp.fusion
        if f in ("sum", "mean"):
            w = self.weights or [1.0] * len(self.parts)
            if f == "mean":
                w = [wi / len(self.parts) for wi in w]
            ys = [wi * p.apply(z, q, c, self._aux(i, aux)) for i, (wi, p) in enumerate(zip(w, self.parts))]
            return sum(ys[1:], ys[0])
        y = self._entry_fuse([p.apply(z, q, c, self._aux(i, aux)) for i, p in enumerate(self.parts)])
        b = self._concat_bias()
        if b is None:
            return y
        # (⊔ A_i W + 1 bᵀ) applied to z adds (Σ z) bᵀ; the fusion entry added b once
        if self.axis == "attribute":
            return y + (z.sum(-1, keepdim=True) - 1) * b
        return y + (z.sum(-2, keepdim=True) - 1) * b[:, None]

    def hadamard_on_edges(self, z, q, c, aux):
        """Kernel ``edge_hadamard``: the product on the edge list of the first part that has one (a 1-hop graph
        part), the other parts' entries taken at its edges, then the normalisation over those entries."""
        zz = z if self.axis == "instance" else z.transpose(-1, -2)
        n = zz.shape[-2]
        first, sup = next((i, s) for i, p in enumerate(self.parts)
                          if (s := p.support(self._aux(i, aux), n, zz.dtype, zz.device)) is not None)
        dst, src, vals = self._merged(*sup, n)  # duplicate entries merged: A[dst, src] is their sum
        for i, p in enumerate(self.parts):
            if i != first:
                vals = vals * self._entries(p, q, c, self._aux(i, aux), dst, src, n)
        norm = self.hp.normalize
        if norm.startswith("softmax"):  # over the non-zero entries (merged-away placeholders are zeros)
            seg = src if norm.endswith("column") else dst
            vals = vals * self.hp.softmax_scale
            vals = structure.edge_softmax(vals, seg, n, valid=vals != 0)
        elif norm in ("row", "column"):
            seg = dst if norm == "row" else src
            deg = torch.zeros((*vals.shape[:-1], n), dtype=vals.dtype, device=vals.device).index_add(-1, seg, vals)
            d = deg.gather(-1, seg.expand(*vals.shape[:-1], -1))
            vals = torch.where(d != 0, vals / torch.where(d != 0, d, torch.ones_like(d)), torch.zeros_like(vals))
        elif norm == "symmetric":
            deg = torch.zeros((*vals.shape[:-1], n), dtype=vals.dtype, device=vals.device).index_add(-1, dst, vals)
            inv_sqrt = torch.where(deg > 0, torch.where(deg > 0, deg, torch.ones_like(deg)).rsqrt(),
                                   torch.zeros_like(deg))
            lead = vals.shape[:-1]
            vals = vals * inv_sqrt.gather(-1, dst.expand(*lead, -1)) * inv_sqrt.gather(-1, src.expand(*lead, -1))
        y = structure.edge_aggregate(zz, src, dst, vals, n)
        return y if self.axis == "instance" else y.transpose(-1, -2)

    def _merged(self, src, dst, w, n):
        """``(dst, src, w)`` with duplicate entries merged at a fixed size (:func:`structure.coalesce_edges`: the sum
        at the first of each run, ``w = 0`` placeholders elsewhere; eagerly the placeholders are dropped), cached
        while the same unmodified edge tensors come back (a fixed graph's edge list is merged once)."""
        compiling = torch.compiler.is_compiling()
        cacheable = not compiling and not w.requires_grad
        if cacheable:
            key = (n, src._version, dst._version, w._version, src.device)
            if self._merge_cache is not None:
                refs, old, value = self._merge_cache
                if old == key and all(r() is t for r, t in zip(refs, (src, dst, w))):
                    return value
            refs = tuple(weakref.ref(t) for t in (src, dst, w))
        dst, src, w, count = structure.coalesce_edges(dst, src, w, n)
        if not compiling:
            keep = count > 0
            dst, src, w = dst[keep], src[keep], w[keep]
        if cacheable:
            self._merge_cache = (refs, key, (dst, src, w))
        return dst, src, w

    def _entries(self, p, q, c, aux, dst, src, n):
        """Entries R[dst, src] (row = output) of part ``p``: by its ``entries`` method where it has one (factored:
        O(E·r) for the bilinear forms), else gathered from its matrix (dense parts: kernels)."""
        e = p.entries(q, c, aux, dst, src)
        if e is not None:
            return e
        a = p.matrix(q, c, aux, n)
        r = a if self.axis == "instance" else a.transpose(-1, -2)
        return r[..., dst, src]
