"""Head and layer settings -> :class:`LayerSpec`, and the layer shape rule.

Per head and channel c (semantics.md):  ``Y_c = A_i · κ(A_ip · Z · A_a) · A_ap · ψ(w_c)ᵀ + b``, with Z the data
input (the ``context`` when given, else the main input after ``pre`` processing); channels are fused by
``channel_fusion``, heads by ``fusion``; then ``+ π(x)`` on the raw main input, then ``post`` processing.
"""

from __future__ import annotations

import math
import typing
from typing import Any

from pydantic import ValidationError

from rpn2c.components.base import Interdependence, Kappa, ShapeRuleError, XiContext
from rpn2c.components.xi import GridXi as GridXiLike
from rpn2c.components.registry import REGISTRY, SLOT_FAMILIES, FAMILIES, ValueRef, lookup, names, unknown_hint
from rpn2c.check.values import INVALID, MAX_INT, Scope, evaluate
from rpn2c.errors import Diagnostics, Span, close_names, did_you_mean, quoted_choice
from rpn2c.ir.graph import HEAD_SLOT, HeadSlot, HeadSpec, LayerSpec, Use, slots_after, slots_before
from rpn2c.ir.layout import attention_heads, kv_sharing_problem
from rpn2c.ir.names import reserved
from rpn2c.ir.trace import HeadTrace
from rpn2c.ir.types import TensorType, dim_add, dim_mul, grid, is_known, items, numel, vector
from rpn2c.syntax import ast

HEAD_KEYS = ("kappa", "psi", *HEAD_SLOT, "channels", "channel_fusion", "bias", "out", "groups")
LAYER_KEYS = ("fusion", "pi", "pi_placement", "pre", "post")
SINGLE_HEAD_KEYS = HEAD_KEYS + LAYER_KEYS + ("heads", "kv_heads")
DECL_KEYS = HEAD_KEYS + ("post", "tie")  # a `head name { ... }` of a layer: also its own processing and a tie
RECURRENT_ONLY = ("cell", "layers", "bidirectional", "state", "cell_state", "kappa_state")  # recurrent(x) settings
AUX_KINDS = {"edges": ("edges",), "weight": ("edge_weight",), "key_padding": ("mask",), "attn_mask": ("mask",),
             "keys": ("items",)}


class LayerShapeError(Exception):
    def __init__(self, message: str, span: Span, notes=(), code: str = "E0402", hint: str | None = None):
        super().__init__(message)
        self.message, self.span, self.notes, self.code, self.hint = message, span, tuple(notes), code, hint


# ------------------------------------------------------------------------------------------------ components
def a_family(family: str) -> str:
    """``a processing``, ``an interdependence``: a family name with its article."""
    return ("an " if family[0] in "aeiou" else "a ") + family


def slot_hint(name: str, family: str) -> str | None:
    """Where a component of ``family`` goes: the head settings that take it (``post = [relu]``)."""
    slots = [s for s, fams in SLOT_FAMILIES.items() if family in fams and s not in ("kappa_state", "channel_fusion")]
    if not slots:
        return None
    slot = "post" if "post" in slots else slots[0]
    return (f"'{name}' goes in {quoted_choice(slots, '`')}, e.g. "
            f"`{slot} = {f'[{name}]' if slot == 'post' else name}`")


