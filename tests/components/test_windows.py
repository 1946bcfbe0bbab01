"""Shifted-window attention (``window_attention``), its relative position bias (``window_bias``) and patch merging
(``patch_merge``), grid padding and cropping (``pad_grid``, ``crop_grid``) in float64 against hand-written torch: Swin's window partition, cyclic shift and region mask
written out window by window, the bias table read at each pair's row and column offsets, the 2 x 2 neighbourhoods
sliced as the library slices them; in the default lowering (one SDPA call over every window and head), the per-head
form and the reference lowering (the N x N matrix), outputs and every gradient; bad grids are located errors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.testing import assert_close

import rpn2c
from rpn2c.errors import SpecError
from rpn2c.functional import windows
from rpn2c.lower.build import CompiledModel
from rpn2c.passes import optimize

D, RANK, OUT = 6, 3, 2


# ------------------------------------------------------------------------------------------------ hand-written
def _offset_index(w: int) -> torch.Tensor:
    """δ(i, j) for the items of a w x w window, entry by entry: (row offset + w − 1)(2w − 1) + column offset + w − 1."""
    idx = torch.empty(w * w, w * w, dtype=torch.long)
    for i in range(w * w):
        for j in range(w * w):
            idx[i, j] = (i // w - j // w + w - 1) * (2 * w - 1) + (i % w - j % w + w - 1)
    return idx


def _region(p: int, n: int, w: int, s: int) -> int:
    return 0 if p < n - w else (1 if p < n - s else 2)


def _hand_windows(x, q, k, v, grid, w, s, bias, scale):
    """Swin's (shifted) window attention, window by window: roll the grid by (−s, −s), in each window add the bias
    and −∞ between items of different regions, softmax, and write each window's outputs back where its items were.
    ``q``, ``k``, ``v``: ``[B, H, N, ·]``."""
    gh, gw = grid
    outs, order = [], []
    for top in range(0, gh, w):
        for left in range(0, gw, w):
            rolled = [(top + a, left + b) for a in range(w) for b in range(w)]
            items = [((r + s) % gh) * gw + (c + s) % gw for r, c in rolled]  # the original positions they hold
            region = [(_region(r, gh, w, s), _region(c, gw, w, s)) for r, c in rolled]
            blocked = torch.tensor([[ri != rj for rj in region] for ri in region])
            scores = q[:, :, items] @ k[:, :, items].transpose(-1, -2) * scale + bias
            a = torch.softmax(scores.masked_fill(blocked, float("-inf")), -1)
            outs.append(a @ v[:, :, items])
            order += items
    return torch.cat(outs, 2)[:, :, torch.argsort(torch.tensor(order))]


def _spec(heads: int, grid: tuple[int, int], w: int, s: int, bias: bool) -> str:
    n = grid[0] * grid[1]
    xi = [f"rank = {RANK}", f"grid = [{grid[0]}, {grid[1]}]", f"size = {w}", f"shift = {s}"] + \
        (["attn_mask = b"] if bias else [])
    return "\n".join([
        "model m {", f"  input x: sequence[B, {n}, {D}]", *([f"  b = window_bias(x, heads = {heads}, size = {w})"]
                                                           if bias else []),
        "  y = head(x) {", f"    heads = {heads}", f"    xi_instance = window_attention({', '.join(xi)})",
        f"    out = {OUT}", "    bias = false", f"    fusion = concat_linear(out = {D})", "  }", "  return y", "}"])


def _build(text, reference=False, disable=()):
    return CompiledModel(optimize(rpn2c.check(text), disable=disable), reference=reference).double()


# ------------------------------------------------------------------------------------------------ the functions
@given(w=st.integers(1, 7))
def test_the_relative_index_is_the_offsets_of_each_pair(w):
    assert torch.equal(windows.relative_index(w), _offset_index(w))
    table = torch.randn((2 * w - 1) ** 2, 3, dtype=torch.float64)
    assert torch.equal(windows.window_bias(table, w), table[_offset_index(w)].permute(2, 0, 1))


@settings(deadline=None, max_examples=30)
@given(rows=st.integers(1, 4), cols=st.integers(1, 4), w=st.integers(1, 4), data=st.data())
def test_partition_shift_mask_and_the_dense_structure_agree(rows, cols, w, data):
    s = data.draw(st.integers(0, w - 1))
    grid = (rows * w, cols * w)
    n = grid[0] * grid[1]
    x = torch.randn(2, n, 3, dtype=torch.float64)
    parts = windows.partition(x, grid, w, s)
    assert torch.equal(windows.unpartition(parts, grid, w, s), x)
    keep, place = windows.dense_windows(grid, w, s)
    ids = windows.partition(torch.arange(n).view(1, n, 1), grid, w, s)[0, ..., 0]  # [nW, w²] original items
    mask = windows.shift_mask(grid, w, s, torch.float64)
    want = torch.zeros(n, n, dtype=torch.bool)
    for win in range(ids.shape[0]):
        assert torch.equal(parts[:, win], x[:, ids[win]])
        kept = torch.ones(w * w, w * w, dtype=torch.bool) if mask is None else mask[win] == 0
        want[ids[win][:, None], ids[win][None, :]] = kept
        assert torch.equal(place[ids[win]], torch.arange(w * w))
    assert torch.equal(keep, want)


@settings(deadline=None, max_examples=20)
@given(rows=st.integers(1, 4), cols=st.integers(1, 4), c=st.integers(1, 3), reference=st.booleans())
def test_patch_merge_concatenates_each_neighbourhood(rows, cols, c, reference):
    from rpn2c.components.impl.windows import PatchMergeModule
    from rpn2c.lower.literal_forms import literal

    grid = (2 * rows, 2 * cols)
    x = torch.randn(2, grid[0] * grid[1], c, dtype=torch.float64, requires_grad=True)
    module = PatchMergeModule(grid)
    got = (literal(module) if reference else module)(x)
    g = x.view(2, *grid, c)
    want = torch.cat([g[:, r::2, col::2] for col in range(2) for r in range(2)], -1).reshape(2, -1, 4 * c)
    assert torch.equal(got, want)
    w = torch.randn_like(got)
    assert_close(torch.autograd.grad((got * w).sum(), x)[0], torch.autograd.grad((want * w).sum(), x)[0],
                 rtol=0, atol=0)


@settings(deadline=None, max_examples=20)
@given(gh=st.integers(1, 4), gw=st.integers(1, 4), extra=st.tuples(st.integers(0, 3), st.integers(0, 3)),
       c=st.integers(1, 3), reference=st.booleans())
def test_pad_grid_places_each_position_and_crop_grid_takes_it_back(gh, gw, extra, c, reference):
    """pad_grid keeps position (a, b) at (a, b) of the larger grid with zeros elsewhere (transformers' maybe_pad:
    ``F.pad`` of the [B, gh, gw, C] view), crop_grid keeps the top-left part; the reference lowering's selection
    matrix gives the same values and gradients."""
    from rpn2c.components.impl.windows import CropGridModule, PadGridModule
    from rpn2c.lower.literal_forms import literal

    grid, to = (gh, gw), (gh + extra[0], gw + extra[1])
    x = torch.randn(2, gh * gw, c, dtype=torch.float64, requires_grad=True)
    pad, crop = PadGridModule(grid, to), CropGridModule(to, grid)
    if reference:
        pad, crop = literal(pad), literal(crop)
    got = pad(x)
    want = torch.zeros(2, *to, c, dtype=torch.float64)
    for a in range(gh):
        for b in range(gw):
            want[:, a, b] = x[:, a * gw + b]
    assert torch.equal(got, want.reshape(2, -1, c))
    assert torch.equal(crop(got), x)
    w = torch.randn_like(got)
    assert torch.equal(torch.autograd.grad((got * w).sum(), x)[0], w.view(2, *to, c)[:, :gh, :gw].reshape(x.shape))


# ------------------------------------------------------------------------------------------------ inside attention
@settings(deadline=None, max_examples=10)
@given(heads=st.integers(1, 3), rows=st.integers(1, 3), cols=st.integers(1, 3), w=st.integers(1, 3),
       bias=st.booleans(), form=st.sampled_from(["default", "per_head", "reference"]), data=st.data())
def test_window_attention_is_swins(heads, rows, cols, w, bias, form, data):
    s = data.draw(st.integers(0, w - 1))
    grid = (rows * w, cols * w)
    torch.manual_seed(heads * 31 + rows * 7 + cols + w)
    model = _build(_spec(heads, grid, w, s, bias), reference=form == "reference",
                   disable={"fused_heads"} if form == "per_head" else ())
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.7)
    x = torch.randn(2, grid[0] * grid[1], D, dtype=torch.float64, requires_grad=True)
    got = model(x)
    sd = dict(model.named_parameters())
    wq, wk, wv = sd["y.in_proj_weight"].split([heads * RANK, heads * RANK, heads * OUT])

    def split(t):
        return t.unflatten(-1, (heads, -1)).transpose(1, 2)

    b = sd["b.table"][_offset_index(w)].permute(2, 0, 1) if bias else torch.zeros(heads, w * w, w * w)
    o = _hand_windows(x, split(x @ wq.T), split(x @ wk.T), split(x @ wv.T), grid, w, s, b, 1 / math.sqrt(RANK))
    want = o.transpose(1, 2).flatten(2) @ sd["y.fusion.linear.weight"].T + sd["y.fusion.linear.bias"]
    assert_close(got, want, rtol=0, atol=1e-12)
    v = torch.randn_like(got)
    grads = torch.autograd.grad((got * v).sum(), [x] + list(model.parameters()))
    want_grads = torch.autograd.grad((want * v).sum(), [x] + list(model.parameters()))
    for g, h in zip(grads, want_grads):
        assert_close(g, h, rtol=0, atol=1e-11)


def test_default_lowering_runs_one_sdpa_call_over_the_windows(monkeypatch):
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):
        calls.append((tuple(q.shape), kwargs.get("attn_mask")))
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    model = _build(_spec(2, (4, 6), 2, 1, True)).eval()
    with torch.no_grad():
        model(torch.randn(3, 24, D, dtype=torch.float64))
    (shape, mask), = calls
    assert shape == (3, 6 * 2, 4, RANK)  # [B, nW·H, w², r]: every window and head at once, no N x N scores
    bias = windows.window_bias(model.b.table, 2)
    assert tuple(mask.shape) == (1, 12, 4, 4)  # 4-D, so torch takes its fused kernel
    mask = mask[0]
    assert torch.equal(mask[0], bias[0]) and torch.equal(mask[1], bias[1])
    assert torch.isneginf(mask[-1]).any()  # the last (wrapped) window's region mask


@pytest.mark.parametrize("text, code, match", [
    (_spec(2, (4, 6), 4, 0, False), "E0350", r"grid \[4, 6\] is not divisible into 4 x 4"),
    (_spec(2, (4, 6), 2, 2, False), "E0353", "shift = 2"),
    (_spec(2, (4, 6), 2, 0, False).replace("grid = [4, 6]", "grid = [4, 4]"), "E0351", "reads 16 items"),
    (_spec(2, (4, 6), 2, 1, True).replace("window_bias(x, heads = 2, size = 2)",
                                          "window_bias(x, heads = 3, size = 2)"), "E0349", "heads = 3"),
    (_spec(2, (4, 6), 2, 1, True).replace("window_bias(x, heads = 2, size = 2)",
                                          "window_bias(x, heads = 2, size = 3)"), "E0352", "windows of 9 items"),
    (_spec(2, (4, 6), 2, 1, False).replace("shift = 1", "shift = 1, causal = true"), "E0402", "takes no causal"),
    (_spec(2, (4, 6), 2, 1, False).replace("shift = 1", "shift = 1, softmax = false"), "E0402", "softmax = false"),
    ("model m {\n  input x: sequence[B, 12, 3]\n  y = patch_merge(x, grid = [3, 4])\n  return y\n}", "E0350",
     r"grid \[3, 4\]"),
    ("model m {\n  input x: sequence[B, 12, 3]\n  y = patch_merge(x, grid = [4, 4])\n  return y\n}", "E0351",
     "reads 16 items"),
    ("model m {\n  input x: sequence[B, 12, 3]\n  y = pad_grid(x, grid = [3, 4], to = [2, 4])\n  return y\n}",
     "E0377", r"pads a grid to a larger one: to = \[2, 4\]"),
    ("model m {\n  input x: sequence[B, 12, 3]\n  y = crop_grid(x, grid = [3, 4], to = [3, 5])\n  return y\n}",
     "E0377", r"crops a grid to a smaller one"),
    ("model m {\n  input x: sequence[B, 12, 3]\n  y = pad_grid(x, grid = [4, 4], to = [4, 4])\n  return y\n}",
     "E0351", "reads 16 items"),
])
def test_bad_grids_windows_and_biases_are_located_errors(text, code, match):
    with pytest.raises(SpecError, match=match) as err:
        rpn2c.check(text)
    assert err.value.diagnostics[0].code == code and err.value.diagnostics[0].span.line >= 3


def test_types_are_inferred_before_any_tensor():
    g = rpn2c.check(_spec(2, (4, 6), 2, 1, True))
    assert str(g.node("b").type) == "head_bias[2, 4, 4]" and str(g.node("y").type) == "sequence[B, 24, 6]"
    merged = rpn2c.check("model m {\n  input x: sequence[B, 24, 5]\n  y = patch_merge(x, grid = [4, 6])\n"
                         "  return y\n}")
    assert str(merged.node("y").type) == "sequence[B, 6, 20]"
