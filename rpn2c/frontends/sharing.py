"""Weights shared in the torch model stay shared in the spec.

A module called more than once (ALBERT's one encoder layer applied n times), two modules holding one parameter
(an LM head tied to the embedding) or a weight read transposed (a tied autoencoder) convert first as statements
with their own compiled tensors, all linked to the same torch tensor. This pass finds those links and writes the
sharing into the spec: a statement whose every tensor comes from the same torch tensors, in the same way, as an
earlier statement's gets ``tie = earlier``; a head whose ψ weight is an earlier embedding's or head's matrix (or
its transpose) gets ``psi = tied(earlier)``. The compiled model then has exactly the torch model's free
parameters, and gradients of every use accumulate in one tensor.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any


def _statement_of(compiled: str) -> str:
    return compiled.split(".", 1)[0]


def _key(b, compiled: str) -> tuple:
    link = b.links[compiled]
    return compiled.split(".", 1)[1], id(b.sources[compiled]), link.rows, link.transpose, link.shape


def share_weights(b) -> None:
    """Rewrite ``b``'s statements so shared torch tensors are one spec tensor (see the module docstring)."""
    by_stmt: dict[str, list[str]] = defaultdict(list)
    for compiled in b.links:
        if compiled in b.sources:
            by_stmt[_statement_of(compiled)].append(compiled)
    stmts = {s.name: s for s in b.stmts}
    seen: dict[frozenset, str] = {}  # the link signature of a statement's tensors -> the first statement
    owner: dict[int, tuple[str, str]] = {}  # torch tensor -> (first statement reading it, compiled name)
    for stmt in b.stmts:
        names = by_stmt.get(stmt.name, [])
        if not names:
            continue
        signature = frozenset(_key(b, n) for n in names)
        if signature in seen and len(signature) == len(names):
            _tie(stmt, seen[signature])
            continue
        seen.setdefault(signature, stmt.name)
        for n in names:
            src = id(b.sources[n])
            if src in owner and owner[src][0] != stmt.name and n.endswith(".psi.weight"):
                _tie_psi(b, stmt, stmts[owner[src][0]], owner[src][1], n)
            else:
                owner.setdefault(src, (stmt.name, n))


def _tie(stmt: Any, target: str) -> None:
    if stmt.kind == "op":
        stmt.expr = stmt.expr[:-1] + f", tie = {target})"
    else:
        stmt.settings.append(f"tie = {target}")
    stmt.comments.append(f"the same torch weights as '{target}': tied, one tensor")


def _tie_psi(b, stmt: Any, source: Any, source_name: str, compiled: str) -> None:
    """``stmt``'s ψ weight is ``source``'s matrix (a head's ψ or an embedding table), possibly transposed."""
    mine, theirs = b.links[compiled], b.links[source_name]
    if mine.rows or theirs.rows or mine.shape or theirs.shape or not (
            source_name == f"{source.name}.psi.weight" or (source.kind == "op" and source_name == f"{source.name}.weight")):
        return  # not one whole matrix on both sides: the weights stay separate copies (the check counts them)
    flip = ", transpose = true" if mine.transpose != theirs.transpose else ""
    stmt.settings = [s for s in stmt.settings if not re.match(r"psi\s*=", s)] + [f"psi = tied({source.name}{flip})"]
    stmt.comments.append(f"ψ is the weight matrix of '{source.name}'{', transposed' if flip else ''} (one tensor)")
    del b.links[compiled], b.tensors[compiled], b.sources[compiled]
