"""The recurrent layer in both lowerings.

Parameters carry torch's names and layouts (``weight_ih_l0``, ``weight_hh_l0_reverse`` …, gate blocks stacked in
``nn.RNN``/``nn.GRU``/``nn.LSTM`` order), so weights move between rpn2c and torch by renaming the prefix only.
``bias = "single"`` keeps ``bias_ih`` only (one bias ``b`` per gate block: ``h_t = σ(W_ih x_t + W_hh h_{t−1} + b)``,
torch's layer with ``bias_hh = 0``); the fused kernel gets a zero buffer (``zero_bias_hh_l0`` …, outside the
``state_dict``) in ``bias_hh``'s place. The fused kernel's tensors are views of one flat buffer per kernel call, as
``nn.LSTM`` keeps them (``rpn2c.functional.rnn_weights``), so cuDNN does not copy them into one on every call;
under autocast the buffer is cast once and the kernel gets views of the cast buffer.

The module runs its program: the rewritten term's one op (``lower/program.recurrent_program``), whose emitter calls
the method of the form the rule chose, the record its cell declares (``components/cells.py``):

- ``rnn_fused`` (:meth:`fused`): the fused torch kernel (``torch._VF.rnn_tanh/rnn_relu/gru/lstm``, what ``nn.RNN``
  calls, cuDNN on GPU); κ on the layer input is applied to the whole sequence first. Inside a compiled graph the
  kernel runs as the opaque op ``rpn2c::<kernel>`` (``rpn2c.functional.rnn_op``) wherever the compiler would unroll it
  over time steps (every device but oneDNN's CPU LSTM inference), so cuDNN stays one call there too; an eval layer
  differentiated on CUDA runs cuDNN's training form with dropout 0. Its declared fallback: the step loop in an
  export trace whose length is a symbol.
- ``parallel_scan`` (:meth:`scan`): a cell linear in its state, ``h_t = A h_{t−1} + u_t`` (``linear``,
  ``diagonal``: ``u_t = W_ih κ(x_t) + b``), by a log-depth parallel scan over time
  (``rpn2c.functional.scan.linear_scan``); selective and complex cells (``mingru``, ``mamba``, ``gla``, ``lru``:
  ``h_t = a_t ⊙ h_{t−1} + u_t`` with ``a_t``, ``u_t`` from the input) by the scan on the per-step pairs
  (``varying_scan``; torch's complex dtypes for the LRU).
- ``time_loop`` (:meth:`loop`), and ``recur`` where no rule fired: the recurrence step by step, input gates for all
  steps at once (any κ_state: a state expansion does not commute with the fused kernel).

The reference lowering's recurrence is the oracle's own (``lower/literal_forms.LiteralRecurrence``: the chain
matrix, seed 004's ``L`` and ``W_RNN``); it keeps this module's tensors and names.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rpn2c.functional import rnn_op, rnn_weights
from rpn2c.components.cells import RNN_FUSED
from rpn2c.functional.scan import linear_scan, varying_scan
from rpn2c.functional.scan import symbolic as scan_symbolic
from rpn2c.ir.trace import RecurrentTrace
from rpn2c.ir.graph import RecurrentSpec
from rpn2c.lower.program import Step, run_program


# Devices where torch's own kernel gets its inputs in autocast's dtype from this module: on CUDA where cuDNN runs
# it, ATen's autocast rule for cuDNN would otherwise copy each weight into a new float16 buffer on every call. The
# CPU's oneDNN layer takes its weights as separate tensors and casts them itself (a low-precision input would
# select another kernel there), as does CUDA's own kernel without cuDNN (in autocast's dtype, not float16).
CAST_FIRST = ("cuda",)


class RecurrentModule(nn.Module):
    """``h_t = cell(κ(x_t) W_ihᵀ + b_ih, κ_s(h_{t−1}) W_hhᵀ + b_hh, state_{t−1})`` over layers and directions."""

    def __init__(self, spec: RecurrentSpec, features: int, trace: RecurrentTrace, program: list[Step] = ()):
        """``program``: the node's rewritten term as steps (``lower/program.recurrent_program``), what the forward
        runs; the parts its ops need are built (the fused kernel's flat buffer). The rules chose the op: nothing
        here tests their guards again."""
        super().__init__()
        self.program = list(program)
        self.spec = spec
        self.cell = spec.cell.component
        h = spec.hidden
        self.kappa = nn.ModuleList(
            [spec.kappa.component.build((features if i == 0 else h * spec.directions,)) for i in range(spec.layers)])
        self.kappa_state = nn.ModuleList([spec.kappa_state.component.build((h,)) for _ in range(spec.layers)])
        self.identity_kappa = spec.kappa.name == "identity"  # the fused kernel runs the whole stack at once
        self.flat = any(step.op == RNN_FUSED.name for step in self.program)  # the kernel's tensors as one buffer
        self._names: list[dict[str, str]] = []
        bound = 1 / math.sqrt(h)
        for i in range(spec.layers):
            for sfx in ("", "_reverse")[: spec.directions]:
                names = {}
                for prefix, shape in self.cell.parameter_shapes(h, trace.d_in[i], trace.d_state, spec.bias).items():
                    names[prefix] = name = f"{prefix}_l{i}{sfx}"
                    low, high = (0.5, 0.99) if self.cell.diagonal and prefix == "weight_hh" else (-bound, bound)
                    value = (self.cell.init(prefix, shape, h, trace.d_in[i]) if self.cell.selective
                             else torch.empty(shape).uniform_(low, high))
                    self.register_parameter(name, nn.Parameter(value))
                self._names.append(names)
        self._d_in = list(trace.d_in)
        self._kernel_names = [list(n.values()) for n in self._names]  # the fused kernel's tensors, in its order
        if self.flat and spec.bias == "single":  # b_hh = 0 for the kernel: a constant in the flat buffer
            for names in self._kernel_names:
                zero = "zero_" + names[2].replace("bias_ih", "bias_hh")
                self.register_buffer(zero, torch.zeros(self.cell.gates * h), persistent=False)
                names.append(zero)
        self.register_load_state_dict_post_hook(_flatten_after_load)
        self.flatten_parameters()

    def flatten_parameters(self) -> None:
        """The fused kernel's tensors as views of one flat buffer per kernel call (all layers, or each layer where
        κ sits between them; ``rnn_weights.flatten``), as ``nn.RNNBase.flatten_parameters`` keeps them, so cuDNN
        does not copy them into one on every call. Names, values and ``state_dict`` do not change. Made at
        construction and again after every conversion (``_apply``) and load; a no-op where the kernel does not run."""
        if not self.flat:
            return
        spec, kernel = self.spec, self.cell.kernel()
        groups = [(0, spec.layers)] if self.identity_kappa else [(i, 1) for i in range(spec.layers)]
        self._layouts = {}  # (first layer, layers) -> where autocast's cast of the flat buffer puts each tensor
        for first, layers in groups:
            names = [n for i in range(first, first + layers) for d in range(spec.directions)
                     for n in self._kernel_names[i * spec.directions + d]]
            tensors = [self._parameters.get(n, self._buffers.get(n)) for n in names]  # registered tensors only
            if not all(isinstance(t, torch.Tensor) for t in tensors):
                continue
            shape = (kernel, self._d_in[first], spec.hidden, layers, spec.bidirectional, bool(spec.bias))
            if rnn_weights.flatten(tensors, *shape):
                # cuDNN runs in float16 under autocast (rnn_op.autocast_dtype): its layout for that dtype
                cast_to = None if tensors[0].dtype == torch.float64 else torch.float16
                cudnn = cast_to and rnn_weights.cudnn_layout(tensors, *shape, cast_to)
                self._layouts[first, layers] = cudnn or rnn_weights.layout(tensors)

    def _apply(self, fn, recurse=True):
        """Conversions (``.to``, ``.double()``) replace each tensor's storage: the flat buffer is made again."""
        out = super()._apply(fn, recurse)
        self.flatten_parameters()
        return out

    def __setstate__(self, state):
        """``copy.deepcopy`` and unpickling copy each parameter on its own: the flat buffer is made again."""
        super().__setstate__(state)
        self.flatten_parameters()

    def _named(self, layer: int, direction: int) -> dict[str, torch.Tensor]:
        """This layer and direction's parameters by prefix (``weight_ih``, ``weight_hh``, ``bias_ih``, …)."""
        return {k: getattr(self, n) for k, n in self._names[layer * self.spec.directions + direction].items()}

    def _kernel_weights(self, layer: int, direction: int) -> list[torch.Tensor]:
        """The fused kernel's tensors: with ``bias = "single"``, the zero ``b_hh`` buffer (no parameter)."""
        return [getattr(self, n) for n in self._kernel_names[layer * self.spec.directions + direction]]

    def _input_gates(self, x, w) -> torch.Tensor:
        """``a = κ(x) W_ihᵀ + b_ih`` for all steps at once, ``[B, T, G·H]``."""
        a = x @ w["weight_ih"].transpose(0, 1)
        return a + w["bias_ih"] if "bias_ih" in w else a

    def _grad(self, x, h0, c0) -> bool:
        """A gradient will flow through the kernel: grad mode and an input or parameter that requires it."""
        return torch.is_grad_enabled() and (
            x.requires_grad or h0.requires_grad or c0.requires_grad or any(p.requires_grad for p in self.parameters()))

    def _opaque(self, x, grad: bool) -> bool:
        """The fused kernel runs as the opaque op ``rpn2c::<kernel>``: inside a compiled graph, wherever
        AOTAutograd would otherwise unroll it over time steps (:func:`rnn_op.compiled_route`); never in an
        exported program, which must load and run without rpn2c (torch.export, ONNX)."""
        return (torch.compiler.is_compiling() and not rnn_op.exporting()
                and rnn_op.compiled_route(self.cell.kernel(), x.device.type, x.dtype, grad) == "opaque")

    def _dropout_between_ops(self, x, grad: bool) -> bool:
        """Dropout between the layers of an opaque op, whose recomputing backward could not redraw it: one op
        call per layer, the dropout between them in the graph."""
        spec = self.spec
        return spec.dropout > 0 and self.training and spec.layers > 1 and self._opaque(x, grad)

    def forward(self, x, state=None, cell_state=None):
        """The program's one step: the form the rewritten term names (``lower/emitters._recurrence``)."""
        return run_program(self, self.program, {"x": x, "state": state, "cell_state": cell_state}, {})

    def _initial(self, x, state, cell_state):
        """The initial states ``[L·dirs, B, H]`` (inputs are sample-first inside), zeros where not given."""
        spec = self.spec
        zeros = x.new_zeros(spec.layers * spec.directions, x.shape[0], spec.hidden)
        h0 = state.transpose(0, 1) if state is not None else zeros
        return h0, cell_state.transpose(0, 1) if cell_state is not None else zeros

    def _stack(self, x, layer_fn):
        """``layer_fn(κ_i(out), i)`` over the layers, dropout between them."""
        spec, out = self.spec, x
        for i in range(spec.layers):
            if i > 0 and spec.dropout > 0:
                out = F.dropout(out, spec.dropout, self.training)
            out = layer_fn(self.kappa[i](out), i)
        return out

    def _directions(self, x, state, cell_state, run):
        """Each layer as ``run(input, initial states, layer, direction)`` per direction, concatenated."""
        h0, c0 = self._initial(x, state, cell_state)
        dirs, k = self.spec.directions, self.cell.states
        return self._stack(x, lambda inp, i: torch.cat(
            [run(inp, (h0[i * dirs + d], c0[i * dirs + d])[:k], i, d) for d in range(dirs)], dim=-1))

    # ------------------------------------------------------------------------------------------- the forms
    def fused(self, x, state=None, cell_state=None):
        """``rnn_fused``: the whole stack in one kernel call (κ on the input the identity, no dropout between the
        layers of an opaque op), else one call per layer with κ between."""
        h0, c0 = self._initial(x, state, cell_state)
        grad = self._grad(x, h0, c0)
        if self.identity_kappa and not self._dropout_between_ops(x, grad):
            return self._kernel(x, h0, c0, self.spec.layers, 0, grad)
        return self._stack(x, lambda inp, i: self._kernel(inp, h0, c0, 1, i, grad))

    def scan(self, x, state=None, cell_state=None):
        """``parallel_scan``: a linear cell by the log-depth scan over time, per layer and direction."""
        if self.cell.selective:
            return self._directions(x, state, cell_state, self._selective_direction(_by_scan))
        return self._directions(x, state, cell_state, self._scan_direction)

    def loop(self, x, state=None, cell_state=None):
        """``time_loop`` (and ``recur``, its general form): the recurrence step by step."""
        if self.cell.selective:
            return self._directions(x, state, cell_state, self._selective_direction(_by_loop))
        return self._directions(x, state, cell_state, self._loop_direction)

    # ------------------------------------------------------------------------------------------- their parts
    def _kernel(self, x, h0, c0, layers: int, first: int, grad: bool) -> torch.Tensor:
        """``layers`` layers from ``first`` on through the fused torch kernel (batch-first): eager, torch's kernel
        (cuDNN on CUDA, oneDNN or native on CPU); compiled, the opaque op where the compiler would unroll it.
        An eval layer differentiated on CUDA runs the kernel's training form with dropout 0 (same values). Where
        the CPU cannot run the kernel in autocast's dtype (:func:`rnn_op.cpu_fallback`), it runs in float32 with
        autocast off and returns that dtype."""
        spec = self.spec
        flat = [w for i in range(first, first + layers) for d in range(spec.directions)
                for w in self._kernel_weights(i, d)]
        if layers < spec.layers:  # (the whole stack reads the states as they are: no slice)
            sl = slice(first * spec.directions, (first + layers) * spec.directions)
            h0, c0 = h0[sl], c0[sl]
        hx = [h0.contiguous(), c0.contiguous()][: self.cell.states]
        cpu = x.device.type == "cpu"  # (autocast has no state on some devices: meta)
        low = rnn_op.cpu_fallback(self.cell.kernel(), "cpu", x.dtype, self._autocast_on("cpu")) if cpu else None
        if low is None:
            return self._call(x, hx, flat, layers, grad, self._layouts.get((first, layers)))
        with torch.autocast("cpu", enabled=False):
            hx, flat = [h.float() for h in hx], [w.float() for w in flat]
            return self._call(x, hx, flat, layers, grad).to(low)

    def _call(self, x, hx, flat, layers: int, grad: bool, where=None) -> torch.Tensor:
        """The kernel on ``x``, the states ``hx`` and the flat weights (``where``: the layout their cast follows,
        ``_layouts``): the opaque op, fed autocast's dtype (:meth:`_autocast`; autocast is off inside it), or
        ``torch._VF``'s, fed autocast's dtype too where :data:`CAST_FIRST` says."""
        spec = self.spec
        opaque = self._opaque(x, grad)
        if opaque or _cast_first(x):
            x, hx, flat = self._autocast(x, hx, flat, where)
        if opaque:
            record = self.training and grad  # keep the tape where a backward is expected
            op = rnn_op.OPS[self.cell.kernel()][0]
            return op(x, hx, flat, bool(spec.bias), layers, spec.bidirectional, record)
        kernel = getattr(torch._VF, self.cell.kernel())
        train = rnn_op.kernel_train(self.training, x.device.type, grad)
        dropout = spec.dropout if self.training else 0.0
        result = kernel(x, tuple(hx) if len(hx) == 2 else hx[0], flat, bool(spec.bias), layers, dropout, train,
                        spec.bidirectional, True)
        return result[0]

    @staticmethod
    def _autocast_on(device: str):
        """Autocast's dtype on ``device``, None when it is off."""
        return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None

    def _autocast(self, x, hx, flat, where=None):
        """Under autocast, the kernel's inputs cast as torch's autocast casts this kernel
        (:func:`rnn_op.autocast_dtype`; floating inputs only, float64 excepted), the weights in one cast of their
        flat buffer (:func:`rnn_weights.cast` at the offsets ``where``): the kernel gets views of one buffer in
        the autocast dtype, as ``nn.LSTM``'s kernel does, where a cast of each weight would hand cuDNN separate
        tensors to compact on every call. The opaque op runs in its inputs' dtype; torch's kernel finds its
        inputs already in autocast's dtype and casts nothing more (ATen's rule sees cuDNN's buffer in float16)."""
        device = x.device.type
        low = rnn_op.autocast_dtype(self.cell.kernel(), device, x.dtype, self._autocast_on(device))
        if low is None:
            return x, hx, flat

        def casts(t):
            return t.is_floating_point() and t.dtype not in (torch.float64, low)

        def cast(t):
            return t.to(low) if casts(t) else t

        if casts(flat[0]):
            flat = rnn_weights.cast(flat, low, where)
        return cast(x), [cast(h) for h in hx], flat

    def _loop_direction(self, x, init, layer, direction):
        """A loop over time steps (κ_state is not the identity): input gates for all steps at once."""
        w = self._named(layer, direction)
        a = self._input_gates(x, w)  # [B, T, G·H]
        if scan_symbolic(x.shape[1]):
            return self._traced_steps(a, init, layer, w, direction)
        steps = range(x.shape[1] - 1, -1, -1) if direction else range(x.shape[1])
        state, outs = init, [None] * x.shape[1]
        for t in steps:
            r = self.cell.state_gates(self.kappa_state[layer](state[0]), w["weight_hh"], w.get("bias_hh"))
            state = self.cell.step(a[:, t], r, state)
            outs[t] = state[0]
        return torch.stack(outs, dim=1)

    def _traced_steps(self, a, init, layer, w, direction):
        """The step loop as the ``scan`` operator over the time axis, for an export trace whose length is a symbol
        (a Python loop would fix it): the fused kernel's layers and the loop form export as one ``scan`` each (ONNX
        ``Scan``). The operator itself, every tensor a step reads passed in (κ_state's by ``functional_call``):
        the ``torch.scan`` function would first run the step through dynamo, seconds per layer in an export."""
        kappa = self.kappa_state[layer]
        names = [n for n, _ in kappa.named_parameters()] + [n for n, _ in kappa.named_buffers()]
        tensors = [t for _, t in kappa.named_parameters()] + [t for _, t in kappa.named_buffers()]
        k, bias = self.cell.states, "bias_hh" in w

        def step(*args):  # the states, the step's input gates, W_hh (, b_hh), κ_state's tensors
            state, a_t, weight = args[:k], args[k], args[k + 1]
            own = dict(zip(names, args[k + 2 + bias:]))
            h = torch.func.functional_call(kappa, own, (state[0],)) if own else kappa(state[0])
            new = self.cell.step(a_t, self.cell.state_gates(h, weight, args[k + 2] if bias else None), state)
            return (*new, new[0].clone())

        xs = a.movedim(1, 0)  # the operator scans dim 0
        xs = xs.flip(0) if direction else xs
        # copies: the weights are views of one flat buffer, and the operator's functionalisation (any
        # run_decompositions, the ONNX conversion's among them) refuses inputs sharing storage
        extra = tuple(t.clone() for t in (w["weight_hh"], *([w["bias_hh"]] if bias else []), *tensors))
        out = torch.ops.higher_order.scan(step, [s.contiguous() for s in init], [xs], extra)[k]
        return (out.flip(0) if direction else out).movedim(0, 1)

    def _linear_terms(self, x, layer, direction):
        """A linear cell's transition A (matrix or vector λ) and driving terms ``u_t = W_ih x_t + b_ih + b_hh``."""
        w = self._named(layer, direction)
        u = self._input_gates(x, w)
        return w["weight_hh"], (u + w["bias_hh"] if "bias_hh" in w else u)

    def _scan_direction(self, x, init, layer, direction):
        """A linear cell by the log-depth parallel scan (``⌈log₂ T⌉`` rounds); backward = the scan on reversed time."""
        a, u = self._linear_terms(x, layer, direction)
        if direction:
            return linear_scan(u.flip(1), a, init[0]).flip(1)
        return linear_scan(u, a, init[0])

    def _selective_direction(self, solve):
        """A selective or complex cell (``components.cells_selective``): ``h_t = a_t ⊙ h_{t−1} + u_t`` with
        ``(a, u)`` from the input, by ``solve(a, u, h0)``, the output read from the states; backward = the same on
        reversed time."""

        def run(x, init, layer, direction):
            w = self._named(layer, direction)
            xs = x.flip(1) if direction else x
            a, u = self.cell.terms(xs, w)
            y = self.cell.readout(solve(a, u, init[0] if self.cell.takes_state else None), xs, w)
            return y.flip(1) if direction else y

        return run

    def extra_repr(self) -> str:
        s = self.spec
        return (f"cell={s.cell}, hidden={s.hidden}, layers={s.layers}, bidirectional={s.bidirectional}, "
                f"lowering={self.lowering()}")

    def lowering(self) -> str:
        """The op that runs (the rewritten term's)."""
        return ", ".join(step.op for step in self.program)


