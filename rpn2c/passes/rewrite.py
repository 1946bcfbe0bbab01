"""Pattern matching on terms and the rewrite driver (after tinygrad's ``PatternMatcher`` / MLIR's greedy driver).

A :class:`Pat` names an op (or a tuple of ops) and patterns for the arguments; a string in the argument list
captures that argument under its name. :func:`rewrite` walks a term top-down; at each subterm it tries the rules
whose pattern root is that op, highest ``benefit`` first (table order breaks ties), and the first rule whose
pattern matches, whose guard holds and — for ``profitable`` rules — whose cost estimate does not add work, fires:
the matched subterm is replaced by the rule's result, which stands for the union of the source spans of every
term the pattern matched and records the rule in its provenance. Passes repeat until none fires (a fixed point);
larger patterns at a parent therefore win over smaller ones at a child (``conv`` over ``unfold``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

from rpn2c.ir.terms import Term, TermTable

_MAX_PASSES = 64  # each kernel op is final and each reordering removes its own pattern: a few passes suffice


@dataclass(frozen=True)
class Pat:
    """``Pat("bias", Pat("reconcile", "k"))`` matches ``bias(reconcile(k))`` and captures ``k``."""

    op: str | tuple[str, ...]
    args: tuple = ()
    where: Callable[[Term], bool] | None = field(default=None, compare=False)

    @property
    def ops(self) -> tuple[str, ...]:
        return self.op if isinstance(self.op, tuple) else (self.op,)

    def __str__(self) -> str:
        op = "|".join(self.ops)
        args = ", ".join(str(a) for a in self.args) if self.args else "…"
        return f"{op}({args})"


@dataclass
class Match:
    """A successful match: the matched root, the captured arguments and every term the pattern consumed."""

    root: Term
    binds: dict[str, Term]
    matched: list[Term]
    table: TermTable
    rule: str = ""

    @property
    def spans(self) -> frozenset:
        return frozenset().union(*(t.spans for t in self.matched))

    def make(self, op: str, args=(), *, key=None, info=None) -> Term:
        """A term replacing the match: it stands for every matched span and records the rule; with the root's
        ``info``, also the components of the other matched terms it absorbed (``info["absorbed"]``: (op, what)
        pairs, the κ of ``conv`` or ``degree_linear``: ``rpn2c explain`` shows them)."""
        if info is None:
            info = self.root.info
            absorbed = tuple(p for t in self.matched[1:]
                             for p in (*t.info.get("absorbed", ()), (t.op, t.info.get("what"))) if p[1] is not None)
            if absorbed:
                info = {**info, "absorbed": (*info.get("absorbed", ()), *absorbed)}
        return self.table.make(op, args, self.root.key if key is None else key, info, self.spans,
                               (*self.root.prov, self.rule))

    def rebuild(self, term: Term, args=None, *, key=None, spans=(), prov=()) -> Term:
        """``term`` with new arguments or key (its own spans plus ``spans``)."""
        return self.table.make(term.op, term.args if args is None else args, term.key if key is None else key,
                               term.info, term.spans | frozenset(spans), (*term.prov, *prov))


def match(pat: Pat | str, term: Term, out: Match) -> bool:
    if isinstance(pat, str):
        out.binds[pat] = term
        return True
    if term.op not in pat.ops or (pat.where is not None and not pat.where(term)):
        return False
    if pat.args and len(pat.args) != len(term.args):
        return False
    out.matched.append(term)
    return all(match(p, a, out) for p, a in zip(pat.args, term.args))


@dataclass(frozen=True)
class Fired:
    rule: object  # passes.rule.Rule
    before: Term
    after: Term
    spans: frozenset


@functools.lru_cache(maxsize=64)
def _by_root_op(rules: tuple) -> dict[str, list]:
    """The rules whose pattern root is each op, highest benefit first (table order breaks ties): built once per
    rule set, not once per layer."""
    by_op: dict[str, list] = {}
    for i, r in sorted(enumerate(rules), key=lambda ir: (-ir[1].benefit, ir[0])):
        for op in r.pattern.ops:
            by_op.setdefault(op, []).append(r)
    return by_op


def rewrite(root: Term, rules, table: TermTable, allow: Callable[[object, Term], bool]) -> tuple[Term, list[Fired]]:
    """Rewrite ``root`` to a fixed point. ``allow(rule, term)`` is the rule's guard and cost check at ``term``."""
    by_op = _by_root_op(tuple(rules))
    fired: list[Fired] = []

    def visit(t: Term, memo: dict[int, Term]) -> Term:
        if id(t) in memo:
            return memo[id(t)]
        for r in by_op.get(t.op, ()):
            m = Match(t, {}, [], table, r.name)
            if match(r.pattern, t, m) and allow(r, t):
                new = r.rewrite(m)
                if new is not t:
                    fired.append(Fired(r, t, new, m.spans))
                    memo[id(t)] = new
                    return new
        args = tuple(visit(a, memo) for a in t.args)
        new = t if all(a is b for a, b in zip(args, t.args)) else table.make(t.op, args, t.key, t.info, t.spans,
                                                                             t.prov)
        memo[id(t)] = new
        return new

    for _ in range(_MAX_PASSES):
        n = len(fired)
        root = visit(root, {})
        if len(fired) == n:
            return root, fired
    raise RuntimeError(f"the optimiser's rules did not reach a fixed point in {_MAX_PASSES} passes: "
                       + ", ".join(f.rule.name for f in fired[-5:]))
