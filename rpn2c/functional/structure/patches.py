"""Grid patches (catalog §3.2-3.4): patch shapes, packing strategies, patch index tables, conv geometry,
and the literal padding / aggregation matrices.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Literal, TYPE_CHECKING

from rpn2c.functional.structure._common import _dtype, _to_sparse, _tuple, IntOrTuple, PaddingMode, SparseFormat
from rpn2c.functional.structure.lattice import Lattice

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    import torch
    from torch import Tensor

MAX_PATCH_BOX = 2**20  # kernel-box positions of one patch (a 1023×1023 window; the paper's largest is 9×9)


# ----------------------------------------------------------------------------------------------------------
# patch shapes (catalog §3.2)
# ----------------------------------------------------------------------------------------------------------


def cuboid_offsets(
    before: IntOrTuple,
    after: IntOrTuple | None = None,
    dilation: IntOrTuple | None = None,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Cuboid patch offsets ``{(∇_1*d_1, …, ∇_k*d_k) : ∇_a ∈ [-before_a, after_a]}`` (eq 63).

    ``before``/``after`` are the paper's ``(p_h, p_w, p_d)`` and ``(p'_h, p'_w, p'_d)``; ``after`` defaults to
    ``before`` (symmetric patch), ``dilation`` to 1. The number of axes is ``len(before)`` (an int means 1-D
    unless ``after`` is a tuple). Returns ``LongTensor[p, ndim]`` in lexicographic order (first axis outermost),
    ``p = Π (before_a + after_a + 1)`` (eq 64).

    For a conv kernel (offsets relative to the window start) call ``cuboid_offsets(0, k - 1, d)``.
    """
    import torch

    b, a, d = _box(before, after, dilation)
    axes = [torch.arange(-b[i], a[i] + 1, device=device) * d[i] for i in range(len(b))]
    grids = torch.meshgrid(*axes, indexing="ij")
    return torch.stack([g.reshape(-1) for g in grids], dim=-1)


def _box(before: IntOrTuple, after: IntOrTuple | None, dilation: IntOrTuple | None):
    """The validated ``(before, after, dilation)`` tuples of a cuboid (see :func:`cuboid_offsets`)."""
    if isinstance(before, int) and after is not None and not isinstance(after, int):
        ndim = len(after)
    elif isinstance(before, int):
        ndim = 1 if dilation is None or isinstance(dilation, int) else len(dilation)
    else:
        ndim = len(before)
    b = _tuple(before, ndim, 0, "before")
    a = _tuple(after, ndim, 0, "after") if after is not None else b
    d = _tuple(dilation, ndim, 1, "dilation")
    if any(x < 0 for x in b + a) or any(x < 1 for x in d):
        raise ValueError("patch extents must be >= 0 and dilations >= 1")
    box = math.prod(b[i] + a[i] + 1 for i in range(ndim))
    if box > MAX_PATCH_BOX:  # checked before anything is enumerated: a hostile radius must not exhaust memory
        raise ValueError(f"a patch whose kernel box has {box:,} positions is larger than the {MAX_PATCH_BOX:,} "
                         "allowed")
    return b, a, d


def _rows(before: tuple[int, ...], after: tuple[int, ...], dilation: IntOrTuple | None, keep) -> list[tuple[int, ...]]:
    """The lexicographic offsets of the box ``[-before, after]`` that ``keep`` accepts (undilated), then dilated."""
    b, a, _ = _box(before, after, None)
    d = _tuple(dilation, len(b), 1, "dilation")
    box = itertools.product(*(range(-lo, hi + 1) for lo, hi in zip(b, a)))
    return [tuple(v * s for v, s in zip(row, d)) for row in box if keep(row)]


