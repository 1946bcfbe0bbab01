"""The optimiser's IR: every layer as a term over the paper's operations, built from the checked graph in one place.

One channel ``c`` of a head, ``Y_c = A_i κ(Z A_a) ψ_cᵀ + b`` (RPN 2 eq (26)-(30)), is the term

    bias(reconcile_c(xi[xi_instance](expand(xi[xi_attribute](input x)))))

(a grid head reads ``patches`` for its grid ξ). Channels meet in ``fuse_channels``, heads in ``fuse_heads``; a
recurrent layer is ``recur``. These are the *semantic* ops; rules rewrite them into *kernel* ops that map one-to-one
to torch calls (``conv``, ``unfold``, ``pool``, ``linear``, ``spmm``, ``sdpa_causal`` ...), see
``rpn2c/passes/rules``.

Terms are immutable and interned per layer (hash-consed): structurally equal terms are one object, so a subterm
that two channels share after a rewrite is computed once by construction. Identity is ``(op, args, key)``; the
``info`` payload (node id, head, slot, the component ``Use``), the source ``spans`` a term stands for and its
provenance ``prov`` (the rules that produced it) do not take part in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rpn2c.errors import UNKNOWN_SPAN, Span
from rpn2c.ir.graph import Graph, HeadSpec, Node, slots_after, slots_before

SEMANTIC_OPS = ("input", "xi", "patches", "expand", "reconcile", "bias", "fuse_channels", "fuse_heads",
                "remainder", "process", "recur")
# Kernel ops are what rules rewrite these into: each declared once, by the component that implements it (a ξ
# kernel: ``rpn2c.ir.kernels.Kernel``, collected by ``rpn2c.components.registry.kernels``) or beside its emitter
# (``rpn2c.lower.emitters.EMITTERS``); ``tests/passes/test_op_tables.py`` checks the tables against the rules.


class HeadKey(NamedTuple):
    """A head term's key: the attributes that make two of its terms different."""

    node: str
    head: str
    op: str
    slot: str | None
    channel: int | None  # None: one term for every channel (a grid head's κ, or after the rule shared_kappa)
    component: str | None


class ProcessKey(NamedTuple):
    """A processing term's key: ``stage`` ``pre`` (the layer's input), ``head`` (a head's own processing, before
    the head fusion) or ``post`` (the layer's output); ``index`` in that list."""

    node: str
    head: str | None
    stage: str
    index: int


class InputKey(NamedTuple):
    value: str  # the value id the layer reads


@dataclass(frozen=True)
class Term:
    op: str
    args: tuple[Term, ...] = ()
    key: tuple = ()  # the attributes that make two terms different: a HeadKey, ProcessKey, InputKey or (node,)
    info: dict = field(default_factory=dict, compare=False, hash=False)
    spans: frozenset[Span] = field(default=frozenset(), compare=False, hash=False)
    prov: tuple[str, ...] = field(default=(), compare=False, hash=False)

    @property
    def label(self) -> str:
        what = self.info.get("what")
        return f"{self.op}[{what}]" if what else self.op

    def walk(self):
        """Every distinct subterm, parents before children."""
        seen, stack = set(), [self]
        while stack:
            t = stack.pop()
            if id(t) in seen:
                continue
            seen.add(id(t))
            yield t
            stack.extend(reversed(t.args))

    def __str__(self) -> str:
        return render(self)


class TermTable:
    """Interning: ``make`` returns the existing term when an equal one was made before."""

    def __init__(self, *roots: Term):
        self._terms: dict[Term, Term] = {}
        for root in roots:  # adopt existing terms, so that rewrites reuse them
            for t in root.walk():
                self._terms.setdefault(t, t)

    def make(self, op: str, args=(), key=(), info=None, spans=(), prov=()) -> Term:
        key = key if isinstance(key, tuple) else tuple(key)  # a named key (HeadKey, ProcessKey, InputKey) stays named
        t = Term(op, tuple(args), key, dict(info or {}), frozenset(s for s in spans if s != UNKNOWN_SPAN),
                 tuple(prov))
        return self._terms.setdefault(t, t)


_ABSORBED = {"expand": "κ", "reconcile": "ψ"}  # what a kernel op's label names of the components it absorbed
_NO_OP = ("identity", "eye")


def _detailed_label(t: Term) -> str:
    """The label with the κ and ψ a kernel op absorbed (``conv[tied; κ=chebyshev]``), when not the identity."""
    parts = [f"{_ABSORBED[op]}={what}" for op, what in t.info.get("absorbed", ())
             if op in _ABSORBED and what not in _NO_OP]
    if t.info.get("arg") is not None:  # a kernel op's typed argument, fixed by its rule
        parts.append(str(t.info["arg"]))
    if not parts:
        return t.label
    what = t.info.get("what")
    return f"{t.op}[{'; '.join([what, *parts] if what else parts)}]"


def _collapsed(texts: list[str]) -> list[str]:
    """Runs of equal texts as one ``n × text`` (identical heads or channels)."""
    out: list[str] = []
    for i, s in enumerate(texts):
        if i and s == texts[i - 1]:
            continue
        n = next((k for k in range(i, len(texts)) if texts[k] != s), len(texts)) - i
        out.append(f"{n} × {s}" if n > 1 else s)
    return out


