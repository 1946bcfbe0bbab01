"""The op tables derived from the kernel declarations: every op a term can hold (a semantic op, or a kernel op a rule
rewrites into) has exactly one emitter, every emitter serves such an op, every kernel a component declares is made
by a rule and implemented by its module, and no component reads a kernel name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rpn2c
from rpn2c.components.registry import all_entries, kernels
from rpn2c.ir.kernels import Kernel, Predicate, declared
from rpn2c.ir.terms import SEMANTIC_OPS
from rpn2c.lower.emitters import kernel_ops, op_table
from rpn2c.passes.rules import RULES

COMPONENTS = Path(rpn2c.__file__).parent / "components"


def _term_ops(rules=RULES) -> set[str]:
    """The ops that compute (``input`` is a leaf: the program binds it as an argument)."""
    return set(SEMANTIC_OPS) - {"input"} | {r.produces for r in rules if r.produces is not None}


def _unserved(term_ops: set[str], table: set[str]) -> tuple[set[str], set[str]]:
    """(ops with no emitter, emitters with no op)."""
    return term_ops - table, table - term_ops


def test_every_term_op_has_one_emitter_and_every_emitter_an_op():
    table = set(op_table())
    assert _unserved(_term_ops(), table) == (set(), set())
    assert set(kernel_ops()) == _term_ops() - set(SEMANTIC_OPS)
    assert len(kernel_ops()) == len(set(kernel_ops()))


def test_the_check_fails_on_an_op_without_emitter_or_an_emitter_without_op():
    """The comparison above can fail: a rule making an undeclared op, and a table with an op no rule makes."""
    table = set(op_table())
    rogue = type(RULES[0])("rogue", "head", "xi", lambda s: True, "why", "paper", pattern=RULES[0].pattern,
                           rewrite=RULES[0].rewrite)
    object.__setattr__(rogue, "rewrite", type("R", (), {"produces": "no_such_kernel", "__call__": None})())
    assert _unserved(_term_ops((*RULES, rogue)), table)[0] == {"no_such_kernel"}
    assert _unserved(_term_ops(), table | {"orphan"})[1] == {"orphan"}


def test_each_declared_kernel_is_made_by_a_rule_through_its_record():
    made = {r.produces for r in RULES}
    for name, k in kernels().items():
        assert isinstance(k, Kernel) and name in made, name
        assert isinstance(k.applies, Predicate) and k.applies.text
        assert k.fallback is None or (isinstance(k.fallback.when, Predicate) and k.fallback.when.text)


@pytest.mark.parametrize("entry", [e for e in all_entries() if e.cls.kernels], ids=lambda e: e.name)
def test_a_declaring_component_builds_a_module_with_the_kernel_methods(entry):
    """Compiled from the entry's own example: the built ξ module (a cell's: its recurrent layer's module) has each
    declared kernel's method and fallback."""
    model = rpn2c.compile(entry.example)
    for node in model.graph.nodes():
        if node.kind == "recurrent" and node.layer.cell.name == entry.name:
            module = model.get_submodule(node.id)
            for k in entry.cls.kernels:
                assert declared(node.layer.cell.component, k.name) is k
                assert callable(getattr(module, k.method))
                assert k.fallback is None or callable(getattr(module, k.fallback.runs))
            return
        for h in getattr(node.layer, "heads", ()) if node.kind == "layer" else ():
            for slot, use in h.xi.items():
                if use.name != entry.name:
                    continue
                holder = model.get_submodule(node.id)
                module = getattr(holder.heads[h.name] if len(node.layer.heads) > 1 else holder, slot)
                for k in entry.cls.kernels:
                    assert declared(use.component, k.name) is k
                    assert callable(getattr(module, k.method))
                    assert k.fallback is None or callable(getattr(module, k.fallback.runs))
                return
    pytest.fail(f"the example of {entry.name} has no head using it")


def test_no_component_module_reads_a_kernel_name():
    """A kernel runs as its declared method: no comparison with a kernel op's name, no ``kernel=`` argument."""
    names = set(kernel_ops())
    found = []
    for path in sorted(COMPONENTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):  # ``kernel == "spmm"``, ``t.op in ("conv", …)`` (not ``style == "conv"``)
                parts = [n for side in (node.left, *node.comparators) for n in ast.walk(side)]
                consts = {c.value for c in parts if isinstance(c, ast.Constant)}
                subject = {getattr(n, "id", getattr(n, "attr", "")) for n in parts
                           if isinstance(n, (ast.Name, ast.Attribute))}
                if consts & names and any("kernel" in w or w == "op" for w in subject):
                    found.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.arg) and node.arg == "kernel":
                found.append(f"{path.name}:{node.lineno}")
    assert found == []
