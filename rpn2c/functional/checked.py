"""Input checks made once per input tensor.

An eager check that reads an input's values on the host (a token id's or an edge list's range) is, on a GPU, a
synchronisation per call. A tensor that passed and has not changed since (same storage, layout and version
counter, which every in-place write moves) is not read again: :class:`Checked` remembers it, holding the last few
such tensors so that their storage cannot be reused by another. Inference tensors keep no version counter and
are checked on every call.
"""

from __future__ import annotations

from collections import OrderedDict

from torch import Tensor


def tensor_key(t: Tensor | None):
    """What identifies a tensor's values while it lives: storage, offset, shape, strides, dtype, device and the
    version counter (moved by every in-place write). Inference tensors keep no version counter: callers skip them."""
    if t is None:
        return None
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype,
            t.device, t._version)


class Checked:
    """The tensors that passed one check (with its ``context``: the bound checked against), at most ``keep``."""

    def __init__(self, keep: int = 16):
        self.keep = keep
        self._held: OrderedDict = OrderedDict()  # (tensor_key, *context) -> the tensor, held alive

    def passed(self, t: Tensor, *context) -> bool:
        """``t`` passed this check with ``context`` and is unchanged since."""
        key = None if t.is_inference() else (tensor_key(t), *context)
        if key is None or key not in self._held:
            return False
        self._held.move_to_end(key)
        return True

    def add(self, t: Tensor, *context) -> None:
        """Remember that ``t`` passed with ``context`` (not an inference tensor: it would pass unread later)."""
        if t.is_inference():
            return
        self._held[(tensor_key(t), *context)] = t
        while len(self._held) > self.keep:
            self._held.popitem(last=False)

    def clear(self) -> None:
        """Forget every tensor (and release them)."""
        self._held.clear()
