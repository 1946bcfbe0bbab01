"""The oracle's forms of the component modules whose default form computes without the paper's matrix.

A component builds one module, its default form (``component.build(...)``; no component takes a lowering flag).
The reference lowering puts the literal form in place with :func:`literal`: each form below is a subclass of the
default module that keeps its tensors, buffers and names (one ``state_dict`` loads into both lowerings) and
computes its ``forward`` as the paper writes it, with the structural matrix materialised:

- a patch κ: ``x A`` with the padding-mode matrix (one-hot columns, zero outside the grid), then φ per patch;
- adaptive pooling: the bin-membership matrix ``x P`` (mean: then / |bin|), or the one-hot gather then max;
- an item readout: ``eₖᵀ X``;
- a relation: ξ's literal matrix (masks and rotations as matrices);
- Swin's patch merge: ``[S₁X | … | S₄X]`` with the four selection matrices; a grid padded ``S X`` and cropped
  ``Sᵀ Y`` by the selection matrix;
- a causal convolution: each channel's banded Toeplitz matrix;
- the Hopfield update: the couplings ``n W = PᵀP − diag`` built;
- a recurrent layer: a cell linear in its state by seed 004's ``h⃗ = W_RNN x⃗ + L (1 ⊗ b) + [A^{t+1} h₀]_t``
  (``L`` block lower-triangular, blocks ``A^{i−j}``, ``W_RNN = L (I_T ⊗ W_ih)``), a selective cell by
  ``L[t, s] = a_t ⊙ … ⊙ a_{s+1}``, any other cell with the state fed back through the chain matrix over its own
  output rows (RPN 2 eq (175)).

Nothing in the default lowering imports this module (``tests/test_layering.py``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rpn2c.components.impl.kappa_patches import PatchGatherModule
from rpn2c.components.impl.kappa_pooling import AdaptivePoolModule, PatchPoolModule
from rpn2c.components.impl.ops import HopfieldModule
from rpn2c.components.impl.readouts import ItemModule
from rpn2c.components.impl.relation import RelationModule, batched
from rpn2c.components.impl.sequence_conv import CausalConvModule
from rpn2c.components.impl.windows import CropGridModule, PadGridModule, PatchMergeModule
from rpn2c.functional import compression as FC
from rpn2c.functional import hopfield, windows
from rpn2c.functional.causal_conv import causal_conv_by_matrix
from rpn2c.functional.scan import recurrence_matrix, transition_powers, varying_matrix
from rpn2c.lower.recurrent import RecurrentModule
from rpn2c.lower.reference import literal_patches


class LiteralPatchGather(PatchGatherModule):
    """Patches as channels by the padding matrix: ``x A`` ``[B, C, P, p]``."""

    def forward(self, x, grid=True):
        return self.channels(literal_patches(x, self.geo, self.spatial))


class LiteralPatchPool(PatchPoolModule):
    """φ over every patch of ``x A`` (eq 90), out-of-grid taps read 0 (or ignored: φ's neutral value)."""

    def forward(self, x, grid=True):
        if self.prepad:
            x = nn.functional.pad(x, self.prepad)
        taps = literal_patches(x, self.taps, self.spatial)  # [B, C, P, p] (the taps that can land in the grid)
        if self.ignore and self.fill != 0.0:
            taps = taps.masked_fill(self.outside, self.fill)
        return self.finish(FC.reduce(taps, self.reduction, -1, **self.kw), x.shape[:2])


class LiteralAdaptivePool(AdaptivePoolModule):
    """The mean as the pooling matrix ``x P`` (the membership product, then / |bin| in x's dtype); the max as the
    bins gathered by a one-hot matrix ``x A``, then reduced with the slots past a bin's end ignored."""

    def adopt(self) -> None:
        self.known = all(isinstance(v, int) for v in self.spatial)  # else P is built per input size
        if self.known:
            matrix, extra = self._matrices(self.spatial)
            self.register_buffer("matrix", matrix, persistent=False)
            self.register_buffer("extra", extra, persistent=False)

    def _matrices(self, spatial):
        """(P's membership, |bin|) for the mean, (the one-hot gather, the slots past a bin's end) for the max."""
        if self.metric == "mean":
            member = FC.adaptive_pool_matrix(spatial, self.size, dtype=torch.float64)
            return (member > 0).to(torch.get_default_dtype()), (member > 0).sum(0)
        index = FC.adaptive_bin_index(spatial, self.size)
        valid = (index >= 0).flatten()
        onehot = torch.zeros(math.prod(spatial), index.numel(), dtype=torch.get_default_dtype())
        onehot[index.flatten()[valid], torch.arange(index.numel())[valid]] = 1.0
        return onehot, ~valid.reshape(index.shape)

    def forward(self, x, grid=True):
        if self.known:
            matrix, extra = self.matrix, self.extra
        else:
            matrix, extra = (t.to(x.device) for t in self._matrices(tuple(x.shape[2:])))
        flat = x.flatten(2) @ matrix.to(x.dtype)
        if self.metric == "mean":
            flat = flat / extra.to(x.dtype)
        else:
            flat = flat.unflatten(-1, extra.shape).masked_fill(extra, -math.inf).amax(-1)
        return flat.reshape(*x.shape[:2], *self.size)


class LiteralItem(ItemModule):
    """``eₖᵀ X``: the product with the unit vector of position k (the one-row selection matrix)."""

    def forward(self, x):
        self.check(x)
        n = x.shape[self.axis]
        unit = torch.zeros(n, dtype=x.dtype, device=x.device)
        unit[self.index % n] = 1
        return torch.einsum("bnd,n->bd" if self.axis == 1 else "bcn,n->bc", x, unit)


class LiteralRelation(RelationModule):
    """ξ's literal matrix: its masks (band, causal) and rotations as matrices."""

    def forward(self, q, *rest):
        c, aux = self.operands(q, rest)
        return batched(self.xi.matrix(q, c, aux), q)


class LiteralPatchMerge(PatchMergeModule):
    """``[S₁X | S₂X | S₃X | S₄X]`` with the four 0/1 selection matrices."""

    def forward(self, x):
        self.check(x)
        s = windows.merge_selections(self.grid, x.dtype, x.device)  # [4, N/4, N]
        return torch.cat(list((s.unsqueeze(1) @ x.unsqueeze(0)).unbind(0)), dim=-1)


class LiteralPadGrid(PadGridModule):
    """``S X`` with the selection matrix ``S`` ``[ph·pw, gh·gw]``."""

    def forward(self, x):
        self.check(x)
        return windows.grid_selection(self.grid, self.to, x.dtype, x.device) @ x


class LiteralCropGrid(CropGridModule):
    """``Sᵀ Y`` with the selection matrix ``S`` ``[ph·pw, gh·gw]`` of the padding it undoes."""

    def forward(self, x):
        self.check(x)
        return windows.grid_selection(self.to, self.grid, x.dtype, x.device).T @ x


class LiteralCausalConv(CausalConvModule):
    """``y[:, :, c] = M_c x[:, :, c] + β_c`` with each channel's banded Toeplitz matrix ``M_c`` built."""

    def forward(self, x):
        return causal_conv_by_matrix(x, self.weight, self.bias)


class LiteralHopfield(HopfieldModule):
    """The sign updates reading the built couplings ``n W``."""

    def forward(self, x, p):
        return hopfield.update(p, x, self.steps, self.update, self.threshold, literal=True)


class LiteralRecurrence(RecurrentModule):
    """Each layer and direction literally (the module's tensors, read by name; no form of the default lowering)."""

    def forward(self, x, state=None, cell_state=None):
        spec, cell = self.spec, self.cell
        zeros = x.new_zeros(spec.layers * spec.directions, x.shape[0], spec.hidden)
        h0 = zeros if state is None else state.transpose(0, 1)
        c0 = zeros if cell_state is None else cell_state.transpose(0, 1)
        linear = cell.linear and spec.kappa_state.name == "identity"
        direction = _selective_by_matrix if cell.selective else _by_w_rnn if linear else chain_direction
        out = x
        for i in range(spec.layers):
            if i > 0 and spec.dropout > 0:
                out = F.dropout(out, spec.dropout, self.training)
            inp = self.kappa[i](out)
            out = torch.cat([direction(self, inp, (h0[s], c0[s])[: cell.states], i, s % spec.directions)
                             for s in range(i * spec.directions, (i + 1) * spec.directions)], dim=-1)
        return out

    def lowering(self) -> str:
        return "reference"


def _by_w_rnn(m: RecurrentModule, x, init, layer, direction):
    """Seed 004's literal matrix: ``h⃗ = W_RNN x⃗ + L (1 ⊗ b) + [A^{k_t} h₀]_t``, ``W_RNN = L (I_T ⊗ W_ih)``,
    ``k_t = t + 1`` (forward) or ``T − t`` (backward, where ``L`` is block upper-triangular)."""
    w = m._named(layer, direction)
    b, n, d = x.shape
    a = torch.diag(w["weight_hh"]) if m.cell.diagonal else w["weight_hh"]
    lower = recurrence_matrix(a, n, reverse=bool(direction))  # [T·H, T·H], blocks A^{i−j}
    w_rnn = lower @ torch.kron(torch.eye(n, dtype=x.dtype, device=x.device), w["weight_ih"])  # [T·H, T·D]
    h = x.reshape(b, n * d) @ w_rnn.transpose(0, 1)
    bias = sum(w[k] for k in ("bias_ih", "bias_hh") if k in w)
    if torch.is_tensor(bias):
        h = h + lower @ bias.repeat(n)
    steps = torch.arange(n, device=x.device)
    powers = transition_powers(a, n)[n - steps if direction else steps + 1]  # [T, H, H]
    return h.reshape(b, n, -1) + torch.einsum("thk,bk->bth", powers, init[0])


def chain_direction(m: RecurrentModule, x, init, layer, direction):
    """The state fed back to step t is ``(A H)_t + e_t ⊙ h_init``: ``A`` the materialised chain matrix (``A[t, t−1]
    = 1`` forward, ``A[t, t+1] = 1`` backward) over the layer's own output rows ``H`` produced so far, ``e_t`` the
    chain's first step; the gate heads multiply by the weight matrices explicitly."""
    w = m._named(layer, direction)
    b, n = x.shape[:2]
    chain = torch.diag(x.new_ones(n - 1), -1 if direction == 0 else 1)  # [T, T]: row t reads t∓1
    first = n - 1 if direction else 0
    eye = torch.eye(n, dtype=x.dtype, device=x.device)
    rows = [x.new_zeros(b, n, m.spec.hidden) for _ in range(m.cell.states)]  # H (and C) as produced so far
    a = torch.einsum("btd,gd->btg", x, w["weight_ih"]) + w.get("bias_ih", 0)  # [B, T, G·H]
    for t in range(n - 1, -1, -1) if direction else range(n):
        fed = [torch.einsum("s,bsh->bh", chain[t], rows_k) + (init_k if t == first else 0)
               for rows_k, init_k in zip(rows, init)]
        r = m.cell.state_gates(m.kappa_state[layer](fed[0]), w["weight_hh"], w.get("bias_hh"))
        new = m.cell.step(a[:, t], r, tuple(fed))
        onehot = eye[t]  # write row t functionally (autograd needs the earlier rows intact)
        rows = [rows_k + onehot[None, :, None] * s[:, None, :] for rows_k, s in zip(rows, new)]
    return rows[0]


def _selective_by_matrix(m: RecurrentModule, x, init, layer, direction):
    """A selective or complex cell: ``h = L u + [a_t ⊙ … ⊙ a_0 ⊙ h₀]_t`` with ``L`` materialised (seed 004's block
    lower-triangular matrix, blocks ``diag(λ)^{t−s}``, for a constant ``a``, else ``L[b, t, s] = a_t ⊙ … ⊙
    a_{s+1}``), the output read from the states; backward on reversed time."""
    w = m._named(layer, direction)
    xs = x.flip(1) if direction else x
    a, u = m.cell.terms(xs, w)
    h0 = init[0] if m.cell.takes_state else None
    b, n, width = u.shape
    if a.dim() == 1:
        h = (u.reshape(b, n * width) @ recurrence_matrix(a, n).transpose(0, 1)).reshape(b, n, width)
        start = transition_powers(a, n)[1:]  # [T, S]: a^{t+1}
    else:
        lower = varying_matrix(a)  # [B, T, T, S]
        h = torch.einsum("btsk,bsk->btk", lower, u)
        start = lower[:, :, 0] * a[:, :1]  # a_t ⊙ … ⊙ a_0
    h = h if h0 is None else h + start * h0.to(u.dtype)[:, None]
    y = m.cell.readout(h, xs, w)
    return y.flip(1) if direction else y


FORMS: dict[type, type] = {form.__bases__[0]: form for form in (
    LiteralPatchGather, LiteralPatchPool, LiteralAdaptivePool, LiteralItem, LiteralRelation, LiteralPatchMerge,
    LiteralPadGrid, LiteralCropGrid, LiteralCausalConv, LiteralHopfield, LiteralRecurrence)}


def literal(module: nn.Module) -> nn.Module:
    """``module`` with every sub-module that has a literal form computing by it (in place; returned)."""
    for m in list(module.modules()):
        form = FORMS.get(type(m))
        if form is not None:
            m.__class__ = form
            if hasattr(form, "adopt"):
                form.adopt(m)
    return module