def resolve_use(expr: ast.Expr, slot: str, scope: Scope, diags: Diagnostics) -> Use | None:
    """A component expression (``name`` or ``name(k = v)``) for ``slot`` -> validated :class:`Use`."""
    families = SLOT_FAMILIES.get(slot, (slot,))
    if isinstance(expr, ast.Name):
        func, kwargs, args, span = expr, (), (), expr.span
    elif isinstance(expr, ast.Call):
        func, kwargs, args, span = expr.func, expr.kwargs, expr.args, expr.span
    else:
        what = " or ".join(FAMILIES[f].split(" ")[0] + " " + FAMILIES[f].split(" ")[1] for f in families)
        diags.error("E0310", f"'{slot}' expects a component ({what}), not a literal", expr.span)
        return None
    name = func.text
    entry = lookup(name, families)
    if entry is None:
        other = [f for f in REGISTRY if name in REGISTRY[f] and f not in families]
        if other:
            diags.error("E0301", f"'{name}' is {a_family(other[0])} component; '{slot}' takes {' or '.join(families)}",
                        func.span, suggestion=unknown_hint(name, families) or slot_hint(name, other[0]))
        else:
            diags.error("E0201", f"unknown {' or '.join(families)} component '{name}'", func.span,
                        suggestion=unknown_hint(name, families))
        return None
    positional = entry.cls.positional
    if len(args) > len(positional):
        diags.error("E0305", f"hyper-parameters of '{name}' are keyword arguments (`key = value`)",
                    args[len(positional)].span)
        return None
    kwargs = (*(ast.Kwarg(k, a, a.span) for k, a in zip(positional, args)), *kwargs)
    values: dict[str, Any] = {}
    spans: dict[str, Span] = {}
    ok = True
    for kw in kwargs:
        if kw.name in values:
            diags.error("E0308", f"hyper-parameter '{kw.name}' is given twice", kw.span)
            ok = False
            continue
        v = evaluate(kw.value, scope, diags)
        ok &= v is not INVALID
        values[kw.name], spans[kw.name] = v, kw.span
    if not ok:
        return None
    try:
        hp = entry.schema(**values)
    except ValidationError as exc:
        fields = list(entry.schema.model_fields)
        errors = exc.errors()
        # a misspelt key ('sise' for 'size') is one mistake: do not also report the field it meant as missing
        meant = {m for e in errors if e["type"] == "extra_forbidden" and e["loc"]
                 for m in close_names(str(e["loc"][0]), fields)}
        # a value that fits no member of a union (a float or "fan_in") is one mistake: report its most telling error
        errors = sorted(errors, key=lambda e: e["type"] in ("literal_error", "string_type"))
        reported: set[str] = set()
        for err in errors:
            if err["type"] != "extra_forbidden" and err["loc"]:
                if str(err["loc"][0]) in reported:
                    continue
                reported.add(str(err["loc"][0]))
            if err["type"] == "missing" and err["loc"] and err["loc"][0] in meant:
                continue
            key = str(err["loc"][0]) if err["loc"] else ""
            at = spans.get(key, span)
            if err["type"] == "extra_forbidden":
                known = ", ".join(fields) or "none"
                diags.error("E0302", f"'{name}' has no hyper-parameter '{key}' (it takes: {known})", at,
                            suggestion=did_you_mean(key, fields))
            elif err["type"] == "missing":
                diags.error("E0303", f"'{name}' needs the hyper-parameter '{key}'", span)
            elif isinstance(values.get(key), ValueRef) or "ValueRef" in str(err.get("msg", "")):
                diags.error("E0303", f"'{key}' of '{name}' expects the name of an input value", at)
            elif not key:  # a rule over several hyper-parameters
                diags.error("E0303", f"bad hyper-parameters for '{name}': {err['msg']}", at)
            else:
                diags.error("E0303", f"bad value for '{key}' of '{name}': {err['msg']}", at,
                            suggestion=_value_hint(entry, key, values.get(key)))
        return None
    for key, v in hp:
        if _out_of_range(v):
            diags.error("E0303", f"'{key}' of '{name}' is out of range (integers stay below 10**18)",
                        spans.get(key, span))
            return None
    return Use(entry.cls(hp), span)


def _value_hint(entry, key: str, value) -> str | None:
    """Help for a refused value: the entry's own word on it (``how = "last"`` of pool_items is ``last(x)``), else
    the closest allowed string of a ``Literal`` field (in double quotes, as the spec writes it)."""
    if not isinstance(value, str):
        return None
    hint = entry.cls.value_hints.get(key, {}).get(value)
    if hint is not None:
        return hint
    field = entry.schema.model_fields.get(key)
    close = close_names(value, _literals(field.annotation)) if field is not None else []
    return f"did you mean {quoted_choice(close, chr(34))}?" if close else None


def _literals(annotation) -> list[str]:
    """The strings a ``Literal`` annotation (possibly inside Optional / Union / Annotated) allows."""
    if typing.get_origin(annotation) is typing.Literal:
        return [a for a in typing.get_args(annotation) if isinstance(a, str)]
    return [s for a in typing.get_args(annotation) for s in _literals(a)]


def _out_of_range(v) -> bool:
    """An integer hyper-parameter (or list entry) of 10**18 or more: a float literal such as 1e300 given for an
    integer field."""
    if isinstance(v, (list, tuple)):
        return any(_out_of_range(x) for x in v)
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) >= MAX_INT


def _uses(expr, slot, scope, diags) -> list[Use] | None:
    items_ = expr.items if isinstance(expr, ast.ListExpr) else (expr,)
    out = [resolve_use(e, slot, scope, diags) for e in items_]
    return None if any(u is None for u in out) else out


