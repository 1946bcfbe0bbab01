"""What the recognisers over traced graphs share (``fx_attention``, ``fx_norms``, ``fx_gelu``): reading fx nodes as
the operations they call, their data users and their example shapes."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx


class Miss(Exception):
    """The graph around a pattern's core is not one of its recognised forms (the message says which part)."""


def calls(node: Any, *targets: Any) -> bool:
    """``node`` calls one of ``targets`` (functions, or method names as strings)."""
    if not isinstance(node, fx.Node):
        return False
    if node.op == "call_method":
        return node.target in targets
    return node.op == "call_function" and any(node.target is t for t in targets if not isinstance(t, str))


def is_meta(node: fx.Node) -> bool:
    """A read of sizes only (``x.shape``, ``x.size()``, ``x.dim()``): no data flows through it."""
    return (node.op == "call_function" and node.target is getattr) or calls(node, "size", "dim")


def users(node: fx.Node) -> list[fx.Node]:
    return [u for u in node.users if not is_meta(u)]


def shape(values: dict, node: Any) -> tuple[int, ...] | None:
    v = values.get(node) if isinstance(node, fx.Node) else None
    return tuple(v.shape) if isinstance(v, torch.Tensor) else None


def name(target: Any) -> str:
    return getattr(target, "__name__", str(target))


def ancestors(node: fx.Node, through_sizes: bool = True) -> set[fx.Node]:
    """``node`` and every node it reads, transitively (``through_sizes=False``: not past a read of sizes)."""
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            if through_sizes or not is_meta(n):
                todo.extend(n.all_input_nodes)
    return seen
