"""``rpn2c explain``: for each node, at its source location, its term of paper operations as built and as
rewritten, the rules that fired in order (where each is defined, the spans it replaced, the term before and after
and the estimated cost); then the graph rewrites (dead code, merged ops). The header counts what the rows show; a
rule whose estimated cost is the same before and after (it changed nothing measurable) is counted but not listed
in the text (the JSON marks it ``"effect": false``)."""

from __future__ import annotations

import json

from rpn2c.ir.graph import Graph
from rpn2c.ir.kernels import declared
from rpn2c.ir.terms import render
from rpn2c.runtime.report import describe


def explain_json(graph: Graph) -> dict:
    nodes = []
    for n in graph.nodes():
        if n.kind not in ("layer", "recurrent"):
            continue
        terms = {"term": str(n.terms[0]), "rewritten": str(n.terms[1])} if n.terms else {}
        nodes.append({"node": n.id, "at": str(n.span), "recipe": describe(n), "type": str(n.type), **terms,
                      **({"tie": n.tie} if n.tie else {}),
                      "decisions": [{**d.to_json(), "effect": _effect(d)} for d in n.decisions],
                      "fallbacks": {op: {"runs": f, "when": w} for op, (f, w) in _fallbacks(n)}})
    return {"model": graph.name, "nodes": nodes, "graph_rewrites": [r.to_json() for r in graph.log]}


def _fallbacks(n) -> list[tuple[str, tuple[str, str]]]:
    """The run-time fallbacks of the kernel ops in ``n``'s rewritten term: each the text of the predicate its
    component's kernel record declares, which the lowering calls on every call (``rpn2c.ir.kernels``)."""
    found = {}
    for t in n.terms[1].walk() if n.terms else ():
        use = t.info.get("use")
        k = declared(use.component, t.op) if use is not None else None
        if k is not None and k.fallback is not None:
            found[t.op] = (k.fallback.runs, k.fallback.when.text)
    return sorted(found.items())


def _ties(n) -> list[str]:
    """What ``n`` shares: a whole-node tie, and ψ matrices read from another node."""
    out = [f"  tied       computes with the parameters of '{n.tie}' (one tensor each, counted there)"] if n.tie else []
    for h in getattr(n.layer, "heads", ()):
        if h.psi.name == "tied":
            hp = h.psi.component.hp
            head = f" [head {h.name}]" if len(n.layer.heads) > 1 else ""
            out.append(f"  tied ψ{head}    the weight matrix of '{hp.source.name}'" + (", transposed" if hp.transpose
                                                                                      else ""))
    return out


def _effect(d) -> bool:
    """False for a rule whose estimated cost (work and memory) is the same before and after it."""
    c = d.cost
    return c is None or (c.flops_before, c.bytes_before) != (c.flops_after, c.bytes_after)


def _rewritten(n) -> bool:
    return bool(n.terms) and str(n.terms[1]) != str(n.terms[0])


def _same_for_heads(decisions: list) -> list[tuple[object, list[str]]]:
    """The decisions with those that differ only in their head merged: (decision, the heads it fired on)."""
    out: dict[tuple, tuple[object, list[str]]] = {}
    for d in decisions:
        key = (d.rule, d.slot, d.location, d.why, d.paper, str(d.cost), d.spans, d.head is None)
        out.setdefault(key, (d, []))[1].append(d.head)
    return list(out.values())


def _heads_text(heads: list[str | None]) -> str:
    """`` [head h0]``, or `` × 4 heads [h0, h1, h2, h3]`` (`` [h0 … h15]`` for many) for identical heads."""
    if heads == [None]:
        return ""
    if len(heads) == 1:
        return f" [head {heads[0]}]"
    names = ", ".join(heads) if len(heads) <= 4 else f"{heads[0]} … {heads[-1]}"
    return f" × {len(heads)} heads [{names}]"


def _plural(k: int, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


def render_explain(graph: Graph) -> str:
    layers = [n for n in graph.nodes() if n.kind in ("layer", "recurrent")]
    fired = [d for n in layers for d in n.decisions]
    idle = [d for d in fired if not _effect(d)]
    head = (f"model {graph.name}: {sum(map(_rewritten, layers))} of {_plural(len(layers), 'layer')} rewritten, "
            f"{_plural(len(fired) - len(idle), 'rule')} fired")
    if idle:
        head += f" (and {len(idle)} with no estimated effect, not shown: {', '.join(sorted({d.rule for d in idle}))})"
    lines = [head + f"; {_plural(len(graph.log), 'graph rewrite')} (dead code, merged operations)"]
    for r in graph.log:
        lines.append(f"{r.span}: {r.rule}: {r.detail}")
    for n in graph.nodes():
        if n.kind not in ("layer", "recurrent"):
            continue
        lines.append("")
        lines.append(f"{n.span}: {n.id} = {n.layer.kind}  {n.type}  ({describe(n)})")
        lines.extend(_ties(n))
        if n.terms:
            lines.append(f"  term       {render(n.terms[0], detail=True)}")
            if _rewritten(n):
                lines.append(f"  rewritten  {render(n.terms[1], detail=True)}")
        if not n.decisions:
            plain = n.kind == "layer" and all(not h.xi for h in n.layer.heads)
            lines.append("  no rule fired: " + ("κ then ψ, no interdependence to fuse" if plain else
                                                "the term runs as the paper writes it (ξ by its matrix, patches "
                                                "by the padding matrix)"))
        for d, heads in _same_for_heads(list(filter(_effect, n.decisions))):
            head = _heads_text(heads) if len(getattr(n.layer, "heads", ())) > 1 else ""
            lines.append(f"  {d.slot:<10} {d.rule}{head}   defined at {d.location}")
            if d.spans:
                lines.append(f"  {'':<10} replaces the terms written at {', '.join(d.spans)}")
            lines.append(f"  {'':<10} {d.why}")
            lines.append(f"  {'':<10} paper: {d.paper}")
            if d.cost is not None:
                lines.append(f"  {'':<10} estimated: {d.cost}")
        for op, (instead, when) in _fallbacks(n):
            lines.append(f"  fallback   {op} ⇢ {instead} at run time when {when}")
    return "\n".join(lines)


def explain_text(graph: Graph, fmt: str = "text") -> str:
    return json.dumps(explain_json(graph), indent=2) if fmt == "json" else render_explain(graph)
