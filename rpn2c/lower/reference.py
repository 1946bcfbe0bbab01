"""The reference lowering: every head computed as the paper writes it, with each matrix materialised.

``head`` evaluates ``A_i κ(Z A_a) ψ_cᵀ + b_c`` per channel (grid heads: ``κ(X A_patch) ψᵀ``) and fuses the
channels, from its literal terms: interdependence ``z A`` / ``A z`` with ``A`` from the ξ module's ``matrix``,
reconciliation ``k ψ(w)ᵀ`` with ψ (block-diagonal for groups) materialised, and grid patches ``x A_patch`` with
the padding or aggregation matrix (the padding one is :func:`literal_patches`). Nothing here reads an optimiser
decision or shares a code path with the default lowering (``lower/heads.py``, ``lower/emitters.py``, which never
import this module); the component modules supply κ (in their literal forms, ``lower/literal_forms.py``), ψ's
parameters, the fusions and the ξ matrices. The default lowering's kernels are checked against this.
"""

from __future__ import annotations

import torch

from rpn2c.components.grid import Geometry
from rpn2c.components.xi import aggregation_matrix
from rpn2c.functional import structure
from rpn2c.ir.graph import slots_after, slots_before
from rpn2c.lower.parts import channel, fuse_channels


def interdependence(m, z, q, data, aux):
    """``z A`` (attribute ξ, A ∈ R^{M x M'}) or ``A z`` (instance ξ, A ∈ R^{N' x N}, row = output item); an affine
    ξ's ``[A | b]`` applied to ``z`` with a constant item (attribute: feature) of ones appended."""
    a = m.matrix(q, data, aux, z.shape[-1] if m.axis == "attribute" else z.shape[-2])
    b = m.offset()
    if m.axis == "attribute":
        if b is not None:
            a = torch.cat([a, b.unsqueeze(-2).expand(*a.shape[:-2], 1, -1)], -2)
            z = torch.cat([z, z.new_ones(*z.shape[:-1], 1)], -1)
        return z @ a
    if b is not None:
        a = torch.cat([a, b.unsqueeze(-1).expand(*a.shape[:-2], -1, 1)], -1)
        z = torch.cat([z, z.new_ones(*z.shape[:-2], 1, z.shape[-1])], -2)
    return a @ z


def reconciliation(psi, k, groups: int = 1):
    """``k ψ(w)ᵀ``; with ``groups = g`` the block-diagonal ``[n, D]`` matrix of the g group blocks."""
    if groups == 1:
        return k @ psi.matrix().transpose(-1, -2)
    w = psi.matrix().unflatten(0, (groups, -1))  # [g, n/g, D/g]
    return k @ torch.block_diag(*w.unbind(0)).transpose(-1, -2)


def literal_patches(x: torch.Tensor, geo: Geometry, spatial: tuple[int, ...]) -> torch.Tensor:
    """The patch gather as the paper writes it: ``x_flat @ A`` with the padding-mode matrix, ``[B, C, P, p]``."""
    a = structure.padding_matrix(**geo.structure_args(spatial, x.device), device=x.device, dtype=x.dtype)
    return (x.flatten(2) @ a).unflatten(-1, (-1, geo.patch_size))


def patches(x, geo, mode: str, spatial):
    """Grid patches by the literal matrix: padding mode ``[B, P, C·p]`` (one-hot columns, zero outside the grid),
    aggregation mode ``[B, P, C]`` (each patch summed)."""
    if mode == "padding":
        return literal_patches(x, geo, spatial).transpose(1, 2).flatten(2)  # [B, C, P, p] -> [B, P, C·p]
    a = aggregation_matrix(geo, spatial, x.dtype, x.device)  # [N, P]
    return (x.flatten(2) @ a).transpose(1, 2)


def head(hd, x, data, aux_of, grid_out: bool, term_pi=None):
    """One head's output, literally: ``fuse_c(A_i κ(Z A_a) ψ_cᵀ + b_c)``; ``aux_of(m)`` is the extra inputs of
    the ξ module ``m`` by its hyper-parameter names. ``term_pi``: ``y ↦ y + π(X)``, added to every channel's term
    before the fusion (eq 30's placement, ``pi_placement = "terms"``)."""
    h, t = hd.spec, hd.trace
    term_pi = term_pi or (lambda y: y)
    if t.grid_kappa:  # a compression over the grid (pooling): κ's own literal form
        return term_pi(hd.kappa(data, grid=True))
    if t.view == "grid":
        return _grid_head(hd, data, grid_out, term_pi)
    vec = t.view == "vector" and bool(h.xi)  # ξ acts on an item axis: a vector is one item
    q = x.unsqueeze(1) if vec else x
    z0 = data.unsqueeze(1) if vec else data
    ys = []
    for c in range(h.channels):
        z = z0
        for slot in slots_before(h):
            z = _interdependence(getattr(hd, slot.name), c, z, q, z0, aux_of)
        k = hd.kappa(z)
        for slot in slots_after(h):
            k = _interdependence(getattr(hd, slot.name), c, k, q, z0, aux_of)
        y = reconciliation(channel(hd.psi, c), k, h.groups)
        ys.append(term_pi(y if hd.bias is None else y + hd.bias))
    y = fuse_channels(hd, ys, grid_out)
    return y.squeeze(1) if vec else y


def _grid_head(hd, x, grid_out, term_pi):
    """``κ(X A_patch) ψ_cᵀ + b_c`` on the ``[B, P, C·p]`` patch matrix, back on the output grid ``[B, n, *P]``."""
    h, geo = hd.spec, hd.trace.geometry
    spatial = tuple(x.shape[2:])
    out_sp = geo.out_spatial(spatial)
    k = hd.kappa(patches(x, geo, h.xi["xi_attribute"].component.mode, spatial))
    ys = []
    for c in range(h.channels):
        y = reconciliation(channel(hd.psi, c), k, h.groups)
        y = y if hd.bias is None else y + hd.bias
        ys.append(term_pi(y.transpose(1, 2).reshape(x.shape[0], y.shape[-1], *out_sp)))
    return fuse_channels(hd, ys, grid_out)


def _interdependence(mod, c, z, q, data, aux_of):
    m = channel(mod, c)
    return interdependence(m, z, q, data, aux_of(m))
