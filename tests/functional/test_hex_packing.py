"""Hexagonal packing as the paper's zig-zag (Figs 15–16): every other row of patch centres is offset by half the
centre distance, and the depth layers of the sphere packings sit in the interstices of the layer below (face-centred
cubic: period 3, hexagonal: period 2). The centres against a hand-computed lattice and a numpy construction of the
interstices, membership against a coordinate loop, the packing study of §5.2.5–5.2.6 (coverage and overlap ratios)
on the discrete grid, and both lowerings of packed ξ and κ (docs/semantics.md, "Hexagonal packing")."""

from __future__ import annotations

import itertools
import math

import numpy as np
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


def _coverage(strategy, r=12, length=240, shift=True, lattice=False):
    """(covered fraction of the interior cells, fraction of an interior patch's cells in another patch too); the
    floored whole-cell centres, or with ``lattice`` the paper's real-valued lattice rounded per centre."""
    offsets = S.cylinder_offsets(r, ndim=2)
    stride = S.packing_stride("cylinder", strategy, r)
    idx = S.patch_index((length, length), offsets, stride, (r, r), None, "zeros",
                        S.packing_row_shift(strategy, stride) if shift else 0, (),
                        S.packing_lattice("cylinder", strategy, r) if lattice else None)
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


# ------------------------------------------------------------------------------------------------ depth layers
def test_layer_shift_is_the_interstice_of_the_layer_below():
    """Sphere FCC (r = 6: strides 10, 12, 9, row shift 6): layers B, C over the centroids (10/3, (12 + 6)/3) and twice
    that (mod d_w), floored; sphere hexagonal: one shifted layer class (AB). Simple cubic and every cylinder packing
    stack their layers directly (§5.2.5: a cylinder's depth is packed as the cuboid's)."""
    assert S.packing_layer_shift("sphere", "sparse_face_centered_cubic", (10, 12, 9)) == ((0, 0), (3, 6), (6, 0))
    assert S.packing_layer_shift("sphere", "complete_face_centered_cubic", (8, 9, 8)) == ((0, 0), (2, 4), (5, 8))
    assert S.packing_layer_shift("sphere", "sparse_hexagonal", (12, 12, 10)) == ((0, 0), (4, 6))
    assert S.packing_layer_shift("sphere", "sparse_simple_cubic", (12, 12, 12)) == ()
    assert S.packing_layer_shift("cylinder", "sparse_hexagonal", (20, 24, 4)) == ()
    assert S.packing_layer_shift("sphere", "dense_face_centered_cubic", (1, 1, 1)) == ()  # nothing moves


