"""Tensor types with symbolic dimensions, inferred for every IR value before any tensor exists.

Layouts (``kind``):
- ``vector`` ``[B, F]``: one feature vector per sample (no item axis).
- ``items``  ``[B, N, F]``: N interdependent items (tokens, time steps, nodes) with F features each.
- ``grid``   ``[B, C, *S]``: C channels over a 1-, 2- or 3-D spatial grid (an image is ``[B, C, H, W]``).
- ``tokens`` ``[B, T]``: integer token ids (``tokens[T]``: one sequence, the sample axis implicit); only an
  embedding reads them.
- ``edges``  ``[2, E]`` int64 edge list (source row 0, target row 1); ``edge_weight`` ``[E]``.
- ``matrix`` ``[B, N, M]``: a relation value, one N x M interdependence matrix per sample (row i = the item it maps
  to, column j = the item it reads), made by ``relation(x, c, xi = ...)``; ``apply(r, v)`` multiplies it with values,
  ``given(r)`` is it as a head's instance ξ, ``rows(r)`` reads it as the sequence of its rows.
- ``mask``   attention masks, with explicit polarity ``block`` (True = blocked), ``keep`` (True = attend) or
  ``add`` (float added to the logits).
``time_major=True`` marks a value whose first two axes are swapped at the model boundary (``time_major[T, B, F]``
inputs, ``state[S, B, H]`` recurrent states, ``time_major(y)`` outputs); inside, every value is sample-first.
``batched=False`` marks an implicit sample axis (a single graph ``nodes[N, F]``): the compiled module adds and
removes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

Dim = Union[int, str]

# DSL type constructor -> (layout kind, number of dims, role shown to users)
TYPE_CONSTRUCTORS: dict[str, tuple[str, tuple[int, ...]]] = {
    "vector": ("vector", (2,)),
    "tabular": ("vector", (2,)),
    "sequence": ("items", (3,)),
    "nodes": ("items", (2, 3)),
    "set": ("items", (3,)),
    "items": ("items", (3,)),
    "image": ("grid", (4,)),
    "signal": ("grid", (3,)),
    "volume": ("grid", (5,)),
    "grid": ("grid", (3, 4, 5)),
    "time_major": ("items", (3,)),
    "state": ("state", (3,)),
    "tokens": ("tokens", (1, 2)),
    "edges": ("edges", (2,)),
    "edge_weight": ("edge_weight", (1,)),
    "matrix": ("matrix", (3,)),
    "block_mask": ("mask", (1, 2, 3)),
    "keep_mask": ("mask", (1, 2, 3)),
    "additive_mask": ("mask", (1, 2, 3)),
}
MASK_MODES = {"block_mask": "block", "keep_mask": "keep", "additive_mask": "add"}


@dataclass(frozen=True)
class TensorType:
    """A value's inferred type: layout kind, full shape (sample axis first when batched) and extras."""

    kind: str
    shape: tuple[Dim, ...]
    batched: bool = True
    mask_mode: str | None = None
    role: str = ""
    time_major: bool = False

    # -- per-sample views used by heads
    @property
    def features(self) -> Dim:
        """F for vector/items, C for grids."""
        if self.kind == "vector":
            return self.shape[-1]
        if self.kind == "items":
            return self.shape[-1]
        if self.kind == "grid":
            return self.shape[1]
        raise ValueError(f"{self.kind} has no feature axis")

    @property
    def items(self) -> Dim | None:
        return self.shape[1] if self.kind == "items" else None

    @property
    def spatial(self) -> tuple[Dim, ...]:
        return tuple(self.shape[2:]) if self.kind == "grid" else ()

    @property
    def batch(self) -> Dim:
        return self.shape[0]

    def with_shape(self, shape) -> "TensorType":
        return TensorType(self.kind, tuple(shape), self.batched, self.mask_mode, self.role, self.time_major)

    def __str__(self) -> str:
        shape = self.shape if self.batched else self.shape[1:]
        if self.time_major:
            shape = (shape[1], shape[0], *shape[2:])
        dims = ", ".join(str(d) for d in shape)
        name = self.role or self.kind
        return f"{name}[{dims}]"


HEAD_BIAS = "head_bias"  # the role of a per-head additive mask [H, Nq, Nc] (relative_bias, alibi)


def head_bias(heads: int, nq: Dim, nc: Dim) -> TensorType:
    """A per-head additive mask ``head_bias[H, Nq, Nc]``: kind ``mask``, mode ``add``, no sample axis (every sample
    reads the same bias; head h of an attention adds slice h to its scores)."""
    return TensorType("mask", (heads, nq, nc), True, "add", HEAD_BIAS, False)


def is_head_bias(t: "TensorType | None") -> bool:
    return t is not None and getattr(t, "kind", None) == "mask" and getattr(t, "role", None) == HEAD_BIAS


def vector(batch: Dim, f: Dim) -> TensorType:
    return TensorType("vector", (batch, f), role="vector")


def items(batch: Dim, n: Dim, f: Dim, *, batched: bool = True, role: str = "items") -> TensorType:
    return TensorType("items", (batch, n, f), batched, role=role)


def grid(batch: Dim, c: Dim, spatial: tuple[Dim, ...], role: str | None = None) -> TensorType:
    default_role = {1: "signal", 2: "image", 3: "volume"}.get(len(spatial), "grid")
    return TensorType("grid", (batch, c, *spatial), role=role or default_role)


def matrix(batch: Dim, n: Dim, m: Dim) -> TensorType:
    """A relation value: one ``n x m`` matrix per sample (rows: the items it maps to)."""
    return TensorType("matrix", (batch, n, m), role="matrix")


def numel(dims) -> Dim:
    """Product of dims; symbolic when any is symbolic."""
    out: Dim = 1
    for d in dims:
        out = dim_mul(out, d)
    return out


def dim_mul(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if a == 1:
        return b
    if b == 1:
        return a
    return f"{_factor(a)}*{_factor(b)}"


def dim_add(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if a == 0:
        return b
    if b == 0:
        return a
    return f"{a}+{b}"


def _factor(d: Dim) -> str:
    """``d`` as a factor of a product: a sum or difference in parentheses."""
    text = str(d)
    return f"({text})" if isinstance(d, str) and any(c in text for c in "+-/") else text


def broadcast_dim(a: Dim, b: Dim) -> Dim | None:
    """The dimension two broadcast axes give: equal dims (symbolic ones compare by name) give that dim, a size-1
    axis takes the other's; None when they do not broadcast."""
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    return None


def is_known(d: Dim) -> bool:
    return isinstance(d, int)


@dataclass(frozen=True)
class ValueRef:
    """A hyper-parameter that names a dataflow value (an edge list, a mask): resolved to an IR edge."""

    name: str

    def __str__(self) -> str:
        return self.name
