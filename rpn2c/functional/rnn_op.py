"""torch's fused recurrent kernels as opaque custom ops, so a compiled graph keeps them on every device.

Inside ``torch.compile`` AOTAutograd decomposes ``torch._VF.rnn_tanh/rnn_relu/gru`` everywhere, and ``lstm``
everywhere but in oneDNN's CPU inference layer (``mkldnn_rnn_layer``, which it cannot differentiate in
torch <= 2.13, pytorch/pytorch#158007), into a loop over time steps: cuDNN's kernel is replaced by T small
steps, and the compile time grows with T. ``rpn2c::<kernel>`` (``rpn2c::lstm``, ``rpn2c::gru``,
``rpn2c::rnn_tanh``, ``rpn2c::rnn_relu``) hides the kernel from the tracer: its forward is ``torch._VF.<kernel>``
(batch-first, output sequence only, no dropout) and its backward is a second opaque op,
``rpn2c::<kernel>_backward``, returning the gradients of the input, the initial states and every weight.

With ``record=True`` (a module in training mode) the forward runs the kernel under autograd and keeps its tape
(the kernel's own saved activations, as eager autograd keeps them); the backward replays it. Tapes are keyed by
the output's storage and checked against the address and version counter of every input, so a tape is replayed
only for the very tensors it was recorded on; at most ``_KEEP`` tapes are held (a forward whose backward never
comes is dropped after that). Without a matching tape the backward runs the kernel again under autograd, a
recomputation. Random dropout between layers could not be replayed by a recomputation, so callers run one layer
per op call and drop out between calls.

The ops run in their inputs' dtype (autocast is off inside; callers cast as torch's autocast would,
:func:`autocast_dtype`); where the CPU lacks the kernel in autocast's dtype (oneDNN's bfloat16 LSTM without
AVX-512), callers run it in float32 and cast its output (:func:`cpu_fallback`). A kernel
differentiated on an accelerator runs in its training-mode form (cuDNN keeps no backward for its inference
form), which without dropout computes the same values (:func:`kernel_train`).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict

import torch
from torch import Tensor

KERNELS = ("lstm", "gru", "rnn_tanh", "rnn_relu")
_KEEP = 8
_TAPES: OrderedDict = OrderedDict()  # output storage -> (input stamps, the kernel's output under autograd, leaves)


def kernel_train(training: bool, device_type: str, grad: bool) -> bool:
    """The kernel's ``train`` flag: the module's mode, or True where an accelerator's kernel (cuDNN) must be
    differentiated (its inference form has no backward). Dropout stays the module's: 0 outside training."""
    return training or (grad and device_type != "cpu")


def compiled_route(kernel: str, device_type: str, dtype: torch.dtype, grad: bool) -> str:
    """How a compiled graph runs the fused kernel: ``"native"`` (``torch._VF`` itself) only where AOTAutograd
    keeps a kernel (oneDNN's LSTM layer: CPU, float32/bfloat16, no gradient); else ``"opaque"`` (``rpn2c::<kernel>``)
    where it would unroll time steps."""
    onednn = (kernel == "lstm" and device_type == "cpu" and dtype in (torch.float32, torch.bfloat16)
              and _onednn_enabled())
    return "native" if onednn and not grad else "opaque"


def autocast_dtype(kernel: str, device_type: str, dtype: torch.dtype, autocast: torch.dtype | None):
    """The dtype torch's autocast (``autocast``: its dtype, None when off) runs this kernel in, so the op can be
    fed what eager would compute with: cuDNN's RNNs float16 whatever the autocast dtype (ATen's
    ``_cudnn_rnn_cast_reflatten``); oneDNN's CPU LSTM the autocast dtype; the CPU GRU/RNN the input's dtype (its
    state follows the input). None: no cast (autocast off, or a float64 input, which autocast leaves alone)."""
    if autocast is None or dtype == torch.float64:
        return None
    if device_type == "cuda":
        return torch.float16
    return autocast if kernel == "lstm" else dtype


