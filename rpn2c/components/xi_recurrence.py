"""The recurrence chain ξ: seed 004's linear-RNN matrix as an instance interdependence of a head."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rpn2c.components.base import Interdependence
from rpn2c.components.registry import HP, register


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
        from rpn2c.components.impl.xi_recurrence import _RecurrenceXi

        return _RecurrenceXi(self.hp)


