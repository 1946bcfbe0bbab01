"""Layout ops beyond ops.py: items back onto a grid, channel shuffle, slicing a grid's positions."""

from __future__ import annotations

from pydantic import Field

from rpn2c.components.base import Op, ShapeRuleError, example_model
from rpn2c.components.ops import kept
from rpn2c.components.registry import HP, register
from rpn2c.ir.types import grid, is_known, numel


class _ToGridHP(HP):
    size: list[int] = Field(..., min_length=1, max_length=3, description="the spatial sizes S (1 to 3 axes)")


@register
class ToGrid(Op):
    """to_grid(x, size = [H, W]): items [B, ΠS, C] become a grid [B, C, *S] (item n at the row-major position n).

    The inverse of ``to_items``: torch's channels-last ``y.permute(0, 3, 1, 2)`` back to channels-first after
    per-position layers (a ConvNeXt block's LayerNorm and Linear act on each position as an item), and
    ``x.transpose(1, 2).reshape(B, C, H, W)`` of patch tokens. The identity on the data; no matrix is applied.
    """

    name, family = "to_grid", "op"
    HP = _ToGridHP
    example = example_model("input x: sequence[B, 6, 4]", "y = to_grid(x, size = [2, 3])", "return y")

    def infer(self, ins):
        t = ins[0]
        if t.kind != "items" or not t.batched or t.time_major:
            raise ShapeRuleError(f"to_grid needs a batched, batch-first sequence [B, N, C], got {t}")
        size = tuple(self.hp.size)
        if any(s < 1 for s in size):
            raise ShapeRuleError(f"to_grid needs positive sizes, got {list(size)}")
        if not is_known(t.items) or t.items != numel(size):
            raise ShapeRuleError(f"to_grid(size = {list(size)}) needs {numel(size)} items, got {t}")
        return grid(t.batch, t.features, size)

    def build(self, ins):
        from rpn2c.components.impl.layout import ToGrid as Module

        return Module(tuple(self.hp.size))


class _ShuffleHP(HP):
    groups: int = Field(..., ge=1, description="the number of channel groups g (C divisible by g)")


@register
class ChannelShuffle(Op):
    """channel_shuffle(x, groups = g): the channels of a grid [B, C, *S] reordered, y[:, j·g + i] = x[:, i·C/g + j]
    (ShuffleNet; torch's ``view(B, g, C/g, *S).transpose(1, 2).reshape(B, C, *S)``).

    A fixed permutation matrix P [C, C] applied to the channels (P[j·g + i, i·C/g + j] = 1): a reconciliation
    with no parameters, computed as a reshape and a transpose.
    """

    name, family = "channel_shuffle", "op"
    HP = _ShuffleHP
    example = example_model("input x: image[B, 6, 2, 2]", "y = channel_shuffle(x, groups = 3)", "return y")

    def infer(self, ins):
        t = ins[0]
        if t.kind != "grid":
            raise ShapeRuleError(f"channel_shuffle needs a grid, got {t}")
        if not is_known(t.features) or t.features % self.hp.groups:
            raise ShapeRuleError(f"channel_shuffle(groups = {self.hp.groups}) needs a channel count divisible by "
                                 f"{self.hp.groups}, got {t}")
        return t

    def build(self, ins):
        from rpn2c.components.impl.layout import ChannelShuffle as Module

        return Module(self.hp.groups)


class _SlicePositionsHP(HP):
    axis: int = Field(0, ge=0, le=2, description="the spatial axis (0: the first after the channels)")
    start: int = Field(0, description="first position kept (negative: counted from the end)")
    stop: int | None = Field(None, description="position after the last one kept (none: the end; negative: from "
                                               "the end)")


@register
class SlicePositions(Op):
    """slice_positions(x, axis = a, start = s, stop = e): the positions s..e−1 along spatial axis a of a grid
    [B, C, *S] (torch's ``x[:, :, s:e]`` on a signal; ``x[:, :, :-k]`` drops a causal convolution's k trailing
    outputs, as a TCN's chomp does)."""

    name, family = "slice_positions", "op"
    HP = _SlicePositionsHP
    example = example_model("input x: signal[B, 2, 6]", "y = slice_positions(x, stop = -2)", "return y")

    def infer(self, ins):
        t = ins[0]
        if t.kind != "grid" or self.hp.axis >= len(t.spatial):
            raise ShapeRuleError(f"slice_positions(axis = {self.hp.axis}) needs a grid with that spatial axis, got {t}")
        n = kept(self, t.spatial[self.hp.axis], t, f"length along axis {self.hp.axis}", "position")
        spatial = list(t.spatial)
        spatial[self.hp.axis] = n
        return t.with_shape((t.batch, t.features, *spatial))

    def build(self, ins):
        from rpn2c.components.impl.layout import SlicePositions as Module

        return Module(self.hp.axis, self.hp.start, self.hp.stop)
