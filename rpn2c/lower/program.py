"""A layer's rewritten term as its program: the term (``node.terms[1]``) walked once, children first, into a
straight-line list of steps, each the one emitter of its op (``lower/emitters.py``) bound to its head. What the
rewrites produce is exactly what runs: the layer module interprets the steps, and ``lower/emit.py`` writes the
same steps into the model's generated program. Interned subterms (a κ shared by channels, a processed input read
by several heads) are one step.

Each op's emitter declares what it reads (``emitters.reads``), and the arguments are wired from that signature: a
ξ op reads its term, the query (the processed layer input), the context and the layer's extra inputs (masks, edges,
keys: ``aux``); a grid head's last step also reads the grid input, whose size fixes the output grid; a multi-head
kernel (``fused_sdpa``, ``stacked_linear``) reads the query and the context, not its heads' terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

from rpn2c.ir.kernels import RECURRENT_ARGS
from rpn2c.ir.terms import Term, TermTable, layer_inputs
from rpn2c.lower.emitters import EMITTERS, Site, emitter, signature

Arg = Union[int, tuple[str, str], str]  # an earlier step, ("input", value id), or "aux" (the extra inputs)
AUX = "aux"
_XI_SIGNATURE = signature(EMITTERS["xi"])  # a kernel op a ξ component declares reads what ``xi`` reads


@dataclass(frozen=True)
class Step:
    op: str
    run: Callable  # run(layer, *args)
    args: tuple[Arg, ...]


def layer_program(node, preds: dict, multi: bool, grid_out: bool, x_grid: bool,
                  activation: Callable[[Term], Callable | None] = lambda t: None) -> list[Step]:
    """The steps of layer ``node``'s rewritten term; the last step's value is the layer's output.
    ``activation(term)``: the plain function a ``process`` term applies, if it is one (called directly)."""
    spec = node.layer
    heads = {h.name: (h, t) for h, t in zip(spec.heads, node.trace["heads"])}
    shares = node.trace.get("xi_share") or {}  # "head:slot" -> key of the ξ the graph rewrite shared_xi merged
    _, query, data = layer_inputs(TermTable(), node, preds)
    steps: list[Step] = []
    index: dict[Term, Arg] = {}

    def site(t: Term) -> Site:
        name = t.info.get("head")
        h, tr = heads[name] if name is not None else (None, None)
        return Site(name, multi, h, tr, grid_out, x_grid, activation(t) if t.op == "process" else None,
                    shares.get(f"{name}:{t.info.get('slot')}"))

    def visit(t: Term) -> Arg:
        if t in index:
            return index[t]
        if t.op == "input":
            index[t] = ("input", t.key.value)
            return index[t]
        s = site(t)
        roles = signature(EMITTERS[t.op]) if t.op in EMITTERS else _XI_SIGNATURE
        wired = {"z": lambda: (visit(t.args[0]),), "query": lambda: (visit(query),),
                 "context": lambda: (visit(data),), "aux": lambda: (AUX,),
                 "args": lambda: tuple(visit(a) for a in t.args),
                 "grid": lambda: (visit(data),) if s.trace is not None and s.trace.view == "grid" else ()}
        args = tuple(a for role in roles for a in wired[role]())
        steps.append(Step(t.op, emitter(t, s), args))
        index[t] = len(steps) - 1
        return index[t]

    out = visit(node.terms[1])
    if not isinstance(out, int):  # the term is an input itself (nothing to compute): pass it through
        steps.append(Step("input", _identity, (out,)))
    return steps


def recurrent_program(node) -> list[Step]:
    """A recurrent node's program: its rewritten term's one op (``recur``, or the form a rule chose) on the
    sequence and the initial states, which the module's forward binds by name (``RECURRENT_ARGS``)."""
    t = node.terms[1]
    return [Step(t.op, emitter(t, Site(None, False)), tuple(("input", r) for r in RECURRENT_ARGS))]


def _identity(layer, x):
    return x


def arguments(step: Step, values: list, inputs: dict, aux) -> list:
    """``step``'s arguments: earlier steps' values, the layer's inputs (by value id) or its extra inputs."""
    return [values[a] if isinstance(a, int) else aux if a == AUX else inputs[a[1]] for a in step.args]


def run_program(layer, steps: list[Step], inputs: dict, aux: dict):
    """Interpret ``steps`` (the layer module's forward; the generated program inlines the same calls)."""
    env: list = []
    for step in steps:
        env.append(step.run(layer, *arguments(step, env, inputs, aux)))
    return env[-1]
