"""Counts the shape rules read without torch."""

from __future__ import annotations

import math


def pagerank_iterations(alpha: float, tol: float) -> int:
    """Power iterations ``K`` with ``(1-α)^{K+1} ≤ tol``: the truncation bound of :func:`pagerank_propagate`."""
    if not 0.0 < alpha <= 1.0:
        raise ValueError("alpha must be in (0, 1]")
    if alpha == 1.0:
        return 0
    return max(math.ceil(math.log(tol) / math.log(1.0 - alpha)) - 1, 0)
