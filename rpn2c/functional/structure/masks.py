"""Attention masks of a bilinear ξ as one additive float mask: 0 where a query may read a key, −inf where not.

The terms are summed in a fixed order (causal, window, region, ``attn_mask``, ``key_padding``), either as the dense
``[..., Nq, Nc]`` mask or only at chosen entries ``(rows, cols)`` (e.g. a graph's edges, O(E)).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from rpn2c.functional.structure.band import band_matrix, band_outside, region_matrix, region_outside

MaskMode = Literal["block", "keep", "add"]


def mask_term(m: Tensor, mode: MaskMode, dtype: torch.dtype) -> Tensor:
    """One mask as an additive term: ``block`` (True = blocked) and ``keep`` (True = kept) give 0 / −inf,
    ``add`` its own values (in ``dtype``)."""
    if mode == "add":
        return m.to(dtype)
    if mode not in ("block", "keep"):
        raise ValueError(f"unknown mask mode {mode!r}")
    blocked = m.bool() if mode == "block" else ~m.bool()
    return torch.zeros(blocked.shape, dtype=dtype, device=blocked.device).masked_fill(blocked, float("-inf"))


def additive_mask(
    nq: int,
    nc: int,
    dtype: torch.dtype,
    device: torch.device | str | None = None,
    *,
    causal: bool = False,
    window: int | None = None,
    region: tuple[int, int] | None = None,
    attn_mask: Tensor | None = None,
    attn_mode: MaskMode = "block",
    key_padding: Tensor | None = None,
    padding_mode: MaskMode = "block",
    literal: bool = False,
    rows: Tensor | None = None,
    cols: Tensor | None = None,
) -> Tensor | None:
    """``M = Σ_t term_t`` over the masks given, or None when there is none.

    Terms (query ``i``, key ``j``): ``causal`` blocks ``j > i``; ``window`` blocks ``|i − j| > window`` (from
    item indices, or with ``literal`` the band matrix R of ones, :func:`band_matrix`, as a keep mask);
    ``region = (k, K)`` blocks the pairs outside region pair k of K (:func:`region_outside`; ``literal``: the
    indicator :func:`region_matrix`); ``attn_mask [..., Nq | 1, Nc]`` and ``key_padding [..., Nc]`` (over keys, broadcast over queries) by their
    modes (:func:`mask_term`). Without ``rows`` / ``cols`` the dense mask ``[..., nq, nc]`` on ``device``; with
    index tensors ``rows``, ``cols`` (broadcastable) only the entries ``M[..., rows, cols]``.
    """
    dense = rows is None
    if dense:
        rows = torch.arange(nq, device=device).unsqueeze(-1)
        cols = torch.arange(nc, device=device)
    masks: list[tuple[Tensor, MaskMode]] = []
    if causal:
        masks.append((cols > rows, "block"))
    if window is not None:
        if literal:
            band = band_matrix(nq, nc, window, device=rows.device)
            masks.append((band if dense else band[rows, cols], "keep"))
        else:
            masks.append((band_outside(rows, cols, window), "block"))
    if region is not None:
        if literal:
            keep = region_matrix(nq, nc, *region, device=rows.device)
            masks.append((keep if dense else keep[rows, cols], "keep"))
        else:
            masks.append((region_outside(rows, cols, nq, nc, *region), "block"))
    for m, mode in ((attn_mask, attn_mode), (None if key_padding is None else key_padding.unsqueeze(-2), padding_mode)):
        if m is not None:
            if not dense:
                m = m[..., rows if m.shape[-2] != 1 else torch.zeros_like(rows), cols]
            masks.append((m, mode))
    terms = [mask_term(m, mode, dtype) for m, mode in masks]
    return sum(terms[1:], terms[0]) if terms else None
