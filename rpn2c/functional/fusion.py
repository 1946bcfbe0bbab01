"""Fusion of ``k`` tensors (paper §4.5 / §6.2, eq 114-120; catalog §1.8, §2.9).

Inputs are either a sequence of ``k`` tensors or one tensor stacked on a new leading axis ``[k, ...]``. The
element-wise fusions need identically shaped inputs; the concatenations need equal shapes except the last (feature)
axis and concatenate along it ("row-wise" in the paper's text is really feature-wise, erratum 17).

Shape rules are plain functions of the list of input feature dims (last axis) returning the output feature dim;
``param_shapes`` functions give the learnable tensors of the parameterized fusions. Everything is vectorized over
the ``k`` inputs (one ``stack``/``cat``, then a reduction).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    from torch import Tensor

Inputs = Union["Tensor", Sequence["Tensor"]]

__all__ = [
    "FUSIONS",
    "FusionSpec",
    "concat_dim",
    "concat_fusion",
    "concat_linear_fusion",
    "concat_lowrank_fusion",
    "hadamard_fusion",
    "max_fusion",
    "mean_fusion",
    "median_fusion",
    "min_fusion",
    "pnorm_fusion",
    "prod_fusion",
    "projection_dim",
    "same_shape_dim",
    "stack_inputs",
    "sum_fusion",
    "weighted_fusion",
]


def stack_inputs(xs: Inputs) -> Tensor:
    """``[k, ...]`` from a sequence of same-shaped tensors (or a tensor already stacked on axis 0)."""
    import torch

    if isinstance(xs, torch.Tensor):
        if xs.dim() < 1 or xs.shape[0] < 1:
            raise ValueError(f"stacked fusion input needs a non-empty leading axis, got {tuple(xs.shape)}")
        return xs
    if len(xs) == 0:
        raise ValueError("fusion needs at least one input")
    shapes = [tuple(x.shape) for x in xs]  # compared, not hashed: a symbolic size (torch.export) has no hash
    if any(s != shapes[0] for s in shapes[1:]):
        raise ValueError(f"element-wise fusion needs identically shaped inputs, got {shapes}")
    return torch.stack(list(xs), dim=0)


# --------------------------------------------------------------------------------------------------------------------
# element-wise fusions (identical shapes)
# --------------------------------------------------------------------------------------------------------------------

def sum_fusion(xs: Inputs) -> Tensor:
    """``Σ_i A_i`` (eq 114 with α_i = 1)."""
    return stack_inputs(xs).sum(dim=0)


def mean_fusion(xs: Inputs) -> Tensor:
    """``(1/k) Σ_i A_i`` (eq 114 with α_i = 1/k)."""
    return stack_inputs(xs).mean(dim=0)


def weighted_fusion(xs: Inputs, weights: Tensor | Sequence[float]) -> Tensor:
    """Eq (114): ``Σ_i α_i A_i``.

    ``weights`` has shape ``[k]`` (one scalar per input) or ``[k, *s]`` with ``s`` a suffix of the input shape
    (per-feature weights, broadcast over the leading axes).
    """
    import torch

    X = stack_inputs(xs)
    w = torch.as_tensor(weights, dtype=X.dtype, device=X.device)
    if w.dim() == 0 or w.shape[0] != X.shape[0]:
        raise ValueError(f"weights must have a leading axis of size k={X.shape[0]}, got {tuple(w.shape)}")
    if w.dim() > X.dim():
        raise ValueError(f"weights {tuple(w.shape)} have more axes than the stacked inputs {tuple(X.shape)}")
    w = w.reshape(w.shape[0], *([1] * (X.dim() - w.dim())), *w.shape[1:])
    return (w * X).sum(dim=0)


def max_fusion(xs: Inputs) -> Tensor:
    """Eq (115)-(116): element-wise ``max_i A_i`` (ties share the gradient, ``amax``)."""
    return stack_inputs(xs).amax(dim=0)


def min_fusion(xs: Inputs) -> Tensor:
    """Element-wise ``min_i A_i``."""
    return stack_inputs(xs).amin(dim=0)


def prod_fusion(xs: Inputs) -> Tensor:
    """Element-wise ``Π_i A_i``."""
    return stack_inputs(xs).prod(dim=0)


def hadamard_fusion(xs: Inputs) -> Tensor:
    """Eq (117)-(118): ``A_1 ∘ A_2 ∘ … ∘ A_k`` (same as :func:`prod_fusion`)."""
    return prod_fusion(xs)


def median_fusion(xs: Inputs, *, mode: str = "mean") -> Tensor:
    """Element-wise median over the ``k`` inputs.

    For even ``k``: ``mode="mean"`` averages the two middle values (textbook/NumPy); ``mode="lower"`` takes the lower
    one (``torch.median`` semantics). Odd ``k``: the middle value either way.
    """
    X = stack_inputs(xs)
    k = X.shape[0]
    if mode not in ("mean", "lower"):
        raise ValueError(f"median mode must be 'mean' or 'lower', got {mode!r}")
    srt = X.sort(dim=0).values
    if k % 2 == 1 or mode == "lower":
        return srt[(k - 1) // 2]
    return 0.5 * (srt[k // 2 - 1] + srt[k // 2])


def pnorm_fusion(xs: Inputs, *, p: float = 2.0) -> Tensor:
    """Element-wise vector norm over the inputs: ``(Σ_i |A_i|^p)^{1/p}``; ``p = inf`` gives ``max_i |A_i|``.

    ``p = 1`` / ``p = 2`` are the toolkit's ``l1_norm`` / ``l2_norm`` fusions.
    """
    import torch

    if not (p > 0):
        raise ValueError(f"p-norm fusion needs p > 0, got {p}")
    return torch.linalg.vector_norm(stack_inputs(xs), ord=p, dim=0)


# --------------------------------------------------------------------------------------------------------------------
# concatenation fusions (last axis)
# --------------------------------------------------------------------------------------------------------------------

def concat_fusion(xs: Inputs) -> Tensor:
    """``A_1 ⊔ … ⊔ A_k``: concatenation along the last (feature) axis; ``[..., Σ n_i]``."""
    import torch

    if isinstance(xs, torch.Tensor):
        X = stack_inputs(xs)
        if X.dim() < 2:
            raise ValueError(f"stacked concat input needs shape [k, ..., n], got {tuple(X.shape)}")
        return X.movedim(0, -2).flatten(-2)
    if len(xs) == 0:
        raise ValueError("fusion needs at least one input")
    # compared pairwise, not hashed: symbolic sizes (torch.export) have no hash
    if any(x.dim() == 0 or x.shape[:-1] != xs[0].shape[:-1] for x in xs):
        raise ValueError(f"concat fusion needs equal shapes except the last axis, got {[tuple(x.shape) for x in xs]}")
    return torch.cat(list(xs), dim=-1)


def concat_linear_fusion(xs: Inputs, W: Tensor, bias: Tensor | None = None) -> Tensor:
    """Eq (119): ``(⊔_i A_i) W (+ b)``, ``W ∈ R^{(Σ n_i) × n}``."""
    Z = concat_fusion(xs)
    if W.shape[0] != Z.shape[-1]:
        raise ValueError(f"W must have Σn_i={Z.shape[-1]} rows, got {tuple(W.shape)}")
    out = Z @ W
    return out if bias is None else out + bias


def concat_lowrank_fusion(xs: Inputs, P: Tensor, Q: Tensor, bias: Tensor | None = None) -> Tensor:
    """Eq (120): ``(⊔_i A_i)(P Qᵀ) (+ b)`` computed as ``((⊔ A_i) P) Qᵀ``; ``P ∈ R^{(Σn_i)×r}``, ``Q ∈ R^{n×r}``."""
    Z = concat_fusion(xs)
    if P.shape[0] != Z.shape[-1] or P.shape[-1] != Q.shape[-1]:
        raise ValueError(f"need P [Σn_i={Z.shape[-1]}, r] and Q [n, r], got {tuple(P.shape)} and {tuple(Q.shape)}")
    out = (Z @ P) @ Q.mT
    return out if bias is None else out + bias


# --------------------------------------------------------------------------------------------------------------------
# shape rules and registry
# --------------------------------------------------------------------------------------------------------------------

def same_shape_dim(dims: Sequence[int], **_: object) -> int:
    """Element-wise fusions: all input dims equal; the output dim is that dim."""
    if len(dims) == 0:
        raise ValueError("fusion needs at least one input")
    if len(set(dims)) != 1:
        raise ValueError(f"element-wise fusion needs equal input dims, got {list(dims)}")
    return int(dims[0])


def concat_dim(dims: Sequence[int], **_: object) -> int:
    """Concatenation: ``Σ n_i``."""
    if len(dims) == 0:
        raise ValueError("fusion needs at least one input")
    return int(sum(dims))


def projection_dim(dims: Sequence[int], *, n: int, **_: object) -> int:
    """Concat + projection: the declared output dim ``n``."""
    concat_dim(dims)
    if int(n) != n or n < 1:
        raise ValueError(f"projection output dim n must be a positive integer, got {n!r}")
    return int(n)


def _no_params(dims: Sequence[int], **_: object) -> dict[str, tuple[int, ...]]:
    return {}


def _weighted_params(dims: Sequence[int], *, learnable: bool = False, **_: object) -> dict[str, tuple[int, ...]]:
    return {"weights": (len(dims),)} if learnable else {}


def _linear_params(dims: Sequence[int], *, n: int, bias: bool = False, **_: object) -> dict[str, tuple[int, ...]]:
    shapes = {"W": (concat_dim(dims), int(n))}
    return {**shapes, "bias": (int(n),)} if bias else shapes


def _lowrank_params(dims: Sequence[int], *, n: int, r: int = 2, bias: bool = False,
                    **_: object) -> dict[str, tuple[int, ...]]:
    shapes = {"P": (concat_dim(dims), int(r)), "Q": (int(n), int(r))}
    return {**shapes, "bias": (int(n),)} if bias else shapes


@dataclass(frozen=True)
class FusionSpec:
    """Registry entry: ``fn(xs, **params_and_hp)``, ``out_dim(dims, **hp)``, ``param_shapes(dims, **hp)``."""

    name: str
    fn: Callable[..., Tensor]
    formula: str
    out_dim: Callable[..., int]
    param_shapes: Callable[..., dict[str, tuple[int, ...]]] = _no_params

    def num_params(self, dims: Sequence[int], **hp) -> int:
        return sum(math.prod(s) for s in self.param_shapes(dims, **hp).values())


FUSIONS: dict[str, FusionSpec] = {
    s.name: s
    for s in (
        FusionSpec("sum", sum_fusion, "Σ A_i", same_shape_dim),
        FusionSpec("mean", mean_fusion, "(1/k) Σ A_i", same_shape_dim),
        FusionSpec("weighted", weighted_fusion, "Σ α_i A_i (eq 114)", same_shape_dim, _weighted_params),
        FusionSpec("max", max_fusion, "max_i A_i (eq 115)", same_shape_dim),
        FusionSpec("min", min_fusion, "min_i A_i", same_shape_dim),
        FusionSpec("prod", prod_fusion, "Π_i A_i", same_shape_dim),
        FusionSpec("hadamard", hadamard_fusion, "A_1 ∘ … ∘ A_k (eq 117)", same_shape_dim),
        FusionSpec("median", median_fusion, "median_i A_i", same_shape_dim),
        FusionSpec("pnorm", pnorm_fusion, "(Σ |A_i|^p)^{1/p}", same_shape_dim),
        FusionSpec("concat", concat_fusion, "A_1 ⊔ … ⊔ A_k (last axis)", concat_dim),
        FusionSpec("concat_linear", concat_linear_fusion, "(⊔ A_i) W (eq 119)", projection_dim, _linear_params),
        FusionSpec("concat_lowrank", concat_lowrank_fusion, "(⊔ A_i) P Qᵀ (eq 120)", projection_dim,
                   _lowrank_params),
    )
}
