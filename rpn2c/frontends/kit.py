"""The converter kit of ``from_torch``: what every converter and recogniser uses, below the driver.

- :class:`TorchImportError` (E0390), :class:`Value` (a spec value as a converter sees it), :class:`RecordedCall`;
- the converter registry (:func:`register_converter`, :func:`find_converter`) and :class:`Context`, through which a
  converter reads its module's arguments and emits statements and weight links (:class:`Link`, :class:`Stacked`);
- :class:`SpecBuilder` (the spec being written) and :func:`convert_module`, which walks one module: a Sequential in
  order, a module with a converter by it, a module with its own forward by the builder's traced-module converter
  (``fx_import.convert_traced``, given by the driver, ``torch_import.from_torch``).

The kit imports no converter and no driver: ``convert_*``, ``fx_*`` and ``torch_import`` import it.
"""

from __future__ import annotations

import inspect
import re
import sys
import textwrap
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import torch
from torch import nn

from rpn2c.errors import Diagnostic, Span, SpecTypeError
from rpn2c.ir.names import needs_mangling
from rpn2c.syntax.format import literal as lit

ERROR_CODE = "E0390"
# sequence-length symbols in the order inputs take them (a second, independent length gets S, then U, ...)
LENGTH_SYMBOLS = ("T", "S", "U", "L", *(f"T{i}" for i in range(2, 99)))

# words a spec value may not be called: grammar keywords and the operations/processing the importer emits
RESERVED = {
    "model", "block", "input", "return", "head", "compress", "layer", "repeat", "import", "as", "true", "false",
    "none", "recurrent", "flatten", "add", "mul", "concat", "to_items", "to_sequence", "time_major", "pool_items",
    "readout", "relu", "tanh", "sigmoid", "gelu", "silu", "elu", "leaky_relu", "softplus", "softmax", "log_softmax",
    "layer_norm", "batch_norm", "dropout", "identity", "state", "relu6", "hardtanh", "hardsigmoid", "hardswish",
    "selu", "celu", "mish", "softsign", "tanhshrink", "log_sigmoid", "hardshrink", "softshrink", "threshold", "rrelu",
    "prelu",
}


# ================================================================================================ errors
class TorchImportError(SpecTypeError):
    """A torch module (or one of its options) has no exact RPN 2 spec. ``module_path``, ``module_class``,
    ``option`` name the culprit; the message says why and, where one exists, what to do instead."""

    def __init__(self, path: str, cls: str, option: str | None, why: str):
        self.module_path, self.module_class, self.option = path, cls, option
        where = f"module '{path or '<root>'}' ({cls})"
        what = f": option {option} is not supported" if option else " is not supported"
        message = f"{where}{what}" + (f": {why}" if why else "")
        span = Span(f"<torch:{path or 'root'}>", 0, 0, 0, 0)
        super().__init__([Diagnostic(ERROR_CODE, message, span)])


def class_name(module: nn.Module) -> str:
    """The module's class as error messages name it (``torch.nn.Linear`` for the built-in layers)."""
    cls = type(module)
    mod = cls.__module__
    if mod.startswith("torch.nn.modules"):
        mod = "torch.nn"
    return f"{mod}.{cls.__qualname__}"


# ================================================================================================ results
@dataclass(frozen=True)
class Link:
    """compiled tensor = reshape(transpose(source[rows])): ``rows`` is a [start, stop) slice of dim 0."""

    source: str
    rows: tuple[int, int] | None = None
    transpose: bool = False
    shape: tuple[int, ...] | None = None

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        if self.rows is not None:
            t = t[self.rows[0]:self.rows[1]]
        if self.transpose:
            t = t.transpose(0, 1)
        if self.shape is not None:
            t = t.reshape(self.shape)
        return t

    def scatter(self, g: torch.Tensor, source_shape: Sequence[int]) -> torch.Tensor:
        """The adjoint of :meth:`apply`: ``g`` (a compiled-side tensor) placed into a zero torch-side tensor."""
        if self.rows is not None:
            inner = (self.rows[1] - self.rows[0], *source_shape[1:])
        else:
            inner = tuple(source_shape)
        if self.transpose:
            g = g.reshape(inner[1], inner[0], *inner[2:]).transpose(0, 1)
        else:
            g = g.reshape(inner)
        out = g.new_zeros(tuple(source_shape))
        if self.rows is None:
            return out + g
        out[self.rows[0]:self.rows[1]] = g
        return out


