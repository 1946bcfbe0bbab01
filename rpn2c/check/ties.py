"""Parameter tying across nodes and free parameters: what the checker adds for ``tie`` and ``param``.

``c2 = head(x) { ...; tie = c1 }`` (any head, compress, layer, recurrent or operation with weights) makes ``c2``
compute with ``c1``'s parameters: one tensor, counted once (at ``c1``), gradients of both uses summed. The two nodes
must be configured alike (same components, hyper-parameters and input widths), so every parameter has one shape.
A block call ``b2 = encoder(y, tie = b1)`` ties each node of the instance to the node of the same name in the
instance ``b1``; ``repeat(n, tie = true)`` ties every instance to the first (ALBERT's shared layers).
"""

from __future__ import annotations

from typing import Any

from rpn2c.errors import Diagnostics, Span, did_you_mean
from rpn2c.ir.graph import Node
from rpn2c.syntax import ast

TIE_KEY = "tie"


def take_tie(settings: tuple[ast.Setting, ...]) -> tuple[tuple[ast.Setting, ...], ast.Setting | None]:
    """The settings without a layer-level ``tie`` and that setting (None when absent)."""
    tie = next((s for s in settings if s.key == TIE_KEY), None)
    return tuple(s for s in settings if s is not tie), tie


def take_tie_kwarg(kwargs: tuple[ast.Kwarg, ...]) -> tuple[tuple[ast.Kwarg, ...], ast.Kwarg | None]:
    """The keyword arguments of an operation or block call without ``tie`` and that argument."""
    tie = next((k for k in kwargs if k.name == TIE_KEY), None)
    return tuple(k for k in kwargs if k is not tie), tie


def tie_target(expr: ast.Expr, values: dict[str, str], diags: Diagnostics, what: str) -> str | None:
    """The node id a ``tie = name`` names (a value defined earlier), or None after a located error."""
    if not (isinstance(expr, ast.Name) and len(expr.parts) == 1):
        diags.error("E0303", f"'tie' takes the name of an earlier {what} whose parameters to use", expr.span)
        return None
    if expr.text not in values or values[expr.text] is None:
        known = sorted(k for k, v in values.items() if v is not None)
        hint = did_you_mean(expr.text, known) or (f"tie to one of: {', '.join(known)}" if known else None)
        diags.error("E0202", f"'tie' names no earlier value: '{expr.text}'", expr.span, suggestion=hint)
        return None
    return values[expr.text]


def _flat(prefix: str, v: Any, out: dict[str, Any]) -> None:
    if isinstance(v, dict):
        for k, x in v.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), x, out)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _flat(f"{prefix}[{i}]", x, out)
    else:
        out[prefix] = v


def signature(node: Node, inputs: list) -> dict[str, Any]:
    """What fixes a node's parameter shapes: its kind, its whole configuration, its inputs' feature widths and its
    parameter count (flattened, so a difference names the setting)."""
    spec = node.layer.canonical() if node.layer is not None else node.op.canonical() if node.op is not None else {}
    if node.kind == "layer":  # processing without weights (activations) may differ between the uses
        spec = _weighted_processing(node, spec, inputs[0])
    out: dict[str, Any] = {"kind": node.kind, "parameter count": node.params}
    _flat("", spec, out)
    for i, t in enumerate(inputs):
        if t is not None:
            out[f"input {i} features"] = str(t.features) if t.kind != "grid" else str(t.shape[1])
    return out


def _weighted_processing(node: Node, spec: dict, x) -> dict:
    """``spec`` with only the processing steps that hold parameters (a norm's affine, PReLU's slopes)."""
    def weighted(uses, t):
        return [u.canonical() for u in uses if t is None or u.component.count(t) > 0]

    spec = {**spec, "pre": weighted(node.layer.pre, x), "post": weighted(node.layer.post, node.type)}
    spec["heads"] = [{**c, "post": weighted(h.post, node.type)} if h.post else c
                     for c, h in zip(spec["heads"], node.layer.heads)]
    return spec


