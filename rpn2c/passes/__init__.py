"""The optimiser stage: graph canonicalisation and kernel selection from rule tables (``passes/rules/``)."""

from rpn2c.passes.pipeline import optimize, rule_names

__all__ = ["optimize", "rule_names"]
