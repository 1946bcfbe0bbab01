"""``recurrent(x) { ... }`` settings -> :class:`RecurrentSpec`, and its shape and parameter-count rule.

Per layer l and direction: ``W_ih`` [G·H, D_l], ``W_hh`` [G·H, D_s] and (with ``bias``) ``b_ih``, ``b_hh`` [G·H]
(``bias = "single"``: ``b_ih`` only, the one bias of ``h_t = σ(U x_t + V h_{t−1} + b)``), with G the cell's gate count, ``D_l`` = κ's width on the layer input (F for l = 0, H·dirs after) and ``D_s`` =
κ_state's width on H (the ``diagonal`` cell: ``W_ih`` [H, D_l], ``λ`` [H], ``b_ih`` [H]; a selective cell declares
its own shapes). The output is the last layer's states (or a selective cell's readout), ``sequence[B, T, H·dirs]``.
"""

from __future__ import annotations

import math

from rpn2c.check.heads import LayerShapeError, _default, _int_setting, resolve_use
from rpn2c.check.values import INVALID, Scope, evaluate
from rpn2c.components.base import ShapeRuleError
from rpn2c.components.registry import ValueRef
from rpn2c.errors import Diagnostics, Span, did_you_mean
from rpn2c.ir.graph import RecurrentSpec
from rpn2c.ir.trace import RecurrentTrace
from rpn2c.ir.types import TensorType, items, is_known

RECURRENT_KEYS = ("cell", "out", "layers", "bidirectional", "bias", "dropout", "state", "cell_state", "kappa",
                  "kappa_state")
STATE_KEYS = ("state", "cell_state")


def build_recurrent(settings, scope: Scope, diags: Diagnostics, span: Span):
    """Validate the settings; returns ``(spec, {state key: ValueRef})`` or None (diagnostics emitted)."""
    start = len(diags.items)
    given = {}
    for s in settings:
        if s.key not in RECURRENT_KEYS:
            diags.error("E0304", f"unknown recurrent setting '{s.key}'", s.span,
                        suggestion=did_you_mean(s.key, RECURRENT_KEYS))
        elif s.key in given:
            diags.error("E0308", f"setting '{s.key}' is given twice", s.span)
        else:
            given[s.key] = s

    def comp(key, default, family):
        s = given.get(key)
        return _default(default, family) if s is None else resolve_use(s.value, key, scope, diags)

    cell = comp("cell", "rnn", "cell")
    kappa = comp("kappa", "identity", "expansion")
    kappa_state = comp("kappa_state", "identity", "expansion")
    hidden = _int_setting(given["out"], scope, diags) if "out" in given else None
    if "out" not in given:
        diags.error("E0303", "a recurrent layer needs its hidden width: add `out = H`", span)
    layers = _int_setting(given["layers"], scope, diags) if "layers" in given else 1
    flags = {}
    for key, default, allowed in (("bidirectional", False, ()), ("bias", True, ("single",))):
        flags[key] = default
        if key in given:
            v = evaluate(given[key].value, scope, diags, allow_values=False)
            if v is not INVALID and not isinstance(v, bool) and v not in allowed:
                also = "".join(f", or \"{a}\"" for a in allowed)
                diags.error("E0303", f"'{key}' must be true or false{also}, got {v!r}", given[key].value.span)
            elif v is not INVALID:
                flags[key] = v
    dropout = 0.0
    if "dropout" in given:
        v = evaluate(given["dropout"].value, scope, diags, allow_values=False)
        if v is not INVALID and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1):
            diags.error("E0303", f"'dropout' must be a number in [0, 1), got {v!r}", given["dropout"].value.span)
        elif v is not INVALID:
            dropout = float(v)
    refs = {}
    for key in STATE_KEYS:
        if key in given:
            v = evaluate(given[key].value, scope, diags)
            if v is INVALID:
                continue
            if not isinstance(v, ValueRef):
                diags.error("E0303", f"'{key}' expects the name of a `state[S, B, H]` input value, got {v!r}",
                            given[key].value.span)
                continue
            refs[key] = (v, given[key].span)
    if len(diags.items) > start or None in (cell, kappa, kappa_state, hidden, layers):
        return None
    if (cell.component.diagonal or cell.component.selective) and kappa_state.name != "identity":
        diags.error("E0303", f"the '{cell.name}' cell multiplies the state by a vector λ, so 'kappa_state' must be "
                             f"the identity, got '{kappa_state.name}'", given["kappa_state"].span)
        return None
    if flags["bias"] == "single" and not cell.component.two_biases:
        diags.error("E0303", f"`bias = \"single\"` merges a cell's two biases b_ih, b_hh into one, but the "
                             f"'{cell.name}' cell has one bias of its own: use `bias = true` or `bias = false`",
                    given["bias"].value.span)
        return None
    if "state" in refs and not cell.component.takes_state:
        diags.error("E0303", f"the '{cell.name}' cell's state is not [B, H]: it starts from zero, remove 'state'",
                    refs["state"][1])
        return None
    if "cell_state" in refs and cell.component.states < 2:
        diags.error("E0303", f"'cell_state' is only for cells with two states (lstm), not '{cell.name}'",
                    refs["cell_state"][1])
        return None
    spec = RecurrentSpec(cell, hidden, layers, flags["bidirectional"], flags["bias"], dropout, kappa, kappa_state)
    return spec, refs


