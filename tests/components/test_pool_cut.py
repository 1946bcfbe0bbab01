"""A pooling patch wider than the grid gathers only the taps that can land inside it (``Geometry.cut``): every other
tap reads the zero-padding fill in every patch, which an ignored tap, a sum, a norm or a mean over the whole patch's
size do not see. The cut form equals the whole kernel box's in float64, and a 2001 × 2001 window on a 14 × 14 grid
never enumerates its four million taps."""

from __future__ import annotations

import copy

import torch
from hypothesis import given, settings, strategies as st

from rpn2c.components.grid import native_pooling
from rpn2c.components.kappa import cut_exact, ignore_fill
from rpn2c.components.registry import REGISTRY
from rpn2c.functional import compression as FC
from rpn2c.lower.literal_forms import literal

F64 = torch.float64
CUT = ["max", "min", "sum", "mean", "prod", "l1", "l2", "linf", "lp"]


def kappa(name, **hp):
    entry = REGISTRY["compression"][name]
    return entry.cls(entry.schema(**hp))


def whole_box(module, x):
    """The unclamped form: φ over every tap of the kernel box, out-of-grid taps reading the fill (or skipped)."""
    geo = module.geo
    index = geo.patch_index(module.spatial)
    taps = FC.patch_reduce(x.flatten(2), index, "sum" if module.metric == "mean" else module.metric,
                           pad_value=module.fill, **module.kw)
    if module.metric == "mean":
        taps = taps / ((index >= 0).sum(-1).clamp(min=1) if module.ignore else geo.patch_size)
    return taps.reshape(*x.shape[:2], *module.out_spatial)


def shapes():
    """A cuboid (possibly one-sided, strided, a hexagonal packing), a cylinder or a sphere, wider than the grid or
    not."""
    return st.one_of(
        st.builds(lambda h, a, s: ("cuboid", {"half": h, "half_after": a, "stride": s}, 2),
                  st.integers(0, 9), st.integers(0, 9), st.integers(1, 4)),
        st.builds(lambda h: ("cuboid", {"half": h, "packing": "sparse_square"}, 2), st.integers(1, 4)),
        st.builds(lambda r, s: ("cylinder", {"radius": r, "stride": s, "packing": None}, 2),
                  st.integers(1, 7), st.integers(1, 3)),
        st.builds(lambda r: ("cylinder", {"radius": r, "packing": "dense_hexagonal"}, 2), st.integers(1, 5)),
        st.builds(lambda r: ("sphere", {"radius": r, "packing": "complete_face_centered_cubic"}, 3),
                  st.integers(1, 3)),
        st.builds(lambda k, p, d, s: ("patch", {"size": k, "pad": p, "dilation": d, "stride": s}, 2),
                  st.integers(1, 6), st.integers(0, 8), st.integers(1, 3), st.integers(1, 3)),
    )


@settings(max_examples=40, deadline=None)
@given(shapes(), st.sampled_from(CUT), st.sampled_from(["zero", "ignore", "auto"]), st.integers(1, 5),
       st.integers(1, 5), st.integers(0, 2**16))