def render(root: Term, detail: bool = False) -> str:
    """A term as text; a subterm used more than once is named once (``%1 = ...``) and referred to by name.
    ``detail`` (``rpn2c explain``): equal arguments in a row once as ``n × term`` (identical heads), and each
    kernel op with the κ and ψ it absorbed."""
    uses: dict[int, int] = {}
    for t in root.walk():
        for a in t.args:
            uses[id(a)] = uses.get(id(a), 0) + 1
    names: dict[int, str] = {}
    lets: list[str] = []

    def text(t: Term) -> str:
        if id(t) in names:
            return names[id(t)]
        args = [text(a) for a in t.args]
        inner = t.info.get("name") if t.op == "input" else ", ".join(_collapsed(args) if detail else args)
        s = f"{_detailed_label(t) if detail else t.label}({inner})"
        if uses.get(id(t), 0) > 1 and t.op != "input":
            names[id(t)] = f"%{len(names) + 1}"
            lets.append(f"{names[id(t)]} = {s}")
            return names[id(t)]
        return s

    body = text(root)
    return "; ".join([*lets, body])


# ------------------------------------------------------------------------------------------------ building
def build_terms(graph: Graph) -> dict[str, Term]:
    """The term of every layer and recurrent node, from the checked graph (one table per node)."""
    out = {}
    for node in graph.nodes():
        if node.kind == "layer":
            out[node.id] = _layer(TermTable(), graph, node)
        elif node.kind == "recurrent":
            tab = TermTable()
            x = _input(tab, graph.preds(node.id)["x"])
            cell = node.layer.cell
            out[node.id] = tab.make("recur", (x,), (node.id,), _info(node, None, what=str(cell), use=cell),
                                    (node.span, cell.span))
    return out


def _info(node: Node, head: str | None, **extra) -> dict[str, Any]:
    return {"node": node.id, "head": head, **extra}


def _input(tab: TermTable, value: str) -> Term:
    return tab.make("input", (), InputKey(value), {"name": value})


def layer_inputs(tab: TermTable, node: Node, preds: dict) -> tuple[Term, Term, Term]:
    """A layer's (raw input, query, data) terms: the input, it under the layer's pre-processing, and the context
    (or the query). The lowering finds them by equality in the rewritten term."""
    raw = x = _input(tab, preds["x"])
    for i, p in enumerate(node.layer.pre):
        x = tab.make("process", (x,), ProcessKey(node.id, None, "pre", i), _info(node, None, what=p.name), (p.span,))
    return raw, x, _input(tab, preds["context"]) if "context" in preds else x


def _layer(tab: TermTable, graph: Graph, node: Node) -> Term:
    spec = node.layer
    raw, x, data = layer_inputs(tab, node, graph.preds(node.id))
    each = spec.pi_in_terms

    def term_pi(y, head=None, channel=None):
        """``y + π(X)``: on the fused output, or (eq 30, ``pi_placement = "terms"``) on each (head, channel) term."""
        return tab.make("remainder", (y, raw), (node.id,), _info(node, head, what=spec.pi.name, channel=channel),
                        (spec.pi.span,))

    heads = [_head(tab, node, h, t, data, term_pi if each else None) for h, t in zip(spec.heads, node.trace["heads"])]
    y = heads[0] if len(heads) == 1 and spec.fusion is None else tab.make("fuse_heads", heads, (node.id,),
                                                  _info(node, None, what=spec.fusion and spec.fusion.name),
                                                  (node.span, spec.fusion.span if spec.fusion else UNKNOWN_SPAN))
    if spec.pi.name != "zero" and not each:
        y = term_pi(y)
    for i, p in enumerate(spec.post):
        y = tab.make("process", (y,), ProcessKey(node.id, None, "post", i), _info(node, None, what=p.name),
                     (p.span,))
    return y


def _head(tab: TermTable, node: Node, h: HeadSpec, t, data: Term, term_pi=None) -> Term:
    def make(op, args, use=None, channel=None, what=None, **extra):
        key = HeadKey(node.id, h.name, op, extra.get("slot"), channel, use.name if use is not None else what)
        info = _info(node, h.name, what=use.name if use is not None else what, use=use, channel=channel, **extra)
        return tab.make(op, args, key, info, (use.span,) if use is not None else (node.span,))

    def xi(slot, z, c):
        use = h.xi[slot]
        per_channel = use.component.kind not in ("static", "grid")
        return make("xi", (z,), use, c if per_channel else None, slot=slot)

    if t.grid_kappa:  # a compression κ on the grid: pooling-like, no ψ
        y = make("expand", (data,), h.kappa, grid=True)
        return y if term_pi is None else term_pi(y, h.name)
    ys = []
    for c in range(h.channels):
        if t.view == "grid":
            z = make("patches", (data,), h.xi["xi_attribute"], mode=h.xi["xi_attribute"].component.mode)
        else:
            z = data
            for slot in slots_before(h):
                z = xi(slot.name, z, c)
        k = make("expand", (z,), h.kappa, None if t.view == "grid" else c)  # a grid head expands once
        for slot in slots_after(h):
            k = xi(slot.name, k, c)
        y = make("reconcile", (k,), h.psi, c)
        y = make("bias", (y,), None, c, what=h.bias)
        ys.append(y if term_pi is None else term_pi(y, h.name, c))
    y = ys[0] if len(ys) == 1 else make("fuse_channels", ys, h.channel_fusion)
    for i, p in enumerate(getattr(h, "post", ())):  # the head's own processing, before the head fusion
        y = tab.make("process", (y,), ProcessKey(node.id, h.name, "head", i), _info(node, h.name, what=p.name),
                     (p.span,))
    return y
