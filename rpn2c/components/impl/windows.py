"""The ``nn.Module`` implementations of :mod:`rpn2c.components.windows` (imported when a model is built)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rpn2c.components.impl.xi_attention import _BilinearXi
from rpn2c.errors import InputError
from rpn2c.functional import windows


class WindowXi(_BilinearXi):
    """Shifted-window attention: ``matrix`` is the literal N x N matrix (reference), ``attend`` the windows as one
    SDPA call (default lowering, every head at once when the heads are packed)."""

    def __init__(self, hp, mq, mc, rank, aux_types, rotary_dims=None, head: int = 0):
        super().__init__(hp, mq, mc, rank, aux_types, rotary_dims, head)
        self.grid, self.size, self.shift = tuple(hp.grid), hp.size, hp.shift
        mask = windows.shift_mask(self.grid, hp.size, hp.shift, torch.get_default_dtype())  # once: the grid is fixed
        self.register_buffer("region_mask", mask, persistent=False)

    def _check_items(self, n: int) -> None:
        if n != self.grid[0] * self.grid[1] and not torch.compiler.is_compiling():
            raise InputError(f"window_attention on grid = {list(self.grid)} reads {self.grid[0] * self.grid[1]} "
                             f"items, got {n}")

    def _bias(self, aux, dtype):
        """The per-window bias ``[H, w², w²]`` in ``dtype``, or None."""
        if self.hp.attn_mask is None:
            return None
        return aux["attn_mask"].to(dtype)

    def matrix(self, q, c, aux, size=None):
        """A = softmax(Q Kᵀ · scale + B_s), B_s[i, j] = b_h[p_i, p_j] (p: an item's place in its rolled window)
        where i, j share a rolled window and a region, −∞ elsewhere: the N x N matrix, literally."""
        self._check_items(q.shape[-2])
        qq, kk = self._qk(q, c, aux)
        logits = (qq @ kk.transpose(-1, -2)) * self.scale
        keep, place = windows.dense_windows(self.grid, self.size, self.shift, q.device)
        bias = self._bias(aux, q.dtype)
        if bias is not None:
            logits = logits + bias[self.head][place[:, None], place[None, :]]
        return torch.softmax(logits.masked_fill(~keep, float("-inf")), dim=-1)

    def relation(self, q, c, aux):
        """The N x N matrix (its windows and shift from the grid: no structural matrix to spare)."""
        return self.matrix(q, c, aux)

    def entries(self, q, c, aux, dst, src):
        """The entries A[dst, src] (a hybrid's edges), read off the matrix."""
        return self.matrix(q, c, aux)[..., dst, src]

    def attend(self, qq, kk, values, aux):
        """softmax(QKᵀ · scale + b + shift mask) V in windows: ``[B, (H,) N, ·]`` rolled and cut into
        ``[B, nW, (H,) w², ·]``, one scaled_dot_product_attention over ``[B, nW·H, w², ·]``, and back."""
        self._check_items(qq.shape[-2])
        heads = qq.shape[1] if qq.dim() == 4 else 0
        g, w, s = self.grid, self.size, self.shift

        def cut(t):  # [B, H, N, ·] -> [B, nW·H, w², ·];  [B, N, ·] -> [B, nW, w², ·]
            p = windows.partition(t, g, w, s)
            return p.transpose(1, 2).flatten(1, 2) if heads else p

        mask = None if self.region_mask is None else self.region_mask.to(qq.dtype)  # [nW, w², w²] or None
        bias = self._bias(aux, qq.dtype)  # [H, w², w²] or None
        if heads:  # one mask per (window, head), in the order of cut's axis
            if mask is not None:
                mask = (mask.unsqueeze(1) + (bias if bias is not None else 0)).expand(-1, heads, -1, -1)
                mask = mask.flatten(0, 1)
            elif bias is not None:
                mask = bias.repeat(g[0] * g[1] // (w * w), 1, 1)
        elif bias is not None:
            mask = bias[self.head] if mask is None else mask + bias[self.head]
        kk, values = _repeat_groups(qq, kk), _repeat_groups(qq, values)
        if mask is not None:  # [1, nW(·H), w², w²]: a 4-D mask, which torch's fused CPU kernel takes (not a 3-D one)
            mask = mask.unsqueeze(0)
        y = F.scaled_dot_product_attention(cut(qq), cut(kk), cut(values), attn_mask=mask, scale=self.scale)
        if heads:
            y = y.unflatten(1, (-1, heads)).transpose(1, 2)  # [B, H, nW, w², n]
        return windows.unpartition(y, g, w, s)


def _repeat_groups(qq, t):
    """Keys or values ``[B, G, N, ·]`` of G < H key/value groups as ``[B, H, N, ·]``; unchanged otherwise."""
    if qq.dim() != 4 or t.shape[1] == qq.shape[1]:
        return t
    return t.repeat_interleave(qq.shape[1] // t.shape[1], dim=1)


class WindowBiasModule(nn.Module):
    """Swin's relative position bias ``[H, w², w²]`` from the learned ``table`` ``[(2w−1)², H]`` (transformers'
    ``relative_position_bias_table``)."""

    def __init__(self, size: int, heads: int):
        super().__init__()
        self.size = size
        self.table = nn.Parameter(torch.randn((2 * size - 1) ** 2, heads) * 0.02)
        self.register_buffer("index", windows.relative_index(size), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return windows.window_bias(self.table, self.size, self.index)

    def extra_repr(self) -> str:
        return f"size={self.size}, heads={self.table.shape[1]}"


class PatchMergeModule(nn.Module):
    """Swin's 2 x 2 neighbourhood concatenation ``[B, N, C] -> [B, N/4, 4C]``: a reshape (the reference lowering's
    four selection matrices ``[S_1 X | … | S_4 X]`` are ``lower/literal_forms.py``'s)."""

    def __init__(self, grid: tuple[int, int]):
        super().__init__()
        self.grid = grid

    def check(self, x: torch.Tensor) -> None:
        if x.shape[-2] != self.grid[0] * self.grid[1] and not torch.compiler.is_compiling():
            raise InputError(f"patch_merge on grid = {list(self.grid)} reads {self.grid[0] * self.grid[1]} items, "
                             f"got {x.shape[-2]}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.check(x)
        return windows.merge_patches(x, self.grid)

    def extra_repr(self) -> str:
        return f"grid={list(self.grid)}"


class _GridResize(nn.Module):
    """Items of a ``grid`` as items of the grid ``to`` (see :class:`PadGridModule`, :class:`CropGridModule`)."""

    def __init__(self, grid: tuple[int, int], to: tuple[int, int]):
        super().__init__()
        self.grid, self.to = grid, to

    def check(self, x: torch.Tensor) -> None:
        if x.shape[-2] != self.grid[0] * self.grid[1] and not torch.compiler.is_compiling():
            raise InputError(f"{self.op} on grid = {list(self.grid)} reads {self.grid[0] * self.grid[1]} items, "
                             f"got {x.shape[-2]}")

    def extra_repr(self) -> str:
        return f"grid={list(self.grid)}, to={list(self.to)}"


class PadGridModule(_GridResize):
    """Zero items after the last row and column: ``F.pad`` of the ``[B, gh, gw, C]`` view (nothing when equal)."""

    op = "pad_grid"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.check(x)
        return x if self.grid == self.to else windows.pad_grid(x, self.grid, self.to)


class CropGridModule(_GridResize):
    """The top-left ``to`` positions of the grid: a slice of the ``[B, ph, pw, C]`` view (nothing when equal)."""

    op = "crop_grid"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.check(x)
        return x if self.grid == self.to else windows.crop_grid(x, self.grid, self.to)