def _constant_result(fn):
    """``torch.compiler.assume_constant_result`` without importing ``torch._dynamo`` (3 s on a CPU machine) for a
    model that is never compiled: that decorator imports dynamo only to set this one mark, which dynamo reads."""
    fn._dynamo_marked_constant = True
    return fn


def cpu_fallback(kernel: str, device_type: str, dtype: torch.dtype, autocast: torch.dtype | None):
    """The autocast dtype (``autocast``: None when off) that this CPU cannot run the kernel in, where eager autocast
    would send it there: oneDNN's LSTM, fed a float32 input, in bfloat16 without AVX-512 (float16 without AVX-512
    FP16 or AMX) has no primitive (``could not create a primitive descriptor``). The caller then runs the kernel in
    float32 with autocast off and casts its output to that dtype, what the kernel would return. None: no fallback."""
    if (autocast is None or kernel != "lstm" or device_type != "cpu" or dtype != torch.float32
            or not _onednn_enabled()):
        return None
    return None if _onednn_runs(autocast) else autocast


_ONEDNN_RUNS: dict = {}


@_constant_result
def _onednn_runs(dtype: torch.dtype) -> bool:
    """oneDNN runs ``dtype`` (bfloat16, float16) on this CPU (torch's own check, asked once), a constant to the
    tracer."""
    if dtype not in _ONEDNN_RUNS:
        check = {torch.bfloat16: "_is_mkldnn_bf16_supported", torch.float16: "_is_mkldnn_fp16_supported"}.get(dtype)
        probe = getattr(torch.ops.mkldnn, check, None) if check else None
        _ONEDNN_RUNS[dtype] = bool(probe()) if probe is not None else True
    return _ONEDNN_RUNS[dtype]


@_constant_result
def exporting() -> bool:
    """``torch.export`` is capturing the graph (its own flag, read once per trace). Not
    ``torch.compiler.is_exporting()``: dynamo before torch 2.13 folds that to True under ``torch.compile`` too."""
    flag = getattr(torch.compiler, "_is_exporting_flag", None)
    return bool(flag) if flag is not None else torch.compiler.is_exporting()


@_constant_result
def _onednn_enabled() -> bool:
    """oneDNN on (``torch.backends.mkldnn.enabled``), a constant to the tracer."""
    return torch._C._get_mkldnn_enabled()


def _stamp(tensors) -> tuple:
    """Where each tensor lives and how often it was modified in place: equal stamps, equal values."""
    return tuple((t.data_ptr(), t._version, tuple(t.shape)) for t in tensors)


@contextlib.contextmanager
def _autograd_on():
    """Autograd inside a custom op's implementation, which runs with the autograd dispatch key excluded."""
    key = torch._C.DispatchKey.AutogradFunctionality
    excluded = torch._C._dispatch_tls_is_dispatch_key_excluded(key)
    torch._C._dispatch_tls_set_dispatch_key_excluded(key, False)
    try:
        with torch.enable_grad():
            yield
    finally:
        torch._C._dispatch_tls_set_dispatch_key_excluded(key, excluded)


def _run(kernel, x, hx, weights, has_bias, layers, bidirectional, grad):
    """``torch._VF.<kernel>`` batch-first without dropout; ``hx`` is ``[h0]`` or ``[h0, c0]``."""
    state = tuple(hx) if kernel == "lstm" else hx[0]
    train = kernel_train(False, x.device.type, grad)
    with torch.autocast(x.device.type, enabled=False):
        return getattr(torch._VF, kernel)(x, state, weights, has_bias, layers, 0.0, train, bidirectional, True)[0]


def _taped(kernel, x, hx, weights, has_bias, layers, bidirectional):
    """The kernel under autograd on fresh leaves: (its output, the leaves)."""
    with _autograd_on():
        leaves = [t.detach().requires_grad_(True) for t in (x, *hx, *weights)]
        n = 1 + len(hx)
        return _run(kernel, leaves[0], leaves[1:n], leaves[n:], has_bias, layers, bidirectional, True), leaves


