"""The tanh-GELU recogniser: GELU's tanh approximation written out (transformers' ``NewGELUActivation``, GPT-2's
``gelu_new``) becomes ``gelu(approximate = "tanh")``.

    0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))      -> gelu(approximate = "tanh")
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch
import torch.fx as fx

from rpn2c.frontends.fx_match import calls as _is, users as _users

_MUL = (operator.mul, torch.mul)
_ADD = (operator.add, torch.add)


@dataclass
class Match:
    x: fx.Node
    anchor: fx.Node
    nodes: set[fx.Node]


def _scaled(node: object, c: float) -> object:
    """The operand of ``c · t`` / ``t · c`` (None if ``node`` is not that product)."""
    if not _is(node, *_MUL) or len(node.args) != 2:
        return None
    a, b = node.args
    if isinstance(a, float) and math.isclose(a, c, rel_tol=1e-12):
        return b
    if isinstance(b, float) and math.isclose(b, c, rel_tol=1e-12):
        return a
    return None


def _plus(node: object, one: object) -> object:
    """The other operand of ``node = one + t`` / ``t + one``."""
    if not _is(node, *_ADD) or len(node.args) != 2 or one not in node.args:
        return None
    a, b = node.args
    return b if a is one or a == one else a


def _match(tanh: fx.Node) -> Match | None:
    inner = _scaled(tanh.args[0], math.sqrt(2.0 / math.pi))
    if not isinstance(inner, fx.Node) or not _is(inner, *_ADD):
        return None
    x, cubic = inner.args
    cube = _scaled(cubic, 0.044715)
    if not (_is(cube, torch.pow, "pow") and cube.args[0] is x and cube.args[1] == 3):
        return None
    users = _users(tanh)
    if len(users) != 1 or _plus(users[0], 1.0) is not tanh:
        return None
    one_plus = users[0]
    outer = _users(one_plus)
    if len(outer) != 1 or not _is(outer[0], *_MUL) or one_plus not in outer[0].args:
        return None
    anchor = outer[0]
    half = anchor.args[0] if anchor.args[1] is one_plus else anchor.args[1]
    if _scaled(half, 0.5) is not x:
        return None
    return Match(x, anchor, {tanh, tanh.args[0], inner, cubic, cube, one_plus, half, anchor})


def find(gm: fx.GraphModule, values: dict) -> tuple[dict[fx.Node, Match], dict[fx.Node, str]]:
    found = {}
    for node in gm.graph.nodes:
        if _is(node, torch.tanh, "tanh"):
            m = _match(node)
            if m is not None:
                found[m.anchor] = m
    return found, {}


def emit(conv, node: fx.Node, m: Match):
    from torch import nn

    return conv.leaf(node, nn.GELU("tanh"), conv.value(node, conv.env[m.x]))