def cylinder_offsets(
    radius: int,
    depth_before: int = 0,
    depth_after: int = 0,
    *,
    ndim: int | None = None,
    dilation: IntOrTuple | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Cylinder patch offsets (eq 65): ``∇i² + ∇j² ≤ r²`` on the first two axes, ``∇k ∈ [-depth_before, depth_after]``.

    Both depth bounds are honoured (the toolkit ignores ``depth_before``, catalog §3.2). ``ndim`` is 2 (disc
    only) or 3 (disc x depth range); by default 3 iff a depth bound is non-zero. Offsets are lexicographic and
    scaled by ``dilation`` after the disc test. Sizes for r = 1, 2, 3, 4 (no depth): 5, 13, 29, 49.
    """
    import torch

    return torch.tensor(cylinder_rows(radius, depth_before, depth_after, ndim=ndim, dilation=dilation),
                        dtype=torch.long, device=device)


def cylinder_rows(radius: int, depth_before: int = 0, depth_after: int = 0, *, ndim: int | None = None,
                  dilation: IntOrTuple | None = None) -> list[tuple[int, ...]]:
    """:func:`cylinder_offsets` as a list of rows (no tensor: the components' shape rules read it)."""
    if ndim is None:
        ndim = 3 if (depth_before or depth_after) else 2
    if ndim == 2:
        if depth_before or depth_after:
            raise ValueError("a 2-D cylinder (disc) has no depth range")
        before, after = (radius, radius), (radius, radius)
    elif ndim == 3:
        before, after = (radius, radius, depth_before), (radius, radius, depth_after)
    else:
        raise ValueError(f"cylinder patches are 2-D or 3-D, got ndim={ndim}")
    return _rows(before, after, dilation, lambda row: row[0] ** 2 + row[1] ** 2 <= radius**2)


def sphere_offsets(
    radius: int,
    *,
    dilation: IntOrTuple | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Sphere (ball) patch offsets (eq 65): ``∇i² + ∇j² + ∇k² ≤ r²`` in 3-D, lexicographic, scaled by ``dilation``.

    Sizes for r = 1, 2, 3, 4: 7, 33, 123, 257.
    """
    import torch

    return torch.tensor(sphere_rows(radius, dilation=dilation), dtype=torch.long, device=device)


def sphere_rows(radius: int, *, dilation: IntOrTuple | None = None) -> list[tuple[int, ...]]:
    """:func:`sphere_offsets` as a list of rows (no tensor: the components' shape rules read it)."""
    return _rows((radius,) * 3, (radius,) * 3, dilation, lambda row: sum(v * v for v in row) <= radius**2)


def kernel_mask(
    offsets: Tensor,
    before: IntOrTuple,
    dilation: IntOrTuple | None = None,
    after: IntOrTuple | None = None,
) -> Tensor:
    """Boolean mask of shape ``(before_a + after_a + 1)_a`` with True at ``offsets // dilation + before``.

    Lowers a cylinder / sphere patch to a masked dense conv kernel. ``after`` defaults to the largest
    (undilated) offset per axis (a build-time host read). Because the shape builders list offsets
    lexicographically, ``kernel[kernel_mask(...)] = w`` places the patch weights ``w[p]`` in offset order.
    """
    import torch

    ndim = offsets.shape[-1]
    b = _tuple(before, ndim, 0, "before")
    d = _tuple(dilation, ndim, 1, "dilation")
    dt = torch.tensor(d, device=offsets.device)
    k = torch.div(offsets, dt, rounding_mode="floor") + torch.tensor(b, device=offsets.device)
    if after is None:
        a = tuple(int(v) - bb for v, bb in zip(k.max(0).values.tolist(), b))
    else:
        a = _tuple(after, ndim, 0, "after")
    shape = tuple(bb + aa + 1 for bb, aa in zip(b, a))
    if bool(((k < 0) | (k >= torch.tensor(shape, device=k.device))).any()):
        raise ValueError("offsets fall outside the kernel box")
    strides = torch.tensor([math.prod(shape[i + 1 :]) for i in range(ndim)], device=k.device)
    mask = torch.zeros(math.prod(shape), dtype=torch.bool, device=offsets.device)
    mask[(k * strides).sum(-1)] = True
    return mask.reshape(shape)


# ----------------------------------------------------------------------------------------------------------
# packing strategies (catalog §3.4)
# ----------------------------------------------------------------------------------------------------------

_S2, _S3, _S6 = math.sqrt(2.0), math.sqrt(3.0), math.sqrt(6.0)

#: ``PACKING_TABLE[shape_kind][strategy] = (paper_coeffs, toolkit_coeffs)``; ``None`` = densest (all 1).
#: cuboid: one coefficient, applied to every axis' ``before`` extent (p_h, p_w, p_d).
#: cylinder: ``(c_h, c_w, c_d)``; ``c_h``, ``c_w`` multiply the radius, ``c_d`` the depth ``p_d`` (before).
#: sphere: ``(c_h, c_w, c_d)`` multiplying the radius. The toolkit spells 2/3 and 4/3 as 0.6667 and 1.3333.
PACKING_TABLE: dict[str, dict[str, tuple[tuple[float, ...] | None, tuple[float, ...] | None]]] = {
    "cuboid": {
        "sparse_square": ((3.0,), (3.0,)),
        "complete_square": ((2.0,), (2.0,)),
        "dense_square": ((1.0,), (1.0,)),
        "densest_packing": (None, None),
    },
    "cylinder": {
        "sparse_square": ((2.0, 2.0, 2.0), (2.0, 2.0, 2.0)),
        "complete_square": ((_S2, _S2, 2.0), (_S2, _S2, 2.0)),
        "sparse_hexagonal": ((_S3, 2.0, 2.0), (_S3, 2.0, 2.0)),
        "complete_hexagonal": ((1.5, _S3, 2.0), (1.5, _S3, 2.0)),
        "dense_hexagonal": ((_S6 / 2, _S2, 1.0), (0.5 * _S6, _S2, 1.0)),
        "denser_hexagonal": ((_S2 / 2, 1.0, 1.0), (0.5 * _S3, 1.0, 1.0)),  # paper vs toolkit (erratum 7)
        "densest_packing": (None, None),
    },
    "sphere": {
        "sparse_simple_cubic": ((2.0, 2.0, 2.0), (2.0, 2.0, 2.0)),
        "complete_simple_cubic": ((2 * _S3 / 3,) * 3, (0.6667 * _S3,) * 3),
        "dense_simple_cubic": ((1.0, 1.0, 1.0), (1.0, 1.0, 1.0)),
        # erratum 7: the toolkit swaps h/w of sparse FCC and uses sqrt(6) (not sqrt(3)) for sparse hexagonal depth
        "sparse_face_centered_cubic": ((_S3, 2.0, 2 * _S6 / 3), (2.0, _S3, 0.6667 * _S6)),
        "complete_face_centered_cubic": ((_S2, 2 * _S6 / 3, 4.0 / 3), (_S2, 0.6667 * _S6, 1.3333)),
        "dense_face_centered_cubic": ((1.0, 1.0, 1.0), (1.0, 1.0, 1.0)),
        "sparse_hexagonal": ((2.0, 2.0, _S3), (2.0, 2.0, _S6)),
        "complete_hexagonal": ((2 * _S3 / 3, 2 * _S3 / 3, 1.0), (0.6667 * _S3, 0.6667 * _S3, 1.0)),
        "dense_hexagonal": ((1.0, 1.0, 1.0), (1.0, 1.0, 1.0)),
        "densest_packing": (None, None),
    },
}


def packing_row_shift(strategy: str | None, stride: Sequence[int]) -> int:
    """The hexagonal offset of a packing (Figs 15–16): every other row of centres (odd index along the first axis)
    is shifted by half the centre distance along the second axis, ``floor(d_w / 2)`` cells; 0 for square and
    cubic packings (and for a strategy-free stride)."""
    if strategy is None or not ("hexagonal" in strategy or "face_centered" in strategy) or len(stride) < 2:
        return 0
    return int(stride[1]) // 2


def packing_layer_shift(shape_kind: str, strategy: str | None, stride: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """The offset of successive depth layers of a sphere packing (§5.2.6, Fig 16): ``((Δh, Δw), …)`` per layer
    class, layer ``k`` (index along the third axis) taking class ``k mod period``; ``()`` when no layer moves.

    A layer's centres are the zig-zag rows of :func:`packing_row_shift` (distances ``d_h``, ``d_w``, odd rows
    shifted by ``s = floor(d_w / 2)``). The paper puts each next layer "in the interstices" of the one below: over
    the centroid of the triangle of neighbouring centres ``(0, 0), (0, d_w), (d_h, s)``, i.e. shifted by
    ``(d_h / 3, (d_w + s) / 3)``. Face-centred cubic has "every third layer directly overlying its counterpart"
    (ABC, period 3: class k shifted k times), hexagonal has "alternate layers directly overlie each other" (AB,
    period 2). Shifts are floored to whole cells, the w part taken modulo ``d_w``. Square and cubic packings stack
    layers directly (simple cubic: "stacked directly atop"); cylinder packings too — the paper packs their depth
    as the cuboid's ("adhering to the principles established for cuboid patches", §5.2.5)."""
    if shape_kind != "sphere" or len(stride) < 3 or strategy is None:
        return ()
    period = 3 if "face_centered" in strategy else 2 if "hexagonal" in strategy else 0
    d_h, d_w = int(stride[0]), int(stride[1])
    s = packing_row_shift(strategy, stride)
    shifts = tuple((k * d_h // 3, (k * (d_w + s) // 3) % d_w) for k in range(period))
    return shifts if any(any(v) for v in shifts) else ()


def packing_strategies(shape_kind: str) -> tuple[str, ...]:
    """Strategy names accepted by :func:`packing_stride` for ``shape_kind`` in {cuboid, cylinder, sphere}."""
    try:
        return tuple(PACKING_TABLE[shape_kind])
    except KeyError:
        raise ValueError(f"unknown patch shape {shape_kind!r}; expected one of {tuple(PACKING_TABLE)}") from None


def packing_stride(
    shape_kind: Literal["cuboid", "cylinder", "sphere"],
    strategy: str,
    size_params: IntOrTuple,
    convention: Literal["paper", "toolkit"] = "paper",
) -> tuple[int, ...]:
    """Patch-centre distances (= strides) of a packing strategy, catalog §3.4 (Figs 14–16).

    ``size_params``: cuboid ``(p_h[, p_w[, p_d]])`` (the *before* extents, as the toolkit) -> one stride per
    axis; cylinder ``r`` or ``(r,)`` -> ``(d_h, d_w)``, ``(r, p_d[, p'_d])`` -> ``(d_h, d_w, d_d)`` with ``d_d``
    from ``p_d``; sphere ``r`` -> ``(d_h, d_w, d_d)``. Distances are **floored to integers, minimum 1**
    (the toolkit's ``max(int(cd), 1)``; e.g. ``p_d = 0`` gives ``d_d = 1``). ``convention="paper"`` (default)
    uses the paper's values where paper and toolkit disagree (cylinder denser_hexagonal, sphere sparse FCC and
    sparse hexagonal), ``"toolkit"`` the tinyBIG values incl. its 0.6667 / 1.3333 constants. The ``dense_*``
    sphere strategies exist only in the toolkit and are the same in both conventions.
    """
    table = PACKING_TABLE.get(shape_kind)
    if table is None:
        raise ValueError(f"unknown patch shape {shape_kind!r}; expected one of {tuple(PACKING_TABLE)}")
    if strategy not in table:
        raise ValueError(f"unknown {shape_kind} packing strategy {strategy!r}; expected one of {tuple(table)}")
    if convention not in ("paper", "toolkit"):
        raise ValueError(f"convention must be 'paper' or 'toolkit', got {convention!r}")
    params = (size_params,) if isinstance(size_params, int) else tuple(size_params)
    coeffs = table[strategy][0 if convention == "paper" else 1]

    if shape_kind == "cuboid":
        lengths = params
        ndim = len(params)
        raw = [1.0] * ndim if coeffs is None else [coeffs[0] * p for p in params]
    elif shape_kind == "cylinder":
        r = params[0]
        ndim = 2 if len(params) == 1 else 3
        lengths = (r, r, params[1]) if ndim == 3 else (r, r)
        raw = [1.0] * ndim if coeffs is None else [c * p for c, p in zip(coeffs, lengths)]
    else:
        if len(params) != 1:
            raise ValueError("sphere size_params is the radius")
        r = params[0]
        ndim = 3
        raw = [1.0] * 3 if coeffs is None else [c * r for c in coeffs]
    if any(p < 0 for p in params):
        raise ValueError("size parameters must be >= 0")
    if convention == "toolkit":
        return tuple(max(int(v), 1) for v in raw)
    # the paper's exact values; a tiny epsilon guards integer products against float round-off
    return tuple(max(int(math.floor(v + 1e-9)), 1) for v in raw)


# ----------------------------------------------------------------------------------------------------------
# patch geometry in conv terms
# ----------------------------------------------------------------------------------------------------------


def out_extent(L: int, k: int, s: int = 1, d: int = 1, pb: int = 0, pa: int = 0) -> int:
    """Number of windows along one axis: ``floor((L + pb + pa - d*(k-1) - 1) / s) + 1`` (conv's output size).

    Window ``i`` starts at ``i*s - pb``. The paper's centred patch ``(p, p')`` with stride ``s`` is
    ``k = p + p' + 1``, ``pb = p*d``, ``pa = p'*d``, which gives ``ceil(L / s)``. Returns 0 if no window fits.
    """
    if k < 1 or s < 1 or d < 1 or L < 0:
        raise ValueError("need k >= 1, s >= 1, d >= 1, L >= 0")
    span = L + pb + pa - d * (k - 1) - 1
    return span // s + 1 if span >= 0 else 0


def centre_counts(extent: Sequence[int], stride: IntOrTuple = 1) -> tuple[int, ...]:
    """Patch centres per axis under packing: ``ceil(L_a / s_a)`` (centres ``0, s, 2s, … < L``; catalog §3.4)."""
    s = _tuple(stride, len(extent), 1, "stride")
    return tuple(-(-int(L) // ss) for L, ss in zip(extent, s))


def _map_axis(u: Tensor, L: int, mode: str) -> tuple[Tensor, Tensor | None]:
    """Map coordinates along an axis of length L to in-grid ones; returns (coord, valid or None)."""
    import torch

    if mode == "zeros":
        return u, (u >= 0) & (u < L)
    if mode == "circular":
        return torch.remainder(u, L), None
    if mode == "replicate":
        return u.clamp(0, L - 1), None
    if mode == "reflect":
        if L == 1:
            return torch.zeros_like(u), None
        period = 2 * (L - 1)
        r = torch.remainder(u, period)
        return torch.where(r >= L, period - r, r), None
    raise ValueError(f"unknown padding mode {mode!r}; expected zeros, circular, reflect or replicate")


def patch_index(
    extent: Sequence[int],
    offsets: Tensor,
    stride: IntOrTuple = 1,
    pad_before: IntOrTuple = 0,
    out_counts: Sequence[int] | None = None,
    mode: PaddingMode = "zeros",
    row_shift: int = 0,
    layer_shift: Sequence[tuple[int, int]] = (),
    lattice: Lattice | None = None,
) -> Tensor:
    """Flattened source position of every (patch, tap): ``LongTensor[P, p]``.

    Patch ``q = (q_1, …, q_k)`` (row-major over ``out_counts``) tap ``j`` reads grid coordinate
    ``q*stride - pad_before + offsets[j]`` (per axis), flattened row-major over ``extent``. ``out_counts``
    defaults to :func:`centre_counts` (``ceil(L/s)``); for a conv window use :func:`out_extent`.
    ``row_shift`` (hexagonal packing, :func:`packing_row_shift`) adds that many cells along the second axis to the
    patches of odd index along the first: every row keeps the same count, so an odd row's last centre may lie up
    to ``row_shift`` cells past the grid, its outside taps handled as any others (zeros: read 0).
    ``layer_shift`` (sphere packings, :func:`packing_layer_shift`) moves the patches of index k along the third
    axis by ``layer_shift[k mod len]`` cells along the first two axes, on top of the row shift; the same counts
    per layer, so shifted centres may lie past the grid as the rows' do.
    ``lattice`` (:class:`~rpn2c.functional.structure.lattice.Lattice`) replaces ``stride`` and both shifts: the
    centres are the packing's real-valued lattice points rounded to cells (counts default to ``lattice.counts``).

    Out-of-grid coordinates: ``"zeros"`` -> ``-1``; ``"circular"`` wraps (mod L); ``"reflect"`` mirrors without
    repeating the edge and ``"replicate"`` clamps, exactly as ``torch.nn.functional.pad`` wherever that is
    defined (reflect is extended periodically, period ``2(L-1)``, beyond ``F.pad``'s ``pad < L`` limit).
    """
    import torch

    ndim = len(extent)
    if offsets.dim() != 2 or offsets.shape[1] != ndim:
        raise ValueError(f"offsets must be [p, {ndim}], got {tuple(offsets.shape)}")
    s = _tuple(stride, ndim, 1, "stride")
    pb = _tuple(pad_before, ndim, 0, "pad_before")
    if lattice is not None:
        counts = lattice.counts(extent) if out_counts is None else _tuple(out_counts, ndim, 1, "out_counts")
        origin = lattice.centres(counts, offsets.device) - torch.tensor(pb, device=offsets.device)
        return _flat_taps(origin, offsets, extent, mode)
    counts = centre_counts(extent, s) if out_counts is None else _tuple(out_counts, ndim, 1, "out_counts")
    dev = offsets.device
    axes = [torch.arange(counts[a], device=dev) * s[a] - pb[a] for a in range(ndim)]
    grids = torch.meshgrid(*axes, indexing="ij")
    if row_shift and ndim >= 2:  # odd rows of centres offset by half a stride (hexagonal packing)
        odd = (torch.arange(counts[0], device=dev) % 2).reshape(-1, *([1] * (ndim - 1)))
        grids = (grids[0], grids[1] + odd * int(row_shift), *grids[2:])
    if layer_shift and ndim >= 3:  # depth layers in the interstices of the layer below (sphere packings)
        table = torch.tensor(layer_shift, dtype=torch.long, device=dev).reshape(-1, 2)
        by_layer = table[torch.arange(counts[2], device=dev) % len(table)]  # [counts_d, 2]
        view = (1, 1, -1) + (1,) * (ndim - 3)
        grids = (grids[0] + by_layer[:, 0].reshape(view), grids[1] + by_layer[:, 1].reshape(view), *grids[2:])
    origin = torch.stack([g.reshape(-1) for g in grids], dim=-1)  # [P, ndim]
    return _flat_taps(origin, offsets, extent, mode)


def origin_span(
    extent: Sequence[int],
    stride: IntOrTuple = 1,
    pad_before: IntOrTuple = 0,
    out_counts: Sequence[int] | None = None,
    row_shift: int = 0,
    layer_shift: Sequence[tuple[int, int]] = (),
    lattice: Lattice | None = None,
) -> tuple[tuple[int, int], ...]:
    """Per axis ``(u_min, u_max)``, the least and greatest coordinate ``q·stride − pad_before (+ shifts)`` that a
    patch of :func:`patch_index` (same arguments) reads its offsets from; no tensor (the check reads it).

    Along axis ``a`` the shifts and the patch indices vary independently, so the extremes are ``q_a = 0`` and
    ``q_a = count_a − 1`` with the least / greatest shift; a lattice's rounding ``⌊v + ½⌋`` is monotone."""
    ndim = len(extent)
    pb = _tuple(pad_before, ndim, 0, "pad_before")
    if lattice is not None:
        counts = lattice.counts(extent) if out_counts is None else _tuple(out_counts, ndim, 1, "out_counts")
        dist, rows, layers = lattice.distances, lattice.row_shift, lattice.layers
    else:
        s = _tuple(stride, ndim, 1, "stride")
        counts = centre_counts(extent, s) if out_counts is None else _tuple(out_counts, ndim, 1, "out_counts")
        dist, rows, layers = s, row_shift, tuple(layer_shift)
    extra: list[list[float]] = [[0.0] for _ in range(ndim)]
    if rows and ndim >= 2 and counts[0] > 1:
        extra[1] = [0.0, float(rows)]
    if layers and ndim >= 3:
        used = layers[: min(int(counts[2]), len(layers))]
        extra[0] = [float(v[0]) for v in used]
        extra[1] = [r + float(v[1]) for r in extra[1] for v in used]
    span = []
    for a in range(ndim):
        lo, hi = min(extra[a]), (int(counts[a]) - 1) * dist[a] + max(extra[a])
        if lattice is not None:  # the centres are rounded half up (Lattice.centres)
            lo, hi = math.floor(lo + 0.5 + 1e-9), math.floor(hi + 0.5 + 1e-9)
        span.append((int(lo) - pb[a], int(hi) - pb[a]))
    return tuple(span)


def reachable_offsets(extent: Sequence[int], span: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Per axis the offsets ``o`` with ``0 <= u + o < L`` for some origin ``u`` in ``span`` (:func:`origin_span`):
    ``[−u_max, L − 1 − u_min]``. A tap whose offset is outside this range on some axis lands outside the grid for
    every patch: under zero padding it reads the fill value in every patch and may be left out wherever that value
    is the reduction's neutral element (an ignored tap, a 0 in a sum or a norm)."""
    return tuple((-hi, int(L) - 1 - lo) for L, (lo, hi) in zip(extent, span))


def _flat_taps(origin: Tensor, offsets: Tensor, extent: Sequence[int], mode: str) -> Tensor:
    """Flat source position of every tap ``origin[P] + offsets[p]`` (``-1`` outside the grid under zeros)."""
    import torch

    dev = origin.device
    pos = origin[:, None, :] + offsets.to(origin.dtype)[None, :, :]  # [P, p, ndim]
    flat = torch.zeros(pos.shape[:2], dtype=torch.long, device=dev)
    valid = torch.ones(pos.shape[:2], dtype=torch.bool, device=dev)
    for a in range(len(extent)):
        u, ok = _map_axis(pos[..., a], int(extent[a]), mode)
        if ok is not None:
            valid &= ok
        flat = flat * int(extent[a]) + u
    return torch.where(valid, flat, torch.full_like(flat, -1))


def gather_patches(x: Tensor, index: Tensor, dim: int = -1, fill: float = 0.0) -> Tensor:
    """Gather patches along the flattened grid axis ``dim``: ``out[..., q, j, ...] = x[..., index[q, j], ...]``.

    ``index`` is a :func:`patch_index` table; entries ``-1`` read ``fill``. Axis ``dim`` of ``x`` (size N) is
    replaced by two axes ``(P, p)``.
    """
    import torch

    d = dim % x.dim()
    n = x.shape[d]
    pad_shape = list(x.shape)
    pad_shape[d] = 1
    xp = torch.cat([x, x.new_full(pad_shape, fill)], dim=d)
    idx = torch.where(index < 0, torch.full_like(index, n), index)
    out = xp.index_select(d, idx.reshape(-1))
    return out.reshape(*x.shape[:d], *index.shape, *x.shape[d + 1 :])


def im2col(x: Tensor, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int],
           padding: Sequence[int]) -> Tensor:
    """The patches of a 1-D or 2-D grid ``x`` ``[B, C, *S]`` as columns ``[B, C·box, P]`` (``F.unfold``: channel-major,
    box positions row-major; zero ``padding`` per axis; a 1-D grid is unfolded as a 1 × L image)."""
    import torch.nn.functional as F

    if len(kernel) == 1:
        x, kernel, stride, dilation, padding = (x.unsqueeze(2), (1, *kernel), (1, *stride), (1, *dilation),
                                                (0, *padding))
    return F.unfold(x, tuple(kernel), dilation=tuple(dilation), padding=tuple(padding), stride=tuple(stride))


def box_sum(x: Tensor, mask: Tensor, stride: Sequence[int], dilation: Sequence[int]) -> Tensor:
    """Each patch's sum over the taps of ``mask`` (the kernel box's 0/1 pattern), per channel: a depthwise
    convolution of the padded grid ``x`` ``[B, C, *S]`` -> ``[B, C, *S']``."""
    import torch.nn.functional as F

    c = x.shape[1]
    conv = (F.conv1d, F.conv2d, F.conv3d)[mask.dim() - 1]
    return conv(x, mask.to(x.dtype).expand(c, 1, *mask.shape), stride=stride, dilation=dilation, groups=c)


def padding_matrix(
    extent: Sequence[int],
    offsets: Tensor,
    stride: IntOrTuple = 1,
    pad_before: IntOrTuple = 0,
    out_counts: Sequence[int] | None = None,
    mode: PaddingMode = "zeros",
    row_shift: int = 0,
    layer_shift: Sequence[tuple[int, int]] = (),
    lattice: Lattice | None = None,
    *,
    sparse: SparseFormat = False,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """The paper's padding-mode matrix (eq 67), ``[N, P*p]`` with ``N = Π extent``.

    Column ``q*p + j`` is one-hot at the source of tap ``j`` of patch ``q`` (all zero when out of grid in
    ``"zeros"`` mode), so ``x_row @ M`` is im2col (patch-major, then tap). Arguments as :func:`patch_index`.
    ``sparse=True``/``"coo"`` returns a coalesced COO tensor, ``"csr"`` a CSR tensor.
    """
    import torch

    dev = offsets.device if device is None else torch.device(device)
    idx = patch_index(extent, offsets.to(dev), stride, pad_before, out_counts, mode, row_shift,
                      layer_shift, lattice).reshape(-1)
    n, cols = math.prod([int(L) for L in extent]), idx.numel()
    dt = _dtype(dtype)
    col = torch.arange(cols, device=dev)
    if sparse:
        keep = idx >= 0
        rows, cc = idx[keep], col[keep]
        return _to_sparse(torch.stack([rows, cc]), torch.ones(rows.numel(), dtype=dt, device=dev), (n, cols), sparse)
    m = torch.zeros(n + 1, cols, dtype=dt, device=dev)
    m[torch.where(idx < 0, torch.full_like(idx, n), idx), col] = 1
    return m[:n]


def aggregation_matrix(
    extent: Sequence[int],
    offsets: Tensor,
    stride: IntOrTuple = 1,
    pad_before: IntOrTuple = 0,
    out_counts: Sequence[int] | None = None,
    mode: PaddingMode = "zeros",
    row_shift: int = 0,
    layer_shift: Sequence[tuple[int, int]] = (),
    lattice: Lattice | None = None,
    *,
    sparse: SparseFormat = False,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """The paper's aggregation-mode matrix (eq 69), ``[N, P]``: column ``q`` counts its patch's sources.

    ``(x_row @ M)[q] = Σ_j x[src(q, j)]``, a box-sum filter with the patch as kernel (out-of-grid taps dropped in
    ``"zeros"`` mode; in the other modes a source hit by several taps counts several times). With packing this
    keeps only the ``P = p_count`` centre columns (catalog §3.3, the paper's eq 73, not the toolkit's ``m``).
    """
    import torch

    dev = offsets.device if device is None else torch.device(device)
    idx = patch_index(extent, offsets.to(dev), stride, pad_before, out_counts, mode, row_shift, layer_shift,
                      lattice)
    n, (P, p) = math.prod([int(L) for L in extent]), idx.shape
    dt = _dtype(dtype)
    col = torch.arange(P, device=dev)[:, None].expand(P, p).reshape(-1)
    idx = idx.reshape(-1)
    if sparse:
        keep = idx >= 0
        rows, cc = idx[keep], col[keep]
        return _to_sparse(torch.stack([rows, cc]), torch.ones(rows.numel(), dtype=dt, device=dev), (n, P), sparse)
    m = torch.zeros(n + 1, P, dtype=dt, device=dev)
    rows = torch.where(idx < 0, torch.full_like(idx, n), idx)
    m.index_put_((rows, col), torch.ones(idx.numel(), dtype=dt, device=dev), accumulate=True)
    return m[:n]

def packing_lattice(shape_kind: str, strategy: str, size_params, convention: str = "paper") -> Lattice:
    """The real-valued lattice of a packing strategy (the coefficients of ``PACKING_TABLE``, not floored; the
    densest packing is distance 1)."""
    packing_stride(shape_kind, strategy, size_params, convention)  # validates the names and sizes
    params = (size_params,) if isinstance(size_params, int) else tuple(size_params)
    coeffs = PACKING_TABLE[shape_kind][strategy][0 if convention == "paper" else 1]
    if shape_kind == "cuboid":
        lengths = params
    elif shape_kind == "cylinder":
        lengths = (params[0], params[0]) + ((params[1],) if len(params) > 1 else ())
    else:
        lengths = (params[0],) * 3
    if coeffs is None:
        dist = (1.0,) * len(lengths)
    else:
        cs = coeffs * len(lengths) if len(coeffs) == 1 else coeffs
        dist = tuple(max(c * p, 1.0) for c, p in zip(cs, lengths))
    zigzag = "hexagonal" in strategy or "face_centered" in strategy
    shift = dist[1] / 2 if zigzag and len(dist) >= 2 else 0.0
    period = 3 if "face_centered" in strategy else 2 if "hexagonal" in strategy else 0
    layers = ()
    if shape_kind == "sphere" and period:
        layers = tuple((k * dist[0] / 3, (k * dist[1] / 2) % dist[1]) for k in range(period))
    return Lattice(dist, shift, layers)
