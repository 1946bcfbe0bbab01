"""The optimiser's rule tables, one module per kind of structure. ``RULES`` is every site rule, in table order."""

from rpn2c.passes.rules.attention import ATTENTION_RULES
from rpn2c.passes.rules.canonical import CANONICAL_RULES
from rpn2c.passes.rules.expansion import EXPANSION_RULES
from rpn2c.passes.rules.grid import GRID_RULES
from rpn2c.passes.rules.heads import HEAD_RULES
from rpn2c.passes.rules.items import ITEMS_RULES
from rpn2c.passes.rules.recurrent import RECURRENT_RULES

RULES = (*GRID_RULES, *EXPANSION_RULES, *ITEMS_RULES, *ATTENTION_RULES, *HEAD_RULES, *RECURRENT_RULES,
         *CANONICAL_RULES)

__all__ = ["RULES", "CANONICAL_RULES", "EXPANSION_RULES", "GRID_RULES", "ITEMS_RULES", "ATTENTION_RULES", "HEAD_RULES", "RECURRENT_RULES"]