@dataclass(frozen=True)
class Stacked:
    """compiled tensor = the parts' tensors (each a :class:`Link` to its own torch tensor) stacked on dim 0: the
    packed ``in_proj_weight`` of attention made of a library's separate ``q_proj``, ``k_proj``, ``v_proj``."""

    parts: tuple[Link, ...]
    rows: tuple[int, ...]  # the rows of the compiled tensor each part fills

    def pieces(self, g: torch.Tensor) -> list[tuple[Link, torch.Tensor]]:
        return list(zip(self.parts, g.split(list(self.rows))))


@dataclass
class TorchSpec:
    """The result of :func:`from_torch`.

    ``text``: the .rpn source (comments name the RPN 2 function chosen for every slot); ``state_dict``: the weights
    in the compiled module's naming (exactly its keys); ``input_names``: the compiled model's inputs in order;
    ``links``: compiled name -> :class:`Link` to the torch tensor; ``source_shapes``: torch name -> shape;
    ``output``: which torch output the model returns.
    """

    text: str
    state_dict: OrderedDict[str, torch.Tensor]
    input_names: list[str]
    links: dict[str, Link]
    source_shapes: dict[str, tuple[int, ...]]
    output: str = "the output"

    def compile(self, reference: bool = False, **options) -> nn.Module:
        """``rpn2c.compile(text)``, moved to the weights' dtype, weights loaded (strict), in eval mode."""
        from rpn2c.api import compile as compile_spec

        model = compile_spec(self.text, "<from_torch>", reference=reference, **options)
        dtype = next((t.dtype for t in self.state_dict.values() if t.is_floating_point()), None)
        if dtype is not None:
            model = model.to(dtype)
        model.load_state_dict(self.state_dict)
        return model.eval()

    def to_torch(self, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Compiled-side tensors (e.g. parameter gradients) -> torch-side tensors by torch name; pieces that came
        from one torch tensor (per-head slices) are summed back into place (the adjoint of the weight transfer)."""
        out: dict[str, torch.Tensor] = {}
        for name, t in tensors.items():
            link = self.links.get(name)
            if link is None:
                raise KeyError(f"'{name}' is not a tensor of this spec")
            for part, g in (link.pieces(t) if isinstance(link, Stacked) else [(link, t)]):
                piece = part.scatter(g, self.source_shapes[part.source])
                out[part.source] = out[part.source] + piece if part.source in out else piece
        return out


# ================================================================================================ values
@dataclass(eq=False)
class _Input:
    """A model input; its type is decided by the first converter that consumes it."""

    name: str
    example: Any
    type_text: str | None = None
    item_dims: dict[int, Any] = field(default_factory=dict)  # axis -> symbol, made concrete on demand


@dataclass(eq=False)
class _Layout:
    """The torch axis order shared by a sequence input and the values derived from it along the last axis only:
    time-first ([T, B, F]) or batch-first. ``fixed=False`` while only order-agnostic modules (Linear, activations,
    norms over features) have seen it: the first module that needs an order (attention, recurrence, flatten) fixes
    it, re-typing the input if needed."""

    time_major: bool = False
    fixed: bool = True
    input: _Input | None = None
    features: int = 0
    symbol: str = "T"

    def type_text(self) -> tuple[str, int]:
        if self.time_major:
            return f"time_major[{{items}}, B, {self.features}]", 0
        return f"sequence[B, {{items}}, {self.features}]", 1


@dataclass(eq=False)
class Value:
    """A spec value (a model input or a statement's result) as a converter sees it.

    ``kind``: vector | items | grid | edges | edge_weight | mask | state, or None for a model input whose type is
    not decided yet; ``shape``: the example's torch shape (time-first when ``time_major``); ``batched``: False for
    a single graph ``nodes[N, F]``; ``layout``: the axis order of a sequence (see :class:`_Layout`).
    """

    name: str
    kind: str | None
    shape: tuple[int, ...]
    layout: _Layout | None = None
    batched: bool = True
    dtype: torch.dtype | None = None
    input: _Input | None = None
    producer: Any = None
    uses: int = 0
    items_from: tuple[_Input, int] | None = None  # the input axis this value's item count comes from
    alias_of: Value | None = None  # an elementwise function of an undecided input: typed together with it

    @property
    def time_major(self) -> bool:
        return self.layout is not None and self.layout.time_major

    @property
    def features(self) -> int:
        if self.kind == "grid":
            return self.shape[1]
        return self.shape[-1]


@dataclass(eq=False)
class _Stmt:
    name: str
    comments: list[str]
    expr: str = ""  # op statements: the right-hand side
    kind: str = "op"  # op | head | compress | recurrent
    args: str = ""
    settings: list[str] = field(default_factory=list)
    pre: list[str] = field(default_factory=list)
    post: list[str] = field(default_factory=list)
    value: Value | None = None

    def render(self) -> list[str]:
        lines = [line for c in self.comments for line in _comment_lines(c)]
        if self.kind == "param":
            return lines + [f"  param {self.name}: {self.expr}"]
        if self.kind == "op":
            return lines + [f"  {self.name} = {self.expr}"]
        body = list(self.settings)
        if self.pre:
            body.insert(0, f"pre = [{', '.join(self.pre)}]")
        if self.post:
            body.append(f"post = [{', '.join(self.post)}]")
        lines.append(f"  {self.name} = {self.kind}({self.args}) {{")
        lines += [f"    {s}" for s in body]
        lines.append("  }")
        return lines


def _comment_lines(text: str, width: int = 116) -> list[str]:
    """``  # text``, wrapped at ``width`` with the continuation indented like the text."""
    indent = len(text) - len(text.lstrip(" "))
    wrapped = textwrap.wrap(text.strip(), width - 4 - indent, break_long_words=False, break_on_hyphens=False)
    return [f"  # {' ' * indent}{w}" for w in wrapped] or ["  #"]


@dataclass
class RecordedCall:
    """One call of a module in the example run: its arguments and its output (tensors, or fx's concrete values)."""

    args: tuple
    kwargs: dict
    output: Any


# ================================================================================================ literals
def per_axis(v: Sequence[int] | int) -> str:
    """An int per spatial axis: one number when they agree, else a list."""
    vals = [v] if isinstance(v, int) else list(v)
    return lit(vals[0]) if len(set(vals)) == 1 else lit(vals)


# ================================================================================================ registry
Converter = Callable[[nn.Module, "Context"], Value]
_CONVERTERS: dict[type, Converter] = {}
_LAZY: list[tuple[str, Callable[[], None]]] = []  # (module prefix, registration) run once that module is imported


def register_converter(cls: type, fn: Converter) -> None:
    """Convert instances of ``cls`` (and subclasses that keep its ``forward``) with ``fn(module, ctx) -> Value``.

    ``fn`` reads the module's inputs from ``ctx.args`` / ``ctx.kwargs`` (Values, or plain Python options), emits
    statements with ``ctx.head`` / ``ctx.op`` / ``ctx.process``, links weights with ``ctx.param`` and returns the
    Value holding the module's (primary) output. A later registration for the same class replaces the earlier.
    """
    if not isinstance(cls, type) or not issubclass(cls, nn.Module):
        raise TypeError(f"register_converter needs an nn.Module subclass, got {cls!r}")
    _CONVERTERS[cls] = fn


def _lazy(prefix: str, registration: Callable[[], None]) -> None:
    _LAZY.append((prefix, registration))


def find_converter(module: nn.Module) -> Converter | None:
    """The converter registered for the module's class (or a base whose ``forward`` it keeps), else None."""
    for prefix, registration in list(_LAZY):
        if prefix in sys.modules:
            _LAZY.remove((prefix, registration))
            registration()
    cls = type(module)
    for base in cls.__mro__:
        fn = _CONVERTERS.get(base)
        if fn is not None:
            return fn if base is cls or cls.forward is base.forward else None
    return None


# ================================================================================================ context
class Context:
    """What a converter sees: the module, its spec name, its recorded call, its inputs, and the emitters."""

    def __init__(self, builder: SpecBuilder, module: nn.Module, path: str, args: list, kwargs: dict,
                 call: RecordedCall | None, base: str):
        self.builder, self.module, self.path = builder, module, path
        self.args, self.kwargs, self.call = args, kwargs, call
        self._base = base
        self.named = _bind_names(module, args, kwargs)

    def get(self, name: str, default: Any = None) -> Any:
        """The argument bound to ``forward``'s parameter ``name`` (a Value for tensors, else the Python value)."""
        return self.named.get(name, default)

    # -------------------------------------------------------------------------------------------- naming, errors
    @property
    def cls_name(self) -> str:
        return class_name(self.module)

    def name(self, prefix: str) -> str:
        """A fresh spec name for this module's node: its attribute name, or ``prefix`` + its index."""
        return self.builder.fresh(self._base, prefix)

    def fresh(self, base: str) -> str:
        return self.builder.fresh(base, base)

    def fail(self, option: str | None, why: str = "") -> NoReturn:
        raise TorchImportError(self.path, self.cls_name, option, why)

    def where(self) -> str:
        """``[path] torch.nn.Class`` for comments."""
        return f"[{self.path or 'root'}] {type(self.module).__name__}"

    def child(self, module: nn.Module, local: str, args: list, kwargs: dict) -> Value:
        """The submodule ``local`` of this module applied to ``args`` (Values) by its converter; its output has this
        module's output shape (a shape-preserving stage such as an encoder layer or a norm)."""
        fn = find_converter(module)
        path = f"{self.path}.{local}" if self.path else local
        if fn is None:
            raise TorchImportError(path, class_name(module), None, "no RPN 2 converter is registered for this class")
        call = RecordedCall((), {}, torch.empty(self.output_shape, device="meta"))
        base = f"{self._base}_{local}" if self._base else local
        return fn(module, Context(self.builder, module, path, args, kwargs, call, base))

    # -------------------------------------------------------------------------------------------- recorded call
    @property
    def output_shape(self) -> tuple[int, ...]:
        out = self.call.output if self.call is not None else None
        while isinstance(out, (tuple, list)) and out:
            out = out[0]
        if not isinstance(out, torch.Tensor):
            self.fail(None, "its output is not a tensor")
        return tuple(out.shape)

    def arg(self, i: int) -> Any:
        if i >= len(self.args):
            self.fail(None, f"expected at least {i + 1} tensor argument(s)")
        v = self.args[i]
        if isinstance(v, torch.Tensor):
            self.fail(None, f"its input {i} is a tensor {list(v.shape)} made in forward (from sizes or constants), "
                            "not computed from the model's inputs: a spec has no constant tensors; pass it to "
                            "forward as a model input")
        return v

    # -------------------------------------------------------------------------------------------- types
    def declare(self, v: Value, kind: str, type_text: str, *, time_major: bool = False, batched: bool = True,
                item_axis: int | None = None, item_symbol: str | None = None, provisional: bool = False) -> Value:
        """Fix the type of an undecided model input (``type_text`` as written in the spec, e.g.
        ``"sequence[B, T, 8]"``; ``{items}`` in it stands for the item-axis symbol, made concrete on demand).
        ``provisional``: a batch-first sequence whose axis order a later module may still flip."""
        if v.kind is not None:
            if v.kind != kind:
                self.fail(None, f"its input '{v.name}' is {v.kind}, not {kind}")
            return v
        chain = [v]
        while chain[-1].input is None and chain[-1].alias_of is not None:
            chain.append(chain[-1].alias_of)
        root = chain[-1]
        assert root.input is not None, "an undecided value must come from a model input"
        root.input.type_text = type_text
        if item_axis is not None:
            root.input.item_dims[item_axis] = item_symbol
        layout = None
        if kind == "items" and item_axis is not None and batched:
            layout = _Layout(time_major, not provisional, root.input, v.shape[-1], item_symbol or "T")
        for u in chain:
            u.kind, u.layout, u.batched = kind, layout, batched
            if item_axis is not None:
                u.items_from = (root.input, item_axis)
        return v

    def require_layout(self, v: Value, time_major: bool, what: str) -> None:
        """``v`` must be time-first (``time_major``) or batch-first; a provisional layout is fixed (flipped if
        needed, re-typing its input)."""
        lay = v.layout
        if v.kind != "items" or lay is None:
            self.fail(None, f"'{what}' must be a batched sequence, got a {v.kind} value {list(v.shape)}")
        if lay.time_major != time_major:
            if lay.fixed or lay.input is None:
                want = "time-first [T, B, F]" if time_major else "batch-first [B, T, F]"
                self.fail(f"batch_first={not time_major}", f"'{what}' is not {want} here")
            lay.time_major = time_major
            text, axis = lay.type_text()
            lay.input.type_text = text
            lay.input.item_dims = {axis: lay.symbol}
        lay.fixed = True

    def sequence(self, v: Any, features: int, symbol: str, batch_first: bool, what: str) -> Value:
        """A batched sequence input/value ``[B, T, F]`` (or ``[T, B, F]`` when not ``batch_first``)."""
        if not isinstance(v, Value):
            self.fail(f"{what}={type(v).__name__}", "expected a tensor")
        if v.kind is None:
            if len(v.shape) != 3:
                self.fail(None, f"'{what}' has shape {list(v.shape)}: unbatched inputs are not supported")
            text = (f"sequence[B, {{items}}, {features}]" if batch_first else
                    f"time_major[{{items}}, B, {features}]")
            self.declare(v, "items", text, time_major=not batch_first, item_axis=1 if batch_first else 0,
                         item_symbol=symbol)
        else:
            self.require_layout(v, not batch_first, what)
        if v.features != features:
            self.fail(None, f"'{what}' has {v.features} features, expected {features}")
        return v
    def features_input(self, v: Value, *, allow=("vector", "items")) -> Value:
        """A vector ``[B, F]`` or a sequence ``[B, T, F]`` (an undecided input is typed by its rank)."""
        if v.kind is None:
            nd = len(v.shape)
            if nd == 2 and "vector" in allow:
                return self.declare(v, "vector", f"vector[B, {v.shape[1]}]")
            if nd == 3 and "items" in allow:
                return self.declare(v, "items", f"sequence[B, {{items}}, {v.shape[2]}]", item_axis=1,
                                    item_symbol="T", provisional=True)
            self.fail(None, f"an input of shape {list(v.shape)} (expected {' or '.join(_RANKS[k] for k in allow)})")
        if v.kind not in allow:
            self.fail(None, f"it acts on the last axis of a {v.kind} value {list(v.shape)}; "
                            f"expected {' or '.join(_RANKS[k] for k in allow)}")
        return v

    def grid_input(self, v: Value, rank: int) -> Value:
        """An image-like ``[B, C, *S]`` with ``rank`` spatial axes (sizes fixed from the example)."""
        if v.kind is None:
            if len(v.shape) != rank + 2:
                self.fail(None, f"expected a batched [B, C, {', '.join('S' * rank)}] input, got shape {list(v.shape)}"
                          " (unbatched inputs are not supported)")
            ctor = {1: "signal", 2: "image", 3: "volume"}[rank]
            dims = ", ".join(str(d) for d in v.shape[1:])
            return self.declare(v, "grid", f"{ctor}[B, {dims}]")
        if v.kind != "grid" or len(v.shape) != rank + 2:
            self.fail(None, f"expected a {rank}-D grid [B, C, ...], got a {v.kind} value {list(v.shape)}")
        return v

    def fix_items(self, v: Value) -> None:
        """Make the item count of ``v`` a known integer in the input declaration (needed by flatten); a count made
        of several inputs' axes (items joined by ``torch.cat``) fixes every input's item axes."""
        inputs = [v.items_from[0]] if v.items_from is not None else self.builder.inputs
        for inp in inputs:
            inp.item_dims = {k: None for k in inp.item_dims}

    # -------------------------------------------------------------------------------------------- emitters
    def _new_value(self, name, stmt, kind, shape, like: Value | None, time_major=None, batched=None) -> Value:
        if time_major is None:
            layout = like.layout if like is not None and (kind or like.kind) == "items" else None
        else:
            layout = _Layout(bool(time_major), True, None, shape[-1])
        v = Value(name, kind, tuple(shape), layout,
                  like.batched if batched is None and like else (True if batched is None else batched),
                  like.dtype if like else None, producer=stmt,
                  items_from=like.items_from if like is not None else None)
        stmt.value = v
        return v

    def _use(self, values: Sequence[Value]) -> None:
        for u in values:
            if u is not None:
                u.uses += 1

    def head(self, x: Value, settings: Sequence[str], *, comment: Sequence[str] | str = (),
             context: Value | None = None,
             kind: str = "head", name: str | None = None, prefix: str = "h", uses: Sequence[Value] = (),
             out_kind: str | None = None, out_shape: Sequence[int] | None = None, time_major: bool | None = None,
             pre: Sequence[str] = (), post: Sequence[str] = ()) -> Value:
        """Emit ``name = head(x[, context = c]) { settings }`` (``kind`` head | compress | recurrent)."""
        name = name or self.name(prefix)
        args = x.name + (f", context = {context.name}" if context is not None else "")
        comments = [comment] if isinstance(comment, str) else list(comment)
        stmt = _Stmt(name, comments, kind=kind, args=args, settings=[s for s in settings if s], pre=list(pre),
                     post=list(post))
        self._use([x, context, *uses])
        self.builder.stmts.append(stmt)
        return self._new_value(name, stmt, out_kind or x.kind, out_shape or self.output_shape, x, time_major)

    def op(self, fn: str, args: Sequence[Value], kwargs: str = "", *, comment: Sequence[str] | str = (),
           name: str | None = None, prefix: str = "v", kind: str | None = None, shape: Sequence[int] | None = None,
           time_major: bool | None = None) -> Value:
        """Emit ``name = fn(a, b, kwargs)``."""
        name = name or self.name(prefix)
        inner = ", ".join([a.name for a in args] + ([kwargs] if kwargs else []))
        comments = [comment] if isinstance(comment, str) else list(comment)
        stmt = _Stmt(name, comments, expr=f"{fn}({inner})")
        self._use(args)
        self.builder.stmts.append(stmt)
        return self._new_value(name, stmt, kind or args[0].kind, shape or self.output_shape, args[0], time_major)

    def free(self, type_text: str, torch_local: str, kind: str, shape: Sequence[int], *, prefix: str = "p",
             comment: Sequence[str] | str = (), link_shape: Sequence[int] | None = None) -> Value:
        """Emit ``param name: type_text`` holding this module's tensor ``torch_local`` (reshaped to ``link_shape``):
        a learnable tensor that is no head's ψ (a bias after a fusion, positions, a class token, a layer scale)."""
        name = self.fresh(prefix)
        comments = [comment] if isinstance(comment, str) else list(comment)
        stmt = _Stmt(name, comments, kind="param", expr=type_text)
        self.builder.stmts.append(stmt)
        self.param(f"{name}.value", torch_local, shape=link_shape)
        return self._new_value(name, stmt, kind, shape, None, False, True)

    def process(self, x: Value, fn: str, kwargs: str = "", *, comment: str = "") -> tuple[Value, str]:
        """A processing function after ``x``: folded into the producing head's ``post`` list when ``x`` is that
        head's fresh result, else a standalone op. Returns the result and the parameter prefix of the function."""
        stmt = x.producer
        item = f"{fn}({kwargs})" if kwargs else fn
        if isinstance(stmt, _Stmt) and stmt.kind in ("head", "compress") and stmt.value is x and x.uses == 0:
            idx = len(stmt.post)
            stmt.post.append(item)
            stmt.comments.append(f"{self.where()} -> post[{idx}] = {item}" + (f": {comment}" if comment else ""))
            x.shape = self.output_shape
            return x, f"{stmt.name}.post.{idx}"
        v = self.op(fn, [x], kwargs, comment=f"{self.where()} -> {item}" + (f": {comment}" if comment else ""),
                    prefix=fn.split("_")[0][:4])
        if x.kind is None:  # an elementwise function of an undecided input: typed when a later module needs it
            v.alias_of = x
        return v, v.name

    def param(self, compiled: str, torch_local: str, *, rows: tuple[int, int] | None = None, transpose: bool = False,
              shape: Sequence[int] | None = None) -> None:
        """Link the compiled tensor ``compiled`` to this module's tensor ``torch_local`` (a parameter or buffer)."""
        self.builder.link(compiled, self.path, self.module, torch_local, rows, transpose, shape)


_RANKS = {"vector": "vector [B, F]", "items": "sequence [B, T, F]", "grid": "grid [B, C, ...]"}
_GRID_CTOR = {1: "signal", 2: "image", 3: "volume"}


# ================================================================================================ builder
class SpecBuilder:
    """The spec being written: its inputs, statements, value names, weight links and the recorded calls."""

    def __init__(self, root: nn.Module, calls: dict[int, deque], traced: Callable | None = None):
        self.root, self.calls = root, calls
        self.traced = traced  # converts a module with its own forward (fx_import.convert_traced)
        self.inputs: list[_Input] = []
        self.input_values: list[Value] = []
        self.stmts: list[_Stmt] = []
        self.names: set[str] = set()
        self.links: dict[str, Link] = {}
        self.tensors: OrderedDict[str, torch.Tensor] = OrderedDict()
        self.source_shapes: dict[str, tuple[int, ...]] = {}
        self.sources: dict[str, torch.Tensor] = {}  # compiled name -> the torch tensor object it comes from
        self.notes: list[str] = []
        # a tensor's torch name (the first, as named_parameters lists a tied one), wherever a module reads it
        self.torch_names = {id(t): n for n, t in (*root.named_parameters(), *root.named_buffers())}

    def fresh(self, base: str, prefix: str) -> str:
        base = re.sub(r"\W", "_", base or "")
        if not base or base[0].isdigit():
            base = prefix + base
        if base in RESERVED or needs_mangling(base):  # a value's module would sit elsewhere than its name says
            base = prefix + "_" + base
        name, k = base, 2
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    def link(self, compiled, path, module, local, rows, transpose, shape):
        tensors = dict(module.named_parameters(recurse=True))
        tensors.update(dict(module.named_buffers(recurse=True)))
        if local not in tensors or tensors[local] is None:
            raise TorchImportError(path, class_name(module), None, f"has no tensor '{local}'")
        src = tensors[local]
        full = self.torch_names.get(id(src)) or (f"{path}.{local}" if path else local)
        self.sources[compiled] = src
        link = Link(full, rows, transpose, tuple(shape) if shape is not None else None)
        self.links[compiled] = link
        self.source_shapes[full] = tuple(src.shape)
        self.tensors[compiled] = link.apply(src.detach()).clone()

    def link_stacked(self, compiled: str, parts: Sequence[tuple[str, nn.Module, str, bool]]) -> None:
        """``compiled`` = the tensors ``(path, module, local, transpose)`` (each read whole) stacked on dim 0."""
        links, tensors = [], []
        for path, module, local, transpose in parts:
            self.link(compiled, path, module, local, None, transpose, None)
            links.append(self.links[compiled])
            tensors.append(self.tensors[compiled])
        del self.sources[compiled]  # no one torch tensor: weight sharing (sharing.py) leaves it alone
        self.links[compiled] = Stacked(tuple(links), tuple(t.shape[0] for t in tensors))
        self.tensors[compiled] = torch.cat(tensors)

    def next_call(self, module: nn.Module) -> RecordedCall | None:
        q = self.calls.get(id(module))
        return q.popleft() if q else None


# ================================================================================================ walking
def _bind_names(module: nn.Module, args: list, kwargs: dict) -> dict[str, Any]:
    """Arguments by ``forward`` parameter name (positional ones bound in order)."""
    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
        return dict(bound.arguments)
    except (TypeError, ValueError):
        return {**{f"arg{i}": a for i, a in enumerate(args)}, **kwargs}


_LIBRARIES = ("torch", "torch_geometric")
# library packages whose classes are whole models (a stack of layers with a forward), traced like a user's model
_MODEL_PACKAGES = ("torch_geometric.nn.models",)


def library_of(cls: type) -> str | None:
    """``torch`` / ``torch_geometric`` for a class defined in that library (its layers need converters: their
    forward is not traced), else None; None too for the library's model classes (``torch_geometric.nn.models``:
    GCN, GAT, GraphSAGE, GIN, MLP), which are traced through like a user's model."""
    mod = cls.__module__ or ""
    if any(mod == p or mod.startswith(p + ".") for p in _MODEL_PACKAGES):
        return None
    return next((lib for lib in _LIBRARIES if mod == lib or mod.startswith(lib + ".")), None)


def _sequential(module: nn.Module) -> bool:
    return isinstance(module, nn.Sequential) and type(module).forward is nn.Sequential.forward


def convert_module(b: SpecBuilder, module: nn.Module, path: str, args: list, kwargs: dict, base: str,
                   call: RecordedCall | None = None) -> Value:
    """``module`` called on ``args`` (Values) as spec statements; ``call``: its recorded call (default: the next one
    the example run recorded for it)."""
    call = call if call is not None else b.next_call(module)
    if _sequential(module):
        if kwargs or len(args) != 1:
            raise TorchImportError(path, class_name(module), None, "nn.Sequential takes exactly one input")
        v = args[0]
        for child_name, child in module.named_children():
            v = convert_module(b, child, f"{path}.{child_name}" if path else child_name, [v], {}, child_name)
        return v
    if isinstance(module, nn.Identity):
        return args[0]
    fn = find_converter(module)
    library = library_of(type(module))
    own = type(module).forward is not nn.Module.forward and library is None
    if fn is None and own and b.traced is not None:  # a whole model: its forward traced with torch.fx
        return b.traced(b, module, path, args, kwargs, base, call)
    if fn is None:
        what = f"this {library} layer ({type(module).__name__})" if library else "this class"
        raise TorchImportError(path, class_name(module), None, f"no RPN 2 converter is registered for {what} (see "
                                                                "docs/unification.md for the supported list; "
                                                                "register_converter adds one)")
    ctx = Context(b, module, path, args, kwargs, call, base)
    out = fn(module, ctx)
    if not isinstance(out, Value):
        raise TypeError(f"the converter for {class_name(module)} returned {type(out).__name__}, not a Value")
    return out
