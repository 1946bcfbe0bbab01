"""Block instances: a call of a block inlined into the graph under its own prefix, and ``repeat(n)`` chains of them
(``tie = b1`` / ``repeat(n, tie = true)`` share the weights of an earlier instance, check/ties.py;
``repeat(n, index = i)`` lets the call's parameters read the instance's number i = 0 … n − 1, as Swin's
``shift = i % 2 * (w // 2)``)."""

from __future__ import annotations

from rpn2c.check.block_use import note_use
from rpn2c.check.loader import Unit
from rpn2c.check.ties import take_tie_kwarg
from rpn2c.check.values import INVALID, Scope, evaluate
from rpn2c.components.registry import ValueRef
from rpn2c.errors import did_you_mean
from rpn2c.syntax import ast
from rpn2c.syntax.format import format_expr

MAX_INLINE_DEPTH = 32
REPORTED = object()  # _find_block: the name was wrong and a diagnostic was already emitted


class Instances:
    """The elaborator's part for block calls and repeats."""

    def _find_block(self, func: ast.Name, unit: Unit):
        """``(unit, definition)``, None when ``func`` names no block, or REPORTED after a located error."""
        if len(func.parts) == 1:
            d = unit.program.definition(func.parts[0])
            return (unit, d) if d is not None else None
        if len(func.parts) == 2 and func.parts[0] in unit.imports:
            sub = unit.imports[func.parts[0]]
            d = sub.program.definition(func.parts[1])
            if d is None:
                self.diags.error("E0201", f"'{func.parts[0]}' has no block '{func.parts[1]}'", func.span,
                                 suggestion=did_you_mean(func.parts[1], [x.name for x in sub.program.definitions]))
                return REPORTED
            return sub, d
        if len(func.parts) >= 2:
            self.diags.error("E0202", f"unknown import alias '{func.parts[0]}'", func.span,
                             suggestion=did_you_mean(func.parts[0], unit.imports))
            return REPORTED
        return None

    def _inline(self, name, call: ast.Call, sub: Unit, defn: ast.Definition, *, scope, unit, later) -> str | None:
        key = (id(defn), defn.name)
        if key in self.stack or len(self.stack) >= MAX_INLINE_DEPTH:
            self.diags.error("E0508", f"'{defn.name}' instantiates itself (recursive blocks are not allowed)",
                             call.span)
            return None
        n_inputs = sum(isinstance(s, ast.Input) for s in defn.body)
        if len(call.args) != n_inputs:
            self.diags.error("E0311", f"'{defn.name}' takes {n_inputs} input value(s), got {len(call.args)}",
                             call.span)
            return None
        arg_ids = [self._value_ref(a, scope, unit, later, name, i) for i, a in enumerate(call.args)]
        kwargs, tie_k = take_tie_kwarg(call.kwargs)
        given = {}
        for kw in kwargs:
            v = evaluate(kw.value, scope, self.diags)
            if isinstance(v, ValueRef):
                self.diags.error("E0310", f"block parameter '{kw.name}' takes a number, string or list; pass "
                                          "tensors as positional inputs", kw.value.span)
                v = INVALID
            given[kw.name] = (v, kw.span)
        inner = Scope(prefix=self._fresh(scope.prefix + name) + ".")
        self._bind_params(defn, given, call.span, inner)
        if any(v is INVALID for v in inner.params.values()):
            return None
        self.stack.append(key)
        first = len(self.diags.items)
        try:
            outs = self._body(sub, defn, inner, arg_ids)
        finally:
            self.stack.pop()
        note_use(self.diags, first, defn, call)
        if not outs or outs[0] is None:
            return None
        self.instances[outs[0]] = inner.prefix
        self.g.graph.setdefault("block_calls", {})[inner.prefix[:-1]] = call.span  # where the use is written
        if tie_k is not None and not self._tie_instance(inner.prefix, tie_k.value, scope.values, tie_k.span):
            return None
        return outs[0]

    def _repeat(self, name, v: ast.RepeatExpr, unit, scope, later) -> str | None:
        count = evaluate(v.count, scope, self.diags, allow_values=False)
        if count is INVALID:
            return None
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            self.diags.error("E0303", f"repeat count must be an integer >= 1, got {count!r}", v.count.span)
            return None
        target = self._find_block(v.call.func, unit)
        if target is REPORTED:
            return None
        if target is None:
            self.diags.error("E0310", f"repeat needs a block call; '{v.call.func.text}' is not a block",
                             v.call.func.span)
            return None
        if not v.call.args:
            self.diags.error("E0311", "the repeated block needs an input", v.call.span)
            return None
        size = max(1, sum(isinstance(s, ast.Assign) for s in target[1].body))
        if self.guard.work + count * size > self.guard.limits.max_work:  # refuse before expanding anything
            self.guard.reserve(count * size, v.count.span, f"repeat({count:,}) of '{target[1].name}'")
            return None
        options = self._repeat_options(v, scope)
        if options is None:
            return None
        shared, index = options
        current, prefixes = None, []
        for i in range(count):
            call = v.call
            params = {**scope.params, index: i} if index else scope.params
            if current is not None:
                local = Scope(dict(params), {**scope.values, f"__repeat_{name}": current}, scope.prefix)
                first = ast.Name((f"__repeat_{name}",), v.call.args[0].span)
                call = ast.Call(v.call.func, (first, *v.call.args[1:]), v.call.kwargs, v.call.span)
            else:
                local = Scope(dict(params), scope.values, scope.prefix) if index else scope
            current = self._value(f"{name}.{i}", call, v.span, unit, local, later)
            if current is None:
                return None
            prefixes.append(self.instances.get(current))
        if shared and None not in prefixes:
            if not all([self._tie_prefixes(p, prefixes[0], v.span) for p in prefixes[1:]]):
                return None
        return current

    def _repeat_options(self, v: ast.RepeatExpr, scope: Scope) -> tuple[bool, str | None] | None:
        """``repeat(n, tie = true, index = i)``: whether every instance uses the first one's parameters, and the
        name the call's parameters read the instance's number by (None: an error)."""
        shared, index = False, None
        for kw in v.kwargs:
            if kw.name == "index":
                index = self._repeat_index(kw, scope)
                if index is None:
                    return None
                continue
            if kw.name != "tie":
                self.diags.error("E0302", f"repeat takes a count, `tie = true|false` and `index = name`, not "
                                          f"'{kw.name}'", kw.span, suggestion=did_you_mean(kw.name, ["tie", "index"]))
                return None
            shared = evaluate(kw.value, scope, self.diags, allow_values=False)
            if not isinstance(shared, bool):
                self.diags.error("E0303", f"'tie' of a repeat is true or false, got {shared!r}", kw.value.span)
                return None
        return shared, index

    def _repeat_index(self, kw: ast.Kwarg, scope: Scope) -> str | None:
        """The new name of ``index = i`` (None after a located error)."""
        e = kw.value
        if not isinstance(e, ast.Name) or len(e.parts) != 1:
            self.diags.error("E0358", f"index = {format_expr(e)} must be a new name (such as `index = i`) for "
                                      "the repeated call's parameters to read", e.span)
            return None
        if e.text in scope.params or e.text in scope.values:
            self.diags.error("E0358", f"index = {e.text} must be a new name: '{e.text}' is already a "
                                      f"{'parameter' if e.text in scope.params else 'value'} here", e.span)
            return None
        return e.text