def tie(node: Node, target: Node, inputs: list, target_inputs: list, span: Span, diags: Diagnostics) -> bool:
    """Tie ``node`` to ``target`` (``node.tie``, its parameters counted at the target) or report why not."""
    if target.id == node.id:
        diags.error("E0207", f"'{node.id}' cannot tie to itself", span)
        return False
    if target.params == 0 or target.kind not in ("layer", "recurrent", "op"):
        diags.error("E0402", f"'{node.id}' ties to '{target.id}', which has no parameters", span)
        return False
    mine, theirs = signature(node, inputs), signature(target, target_inputs)
    diff = [f"{k}: {theirs.get(k, 'none')} vs {mine.get(k, 'none')}" for k in {**theirs, **mine}
            if mine.get(k) != theirs.get(k)]
    if diff:
        more = f" (and {len(diff) - 3} more)" if len(diff) > 3 else ""
        diags.error("E0402", f"'{node.id}' ties to '{target.id}', but their parameters differ ('{target.id}' vs "
                             f"'{node.id}'): " + "; ".join(diff[:3]) + more, span,
                    notes=[(target.span, f"'{target.id}' is defined here")])
        return False
    node.tie, node.tie_span = target.tie or target.id, span  # a tie to a tied node is a tie to its target
    node.params = 0
    return True


def param_call(stmt: ast.ParamDecl, diags: Diagnostics, params: dict[str, Any]) -> ast.Call | None:
    """``param p: kind[dims] = init(k = v)`` as the operation call ``parameter(kind = .., shape = [..], init = ..,
    k = v)`` (the registry entry checks it)."""
    for d in stmt.type.dims:
        if isinstance(d, ast.Name) and len(d.parts) == 1 and d.text not in params:
            diags.error("E0309", f"a parameter's dimensions are numbers, but '{d.text}' is a symbol: a learnable "
                                 "tensor has one fixed shape", d.span)
            return None
    s = stmt.span
    kwargs = [ast.Kwarg("kind", ast.Literal(stmt.type.kind, stmt.type.span), stmt.type.span),
              ast.Kwarg("shape", ast.ListExpr(stmt.type.dims, stmt.type.span), stmt.type.span)]
    init = stmt.init
    if init is not None:
        func = init.func if isinstance(init, ast.Call) else init
        if not isinstance(func, ast.Name) or len(func.parts) != 1 or (isinstance(init, ast.Call) and init.args):
            diags.error("E0303", "a parameter's initialisation is zeros, ones, constant(value = v), "
                                 "normal(std = s, mean = m), trunc_normal(std = s, mean = m) or "
                                 "uniform(low = a, high = b)", init.span)
            return None
        kwargs.append(ast.Kwarg("init", ast.Literal(func.text, func.span), func.span))
        if isinstance(init, ast.Call):
            kwargs.extend(init.kwargs)
    return ast.Call(ast.Name(("parameter",), s), (), tuple(kwargs), s)


