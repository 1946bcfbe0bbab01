"""Recurrent cells: how a recurrent layer combines its gate heads with the fed-back state.

Each gate ``g`` of a cell is an RPN 2 head pair ``a_g = κ(x_t) W_gᵀ + b_g`` (input part) and
``r_g = κ_s(h_{t-1}) U_gᵀ + c_g`` (state part, the state reaching step t through a chain interdependence).
Gate blocks are stacked in torch's order so weights are interchangeable with ``nn.RNN``/``nn.GRU``/``nn.LSTM``.
"""

from __future__ import annotations

from typing import ClassVar, Literal, TYPE_CHECKING

from rpn2c.components.base import example_model
from rpn2c.components.registry import HP, Component, register
from rpn2c.ir.kernels import RECURRENT_ARGS, Fallback, Kernel, Predicate

if TYPE_CHECKING:  # annotations only: torch is imported where tensors are made
    import torch


def _symbolic_length(module, x, *states) -> bool:
    from rpn2c.functional.scan import symbolic

    return symbolic(x.shape[1])


# the forms a recurrent layer runs, each a method of its module (``RecurrentModule``), called with RECURRENT_ARGS;
# the rules of ``passes/rules/recurrent.py`` rewrite ``recur`` into them (the state's κ is theirs to check)
RNN_FUSED = Kernel("rnn_fused", RECURRENT_ARGS, "fused",
                   Predicate(lambda cell: cell.kernel() is not None,
                             "a cell torch computes in one fused kernel (torch._VF.rnn_tanh, rnn_relu, gru, lstm)"),
                   Fallback("loop", Predicate(_symbolic_length,
                                              "the sequence length is a symbol (an export trace with a dynamic T: "
                                              "the step loop, one torch.scan per layer and direction)")))
PARALLEL_SCAN = Kernel("parallel_scan", RECURRENT_ARGS, "scan",
                       Predicate(lambda cell: cell.linear, "a cell linear in its state: h_t = A_t h_{t−1} + u_t"))
TIME_LOOP = Kernel("time_loop", RECURRENT_ARGS, "loop", Predicate(lambda cell: True, "every cell: step by step"))


class Cell(Component):
    """Base of the cell family: ``gates`` blocks of width H, ``states`` state tensors, a fused torch kernel."""

    family = "cell"
    kernels = (RNN_FUSED, PARALLEL_SCAN, TIME_LOOP)
    gates: ClassVar[int] = 1
    states: ClassVar[int] = 1  # 2 for LSTM (h, c)
    linear: ClassVar[bool] = False  # h_t = A h_{t−1} + u_t: a parallel scan / the block-Toeplitz matrix apply
    diagonal: ClassVar[bool] = False  # the state weight is a vector λ (h_t = λ ⊙ h_{t−1} + …), κ_state = identity
    selective: ClassVar[bool] = False  # decay and drive from x_t alone (``components.cells_selective``)
    takes_state: ClassVar[bool] = True  # accepts an initial `state = h0` [layers·dirs, B, H]
    same_width: ClassVar[bool] = False  # `out` must equal the layer's input width (channel-wise cells)
    two_biases: ClassVar[bool] = True  # b_ih and b_hh, which `bias = "single"` makes one b_ih (b_hh = 0)

    @classmethod
    def example_template(cls) -> str:
        return example_model("input x: sequence[B, 5, 4]", "y = recurrent(x) {", "  cell = {call}", "  out = 3", "}",
                             "return y")

    def width_problem(self, hidden: int, d_in: int) -> str | None:
        """Why ``out = hidden`` over inputs ``d_in`` wide cannot be this cell's width (None: it can)."""
        return None

    def kernel(self) -> str | None:
        """The name of the fused ``torch._VF`` kernel computing this cell over a whole sequence (None: none)."""
        raise NotImplementedError

    def parameter_shapes(self, hidden: int, d_in: int, d_state: int, bias: bool | str) -> dict[str, tuple[int, ...]]:
        """Per layer and direction: name prefix -> shape, in torch's order (``weight_ih, weight_hh, bias_ih,
        bias_hh``); ``bias = "single"`` keeps ``bias_ih`` only (one bias per gate block, added once)."""
        g = self.gates * hidden
        shapes = {"weight_ih": (g, d_in), "weight_hh": (g, d_state)}
        if not bias:
            return shapes
        return shapes | ({"bias_ih": (g,)} if bias == "single" else {"bias_ih": (g,), "bias_hh": (g,)})

    def state_gates(self, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """The state part ``r = κ_s(h_{t−1}) W_hhᵀ + b_hh`` (``h`` already expanded by κ_state)."""
        r = h @ weight.transpose(0, 1)
        return r if bias is None else r + bias

    def step(self, a: torch.Tensor, r: torch.Tensor, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """New state from the input-gate pre-activations ``a`` and state-gate ones ``r`` (both [B, gates·H])."""
        raise NotImplementedError


@register
class RNN(Cell):
    """Elman cell: h_t = σ(a + r), σ = tanh or relu (nn.RNN)."""

    name = "rnn"
    synonyms = {"elman": "rnn", "simple_rnn": "rnn", "vanilla_rnn": "rnn"}

    class HP(HP):
        nonlinearity: Literal["tanh", "relu"] = "tanh"

    def kernel(self):
        return f"rnn_{self.hp.nonlinearity}"

    def step(self, a, r, state):
        import torch

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
        import torch

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
        import torch

        _, c = state
        i, f, g, o = (a + r).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


@register
class LinearCell(Cell):
    """Linear recurrent cell: h_t = a + r = W_ih κ(x_t) + b_ih + A h_{t−1} + b_hh, no nonlinearity (A = W_hh, dense).

    Unrolled, ``h = L (U x + b) + [A^{t+1} h₀]_t`` with ``L`` the block lower-triangular Toeplitz matrix of blocks
    ``A^{i−j}`` (j ≤ i): seed 004's ``W_RNN`` (blocks ``V^{i−j} U``), whose diagonal blocks are ``U`` (so it is
    lower- but not strictly lower-triangular). The default lowering is a log-depth parallel scan (rule
    ``parallel_scan``), the reference lowering builds ``L`` and ``W_RNN`` literally. Weights are named as ``nn.RNN``'s.
    """

    name = "linear"
    linear = True

    def kernel(self):
        return None

    def step(self, a, r, state):
        return (a + r,)


@register
class DiagonalCell(Cell):
    """Diagonal linear cell (linear-RNN / S4D / LRU style, real λ): h_t = λ ⊙ h_{t−1} + W_ih κ(x_t) + b_ih.

    ``weight_hh`` is the vector λ ∈ R^H (A = diag(λ)), initialised in [0.5, 0.99); one bias. κ_state must be the
    identity. The readout ``y_t = C h_t`` is the next head. Seed 004's main-text matrix ``W_xh W_hh^{i−j}``
    (scalar W_hh) is the case λ = c·1; complex λ is the ``lru`` cell, input-dependent decays ``mingru``, ``mamba``,
    ``gla``.
    """

    name = "diagonal"
    linear = True
    diagonal = True
    two_biases = False

    def kernel(self):
        return None

    def parameter_shapes(self, hidden, d_in, d_state, bias):
        return {"weight_ih": (hidden, d_in), "weight_hh": (hidden,)} | ({"bias_ih": (hidden,)} if bias else {})

    def state_gates(self, h, weight, bias):
        return h * weight if bias is None else h * weight + bias

    def step(self, a, r, state):
        return (a + r,)
