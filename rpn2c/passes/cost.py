"""A small cost model: floating-point operations and bytes moved, per sample, from the inferred types.

Symbolic dimensions (``T``, ``N``, ``E`` ...) take size hints; the batch axis is left out (every figure is per
sample). Estimates rank alternatives and explain a choice; they are not timings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rpn2c.ir.types import is_known

HINTS = {"items": 128, "edges_per_item": 8}  # an unknown item count, and edges per item for graphs


@dataclass(frozen=True)
class Cost:
    """Estimated (before, after) multiply-adds and bytes of intermediates for one sample."""

    flops_before: float
    flops_after: float
    bytes_before: float
    bytes_after: float

    def to_json(self) -> dict:
        return {"flops_before": self.flops_before, "flops_after": self.flops_after,
                "bytes_before": self.bytes_before, "bytes_after": self.bytes_after}

    def __str__(self) -> str:
        return (f"{human(self.flops_before)}FLOP → {human(self.flops_after)}FLOP, "
                f"{human(self.bytes_before)}B → {human(self.bytes_after)}B per sample")


def human(v: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.3g} "


def size(v, hint: int | None = None) -> int:
    """A dimension's size: its value when known, else a hint."""
    return int(v) if is_known(v) else (hint if hint is not None else HINTS["items"])


def elements(*dims) -> int:
    return math.prod(size(d) for d in dims)
