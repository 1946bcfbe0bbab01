"""The fused recurrent kernels' weights as views of one flat buffer, as ``nn.LSTM`` keeps them.

A fused kernel call (``torch._VF.lstm/gru/rnn_tanh/rnn_relu``) reads a weight list ``[W_ih, W_hh (, b_ih, b_hh)]``
per layer and direction. cuDNN computes on one buffer in its own layout: handed separate tensors, ATen copies them
into a fresh buffer on every call (``_cudnn_rnn``'s compaction, a copy per tensor and fills, each step); handed
views of such a buffer at cuDNN's offsets, it uses them in place. :func:`flatten` makes them so, as
``nn.RNNBase.flatten_parameters`` does: on CUDA with cuDNN, ATen's own ``_cudnn_rnn_flatten_weight`` (cuDNN's
offsets); elsewhere one contiguous buffer in the kernel's order, which the CPU kernels read as they read separate
tensors, no copy added. Each tensor keeps its identity (``set_`` in place, gradient off), so names, values,
``state_dict`` and optimiser state are unchanged, and autograd still gives each its own gradient.

Under autocast the kernel runs in a lower dtype: :func:`cast` casts the buffer once and hands the kernel views of
the cast buffer at the offsets it expects (:func:`layout`; on cuDNN its layout for that dtype, :func:`cudnn_layout`),
where a cast of each tensor would give cuDNN separate tensors to compact again.
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
            _cudnn_flatten(tensors, kernel, input_size, hidden, layers, bidirectional, has_bias)
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


def _cudnn_flatten(tensors, kernel, input_size, hidden, layers, bidirectional, has_bias) -> None:
    """ATen's ``_cudnn_rnn_flatten_weight``: a fresh buffer in cuDNN's layout, each tensor ``set_`` to its view."""
    import torch.backends.cudnn.rnn as cudnn_rnn

    with torch.cuda.device_of(tensors[0]):
        torch._cudnn_rnn_flatten_weight(tensors, 4 if has_bias else 2, input_size,
                                        cudnn_rnn.get_cudnn_mode(MODES[kernel]), hidden, 0, layers, True,
                                        bidirectional)


def cudnn_layout(tensors: list[Tensor], kernel: str, input_size: int, hidden: int, layers: int,
                 bidirectional: bool, has_bias: bool, dtype: torch.dtype):
    """Where cuDNN lays out tensors of these shapes in a buffer of ``dtype`` (:func:`layout` of empty stand-ins
    flattened by ATen, as :func:`flatten` does the tensors): the offsets a cast of their flat buffer follows, so
    that cuDNN takes the cast buffer in place. None where cuDNN would not run them."""
    if not _plain(tensors) or not _cudnn(tensors):
        return None
    with torch.no_grad():
        stand_ins = [torch.empty(t.shape, dtype=dtype, device=t.device) for t in tensors]
        _cudnn_flatten(stand_ins, kernel, input_size, hidden, layers, bidirectional, has_bias)
    return layout(stand_ins)


def layout(tensors: list[Tensor]) -> tuple[tuple[int, ...], int] | None:
    """Where each tensor starts in the one buffer they are views of (element offsets, any order) and the buffer's
    length in elements; None where they are not contiguous views of one storage."""
    storage = tensors[0].untyped_storage()
    if any(t.untyped_storage().data_ptr() != storage.data_ptr() or not t.is_contiguous() or t.dtype != tensors[0].dtype
           for t in tensors):
        return None
    return tuple(t.storage_offset() for t in tensors), storage.nbytes() // tensors[0].element_size()


def cast(tensors: list[Tensor], dtype: torch.dtype, where: tuple[tuple[int, ...], int] | None = None) -> list[Tensor]:
    """``tensors`` in ``dtype`` as views of one new buffer, cast in one operation: ``b = cat(pieces).to(dtype)``,
    the pieces the flattened tensors in the order of their offsets in ``where`` (a :func:`layout`: their flat
    buffer's, or cuDNN's for ``dtype``, :func:`cudnn_layout`) with zeros in its gaps, so that each view
    ``b[o_i : o_i + n_i]`` sits where the kernel looks for it; packed in the given order without ``where`` (or
    where it cannot hold them). Differentiable: each tensor's gradient is its slice of ``b``'s, cast back."""
    sizes = [t.numel() for t in tensors]
    offsets, length = where if where is not None else (None, 0)
    if offsets is None or _overlap(offsets, sizes, length):
        offsets = [sum(sizes[:i]) for i in range(len(sizes))]
        length = sum(sizes)
    order = sorted(range(len(tensors)), key=offsets.__getitem__)
    pieces, widths, slot, end = [], [], [0] * len(tensors), 0
    for i in order:
        if offsets[i] > end:  # a gap of the flat buffer (none in a packed one)
            pieces.append(tensors[i].new_zeros(offsets[i] - end))
            widths.append(offsets[i] - end)
        slot[i] = len(pieces)
        pieces.append(tensors[i].reshape(-1))
        widths.append(sizes[i])
        end = offsets[i] + sizes[i]
    if length > end:
        pieces.append(tensors[0].new_zeros(length - end))
        widths.append(length - end)
    parts = torch.cat(pieces).to(dtype).split(widths)
    return [parts[slot[i]].view(t.shape) for i, t in enumerate(tensors)]


def _overlap(offsets, sizes, length: int) -> bool:
    """The offsets cannot hold tensors of ``sizes`` in a buffer of ``length``: a count that differs, two spans that
    overlap, or one past the end."""
    if len(offsets) != len(sizes):
        return True
    spans = sorted(zip(offsets, sizes))
    return spans[0][0] < 0 or spans[-1][0] + spans[-1][1] > length or any(
        o + n > o2 for (o, n), (o2, _) in zip(spans, spans[1:]))


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
