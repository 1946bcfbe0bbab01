"""The recurrence chain ξ: seed 004's linear-RNN matrix as an instance interdependence of a head."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from rpn2c.components.base import Interdependence, XiModule
from rpn2c.components.registry import HP, register
from rpn2c.functional.scan import linear_scan, recurrence_matrix


class _RecurrenceHP(HP):
    decay: float = Field(0.9, description="λ of M[t, s] = λ^{t−s}: its value, or its initial value when learnable")
    learnable: bool = Field(True, description="λ is a learned scalar (one parameter per channel)")
    direction: Literal["forward", "backward"] = "forward"


@register
class RecurrenceChain(Interdependence):
    """Recurrence chain ξ: M[t, s] = λ^{t−s} for s ≤ t (forward; backward: s ≥ t, λ^{s−t}), λ given or learned.

    A head ``Y = M κ(X) ψᵀ`` is the linear RNN ``h_t = λ h_{t−1} + U x_t`` (h₋₁ = 0, U = ψ) unrolled: seed 004's
    ``W_RNN`` with blocks ``V^{i−j} U`` for ``V = λI``, which is its main-text form ``W_xh W_hh^{i−j}`` with the
    scalar ``W_hh`` "identical across each feature dimension". This is the faithful ξ form: an instance ξ acts on
    items only, so a transition that mixes features is not one; ``heads = H`` copies with ``out = 1`` and
    ``fusion = concat`` give each output feature its own λ, the diagonal ``V = diag(λ)``, and a dense ``V`` is
    ``recurrent(x) { cell = linear }``, whose reference lowering builds ``W_RNN`` itself. The head's bias is added
    after ξ (seed 004 has none). Default lowering: the log-depth parallel scan; reference: the matrix.
    ``chain(mode = "inverse", alpha = λ)`` is the same matrix with a fixed λ, computed as ``(I − λA)⁻¹``.
    """

    name, family = "recurrence_chain", "interdependence"
    aliases = ("linear_recurrence_chain",)
    axes = ("instance",)
    kind = "param"
    HP = _RecurrenceHP
    example_call = "recurrence_chain(decay = 0.5)"

    def count(self, ctx):
        return 1 if self.hp.learnable else 0

    def build(self, ctx):
        return _RecurrenceXi(self.hp)


class _RecurrenceXi(XiModule):
    def __init__(self, hp):
        super().__init__()
        self.reverse, self.fixed = hp.direction == "backward", float(hp.decay)
        if hp.learnable:
            self.decay = nn.Parameter(torch.tensor(self.fixed))

    def _lam(self, like):
        if hasattr(self, "decay"):
            return self.decay.to(like.dtype)
        return torch.tensor(self.fixed, dtype=like.dtype, device=like.device)

    def matrix(self, q, c, aux, size=None):
        n = size if size is not None else c.shape[-2]
        return recurrence_matrix(self._lam(q), n, reverse=self.reverse)

    def apply(self, z, q, c, aux):
        if self.reverse:
            return linear_scan(z.flip(-2), self._lam(z)).flip(-2)
        return linear_scan(z, self._lam(z))
