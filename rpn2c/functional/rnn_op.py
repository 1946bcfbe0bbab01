"""torch's fused LSTM kernel as an opaque custom op, so a compiled graph can keep it on CPU.

AOTAutograd cannot differentiate oneDNN's ``mkldnn_rnn_layer`` in torch <= 2.13 (pytorch/pytorch#158007), so
inside ``torch.compile`` the fused ``torch._VF.lstm`` was replaced by a loop over time steps. ``rpn2c::lstm``
hides the kernel from the tracer: its forward is ``torch._VF.lstm`` (batch-first, output sequence only) and its
backward is a second opaque op, ``rpn2c::lstm_backward``, returning the gradients of the input, the initial states
and every weight.

With ``record=True`` (a module in training mode) the forward runs the kernel under autograd and keeps its tape
(the kernel's own saved activations, as eager autograd keeps them); the backward replays it. Tapes are keyed by
the output's storage and checked against the address and version counter of every input, so a tape is replayed
only for the very tensors it was recorded on; at most ``_KEEP`` tapes are held (a forward whose backward never
comes is dropped after that). Without a matching tape the backward runs the kernel again under autograd, a
recomputation. Random dropout between layers could not be replayed by a recomputation, so callers use the op
only without it.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict

import torch
from torch import Tensor

_KEEP = 4
_TAPES: OrderedDict = OrderedDict()  # output storage -> (input stamps, the kernel's output under autograd, leaves)


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


def _run(x, h0, c0, weights, has_bias, layers, bidirectional):
    return torch._VF.lstm(x, (h0, c0), weights, has_bias, layers, 0.0, False, bidirectional, True)[0]


def _taped(x, h0, c0, weights, has_bias, layers, bidirectional):
    """The kernel under autograd on fresh leaves: (its output, the leaves)."""
    with _autograd_on():
        leaves = [t.detach().requires_grad_(True) for t in (x, h0, c0, *weights)]
        return _run(leaves[0], leaves[1], leaves[2], leaves[3:], has_bias, layers, bidirectional), leaves


@torch.library.custom_op("rpn2c::lstm", mutates_args=())
def lstm(x: Tensor, h0: Tensor, c0: Tensor, weights: list[Tensor], has_bias: bool, layers: int,
         bidirectional: bool, record: bool) -> Tensor:
    """The output sequence ``[B, T, H·directions]`` of a stacked LSTM without dropout (batch-first)."""
    if not record:
        return _run(x, h0, c0, weights, has_bias, layers, bidirectional).contiguous()
    out, leaves = _taped(x, h0, c0, weights, has_bias, layers, bidirectional)
    result = out.detach().clone(memory_format=torch.contiguous_format)
    _TAPES[result.data_ptr()] = (_stamp((x, h0, c0, *weights)), out, leaves)
    while len(_TAPES) > _KEEP:
        _TAPES.popitem(last=False)
    return result


@lstm.register_fake
def _(x, h0, c0, weights, has_bias, layers, bidirectional, record):
    return x.new_empty(x.shape[0], x.shape[1], h0.shape[-1] * (2 if bidirectional else 1))


@torch.library.custom_op("rpn2c::lstm_backward", mutates_args=())
def lstm_backward(grad: Tensor, output: Tensor, x: Tensor, h0: Tensor, c0: Tensor, weights: list[Tensor],
                  has_bias: bool, layers: int, bidirectional: bool) -> list[Tensor]:
    """Gradients ``[dx, dh0, dc0, *dweights]`` of ``<grad, lstm(...)>``: the forward's tape when it kept one,
    else the kernel run again under autograd."""
    tape = _TAPES.pop(output.data_ptr(), None)
    if tape is not None and tape[0] != _stamp((x, h0, c0, *weights)):
        tape = None  # recorded on other tensors, or on these before they changed
    with _autograd_on():
        out, leaves = tape[1:] if tape is not None else _taped(x, h0, c0, weights, has_bias, layers, bidirectional)
        grads = torch.autograd.grad(out, leaves, grad, allow_unused=True)
    return [torch.zeros(t.shape, dtype=t.dtype, device=t.device) if g is None else g.contiguous()
            for g, t in zip(grads, leaves)]


@lstm_backward.register_fake
def _(grad, output, x, h0, c0, weights, has_bias, layers, bidirectional):
    return [t.new_empty(t.shape) for t in (x, h0, c0, *weights)]


def _setup(ctx, inputs, output):
    x, h0, c0, weights, has_bias, layers, bidirectional, _ = inputs
    ctx.save_for_backward(output, x, h0, c0, *weights)
    ctx.args = (has_bias, layers, bidirectional)


def _backward(ctx, grad):
    output, x, h0, c0, *weights = ctx.saved_tensors
    dx, dh0, dc0, *dw = lstm_backward(grad.contiguous(), output, x, h0, c0, weights, *ctx.args)
    return dx, dh0, dc0, dw, None, None, None, None


lstm.register_autograd(_backward, setup_context=_setup)