def test_the_cut_patch_equals_the_whole_box_in_float64(shape, metric, outside, h, w, seed):
    kind, hp, rank = shape
    hp = {k: v for k, v in hp.items() if v is not None}
    spatial = (h, w, 3)[:rank]
    try:
        k = kappa(f"{kind}_pool", metric=metric, outside=outside, **hp)
        module = k.build((2, *spatial))
    except Exception:  # a window that does not fit the grid, a packing this size refuses: nothing to compare
        return
    x = torch.randn(2, 2, *spatial, generator=torch.Generator().manual_seed(seed), dtype=F64)
    if metric == "prod":
        x = x * 0.5 + 1.0
    want = whole_box(module, x)
    assert module.index.shape[1] <= module.geo.patch_size
    assert module.index.shape[1] == k._taps((2, *spatial))[2]  # the check's count is what is built
    torch.testing.assert_close(module(x), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(literal(copy.deepcopy(module))(x), want, rtol=1e-12, atol=1e-12)
    if native_pooling(module.geo, metric):  # the kernel op pools the cut window (negative pads crop)
        torch.testing.assert_close(module.pool(x), want, rtol=1e-12, atol=1e-12)
    if cut_exact(metric, module.ignore) and module.fill != ignore_fill(metric) and metric != "mean":
        assert module.fill == 0.0  # a zero read outside is the neutral element of a sum or a norm


@settings(max_examples=40, deadline=None)
@given(shapes(), st.integers(1, 6), st.integers(1, 6))
def test_a_cut_tap_is_outside_the_grid_in_every_patch(shape, h, w):
    """``Geometry.cut`` is sound and keeps the patches: its index is the whole box's at the kept taps (the box
    shrunk to ``[lo, hi]``, the windows moved by ``lo·d``), every tap it leaves out reads -1 in every patch, and
    every tap that lands inside the grid somewhere is kept."""
    kind, hp, rank = shape
    hp = {k: v for k, v in hp.items() if v is not None}
    spatial = (h, w, 3)[:rank]
    try:
        geo = kappa(f"{kind}_pool", **hp).geometry(rank)
        geo.out_spatial(spatial)
        full = geo.patch_index(spatial)
    except Exception:
        return
    cut = geo.cut(spatial)
    assert cut.out_spatial(spatial) == geo.out_spatial(spatial)
    lo = [(b - c) // d for b, c, d in zip(geo.pad_before, cut.pad_before, geo.dilation)]
    where = {t: i for i, t in enumerate(geo.tap_positions())}
    kept = [where[tuple(v + o for v, o in zip(t, lo))] for t in cut.tap_positions()]
    assert torch.equal(cut.patch_index(spatial), full[:, kept])
    dropped = sorted(set(range(full.shape[1])) - set(kept))
    assert bool((full[:, dropped] < 0).all())
    assert len(kept) == cut.patch_size >= 1


def test_a_window_far_wider_than_the_grid_gathers_only_the_grid():
    """half = 1000 on 14 × 14: 4,004,001 taps per patch, of which the 27 × 27 = 729 that reach the grid are built
    (the whole index was 785 million entries, 6.3 GB); max and mean equal the grid's own max / sum over the box."""
    x = torch.randn(2, 3, 14, 14, dtype=F64)
    for name, want in (("cuboid_max", x.amax((2, 3))), ("cuboid_mean", x.sum((2, 3)) / 2001**2)):
        module = kappa(name, half=1000).build((3, 14, 14))
        assert tuple(module.index.shape) == (196, 729)
        torch.testing.assert_close(module(x), want[..., None, None].expand(2, 3, 14, 14))
        torch.testing.assert_close(module.pool(x), module(x))


def test_the_matrix_view_of_a_window_wider_than_the_grid_is_built_from_the_cut_window():
    """``rpn2c show``'s pooling matrix of half = 1000 on 14 × 14 (its padding matrix over the whole box would have
    150 billion entries): the mean is 1/2001² on every cell, the max selects each channel's largest cell."""
    import rpn2c
    from rpn2c.runtime.layer_matrix import layer_matrix

    spec = "model m {{\n  input x: image[B, 2, 14, 14]\n  y = compress(x) {{\n    kappa = {}\n  }}\n  return y\n}}\n"
    x = torch.randn(1, 2, 14, 14, dtype=F64)
    mean = layer_matrix(rpn2c.compile(spec.format("cuboid_mean(half = 1000)")).double(), "y", {"x": x})
    torch.testing.assert_close(mean.matrix, torch.block_diag(*[torch.full((196, 196), 1 / 2001**2, dtype=F64)] * 2))
    top = layer_matrix(rpn2c.compile(spec.format("cuboid_max(half = 1000)")).double(), "y", {"x": x})
    winners = x[0].flatten(1).argmax(-1)
    want = torch.zeros(2, 196, 2, 196, dtype=F64)
    for c in range(2):
        want[c, :, c, winners[c]] = 1.0
    torch.testing.assert_close(top.matrix, want.reshape(392, 392))
