"""The reference lowering's literal forms: each term of a head computed with the paper's materialised matrix.

``LITERAL`` is the table the reference lowering reads: interdependence ``z A`` / ``A z`` with ``A`` from the ξ
module's ``matrix``, reconciliation ``k ψ(w)ᵀ`` with ψ (block-diagonal for groups) materialised, and grid patches
``x A_patch`` with the padding or aggregation matrix. None of them consults an optimiser decision; the default
lowering's kernels are checked against these.
"""

from __future__ import annotations

import torch

from rpn2c.components.xi import aggregation_matrix, padding_matrix


def interdependence(m, z, q, data, aux):
    """``z A`` (attribute ξ, A ∈ R^{M x M'}) or ``A z`` (instance ξ, A ∈ R^{N' x N}, row = output item)."""
    a = m.matrix(q, data, aux, z.shape[-1] if m.axis == "attribute" else z.shape[-2])
    return z @ a if m.axis == "attribute" else a @ z


def reconciliation(psi, k, groups: int = 1):
    """``k ψ(w)ᵀ``; with ``groups = g`` the block-diagonal ``[n, D]`` matrix of the g group blocks."""
    if groups == 1:
        return k @ psi.matrix().transpose(-1, -2)
    w = psi.matrix().unflatten(0, (groups, -1))  # [g, n/g, D/g]
    return k @ torch.block_diag(*w.unbind(0)).transpose(-1, -2)


def patches(x, geo, mode: str, spatial):
    """Grid patches by the literal matrix: padding mode ``[B, P, C·p]`` (one-hot columns, zero outside the grid),
    aggregation mode ``[B, P, C]`` (each patch summed)."""
    b, cin = x.shape[:2]
    flat = x.reshape(b, cin, -1)
    if mode == "padding":
        a = padding_matrix(geo, spatial, x.dtype, x.device)  # [N, P·p]
        z = (flat @ a).unflatten(-1, (-1, geo.patch_size))  # [B, C, P, p]
        return z.permute(0, 2, 1, 3).flatten(2)
    a = aggregation_matrix(geo, spatial, x.dtype, x.device)  # [N, P]
    return (flat @ a).transpose(1, 2)


LITERAL = {"interdependence": interdependence, "reconciliation": reconciliation, "patches": patches}