def unaliased(tensors: list[Tensor], inputs) -> list[Tensor]:
    """``tensors`` with every one that shares storage with an input or an earlier one copied, as a custom op's
    returns must be: cuDNN's backward writes the weight gradients into one flat buffer and returns views of it."""
    seen = {t.untyped_storage().data_ptr() for t in inputs}
    out = []
    for t in tensors:
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            t = t.clone(memory_format=torch.contiguous_format)
            ptr = t.untyped_storage().data_ptr()
        seen.add(ptr)
        out.append(t)
    return out


def _define(kernel: str):
    """``rpn2c::<kernel>`` and ``rpn2c::<kernel>_backward``, the forward differentiable through the latter."""

    def forward(x: Tensor, hx: list[Tensor], weights: list[Tensor], has_bias: bool, layers: int,
                bidirectional: bool, record: bool) -> Tensor:
        if not record:
            return _run(kernel, x, hx, weights, has_bias, layers, bidirectional, False).contiguous()
        out, leaves = _taped(kernel, x, hx, weights, has_bias, layers, bidirectional)
        result = out.detach().clone(memory_format=torch.contiguous_format)
        _TAPES[result.data_ptr()] = (_stamp((x, *hx, *weights)), out, leaves)
        while len(_TAPES) > _KEEP:
            _TAPES.popitem(last=False)
        return result

    def backward(grad: Tensor, output: Tensor, x: Tensor, hx: list[Tensor], weights: list[Tensor],
                 has_bias: bool, layers: int, bidirectional: bool) -> list[Tensor]:
        tape = _TAPES.pop(output.data_ptr(), None)
        if tape is not None and tape[0] != _stamp((x, *hx, *weights)):
            tape = None  # recorded on other tensors, or on these before they changed
        with _autograd_on():
            out, leaves = tape[1:] if tape is not None else _taped(kernel, x, hx, weights, has_bias, layers,
                                                                    bidirectional)
            grads = torch.autograd.grad(out, leaves, grad, allow_unused=True)
        return unaliased([torch.zeros(t.shape, dtype=t.dtype, device=t.device) if g is None else g.contiguous()
                          for g, t in zip(grads, leaves)], (grad, output, x, *hx, *weights))

    forward.__doc__ = (f"The output sequence ``[B, T, H·directions]`` of a stacked ``{kernel}`` without dropout "
                       "(batch-first).")
    backward.__doc__ = (f"Gradients ``[dx, *dhx, *dweights]`` of ``<grad, {kernel}(...)>``: the forward's tape "
                        "when it kept one, else the kernel run again under autograd.")
    op = torch.library.custom_op(f"rpn2c::{kernel}", forward, mutates_args=())
    op_backward = torch.library.custom_op(f"rpn2c::{kernel}_backward", backward, mutates_args=())

    @op.register_fake
    def _(x, hx, weights, has_bias, layers, bidirectional, record):
        return x.new_empty(x.shape[0], x.shape[1], hx[0].shape[-1] * (2 if bidirectional else 1))

    @op_backward.register_fake
    def _(grad, output, x, hx, weights, has_bias, layers, bidirectional):
        return [t.new_empty(t.shape) for t in (x, *hx, *weights)]

    def setup(ctx, inputs, output):
        x, hx, weights, has_bias, layers, bidirectional, _ = inputs
        ctx.save_for_backward(output, x, *hx, *weights)
        ctx.states, ctx.args = len(hx), (has_bias, layers, bidirectional)

    def differentiate(ctx, grad):
        output, x, *rest = ctx.saved_tensors
        hx, weights = rest[: ctx.states], rest[ctx.states:]
        dx, *d = op_backward(grad.contiguous(), output, x, hx, weights, *ctx.args)
        return dx, d[: ctx.states], d[ctx.states:], None, None, None, None

    op.register_autograd(differentiate, setup_context=setup)
    return op, op_backward


OPS = {kernel: _define(kernel) for kernel in KERNELS}  # kernel -> (forward op, backward op)
lstm, lstm_backward = OPS["lstm"]
gru, gru_backward = OPS["gru"]
