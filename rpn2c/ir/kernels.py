"""A kernel op declared once, beside the code that implements it (after PyG's ``message_and_aggregate``).

A :class:`Kernel` is the op a rule rewrites a semantic op into: its name (the term's op), its argument signature
(what the op reads, in order), the method of the built module that runs it, when it applies (a predicate on the
component entry, with its text: the rule's guard calls it) and, where a run-time fact can rule the kernel out, its
:class:`Fallback` (the form that runs instead and a predicate on the kernel's own arguments, with its text:
the lowering calls it on every call, ``rpn2c explain`` prints its text). The component class that implements a
kernel lists it in ``kernels``; the registry collects them into the op tables (``rpn2c.components.registry``).

Torch-free: the predicates import what they need when called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# argument signatures: what a kernel op reads, in order (``rpn2c/lower/program.py`` wires them)
XI_ARGS = ("z", "query", "context", "aux")  # a ξ op: the term it transforms, the query, the context, the extras
ATTEND_ARGS = ("qq", "kk", "values", "aux")  # an attention kernel: projected queries and keys, the values
RECURRENT_ARGS = ("x", "state", "cell_state")  # a recurrent layer's form: the sequence, the initial states


@dataclass(frozen=True)
class Predicate:
    """An executable condition and the sentence that states it (the same object runs and is shown)."""

    test: Callable[..., bool]
    text: str

    def __call__(self, *args) -> bool:
        return bool(self.test(*args))


@dataclass(frozen=True)
class Fallback:
    """``runs`` (a method of the same module, same arguments) replaces the kernel on a call where ``when`` holds."""

    runs: str
    when: Predicate


@dataclass(frozen=True)
class Kernel:
    name: str  # the kernel op in a rewritten term
    args: tuple[str, ...]  # its argument signature (XI_ARGS, ATTEND_ARGS, RECURRENT_ARGS)
    method: str  # the built module's method that runs it, called with ``args``
    applies: Predicate  # on the component entry: where the rule may rewrite into this kernel
    fallback: Fallback | None = None

    def bind(self, module) -> Callable:
        """The call that runs on ``module``: its method, or its fallback's where the predicate holds."""
        run = getattr(module, self.method)
        if self.fallback is None:
            return run
        other, when = getattr(module, self.fallback.runs), self.fallback.when

        def dispatch(*args):
            return other(*args) if when(module, *args) else run(*args)

        return dispatch


def offered(component, kernel: Kernel) -> bool:
    """Whether ``component`` (a registry entry's instance) implements ``kernel`` and it applies to it."""
    return kernel in type(component).kernels and kernel.applies(component)


def declared(component, op: str) -> Kernel | None:
    """The kernel record named ``op`` that ``component`` declares, if any."""
    return next((k for k in type(component).kernels if k.name == op), None)
