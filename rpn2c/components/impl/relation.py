"""Modules of relation values (``rpn2c/components/relation.py``): the relation, its product with values, ``given``."""

from __future__ import annotations

import torch
from torch import nn

from rpn2c.components.base import XiModule

_SWAPPED = {"w_q": "w_k", "w_k": "w_q", "b_q": "b_k", "b_k": "b_q"}


class RelationModule(nn.Module):
    """R = ξ(q, c) per sample, ``[B, N, M]``. ``forward(q, [c], *aux)``: the context when the relation has one, then
    ξ's value inputs (masks) in the order of ``keys``."""

    def __init__(self, xi: nn.Module, has_context: bool, keys: list[str], swap: bool):
        super().__init__()
        self.xi = xi
        self.has_context, self.keys, self.swap = has_context, list(keys), swap

    def operands(self, q: torch.Tensor, rest: tuple) -> tuple[torch.Tensor, dict]:
        """The context (``q`` itself without one) and ξ's value inputs by hyper-parameter name."""
        return (rest[0] if self.has_context else q), dict(zip(self.keys, rest[int(self.has_context):]))

    def forward(self, q: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        c, aux = self.operands(q, rest)
        return batched(self.xi.relation(q, c, aux), q)  # ξ's matrix as a value (XiModule.relation)

    def tie_to(self, source: "RelationModule") -> None:
        """Use ``source``'s ξ tensors (``tie = r0``); with ``swap`` its query factors as keys and its key factors
        as queries. Re-run after conversions, which replace the tensors."""
        theirs = dict(source.xi.named_parameters())
        for name in list(self.xi._parameters):
            other = _SWAPPED.get(name, name) if self.swap else name
            self.xi._parameters[name] = theirs[other]

    def extra_repr(self) -> str:
        return "swapped" if self.swap else ""


def batched(a: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """A relation ``[N, M]`` shared by the samples as ``[B, N, M]``."""
    return a.expand(q.shape[0], *a.shape[-2:]) if a.dim() == 2 else a


class ApplyModule(nn.Module):
    """``apply(r, v)``: R V, or Rᵀ V."""

    def __init__(self, transpose: bool):
        super().__init__()
        self.transpose = transpose

    def forward(self, r: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return (r.transpose(-1, -2) if self.transpose else r) @ v


class AsMatrixModule(nn.Module):
    """``as_matrix``: the value itself, or a vector ``[B, k·c]`` as ``[B, k, c]`` (row-major), plus I when asked."""

    def __init__(self, rows: int | None, identity: bool):
        super().__init__()
        self.rows, self.identity = rows, identity

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        m = v if self.rows is None else v.unflatten(-1, (self.rows, -1))
        if self.identity:
            m = m + torch.eye(m.shape[-1], dtype=m.dtype, device=m.device)
        return m


class GivenXi(XiModule):
    """``given(r)``: the relation value ``aux["source"]`` (``[B, N, M]``) is the matrix; ``apply`` is R z."""

    axis = "instance"

    def __init__(self, transpose: bool):
        super().__init__()
        self.transpose = transpose

    def matrix(self, q, c, aux, size=None) -> torch.Tensor:
        r = aux["source"]
        return r.transpose(-1, -2) if self.transpose else r

    def apply(self, z, q, c, aux) -> torch.Tensor:
        return self.matrix(q, c, aux) @ z