def _cast_first(x) -> bool:
    """torch's kernel gets its inputs in autocast's dtype from the layer (:data:`CAST_FIRST`; on CUDA where cuDNN
    takes them)."""
    return x.device.type in CAST_FIRST and (x.device.type != "cuda" or torch.backends.cudnn.is_acceptable(x))


def _flatten_after_load(module: RecurrentModule, keys) -> None:
    """``load_state_dict(assign=True)`` puts the loaded tensors in place: the flat buffer is made again."""
    module.flatten_parameters()


def _by_scan(a, u, h0):
    """``h_t = a_t ⊙ h_{t−1} + u_t`` by the parallel scan (a constant ``a [S]`` or per step ``[B, T, S]``)."""
    return linear_scan(u, a, h0) if a.dim() == 1 else varying_scan(u, a, h0)


def _by_loop(a, u, h0):
    """``h_t = a_t ⊙ h_{t−1} + u_t`` one step at a time (``a [B, T, S]`` or a constant ``[S]``); an export trace
    whose length is a symbol takes the scan (a loop would fix it)."""
    if scan_symbolic(u.shape[1]):
        return _by_scan(a, u, h0)
    h = u.new_zeros(u.shape[0], u.shape[-1]) if h0 is None else h0.to(u.dtype)
    outs = []
    for t in range(u.shape[1]):
        h = (a if a.dim() == 1 else a[:, t]) * h + u[:, t]
        outs.append(h)
    return torch.stack(outs, dim=1)
