"""The sparse-matrix view of a recurrent layer (seed 004's lower-triangular recurrence matrix).

Elman cell (``rnn``): the unrolled linear recurrence with σ replaced by the identity, block ``(t, s) = V^{t−s} U``
for ``s ≤ t`` (forward; upper for the backward direction), layers composed, bias ``Σ_k V^k b``: exact for a linear
cell and for relu where every pre-activation is ≥ 0; tanh/relu applied at every step are not one matrix. Gated cells
(gru, lstm): the exact pre-activation map over time, rows ``[a_t; r_t] = [W_ih x_t + b_ih; W_hh h_{t∓1} + b_hh]``
per layer and direction on ``u = [vec X; vec H_0; …]``, ``H_l`` the layer's own outputs (the chain ξ feeding the
state back); the cell maps them to ``h_t``. Linear cells (``linear``, ``diagonal``): the Elman matrix, exact (seed
004's ``W_RNN``, blocks ``V^{t−s} U``). Selective cells (``mingru``, ``mamba``, ``gla``, ``lru``): the exact matrix at
the given input, blocks ``Re(R_t diag(a_t ⊙ … ⊙ a_{s+1}) G_s)``.
"""

from __future__ import annotations

import torch

from rpn2c.functional.scan import recurrence_matrix, transition_powers, varying_matrix
from rpn2c.lower.literal_forms import chain_direction
from rpn2c.runtime.matrix_view import LayerMatrix, ViewError, _kron


def recurrent_matrix(name, module, x, state_args, sample) -> LayerMatrix:
    """The matrix view of a recurrent layer (identity κ, zero initial state) for sample ``sample`` of ``x``."""
    spec = module.spec
    cell = spec.cell.component
    if spec.kappa.name != "identity" or spec.kappa_state.name != "identity":
        raise ViewError(f"layer '{name}': a non-identity κ on the input or the state is not linear")
    if any(s is not None for s in state_args):
        raise ViewError(f"layer '{name}': the view assumes a zero initial state")
    x = x[sample]
    if cell.selective:
        return _selective(name, module, x)
    if cell.name == "rnn" or cell.linear:
        return _elman(name, module, x)
    return _gated(name, module, x)


def _elman(name, module, x) -> LayerMatrix:
    """σ = identity (exact for the ``linear`` / ``diagonal`` cells, whose ``V`` is ``W_hh`` / ``diag(λ)``):
    ``h_t = U x_t + V h_{t∓1} + b`` unrolled, block ``(t, s) = V^{|t−s|} U`` on the causal side."""
    spec = module.spec
    steps = x.shape[0]
    m = torch.eye(x.numel(), dtype=torch.float64)
    bias = torch.zeros(x.numel(), dtype=torch.float64)
    for layer in range(spec.layers):
        blocks, shifts = [], []
        for d in range(spec.directions):
            w = {k: p.double() for k, p in module._named(layer, d).items()}
            u, v = w["weight_ih"], w["weight_hh"]
            b = sum((w[k] for k in ("bias_ih", "bias_hh") if k in w), torch.zeros(len(u), dtype=torch.float64))
            chain = recurrence_matrix(v, steps, reverse=d == 1)  # blocks V^{|t−s|} on the causal side
            blocks.append(chain @ _kron(torch.eye(steps, dtype=torch.float64), u))  # [T·H, T·F]: V^{|t−s|} U
            shifts.append((chain @ b.repeat(steps)).view(steps, -1))  # [T, H]: Σ_k V^k b
        # directions concatenate per step: row (t, d, o)
        h = spec.hidden
        layer_m = torch.stack([bk.unflatten(0, (steps, h)) for bk in blocks], 1).flatten(0, 2)
        layer_b = torch.stack(shifts, 1).flatten()
        m, bias = layer_m @ m, layer_m @ bias + layer_b
    if spec.cell.component.linear:
        kind, meaning = "recurrence", ("W_RNN: block (t, s) = V^{t−s} U for s ≤ t (forward; backward s ≥ t), bias "
                                       "Σ_k V^k b, layers composed; exact (a linear cell)")
    else:
        kind, meaning = "recurrence (linearised)", (
            "σ = identity: block (t, s) = V^{t−s} U for s ≤ t (forward), bias Σ_k V^k b, layers composed; exact "
            "when σ acts as the identity (relu with every pre-activation ≥ 0); with tanh/relu applied at every "
            "step no single matrix is the layer")
    return LayerMatrix(name, kind, m, bias, x.flatten(), tuple(x.shape), (steps, spec.hidden * spec.directions),
                       meaning, layout=("items", steps, steps))


def _lower(a, steps) -> torch.Tensor:
    """``L[t, s] = a_t ⊙ … ⊙ a_{s+1}`` (s ≤ t, else 0), ``[T, T, S]``: from per-step ``a [T, S]`` or a constant
    ``a [S]`` (then ``a^{t−s}``)."""
    if a.dim() == 2:
        return varying_matrix(a)
    i = torch.arange(steps)
    lag = i[:, None] - i[None, :]
    return transition_powers(a, steps)[lag.clamp(min=0)] * (lag >= 0)[:, :, None]


