"""Tests for rpn2c.functional.structure (grid patches, chains, graphs)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rpn2c.functional import structure as S

DT = torch.float64
SET = settings(max_examples=25, deadline=None)


def _close(a, b, tol=1e-10):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


# ------------------------------------------------------------------------------------------------
# patch shapes and packing
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "size,cuboid,cylinder,sphere", [(1, 9, 5, 7), (2, 25, 13, 33), (3, 49, 29, 123), (4, 81, 49, 257)]
)
def test_patch_sizes_catalog_table(size, cuboid, cylinder, sphere):
    assert S.cuboid_offsets((size, size)).shape == (cuboid, 2)
    assert S.cylinder_offsets(size).shape == (cylinder, 2)
    assert S.sphere_offsets(size).shape == (sphere, 3)


def test_cuboid_offsets_lexicographic_and_asymmetric():
    off = S.cuboid_offsets((1, 0), (0, 2), dilation=(2, 3))
    expect = [(a * 2, b * 3) for a in range(-1, 1) for b in range(0, 3)]
    assert [tuple(r) for r in off.tolist()] == expect
    assert S.cuboid_offsets((1, 2, 0), (1, 2, 3)).shape[0] == 3 * 5 * 4


def test_cylinder_respects_both_depth_bounds():
    off = S.cylinder_offsets(2, depth_before=1, depth_after=3)
    assert off.shape == (13 * 5, 3)
    assert off[:, 2].min() == -1 and off[:, 2].max() == 3
    disc = {tuple(r) for r in S.cylinder_offsets(2).tolist()}
    assert {tuple(r[:2]) for r in off.tolist()} == disc
    # lexicographic order
    assert sorted(map(tuple, off.tolist())) == [tuple(r) for r in off.tolist()]


def test_sphere_offsets_ball_and_order():
    off = S.sphere_offsets(2)
    assert ((off**2).sum(-1) <= 4).all()
    assert sorted(map(tuple, off.tolist())) == [tuple(r) for r in off.tolist()]


def test_kernel_mask_places_weights_in_offset_order():
    off = S.cylinder_offsets(2, 1, 0, dilation=(1, 2, 1))
    m = S.kernel_mask(off, (2, 2, 1), dilation=(1, 2, 1))
    assert m.shape == (5, 5, 2) and m.sum() == off.shape[0]
    w = torch.arange(off.shape[0], dtype=DT) + 1
    k = torch.zeros(m.shape, dtype=DT)
    k[m] = w
    for j, o in enumerate(off.tolist()):
        assert k[o[0] + 2, o[1] // 2 + 2, o[2] + 1] == w[j]
    assert S.kernel_mask(S.cuboid_offsets((1, 1)), (1, 1)).all()


def test_packing_table_values():
    # catalog §6.3 anchors: cuboid 4 sparse_square -> 12, cylinder 4 sparse_square -> 8
    assert S.packing_stride("cuboid", "sparse_square", (4, 4)) == (12, 12)
    assert S.packing_stride("cuboid", "dense_square", (2, 3, 0)) == (2, 3, 1)  # p_d = 0 -> 1
    assert S.packing_stride("cylinder", "sparse_square", 4) == (8, 8)
    assert S.packing_stride("cylinder", "complete_square", 4) == (5, 5)  # floor(4 sqrt 2)
    assert S.packing_stride("cylinder", "complete_hexagonal", (4, 2)) == (6, 6, 4)
    assert S.packing_stride("cylinder", "dense_hexagonal", (4, 2)) == (4, 5, 2)
    # erratum 7: denser hexagonal paper sqrt(2)/2 r vs toolkit sqrt(3)/2 r
    assert S.packing_stride("cylinder", "denser_hexagonal", 4) == (2, 4)
    assert S.packing_stride("cylinder", "denser_hexagonal", 4, convention="toolkit") == (3, 4)
    assert S.packing_stride("sphere", "sparse_face_centered_cubic", 2) == (3, 4, 3)
    assert S.packing_stride("sphere", "sparse_face_centered_cubic", 2, "toolkit") == (4, 3, 3)
    assert S.packing_stride("sphere", "sparse_hexagonal", 2) == (4, 4, 3)
    assert S.packing_stride("sphere", "sparse_hexagonal", 2, "toolkit") == (4, 4, 4)
    assert S.packing_stride("sphere", "complete_face_centered_cubic", 3) == (4, 4, 4)
    assert S.packing_stride("sphere", "complete_simple_cubic", 3) == (3, 3, 3)
    for kind in ("cuboid", "cylinder", "sphere"):
        assert S.packing_stride(kind, "densest_packing", 3 if kind != "cuboid" else (3, 3))[:2] == (1, 1)
    assert S.packing_stride("cylinder", "sparse_square", 0) == (1, 1)  # min 1
    with pytest.raises(ValueError):
        S.packing_stride("cuboid", "sparse_hexagonal", (2, 2))


def test_out_extent_and_centre_counts():
    assert S.out_extent(32, 9, 12, 1, 4, 4) == 3 == math.ceil(32 / 12)
    assert S.out_extent(7, 3, 2, 2, 1, 0) == (7 + 1 - 4 - 1) // 2 + 1
    assert S.out_extent(2, 5) == 0
    assert S.centre_counts((32, 31), (12, 4)) == (3, 8)


# ------------------------------------------------------------------------------------------------
# patch_index / gather vs unfold and manual indexing
# ------------------------------------------------------------------------------------------------


def _unfold_via_index(x, k, s, p, d, mode="zeros"):
    B, C, H, W = x.shape
    off = S.cuboid_offsets((0, 0), (k[0] - 1, k[1] - 1), d)
    counts = (S.out_extent(H, k[0], s[0], d[0], p[0], p[0]), S.out_extent(W, k[1], s[1], d[1], p[1], p[1]))
    idx = S.patch_index((H, W), off, s, p, counts, mode)
    g = S.gather_patches(x.reshape(B, C, H * W), idx, dim=-1)  # [B, C, P, p]
    return g.permute(0, 1, 3, 2).reshape(B, C * off.shape[0], -1)


conv_params = st.tuples(
    st.integers(1, 4), st.integers(1, 4),  # k
    st.integers(1, 3), st.integers(1, 3),  # s
    st.integers(0, 3), st.integers(0, 3),  # p
    st.integers(1, 2), st.integers(1, 2),  # d
    st.integers(5, 9), st.integers(5, 9),  # H W
)


@SET
@given(conv_params)
def test_patch_index_gather_equals_unfold(prm):
    kh, kw, sh, sw, ph, pw, dh, dw, H, W = prm
    assume(H + 2 * ph > dh * (kh - 1) and W + 2 * pw > dw * (kw - 1))
    x = torch.randn(2, 3, H, W, dtype=DT)
    ref = F.unfold(x, (kh, kw), dilation=(dh, dw), padding=(ph, pw), stride=(sh, sw))
    got = _unfold_via_index(x, (kh, kw), (sh, sw), (ph, pw), (dh, dw))
    _close(got, ref)


@SET
@given(conv_params, st.sampled_from(["circular", "reflect", "replicate"]))
def test_patch_index_padding_modes_equal_F_pad(prm, mode):
    kh, kw, sh, sw, ph, pw, dh, dw, H, W = prm
    assume(H + 2 * ph > dh * (kh - 1) and W + 2 * pw > dw * (kw - 1))
    x = torch.randn(1, 2, H, W, dtype=DT)
    ref = F.unfold(F.pad(x, (pw, pw, ph, ph), mode=mode), (kh, kw), dilation=(dh, dw), stride=(sh, sw))
    got = _unfold_via_index(x, (kh, kw), (sh, sw), (ph, pw), (dh, dw), mode)
    _close(got, ref)


def _manual(x, offsets, stride, pad_before, counts, mode):
    """Loop reference: value of every (patch, tap) on a grid (numpy-free, loops are fine in tests)."""
    ext = x.shape
    out = torch.zeros(math.prod(counts), offsets.shape[0], dtype=x.dtype)
    for qi, q in enumerate(itertools.product(*[range(c) for c in counts])):
        for j, o in enumerate(offsets.tolist()):
            u = [q[a] * stride[a] - pad_before[a] + o[a] for a in range(len(ext))]
            if mode == "zeros" and any(not 0 <= u[a] < ext[a] for a in range(len(ext))):
                continue
            if mode == "circular":
                u = [u[a] % ext[a] for a in range(len(ext))]
            out[qi, j] = x[tuple(u)]
    return out


@SET
@given(
    st.integers(1, 3), st.lists(st.integers(3, 6), min_size=3, max_size=3), st.integers(1, 3),
    st.integers(0, 2), st.integers(0, 2), st.sampled_from(["zeros", "circular"]),
)
def test_patch_index_1d_3d_manual(ndim_pick, ext, s, b, a, mode):
    ndim = 1 if ndim_pick == 1 else 3
    ext = tuple(ext[:ndim])
    x = torch.randn(ext, dtype=DT)
    off = S.cuboid_offsets((b,) * ndim, (a,) * ndim) if ndim == 1 else S.sphere_offsets(1)
    counts = S.centre_counts(ext, s)
    idx = S.patch_index(ext, off, s, 0, None, mode)
    assert idx.shape == (math.prod(counts), off.shape[0])
    got = S.gather_patches(x.reshape(-1), idx)
    _close(got, _manual(x, off, (s,) * ndim, (0,) * ndim, counts, mode))


def test_patch_index_3d_conv3d():
    x = torch.randn(1, 1, 5, 6, 4, dtype=DT)
    off = S.cylinder_offsets(1, 1, 1)
    idx = S.patch_index((5, 6, 4), off, (2, 1, 1))
    m = S.kernel_mask(off, (1, 1, 1)).to(DT)
    w = torch.randn(3, 3, 3, dtype=DT) * m
    ref = F.conv3d(x, w[None, None], stride=(2, 1, 1), padding=1).reshape(-1)
    got = S.gather_patches(x.reshape(-1), idx) @ w[m.bool()]
    _close(got, ref)


# ------------------------------------------------------------------------------------------------
# literal matrices
# ------------------------------------------------------------------------------------------------


@SET
@given(st.integers(1, 3), st.integers(0, 2), st.integers(1, 2), st.integers(1, 2), st.booleans())
def test_padding_matrix_im2col_equals_conv2d(k, p, s, d, sparse):
    B, Ci, Co, H, W = 2, 3, 4, 7, 6
    x = torch.randn(B, Ci, H, W, dtype=DT)
    wt = torch.randn(Co, Ci, k, k, dtype=DT)
    off = S.cuboid_offsets((0, 0), (k - 1, k - 1), d)
    counts = (S.out_extent(H, k, s, d, p, p), S.out_extent(W, k, s, d, p, p))
    M = S.padding_matrix((H, W), off, s, p, counts, dtype=DT, sparse=sparse)
    Md = M.to_dense() if sparse else M
    assert Md.shape == (H * W, math.prod(counts) * k * k)
    assert (Md.sum(0) <= 1).all()
    cols = (x.reshape(B * Ci, H * W) @ Md).reshape(B, Ci, -1, k * k)  # [B, Ci, P, p]
    y = cols.permute(0, 2, 1, 3).reshape(B, -1, Ci * k * k) @ wt.reshape(Co, -1).T  # [B, P, Co]
    ref = F.conv2d(x, wt, stride=s, padding=p, dilation=d)
    _close(y.permute(0, 2, 1).reshape(ref.shape), ref)


def test_padding_matrix_circular_equals_conv2d_circular():
    B, Ci, Co, H, W, k, p = 2, 2, 3, 6, 5, 3, 1
    conv = torch.nn.Conv2d(Ci, Co, k, padding=p, padding_mode="circular", bias=False).double()
    x = torch.randn(B, Ci, H, W, dtype=DT)
    # paper-style centred patch: centre-relative offsets, pad_before 0, ceil(L/s) centres
    M = S.padding_matrix((H, W), S.cuboid_offsets((1, 1)), 1, 0, None, "circular", dtype=DT)
    assert (M.sum(0) == 1).all()
    cols = (x.reshape(B * Ci, -1) @ M).reshape(B, Ci, H * W, k * k).permute(0, 2, 1, 3).reshape(B, H * W, -1)
    y = (cols @ conv.weight.reshape(Co, -1).T).permute(0, 2, 1).reshape(B, Co, H, W)
    _close(y, conv(x))


@pytest.mark.parametrize("shape", ["cuboid", "cylinder"])
@pytest.mark.parametrize("stride", [1, 2, 3])
def test_aggregation_matrix_box_sum(shape, stride):
    H, W = 8, 7
    off = S.cuboid_offsets((1, 2), (2, 1)) if shape == "cuboid" else S.cylinder_offsets(2)
    before = (1, 2) if shape == "cuboid" else (2, 2)
    after = (2, 1) if shape == "cuboid" else (2, 2)
    x = torch.randn(3, 1, H, W, dtype=DT)
    M = S.aggregation_matrix((H, W), off, stride, dtype=DT)
    assert M.shape == (H * W, math.ceil(H / stride) * math.ceil(W / stride))
    kern = S.kernel_mask(off, before).to(DT)[None, None]
    ref = F.conv2d(F.pad(x, (before[1], after[1], before[0], after[0])), kern, stride=stride)
    _close((x.reshape(3, -1) @ M).reshape(ref.shape), ref)
    Ms = S.aggregation_matrix((H, W), off, stride, dtype=DT, sparse="csr")
    _close(Ms.to_dense(), M)
    # aggregation = padding matrix summed over taps
    Mp = S.padding_matrix((H, W), off, stride, dtype=DT)
    _close(Mp.reshape(H * W, -1, off.shape[0]).sum(-1), M)


def test_aggregation_matrix_replicate_counts_duplicates():
    M = S.aggregation_matrix((4,), S.cuboid_offsets(1), 1, 0, None, "replicate", dtype=DT)
    assert M[0, 0] == 2 and M[1, 0] == 1 and M.sum(0).eq(3).all()


# ------------------------------------------------------------------------------------------------
# chain
# ------------------------------------------------------------------------------------------------


def _explicit_chain(n, bi=False, s=None):
    A = torch.zeros(n, n, dtype=DT)
    for t in range(1, n):
        A[t, t - 1] = 1
        if bi:
            A[t - 1, t] = 1
    if s is not None:
        A += s * torch.eye(n, dtype=DT)
    return A


def test_chain_matrices_explicit():
    for n in (1, 2, 5):
        _close(S.chain_matrix(n, dtype=DT), _explicit_chain(n))
        _close(S.chain_matrix(n, True, True, 0.5, dtype=DT), _explicit_chain(n, True, 0.5))
        _close(S.graph_adjacency(S.chain_edges(n, True), n, dtype=DT), _explicit_chain(n, True))
    x = torch.randn(6, 2, dtype=DT)
    y = S.chain_matrix(6, dtype=DT) @ x
    _close(y[1:], x[:-1])  # each item relies on the previous one
    assert (y[0] == 0).all()


def test_multihop_chain_identity_convention():
    n, A = 6, _explicit_chain(6)
    _close(S.multihop_chain(n, 3, dtype=DT), torch.diag(torch.ones(3, dtype=DT), -3))
    _close(S.multihop_chain(n, 0, dtype=DT), torch.eye(n, dtype=DT))
    acc = sum(torch.linalg.matrix_power(A, k) for k in range(4))
    _close(S.multihop_chain(n, 3, accumulate=True, dtype=DT), acc)
    _close(S.multihop_chain(n, 3, accumulate=True, include_identity=False, dtype=DT), acc - torch.eye(n, dtype=DT))
    # toolkit multi-hop = (A + I)^h: binomial weights
    _close(S.multihop_chain(n, 2, self_loop=True, dtype=DT)[3, 1:4], torch.tensor([1.0, 2.0, 1.0], dtype=DT))


def test_chain_inverse_and_exponential():
    n = 7
    A = _explicit_chain(n)
    inv = S.chain_inverse_approx(n, dtype=DT)
    _close(inv, torch.tril(torch.ones(n, n, dtype=DT)))
    _close(inv, torch.linalg.inv(torch.eye(n, dtype=DT) - A))
    Ab = _explicit_chain(n, True)
    _close(S.chain_inverse_approx(n, True, dtype=DT), sum(torch.linalg.matrix_power(Ab, k) for k in range(n)))
    E = S.chain_exponential(n, dtype=DT)
    expect = torch.zeros(n, n, dtype=DT)
    for t in range(n):
        for h in range(t + 1):
            expect[t, t - h] = 1 / math.factorial(h)
    _close(E, expect)
    series = sum(torch.linalg.matrix_power(Ab, k) / float(math.factorial(k)) for k in range(40))
    _close(S.chain_exponential(n, True, dtype=DT), series)


chain_opts = st.tuples(
    st.integers(1, 12), st.integers(0, 5), st.booleans(), st.booleans(), st.booleans(),
    st.sampled_from([0.5, 1.0, -2.0]),
)


@SET
@given(chain_opts, st.sampled_from(["power", "accumulate", "inverse", "exponential"]))
def test_chain_apply_equals_matrix(opts, mode):
    n, hops, bi, loop, incl, s = opts
    if mode == "inverse":
        loop = False
    x = torch.randn(2, n, 3, dtype=DT)
    kw = dict(bidirectional=bi, self_loop=loop, self_scaling=s, dtype=DT)
    if mode == "power":
        M = S.multihop_chain(n, hops, **kw)
    elif mode == "accumulate":
        M = S.multihop_chain(n, hops, accumulate=True, include_identity=incl, **kw)
    elif mode == "inverse":
        M = S.chain_inverse_approx(n, bi, dtype=DT)
    else:
        M = S.chain_exponential(n, **kw)
    got = S.chain_apply(x, 1, hops, mode=mode, bidirectional=bi, self_loop=loop, self_scaling=s, include_identity=incl)
    _close(got, torch.einsum("tu,bum->btm", M, x), tol=1e-9)
    # item axis last works too
    got_t = S.chain_apply(x.transpose(1, 2), -1, hops, mode=mode, bidirectional=bi, self_loop=loop,
                          self_scaling=s, include_identity=incl)
    _close(got_t.transpose(1, 2), got, tol=1e-12)


def test_chain_apply_compiles_fullgraph():
    f = torch.compile(lambda x: S.chain_apply(x, 1, 2, mode="accumulate", bidirectional=True),
                      fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 9, 3, dtype=DT)
    _close(f(x), torch.einsum("tu,bum->btm", S.multihop_chain(9, 2, True, bidirectional=True, dtype=DT), x))


# ------------------------------------------------------------------------------------------------
# graph
# ------------------------------------------------------------------------------------------------


def _random_graph(n, e, seed, weighted=False, loops=True):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    if not loops:
        ei = ei[:, ei[0] != ei[1]]
    w = torch.rand(ei.shape[1], generator=g, dtype=DT) + 0.1 if weighted else None
    return ei, w


def _dense(ei, n, w=None):
    A = torch.zeros(n, n, dtype=DT)
    for k, (s, t) in enumerate(ei.T.tolist()):
        A[t, s] += 1.0 if w is None else w[k]
    return A


graphs = st.tuples(st.integers(1, 9), st.integers(0, 30), st.integers(0, 10_000), st.booleans())


@SET
@given(graphs)
def test_symmetric_normalization_hand_written(g):
    n, e, seed, weighted = g
    ei, w = _random_graph(n, e, seed, weighted, loops=False)
    A = _dense(ei, n, w)
    A = torch.maximum(A, A.T)  # undirected, symmetrize="max"
    At = A + torch.eye(n, dtype=DT)
    dinv = At.sum(1).pow(-0.5)
    ref = dinv[:, None] * At * dinv[None, :]
    _close(S.graph_adjacency(ei, n, w, directed=False, normalization="symmetric", dtype=DT), ref)
    # directed: degree at the target (row sums), D^-1/2 (A+I) D^-1/2 with the row-sum D
    Ad = _dense(ei, n, w) + torch.eye(n, dtype=DT)
    d = Ad.sum(1).pow(-0.5)
    _close(S.graph_adjacency(ei, n, w, normalization="symmetric", dtype=DT), d[:, None] * Ad * d[None, :])


@SET
@given(graphs)
def test_symmetric_normalization_matches_pyg_gcn_norm(g):
    gcn = pytest.importorskip("torch_geometric.nn.conv.gcn_conv")
    n, e, seed, weighted = g
    ei, w = _random_graph(n, e, seed, weighted, loops=True)  # duplicated edges and self-loops included
    e_idx, e_w = gcn.gcn_norm(ei, w, n, add_self_loops=True, dtype=DT)
    ref = torch.zeros(n, n, dtype=DT).index_put_((e_idx[1], e_idx[0]), e_w, accumulate=True)
    _close(S.graph_adjacency(ei, n, w, normalization="symmetric", dtype=DT), ref)


def test_self_loops_keep_existing_weight():
    ei = torch.tensor([[0, 1, 1], [1, 1, 2]])
    w = torch.tensor([2.0, 5.0, 3.0], dtype=DT)
    A = S.graph_adjacency(ei, 3, w, self_loops=True, fill=0.5)
    _close(A.diagonal(), torch.tensor([0.5, 5.0, 0.5], dtype=DT))
    assert A[1, 0] == 2.0 and A[2, 1] == 3.0


def test_duplicated_self_loops_keep_the_last_listed_weight():
    """PyG's add_remaining_self_loops: one loop per node with its last listed weight (not their sum), eagerly and
    compiled (where the replaced loops stay as zero-weight placeholders)."""
    ei = torch.tensor([[2, 0, 2, 0, 1], [2, 1, 2, 0, 2]])
    w = torch.tensor([4.0, 2.0, 6.0, 1.5, 3.0], dtype=DT)
    want = torch.tensor([[1.5, 0, 0], [2.0, 0.5, 0], [0, 3.0, 6.0]], dtype=DT)
    _close(S.graph_adjacency(ei, 3, w, self_loops=True, fill=0.5), want)
    f = torch.compile(S.graph_norm_weights, fullgraph=True, backend="aot_eager")
    src, dst, ww = f(ei, 3, w, True, "none", fill=0.5)
    _close(torch.zeros(3, 3, dtype=DT).index_put_((dst, src), ww, accumulate=True), want)


@SET
@given(graphs, st.booleans())
def test_row_column_normalization_sums(g, directed):
    n, e, seed, weighted = g
    ei, w = _random_graph(n, e, seed, weighted)
    base = S.graph_adjacency(ei, n, w, directed=directed, self_loops=False, dtype=DT)
    R = S.graph_adjacency(ei, n, w, directed=directed, normalization="row", dtype=DT)
    C = S.graph_adjacency(ei, n, w, directed=directed, normalization="column", dtype=DT)
    rs, cs = base.sum(1), base.sum(0)
    _close(R.sum(1), (rs > 0).to(DT))
    _close(C.sum(0), (cs > 0).to(DT))
    _close(R, torch.where(rs[:, None] > 0, base / rs[:, None], torch.zeros_like(base)))
    _close(C, torch.where(cs[None, :] > 0, base / cs[None, :], torch.zeros_like(base)))
    assert (R.sum(1) == 0).eq(rs == 0).all()


def test_undirected_symmetrization():
    ei = torch.tensor([[0, 1, 0, 2], [1, 0, 2, 2]])
    A = S.graph_adjacency(ei, 3, directed=False, dtype=DT)
    _close(A, torch.tensor([[0, 1, 1], [1, 0, 0], [1, 0, 1]], dtype=DT))  # 0/1 OR, not 2
    w = torch.tensor([1.0, 3.0, -1.0, 2.0], dtype=DT)
    Aw = S.graph_adjacency(ei, 3, w, directed=False)
    D = _dense(ei, 3, w)
    _close(Aw, torch.maximum(D, D.T))
    _close(S.graph_adjacency(ei, 3, w, directed=False, symmetrize="sum"), D + D.T)


def test_graph_adjacency_sparse_equals_dense():
    ei, w = _random_graph(8, 25, 3, True)
    for norm in ("none", "row", "column", "symmetric"):
        D = S.graph_adjacency(ei, 8, w, normalization=norm, directed=False)
        _close(S.graph_adjacency(ei, 8, w, normalization=norm, directed=False, sparse=True).to_dense(), D)
        _close(S.graph_adjacency(ei, 8, w, normalization=norm, directed=False, sparse="csr").to_dense(), D)


@SET
@given(graphs, st.sampled_from(["none", "row", "column", "symmetric"]), st.booleans())
def test_graph_propagate_equals_dense(g, norm, directed):
    n, e, seed, weighted = g
    ei, w = _random_graph(n, e, seed, weighted)
    src, dst, ww = S.graph_norm_weights(ei, n, w, None, norm, directed, dtype=DT)
    A = S.graph_adjacency(ei, n, w, directed=directed, normalization=norm, dtype=DT)
    x = torch.randn(2, 3, n, 4, dtype=DT)
    _close(S.graph_propagate(x, src, dst, ww, n, dim=2), torch.einsum("ij,abjc->abic", A, x))
    _close(S.graph_propagate(x[0, 0], src, dst, ww, n, dim=0), A @ x[0, 0])


def test_graph_propagate_unweighted_and_compile():
    ei, _ = _random_graph(10, 30, 1)
    x = torch.randn(3, 10, 5, dtype=DT)
    A = _dense(ei, 10)
    _close(S.graph_propagate(x, ei[0], ei[1], None, 10, dim=1), A @ x)
    src, dst, w = S.graph_norm_weights(ei, 10, normalization="symmetric", directed=False, dtype=DT)
    f = torch.compile(S.graph_propagate, fullgraph=True, backend="aot_eager")
    _close(f(x, src, dst, w, 10, 1), S.graph_adjacency(ei, 10, normalization="symmetric", directed=False, dtype=DT) @ x)


@SET
@given(graphs)
def test_graph_propagate_permutation_equivariance(g):
    n, e, seed, weighted = g
    ei, w = _random_graph(n, e, seed, weighted)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    inv = torch.argsort(perm)  # new label of old node j is inv[j]; (Px)[i] = x[perm[i]]
    x = torch.randn(n, 3, dtype=DT)
    src, dst, ww = S.graph_norm_weights(ei, n, w, True, "symmetric", False)
    y = S.graph_propagate(x, src, dst, ww, n, dim=0)
    src2, dst2, ww2 = S.graph_norm_weights(inv[ei], n, w, True, "symmetric", False)
    y2 = S.graph_propagate(x[perm], src2, dst2, ww2, n, dim=0)
    _close(y2, y[perm])


def test_multihop_graph_and_propagate():
    n = 9
    ei, w = _random_graph(n, 25, 7, True)
    src, dst, ww = S.graph_norm_weights(ei, n, w, True, "row", False)
    A = S.graph_adjacency(ei, n, w, directed=False, self_loops=True, normalization="row", dtype=DT)
    x = torch.randn(n, 3, dtype=DT)
    for h in (0, 1, 3):
        _close(S.multihop_graph(A, h), torch.linalg.matrix_power(A, h))
        acc = sum(torch.linalg.matrix_power(A, k) for k in range(h + 1))
        _close(S.multihop_graph(A, h, accumulate=True), acc)
        _close(S.multihop_graph(A, h, True, include_identity=False), acc - torch.eye(n, dtype=DT))
        _close(S.multihop_propagate(x, src, dst, ww, n, h, dim=0), torch.linalg.matrix_power(A, h) @ x)
        _close(S.multihop_propagate(x, src, dst, ww, n, h, True, False, dim=0), (acc - torch.eye(n, dtype=DT)) @ x)


@pytest.mark.parametrize("norm", ["row", "column", "symmetric"])
def test_pagerank(norm):
    n, alpha = 12, 0.15
    ei, w = _random_graph(n, 40, 11, True)
    A = S.graph_adjacency(ei, n, w, directed=False, normalization=norm, dtype=DT)
    P = S.pagerank_matrix(A, alpha)
    ref = alpha * torch.linalg.inv(torch.eye(n, dtype=DT) - (1 - alpha) * A)
    _close(P, ref)
    if norm == "column":
        _close(P.sum(0), torch.ones(n, dtype=DT))  # column-stochastic A keeps mass
    src, dst, ww = S.graph_norm_weights(ei, n, w, None, norm, False)
    x = torch.randn(2, n, 3, dtype=DT)
    ex = torch.einsum("ij,bjc->bic", ref, x)
    _close(S.pagerank_propagate(x, src, dst, ww, n, alpha, dim=1, method="solve"), ex)
    tol = 1e-9
    k = S.pagerank_iterations(alpha, tol)
    assert (1 - alpha) ** (k + 1) <= tol < (1 - alpha) ** k
    approx = S.pagerank_propagate(x, src, dst, ww, n, alpha, tol=tol, dim=1)
    torch.testing.assert_close(approx, ex, rtol=0, atol=10 * tol * x.abs().max().item() * n)
    # fewer iterations is measurably worse: the iteration count matters
    rough = S.pagerank_propagate(x, src, dst, ww, n, alpha, iters=3, dim=1)
    assert (rough - ex).abs().max() > 1e-3


def test_patch_offsets_refuse_a_kernel_box_over_the_limit_before_enumerating():
    """A hostile extent is refused from arithmetic alone (no 10^18-element meshgrid)."""
    with pytest.raises(ValueError, match="larger than the 1,048,576 allowed"):
        S.cylinder_offsets(10**9)
    with pytest.raises(ValueError, match="4,004,001 positions"):  # 2001²
        S.cuboid_offsets((1000, 1000), (1000, 1000))
    assert S.cuboid_offsets((511, 511), (511, 511)).shape == (1023 * 1023, 2)  # the largest box allowed


# ------------------------------------------------------------------------------------------------
# attention masks and bilinear entries
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal, window", [(False, None), (True, None), (False, 1), (True, 2)])
@pytest.mark.parametrize("attn_mode, padding_mode", [("block", "keep"), ("keep", "block"), ("add", "keep")])
def test_additive_mask_dense_literal_and_at_entries(causal, window, attn_mode, padding_mode):
    """Dense mask = −inf at causal / out-of-band / blocked pairs, + additive values; the literal band gives the same
    mask; at ``(rows, cols)`` it is the dense mask's entries (also for broadcast row / column blocks)."""
    nq, nc = 5, 6
    g = torch.Generator().manual_seed(0)
    am = torch.randn(2, nq, nc, generator=g, dtype=DT) if attn_mode == "add" else torch.rand(2, nq, nc, generator=g) < .5
    kp = torch.rand(2, nc, generator=g) < 0.5
    kw = dict(causal=causal, window=window, attn_mask=am, attn_mode=attn_mode, key_padding=kp,
              padding_mode=padding_mode)
    m = S.additive_mask(nq, nc, DT, **kw)
    i, j = torch.arange(nq).unsqueeze(-1), torch.arange(nc)
    blocked = (kp if padding_mode == "block" else ~kp).unsqueeze(-2).expand(2, nq, nc)
    if attn_mode != "add":
        blocked = blocked | (am if attn_mode == "block" else ~am)
    if causal:
        blocked = blocked | (j > i)
    if window is not None:
        blocked = blocked | ((i - j).abs() > window)
    want = torch.zeros(2, nq, nc, dtype=DT).masked_fill(blocked, float("-inf"))
    if attn_mode == "add":
        want = want + am
    assert torch.equal(m, want)
    assert torch.equal(S.additive_mask(nq, nc, DT, literal=True, **kw), want)
    rows, cols = torch.tensor([0, 4, 2, 2]), torch.tensor([5, 0, 2, 3])
    assert torch.equal(S.additive_mask(nq, nc, DT, rows=rows, cols=cols, **kw), want[:, rows, cols])
    block = S.additive_mask(nq, nc, DT, rows=i[1:3], cols=j, **kw)
    assert torch.equal(block, want[:, 1:3])
    assert S.additive_mask(nq, nc, DT) is None


