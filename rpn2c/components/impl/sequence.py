"""The ``nn.Module`` implementations of :mod:`rpn2c.components.sequence` (imported when a model is built)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rpn2c.errors import InputError
from rpn2c.functional.checked import Checked


_CHECKED = Checked()  # the token-id tensors on an accelerator that passed, by the vocabulary checked against
READ_EVERY_CALL = ("cpu", "meta")  # devices whose ids are read on every call (no synchronisation to save)


def check_token_ids(x: torch.Tensor, vocab: int) -> None:
    """Raise a clear error unless ``x`` holds integer ids in ``[0, vocab)`` (the first offender is named).

    One pass over the ids (``aminmax``) and one read of its two values by the host; the offender is looked for only
    when the bounds fail. On an accelerator that read is a synchronisation, made once per input tensor: ids that
    passed and are unchanged since (same storage and version counter, :class:`rpn2c.functional.checked.Checked`)
    are not read again. CPU ids are read on every call (no synchronisation to save, and a buffer refilled behind
    torch's back, as ``torch.from_numpy`` shares one, is still checked)."""
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise InputError(f"embedding(vocab = {vocab}) reads integer token ids, got a {x.dtype} tensor")
    if x.numel() == 0:
        return
    cached = x.device.type not in READ_EVERY_CALL
    if cached and _CHECKED.passed(x, vocab):
        return
    lo, hi = torch.stack(x.aminmax()).tolist()
    if lo < 0 or hi >= vocab:
        bad = (x < 0) | (x >= vocab)
        at = tuple(int(i) for i in bad.nonzero()[0])
        raise InputError(f"embedding(vocab = {vocab}): token id {int(x[at])} at index {at} is out of range "
                         f"[0, {vocab})")
    if cached:
        _CHECKED.add(x, vocab)


def sinusoid_table(n: int, d: int, base: float = 10000.0, dtype=None) -> torch.Tensor:
    """The Transformer paper's table ``[n, d]``: ``P[t, 2i] = sin(t / base^{2i/d})``, ``P[t, 2i+1] = cos(...)``
    (float64 unless ``dtype`` is given)."""
    dtype = torch.float64 if dtype is None else dtype

    pos = torch.arange(n, dtype=torch.float64)[:, None]
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    table = torch.zeros(n, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv)
    table[:, 1::2] = torch.cos(pos * inv[: d // 2])
    return table.to(dtype)


class _EmbeddingModule(nn.Module):
    def __init__(self, vocab: int, dim: int, padding_idx: int | None):
        super().__init__()
        self.vocab, self.padding_idx = vocab, padding_idx
        self.weight = nn.Parameter(torch.randn(vocab, dim))  # nn.Embedding's N(0, 1)
        if padding_idx is not None:
            with torch.no_grad():
                self.weight[padding_idx].zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.compiler.is_compiling():
            check_token_ids(x, self.vocab)
        return F.embedding(x, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        return f"vocab={self.vocab}, dim={self.weight.shape[1]}, padding_idx={self.padding_idx}"


class _SinusoidalModule(nn.Module):
    """``x + P[:T]``; P is a float64 buffer (not saved: it is a function of T and d) of ``cached`` rows, computed
    afresh for longer sequences."""

    def __init__(self, cached: int, d: int, base: float):
        super().__init__()
        self.base = base
        self.register_buffer("table", sinusoid_table(cached, d, base), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, d = x.shape[-2], x.shape[-1]
        table = self.table[:n] if n <= self.table.shape[0] else sinusoid_table(n, d, self.base).to(x.device)
        return x + table.to(x.dtype)


class _LearnedModule(nn.Module):
    def __init__(self, max_len: int, d: int, scale: float = 1.0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, d) * 0.02)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-2]
        if n > self.weight.shape[0]:
            raise InputError(f"learned_position(max_len = {self.weight.shape[0]}) got a sequence of {n} items: "
                             f"feed at most {self.weight.shape[0]}, or raise max_len")
        return x + (self.weight[:n] if self.scale == 1.0 else self.weight[:n] * self.scale)


class _PrependModule(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.token = nn.Parameter(torch.randn(d) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.token.to(x.dtype).expand(x.shape[0], 1, -1), x], dim=1)


class _SliceModule(nn.Module):
    def __init__(self, start: int, stop: int | None, need: int):
        super().__init__()
        self.start, self.stop, self.need = start, stop, need

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] < self.need:
            raise ValueError(f"slice(start = {self.start}, stop = {self.stop}) needs at least {self.need} items, "
                             f"got a sequence of {x.shape[1]}")
        return x[:, self.start:self.stop]

    def extra_repr(self) -> str:
        return f"start={self.start}, stop={self.stop}"
