"""Graphs (catalog §4.3-4.5; GCN per other_seeds §5(b)): normalised edge lists, literal adjacency, the
dense-or-CSR choice of the cached operator (``graph_cache``), gather/scatter propagation, multi-hop and PageRank.
"""

from __future__ import annotations

import functools
from typing import Callable, Literal

import torch
from torch import Tensor

from rpn2c.errors import InputError
from rpn2c.functional.checked import Checked
from rpn2c.functional.structure._common import _to_sparse, SparseFormat
from rpn2c.functional.structure.chain import _multihop
from rpn2c.functional.structure.counts import pagerank_iterations  # noqa: F401  (also read by shape rules)
from rpn2c.functional.scan import exporting


# ----------------------------------------------------------------------------------------------------------
# graph (catalog §4.3–4.5; GCN per other_seeds §5(b))
# ----------------------------------------------------------------------------------------------------------


def coalesce_edges(
    dst: Tensor, src: Tensor, w: Tensor, n: int, reduce: str = "sum", valid: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Merge duplicate (dst, src) entries at a fixed size: ``(dst, src, w, count)`` sorted by ``key = dst·n + src``.

    The first entry of each run of equal keys carries ``reduce`` (sum | amax) over the run's ``valid`` entries and
    ``count`` = their number; every other entry is a placeholder with ``w = 0``, ``count = 0``. No data-dependent
    shapes (sort + cumsum + scatter), so it traces under ``torch.compile``.
    """
    m = dst.numel()
    key, perm = torch.sort(dst * n + src, stable=True)
    ok = torch.ones(m, dtype=torch.bool, device=w.device) if valid is None else valid[perm]
    ws = w[perm]
    first = torch.diff(key, prepend=key.new_full((1,), -1)) != 0
    run = torch.cumsum(first.long(), 0) - 1
    if reduce == "sum":
        out = w.new_zeros(m).index_add_(0, run, torch.where(ok, ws, 0.0))
    else:
        out = w.new_zeros(m).scatter_reduce_(0, run, torch.where(ok, ws, float("-inf")), reduce, include_self=False)
    cnt = torch.zeros(m, dtype=torch.long, device=w.device).index_add_(0, run, ok.long())[run]
    cnt = torch.where(first, cnt, 0)
    return key // n, key % n, torch.where(cnt > 0, out[run], 0.0), cnt


def graph_norm_weights(
    edge_index: Tensor,
    n: int,
    edge_weight: Tensor | None = None,
    self_loops: bool | None = None,
    normalization: Literal["none", "row", "column", "symmetric"] = "none",
    directed: bool = True,
    *,
    fill: float = 1.0,
    symmetrize: Literal["max", "sum"] = "max",
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Edge lists ``(src, dst, w)`` of the (normalised) adjacency ``A[dst, src] = w`` (PyG: messages src -> target).

    Steps, in order:

    1. ``directed=False``: symmetrise. ``symmetrize="max"`` gives ``max(A, Aᵀ)`` entrywise (absent entries are
       0): the 0/1 OR for unweighted graphs, and the toolkit's rule for weighted ones; ``"sum"`` gives
       ``A + Aᵀ`` (PyG ``to_undirected(reduce="add")``). Duplicate edges are summed first.
    2. Self-loops (``self_loops=None`` means: on for ``symmetric``, off otherwise), with PyG
       ``add_remaining_self_loops`` semantics: every listed self-loop is replaced by one loop per node, whose
       weight is that of the node's last listed self-loop (PyG's index assignment; unweighted: 1), or ``fill``
       where the node has none. Added before normalisation, as the toolkit does.
    3. Normalisation: ``"none"``; ``"row"`` ``D⁻¹A`` with ``D`` the row sums (weighted in-degree at the target),
       every output row with non-zero sum sums to 1; ``"column"`` ``A D⁻¹`` with column sums (weighted
       out-degree at the source); ``"symmetric"`` ``w_e / sqrt(deg[dst] deg[src])`` with ``deg`` the row sums,
       exactly PyG ``gcn_norm`` (= ``D^-1/2 (A+I) D^-1/2`` for a symmetric A). Zero degree -> weight 0.

    Duplicate directed edges are kept as separate entries (they add up in :func:`graph_propagate` and
    :func:`graph_adjacency`). Under ``torch.compile`` the list has a fixed length with no data-dependent shapes:
    merged duplicates and replaced self-loops stay as ``w = 0`` placeholders (``A`` is unchanged); eagerly they
    are dropped.
    """
    dev = edge_index.device if device is None else torch.device(device)
    dt = (edge_weight.dtype if edge_weight is not None else torch.get_default_dtype()) if dtype is None else dtype
    ei = edge_index.to(dev).long()
    src, dst = ei[0], ei[1]
    w = torch.ones(src.numel(), dtype=dt, device=dev) if edge_weight is None else edge_weight.to(device=dev, dtype=dt)
    if normalization not in ("none", "row", "column", "symmetric"):
        raise ValueError(f"unknown normalization {normalization!r}")
    valid = None  # entries that are edges, not merged-away placeholders (None: all)
    if not directed:
        if symmetrize not in ("max", "sum"):
            raise ValueError(f"symmetrize must be 'max' or 'sum', got {symmetrize!r}")
        dst, src, w, cnt = coalesce_edges(dst, src, w, n, "sum")
        v2 = torch.cat([cnt > 0, cnt > 0])
        d2, s2, w2 = torch.cat([dst, src]), torch.cat([src, dst]), torch.cat([w, w])
        if symmetrize == "sum":
            dst, src, w, cnt = coalesce_edges(d2, s2, w2, n, "sum", v2)
        else:
            dst, src, w, cnt = coalesce_edges(d2, s2, w2, n, "amax", v2)
            # an entry seen once is max(w, 0) (its transpose is an absent zero); diagonal entries are seen twice
            w = torch.where(cnt == 1, w.clamp_min(0), w)
        valid = cnt > 0
    if self_loops is None:
        self_loops = normalization == "symmetric"
    if self_loops:
        # add_remaining_self_loops: loop weight = the weight of the node's last listed self-loop, ``fill`` if none
        on_diag = src == dst
        is_loop = on_diag if valid is None else on_diag & valid
        m = src.numel()
        pos = torch.where(is_loop, torch.arange(m, device=dev), -1)
        last = torch.full((n,), -1, dtype=torch.long, device=dev).scatter_reduce_(0, src, pos, "amax")
        loop_w = torch.cat([w, w.new_full((1,), fill)])[torch.where(last >= 0, last, m)]  # index m: ``fill``
        nodes = torch.arange(n, device=dev)
        keep = ~on_diag if valid is None else valid & ~on_diag
        valid = torch.cat([keep, torch.ones(n, dtype=torch.bool, device=dev)])
        src, dst = torch.cat([src, nodes]), torch.cat([dst, nodes])
        w = torch.cat([torch.where(on_diag, 0.0, w), loop_w])
    if valid is not None and not torch.compiler.is_compiling():
        src, dst, w = src[valid], dst[valid], w[valid]  # eager: drop the placeholders (a shorter list)
    if normalization == "row":
        deg = torch.zeros(n, dtype=dt, device=dev).index_add_(0, dst, w)
        inv = deg.pow(-1.0)
        w = w * inv.masked_fill(torch.isinf(inv), 0.0)[dst]
    elif normalization == "column":
        deg = torch.zeros(n, dtype=dt, device=dev).index_add_(0, src, w)
        inv = deg.pow(-1.0)
        w = w * inv.masked_fill(torch.isinf(inv), 0.0)[src]
    elif normalization == "symmetric":
        deg = torch.zeros(n, dtype=dt, device=dev).index_add_(0, dst, w)
        inv = deg.pow(-0.5)
        inv = inv.masked_fill(inv == float("inf"), 0.0)
        w = inv[src] * w * inv[dst]
    return src, dst, w


def graph_adjacency(
    edge_index: Tensor,
    n: int,
    edge_weight: Tensor | None = None,
    directed: bool = True,
    self_loops: bool | None = None,
    fill: float = 1.0,
    normalization: Literal["none", "row", "column", "symmetric"] = "none",
    sparse: SparseFormat = False,
    *,
    symmetrize: Literal["max", "sum"] = "max",
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Literal (normalised) adjacency ``[n, n]``, row = output (target) node: ``A[dst, src] = Σ w`` (eq 81).

    Same semantics as :func:`graph_norm_weights` (``self_loops=None``: on for ``symmetric`` only); ``sparse``
    ``True``/``"coo"``/``"csr"`` returns a sparse tensor.
    """
    src, dst, w = graph_norm_weights(
        edge_index, n, edge_weight, self_loops, normalization, directed,
        fill=fill, symmetrize=symmetrize, device=device, dtype=dtype,
    )
    if sparse:
        return _to_sparse(torch.stack([dst, src]), w, (n, n), sparse)
    return dense_from_edges(src, dst, w, n)


_CHECKED = Checked()  # the edge lists checked, by the node count they were checked against


def check_edge_ids(edges: Tensor, n: int, name: str = "edges", axis: str = "instance") -> None:
    """Raise an :class:`InputError` naming the input, its largest id and the axis size unless every id of the edge
    list lies in ``[0, n)`` (eager calls; a compiled graph skips the check, as an embedding's does). An edge list
    already checked against ``n`` and unchanged since (same storage and version counter) is not read again: on a
    GPU each check copies its extremes to the host, a synchronisation per layer and step."""
    if torch.compiler.is_compiling() or edges.numel() == 0 or edges.device.type == "meta":
        return
    if edges.is_floating_point() or edges.is_complex() or edges.dtype == torch.bool:
        raise InputError(f"edge list '{name}' must hold integer node ids, got a {edges.dtype} tensor")
    if _CHECKED.passed(edges, n):
        return
    lo, hi = (int(v) for v in torch.aminmax(edges))
    if lo < 0 or hi >= n:
        what = ("node" if axis == "instance" else "feature") + ("" if n == 1 else "s")
        bad = lo if lo < 0 else hi
        raise InputError(f"edge list '{name}' holds id {bad}, but the graph it indexes has {n} {what} (the "
                         f"{axis} axis this graph ξ runs over): ids must lie in [0, {n})")
    _CHECKED.add(edges, n)


def forget_checked_edges() -> None:
    """Forget which edge lists were checked (and release them)."""
    _CHECKED.clear()


def dense_from_edges(src: Tensor, dst: Tensor, w: Tensor, n: int) -> Tensor:
    """``A[dst, src] = Σ w`` as a dense ``[n, n]`` matrix (duplicate edges add up)."""
    return torch.zeros(n, n, dtype=w.dtype, device=w.device).index_put_((dst, src), w, accumulate=True)


DENSE_RATIO = 16  # a dense n x n operator when n² ≤ DENSE_RATIO · nnz: GEMM does ~16x the useful work per second
DENSE_MAX = 1 << 22  # ... and at most this many entries (32 MiB in float64)


def dense_pays(n: int, nnz: int) -> bool:
    """Whether ``A`` multiplies faster dense than as CSR: ``n² ≤ DENSE_RATIO · nnz`` and ``n² ≤ DENSE_MAX``."""
    return n * n <= min(DENSE_RATIO * max(nnz, 1), DENSE_MAX)


def squaring_pays(n: int, nnz: int, hops: int, columns: int) -> bool:
    """Whether ``h`` hops on an ``n``-node graph of ``nnz`` edges, on ``columns`` features, cost less as the dense power
    by repeated squaring (about ``2 n³ log₂ h + n² · columns`` multiply-adds, ``n² ≤ DENSE_MAX`` entries) than as
    ``h`` propagations (``h (nnz + n) · columns``)."""
    if hops < 2 or n * n > DENSE_MAX:
        return False
    return 2 * n**3 * hops.bit_length() + n * n * columns < hops * (nnz + n) * columns


def graph_propagate(x: Tensor, src: Tensor, dst: Tensor, w: Tensor | None, n: int, dim: int = -2,
                    operator: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """``A @ x`` along the item axis ``dim`` by gather/scatter: ``y[dst] += w * x[src]`` (``index_add``).

    Leading / trailing batch axes are carried along; the output has ``n`` items on ``dim``. ``w=None`` means
    unit weights. No sparse tensors and no host synchronisation: captures with ``torch.compile(fullgraph=True)``.
    ``operator`` (``x ↦ A @ x`` on the same graph, such as a bound :func:`graph_mm`) computes the same product
    as one SpMM / GEMM.
    """
    d = dim % x.dim()
    # items first and everything else flattened into rows: [N, K] (a view when the leading axes have size 1), so
    # the gather and the scatter move whole contiguous rows (index_add along an inner axis is ~3x slower on CPU)
    xt = x.movedim(d, 0)
    rest = xt.shape[1:]
    flat = xt.reshape(xt.shape[0], -1)
    if operator is not None:
        return operator(flat).reshape(n, *rest).movedim(0, d)
    msg = flat.index_select(0, src)
    if w is not None:
        msg = msg * w.to(x.dtype).unsqueeze(1)
    out = flat.new_zeros(n, flat.shape[1]).scatter_add_(0, dst.unsqueeze(1).expand_as(msg), msg)
    return out.reshape(n, *rest).movedim(0, d)


def attention_edges(edge_index: Tensor, n: int, self_loops: bool = True,
                    device: torch.device | str | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
    """Edges ``(src, dst, valid)`` an edge softmax runs over (GAT; PyG ``remove_self_loops`` + ``add_self_loops``).

    ``self_loops``: every listed self-loop is dropped and one loop per node ``0..n-1`` appended; otherwise the list
    is kept as given. Duplicated edges stay separate entries (each its own softmax term). ``valid`` is None (all
    entries are edges) eagerly; under ``torch.compile`` the dropped loops stay as ``valid = False`` placeholders
    (a fixed length, no data-dependent shapes).
    """
    ei = edge_index.to(edge_index.device if device is None else device).long()
    src, dst = ei[0], ei[1]
    if not self_loops:
        return src, dst, None
    nodes = torch.arange(n, device=ei.device)
    valid = torch.cat([src != dst, torch.ones(n, dtype=torch.bool, device=ei.device)])
    src, dst = torch.cat([src, nodes]), torch.cat([dst, nodes])
    if torch.compiler.is_compiling():
        return src, dst, valid
    return src[valid], dst[valid], None


def edge_softmax(scores: Tensor, dst: Tensor, n: int, valid: Tensor | None = None) -> Tensor:
    """``α_e = exp(s_e) / Σ_{e': dst_e' = dst_e} exp(s_e')``: softmax of ``scores [..., E]`` over the edges into each
    target node (edges on the last axis; ``valid = False`` entries get 0 and are left out).

    Stabilised by the per-target maximum (``scatter_reduce`` amax, no gradient: it cancels), summed by
    ``index_add``: O(E) memory, never an ``n x n`` tensor.
    """
    lead = scores.shape[:-1]
    idx = dst.expand(*lead, -1)
    s = scores if valid is None else scores.masked_fill(~valid, float("-inf"))
    top = scores.new_full((*lead, n), float("-inf")).scatter_reduce(-1, idx, s.detach(), "amax")
    top = top.masked_fill(torch.isinf(top), 0.0)  # targets without (valid) edges
    ex = torch.exp(s - top.gather(-1, idx))
    den = scores.new_zeros((*lead, n)).index_add(-1, dst, ex).gather(-1, idx)
    return ex / torch.where(den > 0, den, 1.0)


def edge_aggregate(z: Tensor, src: Tensor, dst: Tensor, alpha: Tensor, n: int) -> Tensor:
    """``y[..., i, :] = Σ_{e: dst_e = i} α[..., e] z[..., src_e, :]`` for per-edge (per-sample) weights ``α [..., E]``
    (items on axis -2): gather, scale, ``index_add``; messages ``[..., E, D]``, never ``n x n``."""
    msg = z.index_select(-2, src) * alpha.unsqueeze(-1).to(z.dtype)
    return z.new_zeros((*msg.shape[:-2], n, z.shape[-1])).index_add(-2, dst, msg)


def multihop_graph(A: Tensor, hops: int, accumulate: bool = False, include_identity: bool = True) -> Tensor:
    """``A^h`` (eq 83) or ``Σ_{k=k0..h} A^k`` with ``k0 = 0`` if ``include_identity`` else 1 (dense, batchable)."""
    if A.is_sparse or A.layout != torch.strided:
        A = A.to_dense()
    return _multihop(A, hops, accumulate, include_identity)


def multihop_propagate(
    x: Tensor,
    src: Tensor,
    dst: Tensor,
    w: Tensor | None,
    n: int,
    hops: int,
    accumulate: bool = False,
    include_identity: bool = True,
    dim: int = -2,
    operator: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """``multihop_graph(A, hops, accumulate, include_identity) @ x`` by ``hops`` propagations (never n x n), or, where
    it is cheaper on a small graph, by the dense ``A^h`` (or ``Σ A^k``) taken by repeated squaring: O(log h)
    matrix products instead of h propagations (:func:`squaring_pays`)."""
    if hops < 0:
        raise ValueError("hops must be >= 0")
    d = dim % x.dim()
    columns = x.numel() // max(x.shape[d], 1)
    if src is not None and not torch.compiler.is_compiling() and squaring_pays(n, src.numel(), hops, columns):
        a = dense_from_edges(src, dst, w.to(x.dtype) if w is not None else x.new_ones(src.shape), n)
        m = multihop_graph(a, hops, accumulate, include_identity)
        xt = x.movedim(d, 0)
        return (m @ xt.reshape(n, -1)).reshape(n, *xt.shape[1:]).movedim(0, d)
    y = x
    acc = x if include_identity else torch.zeros_like(x)
    for _ in range(hops):
        y = graph_propagate(y, src, dst, w, n, dim, operator)
        acc = acc + y
    return acc if accumulate else y


def pagerank_matrix(A: Tensor, alpha: float = 0.15) -> Tensor:
    """PageRank multi-hop matrix (eq 84): ``α (I - (1-α) A)^{-1}``, by ``torch.linalg.solve`` (no inverse).

    ``A`` is expected to be normalised already (the toolkit's ``c = α``, default 0.15). Where ``I - (1-α) A`` is
    singular in the working precision (``α`` below its epsilon, ``A`` with an eigenvalue 1), the pseudo-inverse
    takes the solve's place.
    """
    if A.is_sparse or A.layout != torch.strided:
        A = A.to_dense()
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    return _solve(eye - (1.0 - alpha) * A, alpha * eye.expand_as(A))


def _solve(m: Tensor, rhs: Tensor) -> Tensor:
    """``m⁻¹ rhs`` by ``torch.linalg.solve``, or by the pseudo-inverse where ``m`` is singular in its precision."""
    if torch.compiler.is_compiling():
        return torch.linalg.solve(m, rhs)
    out, info = torch.linalg.solve_ex(m, rhs)
    if bool((info != 0).any()):
        return torch.linalg.pinv(m) @ rhs
    return out


def pagerank_propagate(
    x: Tensor,
    src: Tensor,
    dst: Tensor,
    w: Tensor | None,
    n: int,
    alpha: float = 0.15,
    iters: int | None = None,
    tol: float = 1e-7,
    dim: int = -2,
    method: Literal["power", "solve"] = "power",
    operator: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """``pagerank_matrix(A, α) @ x`` without the ``n x n`` inverse.

    ``"power"``: ``y_0 = αx``, ``y_{k+1} = αx + (1-α) A y_k`` for ``K`` steps, i.e. ``y_K = α Σ_{j≤K} ((1-α)A)^j x``.
    If ``‖A‖ ≤ 1`` in an operator norm (∞-norm for row, 1-norm for column, 2-norm for symmetric normalisation)
    then ``‖y_K - y*‖ ≤ (1-α)^{K+1} ‖x‖``; ``iters=None`` picks ``K = pagerank_iterations(α, tol)`` (98 for the
    defaults). Unnormalised ``A`` may diverge. ``"solve"``: exact, builds the dense ``n x n`` system (small n).
    Under ``torch.export`` the steps on the edge list are one loop (:func:`_power_loop`).
    """
    if method == "solve":
        d = dim % x.dim()
        wt = torch.ones(src.numel(), dtype=x.dtype, device=x.device) if w is None else w.to(x.dtype)
        a = dense_from_edges(src, dst, wt, n)
        eye = torch.eye(n, dtype=x.dtype, device=x.device)
        xm = x.movedim(d, -2) if x.dim() > 1 else x[:, None]
        y = _solve(eye - (1.0 - alpha) * a, alpha * xm)
        return y.movedim(-2, d) if x.dim() > 1 else y[:, 0]
    if method != "power":
        raise ValueError(f"unknown method {method!r}")
    k = pagerank_iterations(alpha, tol) if iters is None else iters
    base = alpha * x
    if k > 1 and exporting() and (operator is None or isinstance(operator, functools.partial)):
        return _power_loop(base, src, dst, w, n, alpha, k, dim, operator)
    y = base
    for _ in range(k):
        y = base + (1.0 - alpha) * graph_propagate(y, src, dst, w, n, dim, operator)
    return y


def _power_loop(base: Tensor, src: Tensor | None, dst: Tensor | None, w: Tensor | None, n, alpha: float, k: int,
                dim: int, operator: functools.partial | None = None) -> Tensor:
    """PageRank's ``K`` power steps ``y ← αx + (1−α)Ây`` (``base`` = αx) as one ``torch.while_loop`` for
    ``torch.export``: the program holds one step, as ONNX's ``Loop``, not ``K`` unrolled propagations (minutes to
    trace and convert). The loop is the operator itself, every tensor its body reads passed in: the edge list, or
    the tensors ``operator`` (a bound :func:`graph_mm`) holds."""
    if operator is None:
        weights = torch.ones_like(src, dtype=base.dtype) if w is None else w.to(base.dtype)
        held = [src, dst, weights]
    else:
        held = [a for a in operator.args if a is not None]
    # copies: no input of the loop may alias another (src and dst are rows of one edge tensor, y starts at base)
    held = [t.clone() for t in held]
    # (contiguous: the body's output is, and a loop carries one layout; an attribute-axis ξ's base is a transpose)
    start = base.clone(memory_format=torch.contiguous_format)
    carried = (torch.zeros((), dtype=torch.long, device=base.device), start)

    def step(i, y, base, steps, *held):
        if operator is None:
            return i + 1, (base + (1.0 - alpha) * graph_propagate(y, *held, n, dim)).contiguous()
        given = iter(held)
        bound = functools.partial(operator.func, *(None if a is None else next(given) for a in operator.args),
                                  **operator.keywords)
        return i + 1, (base + (1.0 - alpha) * graph_propagate(y, None, None, None, n, dim, bound)).contiguous()

    steps = torch.full((), k, device=base.device)
    return torch.ops.higher_order.while_loop(_below, step, carried, (base.contiguous(), steps, *held))[1]


def _below(i, y, base, steps, *held):  # the step count as a 0-d tensor input
    return i < steps
