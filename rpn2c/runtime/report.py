"""Human- and tool-readable reports: the per-layer table of ``rpn2c check`` and the component listing."""

from __future__ import annotations

from rpn2c.components.registry import FAMILIES, all_entries
from rpn2c.ir.graph import Graph, Node


def describe(node: Node) -> str:
    """A short recipe of a node: the components in each non-default slot."""
    if node.kind == "input":
        return "input"
    if node.kind == "op":
        return str(node.op)
    if node.kind == "recurrent":
        r = node.layer
        bits = [f"cell={r.cell}", "ξ=chain(state feedback)", f"H={r.hidden}"]
        if r.layers > 1:
            bits.append(f"layers={r.layers}")
        if r.bidirectional:
            bits.append("bidirectional")
        if r.kappa.name != "identity":
            bits.append(f"κ={r.kappa}")
        if r.kappa_state.name != "identity":
            bits.append(f"κ_state={r.kappa_state}")
        return " ".join(bits)
    spec = node.layer
    parts = []
    for h in spec.heads:
        bits = [f"{slot.replace('xi_', 'ξ_')}={use}" for slot, use in h.xi.items()]
        if h.kappa.name != "identity":
            bits.append(f"κ={h.kappa}")
        if h.psi.name not in ("identity", "eye") or spec.kind == "compress" and h.psi.name != "eye":
            bits.append(f"ψ={h.psi}")
        if h.channels > 1:
            bits.append(f"C={h.channels}")
        parts.append(" ".join(bits) or "perceptron")
    text = parts[0] if len(set(parts)) == 1 else " | ".join(parts)
    if len(spec.heads) > 1:
        text = f"{len(spec.heads)} heads: {text}; fusion={spec.fusion}"
    if spec.pi.name != "zero":
        text += f"; π={spec.pi}"
    return text


def layer_table(graph: Graph) -> list[dict]:
    return [{"name": n.id, "kind": n.layer.kind if n.layer else n.kind, "recipe": describe(n),
             "type": str(n.type), "params": n.params, "kernels": list(n.plan)} for n in graph.nodes()]


def render_table(graph: Graph) -> str:
    rows = [("name", "kind", "output", "params", "recipe", "kernels")]
    for r in layer_table(graph):
        rows.append((r["name"], r["kind"], r["type"], f"{r['params']:,}", r["recipe"], ",".join(r["kernels"])))
    rows.append(("total", "", "", f"{graph.param_count:,}", "", ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    widths[4] = min(widths[4], 60)
    lines = []
    for k, r in enumerate(rows):
        cells = [r[i][:widths[i]].ljust(widths[i]) if i != 3 else r[i].rjust(widths[i]) for i in range(len(r))]
        lines.append("  ".join(cells).rstrip())
        if k == 0 or k == len(rows) - 2:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _default_text(v) -> str:
    if v is ...:
        return "required"
    return repr(v)


def components_json(family: str | None = None) -> list[dict]:
    out = []
    for e in all_entries():
        if family and e.family != family:
            continue
        out.append({
            "name": e.name, "family": e.family, "doc": e.doc, "aliases": list(e.cls.aliases),
            "hyperparameters": [{"name": n, "type": t, "default": None if d is ... else d, "required": d is ...}
                                for n, t, d in e.hyperparameters()],
        })
    return out


def components_table(family: str | None = None) -> str:
    lines = []
    for fam, title in FAMILIES.items():
        if family and fam != family:
            continue
        entries = [e for e in all_entries() if e.family == fam]
        if not entries:
            continue
        lines.append(f"{fam} — {title} ({len(entries)})")
        for e in entries:
            hps = ", ".join(f"{n}={_default_text(d)}" for n, _, d in e.hyperparameters())
            alias = f" (aka {', '.join(e.cls.aliases)})" if e.cls.aliases else ""
            lines.append(f"  {e.name}{alias}({hps})")
            lines.append(f"      {e.doc}")
        lines.append("")
    return "\n".join(lines).rstrip()
