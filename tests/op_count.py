"""Deterministic operation counts: how many non-view aten operations a computation dispatches.

A count is a proxy for kernel launches that does not depend on the machine or its load, so it can gate CI where a
timing cannot. ``count_ops(fn)`` runs ``fn`` under a ``TorchDispatchMode`` that records every aten call except
views (:func:`is_view_op`); ``training_step_ops`` counts one training step (forward, ``.sum()`` loss, backward; the
autograd backward dispatches inside the mode, so its operations are counted too). ``converted`` builds the rpn2c
model of a torch module the way users do: ``from_torch``, ``rpn2c.compile`` of the spec text, ``load_state_dict``.

Benchmarks and tests import it as ``from tests.op_count import ...`` (the repository root is on ``sys.path``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import rpn2c

aten = torch.ops.aten

# Views and aliases whose schema does not (or not always) mark the output as an alias of an input.
VIEW_OPS = frozenset({
    aten.detach, aten.alias, aten._unsafe_view, aten.view, aten.t, aten.transpose, aten.expand, aten.unsqueeze,
    aten.squeeze, aten.permute, aten.select, aten.slice, aten.split, aten.unbind,
})


def is_view_op(func) -> bool:
    """Whether the aten overload ``func`` only makes a view or alias (no kernel runs over the data).

    True when a return of its schema aliases an input without writing it (``Tensor(a)``, as ``aten.t``,
    ``aten.reshape`` of a viewable input or ``aten.as_strided``), or when its overload packet is one of
    :data:`VIEW_OPS`. In-place and ``out=`` operations (``Tensor(a!)``) write their result and are not views.
    """
    if func.overloadpacket in VIEW_OPS:
        return True
    return any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)


class OpCounter(TorchDispatchMode):
    """Records each aten call dispatched while active: ``ops`` counts the non-view ones by overload packet name
    (``"mm"``, ``"add_"``), ``views`` the views."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.views: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        (self.views if is_view_op(func) else self.ops)[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def count_ops(fn: Callable[[], object]) -> Counter[str]:
    """The non-view aten operations ``fn()`` dispatches, by name (``sum(counter.values())`` is the total)."""
    with OpCounter() as counter:
        fn()
    return counter.ops


def primary(out):
    """The first output of a module returning a tuple (``nn.MultiheadAttention``, ``nn.LSTM``), else the output."""
    return out[0] if isinstance(out, (tuple, list)) else out


def training_step_ops(model: nn.Module, inputs: Sequence[object], *, warmup: bool = True) -> Counter[str]:
    """The non-view operations of one training step of ``model`` on ``inputs``: forward, the loss
    ``primary(out).sum()``, backward into parameter gradients that start unset (no accumulation adds).

    With ``warmup`` one untimed step runs first, so one-time work (caches filled on the first call) is not counted:
    the count is that of a steady-state step. The optimiser update is not included.
    """
    model.train()

    def step():
        model.zero_grad(set_to_none=True)
        primary(model(*inputs)).sum().backward()

    if warmup:
        step()
    model.zero_grad(set_to_none=True)
    ops = count_ops(lambda: primary(model(*inputs)).sum().backward())
    model.zero_grad(set_to_none=True)
    return ops


def converted(module: nn.Module, args: Sequence[object], kwargs: dict | None = None) -> nn.Module:
    """The rpn2c model of ``module``: ``rpn2c.from_torch``, ``rpn2c.compile`` of the spec text, the module's weights
    loaded (eager, in the module's dtype)."""
    spec = rpn2c.from_torch(module, tuple(args), kwargs)
    model = rpn2c.compile(spec.text)
    model.load_state_dict(spec.state_dict)
    dtype = next((p.dtype for p in module.parameters()), None)
    return model.to(dtype) if dtype is not None else model


def diff(ours: Counter[str], theirs: Counter[str]) -> str:
    """The per-operation difference ``ours - theirs`` as lines ``name: +n`` / ``name: -n``, largest first."""
    delta = Counter(ours)
    delta.subtract(theirs)
    rows = sorted(((n, d) for n, d in delta.items() if d), key=lambda nd: (-abs(nd[1]), nd[0]))
    return "\n".join(f"  {n}: {d:+d}" for n, d in rows) or "  (same operations)"
