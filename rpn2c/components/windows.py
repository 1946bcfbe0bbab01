"""Shifted-window attention over a channels-last grid of items (Swin Transformer, Liu et al. 2021).

- ``window_attention(rank = r, grid = [gh, gw], size = w, shift = s)``: a structured bilinear ξ. The items
  ``[B, gh·gw, C]`` (row-major positions) interact only inside the windows of w x w positions of the grid rolled by
  (−s, −s), and there only with the items that were their neighbours before the roll:
  A = softmax(Q Kᵀ · scale + B_s) with B_s[i, j] = b_h[δ(i, j)] on such pairs and −∞ elsewhere, i.e.
  A = P_sᵀ blockdiag(A_1, …, A_nW) P_s with P_s the roll-and-partition permutation (docs/semantics.md).
- ``window_bias(x, heads = H, size = w)``: Swin's learned relative position bias, ``head_bias[H, w², w²]`` from a
  table T ∈ R^{(2w−1)² x H}, given to the attention as ``attn_mask``.
- ``patch_merge(x, grid = [gh, gw])``: each 2 x 2 neighbourhood's items concatenated, ``[B, N, C] -> [B, N/4, 4C]``
  (a layout op; Swin's norm and linear reduction follow as ``layer_norm`` and a head).
- ``pad_grid(x, grid = [gh, gw], to = [ph, pw])`` / ``crop_grid(x, grid = [ph, pw], to = [gh, gw])``: zero items
  after the last row and column, and their removal (the libraries pad a grid to whole windows and to even sides
  before patch merging).

Maths: :mod:`rpn2c.functional.windows`.
"""

from __future__ import annotations

from pydantic import Field

from rpn2c.components.base import Op, ShapeRuleError, example_model
from rpn2c.components.registry import HP, register
from rpn2c.components.xi_attention import _BilinearBase, _BilinearHP
from rpn2c.ir.types import head_bias, is_head_bias, is_known


def _grid_items(grid: list[int], t, what: str) -> tuple[int, int]:
    """``(gh, gw)`` after checking that the sequence ``t`` holds gh·gw items (E0351)."""
    if t.kind != "items" or not t.batched or t.time_major:
        raise ShapeRuleError(f"{what} reads a batched sequence [B, N, C] of grid positions, got {t}", arg=0)
    gh, gw = grid
    if not is_known(t.items) or t.items != gh * gw:
        raise ShapeRuleError(f"{what} on grid = [{gh}, {gw}] reads {gh * gw} items (row-major positions), got "
                             f"{t.items}", code="E0351")
    return gh, gw


def _divides(grid: tuple[int, int], size: int, what: str) -> None:
    """Each grid side a multiple of ``size`` (E0350)."""
    if min(grid) < 1:
        raise ShapeRuleError(f"{what} needs a grid of positive sides, got {list(grid)}")
    if grid[0] % size or grid[1] % size:
        raise ShapeRuleError(f"{what}: the grid [{grid[0]}, {grid[1]}] is not divisible into {size} x {size} "
                             f"windows", code="E0350")


_GRID = Field(..., min_length=2, max_length=2, description="[gh, gw]: the grid whose row-major positions the "
                                                          "items are")


def _sides(grid: list[int], to: list[int], what: str, larger: bool) -> None:
    """``to`` no smaller (pad) or no larger (crop) than ``grid`` along both axes, every side positive (E0377)."""
    if min(grid) < 1 or min(to) < 1:
        raise ShapeRuleError(f"{what} needs grids of positive sides, got grid = {list(grid)}, to = {list(to)}",
                             code="E0377")
    if any((t < g) if larger else (t > g) for g, t in zip(grid, to)):
        way = "pads a grid to a larger one" if larger else "crops a grid to a smaller one"
        raise ShapeRuleError(f"{what} {way}: to = {list(to)} against grid = {list(grid)}", code="E0377")


class _WindowHP(_BilinearHP):
    rank: int = Field(..., ge=1, description="r: the width of each query and key")
    grid: list[int] = _GRID
    size: int = Field(..., ge=1, description="w: the side of the square windows (w² items attend to each other)")
    shift: int = Field(0, ge=0, description="s: the windows of the grid rolled by (−s, −s) (0 <= s < w; "
                                            "Swin's shifted windows: w // 2), pairs not neighbours before the "
                                            "roll masked")


class _WindowBiasHP(HP):
    heads: int = Field(ge=1, description="H: one bias per attention head (the layer's heads)")
    size: int = Field(ge=1, description="w: the window side; the table holds (2w − 1)² relative positions")


_UNWINDOWED = ("causal", "window", "key_padding", "keys", "rotary")