def _default(name: str, family: str) -> Use:
    entry = REGISTRY[family][name]
    return Use(entry.cls(entry.schema()))


def _int_setting(s: ast.Setting, scope, diags, minimum=1) -> int | None:
    v = evaluate(s.value, scope, diags, allow_values=False)
    if v is INVALID:
        return None
    if isinstance(v, float) and v.is_integer() and abs(v) < MAX_INT:
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum or v >= MAX_INT:
        diags.error("E0303", f"'{s.key}' must be an integer >= {minimum}, got {v!r}", s.value.span)
        return None
    return v


# ------------------------------------------------------------------------------------------------ settings -> spec
def build_layer(kind: str, head_decls, settings, scope: Scope, diags: Diagnostics, span: Span,
                reserve=None) -> LayerSpec | None:
    """Validate the settings of a ``head``/``compress``/``layer`` expression into a LayerSpec. ``reserve(n, span,
    what)`` is asked before ``heads = n`` copies are made (the check-work budget) and may refuse."""
    allowed_layer = SINGLE_HEAD_KEYS if kind != "layer" else LAYER_KEYS
    layer_settings = {}
    head_settings = []
    kv = None  # (G, where) of `kv_heads = G`
    start = len(diags.items)
    for s in settings:
        if s.key not in allowed_layer:
            hint = did_you_mean(s.key, allowed_layer)
            if s.key in RECURRENT_ONLY:
                hint = f"'{s.key}' is a setting of a recurrent layer: `h = recurrent(x) {{ cell = gru  out = 32 }}`"
            if kind == "layer" and s.key in DECL_KEYS:
                hint = f"'{s.key}' belongs inside a `head name {{ ... }}` block of the layer"
            diags.error("E0304", f"unknown {kind} setting '{s.key}'", s.span, suggestion=hint)
        elif s.key in layer_settings:
            diags.error("E0308", f"setting '{s.key}' is given twice", s.span)
        else:
            layer_settings[s.key] = s
    if kind == "layer":
        if not head_decls:
            diags.error("E0313", "a layer needs at least one `head name { ... }`", span)
        names_seen = set()
        for h in head_decls:
            if h.name in names_seen:
                diags.error("E0206", f"head name '{h.name}' is used twice in this layer", h.span)
            elif why := reserved(h.name, "head"):
                diags.error("E0208", why, h.span, suggestion=f"rename it, e.g. '{h.name}_'")
            names_seen.add(h.name)
            hs = {}
            for s in h.settings:
                if s.key not in DECL_KEYS:
                    hint = did_you_mean(s.key, DECL_KEYS)
                    if s.key in LAYER_KEYS:
                        hint = f"'{s.key}' is a layer setting: put it after the heads"
                    diags.error("E0304", f"unknown head setting '{s.key}'", s.span, suggestion=hint)
                elif s.key in hs:
                    diags.error("E0308", f"setting '{s.key}' is given twice", s.span)
                else:
                    hs[s.key] = s
            if "tie" in hs:
                _check_tie(hs["tie"], h.name, names_seen, [d.name for d in head_decls], diags)
            head_settings.append((h.name, hs, h.span))
    else:
        copies = 1
        if "heads" in layer_settings:
            s = layer_settings.pop("heads")
            copies = _int_setting(s, scope, diags) or 1
            if copies > 1 and reserve is not None and not reserve(copies, s.value.span, f"heads = {copies:,}"):
                return None
        kv = _kv_heads(layer_settings.pop("kv_heads", None), copies, scope, diags)
        hs = {k: v for k, v in layer_settings.items() if k in HEAD_KEYS}
        head_settings = [(f"h{i}" if copies > 1 else "h", hs, span) for i in range(copies)]
        layer_settings = {k: v for k, v in layer_settings.items() if k in LAYER_KEYS}
    compress = kind == "compress"
    heads = []
    for name, hs, hspan in head_settings:
        heads.append(_build_head(name, hs, compress, scope, diags, hspan))
        h = heads[-1]
        if h is not None and h.channels > 1 and reserve is not None and not reserve(
                h.channels, hs["channels"].value.span, f"channels = {h.channels:,}"):
            return None  # the shape rule and the lowering handle each channel: charge them before either runs
    def one(key, default_name, family):
        s = layer_settings.get(key)
        return _default(default_name, family) if s is None else resolve_use(s.value, key, scope, diags)

    pi = one("pi", "zero", "remainder")
    placement = "output"
    if "pi_placement" in layer_settings:
        s = layer_settings["pi_placement"]
        v = evaluate(s.value, scope, diags, allow_values=False)
        if v in ("output", "terms"):
            placement = v
        elif v is not INVALID:
            diags.error("E0303", "'pi_placement' is \"output\" (π added once, after the fusions) or \"terms\" "
                                 f"(eq 30: π in every head and channel term, before the fusions), got {v!r}",
                        s.value.span)
    fusion = None
    if len(heads) > 1 or "fusion" in layer_settings:
        fusion = one("fusion", "mean", "fusion")
    pre = _uses(layer_settings["pre"].value, "pre", scope, diags) if "pre" in layer_settings else []
    post = _uses(layer_settings["post"].value, "post", scope, diags) if "post" in layer_settings else []
    if len(diags.items) > start or any(h is None for h in heads):
        return None
    kv_heads, kv_span = kv if kv is not None else (None, span)
    return LayerSpec(kind, heads, fusion, pi, pre, post, kv_heads, kv_span, placement)


