"""AST -> IR graph: resolve names, inline blocks, validate components and infer every shape.

All errors of a model are collected in one pass; a value whose type could not be inferred is skipped by its
users (no cascades).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


from rpn2c.check.budget import Guard, Limits, node_elements, node_steps, per_sample
from rpn2c.ir.estimate import stepping_use
from rpn2c.check.heads import LayerShapeError, a_family, build_layer, infer_layer, resolve_use
from rpn2c.check.loader import Unit
from rpn2c.check.recurrent import build_recurrent, infer_recurrent
from rpn2c.check.instances import REPORTED, Instances
from rpn2c.check.relations import RELATION, refuse_matrix, relation_call
from rpn2c.check.ties import Tying, param_call, take_tie, take_tie_kwarg
from rpn2c.check.values import BUILTINS, INVALID, Scope, evaluate
from rpn2c.components.base import ShapeRuleError
from rpn2c.components.registry import REGISTRY, synonym_hint, unknown_hint
from rpn2c.errors import Diagnostics, Span, did_you_mean, quoted_choice
from rpn2c.ir.digraph import DiGraph
from rpn2c.ir.graph import Graph, Node
from rpn2c.ir.names import reserved
from rpn2c.ir.types import MASK_MODES, TYPE_CONSTRUCTORS, TensorType
from rpn2c.syntax import ast

OP_FAMILIES = ("op", "processing")


@dataclass
class _Frame:
    unit: Unit
    defn: ast.Definition


class Elaborator(Tying, Instances):
    def __init__(self, root: Unit, sources: dict[str, str], limits: Limits | dict | None = None):
        self.root = root
        self.diags = Diagnostics(sources)
        self.g = DiGraph()
        self.instances: dict[str, str] = {}  # a block call's output node id -> its nodes' prefix
        self.stack: list[tuple[int, str]] = []  # (id(defn), name) being inlined
        self.guard = Guard(Limits.of(limits), self.diags)
        self.top: ast.Definition | None = None  # the model (or block) being compiled

    # ------------------------------------------------------------------------------------------- entry
    def model(self, name: str | None, params: dict[str, Any] | None = None) -> Graph:
        prog = self.root.program
        self._check_definitions(self.root)
        models = [d for d in prog.definitions if d.kind == "model"]
        defn = None
        if name is not None:
            defn = prog.definition(name)
            if defn is None:
                span = Span(prog.file, 1, 1, 1, 2)
                self.diags.error("E0202", f"no model or block named '{name}'", span,
                                 suggestion=did_you_mean(name, [d.name for d in prog.definitions]))
        elif models:
            defn = models[-1]
        else:
            first = prog.definitions[0].span if prog.definitions else Span(prog.file, 1, 1, 1, 2)
            self.diags.error("E0505", "the file defines no `model`", first)
        if defn is None:
            self.diags.raise_if_any()
        scope = Scope()
        given = {}
        for key, value in (params or {}).items():
            if isinstance(value, (bool, int, float, str)) or (
                    isinstance(value, list) and all(isinstance(v, (bool, int, float, str)) for v in value)):
                given[key] = (value, defn.span)
            else:
                self.diags.error("E0303", f"model parameter '{key}' must be a number, string, bool or list of them, "
                                          f"got {type(value).__name__}", defn.span)
        self._bind_params(defn, given, defn.span, scope)
        self.top = defn
        outputs = self._body(self.root, defn, scope, inputs=None)
        self.diags.raise_if_any()
        inputs = [nid for nid in self.g.nodes if self.g.nodes[nid]["node"].kind == "input"]
        return Graph(defn.name, self.g, inputs, outputs, self.diags.sources, limits=self.guard.limits)

    def _check_definitions(self, unit: Unit) -> None:
        seen: dict[str, ast.Definition] = {}
        for d in unit.program.definitions:
            if d.name in seen:
                self.diags.error("E0203", f"'{d.name}' is defined twice", d.span,
                                 notes=[(seen[d.name].span, "first defined here")])
            seen[d.name] = d
        for sub in unit.imports.values():
            self._check_definitions(sub)

    # ------------------------------------------------------------------------------------------- params
    def _bind_params(self, defn: ast.Definition, given: dict[str, tuple[Any, Span]], call_span: Span,
                     scope: Scope) -> None:
        declared = {p.name for p in defn.params}
        for key, (_, span) in given.items():
            if key not in declared:
                self.diags.error("E0302", f"'{defn.name}' has no parameter '{key}'", span,
                                 suggestion=did_you_mean(key, declared))
        for p in defn.params:
            if p.name in scope.params:
                self.diags.error("E0206", f"parameter '{p.name}' is declared twice", p.span)
            if p.name in given:
                scope.params[p.name] = given[p.name][0]
            elif p.default is not None:
                scope.params[p.name] = evaluate(p.default, scope, self.diags, allow_values=False)
            else:
                self.diags.error("E0312", f"'{defn.name}' needs a value for its parameter '{p.name}'", call_span)
                scope.params[p.name] = INVALID

    # ------------------------------------------------------------------------------------------- bodies
    def _body(self, unit: Unit, defn: ast.Definition, scope: Scope, inputs: list[str | None] | None) -> list[str]:
        """Elaborate a definition's statements; ``inputs`` binds a block's inputs (None for the model)."""
        assigned_later = {s.name: s for s in defn.body if isinstance(s, ast.Assign)}
        block_inputs = [s for s in defn.body if isinstance(s, ast.Input)]
        if inputs is not None and len(inputs) != len(block_inputs):
            return []  # arity error reported at the call site
        returns: list[ast.Return] = []
        k = 0
        for stmt in defn.body:
            if isinstance(stmt, ast.Input):
                if stmt.name in scope.values or stmt.name in scope.params:
                    self.diags.error("E0206", f"'{stmt.name}' is already defined", stmt.span)
                    continue
                if inputs is None and (why := reserved(stmt.name, "input")):
                    self.diags.error("E0208", why, stmt.span, suggestion=f"rename it, e.g. '{stmt.name}_'")
                if inputs is None:
                    scope.values[stmt.name] = self._model_input(stmt, scope, unit)
                else:
                    bound = inputs[k]
                    k += 1
                    scope.values[stmt.name] = bound
                    if bound is not None and stmt.type is not None:
                        self._check_bound_type(stmt, bound, scope, unit)
            elif isinstance(stmt, ast.ParamDecl):
                if stmt.name in scope.values or stmt.name in scope.params:
                    self.diags.error("E0206", f"'{stmt.name}' is already defined", stmt.span)
                    continue
                call = param_call(stmt, self.diags, scope.params)
                scope.values[stmt.name] = None if call is None else self._call(stmt.name, call, unit, scope,
                                                                               assigned_later)
            elif isinstance(stmt, ast.Assign):
                if stmt.name in scope.values or stmt.name in scope.params:
                    self.diags.error("E0206", f"'{stmt.name}' is already defined", stmt.span)
                    continue
                scope.values[stmt.name] = self._value(stmt.name, stmt.value, stmt.span, unit, scope,
                                                      assigned_later)
            elif isinstance(stmt, ast.Return):
                returns.append(stmt)
        if not returns:
            self.diags.error("E0507", f"{defn.kind} '{defn.name}' has no `return`",
                             Span(defn.span.file, defn.span.line, defn.span.col, defn.span.line,
                                  defn.span.col + len(defn.kind) + len(defn.name) + 1))
            return []
        if len(returns) > 1:
            self.diags.error("E0506", "more than one `return`", returns[1].span,
                             notes=[(returns[0].span, "first return here")])
        ret = returns[0]
        if defn.kind == "block" and len(ret.names) != 1:
            self.diags.error("E0509", "a block returns exactly one value", ret.span)
        out = []
        for i, nm in enumerate(ret.names):
            span = ret.name_spans[i] if i < len(ret.name_spans) else ret.span
            if nm not in scope.values:
                self._unknown_value(nm, span, scope, assigned_later, None)
                out.append(None)
            else:
                out.append(scope.values[nm])
        return out

    def _model_input(self, stmt: ast.Input, scope: Scope, unit: Unit) -> str | None:
        nid = scope.prefix + stmt.name
        if stmt.type is None:
            hint = None
            if self.top is not None and self.top.kind == "block":  # `--model enc` names a block, not a model
                models = [d.name for d in self.root.program.definitions if d.kind == "model"]
                hint = (f"'{self.top.name}' is a block: its inputs take their types from each call; "
                        + (f"compile a model instead ({quoted_choice(models)})" if models else "or type them all"))
            self.diags.error("E0311", f"model input '{stmt.name}' needs a type, e.g. `input {stmt.name}: "
                                      "sequence[B, T, 16]`", stmt.span, suggestion=hint)
            return None
        t = self._tensor_type(stmt.type, scope)
        if t is None:
            return None
        self.g.add_node(nid, node=Node(nid, "input", stmt.span, t))
        self.guard.charge(nid, stmt.span, 0, per_sample(t))
        return nid

    def _tensor_type(self, te: ast.TensorTypeExpr, scope: Scope) -> TensorType | None:
        if te.kind not in TYPE_CONSTRUCTORS:
            self.diags.error("E0204", f"unknown tensor type '{te.kind}'", te.span,
                             suggestion=did_you_mean(te.kind, TYPE_CONSTRUCTORS))
            return None
        kind, ranks = TYPE_CONSTRUCTORS[te.kind]
        if len(te.dims) not in ranks:
            want = " or ".join(str(r) for r in ranks)
            self.diags.error("E0309", f"'{te.kind}' takes {want} dimensions, got {len(te.dims)}", te.span)
            return None
        dims = []
        for d in te.dims:
            if isinstance(d, ast.Name) and len(d.parts) == 1 and d.text not in scope.params:
                dims.append(d.text)  # a symbolic dimension
                continue
            v = evaluate(d, scope, self.diags, allow_values=False)
            if v is INVALID:
                return None
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                self.diags.error("E0309", f"a dimension must be a positive integer or a symbol, got {v!r}", d.span)
                return None
            dims.append(v)
        if kind == "edges" and dims[0] != 2:  # an edge list is [2, E]: source and target rows
            self.diags.error("E0309", f"an edge list has 2 rows (sources, targets), got {dims[0]}", te.dims[0].span)
            return None
        batched = True
        if (te.kind, len(dims)) in (("nodes", 2), ("tokens", 1)):  # one graph / one sequence: B = 1 implicit
            dims, batched = [1, *dims], False
        time_major = te.kind in ("time_major", "state")
        if time_major:  # written [T, B, F] / [S, B, H]; sample-first inside
            dims = [dims[1], dims[0], *dims[2:]]
        return TensorType(kind, tuple(dims), batched, MASK_MODES.get(te.kind), te.kind, time_major)

    def _check_bound_type(self, stmt: ast.Input, nid: str, scope: Scope, unit: Unit) -> None:
        want = self._tensor_type(stmt.type, scope)
        have = self.g.nodes[nid]["node"].type
        if want is None or have is None:
            return
        mismatch = want.kind != have.kind or len(want.shape) != len(have.shape) or any(
            isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(want.shape, have.shape))
        if mismatch:
            self.diags.error("E0401", f"input '{stmt.name}' expects {want}, but the call passes {have}", stmt.span)

    # ------------------------------------------------------------------------------------------- values
    def _unknown_value(self, name, span, scope, later, current):
        if name in later and later[name] is not current:
            self.diags.error("E0207", f"'{name}' is used before it is defined (dataflow must be acyclic and "
                                      "defined in order)", span, notes=[(later[name].span, "defined here")])
        elif name in scope.params:
            self.diags.error("E0310", f"'{name}' is a parameter, not a tensor value", span)
        else:
            self.diags.error("E0202", f"unknown value '{name}'", span,
                             suggestion=did_you_mean(name, list(scope.values)))

    def _constant_operand(self, call, scope, fname: str):
        """The tensor operands of an elementwise op and, for a number among them (`mul(x, 0.5)`, `add(x, eps)`,
        `sub(1.0, m)`), the ``constant``/``constant_at`` keyword arguments it becomes (INVALID after an error)."""
        numbers = [i for i, a in enumerate(call.args) if _is_number_expr(a, scope)]
        if not numbers:
            return list(call.args), ()
        if len(numbers) > 1 or len(numbers) == len(call.args):
            self.diags.error("E0310", f"'{fname}' takes at most one number among its operands, beside a tensor "
                                      "value; fold the numbers into one", call.args[numbers[-1]].span)
            return list(call.args), INVALID
        i = numbers[0]
        value = evaluate(call.args[i], scope, self.diags, allow_values=False)
        if value is INVALID:
            return list(call.args), INVALID
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.diags.error("E0310", f"'{fname}' takes a number or a tensor value as an operand, got {value!r}",
                             call.args[i].span)
            return list(call.args), INVALID
        span = call.args[i].span
        given = (ast.Kwarg("constant", ast.Literal(float(value), span), span),
                 ast.Kwarg("constant_at", ast.Literal(i, span), span))
        return [a for j, a in enumerate(call.args) if j != i], given

    def _value_ref(self, e: ast.Expr, scope, unit, later, owner: str, k: int) -> str | None:
        """A positional argument that must be a tensor value: a name or a nested op/block call."""
        if isinstance(e, ast.Name) and len(e.parts) == 1:
            if e.text in scope.values:
                return scope.values[e.text]
            self._unknown_value(e.text, e.span, scope, later, None)
            return None
        if isinstance(e, ast.Call):
            return self._value(f"{owner}_{e.func.parts[-1]}", e, e.span, unit, scope, later)
        self.diags.error("E0310", "expected a tensor value (a name or a call)", e.span)
        return None

    def _value(self, name: str, v: ast.Value, span: Span, unit: Unit, scope: Scope, later) -> str | None:
        if self.guard.over:  # a budget is spent: expand nothing more
            return None
        if isinstance(v, (ast.HeadExpr, ast.LayerExpr)):
            return self._layer(name, v, unit, scope, later)
        if isinstance(v, ast.RepeatExpr):
            return self._repeat(name, v, unit, scope, later)
        if isinstance(v, ast.Call):
            return self._call(name, v, unit, scope, later)
        if isinstance(v, ast.Name) and len(v.parts) == 1:
            if v.text in scope.values:
                return scope.values[v.text]
            self._unknown_value(v.text, v.span, scope, later, None)
            return None
        self.diags.error("E0310", "expected a tensor value: a head, layer, operation or block call", v.span)
        return None

    def _node_type(self, nid: str | None) -> TensorType | None:
        return None if nid is None else self.g.nodes[nid]["node"].type

    def _add(self, node: Node, edges: dict[str, str]) -> str | None:
        units = 1  # heads and channels were reserved by build_layer, before the shape rule
        if not self.guard.reserve(units, node.span, f"'{node.id}'"):
            return None  # refused: charge nothing else for it
        steps = node_steps(node)
        if steps:
            use = stepping_use(node)
            span = use.span if use is not None and use.span.line >= 1 else node.span
            if not self.guard.steps(steps, span, f"'{use.name}' in '{node.id}'" if use else f"'{node.id}'"):
                return None
        self.guard.charge(node.id, node.span, node.params, node_elements(node))
        self.g.add_node(node.id, node=node)
        for role, src in edges.items():
            if self.g.has_edge(src, node.id):  # one value in two roles (add(x, x)): one edge, both roles
                data = self.g.edges[src, node.id]
                data["also"] = (*data.get("also", ()), role)
            else:
                self.g.add_edge(src, node.id, role=role)
        return node.id

    def _fresh(self, nid: str) -> str:
        base, k = nid, 1
        while nid in self.g:
            k += 1
            nid = f"{base}_{k}"
        return nid

    # heads and layers
    def _layer(self, name, v, unit, scope, later) -> str | None:
        if isinstance(v, ast.HeadExpr) and v.kind == "recurrent":
            return self._recurrent(name, v, unit, scope, later)
        args = [self._value_ref(a, scope, unit, later, name, i) for i, a in enumerate(v.args)]
        ctx_id = None
        for kw in v.kwargs:
            if kw.name != "context":
                self.diags.error("E0315", f"a {getattr(v, 'kind', 'layer')} takes one input and an optional "
                                          f"`context = value`, not '{kw.name}'", kw.span)
                continue
            ctx_id = self._value_ref(kw.value, scope, unit, later, name, 99)
        if len(v.args) != 1:
            self.diags.error("E0311", f"a {getattr(v, 'kind', 'layer')} takes exactly one input value, got "
                                      f"{len(v.args)}", v.span)
            return None
        kind = v.kind if isinstance(v, ast.HeadExpr) else "layer"
        heads = v.heads if isinstance(v, ast.LayerExpr) else ()
        settings, tie_s = take_tie(v.settings)
        spec = build_layer(kind, heads, settings, scope, self.diags, v.span, reserve=self.guard.reserve)
        x_id = args[0]
        if spec is None or x_id is None or (ctx_id is None and any(k.name == "context" for k in v.kwargs)):
            return None
        nid = self._fresh(scope.prefix + name)
        edges = {"x": x_id}
        if ctx_id is not None:
            edges["context"] = ctx_id
        aux = {}
        for h in spec.heads:
            for use in h.xi.values():
                for _, ref in use.component.value_refs():
                    edges[f"aux:{ref.name}"] = ref.name  # by value: heads may name different values
                    aux[ref.name] = self._node_type(ref.name)
        xt, ct = self._node_type(x_id), self._node_type(ctx_id)
        if xt is None or (ctx_id is not None and ct is None) or any(t is None for t in aux.values()):
            return None
        if refuse_matrix(xt, kind, v.args[0].span, self.diags, _arg_name(v.args[0])) or refuse_matrix(
                ct, kind, v.span, self.diags):
            return None
        try:
            out, params, traces = infer_layer(spec, xt, ct, aux, v.span, label=name)
        except LayerShapeError as exc:
            self._shape_error(exc, v, name, xt)
            return None
        node = Node(nid, "layer", v.span, out, layer=spec, params=params, trace={"heads": traces})
        if not self._check_tied_psi(node):
            return None
        if tie_s is not None and not self._tie_node(node, tie_s.value, scope.values, [xt, ct], tie_s.span):
            return None
        return self._add(node, edges)

    def _recurrent(self, name, v, unit, scope, later) -> str | None:
        args = [self._value_ref(a, scope, unit, later, name, i) for i, a in enumerate(v.args)]
        for kw in v.kwargs:
            self.diags.error("E0315", f"a recurrent layer takes one input sequence; its initial states are the "
                                      f"settings `state = h0` / `cell_state = c0`, not '{kw.name}'", kw.span)
        if len(v.args) != 1:
            self.diags.error("E0311", f"a recurrent layer takes exactly one input value, got {len(v.args)}", v.span)
            return None
        settings, tie_s = take_tie(v.settings)
        built = build_recurrent(settings, scope, self.diags, v.span)
        x_id = args[0]
        if built is None or x_id is None or v.kwargs:
            return None
        spec, refs = built
        if not self.guard.reserve(spec.layers * spec.directions, v.span, f"{spec.layers:,} recurrent layers"):
            return None  # the shape rule walks every layer: charge them first
        edges = {"x": x_id}
        states = {}
        for key, (ref, at) in refs.items():
            t = self._node_type(ref.name)
            if t is None:
                return None
            edges[f"aux:{key}"] = ref.name
            states[key] = (t, at)
        xt = self._node_type(x_id)
        if xt is None or refuse_matrix(xt, "recurrent layer", v.args[0].span, self.diags, _arg_name(v.args[0])):
            return None
        try:
            out, params, trace = infer_recurrent(spec, xt, states, v.span)
        except LayerShapeError as exc:
            self._shape_error(exc, v, name, xt)
            return None
        nid = self._fresh(scope.prefix + name)
        node = Node(nid, "recurrent", v.span, out, layer=spec, params=params, trace={"recurrent": trace})
        if tie_s is not None and not self._tie_node(node, tie_s.value, scope.values, [xt], tie_s.span):
            return None
        return self._add(node, edges)

    def _shape_error(self, exc: LayerShapeError, v, name: str, xt) -> None:
        """E0402 at the setting that failed, or at the layer when the culprit is a default (it has no span)."""
        at = exc.span if exc.span.line >= 1 else v.span
        self.diags.error(exc.code, exc.message, at, notes=[(v.span, f"in '{name}' (input: {xt})")]
                         if at != v.span else (), suggestion=exc.hint)

    # op / block calls
    def _call(self, name, call: ast.Call, unit, scope, later) -> str | None:
        func = call.func
        target = self._find_block(func, unit)
        if target is REPORTED:
            return None
        if target is not None:
            return self._inline(name, call, *target, scope=scope, unit=unit, later=later)
        fname = func.text
        if fname == RELATION:
            return relation_call(self, name, call, unit, scope, later)
        from rpn2c.components.registry import lookup

        entry = lookup(fname, OP_FAMILIES) if len(func.parts) == 1 else None
        if entry is None:
            blocks = [d.name for d in unit.program.definitions if d.kind == "block"]
            blocks += [f"{a}.{d.name}" for a, u in unit.imports.items() for d in u.program.definitions]
            other = [f for f in REGISTRY if fname in REGISTRY[f] and f not in OP_FAMILIES]
            if other:
                self.diags.error("E0301", f"'{fname}' is {a_family(other[0])} component; use it inside a head "
                                          f"(e.g. as a setting), not as an operation", func.span,
                                 suggestion=synonym_hint(fname, OP_FAMILIES))
            else:
                self.diags.error("E0201", f"unknown operation or block '{fname}'", func.span,
                                 suggestion=unknown_hint(fname, OP_FAMILIES, blocks))
            return None
        args, kwargs = list(call.args), call.kwargs
        if getattr(entry.cls, "takes_constants", False):
            args, constant = self._constant_operand(call, scope, fname)
            if constant is INVALID:
                return None
            kwargs = kwargs + constant
        arg_ids = [self._value_ref(a, scope, unit, later, name, i) for i, a in enumerate(args)]
        kwargs, tie_k = take_tie_kwarg(kwargs)
        synthetic = ast.Call(ast.Name(func.parts, func.span), (), kwargs, call.span)
        use = resolve_use(synthetic, entry.family, scope, self.diags)
        lo, hi = entry.cls.arity
        if not lo <= len(call.args) <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            self.diags.error("E0311", f"'{fname}' takes {want} input value(s), got {len(call.args)}", call.span)
            return None
        if use is None or any(a is None for a in arg_ids):
            return None
        types = [self._node_type(a) for a in arg_ids]
        if any(t is None for t in types):
            return None
        comp = use.component
        try:
            _refuse_tokens(fname, comp, types)
            if entry.family == "op":
                out = comp.infer(types)
                params = comp.count(types)
            else:
                err = comp.check(types[0])
                if err:
                    raise ShapeRuleError(err)
                out, params = types[0], comp.count(types[0])
        except ShapeRuleError as exc:
            arg, code = getattr(exc, "arg", None), exc.code or "E0403"
            if arg is not None and 0 <= arg < len(call.args) and call.args[arg].span.line >= 1:
                self.diags.error(code, str(exc), call.args[arg].span, notes=[(call.span, f"in '{fname}(...)'")])
            else:
                self.diags.error(code, str(exc), call.span)
            return None
        nid = self._fresh(scope.prefix + name)
        node = Node(nid, "op", call.span, out, op=use, params=params)
        if tie_k is not None and not self._tie_node(node, tie_k.value, scope.values, types, tie_k.span):
            return None
        return self._add(node, {f"arg{i}": a for i, a in enumerate(arg_ids)})

def _is_number_expr(e, scope) -> bool:
    """Whether ``e`` is arithmetic on numbers and model parameters (no value, no call)."""
    if isinstance(e, ast.Literal):
        return True
    if isinstance(e, ast.Name):
        return len(e.parts) == 1 and e.text in scope.params and e.text not in scope.values
    if isinstance(e, ast.Neg):
        return _is_number_expr(e.operand, scope)
    if isinstance(e, ast.BinOp):
        return _is_number_expr(e.left, scope) and _is_number_expr(e.right, scope)
    if isinstance(e, ast.Index):
        return _is_number_expr(e.target, scope) and _is_number_expr(e.index, scope)
    if isinstance(e, ast.ListExpr):
        return all(_is_number_expr(i, scope) for i in e.items)
    if isinstance(e, ast.Call):
        return e.func.text in BUILTINS and all(_is_number_expr(a, scope) for a in e.args)
    return False


def _arg_name(e) -> str | None:
    return e.text if isinstance(e, ast.Name) else None


def _refuse_tokens(fname: str, comp, types: list[TensorType]) -> None:
    """Token ids are integers, not features: only an op declaring ``reads_tokens`` (the embedding) reads them."""
    if comp.reads_tokens:
        return
    for i, t in enumerate(types):
        if t.kind == "tokens":
            raise ShapeRuleError(f"'{fname}' cannot read {t}: token ids are integers, not features; embed them "
                                 "first with `embedding(x, vocab = V, dim = d)`", arg=i)


def elaborate(root: Unit, sources: dict[str, str], model: str | None = None,
              params: dict[str, Any] | None = None, limits: Limits | dict | None = None) -> Graph:
    """Check a loaded unit and build the IR graph of its model (the last one, or ``model``); ``params`` override
    the model's parameter defaults (``model m(hidden = 32)`` with ``params={"hidden": 64}``); ``limits`` are the
    resource budgets (:class:`rpn2c.check.budget.Limits`)."""
    return Elaborator(root, sources, limits).model(model, params)