@register
class WindowAttention(_BilinearBase):
    """Shifted-window ξ: A = softmax(Q Kᵀ · scale + B_s), Q = X W_q, K = X W_k of rank r, over the items of a
    channels-last grid [gh, gw], nonzero only for pairs in one w x w window of the grid rolled by (−s, −s) that
    were neighbours before the roll (Swin's W-MSA for s = 0, SW-MSA for s = w // 2).

    ``attn_mask = b`` adds a per-window bias ``head_bias[H, w², w²]`` (``window_bias``) to every window's scores.
    The default lowering rolls and partitions the projected queries, keys and values and runs the layer's heads
    as one scaled_dot_product_attention over ``[B, nW·H, w², r]`` with the bias and the shift's region mask as
    its attn_mask; the reference builds the N x N matrix.
    """

    name, family = "window_attention", "interdependence"
    aliases = ("shifted_window_attention",)
    synonyms = dict.fromkeys(("swin_attention", "w_msa", "sw_msa", "window_msa"),
                             "window_attention(rank = r, grid = [gh, gw], size = w, shift = s)")
    HP = _WindowHP
    example = example_model("input x: sequence[B, 16, 8]", "b = window_bias(x, heads = 2, size = 2)",
                            "y = head(x) {", "  heads = 2",
                            "  xi_instance = window_attention(rank = 2, grid = [4, 4], size = 2, shift = 1, "
                            "attn_mask = b)", "  out = 4", "  fusion = concat_linear(out = 8)", "}", "return y")

    def rank(self, ctx):
        return self.hp.rank

    def out_size(self, ctx):
        hp = self.hp
        for key in _UNWINDOWED:
            if getattr(hp, key) not in (None, False):
                raise ShapeRuleError(f"window_attention takes no {key}: its windows are its mask")
        if not hp.softmax:
            raise ShapeRuleError("window_attention is a softmax attention in each window: softmax = false is not "
                                 "one of its forms")
        if ctx.query_items is None or str(ctx.query_items) != str(ctx.size):
            raise ShapeRuleError("window_attention relates the items of one grid with each other (no context input)")
        gh, gw = hp.grid
        if not is_known(ctx.size) or ctx.size != gh * gw:
            raise ShapeRuleError(f"window_attention on grid = [{gh}, {gw}] reads {gh * gw} items (row-major "
                                 f"positions), got {ctx.size}", code="E0351")
        _divides((gh, gw), hp.size, "window_attention")
        if hp.shift >= hp.size:
            raise ShapeRuleError(f"window_attention(shift = {hp.shift}) must roll the grid by less than a window: "
                                 f"0 <= shift < size = {hp.size}", code="E0353")
        bias = ctx.aux.get("attn_mask")
        if bias is not None and not is_head_bias(bias):
            raise ShapeRuleError(f"window_attention's attn_mask is a per-window bias head_bias[H, w², w²] "
                                 f"(window_bias), got {bias}")
        if bias is not None:
            h, nq, nc = bias.shape
            if h != ctx.heads:
                raise ShapeRuleError(f"attn_mask {bias} holds one bias per head for heads = {h}, but the layer has "
                                     f"heads = {ctx.heads}", code="E0349")
            if (nq, nc) != (hp.size ** 2, hp.size ** 2):
                raise ShapeRuleError(f"attn_mask {bias} is made for windows of {nq} items, but size = {hp.size} "
                                     f"windows hold {hp.size ** 2}", code="E0352")
        return ctx.size

    def build(self, ctx):
        from rpn2c.components.impl.windows import WindowXi

        return WindowXi(self.hp, ctx.query_features, self.key_features(ctx), self.rank(ctx), ctx.aux,
                        self.rotary_dims(ctx), ctx.head)


@register
class WindowBias(Op):
    """window_bias(x, heads = H, size = w): Swin's relative position bias, b[h, i, j] = T[δ(i, j), h] for items i,
    j of a w x w window, δ their row and column offsets (a_i − a_j + w − 1)(2w − 1) + (b_i − b_j + w − 1), T ∈
    R^{(2w−1)² x H} learned: head_bias[H, w², w²], for ``attn_mask`` of a window_attention with H heads.

    The window-shaped member of the relative_bias family: every window of a layer adds the same table.
    """

    name, family = "window_bias", "op"
    aliases = ("window_relative_bias",)
    synonyms = dict.fromkeys(("swin_relative_bias", "relative_position_bias_table"),
                             "window_bias(x, heads = H, size = w)")
    HP = _WindowBiasHP
    example = WindowAttention.example

    def infer(self, ins):
        t = ins[0]
        if t.kind != "items":
            raise ShapeRuleError(f"window_bias reads the items of a sequence [B, N, C], got {t}", arg=0)
        return head_bias(self.hp.heads, self.hp.size ** 2, self.hp.size ** 2)

    def count(self, ins):
        return (2 * self.hp.size - 1) ** 2 * self.hp.heads

    def build(self, ins):
        from rpn2c.components.impl.windows import WindowBiasModule

        return WindowBiasModule(self.hp.size, self.hp.heads)