def _kv_heads(s: ast.Setting | None, heads: int, scope, diags) -> tuple[int, Span] | None:
    """``kv_heads = G`` beside ``heads = H``: G groups of H/G query heads, so G must divide H."""
    if s is None:
        return None
    g = _int_setting(s, scope, diags)
    if g is None:
        return None
    if heads % g:
        divisors = [d for d in range(1, min(heads, 64) + 1) if heads % d == 0]
        diags.error("E0345", f"kv_heads = {g} must divide heads = {heads}: each group of key/value heads serves "
                             "the same number of query heads", s.value.span,
                    suggestion=f"use one of {', '.join(map(str, divisors))} (1: multi-query, {heads}: multi-head)")
        return None
    return g, s.value.span


def _build_head(name, hs: dict[str, ast.Setting], compress, scope, diags, span) -> HeadSpec | None:
    def comp(key, default_name, family):
        s = hs.get(key)
        return _default(default_name, family) if s is None else resolve_use(s.value, key, scope, diags)

    kappa = comp("kappa", "identity", "expansion")
    psi = comp("psi", "eye" if compress else "identity", "reconciliation")
    xi = {}
    for slot in HEAD_SLOT:
        if slot in hs:
            use = resolve_use(hs[slot].value, slot, scope, diags)
            if use is not None and use.name != "identity":
                xi[slot] = use
    channels = _int_setting(hs["channels"], scope, diags) if "channels" in hs else 1
    groups = _int_setting(hs["groups"], scope, diags) if "groups" in hs else 1
    cf = comp("channel_fusion", "mean", "fusion")
    out = _int_setting(hs["out"], scope, diags) if "out" in hs else None
    bias = "none" if compress else "tied"
    if "bias" in hs:
        v = evaluate(hs["bias"].value, scope, diags, allow_values=False)
        mapping = {True: "tied", False: "none", "tied": "tied", "untied": "untied", "none": "none"}
        if v is INVALID:
            return None
        if not isinstance(v, (bool, str)) or v not in mapping:  # a list or a number: not a bias mode
            diags.error("E0303", f"'bias' must be true, false, \"tied\" or \"untied\", got {v!r}", hs["bias"].value.span)
            return None
        bias = mapping[v]
    if None in (kappa, psi, cf, channels, groups) or ("out" in hs and out is None):
        return None
    post = _uses(hs["post"].value, "post", scope, diags) if "post" in hs else []
    if post is None:
        return None
    tie = hs["tie"].value if "tie" in hs else None  # checked by _check_tie
    return HeadSpec(name, kappa, psi, xi, channels, cf, bias, out, groups,
                    hs["groups"].span if "groups" in hs else span, post,
                    tie.text if isinstance(tie, ast.Name) else None, tie.span if tie is not None else span)


def _check_tie(s: ast.Setting, name: str, earlier: set[str], declared: list[str], diags: Diagnostics) -> None:
    """``tie = other``: ``other`` names a head declared before this one in the same layer."""
    v = s.value
    if not isinstance(v, ast.Name) or len(v.parts) != 1:
        diags.error("E0303", "'tie' takes the name of an earlier head of this layer", v.span)
    elif v.text == name:
        diags.error("E0207", f"head '{name}' cannot tie to itself", v.span)
    elif v.text not in declared:
        diags.error("E0201", f"'tie' names no head of this layer: '{v.text}'", v.span,
                    suggestion=did_you_mean(v.text, [d for d in declared if d != name]))
    elif v.text not in earlier - {name}:
        diags.error("E0207", f"head '{name}' ties to '{v.text}', which is declared after it: a tie names an "
                             "earlier head", v.span)


