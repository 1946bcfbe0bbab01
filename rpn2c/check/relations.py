"""The checker's part for relation values (``rpn2c/components/relation.py``).

``r = relation(x, c, xi = attention(rank = 4))``: ``xi`` is a component (resolved as an instance ξ), ``x`` and ``c``
values; the ξ's value hyper-parameters (masks) become further inputs of the node. ``tie = r0`` makes the relation
score with ``r0``'s ξ tensors: the two must have the same ξ entry and the same hyper-parameters except those that
hold no parameter shapes (masks, scale, softmax), and the same input widths; with ``swap = true`` the query and key
factors trade places, so the widths must be ``r0``'s swapped (β from Ψᵀ, seed 002 eq 4).
A relation is not a sequence: a head or a recurrent layer reads it only through ``rows(r)``.
"""

from __future__ import annotations

from rpn2c.check.heads import resolve_use
from rpn2c.check.ties import take_tie_kwarg, tie_target
from rpn2c.components.base import ShapeRuleError
from rpn2c.components.registry import REGISTRY
from rpn2c.components.relation import UNSHAPED_KEYS
from rpn2c.errors import Diagnostics, Span
from rpn2c.ir.graph import Node, Use
from rpn2c.ir.types import TensorType
from rpn2c.syntax import ast

RELATION = "relation"


def refuse_matrix(t: TensorType | None, what: str, span: Span, diags: Diagnostics, name: str | None = None) -> bool:
    """True (after a located error) when ``t`` is a relation read by a head or a recurrent layer."""
    if t is None or t.kind != "matrix":
        return False
    ref = name or "r"
    diags.error("E0402", f"a {what} reads items, but {t} is a relation; read its rows as a sequence with "
                         f"`rows({ref})`", span)
    return True


def relation_call(elab, name: str, call: ast.Call, unit, scope, later) -> str | None:
    """Check ``relation(x, [c], xi = ..., [swap = ..], [tie = r0])`` and add its node; None after errors."""
    diags = elab.diags
    kwargs, tie_k = take_tie_kwarg(call.kwargs)
    xi_kw = next((k for k in kwargs if k.name == "xi"), None)
    rest = tuple(k for k in kwargs if k is not xi_kw)
    arg_ids = [elab._value_ref(a, scope, unit, later, name, i) for i, a in enumerate(call.args)]
    if not 1 <= len(call.args) <= 2:
        diags.error("E0311", f"'relation' takes the query items and optionally the context items, got "
                             f"{len(call.args)} values", call.span)
        return None
    if xi_kw is None:
        diags.error("E0303", "'relation' needs its instance ξ: add `xi = attention(rank = r)` (or another "
                             "instance interdependence)", call.span)
        return None
    xi = resolve_use(xi_kw.value, "xi_instance", scope, diags)
    entry = REGISTRY["op"][RELATION]
    use = resolve_use(ast.Call(ast.Name((RELATION,), call.func.span), (), rest, call.span), "op", scope, diags)
    if xi is None or use is None or any(a is None for a in arg_ids):
        return None
    use = Use(entry.cls(use.component.hp.model_copy(update={"xi": xi})), call.span)
    types = [elab._node_type(a) for a in arg_ids]
    refs = xi.component.value_refs()
    aux = {k: elab._node_type(r.name) for k, r in refs}
    if any(t is None for t in types) or any(t is None for t in aux.values()):
        return None
    try:
        out, params = use.component.infer_with(types, aux)
    except ShapeRuleError as exc:
        arg = getattr(exc, "arg", None)
        at = call.args[arg].span if arg is not None and arg < len(call.args) else xi.span
        diags.error("E0403", str(exc), at, notes=[(call.span, "in 'relation(...)'")])
        return None
    if use.component.hp.swap and tie_k is None:
        diags.error("E0303", "'swap = true' swaps the factors of a tied relation: add `tie = r0`", call.span)
        return None
    nid = elab._fresh(scope.prefix + name)
    node = Node(nid, "op", call.span, out, op=use, params=params)
    if tie_k is not None and not _tie_relation(elab, node, tie_k, scope.values, types):
        return None
    edges = {f"arg{i}": a for i, a in enumerate(arg_ids)}
    edges |= {f"arg{len(arg_ids) + k}": r.name for k, (_, r) in enumerate(refs)}
    return elab._add(node, edges)


def _tie_relation(elab, node: Node, tie_k: ast.Kwarg, values: dict, types: list[TensorType]) -> bool:
    """``tie = r0`` on a relation: ``r0`` is an earlier relation whose ξ tensors fit (swapped with ``swap``)."""
    diags = elab.diags
    target_id = tie_target(tie_k.value, values, diags, "relation")
    if target_id is None:
        return False
    named = elab.g.nodes[target_id]["node"]
    if named.tie is not None and named.kind == "op" and named.op.name == RELATION and named.op.component.hp.swap:
        diags.error("E0402", f"'{target_id}' is itself a swapped tie of '{named.tie}': tie to '{named.tie}'",
                    tie_k.span)
        return False
    target = elab._root(target_id)
    if target.kind != "op" or target.op.name != RELATION:
        diags.error("E0402", f"a relation ties to an earlier relation, but '{target.id}' is not one", tie_k.span,
                    notes=[(target.span, f"'{target.id}' is defined here")])
        return False
    if target.params == 0 and target.tie is None:
        diags.error("E0402", f"'{node.id}' ties to '{target.id}', whose ξ has no parameters", tie_k.span)
        return False
    mine, theirs = node.op.component.hp, target.op.component.hp
    swap = mine.swap
    if swap and mine.xi.name != "low_rank_bilinear":
        diags.error("E0402", f"'swap = true' trades a low-rank bilinear ξ's factors W_q, W_k (attention(rank = r)); "
                             f"'{mine.xi.name}' has no such pair", tie_k.span)
        return False
    ours = [_width(t) for t in types] + ([_width(types[0])] if len(types) == 1 else [])
    given = elab._input_types(target.id)
    other = [_width(t) for t in given[:len(given) - len(theirs.xi.component.value_refs())]]
    other += [other[0]] if len(other) == 1 else []
    want = other[::-1] if swap else other
    diff = [f"{k}: {v} vs {mine.xi.component.hp.model_dump().get(k)}" for k, v in
            theirs.xi.component.hp.model_dump().items() if k not in UNSHAPED_KEYS and
            v != mine.xi.component.hp.model_dump().get(k)]
    if mine.xi.name != theirs.xi.name:
        diff.insert(0, f"ξ: {theirs.xi.name} vs {mine.xi.name}")
    if ours != want:
        what = "query and context widths, swapped" if swap else "query and context widths"
        diff.append(f"{what}: {want[0]}, {want[1]} vs {ours[0]}, {ours[1]}")
    if node.params != target.params and not diff:
        diff.append(f"parameter count: {target.params} vs {node.params}")
    if diff:
        diags.error("E0402", f"'{node.id}' ties to '{target.id}', but their ξ tensors differ ('{target.id}' vs "
                             f"'{node.id}'): " + "; ".join(diff), tie_k.span,
                    notes=[(target.span, f"'{target.id}' is defined here")])
        return False
    node.tie, node.tie_span, node.params = target.id, tie_k.span, 0
    return True


def _width(t: TensorType | None) -> str:
    return "?" if t is None else str(t.features)
