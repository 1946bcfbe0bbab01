"""The IR: a directed graph of typed nodes (:class:`rpn2c.ir.digraph.DiGraph`, in networkx's interface), with a
canonical serialisation and a content hash.

Node kinds: ``input`` (a model input), ``layer`` (one or more RPN 2 heads + fusion + remainder + processing),
``op`` (a dataflow operation or processing function), ``output``. Edges carry the input role
(``x``, ``context``, ``arg<i>`` or ``aux:<value id>``). Every node keeps its source span and inferred type.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rpn2c.errors import UNKNOWN_SPAN, Span
from rpn2c.ir import blocks
from rpn2c.ir.digraph import DiGraph, lexicographical_topological_sort
from rpn2c.ir.types import TensorType, ValueRef

if TYPE_CHECKING:
    from rpn2c.ir.trace import HeadTrace

IR_VERSION = 1


@dataclass
class Use:
    """A component placed in a slot, with its validated hyper-parameters and where it was written."""

    component: Any  # a registry entry (rpn2c.components.registry.Component), validated hyper-parameters
    span: Span = UNKNOWN_SPAN

    @property
    def name(self) -> str:
        return self.component.name

    def canonical(self) -> dict:
        """Name, family and hyper-parameters. A hyper-parameter added to an existing component after specs were
        hashed (its field marked ``json_schema_extra={"hash": "omit_default"}``) is left out at its default, so
        the specs written before it keep their content hash and their checkpoints load."""
        fields = type(self.component.hp).model_fields
        hp = {k: _plain(v) for k, v in self.component.hp if not (_omit_default(fields.get(k)) and
                                                                  v == fields[k].default)}
        return {"name": self.component.name, "family": self.component.family, "hp": hp}

    def __str__(self) -> str:
        """``name(k=v, ...)`` with only the hyper-parameters that differ from their defaults."""
        fields = type(self.component.hp).model_fields
        args = ", ".join(f"{k}={v}" for k, v in self.component.hp
                         if k in fields and (fields[k].is_required() or v != fields[k].default))
        return f"{self.component.name}({args})" if args else self.component.name


def _omit_default(field) -> bool:
    extra = getattr(field, "json_schema_extra", None)
    return isinstance(extra, dict) and extra.get("hash") == "omit_default"


def _plain(v: Any) -> Any:
    if isinstance(v, ValueRef):
        return {"ref": v.name}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, Use):
        return v.canonical()
    return v


@dataclass
class HeadSpec:
    """One head: ``Y_c = A_i κ(A_ip Z A_a) A_ap ψ_cᵀ + b`` for each channel c, fused over channels."""

    name: str
    kappa: Use
    psi: Use
    xi: dict[str, Use]  # slot name (HEAD_SLOTS) -> ξ
    channels: int
    channel_fusion: Use
    bias: str  # "none" | "tied" | "untied"
    out: int | None
    groups: int = 1  # ψ block-diagonal over g feature groups (grouped convolution)
    groups_span: Span = field(default=UNKNOWN_SPAN, compare=False, repr=False)
    post: list[Use] = field(default_factory=list)  # the head's own processing, before the layer's head fusion
    tie: str | None = None  # an earlier head of the same layer whose parameters this head uses
    tie_span: Span = field(default=UNKNOWN_SPAN, compare=False, repr=False)

    def canonical(self) -> dict:
        out = {
            "name": self.name, "kappa": self.kappa.canonical(), "psi": self.psi.canonical(),
            "xi": {k: v.canonical() for k, v in sorted(self.xi.items())}, "channels": self.channels,
            "channel_fusion": self.channel_fusion.canonical(), "bias": self.bias, "out": self.out,
            "groups": self.groups,
        }
        if self.post:  # only when given: programs without them keep their hashes
            out["post"] = [p.canonical() for p in self.post]
        if self.tie is not None:
            out["tie"] = self.tie
        return out


@dataclass(frozen=True)
class HeadSlot:
    """An interdependence slot of a head: the axis its ξ acts on, whether before κ, and the trace field sizing it."""

    name: str
    axis: str  # "attribute" (features: Z A) | "instance" (items: A Z)
    before_kappa: bool
    size_field: str  # the HeadTrace field holding the length of the axis the ξ acts on

    def size(self, t: HeadTrace) -> Any:
        return getattr(t, self.size_field)


# The head's ξ slots in application order: Y = A_i κ(A_ip Z A_a) A_ap.
HEAD_SLOTS: tuple[HeadSlot, ...] = (
    HeadSlot("xi_attribute", "attribute", True, "m"),  # the data path's features
    HeadSlot("xi_instance_prior", "instance", True, "n_items"),  # the data path's items
    HeadSlot("xi_instance", "instance", False, "nz"),  # the items entering κ
    HeadSlot("xi_attribute_post", "attribute", False, "dk"),  # κ's own output width
)
HEAD_SLOT: dict[str, HeadSlot] = {s.name: s for s in HEAD_SLOTS}


def head_slots(h: HeadSpec) -> tuple[HeadSlot, ...]:
    """The slots ``h`` fills, in application order."""
    return tuple(s for s in HEAD_SLOTS if s.name in h.xi)


def slots_before(h: HeadSpec) -> tuple[HeadSlot, ...]:
    """The slots ``h`` fills before κ, in order."""
    return tuple(s for s in head_slots(h) if s.before_kappa)


def slots_after(h: HeadSpec) -> tuple[HeadSlot, ...]:
    """The slots ``h`` fills after κ, in order."""
    return tuple(s for s in head_slots(h) if not s.before_kappa)


@dataclass
class LayerSpec:
    """Heads fused by ``fusion``, plus the remainder π (on the raw input) and processing."""

    kind: str  # head | compress | layer
    heads: list[HeadSpec]
    fusion: Use | None
    pi: Use
    pre: list[Use]
    post: list[Use]
    kv_heads: int | None = None  # G groups of query heads sharing W_k and ψ (grouped-query attention)
    kv_span: Span = field(default=UNKNOWN_SPAN, compare=False, repr=False)
    pi_placement: str = "output"  # "terms": π added to every (head, channel) term before the fusions (eq 30)

    @property
    def pi_in_terms(self) -> bool:
        """π joins every (head, channel) term before the fusions (eq 30): no kernel over whole heads applies."""
        return self.pi_placement == "terms" and self.pi.name != "zero"

    def kv_group(self, head: int) -> int:
        """The group whose keys and values query head ``head`` reads (``h // (H/G)``; its own without groups)."""
        return head if self.kv_heads is None else head // (len(self.heads) // self.kv_heads)

    def canonical(self) -> dict:
        out = {
            "kind": self.kind, "heads": [h.canonical() for h in self.heads],
            "fusion": self.fusion.canonical() if self.fusion else None, "pi": self.pi.canonical(),
            "pre": [p.canonical() for p in self.pre], "post": [p.canonical() for p in self.post],
        }
        if self.kv_heads is not None:  # only when given: programs without it keep their hashes
            out["kv_heads"] = self.kv_heads
        if self.pi_placement != "output":
            out["pi_placement"] = self.pi_placement
        return out


@dataclass
class RecurrentSpec:
    """A recurrent layer: per gate g, ``a_g(t) = κ(x_t) W_gᵀ + b_g + κ_s(h_{t-1}) U_gᵀ + c_g`` where the fed-back
    state ``h_{t-1} = (A_chain H)_t`` is a chain interdependence over the layer's own output (``h_{-1}`` = the
    initial state); the cell combines the gates into the new state. ``layers`` stacked, optionally bidirectional."""

    kind = "recurrent"  # (not a field) read like LayerSpec.kind by reports
    cell: Use
    hidden: int
    layers: int
    bidirectional: bool
    bias: bool | str  # True: b_ih and b_hh; "single": b_ih only; False: none
    dropout: float
    kappa: Use
    kappa_state: Use

    @property
    def directions(self) -> int:
        return 2 if self.bidirectional else 1

    def canonical(self) -> dict:
        return {"kind": "recurrent", "cell": self.cell.canonical(), "hidden": self.hidden, "layers": self.layers,
                "bidirectional": self.bidirectional, "bias": self.bias, "dropout": self.dropout,
                "kappa": self.kappa.canonical(), "kappa_state": self.kappa_state.canonical()}


@dataclass
class Node:
    """An IR node. ``trace`` records the inferred per-stage shapes of a layer (for tables and lowering)."""

    id: str
    kind: str  # input | layer | recurrent | op | output
    span: Span
    type: TensorType | None = None
    layer: LayerSpec | RecurrentSpec | None = None
    op: Use | None = None
    params: int = 0
    trace: dict = field(default_factory=dict)
    plan: list[str] = field(default_factory=list)  # names of the optimiser rules that fired (what runs)
    decisions: list = field(default_factory=list)  # passes.rule.Decision records, per head and slot
    terms: Any = None  # (before, after): the node's term (ir.terms) as built and as the optimiser rewrote it
    tie: str | None = None  # an earlier node whose parameters this one uses (``tie = c1``); its own count is 0
    tie_span: Span = field(default=UNKNOWN_SPAN, compare=False, repr=False)

    def canonical(self) -> dict:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "type": _type(self.type), "params": self.params}
        if self.layer is not None:
            out["layer"] = self.layer.canonical()
        if self.op is not None:
            out["op"] = self.op.canonical()
        if self.tie is not None:
            out["tie"] = self.tie
        return out

    @property
    def label(self) -> str:
        if self.kind == "layer":
            heads = self.layer.heads
            what = self.layer.kind if len(heads) == 1 else f"layer×{len(heads)}"
            return f"{self.id} = {what}"
        if self.kind == "recurrent":
            return f"{self.id} = recurrent {self.layer.cell}"
        if self.kind == "op":
            return f"{self.id} = {self.op}"
        return f"{self.kind} {self.id}"