# ------------------------------------------------------------------------------------------------ shape rule
def _need_int(v, what, span) -> int:
    if not is_known(v):
        raise LayerShapeError(f"{what} must be a known integer, got '{v}'", span)
    return v


def infer_layer(spec: LayerSpec, x: TensorType, ctx: TensorType | None, aux: dict[str, TensorType],
                span: Span, label: str | None = None) -> tuple[TensorType, int, list[HeadTrace]]:
    """Output type, parameter count and per-head traces of a layer, or LayerShapeError. ``label`` (the value's
    name) names the head of a ``head``/``compress`` expression in messages: its internal head name is not the
    user's."""
    params = 0
    xt = x
    for t in (x, ctx):
        if t is not None and t.kind == "tokens":
            raise LayerShapeError(f"a {spec.kind} cannot read {t}: token ids are integers, not features; embed "
                                  "them first with `embedding(x, vocab = V, dim = d)`", span)
    for p in spec.pre:
        params += _processing(p, xt)
    data = ctx if ctx is not None else xt
    if data.kind not in ("vector", "items", "grid"):
        raise LayerShapeError(f"a head needs features; '{data}' is an {data.kind} value", span)
    if ctx is not None and (x.kind != "items" or ctx.kind != "items"):
        raise LayerShapeError(f"cross interdependence needs items on both sides, got {x} and {ctx}", span)
    if ctx is not None and x.batched and ctx.batched and str(x.batch) != str(ctx.batch):
        raise LayerShapeError(f"the queries {x} and the context {ctx} have different batch axes ({x.batch} and "
                              f"{ctx.batch}): a context is read sample by sample with its queries, so both need "
                              "the same batch axis", span)
    if ctx is not None:  # the queries' width sizes ξ's weights too
        _need_int(x.features, "the query's feature count", span)
    traces = [_infer_head(h, xt, data, aux, span, h.name if spec.kind == "layer" or label is None else label,
                          len(spec.heads)) for h in spec.heads]
    _tie_heads(spec, traces)
    if spec.kv_heads is not None:
        _group_kv(spec, traces, aux)
    _share_qk_norms(spec, traces, aux)
    for h, t in zip(spec.heads, traces):
        for p in h.post:
            t.params += _processing(p, _head_type(x, t, t.n))
    params += sum(t.params for t in traces)
    widths = [t.n for t in traces]
    outs = {str(t.n_out) for t in traces}
    if len(outs) > 1 or len({t.view for t in traces}) > 1 or len({t.spatial_out for t in traces}) > 1:
        raise LayerShapeError("the heads of a layer produce different item counts or layouts: "
                              + ", ".join(f"{h.name}: {t.n_out}" for h, t in zip(spec.heads, traces)), span)
    width = widths[0]
    if spec.fusion is not None:
        err = spec.fusion.component.check(widths)
        if err:
            raise LayerShapeError(err, spec.fusion.span)
        width = spec.fusion.component.out_features(widths)
        params += spec.fusion.component.count(widths)
    out = _head_type(x, traces[0], width)
    pi = spec.pi.component
    if pi.name != "zero":
        m_in = _need_int(x.features, "the remainder's input features", spec.pi.span)
        err = pi.check(m_in, width)
        if err:
            raise LayerShapeError(err, spec.pi.span)
        if x.kind != out.kind or (x.kind == "items" and str(x.items) != str(out.items)) or \
                (x.kind == "grid" and tuple(map(str, x.spatial)) != tuple(map(str, out.spatial))):
            raise LayerShapeError(f"the remainder adds the input {x} to an output {out}: item counts or grid "
                                  "sizes differ", spec.pi.span)
        if spec.pi_placement == "terms":  # eq 30: π joins every (head, channel) term, so it has their width
            terms = [t.n if t.grid_kappa else h.out if h.out is not None else t.d for h, t in zip(spec.heads, traces)]
            if any(str(n) != str(width) for n in terms):
                raise LayerShapeError(f"pi_placement = \"terms\" adds π to every head and channel term "
                                      f"({', '.join(map(str, terms))} wide), but the fusions make the output {width} "
                                      "wide: a concatenation changes the width; use pi_placement = \"output\"",
                                      spec.pi.span)
        params += pi.count(m_in, width)
        rows = x.items if x.kind == "items" else numel(x.spatial) if x.kind == "grid" else 1
        traces[0].scratch = dim_add(traces[0].scratch, dim_mul(pi.scratch(m_in, width), rows))
    for p in spec.post:
        params += _processing(p, out)
    return out, params, traces


