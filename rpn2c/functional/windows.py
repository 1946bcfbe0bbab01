"""Shifted windows over a grid of items (Swin Transformer, Liu et al. 2021), as index maths.

The items ``[..., N, C]`` of a channels-last grid ``[gh, gw]`` (item n at row-major position n) are attended in
windows of ``w x w`` positions. With a shift s the grid is first rolled by ``(−s, −s)`` (cyclically), so each
window of the rolled grid holds positions of up to four windows of the plain one; a pair of items of one rolled
window interacts only when they lie in the same region along both axes (region of a rolled coordinate p on an
axis of length n: 0 below n − w, 1 below n − s, else 2), i.e. when they were neighbours before the roll.

- :func:`partition` / :func:`unpartition`: the roll and the windows as a reshape, ``[..., N, C] <-> [..., nW, w², C]``.
- :func:`shift_mask`: the region mask of each rolled window, additive ``[nW, w², w²]`` (0 kept, −∞ blocked).
- :func:`relative_index` / :func:`window_bias`: Swin's relative position bias, ``B[h, i, j] = T[δ(i, j), h]`` with
  ``δ = (a_i − a_j + w − 1)(2w − 1) + (b_i − b_j + w − 1)`` for window coordinates (a, b), T ∈ R^{(2w−1)² x H}.
- :func:`dense_windows`: the literal N x N structure (who attends to whom, each item's place in its window) the
  reference lowering builds.
- :func:`merge_patches` / :func:`merge_selections`: Swin's patch merging, each 2 x 2 neighbourhood's items
  concatenated in the order (0, 0), (1, 0), (0, 1), (1, 1) (row, column), as a reshape and as selection matrices.
- :func:`pad_grid` / :func:`crop_grid` / :func:`grid_selection`: a grid's items placed in a larger grid (zeros
  elsewhere) and back, as views and as the selection matrix.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def relative_index(w: int, device=None) -> Tensor:
    """``δ(i, j)`` for the items i, j of one ``w x w`` window (row-major), int64 ``[w², w²]``, in [0, (2w−1)²)."""
    r = torch.arange(w, device=device)
    a, b = r.repeat_interleave(w), r.repeat(w)  # window coordinates (row, column) of item i = a·w + b
    return (a[:, None] - a[None, :] + w - 1) * (2 * w - 1) + (b[:, None] - b[None, :] + w - 1)


def window_bias(table: Tensor, w: int, index: Tensor | None = None) -> Tensor:
    """The per-head bias ``[H, w², w²]`` of a learned ``table`` ``[(2w−1)², H]``: ``table[δ(i, j), h]``."""
    idx = relative_index(w, table.device) if index is None else index
    return table[idx].permute(2, 0, 1)


def partition(x: Tensor, grid: tuple[int, int], w: int, shift: int = 0) -> Tensor:
    """Items ``[..., gh·gw, C]`` rolled by ``(−shift, −shift)`` on the grid and cut into windows:
    ``[..., nW, w², C]``, windows row-major, then items row-major inside each."""
    gh, gw = grid
    *lead, _, c = x.shape
    x = x.reshape(*lead, gh, gw, c)
    if shift:
        x = torch.roll(x, (-shift, -shift), dims=(-3, -2))
    x = x.reshape(*lead, gh // w, w, gw // w, w, c).transpose(-4, -3)
    return x.reshape(*lead, (gh // w) * (gw // w), w * w, c)


def unpartition(y: Tensor, grid: tuple[int, int], w: int, shift: int = 0) -> Tensor:
    """The inverse of :func:`partition`: windows ``[..., nW, w², C]`` back to items ``[..., gh·gw, C]``."""
    gh, gw = grid
    *lead, _, _, c = y.shape
    y = y.reshape(*lead, gh // w, gw // w, w, w, c).transpose(-4, -3).reshape(*lead, gh, gw, c)
    if shift:
        y = torch.roll(y, (shift, shift), dims=(-3, -2))
    return y.reshape(*lead, gh * gw, c)


def _regions(n: int, w: int, shift: int, device=None) -> Tensor:
    """The region (0, 1, 2) of each rolled coordinate along an axis of length ``n``."""
    p = torch.arange(n, device=device)
    return (p >= n - w).long() + (p >= n - shift).long()


def _region_ids(grid: tuple[int, int], w: int, shift: int, device=None) -> Tensor:
    """Each rolled grid position's region pair as one id, ``[gh, gw]``."""
    gh, gw = grid
    return _regions(gh, w, shift, device)[:, None] * 3 + _regions(gw, w, shift, device)[None, :]


