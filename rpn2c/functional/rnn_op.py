"""torch's fused LSTM kernel as an opaque custom op, so a compiled graph can keep it on CPU.

AOTAutograd cannot differentiate oneDNN's ``mkldnn_rnn_layer`` in torch <= 2.13 (pytorch/pytorch#158007), so
inside ``torch.compile`` the fused ``torch._VF.lstm`` was replaced by a loop over time steps. ``rpn2c::lstm``
hides the kernel from the tracer: its forward is ``torch._VF.lstm`` (batch-first, output sequence only) and its
backward is a second opaque op, ``rpn2c::lstm_backward``, which runs the kernel again under autograd and returns
the gradients of the input, the initial states and every weight (a recomputation: no activations are stored
between forward and backward). Random dropout between layers would not be reproduced by the recomputation, so
callers use the op only without it.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor


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
    return torch._VF.lstm(x, (h0, c0), weights, has_bias, layers, 0.0, False, bidirectional, True)[0].contiguous()


@torch.library.custom_op("rpn2c::lstm", mutates_args=())
def lstm(x: Tensor, h0: Tensor, c0: Tensor, weights: list[Tensor], has_bias: bool, layers: int,
         bidirectional: bool) -> Tensor:
    """The output sequence ``[B, T, H·directions]`` of a stacked LSTM without dropout (batch-first)."""
    return _run(x, h0, c0, weights, has_bias, layers, bidirectional)


@lstm.register_fake
def _(x, h0, c0, weights, has_bias, layers, bidirectional):
    return x.new_empty(x.shape[0], x.shape[1], h0.shape[-1] * (2 if bidirectional else 1))


@torch.library.custom_op("rpn2c::lstm_backward", mutates_args=())
def lstm_backward(grad: Tensor, x: Tensor, h0: Tensor, c0: Tensor, weights: list[Tensor], has_bias: bool,
                  layers: int, bidirectional: bool) -> list[Tensor]:
    """Gradients ``[dx, dh0, dc0, *dweights]`` of ``<grad, lstm(...)>``, by running the kernel under autograd."""
    with _autograd_on():
        leaves = [t.detach().requires_grad_(True) for t in (x, h0, c0, *weights)]
        out = _run(leaves[0], leaves[1], leaves[2], leaves[3:], has_bias, layers, bidirectional)
        grads = torch.autograd.grad(out, leaves, grad, allow_unused=True)
    return [torch.zeros(t.shape, dtype=t.dtype, device=t.device) if g is None else g.contiguous()
            for g, t in zip(grads, leaves)]


@lstm_backward.register_fake
def _(grad, x, h0, c0, weights, has_bias, layers, bidirectional):
    return [t.new_empty(t.shape) for t in (x, h0, c0, *weights)]


def _setup(ctx, inputs, output):
    x, h0, c0, weights, has_bias, layers, bidirectional = inputs
    ctx.save_for_backward(x, h0, c0, *weights)
    ctx.n_weights, ctx.args = len(weights), (has_bias, layers, bidirectional)


def _backward(ctx, grad):
    x, h0, c0, *weights = ctx.saved_tensors
    dx, dh0, dc0, *dw = lstm_backward(grad.contiguous(), x, h0, c0, weights, *ctx.args)
    return dx, dh0, dc0, dw, None, None, None


lstm.register_autograd(_backward, setup_context=_setup)