def test_mask_term_modes():
    m = torch.tensor([True, False])
    assert torch.equal(S.mask_term(m, "block", DT), torch.tensor([float("-inf"), 0.0], dtype=DT))
    assert torch.equal(S.mask_term(m, "keep", DT), torch.tensor([0.0, float("-inf")], dtype=DT))
    with pytest.raises(ValueError, match="mask mode"):
        S.mask_term(m, "drop", DT)


@pytest.mark.parametrize("softmax", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_bilinear_entries_equal_the_dense_matrix(monkeypatch, softmax, masked):
    """Entries of scale·q kᵀ + M (blocked -> 0 without softmax, row softmax over all keys with it) at the edges,
    with the row normaliser in blocks of 2 rows: values and gradients equal the dense matrix's."""
    from rpn2c.functional.structure import bilinear

    monkeypatch.setattr(bilinear, "LSE_BLOCK", 2 * 6 * 2)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 5, 3, generator=g, dtype=DT, requires_grad=True)
    k = torch.randn(2, 6, 3, generator=g, dtype=DT, requires_grad=True)
    dst, src = torch.tensor([0, 1, 4, 4, 2]), torch.tensor([0, 3, 5, 1, 2])

    def bias(rows, cols, dtype):
        return S.additive_mask(5, 6, dtype, causal=True, rows=rows, cols=cols) if masked else None

    dense = (q @ k.transpose(-1, -2)) * 0.5
    if masked:
        dense = dense + S.additive_mask(5, 6, DT, causal=True)
    dense = torch.softmax(dense, -1) if softmax else torch.where(torch.isneginf(dense), 0.0, dense)
    want = dense[..., dst, src]
    have = S.bilinear_entries(q, k, dst, src, 0.5, softmax, bias if masked else None)
    _close(have, want)
    r = torch.randn(want.shape, generator=g, dtype=DT)
    _close(torch.autograd.grad((have * r).sum(), (q, k)), torch.autograd.grad((want * r).sum(), (q, k)))
    _close(S.row_logsumexp(q, k, 0.5), torch.logsumexp((q @ k.transpose(-1, -2)) * 0.5, -1))


def test_coalesce_edges_merges_duplicates_at_a_fixed_size():
    """Sorted by (dst, src): each run's first entry carries the sum and the count, the others are zero placeholders."""
    dst, src = torch.tensor([2, 0, 2, 1, 2]), torch.tensor([1, 0, 1, 1, 1])
    w = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.5], dtype=DT)
    d, s, ww, cnt = S.coalesce_edges(dst, src, w, 3)
    assert d.shape == (5,)
    dense = torch.zeros(3, 3, dtype=DT).index_put((dst, src), w, accumulate=True)
    assert torch.equal(torch.zeros(3, 3, dtype=DT).index_put((d, s), ww, accumulate=True), dense)
    assert cnt.tolist() == [1, 1, 3, 0, 0] and (ww[cnt == 0] == 0).all()