def shift_mask(grid: tuple[int, int], w: int, shift: int, dtype: torch.dtype, device=None) -> Tensor | None:
    """The additive mask ``[nW, w², w²]`` of the rolled windows (0: same region, −∞: not neighbours before the
    roll); None without a shift."""
    if not shift:
        return None
    ids = partition(_region_ids(grid, w, shift, device)[..., None].reshape(-1, 1), grid, w)[..., 0]  # [nW, w²]
    keep = ids[:, :, None] == ids[:, None, :]
    return torch.zeros(keep.shape, dtype=dtype, device=device).masked_fill(~keep, float("-inf"))


def dense_windows(grid: tuple[int, int], w: int, shift: int, device=None) -> tuple[Tensor, Tensor]:
    """The literal structure over all N = gh·gw items: ``keep[i, j]`` ``[N, N]`` (i and j share a rolled window
    and a region) and each item's place in its rolled window ``[N]`` (row-major in the window, the index of a
    window bias ``[H, w², w²]``)."""
    gh, gw = grid
    rows = (torch.arange(gh, device=device) - shift) % gh  # the rolled coordinate of each original position
    cols = (torch.arange(gw, device=device) - shift) % gw
    r, c = rows.repeat_interleave(gw), cols.repeat(gh)  # of item n = row·gw + column
    ids = _region_ids(grid, w, shift, device)[r, c]
    keep = ((r[:, None] // w == r[None, :] // w) & (c[:, None] // w == c[None, :] // w)
            & (ids[:, None] == ids[None, :]))
    return keep, (r % w) * w + c % w


def merge_patches(x: Tensor, grid: tuple[int, int]) -> Tensor:
    """Items ``[B, gh·gw, C]`` -> ``[B, gh·gw/4, 4C]``: each 2 x 2 neighbourhood's items concatenated in the order
    (0, 0), (1, 0), (0, 1), (1, 1), neighbourhoods row-major (transformers' ``SwinPatchMerging``)."""
    gh, gw = grid
    b, _, c = x.shape
    x = x.reshape(b, gh // 2, 2, gw // 2, 2, c).permute(0, 1, 3, 4, 2, 5)  # [B, gh/2, gw/2, column, row, C]
    return x.reshape(b, (gh // 2) * (gw // 2), 4 * c)


def merge_selections(grid: tuple[int, int], dtype: torch.dtype, device=None) -> Tensor:
    """The four 0/1 selection matrices ``S_k`` ``[4, gh·gw/4, gh·gw]`` of patch merging: ``S_k X`` is the k-th
    item of every neighbourhood, k = 2·column + row."""
    gh, gw = grid
    out = torch.zeros(4, (gh // 2) * (gw // 2), gh * gw, dtype=dtype, device=device)
    m = torch.arange((gh // 2) * (gw // 2), device=device)
    top, left = 2 * (m // (gw // 2)), 2 * (m % (gw // 2))
    for k in range(4):
        out[k, m, (top + k % 2) * gw + left + k // 2] = 1
    return out


def pad_grid(x: Tensor, grid: tuple[int, int], to: tuple[int, int]) -> Tensor:
    """Items ``[..., gh·gw, C]`` -> ``[..., ph·pw, C]``: position (a, b) kept at (a, b), zeros in the rows a >= gh
    and the columns b >= gw (transformers' ``maybe_pad``)."""
    (gh, gw), (ph, pw) = grid, to
    *lead, _, c = x.shape
    x = F.pad(x.reshape(*lead, gh, gw, c), (0, 0, 0, pw - gw, 0, ph - gh))
    return x.reshape(*lead, ph * pw, c)


def crop_grid(x: Tensor, grid: tuple[int, int], to: tuple[int, int]) -> Tensor:
    """Items ``[..., ph·pw, C]`` -> ``[..., gh·gw, C]``: the positions (a, b) with a < gh, b < gw."""
    (ph, pw), (gh, gw) = grid, to
    *lead, _, c = x.shape
    return x.reshape(*lead, ph, pw, c)[..., :gh, :gw, :].reshape(*lead, gh * gw, c)


def grid_selection(grid: tuple[int, int], to: tuple[int, int], dtype: torch.dtype, device=None) -> Tensor:
    """The 0/1 matrix ``S`` ``[ph·pw, gh·gw]`` placing the grid's positions in the larger grid ``to``:
    ``S[a·pw + b, a·gw + b] = 1``; ``S X`` pads, ``Sᵀ Y`` crops."""
    (gh, gw), (ph, pw) = grid, to
    n = torch.arange(gh * gw, device=device)
    out = torch.zeros(ph * pw, gh * gw, dtype=dtype, device=device)
    out[(n // gw) * pw + n % gw, n] = 1
    return out