def infer_recurrent(spec: RecurrentSpec, x: TensorType, states: dict[str, tuple[TensorType, Span]],
                    span: Span) -> tuple[TensorType, int, RecurrentTrace]:
    """Output type, parameter count and widths, or :class:`LayerShapeError`."""
    if x.kind != "items" or not x.batched:
        raise LayerShapeError(f"a recurrent layer runs over a batched sequence[B, T, F], got {x}", span)
    f = x.features
    if not is_known(f):
        raise LayerShapeError(f"the input features must be a known integer, got '{f}'", span)
    h, dirs, layers = spec.hidden, spec.directions, spec.layers
    try:
        d_in = [spec.kappa.component.features_out((f if i == 0 else h * dirs,))[0] for i in range(layers)]
        d_state = spec.kappa_state.component.features_out((h,))[0]
        kappa_params = sum(spec.kappa.component.count((f if i == 0 else h * dirs,)) for i in range(layers))
        kappa_params += layers * spec.kappa_state.component.count((h,))
    except ShapeRuleError as exc:
        raise LayerShapeError(str(exc), span) from None
    if spec.cell.component.same_width and any(d != h for d in d_in):
        raise LayerShapeError(f"the '{spec.cell.name}' cell runs each input channel through its own states, so its "
                              f"output width is its input width: set `out = {d_in[0]}` (layer inputs are "
                              f"{', '.join(map(str, d_in))} wide)", span)
    problem = spec.cell.component.width_problem(h, d_in[0])
    if problem:
        raise LayerShapeError(problem, span)
    params = kappa_params
    for i in range(layers):
        shapes = spec.cell.component.parameter_shapes(h, d_in[i], d_state, spec.bias).values()
        params += dirs * sum(math.prod(s) for s in shapes)
    for key, (t, at) in states.items():
        want = (layers * dirs, h)
        if t.kind != "state":
            raise LayerShapeError(f"'{key}' must name a state[{want[0]}, B, {h}] input, got {t}", at)
        have = (t.shape[1], t.shape[2])
        if any(is_known(a) and a != b for a, b in zip(have, want)):
            raise LayerShapeError(f"'{key}' must be state[{want[0]}, B, {h}] (layers·directions, batch, hidden), "
                                  f"got {t}", at)
    out = items(x.batch, x.items, h * dirs, role="sequence")
    return out, params, RecurrentTrace(d_in, d_state)