def _head_type(x: TensorType, t: HeadTrace, width) -> TensorType:
    """The type of a head's output (or of the fused heads') of the given width."""
    if t.view == "grid":
        return grid(x.batch, width, t.spatial_out)
    if t.view == "items":
        return items(x.batch, t.n_out, width, batched=x.batched, role="sequence" if x.time_major else (x.role or "items"))
    return vector(x.batch, width)


def _tie_signature(h: HeadSpec, t: HeadTrace) -> dict:
    """What fixes a head's parameter shapes: its components per slot, widths and parameter count."""
    return {"κ": h.kappa.name, "ψ": h.psi.name, **{k: u.name for k, u in sorted(h.xi.items())},
            "channels": h.channels, "channel fusion": h.channel_fusion.name, "groups": h.groups, "bias": h.bias,
            "out": t.n, "κ's width": t.d, "parameter count": t.params}


def _tie_heads(spec: LayerSpec, traces: list[HeadTrace]) -> None:
    """A tied head uses its target's parameters: their shapes must agree; they are counted once (the target's)."""
    signatures = {h.name: _tie_signature(h, t) for h, t in zip(spec.heads, traces)}
    for h, t in zip(spec.heads, traces):
        if h.tie is None:
            continue
        mine, theirs = signatures[h.name], signatures[h.tie]
        diff = [f"{k} {theirs.get(k, 'none')} vs {mine.get(k, 'none')}" for k in {**theirs, **mine}
                if mine.get(k) != theirs.get(k)]
        if diff:
            raise LayerShapeError(f"head '{h.name}' ties to '{h.tie}', but their parameters differ "
                                  f"('{h.tie}' vs '{h.name}'): " + ", ".join(diff), h.tie_span)
        t.params = 0


def _group_kv(spec: LayerSpec, traces: list[HeadTrace], aux) -> None:
    """``kv_heads = G``: query head h reads W_k and ψ (and their biases) of its group's first head, so the other
    heads of a group own only W_q (and b_q); ``LayerShapeError`` E0346 when the heads are not attention heads
    with a learned key projection."""
    why = kv_sharing_problem(spec, traces)
    if why is not None:
        raise LayerShapeError(f"kv_heads = {spec.kv_heads} shares the key and value projections of a group's "
                              f"query heads, but {why}", spec.kv_span, code="E0346",
                              hint="write the heads as `heads = H  xi_instance = attention(rank = r)  out = n  "
                                   "fusion = concat_linear(out = d)`, or drop kv_heads")
    for i, (h, t) in enumerate(zip(spec.heads, traces)):
        if i and spec.kv_group(i) == spec.kv_group(i - 1):  # not its group's first head: nothing of k, v
            hp = h.xi["xi_instance"].component.hp
            r = hp.rank
            keys = t.m if hp.keys is None else aux[hp.keys.name].features
            n = h.out if h.out is not None else t.d
            t.params -= keys * r + (r if hp.bias else 0) + h.psi.component.count(n, t.d) + \
                (n if h.bias == "tied" else 0)


def _share_qk_norms(spec: LayerSpec, traces: list[HeadTrace], aux) -> None:
    """Identical attention heads with ``qk_norm`` share one γ_q and one γ_k (``rpn2c/ir/layout.py``): the first
    head owns them, the others count none."""
    if len(spec.heads) < 2 or not attention_heads(spec, traces):
        return
    for h, t in zip(spec.heads[1:], traces[1:]):
        hp = h.xi["xi_instance"].component.hp
        if getattr(hp, "qk_norm", "none") != "none":
            keys = t.m if hp.keys is None else aux[hp.keys.name].features
            t.params -= 2 * getattr(hp, "rank", keys)


def _processing(use: Use, t: TensorType) -> int:
    err = use.component.check(t)
    if err:
        raise LayerShapeError(err, use.span)
    return use.component.count(t)


