"""Elementwise functions the processing registry names by import path."""

from __future__ import annotations


def scale(x, by: float):
    """y = by · x (a scaled embedding √d·x, a division by a constant)."""
    return x * by
