"""Recurrent cells: how a recurrent layer combines its gate heads with the fed-back state.

Each gate ``g`` of a cell is an RPN 2 head pair ``a_g = κ(x_t) W_gᵀ + b_g`` (input part) and
``r_g = κ_s(h_{t-1}) U_gᵀ + c_g`` (state part, the state reaching step t through a chain interdependence).
Gate blocks are stacked in torch's order so weights are interchangeable with ``nn.RNN``/``nn.GRU``/``nn.LSTM``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch

from rpn2c.components.base import example_model
from rpn2c.components.registry import HP, Component, register


class Cell(Component):
    """Base of the cell family: ``gates`` blocks of width H, ``states`` state tensors, a fused torch kernel."""

    family = "cell"
    gates: ClassVar[int] = 1
    states: ClassVar[int] = 1  # 2 for LSTM (h, c)

    @classmethod
    def example_template(cls) -> str:
        return example_model("input x: sequence[B, 5, 4]", "y = recurrent(x) {", "  cell = {call}", "  out = 3", "}",
                             "return y")

    def kernel(self) -> str:
        """The name of the fused ``torch._VF`` kernel computing this cell over a whole sequence."""
        raise NotImplementedError

    def step(self, a: torch.Tensor, r: torch.Tensor, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """New state from the input-gate pre-activations ``a`` and state-gate ones ``r`` (both [B, gates·H])."""
        raise NotImplementedError


@register
class RNN(Cell):
    """Elman cell: h_t = σ(a + r), σ = tanh or relu (nn.RNN)."""

    name = "rnn"

    class HP(HP):
        nonlinearity: Literal["tanh", "relu"] = "tanh"

    def kernel(self):
        return f"rnn_{self.hp.nonlinearity}"

    def step(self, a, r, state):
        s = a + r
        return (torch.tanh(s) if self.hp.nonlinearity == "tanh" else torch.relu(s),)


@register
class GRU(Cell):
    """GRU cell: r = σ(a_r + r_r), z = σ(a_z + r_z), n = tanh(a_n + r ⊙ r_n), h_t = (1 − z) ⊙ n + z ⊙ h_{t−1}."""

    name = "gru"
    gates = 3

    def kernel(self):
        return "gru"

    def step(self, a, r, state):
        (h,) = state
        a_r, a_z, a_n = a.chunk(3, dim=-1)
        r_r, r_z, r_n = r.chunk(3, dim=-1)
        reset = torch.sigmoid(a_r + r_r)
        update = torch.sigmoid(a_z + r_z)
        new = torch.tanh(a_n + reset * r_n)
        return ((1 - update) * new + update * h,)


@register
class LSTM(Cell):
    """LSTM cell: i, f, g, o = σ, σ, tanh, σ of (a + r); c_t = f ⊙ c_{t−1} + i ⊙ g, h_t = o ⊙ tanh(c_t)."""

    name = "lstm"
    gates = 4
    states = 2

    def kernel(self):
        return "lstm"

    def step(self, a, r, state):
        _, c = state
        i, f, g, o = (a + r).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c