class _MergeHP(HP):
    grid: list[int] = _GRID


@register
class PatchMerge(Op):
    """patch_merge(x, grid = [gh, gw]): items [B, gh·gw, C] -> [B, gh·gw/4, 4C], each 2 x 2 neighbourhood of the
    grid's positions concatenated in the order (0, 0), (1, 0), (0, 1), (1, 1) (row, column): Swin's patch merging
    before its norm and linear reduction.

    The four selection matrices S_k ∈ {0, 1}^{N/4 x N} stacked on the features, Y = [S_1 X | S_2 X | S_3 X | S_4 X]
    (the reference builds them); the default lowering is a reshape.
    """

    name, family = "patch_merge", "op"
    aliases = ("patch_merging",)
    synonyms = dict.fromkeys(("swin_patch_merging", "space_to_depth_items"), "patch_merge(x, grid = [gh, gw])")
    HP = _MergeHP
    example = example_model("input x: sequence[B, 16, 3]", "y = patch_merge(x, grid = [4, 4])", "return y")

    def infer(self, ins):
        t = ins[0]
        gh, gw = _grid_items(self.hp.grid, t, "patch_merge")
        _divides((gh, gw), 2, "patch_merge")
        c = t.features
        return t.with_shape((t.batch, gh * gw // 4, 4 * c if is_known(c) else f"4*{c}"))

    def build(self, ins):
        from rpn2c.components.impl.windows import PatchMergeModule

        return PatchMergeModule(tuple(self.hp.grid))


class _ResizeHP(HP):
    grid: list[int] = _GRID
    to: list[int] = Field(..., min_length=2, max_length=2, description="[th, tw]: the grid after the op")


class _GridResize(Op):
    """The items of ``grid`` as the items of the grid ``to``, larger (padding) or smaller (cropping)."""

    HP = _ResizeHP
    larger: bool

    def infer(self, ins):
        t = ins[0]
        _grid_items(self.hp.grid, t, self.name)
        _sides(self.hp.grid, self.hp.to, self.name, larger=self.larger)
        return t.with_shape((t.batch, self.hp.to[0] * self.hp.to[1], t.features))

    def build(self, ins):
        from rpn2c.components.impl.windows import CropGridModule, PadGridModule

        module = PadGridModule if self.larger else CropGridModule
        return module(tuple(self.hp.grid), tuple(self.hp.to))


@register
class PadGrid(_GridResize):
    """pad_grid(x, grid = [gh, gw], to = [ph, pw]): items [B, gh·gw, C] -> [B, ph·pw, C] (ph >= gh, pw >= gw), each
    position (a, b) kept at (a, b) of the larger grid and zero items in the new rows and columns: Y = S X with the
    selection S ∈ {0, 1}^{ph·pw x gh·gw}, S[a·pw + b, a·gw + b] = 1.

    transformers' and timm's Swin pad the normed items to whole windows before attending (the zero items then
    enter the windows as keys and values with their projections' biases) and a grid of odd sides before patch
    merging; ``crop_grid`` removes them. The reference lowering applies S, the default lowering ``F.pad``.
    """

    name, family = "pad_grid", "op"
    aliases = ("grid_pad",)
    synonyms = dict.fromkeys(("maybe_pad", "pad_items", "pad_windows"), "pad_grid(x, grid = [gh, gw], to = [ph, pw])")
    example = example_model("input x: sequence[B, 9, 4]", "p = pad_grid(x, grid = [3, 3], to = [4, 4])",
                            "y = crop_grid(p, grid = [4, 4], to = [3, 3])", "return y")
    larger = True


@register
class CropGrid(_GridResize):
    """crop_grid(x, grid = [ph, pw], to = [gh, gw]): items [B, ph·pw, C] -> [B, gh·gw, C] (gh <= ph, gw <= pw), the
    positions (a, b) with a < gh, b < gw kept: Y = Sᵀ X with pad_grid's selection S, the inverse of the padding on
    what it kept."""

    name, family = "crop_grid", "op"
    aliases = ("grid_crop",)
    synonyms = dict.fromkeys(("unpad", "crop_items"), "crop_grid(x, grid = [ph, pw], to = [gh, gw])")
    example = PadGrid.example
    larger = False
