"""The resource guard: estimates from inferred types, checked before anything is expanded or allocated.

Three budgets, each with a default that fits a 24 GB machine:

* ``max_params``: the model's parameter count Σ_node params (16 bytes each while training with Adam in
  float32: weight, gradient and two moments; 10⁹ parameters = 16 GB);
* ``max_memory``: activation bytes per sample, 4 · Σ_node (elements of the node's output + of its largest
  per-head intermediate: κ's input and output, an image head's patch matrix, an instance ξ's N×N and an attribute
  ξ's M×M matrix, + what the components make besides: an inner κ's outputs, a ψ's fabricated n×D matrix, a
  hybrid ξ's parts), with every symbolic dimension (``B``, ``T``, ``N``) counted as 1, so it bounds what the spec
  itself fixes;
* ``max_work``: the units of work of the check itself, one per IR node and per head channel expanded, and the
  propagations a forward pass runs one after another beyond one per ξ (a graph ξ's ``hops``, a chain's, PageRank's
  power steps); a ``repeat(n)`` or ``heads = n`` is charged ``n ×`` its size *before* it is expanded, so a check
  never runs longer than the text and this budget allow, whatever the values of ``repeat``, ``heads`` or
  ``channels``.

A spec over a budget is refused with a located error (E0601 parameters, E0602 memory, E0603 work, E0604 forward
steps) that names the node and the estimate; ``rpn2c.check(..., limits=Limits(max_params=...))`` or
``--max-params`` raise them. What the check cannot see, the sizes of the symbolic dimensions, the compiled model
sees before it runs: :func:`run_time_check` evaluates the same estimates with the inputs' sizes and refuses inputs
that take the model over its budgets (E0605 memory, E0604 steps), located at the node, before any of its
allocations or loops; a model in the reference lowering also the literal matrices only that lowering builds (a
linear recurrence's block-Toeplitz ``L``, a grid head's padding matrix, E0606), in the bytes of the model's dtype.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from rpn2c.errors import Diagnostics, Span
from rpn2c.ir.estimate import (BYTES_PER_ELEMENT, dim_size, head_elements, human_bytes, human_count,  # noqa: F401
                               node_elements, node_steps, per_sample, run_time_check)


@dataclass(frozen=True)
class Limits:
    """Budgets of one check (see the module docstring); every field is a plain positive integer."""

    max_params: int = 1_000_000_000
    max_memory: int = 4 * 2**30
    max_work: int = 20_000

    @classmethod
    def of(cls, value: "Limits | dict | None") -> "Limits":
        """``value`` as Limits: None gives the defaults, a dict overrides some of them."""
        if value is None:
            return cls()
        if isinstance(value, Limits):
            return value
        if isinstance(value, dict):
            bad = set(value) - {"max_params", "max_memory", "max_work"}
            if bad:
                raise TypeError(f"unknown limits: {', '.join(sorted(bad))} (max_params, max_memory, max_work)")
            return replace(cls(), **{k: v for k, v in value.items() if v is not None})
        raise TypeError(f"limits must be a Limits or a dict, got {type(value).__name__}")


_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
          "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}


def parse_size(text: str) -> int:
    """``"24GB"`` -> 24·10⁹, ``"4GiB"`` -> 4·2³⁰, ``"1e9"`` -> 10⁹ (a positive number with an optional unit)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m[2].lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (examples: 1000000, 2e9, 512MB, 24GB, 4GiB)")
    value = float(m[1]) * _UNITS[m[2].lower()]
    if not (math.isfinite(value) and value >= 1):
        raise ValueError(f"not a positive size: {text!r}")
    return int(value)


@dataclass
class Guard:
    """Running totals of one check, charged node by node; the first charge over a budget is reported once."""

    limits: Limits
    diags: Diagnostics
    params: int = 0
    memory: int = 0
    work: int = 0
    tripped: set = field(default_factory=set)

    def reserve(self, units: int, span: Span, what: str) -> bool:
        """Charge ``units`` of check work before expanding them; False (and a located E0603) when over budget."""
        return self._work(units, span, "E0603", f"{what} expands to about {human_count(units)} nodes or heads; the "
                                                "check allows {budget} in all ({used} used before it)",
                          "raise the budget with --max-work or limits={'max_work': n} if this is meant")

    def steps(self, units: int, span: Span, what: str) -> bool:
        """Charge ``units`` propagations a forward pass runs one after another beyond the node's own (E0604 when over
        the work budget)."""
        return self._work(units, span, "E0604", f"{what} runs {human_count(units + 1)} steps one after another in "
                                                "each forward pass; the budget allows {budget} nodes and steps in all "
                                                "({used} used before it)",
                          "lower the hops (or steps), or raise the budget with --max-work or limits={'max_work': n} "
                          "if this is meant")

    def _work(self, units: int, span: Span, code: str, message: str, suggestion: str) -> bool:
        """Charge ``units`` to the work budget, or report ``message`` (its ``{budget}`` and ``{used}`` filled)."""
        if "work" in self.tripped:
            return False
        if self.work + units > self.limits.max_work:
            self.tripped.add("work")
            text = message.replace("{budget}", f"{self.limits.max_work:,}").replace("{used}", f"{self.work:,}")
            self.diags.error(code, text, span, suggestion=suggestion)
            return False
        self.work += units
        return True

    def charge(self, nid: str, span: Span, params: int, elements: int) -> bool:
        """Add one node's parameters and activation elements; False after a located E0601/E0602."""
        self.params += params
        self.memory += elements * BYTES_PER_ELEMENT
        ok = True
        if self.params > self.limits.max_params and "params" not in self.tripped:
            self.tripped.add("params")
            self.diags.error("E0601", f"'{nid}' brings the model to {human_count(self.params)} parameters "
                                      f"({human_count(params)} here); the budget is {self.limits.max_params:,}",
                             span, suggestion="raise it with --max-params or limits={'max_params': n} if the "
                                              "machine can hold it")
            ok = False
        if self.memory > self.limits.max_memory and "memory" not in self.tripped:
            self.tripped.add("memory")
            self.diags.error("E0602", f"'{nid}' brings the activations to {human_bytes(self.memory)} per sample "
                                      f"({human_bytes(elements * BYTES_PER_ELEMENT)} here); the budget is "
                                      f"{human_bytes(self.limits.max_memory)}", span,
                             suggestion="raise it with --max-memory or limits={'max_memory': n} if the machine "
                                        "can hold it")
            ok = False
        return ok

    @property
    def over(self) -> bool:
        return bool(self.tripped)