def _type(t: TensorType | None):
    if t is None:
        return None
    return {"kind": t.kind, "shape": list(t.shape), "batched": t.batched, "mask": t.mask_mode, "role": t.role,
            "time_major": t.time_major}


@dataclass
class Graph:
    """A checked model: the graph plus its ordered inputs and outputs."""

    name: str
    g: DiGraph
    inputs: list[str]
    outputs: list[str]
    sources: dict[str, str] = field(default_factory=dict)
    log: list = field(default_factory=list)  # graph rewrites done by the optimiser (passes.canonical)
    limits: Any = None  # the check's budgets (check.budget.Limits): the compiled model holds its inputs to them

    def node(self, nid: str) -> Node:
        return self.g.nodes[nid]["node"]

    def nodes(self) -> list[Node]:
        """Nodes in a deterministic topological order (ties broken by id)."""
        return [self.node(n) for n in lexicographical_topological_sort(self.g)]

    def preds(self, nid: str) -> dict[str, str]:
        """role -> producer id for the inputs of ``nid`` (an edge's ``also`` lists further roles of the same
        producer: ``add(x, x)``)."""
        return {r: u for u, _, d in self.g.in_edges(nid, data=True) for r in (d["role"], *d.get("also", ()))}

    @property
    def param_count(self) -> int:
        return sum(n.params for n in self.nodes())

    def canonical(self) -> dict:
        edges = sorted((u, v, r) for u, v, d in self.g.edges(data=True) for r in (d["role"], *d.get("also", ())))
        return {
            "rpn_ir_version": IR_VERSION, "model": self.name,
            "inputs": self.inputs, "outputs": self.outputs,
            "nodes": [n.canonical() for n in sorted(self.nodes(), key=lambda n: n.id)],
            "edges": [list(e) for e in edges],
        }

    def to_json(self, indent: int | None = None, kernels: bool = False) -> str:
        """The canonical serialisation; ``kernels=True`` adds each node's optimiser decisions (not hashed)."""
        data = self.canonical()
        if kernels:
            for n in data["nodes"]:
                node = self.node(n["id"])
                n["kernels"] = list(node.plan)
                n["decisions"] = [d.to_json() for d in node.decisions]
        return json.dumps(data, sort_keys=True, indent=indent, default=str)

    def content_hash(self) -> str:
        """sha256 of the canonical serialisation (spans excluded): equal programs have equal hashes."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def __repr__(self) -> str:
        """The model's name, parameter count, hash and per-layer table, as ``rpn2c check`` prints them."""
        from rpn2c.ir.table import summary

        return summary(self)

    def _repr_pretty_(self, p, cycle: bool) -> None:
        """IPython's text form: the table."""
        p.text(f"Graph({self.name!r})" if cycle else repr(self))

    def _repr_html_(self) -> str:
        """Jupyter's rich form: the picture above the table."""
        from rpn2c.ir.table import html

        return html(self)

    def collapsed(self) -> Graph:
        """This graph with each block use drawn as one node (:func:`collapse`)."""
        return collapse(self)

    def _repr_svg_(self) -> str:
        """Jupyter's picture of the graph: boxes, shapes on the edges, kernels (``rpn2c graph --format svg``)."""
        from rpn2c.ir.picture import to_svg

        return to_svg(self)


