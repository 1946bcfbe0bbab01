"""The sizes a model allows its symbolic input dims, beyond what the check fixes: what its ops need of the axis
lengths they read (``Op.axis_limits``: learned_position's ``T <= max_len``, a readout's ``T >= k + 1``) and every
length of every value at least 1 (a convolution without padding over a signal of ``T`` steps needs
``T - k + 1 >= 1``), each solved for the symbols in it with the others at their example sizes. The inputs ``rpn2c
export`` and ``show`` make up are sized within them, and an export's dynamic dims are bounded by them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rpn2c.ir.estimate import dim_size

CAP = 2**31  # the largest size searched
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class Limit:
    """The sizes ``[fewest, most]`` (``most`` None: no upper bound) a symbol may take, and what sets ``most``."""

    fewest: int = 1
    most: int | None = None
    why: str = field(default="")

    def clamp(self, size: int) -> int:
        """``size`` within the limit (the upper bound wins a conflict: the model cannot run above it)."""
        size = max(size, self.fewest)
        return size if self.most is None else min(size, self.most)

    def holds(self, size: int) -> bool:
        return self.fewest <= size and (self.most is None or size <= self.most)


def _value(expr, symbol: str, sizes: dict[str, int], v: int) -> int:
    return dim_size(expr, {**sizes, symbol: v}, least=-CAP)


def _solve(expr, symbol: str, sizes: dict[str, int], fewest: int, most: int | None) -> tuple[int, int | None]:
    """The sizes of ``symbol`` that keep ``expr`` (non-decreasing in it) within ``[fewest, most]``, the other
    symbols at ``sizes``: ``(least, greatest or None)``; ``least > greatest`` when none does."""
    lo, hi = 1, CAP
    if _value(expr, symbol, sizes, hi) < fewest:
        return CAP + 1, None
    while lo < hi:  # the least v with expr(v) >= fewest
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if _value(expr, symbol, sizes, mid) < fewest else (lo, mid)
    least = lo
    if most is None or _value(expr, symbol, sizes, CAP) <= most:
        return least, None
    if _value(expr, symbol, sizes, 1) > most:
        return least, 0
    lo, hi = 1, CAP
    while lo < hi:  # the greatest v with expr(v) <= most
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if _value(expr, symbol, sizes, mid) <= most else (lo, mid - 1)
    return least, lo


def _needs(graph):
    """``(length, fewest, most, what)`` of every symbolic axis length of the graph: each value's dims at least 1,
    and what each op states of the axes it reads."""
    for node in graph.nodes():
        t = node.type
        if t is not None:
            for d in t.shape:
                if isinstance(d, str) and not _NAME.fullmatch(d):  # a bare symbol is >= 1 by itself
                    yield d, 1, None, ""
        stated = getattr(node.op.component, "axis_limits", None) if node.kind == "op" else None
        if stated is not None:  # an op (a processing function used as an op node states none)
            preds = graph.preds(node.id)
            args = [graph.node(preds[f"arg{i}"]).type for i in range(len(preds))]
            for length, fewest, most in stated(args):
                if isinstance(length, str):
                    yield length, fewest, most, f"{node.op.component.name} at {node.span}"


def axis_limits(graph, sizes: dict[str, int]) -> dict[str, Limit]:
    """The limit of every symbolic input dim that has one (see the module docstring); ``sizes``: the example size
    of every symbolic dim, by which the other symbols of an expression are held."""
    symbols = {d for n in graph.inputs for d in graph.node(n).type.shape if isinstance(d, str) and _NAME.fullmatch(d)}
    out: dict[str, Limit] = {}
    for expr, fewest, most, what in _needs(graph):
        for symbol in set(_NAME.findall(expr)) & symbols:
            least, greatest = _solve(expr, symbol, sizes, fewest, most)
            limit = out.setdefault(symbol, Limit())
            limit.fewest = max(limit.fewest, least)
            if greatest is not None and (limit.most is None or greatest < limit.most):
                limit.most, limit.why = greatest, what
    return out
