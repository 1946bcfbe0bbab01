"""Hexagonal packing as the paper's zig-zag (Figs 15–16): every other row of patch centres is offset by half the
centre distance. The centres against a hand-computed lattice, the packing study of §5.2.5–5.2.6 (coverage and
overlap ratios) on the discrete grid, and both lowerings of packed ξ and κ (docs/semantics.md, "Hexagonal
packing")."""

from __future__ import annotations

import math

import pytest
import torch

from rpn2c.components import REGISTRY
from rpn2c.functional import structure as S
from tests.test_lowering_equivalence import _rand, assert_equivalent


def test_row_shift_is_half_the_width_stride_for_hexagonal_packings():
    assert S.packing_row_shift("sparse_hexagonal", (20, 24)) == 12
    assert S.packing_row_shift("complete_hexagonal", (18, 21)) == 10
    assert S.packing_row_shift("sparse_face_centered_cubic", (10, 12, 9)) == 6
    assert S.packing_row_shift("complete_square", (16, 16)) == 0
    assert S.packing_row_shift("sparse_simple_cubic", (12, 12, 12)) == 0
    assert S.packing_row_shift(None, (3, 3)) == 0


def test_patch_centres_are_the_offset_lattice():
    """Extent 7 x 9, stride (3, 4), shift 2: rows 0, 3, 6; even rows at columns 0, 4, 8, the odd row at 2, 6, 10
    (10 is past the grid: same count per row, its taps read the zero padding)."""
    idx = S.patch_index((7, 9), torch.zeros(1, 2, dtype=torch.long), (3, 4), 0, None, "zeros", 2)[:, 0]
    want = [0 * 9 + 0, 0 * 9 + 4, 0 * 9 + 8, 3 * 9 + 2, 3 * 9 + 6, -1, 6 * 9 + 0, 6 * 9 + 4, 6 * 9 + 8]
    assert idx.tolist() == want
    # the rectangular lattice of eq 70 is the shift-free case
    rect = S.patch_index((7, 9), torch.zeros(1, 2, dtype=torch.long), (3, 4))[:, 0]
    assert rect.tolist() == [0, 4, 8, 27, 31, 35, 54, 58, 62]


def test_packed_components_carry_the_offset():
    xi = REGISTRY["interdependence"]["cylinder_patch"]
    geo = xi.cls(xi.schema(radius=2, packing="sparse_hexagonal")).geometry(2)
    assert geo.stride == (3, 4) and geo.row_shift == 2  # d_h = floor(√3·2), d_w = 2·2
    geo = xi.cls(xi.schema(radius=2, packing="complete_square")).geometry(2)
    assert geo.row_shift == 0
    kappa = REGISTRY["compression"]["cylinder_max"]
    assert kappa.cls(kappa.schema(radius=2, packing="complete_hexagonal")).geometry(2).row_shift == 1


def _coverage(strategy, r=12, length=240, shift=True):
    """(covered fraction of the interior cells, fraction of an interior patch's cells in another patch too)."""
    offsets = S.cylinder_offsets(r, ndim=2)
    stride = S.packing_stride("cylinder", strategy, r)
    idx = S.patch_index((length, length), offsets, stride, (r, r), None, "zeros",
                        S.packing_row_shift(strategy, stride) if shift else 0)
    hits = torch.zeros(length * length, dtype=torch.long).index_add_(0, idx[idx >= 0], torch.ones_like(idx[idx >= 0]))
    inner = hits.reshape(length, length)[2 * r:-2 * r, 2 * r:-2 * r]
    full = idx[(idx >= 0).all(1)]
    rows, cols = full // length, full % length
    far = ((rows.min(1).values > 2 * r) & (rows.max(1).values < length - 2 * r)
           & (cols.min(1).values > 2 * r) & (cols.max(1).values < length - 2 * r))
    return (inner > 0).double().mean().item(), (hits[full[far]] > 1).double().mean().item()


def test_cylinder_packing_study_reproduces_the_papers_ratios():
    """§5.2.5: sparse square covers π/4 ≈ 0.785, sparse hexagonal π/(2√3) ≈ 0.907; the complete packings cover
    everything, complete hexagonal with a per-circle overlap of (2π − 3√3)/π ≈ 0.345 (discrete discs of radius 12,
    integer strides). Without the offset rows the same strides leave gaps."""
    sq, _ = _coverage("sparse_square")
    hexa, _ = _coverage("sparse_hexagonal")
    assert sq == pytest.approx(math.pi / 4, abs=0.03)
    assert hexa == pytest.approx(math.pi / (2 * math.sqrt(3)), abs=0.015)
    assert _coverage("complete_square")[0] == 1.0
    cover, overlap = _coverage("complete_hexagonal")
    assert cover == 1.0 and overlap == pytest.approx((2 * math.pi - 3 * math.sqrt(3)) / math.pi, abs=0.03)
    assert _coverage("complete_hexagonal", shift=False)[0] < 0.97  # the rectangular lattice is not complete
    assert _coverage("sparse_hexagonal", shift=False)[0] < hexa - 0.05


@pytest.mark.parametrize("xi", [
    'cylinder_patch(radius = 2, packing = "sparse_hexagonal")',
    'cylinder_patch(radius = 2, packing = "complete_hexagonal", mode = "aggregation")',
    'geometric_patch(shape = "cylinder", radius = 2, packing = "dense_hexagonal", style = "conv", pad = 2)',
])
def test_hexagonal_xi_default_equals_reference(xi):
    text = f"model g {{ input x: image[B, 2, 12, 11] y = head(x) {{ xi_attribute = {xi}  out = 3 }} return y }}"
    assert_equivalent(text, {"x": _rand(2, 2, 12, 11)})


def test_hexagonal_sphere_and_pooling_default_equal_reference():
    text = ('model g { input x: grid[B, 1, 7, 8, 6] y = head(x) { xi_attribute = sphere_patch(radius = 1, packing = '
            '"sparse_face_centered_cubic")  out = 2 } return y }')
    assert_equivalent(text, {"x": _rand(2, 1, 7, 8, 6)})
    text = ('model p { input x: image[B, 2, 9, 10] p = compress(x) { kappa = cylinder_max(radius = 2, packing = '
            '"sparse_hexagonal") } return p }')
    assert_equivalent(text, {"x": _rand(2, 2, 9, 10)})