class Tying:
    """The elaborator's part for ``tie``: ``self.g`` (the graph so far), ``self.diags``, ``self.instances``
    (a block call's output node id -> the prefix of its nodes)."""

    def _input_types(self, nid: str) -> list:
        roles = {d["role"]: self.g.nodes[u]["node"].type for u, _, d in self.g.in_edges(nid, data=True)}
        keys = ["x", "context"] if "x" in roles else sorted(r for r in roles if r.startswith("arg"))
        return [roles.get(k) for k in keys]

    def _root(self, nid: str) -> Node:
        node = self.g.nodes[nid]["node"]
        return self.g.nodes[node.tie]["node"] if node.tie is not None else node

    def _tie_node(self, node: Node, expr: ast.Expr, values: dict[str, str], inputs: list, span: Span) -> bool:
        """``tie = name`` on a head, layer, recurrent layer or operation ``node`` (not yet in the graph)."""
        target_id = tie_target(expr, values, self.diags, "layer or operation with weights")
        if target_id is None:
            return False
        return tie(node, self._root(target_id), inputs, self._input_types(target_id), span, self.diags)

    def _tie_instance(self, prefix: str, expr: ast.Expr, values: dict[str, str], span: Span) -> bool:
        """``b2 = block(.., tie = b1)``: each node of the instance ``prefix`` ties to its namesake in ``b1``'s."""
        target_id = tie_target(expr, values, self.diags, "block call")
        if target_id is None:
            return False
        if target_id not in self.instances:
            self.diags.error("E0303", f"'tie' on a block call names an earlier call of a block; "
                                      f"'{target_id}' is not one", expr.span)
            return False
        return self._tie_prefixes(prefix, self.instances[target_id], span)

    def _tie_prefixes(self, prefix: str, theirs: str, span: Span) -> bool:
        ok = True
        for nid in [n for n in self.g if n.startswith(prefix)]:
            node = self.g.nodes[nid]["node"]
            if node.kind not in ("layer", "recurrent", "op") or node.params == 0:
                continue
            other = theirs + nid[len(prefix):]
            if other not in self.g:
                self.diags.error("E0402", f"'{nid}' has no counterpart '{other}' to tie to", span)
                ok = False
                continue
            ok = tie(node, self._root(other), self._input_types(nid), self._input_types(other), span,
                     self.diags) and ok
        return ok

    def _check_tied_psi(self, node: Node) -> bool:
        """``psi = tied(src)``: ``src`` is an earlier node with one weight matrix of the head's ψ shape (n x D), or
        of its transpose with ``transpose = true``."""
        ok = True
        for h, t in zip(node.layer.heads, node.trace["heads"]):
            for slot, use in h.xi.items():
                parts = [part for part, _ in getattr(use.component, "parts", ())]
                if any(getattr(c.hp, "share_psi", False) for c in parts) or (
                        slot != "xi_instance" and getattr(use.component.hp, "share_psi", False)):
                    self.diags.error("E0402", "share_psi = true scores with the head's own ψ: graph_attention takes "
                                              "it only as the head's xi_instance itself", use.span)
                    ok = False
            xi = h.xi.get("xi_instance")
            if xi is not None and getattr(xi.component.hp, "share_psi", False):
                ok = _check_share_psi(h, t, xi, self.diags) and ok
            if h.psi.name != "tied":
                continue
            hp = h.psi.component.hp
            src = self._root(hp.source.name)
            shape = weight_shape(src)
            want = (t.n, t.d)
            have = None if shape is None else (shape[::-1] if hp.transpose else shape)
            if h.channels != 1 or h.groups != 1:
                self.diags.error("E0402", "a tied ψ is one matrix: the head needs channels = 1 and groups = 1",
                                 h.psi.span)
                ok = False
            elif shape is None:
                self.diags.error("E0402", f"'psi = tied({hp.source.name})' needs a node with one weight matrix "
                                          "(an embedding, or a one-head layer with psi = identity)", h.psi.span)
                ok = False
            elif have != want:
                flip = "" if hp.transpose else " (or transposed, with `transpose = true`)"
                self.diags.error("E0402", f"ψ of this head is {want[0]} x {want[1]} (out x κ's width), but "
                                          f"'{hp.source.name}' holds a {shape[0]} x {shape[1]} matrix{flip}",
                                 h.psi.span, notes=[(src.span, f"'{src.id}' is defined here")])
                ok = False
        return ok


def _check_share_psi(h, t, xi, diags: Diagnostics) -> bool:
    """``graph_attention(share_psi = true)``: W ∈ R^{r x M} is the head's ψ, so ψ is a plain matrix over the raw
    features (identity κ and ψ, one channel) with r = out rows."""
    rank = xi.component.hp.rank
    if h.psi.name != "identity" or h.kappa.name != "identity" or h.channels != 1 or h.groups != 1:
        diags.error("E0402", "share_psi = true scores with the head's ψ weight: the head needs psi = identity, "
                             "kappa = identity, one channel and one group", xi.span)
        return False
    if t.n != rank:
        diags.error("E0402", f"share_psi = true: the head's ψ has {t.n} rows (out), but rank = {rank}", xi.span)
        return False
    return True


def weight_shape(node: Node) -> tuple[int, int] | None:
    """The one weight matrix a ``tied`` ψ can read from ``node``: an embedding table (V x d) or the ψ weight
    (n x D) of a one-head layer with an identity ψ; None for anything else."""
    if node.kind == "op" and node.op.name == "embedding":
        return node.op.component.hp.vocab, node.op.component.hp.dim
    if node.kind == "layer" and len(node.layer.heads) == 1:
        h, t = node.layer.heads[0], node.trace["heads"][0]
        if h.psi.name == "identity" and h.channels == 1 and h.groups == 1 and not t.grid_kappa:
            return t.n, t.d
    return None