def _interstice_lattice(extent, stride, shift, period):
    """The paper's words in numpy (d_w even, so both row parities agree): layer A the zig-zag rows (odd rows shifted
    by ``shift``), layer B the floored centroids of A's triangles ``p, p + (0, d_w), q`` (q: the point of the next
    row between them), layer C (period 3) those of the triangles ``q, q + (0, d_w), p + (0, d_w)``; layer k takes
    class k mod period and the same count per row and layer. Returns [P, 3] centres, row-major over the counts."""
    counts = [-(-n // d) for n, d in zip(extent, stride)]
    d_h, d_w, d_d = stride
    p = np.array([0.0, 0.0])
    q = np.array([d_h, shift], dtype=float)
    up = (p + (p + [0, d_w]) + q) / 3
    down = (q + (q + [0, d_w]) + (p + [0, d_w])) / 3
    classes = [np.zeros(2), up, down][:period]
    out = []
    for i, j, k in itertools.product(*(range(c) for c in counts)):
        base = np.array([i * d_h, j * d_w + (i % 2) * shift], dtype=float)
        off = np.floor(classes[k % period])
        off[1] %= d_w
        out.append([*(base + off), k * d_d])
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("strategy, period", [("sparse_face_centered_cubic", 3), ("sparse_hexagonal", 2),
                                              ("complete_hexagonal", 2)])
@pytest.mark.parametrize("r", [2, 6])
def test_sphere_patch_centres_are_the_interstice_lattice(strategy, period, r):
    stride = S.packing_stride("sphere", strategy, r)
    shift = S.packing_row_shift(strategy, stride)
    assert stride[1] % 2 == 0
    extent = tuple(3 * d + 1 for d in stride)  # 4 centres per axis: every layer class and row parity appears
    counts = [-(-n // d) for n, d in zip(extent, stride)]
    idx = S.patch_index(extent, torch.zeros(1, 3, dtype=torch.long), stride, 0, None, "circular", shift,
                        S.packing_layer_shift("sphere", strategy, stride))[:, 0]
    want = _interstice_lattice(extent, stride, shift, period)
    assert len(idx) == math.prod(counts)
    np.testing.assert_array_equal(idx.numpy(), np.ravel_multi_index(want.T, extent, mode="wrap"))


def test_sphere_fcc_centres_by_hand():
    """Extent 4 x 5 x 7, stride (3, 4, 3), row shift 2, layers (0, 0), (1, 2), (2, 0): layer k = 0 has centres
    (0, 0), (0, 4), (3, 2), (3, 6); layer 1 (depth 3) moves each by (1, 2); layer 2 (depth 6) by (2, 0)."""
    idx = S.patch_index((4, 5, 7), torch.zeros(1, 3, dtype=torch.long), (3, 4, 3), 0, None, "zeros", 2,
                        ((0, 0), (1, 2), (2, 0)))[:, 0]
    assert S.packing_layer_shift("sphere", "sparse_face_centered_cubic", (3, 4, 3)) == ((0, 0), (1, 2), (2, 0))
    flat = {(h, w, d): (h * 5 + w) * 7 + d for h in range(4) for w in range(5) for d in range(7)}
    want = [flat.get(c, -1) for c in [(0, 0, 0), (1, 2, 3), (2, 0, 6), (0, 4, 0), (1, 6, 3), (2, 4, 6),
                                      (3, 2, 0), (4, 4, 3), (5, 2, 6), (3, 6, 0), (4, 8, 3), (5, 6, 6)]]
    assert idx.tolist() == want


def _naive_sphere_membership(extent, centres, r):
    """Padding matrix by a coordinate loop over centres and the ball's offsets (lexicographic)."""
    taps = [d for d in itertools.product(range(-r, r + 1), repeat=3) if sum(v * v for v in d) <= r * r]
    a = np.zeros((math.prod(extent), len(centres) * len(taps)))
    for qi, c in enumerate(centres):
        for ti, d in enumerate(taps):
            pos = [ci + di for ci, di in zip(c, d)]
            if all(0 <= v < n for v, n in zip(pos, extent)):
                a[np.ravel_multi_index(pos, extent), qi * len(taps) + ti] = 1
    return a


@pytest.mark.parametrize("strategy, period", [("sparse_face_centered_cubic", 3), ("sparse_hexagonal", 2)])
def test_sphere_packing_membership_equals_a_naive_coordinate_loop(strategy, period):
    from rpn2c.components.xi import padding_matrix

    xi = REGISTRY["interdependence"]["sphere_patch"]
    geo = xi.cls(xi.schema(radius=2, packing=strategy, centres="cells")).geometry(3)
    extent = (8, 9, 10)
    got = padding_matrix(geo, extent, torch.float64, None).numpy()
    centres = _interstice_lattice(extent, geo.stride, geo.row_shift, period)
    np.testing.assert_array_equal(got, _naive_sphere_membership(extent, centres, 2))


def test_sphere_packing_study_with_offset_layers():
    """§5.2.6 on the discrete grid (r = 6): the offset layers raise FCC's coverage (paper π/(3√2) ≈ 0.7405; the
    floored strides 10, 12, 9 pack denser than the paper's 10.39, 12, 9.80) and hexagonal's; simple cubic keeps
    π/6 ≈ 0.524."""
    def coverage(strategy, layers=True, r=6, n=84):
        stride = S.packing_stride("sphere", strategy, r)
        idx = S.patch_index((n,) * 3, S.sphere_offsets(r), stride, (r,) * 3, None, "zeros",
                            S.packing_row_shift(strategy, stride),
                            S.packing_layer_shift("sphere", strategy, stride) if layers else ())
        hit = torch.zeros(n ** 3, dtype=torch.bool)
        hit[idx[idx >= 0]] = True
        return hit.reshape(n, n, n)[3 * r:-3 * r, 3 * r:-3 * r, 3 * r:-3 * r].double().mean().item()

    fcc, hcp = coverage("sparse_face_centered_cubic"), coverage("sparse_hexagonal")
    assert fcc > coverage("sparse_face_centered_cubic", layers=False) + 0.03 and fcc == pytest.approx(0.83, abs=0.02)
    assert hcp > coverage("sparse_hexagonal", layers=False) + 0.01
    assert coverage("sparse_simple_cubic") == pytest.approx(math.pi / 6, abs=0.02)


def test_strides_stay_whole_cells():
    """The whole-cell reading (`centres = "cells"`; docs/semantics.md, "Packing centres"): centre distances and
    shifts floored to whole grid cells (the paper's √3·r, 2√6/3·r are not), a strided lattice on grid nodes."""
    assert S.packing_stride("sphere", "sparse_face_centered_cubic", 6) == (10, 12, 9)  # 10.39, 12, 9.80
    assert S.packing_stride("cylinder", "complete_hexagonal", 12) == (18, 20)  # 18, 20.78


@pytest.mark.parametrize("text, shape", [
    ('head(x) { xi_attribute = sphere_patch(radius = 1, packing = "sparse_hexagonal")  out = 2 }', (2, 1, 7, 8, 9)),
    ('head(x) { xi_attribute = sphere_patch(radius = 1, packing = "complete_face_centered_cubic", mode = '
     '"aggregation")  out = 2 }', (2, 1, 7, 8, 9)),
    ('compress(x) { kappa = sphere_mean(radius = 1, packing = "sparse_face_centered_cubic") }', (2, 2, 7, 8, 9)),
    ('compress(x) { kappa = sphere_max(radius = 1, packing = "sparse_hexagonal") }', (2, 2, 7, 8, 9)),
])
def test_offset_layers_default_equals_reference(text, shape):
    spec = f"model g {{ input x: grid[B, {shape[1]}, 7, 8, 9] y = {text} return y }}"
    assert_equivalent(spec, {"x": _rand(*shape)})
