"""A rewrite rule of the optimiser, declared once in a table: guard, kernel, benefit, why, paper reference.

Rules are grouped by the *slot* they decide (how a grid head is computed, where ψ is applied, how the heads of a
layer run ...). Within a slot the rules are alternatives: the driver keeps, among those whose guard holds, the one
with the highest static ``benefit`` (MLIR's pattern benefit); the literal lowering is the implicit benefit-0
fallback. A rule marked ``profitable`` also needs its cost estimate to say it does not add work (a choice that
depends on sizes, such as the order of ψ and an instance ξ). A rule records where it is defined, so ``rpn2c explain`` can point a reader at it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rpn2c.passes.cost import Cost

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
    location: str = field(default="", compare=False)

    def __post_init__(self):
        if not self.location:
            frame = inspect.stack()[2]  # the table that declares the rule
            try:
                where = Path(frame.filename).resolve().relative_to(_PACKAGE_ROOT)
            except ValueError:
                where = Path(frame.filename).name
            object.__setattr__(self, "location", f"{where.as_posix()}:{frame.lineno}")


@dataclass(frozen=True)
class Decision:
    """One rule that fired on one node (and head): what runs, why, and the estimated effect."""

    rule: str
    slot: str
    head: str | None
    location: str
    why: str
    paper: str
    cost: Cost | None = None

    def to_json(self) -> dict:
        out = {"rule": self.rule, "slot": self.slot, "head": self.head, "defined_at": self.location,
               "why": self.why, "paper": self.paper}
        if self.cost is not None:
            out["cost"] = self.cost.to_json()
        return out