def _infer_head(h: HeadSpec, x: TensorType, data: TensorType, aux, span, label: str, heads: int = 1) -> HeadTrace:
    kappa: Kappa = h.kappa.component
    psi = h.psi.component
    grid_xi = h.xi.get("xi_attribute") if isinstance(h.xi.get("xi_attribute"), Use) else None
    is_grid_xi = grid_xi is not None and isinstance(grid_xi.component, GridXiLike)
    for slot, use in h.xi.items():
        comp: Interdependence = use.component
        axis = "attribute" if slot.startswith("xi_attribute") else "instance"
        if isinstance(comp, GridXiLike) and (slot != "xi_attribute" or data.kind != "grid"):
            raise LayerShapeError(f"'{comp.name}' slides over an image: use it as xi_attribute of a head "
                                  f"whose input is a grid (this input is {data})", use.span)
        if axis not in comp.axes:
            raise LayerShapeError(f"'{comp.name}' is {'/'.join(comp.axes)} interdependence; it cannot fill {slot}",
                                  use.span)
        if axis == "instance" and data.kind != "items":
            raise LayerShapeError(f"{slot} acts on an item axis, but {data} has none (samples never interact)",
                                  use.span)
        if data.kind == "grid" and not isinstance(comp, GridXiLike):
            raise LayerShapeError(f"on an image head only a grid patch ξ is supported as xi_attribute; "
                                  "use to_items() to treat positions as items", use.span)
    params = 0
    if data.kind == "grid":
        c = _need_int(data.features, "the number of channels", span)
        if is_grid_xi:
            xi = grid_xi.component
            try:
                geo = xi.geometry(len(data.spatial))
                spatial_out = geo.out_spatial(data.spatial)
            except ShapeRuleError as exc:
                raise LayerShapeError(str(exc), grid_xi.span) from None
            mz = xi.patch_features(c, len(data.spatial))
            tr = HeadTrace("grid", c, None, mz=mz, spatial_out=spatial_out, geometry=geo)
            # what the patches are made from: the (patch, tap) index, and the reference lowering's patch matrix
            tr.scratch, tr.literal = xi.scratch_on(data.spatial), xi.literal(data.spatial)
            feat = (mz,)
        else:
            if not (kappa.grid_only or kappa.elementwise) or psi.name != "eye":
                raise LayerShapeError(
                    f"a head over {data} needs xi_attribute = grid_patch(...) (a convolution), a patch compression "
                    "κ with psi = eye (pooling), or flatten() first", span)
            if not (kappa.elementwise or kappa.any_grid_size) and \
                    not all(is_known(s) for s in data.spatial):
                raise LayerShapeError(f"'{h.kappa.name}' pools fixed patches: it needs known grid sizes, got {data}",
                                      h.kappa.span if h.kappa.span.line >= 1 else span)
            try:
                feat_out = kappa.features_out((c, *data.spatial))
            except ShapeRuleError as exc:
                raise LayerShapeError(str(exc), h.kappa.span) from None
            tr = HeadTrace("grid", c, None, mz=c, spatial_out=tuple(feat_out[1:]), grid_kappa=True,
                           d=feat_out[0])
            if all(is_known(s) for s in data.spatial):  # what the module builds: a pooling's index and taps
                tr.scratch, tr.literal = kappa.scratch((c, *data.spatial)), kappa.literal((c, *data.spatial))
            tr.n = h.out if h.out is not None else feat_out[0]
            if tr.n != feat_out[0]:
                raise LayerShapeError(f"psi = eye needs out = D = {feat_out[0]}, got out = {tr.n}", span)
            tr.n_out, tr.params = None, params
            return _finish(h, tr, span, label)
        nz = math.prod(spatial_out) if all(is_known(s) for s in spatial_out) else "P"
        tr.nz = nz
    else:
        m = _need_int(data.features, "the feature count", span)
        tr = HeadTrace(data.kind, m, data.items)
        mz, nz = m, data.items
        for slot in slots_before(h):
            mz, nz, params = _apply_xi(h, slot, slot.size(tr), x, data, aux, mz, nz, params, tr, heads)
        tr.mz, tr.nz = mz, nz
        feat = (mz,)
    try:
        d = kappa.features_out(feat)[0]
    except ShapeRuleError as exc:
        raise LayerShapeError(str(exc), h.kappa.span) from None
    params += kappa.count(feat)
    tr.scratch = dim_add(tr.scratch, dim_mul(kappa.scratch(feat), tr.nz if tr.nz is not None else 1))
    n_out = tr.nz
    inst = h.xi.get("xi_instance")
    if inst is not None and "xi_instance_prior" in h.xi and inst.component.kind == "data" and \
            str(tr.nz) != str(data.items):
        raise LayerShapeError(f"'{inst.name}' computes its matrix from the input's {data.items} items, but "
                              f"xi_instance_prior makes them {tr.nz}", inst.span)
    tr.dk = d
    for slot in slots_after(h):
        d, n_out, params = _apply_xi(h, slot, slot.size(tr), x, data, aux, d, n_out, params, tr, heads)
    tr.d, tr.n_out, tr.params = d, n_out, params
    if x is not data and str(n_out) != str(x.items):
        raise LayerShapeError(f"with a context input the head must map back to the query's {x.items} items "
                              f"(an instance ξ such as attention), got {n_out}", span)
    return _finish(h, tr, span, label)


