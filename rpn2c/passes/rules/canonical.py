"""Canonicalisation of layer terms: identity operations leave the term.

Slot ``identity``: ``expand[identity](z)`` → ``z`` and ``xi[identity](z)`` → ``z`` (κ(x) = x, A = I). The
lowering already passes both through; removing them keeps the rewritten term the plain composition of what
runs, so later patterns and ``rpn2c explain`` see ``linear(input x)`` rather than ``linear(expand(input x))``.
Its benefit is the lowest: a larger pattern that reads the identity term (``conv`` over
``expand(patches(x))``, ``shared_kappa`` on a channel's ``expand``) fires first.
"""

from __future__ import annotations

from rpn2c.passes.rewrite import Match
from rpn2c.passes.rule import P, Rule


def _identity(t) -> bool:
    use = t.info.get("use")
    return use is not None and use.component.name == "identity"


def _drop(m: Match):
    """The identity term is replaced by its argument."""
    return m.binds["z"]


CANONICAL_RULES: tuple[Rule, ...] = (
    Rule("drop_identity", "head", "identity", lambda s: True,
         "an identity κ (κ(x) = x) or identity ξ (A = I) is no operation: the term reads its argument",
         "RPN 2 eq (26) with κ = id (RPN v1 reduction) or A = I; canonicalisation (MLIR folders)", benefit=0,
         pattern=P(("expand", "xi"), "z", where=_identity), rewrite=_drop),
)
