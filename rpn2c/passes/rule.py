"""A rewrite rule of the optimiser, declared once in a table: pattern, rewrite, guard, benefit, why, paper reference.

A rule's ``pattern`` is a term pattern over the layer IR (``rpn2c/ir/terms.py``); where it matches and the
``guard`` holds, ``rewrite`` replaces the matched term (usually by a kernel op that maps to one torch call, see
:func:`to`). Rules matching the same term are alternatives: the driver (``passes/rewrite.py``) tries the highest
static ``benefit`` first (MLIR's pattern benefit); a term no rule rewrites is lowered literally. A rule marked
``profitable`` also needs its cost estimate to say it does not add work (a choice that depends on sizes, such as
the order of ψ and an instance ξ). ``slot`` names the decision a rule takes (how a grid head is computed, where ψ
is applied ...) for ``rpn2c explain``. A rule records where it is defined, so ``rpn2c explain`` can point a reader
at it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rpn2c.ir.terms import Term
from rpn2c.passes.cost import Cost
from rpn2c.passes.rewrite import Match, Pat

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Site:
    """What a guard may read: the node, and for head rules the head, its shape trace and the types around it."""

    node: Any
    head: Any = None
    trace: Any = None
    x: Any = None  # TensorType of the layer input
    data: Any = None  # TensorType the head reads (the context for cross-interdependence)
    graph: Any = None


@dataclass(frozen=True)
class Rule:
    name: str  # also the kernel label shown by `rpn2c check` and `rpn2c explain`
    scope: str  # head | layer | recurrent
    slot: str  # the decision this rule takes; rules sharing a slot are alternatives
    guard: Callable[[Site], bool]
    why: str
    paper: str  # where the identity comes from (RPN 2 paper equation / section, or the kernel's documentation)
    benefit: int = 1
    cost: Callable[[Site], Cost] | None = None  # estimated (before, after) for one sample
    profitable: bool = False  # fire only where the cost model estimates no more FLOPs after than before
    pattern: Pat | None = None  # where the rule applies in a layer's term
    rewrite: Callable[[Match], Term] | None = None  # the replacement of a match
    location: str = field(default="", compare=False)

    @property
    def produces(self) -> str | None:
        """The kernel op this rule's rewrite makes (None for a reordering or sharing rule)."""
        return getattr(self.rewrite, "produces", None)

    def __post_init__(self):
        if self.pattern is None or self.rewrite is None:
            raise ValueError(f"rule {self.name!r} needs a pattern and a rewrite")
        if not self.location:
            frame = sys._getframe(2)  # the table that declares the rule (not inspect.stack(): it reads every
            filename = frame.f_code.co_filename  # frame's source, minutes once torch_geometric is imported)
            try:
                where = Path(filename).resolve().relative_to(_PACKAGE_ROOT)
            except ValueError:
                where = Path(filename).name
            object.__setattr__(self, "location", f"{where.as_posix()}:{frame.f_lineno}")


def P(op: str | tuple[str, ...], *args, where: Callable[[Term], bool] | None = None) -> Pat:
    """A pattern: ``P("bias", P("reconcile", "k"))`` matches ``bias(reconcile(k))`` capturing ``k``."""
    return Pat(op, args, where)


def to(kernel) -> Callable[[Match], Term]:
    """The rewrite "replace the match by kernel op ``kernel`` on the captured arguments" (an op name, or a
    component's declared ``rpn2c.ir.kernels.Kernel``)."""
    op = getattr(kernel, "name", kernel)

    def rewrite(m: Match) -> Term:
        return m.make(op, tuple(m.binds.values()))

    rewrite.__name__ = f"to_{op}"
    return makes(op)(rewrite)


def makes(op: str):
    """Marks a rewrite with the kernel op it produces (``Rule.produces``: the op tables are checked against it)."""

    def mark(fn):
        fn.produces = op
        return fn

    return mark


@dataclass(frozen=True)
class Decision:
    """One rule that fired on one node (and head): what runs, why, the estimated effect, and the source spans of
    the terms it replaced (``before`` → ``after`` as text)."""

    rule: str
    slot: str
    head: str | None
    location: str
    why: str
    paper: str
    cost: Cost | None = None
    spans: tuple[str, ...] = ()
    before: str = ""
    after: str = ""

    def to_json(self) -> dict:
        out = {"rule": self.rule, "slot": self.slot, "head": self.head, "defined_at": self.location,
               "why": self.why, "paper": self.paper, "spans": list(self.spans), "before": self.before,
               "after": self.after}
        if self.cost is not None:
            out["cost"] = self.cost.to_json()
        return out
