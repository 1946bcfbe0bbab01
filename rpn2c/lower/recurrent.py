"""The recurrent layer in both lowerings.

Parameters carry torch's names and layouts (``weight_ih_l0``, ``weight_hh_l0_reverse`` …, gate blocks stacked in
``nn.RNN``/``nn.GRU``/``nn.LSTM`` order), so weights move between rpn2c and torch by renaming the prefix only.

- reference: the paper's form taken literally. The state fed back to step t is ``(A H)_t + e_t ⊙ h_init``, with
  ``A`` the materialised chain matrix (``A[t, t−1] = 1`` forward, ``A[t, t+1] = 1`` backward), ``H`` the layer's
  own output rows produced so far and ``e_t`` marking the chain's first step; the gate heads multiply by the
  weight matrices explicitly.
- default: the fused torch kernel (``torch._VF.rnn_tanh/rnn_relu/gru/lstm``, what ``nn.RNN`` calls, cuDNN on GPU)
  when κ_state is the identity — κ on the layer input is applied to the whole sequence first; otherwise a loop
  over time steps (a state expansion does not commute with the fused kernel).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rpn2c.functional import rnn_op
from rpn2c.ir.trace import RecurrentTrace
from rpn2c.ir.graph import RecurrentSpec


class RecurrentModule(nn.Module):
    """``h_t = cell(κ(x_t) W_ihᵀ + b_ih, κ_s(h_{t−1}) W_hhᵀ + b_hh, state_{t−1})`` over layers and directions."""

    def __init__(self, spec: RecurrentSpec, features: int, trace: RecurrentTrace, reference: bool,
                 fused: bool = False):
        """``fused``: the optimiser's ``fused_recurrent`` rule fired (identity κ_state); else a time loop."""
        super().__init__()
        self.spec, self.reference = spec, reference
        self.cell = spec.cell.component
        h, g = spec.hidden, self.cell.gates * spec.hidden
        self.kappa = nn.ModuleList(
            [spec.kappa.component.build((features if i == 0 else h * spec.directions,)) for i in range(spec.layers)])
        self.kappa_state = nn.ModuleList([spec.kappa_state.component.build((h,)) for _ in range(spec.layers)])
        self.identity_kappa = spec.kappa.name == "identity"
        self.fused = fused and spec.kappa_state.name == "identity"
        self._names: list[list[str]] = []
        bound = 1 / math.sqrt(h)
        for i in range(spec.layers):
            for sfx in ("", "_reverse")[: spec.directions]:
                names = [f"weight_ih_l{i}{sfx}", f"weight_hh_l{i}{sfx}"]
                shapes = [(g, trace.d_in[i]), (g, trace.d_state)]
                if spec.bias:
                    names += [f"bias_ih_l{i}{sfx}", f"bias_hh_l{i}{sfx}"]
                    shapes += [(g,), (g,)]
                for name, shape in zip(names, shapes):
                    self.register_parameter(name, nn.Parameter(torch.empty(shape).uniform_(-bound, bound)))
                self._names.append(names)

    def _weights(self, layer: int, direction: int) -> list[torch.Tensor]:
        return [getattr(self, n) for n in self._names[layer * self.spec.directions + direction]]

    def _opaque_lstm(self, x) -> bool:
        """An LSTM on CPU being compiled: AOTAutograd cannot differentiate oneDNN's mkldnn_rnn_layer in
        torch <= 2.13 (pytorch/pytorch#158007), so the kernel runs as the opaque op ``rpn2c::lstm``."""
        return self.cell.states == 2 and x.device.type == "cpu" and torch.compiler.is_compiling()

    def _fused_now(self, x) -> bool:
        """The fused kernel; a compiled CPU LSTM with dropout between layers (which the opaque op's recomputing
        backward cannot redraw) takes the time loop."""
        if not self.fused:
            return False
        return not (self._opaque_lstm(x) and self.spec.dropout > 0 and self.training)

    def forward(self, x, state=None, cell_state=None):
        spec = self.spec
        fused = self._fused_now(x)
        b = x.shape[0]
        n_states = spec.layers * spec.directions
        zeros = x.new_zeros(n_states, b, spec.hidden)
        h0 = state.transpose(0, 1) if state is not None else zeros  # [S, B, H] (inputs are sample-first inside)
        c0 = cell_state.transpose(0, 1) if cell_state is not None else zeros
        if not self.reference and fused and self.identity_kappa:
            return self._kernel(x, h0, c0, spec.layers, 0)
        out = x
        for i in range(spec.layers):
            if i > 0 and spec.dropout > 0:
                out = F.dropout(out, spec.dropout, self.training)
            inp = self.kappa[i](out)
            if not self.reference and fused:
                out = self._kernel(inp, h0, c0, 1, i)
                continue
            outs = []
            for d in range(spec.directions):
                s = i * spec.directions + d
                init = (h0[s], c0[s])[: self.cell.states]
                run = self._reference_direction if self.reference else self._loop_direction
                outs.append(run(inp, init, i, d))
            out = torch.cat(outs, dim=-1)
        return out

    # ------------------------------------------------------------------------------------------- default
    def _kernel(self, x, h0, c0, layers: int, first: int) -> torch.Tensor:
        """``layers`` layers from ``first`` on through the fused torch kernel (batch-first)."""
        spec = self.spec
        flat = [w for i in range(first, first + layers) for d in range(spec.directions) for w in self._weights(i, d)]
        sl = slice(first * spec.directions, (first + layers) * spec.directions)
        hx = (h0[sl].contiguous(), c0[sl].contiguous()) if self.cell.states == 2 else h0[sl].contiguous()
        if self._opaque_lstm(x):
            return rnn_op.lstm(x, *hx, flat, spec.bias, layers, spec.bidirectional)
        kernel = getattr(torch._VF, self.cell.kernel())
        result = kernel(x, hx, flat, spec.bias, layers, spec.dropout, self.training, spec.bidirectional, True)
        return result[0]

    def _loop_direction(self, x, init, layer, direction):
        """A loop over time steps (κ_state is not the identity): input gates for all steps at once."""
        w = self._weights(layer, direction)
        a = x @ w[0].transpose(0, 1) + (w[2] if self.spec.bias else 0)  # [B, T, G·H]
        steps = range(x.shape[1] - 1, -1, -1) if direction else range(x.shape[1])
        state, outs = init, [None] * x.shape[1]
        for t in steps:
            r = self.kappa_state[layer](state[0]) @ w[1].transpose(0, 1) + (w[3] if self.spec.bias else 0)
            state = self.cell.step(a[:, t], r, state)
            outs[t] = state[0]
        return torch.stack(outs, dim=1)

    # ------------------------------------------------------------------------------------------- reference
    def _reference_direction(self, x, init, layer, direction):
        """Literal form: the fed-back state comes from the materialised chain matrix over the output rows."""
        w = self._weights(layer, direction)
        b, n = x.shape[:2]
        hidden = self.spec.hidden
        chain = torch.diag(x.new_ones(n - 1), -1 if direction == 0 else 1)  # [T, T]: row t reads t∓1
        first = n - 1 if direction else 0
        eye = torch.eye(n, dtype=x.dtype, device=x.device)
        rows = [x.new_zeros(b, n, hidden) for _ in range(self.cell.states)]  # H (and C) as produced so far
        a = x @ w[0].transpose(0, 1) + (w[2] if self.spec.bias else 0)
        steps = range(n - 1, -1, -1) if direction else range(n)
        for t in steps:
            fed = [torch.einsum("s,bsh->bh", chain[t], rows_k) + (init_k if t == first else 0)
                   for rows_k, init_k in zip(rows, init)]
            r = self.kappa_state[layer](fed[0]) @ w[1].transpose(0, 1) + (w[3] if self.spec.bias else 0)
            new = self.cell.step(a[:, t], r, tuple(fed))
            onehot = eye[t]  # write row t functionally (autograd needs the earlier rows intact)
            rows = [rows_k + onehot[None, :, None] * s[:, None, :] for rows_k, s in zip(rows, new)]
        return rows[0]

    def extra_repr(self) -> str:
        s = self.spec
        return (f"cell={s.cell}, hidden={s.hidden}, layers={s.layers}, bidirectional={s.bidirectional}, "
                f"lowering={'reference' if self.reference else ('fused' if self.fused else 'loop')}")