def _selective(name, module, x) -> LayerMatrix:
    """A selective / complex cell at this input: ``y_t = Σ_{s≤t} Re(R_t diag(L[t, s]) G_s) x_s + E x_t + b_t``,
    ``L[t, s] = a_t ⊙ … ⊙ a_{s+1}`` (all factors from :meth:`SelectiveCell.factors`, computed on ``x``), layers
    composed at their own inputs; a backward direction is the forward one on reversed time."""
    spec, cell = module.spec, module.spec.cell.component
    if not cell.linear_readout():
        raise ViewError(f"layer '{name}': the '{cell.name}' cell normalises its output, which is not linear in "
                        "the states")
    steps = x.shape[0]
    m = torch.eye(x.numel(), dtype=torch.float64)
    bias = torch.zeros(x.numel(), dtype=torch.float64)
    inp = x.double()
    for layer in range(spec.layers):
        mats, shifts = [], []
        for d in range(spec.directions):
            w = {k: p.double() for k, p in module._named(layer, d).items()}
            xs = inp.flip(0) if d else inp
            a, g, g0, r, e, b = cell.factors(xs, w)
            low = _lower(a, steps)  # [T, T, S]
            if r is None:  # y = h
                mat = torch.einsum("tsh,shd->thsd", low, g)
                shift = torch.einsum("tsh,sh->th", low, g0)
            else:
                mat = torch.einsum("thk,tsk,skd->thsd", r, low, g)
                shift = torch.einsum("thk,tsk,sk->th", r, low, g0)
            mat, shift = mat.real.clone(), shift.real
            if e is not None:
                mat[torch.arange(steps), :, torch.arange(steps), :] += e
            if b is not None:
                shift = shift + b
            if d:
                mat, shift = mat.flip(0, 2), shift.flip(0)
            mats.append(mat)
            shifts.append(shift)
        layer_m = torch.cat(mats, 1).reshape(-1, inp.numel())  # rows (t, d, h), columns (s, c)
        layer_b = torch.cat(shifts, 1).flatten()
        m, bias = layer_m @ m, layer_m @ bias + layer_b
        inp = (layer_m @ inp.flatten() + layer_b).reshape(steps, -1)
    return LayerMatrix(name, "selective recurrence", m, bias, x.flatten(), tuple(x.shape),
                       (steps, spec.hidden * spec.directions),
                       f"{cell.name}: block (t, s) = Re(R_t diag(a_t ⊙ … ⊙ a_(s+1)) G_s) for s ≤ t, plus E on the "
                       "diagonal blocks (decay a, input map G, readout R from this input), layers composed; exact "
                       "for this input", data_dependent=True, layout=("items", steps, steps))


def _gated(name, module, x) -> LayerMatrix:
    """Rows ``[a_t; r_t] = [W_ih x_t + b_ih; W_hh h_{t∓1} + b_hh]`` per layer, direction, step;
    ``u = [vec X; vec H_0; …; vec H_{L−1}]`` with ``H_l`` the layer's own outputs."""
    spec = module.spec
    steps, h = x.shape[0], spec.hidden
    outs, inp = [], x[None]
    for layer in range(spec.layers):
        zeros = inp.new_zeros(1, h)
        init = (zeros, zeros)[: spec.cell.component.states]
        out = torch.cat([chain_direction(module, inp.double(), init, layer, d).double()
                         for d in range(spec.directions)], -1)
        outs.append(out[0])
        inp = out
    sizes = [x.numel()] + [o.numel() for o in outs]
    offsets = torch.tensor([0] + sizes).cumsum(0).tolist()
    chain = [torch.diag(torch.ones(steps - 1, dtype=torch.float64), -1),
             torch.diag(torch.ones(steps - 1, dtype=torch.float64), 1)]
    rows, biases = [], []
    for layer in range(spec.layers):
        width = x.shape[1] if layer == 0 else h * spec.directions
        for d in range(spec.directions):
            w = [p.double() for p in module._named(layer, d).values()]
            g = len(w[0])
            block = torch.zeros(steps, 2, g, offsets[-1], dtype=torch.float64)
            a = _kron(torch.eye(steps, dtype=torch.float64), w[0])  # [T·G, T·F]: input side, per step
            block[:, 0, :, offsets[layer]:offsets[layer + 1]] = a.reshape(steps, g, steps * width)
            own = _kron(chain[d], w[1])  # [T·G, T·H]: the state fed back by the chain
            sel = torch.zeros(steps * h, steps * h * spec.directions, dtype=torch.float64)
            for t in range(steps):  # h^{(d)}_t inside H_l's rows (t, d', o)
                sel[t * h:(t + 1) * h, (t * spec.directions + d) * h:(t * spec.directions + d + 1) * h] = torch.eye(h)
            block[:, 1, :, offsets[layer + 1]:offsets[layer + 2]] = (own @ sel).reshape(steps, g, -1)
            rows.append(block.flatten(0, 2))
            b = torch.stack([w[2], w[3] if len(w) > 3 else torch.zeros_like(w[2])]) if spec.bias else \
                torch.zeros(2, g, dtype=torch.float64)
            biases.append(b.expand(steps, 2, g).flatten())
    m = torch.cat(rows)
    u = torch.cat([x.flatten().double()] + [o.flatten() for o in outs])
    g = len(next(iter(module._named(0, 0).values())))
    return LayerMatrix(name, "recurrence (pre-activation)", m, torch.cat(biases), u, tuple(x.shape),
                       (spec.layers * spec.directions, steps, 2, g),
                       f"{spec.cell.component.name}: gate pre-activations [W_ih x_t + b_ih; W_hh h_(t∓1) + b_hh] "
                       "per layer, direction and step, on u = [vec X; vec H_0; ...] (the layer's own outputs fed "
                       "back by the chain); the cell maps them to h_t",
                       factors={f"H_{i}": o for i, o in enumerate(outs)})