def collapse(graph: Graph) -> Graph:
    """``graph`` with each block use drawn as one node (kind ``block``), and the ``n`` copies of a ``repeat`` as one
    node ``× n``: the type of the value it returns, the sum of its parameters, every kernel chosen inside it and the
    span of the call; edges between uses and other nodes are kept once."""
    stacks = blocks._stacks(blocks.block_uses(graph))
    uses = {use: [v for _, nodes in copies for v in nodes] for use, copies in stacks.items()}
    owner = {nid: use for use, nodes in uses.items() for nid in nodes}
    g = DiGraph()
    for n in graph.nodes():
        if n.id not in owner:
            g.add_node(n.id, node=n)
    for use, nodes in uses.items():
        leaving = [v for v in nodes if v in graph.outputs or any(owner.get(w) != use for w in graph.g.successors(v))]
        out = graph.node(leaving[-1] if leaving else nodes[-1])
        name = blocks.block_name(graph, *stacks[use][0])
        plan = list(dict.fromkeys(k for v in nodes for k in graph.node(v).plan))
        span = graph.g.graph.get("block_calls", {}).get(stacks[use][0][0], out.span)  # the call, else its output
        node = Node(use, "block", span, out.type, params=sum(graph.node(v).params for v in nodes), plan=plan,
                    trace={"block": name, "nodes": len(nodes), "copies": len(stacks[use])})
        g.add_node(use, node=node)
    for u, v, d in graph.g.edges(data=True):
        a, b = owner.get(u, u), owner.get(v, v)
        if a != b and not g.has_edge(a, b):
            g.add_edge(a, b, **d)
    outputs = list(dict.fromkeys(owner.get(o, o) for o in graph.outputs))
    return Graph(graph.name, g, list(graph.inputs), outputs, graph.sources, list(graph.log))
