"""The one cache of graphs' normalised adjacencies, and ``A @ x`` with ``A`` built once per edge tensor, eagerly
and compiled. :func:`normalized_edges` serves the edge list to the gather/scatter form from the same entries.

``graph_mm(edges, weight, x, n, ...)`` is the custom op ``rpn2c::graph_mm``: ``A`` is
:func:`graph_norm_weights` of the edge list (self-loops, normalisation, symmetrisation) as a CSR matrix, or a
dense ``[n, n]`` one for dense graphs (:func:`dense_pays`). Its implementation keeps the last few operators in a
cache keyed by the edge (and weight) tensor's storage, offset, shape, stride and version counter; the entry holds
those tensors, so their storage cannot be freed and reused by another graph while it lives, and an in-place edit
bumps the version and misses. Under ``torch.compile(fullgraph=True)`` the op is one opaque node, so the
normalisation and the CSR build run once per graph rather than being traced into every call (what PyG's
``GCNConv(cached=True)`` does by hand). The backward is the same op on ``Aᵀ`` (built on first use). Edge weights
that need gradients cannot be cached: they take the gather/scatter form (:func:`graph_propagate`).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Optional

import torch
from torch import Tensor

from rpn2c.functional.checked import tensor_key
from rpn2c.functional.structure.graph import dense_from_edges, dense_pays, forget_checked_edges, graph_norm_weights
from rpn2c.functional.structure.spmm import _csr, _csr_parts
from rpn2c.functional.untraced import untraced

MAX_GRAPHS = 4  # operators kept (least recently used goes first)
_CACHE: OrderedDict[tuple, tuple[tuple, _Operator]] = OrderedDict()


class _Operator:
    """One graph's normalised adjacency: the edge list ``(src, dst, w)`` (``A[dst, src] = w``, what the
    gather/scatter form reads) and, built on the first product, ``A`` dense or CSR, with ``Aᵀ`` built the first
    time a backward asks for it."""

    def __init__(self, src: Tensor, dst: Tensor, w: Tensor, n: int):
        self.edges, self.n = (src, dst, w), n
        self.dense = self.csr = self.csr_t = None

    @property
    def layout(self) -> str:
        return "dense" if dense_pays(self.n, self.edges[0].numel()) else "csr"

    def mm(self, x: Tensor, transpose: bool) -> Tensor:
        src, dst, w = self.edges
        if self.layout == "dense":
            if self.dense is None:
                self.dense = dense_from_edges(src, dst, w, self.n)
            return (self.dense.T if transpose else self.dense) @ x
        if not transpose:
            if self.csr is None:
                self.csr = _csr(*_csr_parts(dst, src, w, self.n))
            return self.csr @ x
        if self.csr_t is None:
            self.csr_t = _csr(*_csr_parts(src, dst, w, self.n))
        return self.csr_t @ x


def graph_operator_cached(edges: Tensor, weight: Tensor | None, n: int, dtype: torch.dtype, device: torch.device,
                          self_loops: bool | None, norm: str, directed: bool) -> _Operator:
    """The operator of this graph, from the cache or built (and cached) now."""
    if edges.is_inference() or (weight is not None and weight.is_inference()):  # no version counter: never cached
        return _build(edges, weight, n, dtype, device, self_loops, norm, directed)
    key = (tensor_key(edges), tensor_key(weight), n, dtype, device, self_loops, norm, directed)
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit[1]
    op = _build(edges, weight, n, dtype, device, self_loops, norm, directed)
    _CACHE[key] = ((edges, weight), op)  # holding the tensors keeps their storage from being reused
    while len(_CACHE) > MAX_GRAPHS:
        _CACHE.popitem(last=False)
    return op


def normalized_edges(edges: Tensor, weight: Tensor | None, n: int, dtype: torch.dtype, device: torch.device,
                     self_loops: bool | None, norm: str, directed: bool) -> tuple[Tensor, Tensor, Tensor]:
    """``(src, dst, w)`` of the normalised adjacency, from the one graph cache (eager calls whose edge weights
    need no gradient; anything else is computed in place, e.g. traced into a compiled graph)."""
    if torch.compiler.is_compiling() or (weight is not None and weight.requires_grad):
        return graph_norm_weights(edges, n, weight, self_loops=self_loops, normalization=norm, directed=directed,
                                  device=device, dtype=dtype)
    return graph_operator_cached(edges, weight, n, dtype, device, self_loops, norm, directed).edges


def clear_graph_cache() -> None:
    """Forget every cached operator and every checked edge list (and release the edge tensors both hold)."""
    _CACHE.clear()
    forget_checked_edges()


def _build(edges, weight, n, dtype, device, self_loops, norm, directed) -> _Operator:
    src, dst, w = graph_norm_weights(edges, n, weight, self_loops=self_loops, normalization=norm,
                                     directed=directed, device=device, dtype=dtype)
    return _Operator(src, dst, w, n)


def _mm(edges: Tensor, weight: Optional[Tensor], x: Tensor, n: int, self_loops: Optional[bool], norm: str,
        directed: bool, transpose: bool) -> Tensor:
    op = graph_operator_cached(edges, weight, n, x.dtype, x.device, self_loops, norm, directed)
    return op.mm(x.contiguous(), transpose)


# what ``@torch.library.custom_op("rpn2c::graph_mm", mutates_args=())`` on ``_mm`` registers, but for the wrapper
torch.library.define("rpn2c::graph_mm", "(Tensor edges, Tensor? weight, Tensor x, SymInt n, bool? self_loops, "
                     "str norm, bool directed, bool transpose) -> Tensor", tags=(torch.Tag.pt2_compliant_tag,))
torch.library.impl("rpn2c::graph_mm", "CompositeExplicitAutograd", untraced(_mm))
_graph_mm = torch.ops.rpn2c.graph_mm.default


@torch.library.register_fake("rpn2c::graph_mm")
def _(edges, weight, x, n, self_loops, norm, directed, transpose):
    return x.new_empty(n, x.shape[1])


def _setup(ctx, inputs, output):
    edges, weight, _, *args = inputs
    ctx.save_for_backward(edges, weight)
    ctx.args = args


def _backward(ctx, grad):
    edges, weight = ctx.saved_tensors
    n, self_loops, norm, directed, transpose = ctx.args
    gx = _graph_mm(edges, weight, grad, n, self_loops, norm, directed, not transpose) \
        if ctx.needs_input_grad[2] else None
    return None, None, gx, None, None, None, None, None


torch.library.register_autograd("rpn2c::graph_mm", _backward, setup_context=_setup)


def graph_mm(edges: Tensor, weight: Tensor | None, x: Tensor, *, n: int, self_loops: bool | None = None,
             norm: str = "none", directed: bool = True) -> Tensor:
    """``A @ x`` for ``x`` of shape ``[n, K]``, ``A[dst, src] = w`` as :func:`graph_norm_weights` normalises it;
    differentiable in ``x``. ``weight`` must not need gradients."""
    if weight is not None and weight.requires_grad:
        raise ValueError("graph_mm caches A: edge weights that need gradients take graph_propagate instead")
    return _graph_mm(edges, weight, x, n, self_loops, norm, directed, False)
