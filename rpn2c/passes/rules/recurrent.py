"""Recurrent layers: the gate heads with chain-fed state, as torch's fused kernel or a loop over time steps."""

from __future__ import annotations

from rpn2c.components.cells import PARALLEL_SCAN, RNN_FUSED, TIME_LOOP
from rpn2c.ir.kernels import Kernel, offered
from rpn2c.passes.rule import P, Rule, to


def _cell(kernel: Kernel, identity_state: bool = True):
    """The guard: the layer's cell offers ``kernel`` (its record's predicate), and κ_state is the identity where the
    form reads the state unexpanded."""
    return lambda s: (offered(s.node.layer.cell.component, kernel)
                      and (not identity_state or s.node.layer.kappa_state.name == "identity"))


RECURRENT_RULES: tuple[Rule, ...] = (
    Rule("parallel_scan", "recurrent", "recurrence", _cell(PARALLEL_SCAN),
         "a linear cell h_t = A h_{t−1} + u_t (dense A or diagonal λ; a selective cell's per-step decay A_t) with "
         "identity κ_state: a log-depth scan over time on the pairs (A, u_t) (Hillis–Steele; odd–even for a "
         "per-step A_t), ⌈log₂ T⌉ batched levels instead of T steps",
         "seed 004 App. A.2 (W_RNN blocks V^{i−j}U, block-Toeplitz); Blelloch 1990 / Martin & Cundy 2018 "
         "parallel linear recurrence", benefit=3, pattern=P("recur", "x"), rewrite=to(PARALLEL_SCAN)),
    Rule("fused_recurrent", "recurrent", "recurrence", _cell(RNN_FUSED),
         "identity κ_state: the gate heads and chain feedback are torch's fused RNN/GRU/LSTM kernel (κ on the "
         "input is applied to the whole sequence first)",
         "RPN 2 eq (175) chain ξ fed back; torch._VF.rnn_tanh/gru/lstm", benefit=2,
         pattern=P("recur", "x"), rewrite=to(RNN_FUSED)),
    Rule("time_loop", "recurrent", "recurrence", _cell(TIME_LOOP, identity_state=False),
         "a loop over time steps: input gates for all steps at once, the state gates per step (any κ_state)",
         "RPN 2 eq (175) chain ξ fed back", benefit=1, pattern=P("recur", "x"), rewrite=to(TIME_LOOP)),
)
