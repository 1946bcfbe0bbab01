"""The fused recurrent kernels' weights as views of one flat buffer, as ``nn.LSTM`` keeps them.

A fused kernel call (``torch._VF.lstm/gru/rnn_tanh/rnn_relu``) reads a weight list ``[W_ih, W_hh (, b_ih, b_hh)]``
per layer and direction. cuDNN computes on one buffer in its own layout: handed separate tensors, ATen copies them
into a fresh buffer on every call (``_cudnn_rnn``'s compaction, a copy per tensor and fills, each step); handed
views of such a buffer at cuDNN's offsets, it uses them in place. :func:`flatten` makes them so, as
``nn.RNNBase.flatten_parameters`` does: on CUDA with cuDNN, ATen's own ``_cudnn_rnn_flatten_weight`` (cuDNN's
offsets); elsewhere one contiguous buffer in the kernel's order, which the CPU kernels read as they read separate
tensors, no copy added. Each tensor keeps its identity (``set_`` in place, gradient off), so names, values,
``state_dict`` and optimiser state are unchanged, and autograd still gives each its own gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

MODES = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN_TANH", "rnn_relu": "RNN_RELU"}


def flatten(tensors: list[Tensor], kernel: str, input_size: int, hidden: int, layers: int, bidirectional: bool,
            has_bias: bool) -> bool:
    """Make ``tensors`` (one kernel call's weight list: ``layers``·directions groups of 4, or 2 without bias) views
    of one buffer in place. cuDNN's layout is made again whenever cuDNN takes them (as ``nn.LSTM`` after every
    ``_apply``); any other layout only where they are not one buffer yet (:func:`is_flat`), so a storage moved in
    place (``share_memory_``) stays. False, nothing changed, where they cannot be: not plain tensors (a tensor
    subclass: DTensor, fake), mixed dtypes or devices, meta or inference tensors, tensors aliasing one another
    (torch's own condition), or inside a trace."""
    if not _plain(tensors):
        return False
    with torch.no_grad():
        if _cudnn(tensors):
            import torch.backends.cudnn.rnn as cudnn_rnn

            with torch.cuda.device_of(tensors[0]):
                torch._cudnn_rnn_flatten_weight(tensors, 4 if has_bias else 2, input_size,
                                                cudnn_rnn.get_cudnn_mode(MODES[kernel]), hidden, 0, layers, True,
                                                bidirectional)
            return True
        if is_flat(tensors):
            return True
        first = tensors[0]
        buffer = torch.empty(sum(t.numel() for t in tensors), dtype=first.dtype, device=first.device)
        offset = 0
        for t in tensors:
            view = buffer[offset: offset + t.numel()].view(t.shape)
            view.copy_(t)
            t.set_(view)
            offset += t.numel()
    return True


def is_flat(tensors: list[Tensor]) -> bool:
    """``tensors`` are contiguous views of one storage, in order and disjoint: the layout of a flat buffer (cuDNN's
    offsets included)."""
    storage, end = tensors[0].untyped_storage().data_ptr(), 0
    for t in tensors:
        if t.untyped_storage().data_ptr() != storage or not t.is_contiguous() or t.storage_offset() < end:
            return False
        end = t.storage_offset() + t.numel()
    return True


def _plain(tensors: list[Tensor]) -> bool:
    """Tensors a flat buffer can hold: plain, one dtype and device (not meta), no inference tensor, no two aliasing
    (``nn.RNNBase.flatten_parameters`` then keeps them apart too), outside a trace."""
    if not tensors or torch.compiler.is_compiling():
        return False
    first = tensors[0]
    if any(type(t) not in (Tensor, nn.Parameter) or t.dtype != first.dtype or t.device != first.device
           or t.is_inference() for t in tensors):
        return False
    return first.device.type != "meta" and len({t.data_ptr() for t in tensors}) == len(tensors)


def _cudnn(tensors: list[Tensor]) -> bool:
    """cuDNN would run the kernel on these tensors and ATen flattens for it (``nn.RNNBase.flatten_parameters``'s
    test)."""
    return (tensors[0].is_cuda and torch._use_cudnn_rnn_flatten_weight()
            and all(torch.backends.cudnn.is_acceptable(t) for t in tensors))