def _apply_xi(h, slot: HeadSlot, size, x, data, aux, mz, nz, params, tr: HeadTrace, heads: int = 1):
    """ξ of ``slot`` on an axis of length ``size`` in a layer of ``heads`` heads: the new ``(features, items,
    params)``; its intermediates and sequential steps are added to ``tr``."""
    use, axis = h.xi[slot.name], slot.axis
    comp: Interdependence = use.component
    aux_types = {}
    for key, ref in comp.value_refs():
        t = aux.get(ref.name)
        want = AUX_KINDS.get(key)
        if t is None or (want and t.kind not in want):
            raise LayerShapeError(f"'{key}' of '{comp.name}' must name a {' or '.join(want or ('value',))} input, "
                                  f"got {t if t is not None else ref.name}", use.span)
        aux_types[key] = t
    ctx = XiContext(axis, size, x.features, data.features, x.items if x.kind == "items" else None, aux_types,
                    heads)
    try:
        new = comp.out_size(ctx)
        params += comp.count(ctx) * h.channels
        tr.scratch = dim_add(tr.scratch, comp.scratch(ctx))
        tr.steps.append((slot.name, comp.steps(ctx)))
        if axis == "instance" and comp.propagates():
            tr.propagating.append(slot.name)
    except ShapeRuleError as exc:
        raise LayerShapeError(str(exc), use.span, code=exc.code or "E0402") from None
    if comp.kind == "data" and axis == "instance" and x.kind == "items" and data is not x:
        new = x.items
    return (new, nz, params) if axis == "attribute" else (mz, new, params)


def _group_width(h: HeadSpec, tr: HeadTrace, n: int, span: Span) -> int:
    """ψ's input width per group, D/g, after checking that grouping is well defined for this head."""
    g, at = h.groups, h.groups_span
    if not h.kappa.component.elementwise:
        raise LayerShapeError(f"groups = {g} needs an elementwise κ (features stay channel-major); "
                              f"'{h.kappa.name}' mixes features", at)
    if "xi_attribute_post" in h.xi or ("xi_attribute" in h.xi and tr.view != "grid"):
        raise LayerShapeError(f"groups = {g} cannot be combined with an attribute ξ that mixes features", at)
    if tr.m % g or n % g:
        raise LayerShapeError(f"groups = {g} must divide both the input channels/features ({tr.m}) and out ({n})",
                              at)
    return tr.d // g


def _finish(h: HeadSpec, tr: HeadTrace, span: Span, label: str) -> HeadTrace:
    psi = h.psi.component
    if tr.grid_kappa:
        if h.bias == "untied":  # a pooling head keeps the grid: there is no item axis to untie the bias over
            raise LayerShapeError(f"head '{label}' pools an image (a grid κ with psi = eye): `bias = \"untied\"` "
                                  "needs an item axis; use to_items() first or drop the setting", span)
        return tr
    n = h.out
    if n is None:
        if psi.name == "eye":
            n = tr.d
        else:
            at = h.psi.span if h.psi.span.line >= 1 else span  # a default ψ has no span of its own
            raise LayerShapeError(f"head '{label}' needs its output width: add `out = n`", at)
    d = tr.d
    if h.groups > 1:
        d = _group_width(h, tr, n, span)
    err = psi.check(n, d)
    if err:
        raise LayerShapeError(err, h.psi.span)
    tr.params += psi.count(n, d) * h.channels
    rows = tr.n_out if tr.view == "items" else (tr.nz if tr.view == "grid" else 1)
    tr.scratch = dim_add(tr.scratch, dim_add(psi.scratch(n, d), dim_mul(psi.row_width(n, d), rows or 1)))
    if h.bias == "tied":
        tr.params += n
    elif h.bias == "untied":
        rows = tr.n_out if tr.view != "vector" else 1
        rows = _need_int(rows, "the item count of an untied bias", h.psi.span)
        tr.params += n * rows
    widths = [n] * h.channels
    if h.channels > 1:
        cf = h.channel_fusion.component
        err = cf.check(widths)
        if err:
            raise LayerShapeError(err, h.channel_fusion.span)
        tr.params += cf.count(widths)
        n = cf.out_features(widths)
    tr.n = n
    return tr
