"""Converters for nn.RNN / nn.GRU / nn.LSTM -> the exact ``recurrent`` construct.

The paper's RNN (eq 175, a chain instance ξ with π = identity) is a one-step causal convolution, not a recurrence
(catalog §5.2, §8 item 14). A torch recurrence becomes ``recurrent(x) { cell = ... }``: per gate an RPN 2 head pair
(``κ(x_t) W_ihᵀ + b_ih`` and ``h_{t-1} W_hhᵀ + b_hh``, the state reaching step t through a chain instance ξ over the
layer's own output) combined by the cell. Its parameters carry torch's names, gate blocks in torch's order.
"""

from __future__ import annotations

from torch import nn

from rpn2c.frontends.kit import Context, Value, lit, register_converter

_CELLS = {"RNN_TANH": "rnn", "RNN_RELU": 'rnn(nonlinearity = "relu")', "GRU": "gru", "LSTM": "lstm"}
_GATES = {"RNN_TANH": "h_t = tanh(a + r)", "RNN_RELU": "h_t = relu(a + r)",
          "GRU": "gates (r, z, n), n = tanh(a_n + r ⊙ r_n) (torch's reset-after form)",
          "LSTM": "gates (i, f, g, o), c_t = f ⊙ c_{t-1} + i ⊙ g, h_t = o ⊙ tanh(c_t)"}


def _state_input(ctx: Context, v, s: int, h: int, what: str) -> Value:
    if not isinstance(v, Value):
        ctx.fail(f"{what}={type(v).__name__}", "expected a tensor")
    if len(v.shape) != 3 or v.shape[0] != s or v.shape[2] != h:
        ctx.fail(None, f"'{what}' has shape {list(v.shape)}, expected [{s}, B, {h}]")
    return ctx.declare(v, "state", f"state[{s}, B, {h}]")


def recurrent(m: nn.RNNBase, ctx: Context) -> Value:
    """nn.RNN/GRU/LSTM(input[, hx]) -> output (the primary output; h_n/c_n are not returned)."""
    if m.mode not in _CELLS:
        ctx.fail(f"mode={m.mode!r}")
    if getattr(m, "proj_size", 0):
        ctx.fail(f"proj_size={m.proj_size}", "a projected LSTM state (h_t = W_hr(o ⊙ tanh c_t)) has no recurrent "
                                             "setting")
    x = ctx.get("input")
    if not isinstance(x, Value):
        ctx.fail(f"input={type(x).__name__}", "packed sequences are not supported; pad the batch")
    ctx.sequence(x, m.input_size, "T", m.batch_first, "input")
    if x.features != m.input_size:
        ctx.fail(f"input_size={m.input_size}", f"the input has {x.features} features")
    dirs = 2 if m.bidirectional else 1
    s, h = m.num_layers * dirs, m.hidden_size
    hx = ctx.get("hx")
    states = []
    if hx is not None:
        if m.mode == "LSTM":
            if not isinstance(hx, tuple) or len(hx) != 2:
                ctx.fail("hx", "an LSTM state is a pair (h0, c0)")
            states = [("state", _state_input(ctx, hx[0], s, h, "h0")),
                      ("cell_state", _state_input(ctx, hx[1], s, h, "c0"))]
        else:
            states = [("state", _state_input(ctx, hx, s, h, "h0"))]
    settings = [f"cell = {_CELLS[m.mode]}", f"out = {h}"]
    if m.num_layers > 1:
        settings.append(f"layers = {m.num_layers}")
    if m.bidirectional:
        settings.append("bidirectional = true")
    if not m.bias:
        settings.append("bias = false")
    if m.dropout > 0:
        settings.append(f"dropout = {lit(float(m.dropout))}")
    settings += [f"{k} = {v.name}" for k, v in states]
    name = ctx.name("rnn")
    comment = [f"{ctx.where()}(input_size={m.input_size}, hidden_size={h}, num_layers={m.num_layers},",
               f"  bidirectional={m.bidirectional}, batch_first={m.batch_first}): an exact recurrence:",
               "  per gate, a = x_t W_ihᵀ + b_ih (ξ none, κ identity, ψ identity) and r = h_{t-1} W_hhᵀ + b_hh, where",
               "  h_{t-1} reaches step t through a chain instance ξ over the layer's own output (A[t, t-1] = 1,",
               f"  reversed for the backward direction); cell: {_GATES[m.mode]}",
               "  (not the paper's one-step chain layer, eq 175, which feeds back x_{t-1}W instead of h_{t-1})"]
    y = ctx.head(x, settings, comment=comment, kind="recurrent", name=name, uses=[v for _, v in states],
                 out_kind="items", time_major=not m.batch_first)
    for pname, _ in m.named_parameters():
        ctx.param(f"{name}.{pname}", pname)
    return y


def register_all() -> None:
    for cls in (nn.RNN, nn.GRU, nn.LSTM):
        register_converter(cls, recurrent)
