"""``from_torch`` for modules with their own ``forward``: trace it with torch.fx, convert the graph node by node.

    class Block(nn.Module):                                # relu(bn2(conv2(relu(bn1(conv1(x))))) + x)
        def forward(self, x): ...
    spec = rpn2c.from_torch(Block(), (x,))                 # fx graph -> head/compress statements + add(...)

How it works (``kit.convert_module`` calls :func:`convert_traced` for a module with no converter whose class
defines ``forward`` outside torch):

1. ``fx_trace.trace``: torch.fx with proxies that carry the example's values (control flow on sizes, ranks and
   dtypes follows the example; see that module). Its leaf modules are the ones rpn2c converts as a whole (a
   registered converter: Linear, Conv, BatchNorm, MultiheadAttention, TransformerEncoder(Layer), RNN/GRU/LSTM,
   GCNConv, ..., and every other torch / torch_geometric layer, so that a missing converter is reported for the
   module itself). User modules, library model classes, ``nn.Sequential`` and ``nn.ModuleList`` are traced
   through; non-tensor arguments are fixed to the example call's values. Tracing happens in eval mode.
2. The traced graph runs once (eval, no grad) on the example arguments, recording every node's value (shapes).
3. Nodes are converted in order: a ``call_module`` node by the module's converter (the weights linked exactly as in
   a Sequential); a ``call_function`` / ``call_method`` node by the table below; Python-only nodes (``x.size(0)``,
   specialisation asserts) keep their recorded value. Anything else raises :class:`FxImportError` (E0390) naming
   the module, the fx node and its operation.

The table (docs/unification.md, "Whole models"): ``a + b`` / ``*`` / ``-`` -> add / mul / sub (equal shapes, or a
per-sample vector viewed ``[B, C, 1, 1]`` / ``[B, 1, F]``: the ops' broadcast); ``torch.cat`` over the feature axis ->
concat, over the item axis of sequences -> concat_items; ``x.transpose(1, 2)`` / ``x.permute(0, 2, 1)`` / ``x.mT``
between a sequence ``[B, T, E]`` and a signal ``[B, E, T]`` -> to_signal / to_items; ``a, b = x.chunk(2, -1)`` /
``x.split(sizes, -1)`` -> one slice_features per part; ``F.relu``, ``torch.tanh``, ``x.sigmoid()`` ... -> processing;
``F.max_pool2d``, ``F.adaptive_avg_pool2d`` -> the pooling module's converter; ``torch.flatten(x, 1)``,
``x.view(x.size(0), -1)`` -> flatten; ``x.mean((2, 3))`` -> pool_items; ``out, h = self.gru(x)`` then
``out[:, -1]`` / ``h[-1]`` / ``out[:, 0]`` / ``out[:, a:b]`` -> last / first / slice.

Why torch.fx and not torch.export: fx keeps the module-call granularity this importer needs (a ``call_module``
node per leaf, so the existing converters and their exact weight links apply unchanged, and an LSTM or a
TransformerEncoderLayer stays one statement), and its nodes are the user's own Python operations (``operator.add``,
``torch.cat``). torch.export lowers to ATen and would decompose every leaf into ``aten.addmm`` / ``aten.gru``
pieces that would have to be pattern-matched back, runs on fake tensors, and cannot keep leaves opaque without
re-tracing. Control flow on sizes, ranks and dtypes follows the example (``fx_trace``); control flow on a tensor's
values is refused at trace time as an E0390 error at the line that branches.
"""

from __future__ import annotations

import inspect
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from rpn2c.errors import Diagnostic, Span, SpecTypeError
from rpn2c.frontends import fx_attention, fx_gelu, fx_layout, fx_norms, fx_params, fx_timm
from rpn2c.frontends.fx_match import ancestors
from rpn2c.frontends.fx_trace import _OWN_DIRS, _RPN2C_DIR, trace
from rpn2c.frontends.kit import (
    ERROR_CODE, LENGTH_SYMBOLS, RESERVED, Context, RecordedCall, SpecBuilder, TorchImportError, Value, class_name, convert_module,
    find_converter, lit,
)


class FxImportError(TorchImportError):
    """An fx node with no exact spec form: ``module_path`` / ``module_class`` name the innermost module whose
    ``forward`` holds the node, ``node`` the fx node, ``op`` its operation (``operator.add``, ``Tensor.view``)."""

    def __init__(self, path: str, cls: str, node: str, op: str, why: str, at: tuple[str, int, str] | None = None):
        self.module_path, self.module_class, self.option = path, cls, op
        self.node, self.op = node, op
        self.library_file, self.library_line = (at[0], at[1]) if at else (None, None)
        where = f" at {at[0]}:{at[1]} ({at[2]})" if at else ""
        message = f"module '{path or '<root>'}' ({cls}): fx node '{node}' ({op}){where} is not supported: {why}"
        span = Span(f"<torch:{path or 'root'}:{node}>", 0, 0, 0, 0)
        SpecTypeError.__init__(self, [Diagnostic(ERROR_CODE, message, span)])


def library_line(node: fx.Node) -> tuple[str, int, str] | None:
    """The file, line and code of the model's (or library's) source that made ``node``: the innermost frame of
    its recorded stack that is neither torch's nor rpn2c's."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in \S+\n\s*(.*)', node.meta.get("stack_trace") or "")
    mine = [f for f in frames if not f[0].startswith((*_OWN_DIRS, _RPN2C_DIR)) and not f[0].startswith("<")]
    return (mine[-1][0], int(mine[-1][1]), mine[-1][2].strip()) if mine else None


# ================================================================================================ values
@dataclass(eq=False)
class _Tuple:
    """A leaf module's tuple output (RNN: ``(output, h_n)``): only the primary output has a spec value."""

    primary: Value
    node: fx.Node


@dataclass(eq=False)
class _Lifted:
    """A per-sample vector ``[B, C]`` viewed as ``[B, C, 1, ...]`` or ``[B, 1, C]`` (``[1, B, C]`` time-first):
    usable only as an operand of add / mul / sub, where the ops broadcast it over a grid's spatial axes or a
    sequence's items exactly as torch does."""

    vector: Value
    shape: tuple[int, ...]


def _is_value(x: Any) -> bool:
    return isinstance(x, Value)


@dataclass(eq=False)
class _Absorbed:
    """A node inside a recognised pattern (attention, RMSNorm): its pattern's anchor stands for it."""

    node: fx.Node
    pattern: str


# the recognisers run over the traced graph before conversion: (pattern, find, emit at the anchor node)
RECOGNISERS = (("attention", fx_attention.find, fx_attention.emit), ("RMSNorm", fx_norms.find, fx_norms.emit),
               ("weighted LayerNorm", fx_norms.find_scaled, fx_norms.emit_scaled),
               ("tanh GELU", fx_gelu.find, fx_gelu.emit), ("batch norm", fx_timm.find, fx_timm.emit),
               ("token mixing", fx_timm.find_mixing, fx_timm.emit_mixing))


def _is_traced(x: Any) -> bool:
    """``x`` is computed from the model inputs (a Value, or a leaf's tuple output / RNN state awaiting an index)."""
    return isinstance(x, (Value, _Tuple, _FinalState, _Lifted, _Parts, fx_params.Rows, _Absorbed))


def _flat(args: Any) -> list:
    out: list = []
    fx.node.map_aggregate(args, out.append)
    return out


def _op_name(node: fx.Node) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if node.op == "call_function":
        t = node.target
        mod = getattr(t, "__module__", None) or ""
        mod = {"_operator": "operator", "torch._C._nn": "torch.nn.functional",
               "torch._C._VariableFunctions": "torch"}.get(mod, mod)
        return f"{mod}.{getattr(t, '__name__', t)}" if mod else str(getattr(t, "__name__", t))
    return f"{node.op} {node.target}"


class _NodeContext(Context):
    """A converter context for one fx node: comments and errors name the node and its enclosing module."""

    def __init__(self, conv: _GraphConverter, node: fx.Node, module: nn.Module, args: list, kwargs: dict):
        self.conv, self.node = conv, node
        output = conv.values.get(node)
        concrete = RecordedCall(tuple(conv.concrete(a) for a in node.args), {}, output)
        base = node.name if node.name not in _reserved() else f"{node.name}_0"  # add_0, add_1, ... (not v_add)
        super().__init__(conv.b, module, conv.node_path(node), args, kwargs, concrete, f"{conv.base}{base}")

    def fail(self, option: str | None, why: str = "") -> NoReturn:
        self.conv.fail(self.node, f"{why} ({option})" if option and why else (why or option or ""))

    def where(self) -> str:
        return f"[{self.path or 'root'}:{self.node.name}] {_op_name(self.node)}"


def _reserved() -> set[str]:
    """Names a value may not take: the importer's reserved words and every registered component name."""
    from rpn2c.components.registry import names

    return RESERVED | set(names())


# ================================================================================================ the table
def _opt(node_args: tuple, kwargs: dict, names: tuple[str, ...], defaults: dict | None = None) -> dict:
    """Options of a functional call by name: positional ones after the tensor in ``names`` order, then kwargs."""
    out = dict(defaults or {})
    out.update(zip(names, node_args[1:]))
    out.update({k: v for k, v in kwargs.items() if k in names})
    return out


def _pool_module(cls: type, names: tuple[str, ...]) -> Callable[[dict], nn.Module]:
    return lambda o: cls(**{k: v for k, v in o.items() if k in names and v is not None})


_POOL_ARGS = ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")
_AVG_ARGS = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")

def _rrelu(o: dict) -> nn.Module:
    """``F.rrelu(x, lower, upper, training)``: random slopes only with training=True (then even in eval, which the
    module form does not do); with training=False (its default) it is a leaky ReLU of slope (lower + upper)/2."""
    lower, upper = o.get("lower", 1 / 8), o.get("upper", 1 / 3)
    if o.get("training", False):
        raise ValueError("training=True draws random slopes even in eval mode; use nn.RReLU (random slopes in "
                         "training only) or pass training=self.training")
    return nn.LeakyReLU((lower + upper) / 2)


# functional call -> (option names after the tensor, module equivalent): converted by that module's converter
_AS_MODULE: dict[Any, tuple[tuple[str, ...], Callable[[dict], nn.Module]]] = {
    F.relu: (("inplace",), lambda o: nn.ReLU()), torch.relu: ((), lambda o: nn.ReLU()),
    torch.relu_: ((), lambda o: nn.ReLU()), F.relu_: ((), lambda o: nn.ReLU()),
    torch.tanh: ((), lambda o: nn.Tanh()), F.tanh: ((), lambda o: nn.Tanh()),
    torch.sigmoid: ((), lambda o: nn.Sigmoid()), F.sigmoid: ((), lambda o: nn.Sigmoid()),
    F.silu: (("inplace",), lambda o: nn.SiLU()),
    F.gelu: (("approximate",), lambda o: nn.GELU(o.get("approximate", "none"))),
    F.elu: (("alpha", "inplace"), lambda o: nn.ELU(o.get("alpha", 1.0))),
    F.leaky_relu: (("negative_slope", "inplace"), lambda o: nn.LeakyReLU(o.get("negative_slope", 0.01))),
    F.softplus: (("beta", "threshold"), lambda o: nn.Softplus(o.get("beta", 1.0), o.get("threshold", 20.0))),
    F.relu6: (("inplace",), lambda o: nn.ReLU6()),
    F.hardtanh: (("min_val", "max_val", "inplace"), lambda o: nn.Hardtanh(o.get("min_val", -1.0),
                                                                         o.get("max_val", 1.0))),
    F.hardsigmoid: (("inplace",), lambda o: nn.Hardsigmoid()), F.hardswish: (("inplace",), lambda o: nn.Hardswish()),
    F.selu: (("inplace",), lambda o: nn.SELU()), torch.selu: ((), lambda o: nn.SELU()),
    F.celu: (("alpha", "inplace"), lambda o: nn.CELU(o.get("alpha", 1.0))),
    torch.celu: (("alpha",), lambda o: nn.CELU(o.get("alpha", 1.0))),
    F.mish: (("inplace",), lambda o: nn.Mish()), F.softsign: ((), lambda o: nn.Softsign()),
    F.tanhshrink: ((), lambda o: nn.Tanhshrink()), F.logsigmoid: ((), lambda o: nn.LogSigmoid()),
    F.hardshrink: (("lambd",), lambda o: nn.Hardshrink(o.get("lambd", 0.5))),
    F.softshrink: (("lambd",), lambda o: nn.Softshrink(o.get("lambd", 0.5))),
    F.threshold: (("threshold", "value", "inplace"), lambda o: nn.Threshold(o["threshold"], o["value"])),
    torch.threshold: (("threshold", "value"), lambda o: nn.Threshold(o["threshold"], o["value"])),
    F.rrelu: (("lower", "upper", "training", "inplace"), _rrelu),
    F.softmax: (("dim",), lambda o: nn.Softmax(o.get("dim"))),
    torch.softmax: (("dim",), lambda o: nn.Softmax(o["dim"])),
    F.log_softmax: (("dim",), lambda o: nn.LogSoftmax(o.get("dim"))),
    torch.log_softmax: (("dim",), lambda o: nn.LogSoftmax(o["dim"])),
    F.softmin: (("dim",), lambda o: nn.Softmin(o.get("dim"))),
    F.glu: (("dim",), lambda o: nn.GLU(o.get("dim", -1))),
    torch.flatten: (("start_dim", "end_dim"), lambda o: nn.Flatten(o.get("start_dim", 0), o.get("end_dim", -1))),
    F.layer_norm: (("normalized_shape", "weight", "bias", "eps"),  # with weights: self.weight is a get_attr node
                   lambda o: nn.LayerNorm(o["normalized_shape"], o.get("eps", 1e-5), elementwise_affine=False)),
    **{getattr(F, f"adaptive_avg_pool{r}d"): (("output_size",), _pool_module(getattr(nn, f"AdaptiveAvgPool{r}d"),
                                                                              ("output_size",))) for r in (1, 2, 3)},
    **{getattr(F, f"adaptive_max_pool{r}d"): (("output_size", "return_indices"),
                                             _pool_module(getattr(nn, f"AdaptiveMaxPool{r}d"),
                                                          ("output_size", "return_indices"))) for r in (1, 2, 3)},
    **{getattr(F, f"max_pool{r}d"): (_POOL_ARGS, _pool_module(getattr(nn, f"MaxPool{r}d"), _POOL_ARGS))
       for r in (1, 2, 3)},
    **{getattr(F, f"avg_pool{r}d"): (_AVG_ARGS, _pool_module(getattr(nn, f"AvgPool{r}d"), _AVG_ARGS))
       for r in (1, 2, 3)},
}
# Tensor methods with a module equivalent
_METHOD_AS_MODULE: dict[str, tuple[tuple[str, ...], Callable[[dict], nn.Module]]] = {
    "relu": ((), lambda o: nn.ReLU()), "relu_": ((), lambda o: nn.ReLU()), "tanh": ((), lambda o: nn.Tanh()),
    "sigmoid": ((), lambda o: nn.Sigmoid()), "sigmoid_": ((), lambda o: nn.Sigmoid()),
    "tanh_": ((), lambda o: nn.Tanh()), "hardshrink": (("lambd",), lambda o: nn.Hardshrink(o.get("lambd", 0.5))),
    "softmax": (("dim",), lambda o: nn.Softmax(o["dim"])),
    "log_softmax": (("dim",), lambda o: nn.LogSoftmax(o["dim"])),
    "flatten": (("start_dim", "end_dim"), lambda o: nn.Flatten(o.get("start_dim", 0), o.get("end_dim", -1))),
}
_ELEMENTWISE = {operator.add: "add", operator.iadd: "add", torch.add: "add", operator.mul: "mul",
                operator.imul: "mul", torch.mul: "mul", operator.sub: "sub", operator.isub: "sub", torch.sub: "sub"}
_ELEMENTWISE_METHODS = {"add": "add", "add_": "add", "mul": "mul", "mul_": "mul", "sub": "sub", "sub_": "sub"}
_REDUCTIONS = {"mean": "mean", "sum": "sum", "amax": "max"}
_CAT = (torch.cat, torch.concat, torch.concatenate)
_IDENTITY_METHODS = ("contiguous", "clone")
_CASTS = ("to", "type_as", "float", "double", "type", "long", "int", "half", "bfloat16")
_NO_OPTION = ("input", "_stacklevel", "inplace")
_RESHAPES = ("view", "reshape", "squeeze", "unsqueeze")


# ================================================================================================ converter
class _GraphConverter:
    def __init__(self, b: SpecBuilder, gm: fx.GraphModule, module: nn.Module, path: str, base: str,
                 values: dict[fx.Node, Any]):
        self.b, self.gm, self.module, self.path, self.values = b, gm, module, path, values
        self.base = f"{base}_" if base else ""
        self.env: dict[fx.Node, Any] = {}
        self.order = {n: i for i, n in enumerate(values)}
        self.matches, self.absorbed, self.misses = {}, {}, {}
        self.shared: dict[fx.Node, Value] = {}  # values recognisers make once for several matches (a position bias)

    # -------------------------------------------------------------------------------------------- naming, errors
    def _qual(self, local: str) -> str:
        return f"{self.path}.{local}" if self.path and local else (self.path or local)

    def _owner(self, node: fx.Node) -> tuple[str, str]:
        """Path and class of the innermost module whose forward holds ``node``."""
        stack = node.meta.get("nn_module_stack") or {}
        for local, cls in reversed(list(stack.values())):
            if node.op == "call_module" and local == node.target:
                continue
            return self._qual(local), f"{cls.__module__}.{cls.__qualname__}"
        return self.path, class_name(self.module)

    def node_path(self, node: fx.Node) -> str:
        return self._owner(node)[0]

    def fail(self, node: fx.Node, why: str) -> NoReturn:
        path, cls = self._owner(node)
        near = sorted((self.order.get(core, 0), core.name, pattern, reason)  # the nearest miss downstream of node
                      for core, (pattern, reason) in self.misses.items() if core is node or node in ancestors(core))
        miss = f"; the {near[0][2]} recogniser did not map '{near[0][1]}': {near[0][3]}" if near else ""
        raise FxImportError(path, cls, node.name, _op_name(node), why + miss, library_line(node))

    # -------------------------------------------------------------------------------------------- arguments
    def concrete(self, a: Any) -> Any:
        return fx.node.map_arg(a, lambda n: self.values.get(n))

    def load(self, a: Any) -> Any:
        return fx.node.map_arg(a, lambda n: self.env[n])

    def value(self, node: fx.Node, x: Any, what: str = "input") -> Value:
        if isinstance(x, _Tuple):
            self.fail(node, f"the {what} is the whole tuple output of '{x.node.name}'; index it (out, h = ...)")
        if isinstance(x, _Parts):
            self.fail(node, f"the {what} is the whole tuple of parts of '{x.node.name}'; index it (a, b = ...)")
        if isinstance(x, fx_params.Rows):
            self.fail(node, f"the {what} is a sequence {list(x.x.shape)} viewed as its rows: only addmm(b, rows, W) "
                            "(a linear head on every item) reads it")
        if isinstance(x, _Lifted):
            self.fail(node, f"the {what} is a per-sample vector viewed as {list(x.shape)}: only add, mul and sub "
                            "broadcast it")
        if isinstance(x, fx_layout.WRAPPERS):
            self.fail(node, f"the {what}: {fx_layout.held_message(x)}")
        if isinstance(x, _Absorbed):
            self.fail(node, f"the {what} '{x.node.name}' is inside a recognised {x.pattern} pattern, whose "
                            "intermediate values have no spec form")
        if not _is_value(x):
            self.fail(node, f"the {what} is a constant ({type(x).__name__}), not a value computed from the inputs: "
                            "a spec has no constant tensors or scalars (use a module, e.g. nn.Linear)")
        return x

    # -------------------------------------------------------------------------------------------- driver
    def recognise(self) -> None:
        """Run the recognisers: their matches by anchor node, the nodes they absorb, and the misses' reasons."""
        self.matches: dict[fx.Node, tuple[Callable, Any]] = {}
        self.absorbed: dict[fx.Node, str] = {}
        self.misses: dict[fx.Node, tuple[str, str]] = {}
        for pattern, find, emit in RECOGNISERS:
            found, misses = find(self.gm, self.values)
            self.misses.update({core: (pattern, reason) for core, reason in misses.items()})
            for anchor, m in found.items():
                self.matches[anchor] = (emit, m)
                self.absorbed.update(dict.fromkeys(m.nodes - {anchor}, pattern))

    def run(self, placeholders: dict[str, Any]) -> Value:
        names = iter(placeholders)
        needed = self.needed()
        self.recognise()
        for node in self.values:
            if node.op == "placeholder":
                result = placeholders[next(names)]
            elif node.op == "output":
                return self.output(node)
            elif node in self.absorbed:
                self.env[node] = _Absorbed(node, self.absorbed[node])
                continue
            elif node in self.matches and node in needed:
                emit, m = self.matches[node]
                result = emit(self, node, m)
            elif node not in needed:  # unread (``_, h = gru(x)``), or an assert: nothing to emit
                self.check_in_place(node, dead=True)
                continue
            else:
                result = self.convert(node)
            if _is_value(result) and len(node.users) > 1:
                result.uses += 1  # a value read twice must not get processing folded into its head
            self.env[node] = result
        raise AssertionError("an fx graph ends with its output node")

    def needed(self) -> set[fx.Node]:
        """The nodes the output depends on."""
        return ancestors(next(n for n in self.values if n.op == "output"))

    def output(self, node: fx.Node) -> Value:
        out = self.load(node.args[0])
        if isinstance(out, (tuple, list)) and out:
            self.b.notes.append(f"{self.path or 'the module'} returns a {type(out).__name__}; the spec returns its "
                                "first element")
            out = out[0]
        if isinstance(out, _Tuple):
            out = out.primary
        return self.value(node, out, "output")

    def convert(self, node: fx.Node) -> Any:
        if node.op == "get_attr":
            return fx_params.attr(self, node)
        args, kwargs = self.load(node.args), self.load(node.kwargs)
        self.check_in_place(node)
        done = fx_params.convert(self, node, args, kwargs)  # parameters read and tensors made in forward
        if done is not fx_params.PASS:
            return done
        done = fx_layout.convert(self, node, args, kwargs)  # permutes, views, expands, stochastic depth
        return done if done is not fx_layout.PASS else self.dispatch(node, args, kwargs)

    def convert_with(self, node: fx.Node, replace: dict) -> Any:
        """``node`` converted with the held layout views in ``replace`` read as the given values."""
        args, kwargs = fx.node.map_aggregate((self.load(node.args), self.load(node.kwargs)),
                                             lambda a: replace.get(a, a) if isinstance(a, fx_layout.WRAPPERS) else a)
        done = fx_params.convert(self, node, args, kwargs)
        return done if done is not fx_params.PASS else self.dispatch(node, args, kwargs)

    def dispatch(self, node: fx.Node, args: tuple, kwargs: dict) -> Any:
        if node.op == "call_module":
            return self.call_module(node, args, kwargs)
        if not any(_is_traced(a) for a in _flat((args, kwargs))):
            return self.values.get(node)  # Python-only (sizes, specialisation asserts): the recorded value
        handler = self._handler(node)
        if handler is None:
            self.fail(node, "no spec operation is known for it (see docs/unification.md, 'Whole models')")
        return handler(node, args, kwargs)

    def check_in_place(self, node: fx.Node, dead: bool = False) -> None:
        """An in-place op (``x += y``, ``x.relu_()``, ``inplace=True``) changes its input for every later reader;
        the spec's values are immutable, so the input may have no reader after it (``dead``: the op's own result is
        not read, so any change it makes is lost)."""
        target = node.target
        module = self.gm.get_submodule(target) if node.op == "call_module" else None
        in_place = (target in (operator.iadd, operator.imul, operator.isub) or node.kwargs.get("inplace") is True
                    or node.op == "call_method" and str(target).endswith("_") or getattr(module, "inplace", False))
        first = node.args[0] if node.args else None
        if not in_place or not isinstance(first, fx.Node):
            return
        if dead:
            self.fail(node, f"it changes '{first.name}' in place and its result is not read; write it out of place")
        later = [u.name for u in first.users if self.order.get(u, -1) > self.order[node]]
        if later:
            self.fail(node, f"it changes '{first.name}' in place, which {later} read afterwards; write it out of "
                            "place")

    def _handler(self, node: fx.Node):
        t = node.target
        if node.op == "call_function":
            if t in _ELEMENTWISE:
                return lambda n, a, k: self.elementwise(n, _ELEMENTWISE[t], a, k)
            if t in _AS_MODULE:
                return lambda n, a, k: self.as_module(n, a, k, *_AS_MODULE[t])
            if t in _CAT:
                return self.cat
            if t is operator.getitem:
                return self.getitem
            if t is F.dropout:
                return self.dropout
            if t in (torch.reshape, torch.squeeze, torch.unsqueeze):
                return self.reshape
            if t in (torch.mean, torch.sum, torch.amax):
                return lambda n, a, k: self.reduce(n, _REDUCTIONS[t.__name__], a, k)
            if t in (torch.transpose, torch.permute, torch.swapaxes, torch.swapdims) or t is getattr and \
                    node.args[1] == "mT":
                return self.swap_axes
            if t in (torch.chunk, torch.split):
                return self.parts
            if t is getattr and node.args[1] in ("shape", "ndim", "dtype", "device"):
                return lambda n, a, k: self.values.get(n)
            return None
        if t in _ELEMENTWISE_METHODS:
            return lambda n, a, k: self.elementwise(n, _ELEMENTWISE_METHODS[t], a, k)
        if t in _METHOD_AS_MODULE:
            return lambda n, a, k: self.as_module(n, a, k, *_METHOD_AS_MODULE[t])
        if t in _REDUCTIONS:
            return lambda n, a, k: self.reduce(n, _REDUCTIONS[t], a, k)
        if t in _IDENTITY_METHODS:
            return lambda n, a, k: self.value(n, a[0])
        if t in _CASTS:
            return self.cast
        if t in _RESHAPES:
            return self.reshape
        if t in ("size", "dim"):
            return lambda n, a, k: self.values.get(n)  # Python ints: read by view / reshape
        if t in ("transpose", "permute", "swapaxes", "swapdims"):
            return self.swap_axes
        if t in ("chunk", "split"):
            return self.parts
        return None

    # -------------------------------------------------------------------------------------------- handlers
    def call_module(self, node: fx.Node, args: tuple, kwargs: dict) -> Any:
        sub = self.gm.get_submodule(node.target)
        made = next((a for a, v in zip(node.all_input_nodes, map(self.env.get, node.all_input_nodes))
                     if isinstance(v, torch.Tensor) and any(v is t for t in _flat((args, kwargs)))), None)
        if made is not None:
            self.fail(node, f"its input '{made.name}' ({_op_name(made)}) is a tensor made in forward from sizes or "
                            "constants, not computed from the model's inputs: a spec has no constant tensors "
                            f"(positions, masks); pass it to forward as a model input to convert '{node.target}' "
                            "(an embedding of torch.arange(T) converts as learned positions, a causal mask as "
                            "causal = true)")
        out = self.values.get(node)
        call = RecordedCall(tuple(self.concrete(node.args)), dict(self.concrete(node.kwargs)), out)
        local = str(node.target)
        y = convert_module(self.b, sub, self._qual(local), list(args), dict(kwargs), f"{self.base}{local}", call=call)
        return _Tuple(y, node) if isinstance(out, (tuple, list)) else y

    def ctx(self, node: fx.Node, module: nn.Module | None = None, args: list = (), kwargs: dict | None = None):
        return _NodeContext(self, node, module if module is not None else self.module, list(args), kwargs or {})

    def typed(self, ctx: _NodeContext, v: Value) -> Value:
        """``v`` with a kind: an undecided model input is typed by its rank (vector, sequence, signal/image/volume)."""
        if v.kind is None:
            nd = len(v.shape)
            if nd in (2, 3):
                return ctx.features_input(v)
            if nd in (4, 5):
                return ctx.grid_input(v, nd - 2)
            ctx.fail(None, f"an input of shape {list(v.shape)}")
        return v

    def elementwise(self, node: fx.Node, fn: str, args: tuple, kwargs: dict) -> Value:
        ctx = self.ctx(node)
        if kwargs.get("alpha", 1) != 1:
            self.fail(node, f"alpha={kwargs['alpha']}: {fn} has no scale")
        if len(args) != 2:
            self.fail(node, f"expected two operands, got {len(args)}")
        if any(isinstance(x, _Lifted) for x in args):
            return self.broadcast(node, ctx, fn, args)
        a, b = (self.typed(ctx, self.value(node, x, "operand")) for x in args)
        if a.kind != b.kind or a.time_major != b.time_major or a.batched != b.batched or not _broadcasts(a, b):
            self.fail(node, f"its operands are a {a.kind} value {list(a.shape)} and a {b.kind} value "
                            f"{list(b.shape)}; {fn} needs two values of one type and shape, or whose shapes "
                            "broadcast (each axis equal or of size 1, the channel/feature axis equal), or a "
                            "per-sample vector viewed as [B, C, 1, ...] / [B, 1, F] beside a grid / sequence")
        if a.shape == b.shape:
            return ctx.op(fn, [a, b], comment=f"{ctx.where()} -> {fn}", prefix=fn)
        full = a if len(a.shape) == len(b.shape) and all(x >= y for x, y in zip(a.shape, b.shape)) else b
        y = ctx.op(fn, [a, b], kind=full.kind, prefix=fn,
                   comment=f"{ctx.where()} -> {fn}: {list(a.shape)} and {list(b.shape)} broadcast "
                           f"(size-1 axes; {'a gate is a Hadamard product' if fn == 'mul' else 'elementwise'})")
        y.layout, y.items_from = full.layout, full.items_from
        return y

    def broadcast(self, node: fx.Node, ctx: _NodeContext, fn: str, args: tuple) -> Value:
        """``x ⊙ v.view(B, C, 1, 1)`` (grid) / ``x ⊙ v.unsqueeze(1)`` (sequence) = the op's per-sample-vector
        broadcast (docs/semantics.md, "Elementwise operations and broadcasting")."""
        lifted = next(x for x in args if isinstance(x, _Lifted))
        other = next((x for x in args if x is not lifted), None)
        wide = self.typed(ctx, self.value(node, other, "operand"))
        if wide.kind == "items" and wide.layout is not None and not wide.layout.fixed:
            flipped = not wide.time_major  # an open axis order is fixed by the side the vector is lifted on
            if _lift_shape(wide, flipped) == lifted.shape != _lift_shape(wide, wide.time_major):
                ctx.require_layout(wide, flipped, "operand")
        if wide.kind not in ("grid", "items") or not wide.batched or _lift_shape(wide, wide.time_major) != lifted.shape:
            self.fail(node, f"a per-sample vector viewed as {list(lifted.shape)} beside a {wide.kind} value "
                            f"{list(wide.shape)}: the spec broadcasts a vector over a grid as [B, C, 1, ...] and "
                            "over a sequence as [B, 1, F] ([1, B, F] time-first) only")
        operands = [lifted.vector if x is lifted else wide for x in args]
        y = ctx.op(fn, operands, kind=wide.kind, prefix=fn,
                   comment=f"{ctx.where()} -> {fn}: the per-sample vector broadcasts over the "
                           f"{'spatial axes' if wide.kind == 'grid' else 'items'}")
        y.layout, y.items_from = wide.layout, wide.items_from
        return y

    def cat(self, node: fx.Node, args: tuple, kwargs: dict) -> Value:
        ctx = self.ctx(node)
        parts = args[0] if args else kwargs.get("tensors")
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        if not isinstance(parts, (tuple, list)) or not parts:
            self.fail(node, "expected a list of tensors")
        vals = [self.typed(ctx, self.value(node, p, "operand")) for p in parts]
        first = vals[0]
        nd = len(first.shape)
        if first.kind == "items" and first.batched and nd == 3 and dim % nd == 1 and len(vals) > 1:
            return self.cat_items(node, ctx, vals, dim)
        feature = 1 if first.kind in ("grid", "vector") else nd - 1
        if dim % nd != feature:
            self.fail(node, f"dim={dim}: concat joins the feature axis ({feature} of a {first.kind} value "
                            f"{list(first.shape)})")
        for v in vals[1:]:
            if v.kind != first.kind or v.time_major != first.time_major:
                self.fail(node, f"it joins a {first.kind} value and a {v.kind} value")
        if len(vals) == 1:
            return first
        return ctx.op("concat", vals, comment=f"{ctx.where()}(dim={dim}) -> concat over the feature axis",
                      prefix="cat")

    def cat_items(self, node: fx.Node, ctx: _NodeContext, vals: list[Value], dim: int) -> Value:
        """``torch.cat([a, b], dim=1)`` of batch-first sequences = concat_items: the items of b follow a's."""
        for v in vals:
            if v.kind != "items" or not v.batched or len(v.shape) != 3:
                self.fail(node, f"dim={dim}: it joins a sequence and a {v.kind} value {list(v.shape)}; the item axis "
                                "is joined for batch-first sequences only")
            if not v.layout.fixed:
                ctx.require_layout(v, False, "operand")
            if v.time_major:
                self.fail(node, f"dim={dim} of a time-first sequence {list(v.shape)} is its batch axis; its items "
                                "are joined along dim=0, which has no spec form")
            if v.shape[2] != vals[0].shape[2]:
                self.fail(node, f"it joins sequences of {vals[0].shape[2]} and {v.shape[2]} features along the item "
                                "axis")
        self._distinct_lengths(vals)
        y = ctx.op("concat_items", vals, kind="items", prefix="cat",
                   comment=f"{ctx.where()}(dim={dim}) -> concat_items: the items of each part follow the previous")
        y.items_from = None  # a new item count (the sum), not an input's axis
        return y

    def _distinct_lengths(self, vals: list[Value]) -> None:
        """Sequence inputs joined along the item axis get their own item-count symbols (T, S, U, ...): their
        lengths are independent."""
        used = {sym for inp in self.b.inputs for sym in inp.item_dims.values() if sym is not None}
        seen: dict[str, Any] = {}
        for v in vals:
            if v.items_from is None:
                continue
            inp, axis = v.items_from
            sym = inp.item_dims.get(axis)
            if sym is None or seen.setdefault(sym, inp) is inp:
                continue
            new = next(c for c in LENGTH_SYMBOLS[1:] if c not in used)
            used.add(new)
            seen[new] = inp
            inp.item_dims[axis] = new
            if v.layout is not None and v.layout.input is inp:
                v.layout.symbol = new

    def swap_axes(self, node: fx.Node, args: tuple, kwargs: dict) -> Value:
        """``x.transpose(1, 2)`` / ``x.permute(0, 2, 1)`` / ``x.mT`` of a sequence ``[B, T, E]`` = to_signal (a
        signal ``[B, E, T]``, e.g. for nn.Conv1d), of a signal = to_items: the identity on the data, a change of
        which axis is the instance axis."""
        ctx = self.ctx(node)
        x = self.value(node, args[0] if args else kwargs.get("input"))
        nd = len(x.shape)
        perm = self._permutation(node, nd, args, kwargs)
        if perm is None or nd != 3 or tuple(perm) != (0, 2, 1):
            self.fail(node, f"the axis order {perm} of a {x.kind or 'model input'} value {list(x.shape)}: only "
                            "swapping the last two axes of a 3-D value has a spec form (a sequence [B, T, E] <-> a "
                            "signal [B, E, T]: to_signal / to_items)")
        if x.kind is None:
            ctx.features_input(x)
        if x.kind == "items" and x.batched:
            if not x.layout.fixed:
                ctx.require_layout(x, False, "input")
            if x.time_major:
                self.fail(node, f"a time-first sequence {list(x.shape)} with its last two axes swapped is "
                                "[T, F, B], which has no spec form; swap a batch-first [B, T, F] sequence")
            y = ctx.op("to_signal", [x], kind="grid", prefix="sig",
                       comment=f"{ctx.where()} -> to_signal: the T items become a signal's positions (no matrix)")
            y.layout = None
            return y
        if x.kind == "grid":
            return ctx.op("to_items", [x], kind="items", prefix="seq", time_major=False,
                          comment=f"{ctx.where()} -> to_items: the signal's positions become items (no matrix)")
        self.fail(node, f"swapping the last two axes of a {x.kind} value {list(x.shape)}: only a batch-first "
                        "sequence [B, T, E] (-> a signal) and a signal [B, E, T] (-> a sequence) have a spec form")

    def _permutation(self, node: fx.Node, nd: int, args: tuple, kwargs: dict) -> list[int] | None:
        """The axis order ``node`` produces (``y.shape[i] = x.shape[perm[i]]``)."""
        name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
        if node.target is getattr:  # x.mT
            name = "mT"
        if name == "mT":
            d0, d1 = nd - 2, nd - 1
        elif name == "permute":
            dims = list(args[1:]) or list(kwargs.get("dims", ()))
            if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
                dims = list(dims[0])
            if sorted(d % nd for d in dims) != list(range(nd)):
                return None
            return [d % nd for d in dims]
        else:
            d0 = args[1] if len(args) > 1 else kwargs.get("dim0", kwargs.get("axis0"))
            d1 = args[2] if len(args) > 2 else kwargs.get("dim1", kwargs.get("axis1"))
            if not isinstance(d0, int) or not isinstance(d1, int):
                return None
        perm = list(range(nd))
        perm[d0 % nd], perm[d1 % nd] = perm[d1 % nd], perm[d0 % nd]
        return perm

    def parts(self, node: fx.Node, args: tuple, kwargs: dict) -> Any:
        """``x.chunk(k, dim=-1)`` / ``x.split(sizes, dim=-1)`` along the feature axis: the parts, each a
        slice_features of ``x`` when indexed (``a, b = x.chunk(2, -1)``)."""
        ctx = self.ctx(node)
        x = self.typed(ctx, self.value(node, args[0] if args else kwargs.get("input")))
        nd = len(x.shape)
        dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
        feature = 1 if x.kind in ("grid", "vector") else nd - 1
        if not isinstance(dim, int) or x.kind not in ("grid", "vector", "items") or dim % nd != feature:
            self.fail(node, f"dim={dim} of a {x.kind} value {list(x.shape)}: only parts along the feature axis "
                            f"({feature}) have a spec form (slice_features)")
        sizes = [t.shape[dim] for t in self.values.get(node)]
        bounds, start = [], 0
        for n in sizes:
            bounds.append((start, start + n))
            start += n
        return _Parts(x, bounds, node)

    def part(self, node: fx.Node, parts: _Parts, index: Any) -> Value:
        if not isinstance(index, int) or not -len(parts.bounds) <= index < len(parts.bounds):
            self.fail(node, f"index {index!r} of the {len(parts.bounds)} parts of '{parts.node.name}'")
        index %= len(parts.bounds)
        if index not in parts.made:
            ctx = self.ctx(node)
            start, stop = parts.bounds[index]
            x = parts.x
            last = stop == x.features
            parts.made[index] = ctx.op(
                "slice_features", [x], f"start = {start}" + ("" if last else f", stop = {stop}"), prefix="part",
                comment=f"{ctx.where()} -> slice_features: part {index} of '{parts.node.name}' = features "
                        f"[{start}:{stop}]")
        return parts.made[index]

    def as_module(self, node: fx.Node, args: tuple, kwargs: dict, names: tuple[str, ...],
                  make: Callable[[dict], nn.Module]) -> Value:
        x = self.value(node, args[0] if args else kwargs.get("input"))
        extra = [a for a in _flat((args[1:], kwargs)) if _is_traced(a)]
        if extra:
            self.fail(node, "it takes tensors other than its input (weights read in forward have no spec form; "
                            "use the module, e.g. nn.LayerNorm)")
        unknown = [k for k, v in kwargs.items() if k not in names and k not in _NO_OPTION and (k, v) != ("dtype", None)]
        if unknown:
            self.fail(node, f"option(s) {unknown} have no spec form")
        try:
            module = make(_opt(args, kwargs, names))
        except (TypeError, ValueError) as err:
            self.fail(node, f"its options: {err}")
        return self.leaf(node, module, x)

    def leaf(self, node: fx.Node, module: nn.Module, x: Value) -> Value:
        """``module`` (a parameter-free equivalent of the node) converted by its converter on ``x``."""
        ctx = self.ctx(node, module, [x])
        return find_converter(module)(module, ctx)

    def cast(self, node: fx.Node, args: tuple, kwargs: dict) -> Value:
        """``x.to(dtype)`` / ``x.type_as(y)`` / ``x.float()`` that keeps x's dtype and device on the example (library
        code casting to the input's own dtype) = x itself; a cast that changes them changes the values."""
        x = self.value(node, args[0])
        before, after = self.values.get(node.args[0]), self.values.get(node)
        if not isinstance(after, torch.Tensor) or not isinstance(before, torch.Tensor) or \
                (after.dtype, after.device) != (before.dtype, before.device):
            self.fail(node, f"a cast from {getattr(before, 'dtype', '?')} to {getattr(after, 'dtype', '?')} changes "
                            "the values (the spec computes in one dtype); only a cast to the value's own dtype converts")
        return x

    def dropout(self, node: fx.Node, args: tuple, kwargs: dict) -> Value:
        x = self.value(node, args[0] if args else kwargs.get("input"))
        o = _opt(args, kwargs, ("p", "training", "inplace"), {"training": True})
        if o["training"]:
            self.fail(node, "training=True drops values even in eval mode; pass training=self.training")
        return x

    def reduce(self, node: fx.Node, how: str, args: tuple, kwargs: dict) -> Value:
        """Mean / sum / max over every spatial axis of a grid or the item axis of a sequence = pool_items."""
        ctx = self.ctx(node)
        x = self.value(node, args[0] if args else kwargs.get("input"))
        o = _opt(args, kwargs, ("dim", "keepdim"), {"dim": None, "keepdim": False})
        nd = len(x.shape)
        if o["dim"] is None:
            self.fail(node, "a reduction over every axis (the batch too) has no spec form; give dim")
        dims = sorted({d % nd for d in (o["dim"] if isinstance(o["dim"], (tuple, list)) else [o["dim"]])})
        if x.kind is None:
            if nd in (4, 5) or nd == 3 and dims == [2]:
                ctx.grid_input(x, nd - 2)
            else:
                self.typed(ctx, x)
        if x.kind == "grid" and dims == list(range(2, nd)):
            if o["keepdim"]:
                if how == "sum":
                    self.fail(node, "keepdim=True: a spatial sum that keeps the grid has no spec form")
                cls = getattr(nn, f"Adaptive{'Avg' if how == 'mean' else 'Max'}Pool{nd - 2}d")
                return self.leaf(node, cls(1), x)
        elif x.kind == "items" and x.batched and dims == [0 if x.time_major else 1]:
            if o["keepdim"]:
                self.fail(node, "keepdim=True on a sequence (a length-1 sequence) has no spec form")
        else:
            self.fail(node, f"dim={o['dim']} on a {x.kind} value {list(x.shape)}: pool_items reduces every spatial "
                            "axis of a grid or the item axis of a sequence")
        return ctx.op("pool_items", [x], f"how = {lit(how)}", kind="vector", prefix="pool",
                      comment=f"{ctx.where()}(dim={o['dim']}) -> pool_items(how = {lit(how)})")

    def reshape(self, node: fx.Node, args: tuple, kwargs: dict) -> Any:
        """``view`` / ``reshape`` / ``squeeze`` / ``unsqueeze`` to ``[B, N]`` of a grid or batch-first sequence =
        flatten; of a vector ``[B, C]`` to ``[B, C, 1, ...]`` / ``[B, 1, C]`` = a lifted vector (for add/mul/sub); to
        its own shape (``ids.view(-1, ids.shape[-1])`` on ``[B, T]`` ids) = the value itself."""
        x = args[0] if args else kwargs.get("input")
        x = x.vector if isinstance(x, _Lifted) else self.value(node, x)
        out = tuple(self.values.get(node).shape)
        if out == tuple(x.shape):
            return x
        if len(x.shape) == 3 and out == (x.shape[0] * x.shape[1], x.shape[2]):
            x = self.typed(self.ctx(node), x)
            if x.kind == "items" and x.batched and not x.time_major:
                return fx_params.Rows(x)  # read only by addmm (GPT-2's Conv1D)
        if x.kind == "vector" and x.batched and _is_lift_of(out, x.shape):
            return _Lifted(x, out)
        if len(out) == 2 and out[0] == x.shape[0] and len(x.shape) > 2:
            return self.leaf(node, nn.Flatten(), x)
        if x.kind == "items" and len(out) == 4 and len(x.shape) == 3 and out[:2] == tuple(x.shape[:2]) and \
                out[2] * out[3] == x.shape[2]:
            self.fail(node, f"{list(x.shape)} -> {list(out)} splits the features into {out[2]} heads of {out[3]}: "
                            "attention written out over heads (or F.scaled_dot_product_attention) has no recogniser "
                            "onto the attention ξ yet; nn.MultiheadAttention converts")
        self.fail(node, f"{list(x.shape)} -> {list(out)}: only flattening every axis after the batch "
                        "([B, ...] -> [B, N]) and viewing a per-sample vector as [B, C, 1, ...] / [B, 1, C] have "
                        "a spec form")

    def getitem(self, node: fx.Node, args: tuple, kwargs: dict) -> Any:
        obj, index = args
        if isinstance(obj, _Tuple):
            if index == 0:
                return obj.primary
            rnn = self.gm.get_submodule(obj.node.target)
            if isinstance(rnn, nn.RNNBase) and index == 1:
                return _FinalState(obj.primary, rnn, obj.node, "h_c" if rnn.mode == "LSTM" else "h")
            self.fail(node, f"output [{index}] of '{obj.node.name}': only the primary output is converted")
        if isinstance(obj, _FinalState):
            return self.final_state(node, obj, index)
        if isinstance(obj, _Parts):
            return self.part(node, obj, index)
        x = self.value(node, obj)
        out = self.values.get(node)
        if x.kind == "vector" and x.batched and isinstance(out, torch.Tensor) and _is_lift_of(out.shape, x.shape):
            return _Lifted(x, tuple(out.shape))  # v[:, :, None, None], v[:, None]
        if x.kind == "items" and x.batched and x.layout is not None:
            item = _item_index(index, x.time_major)
            if item is not None:
                return self.select_items(node, x, item)
        self.fail(node, f"indexing a {x.kind} value {list(x.shape)} with {index!r}: only item-axis indexing of a "
                        "sequence (x[:, k], x[:, a:b] batch-first; x[k], x[a:b] time-first) has a "
                        "spec form")

    def final_state(self, node: fx.Node, h: _FinalState, index: Any) -> Any:
        """``h_n[-1]`` of a unidirectional RNN/GRU/LSTM = the last layer's state after the last step = ``output`` at
        T − 1 (an LSTM's ``(h_n, c_n)`` is indexed first: ``[0]`` is h_n)."""
        if h.which == "h_c":
            if index not in (0, 1):
                self.fail(node, f"index {index!r} of the LSTM state (h_n, c_n) of '{h.node.name}'")
            return _FinalState(h.output, h.rnn, h.node, "h" if index == 0 else "c")
        if h.which == "c" or index not in (-1, h.rnn.num_layers - 1) or h.rnn.bidirectional:
            self.fail(node, f"{'c_n' if h.which == 'c' else 'h_n'}[{index!r}] of '{h.node.name}': only h_n[-1] of a "
                            "unidirectional RNN (the last layer's final state, = output at the last step) is "
                            "converted")
        return self.select_items(node, h.output, -1)

    def select_items(self, node: fx.Node, x: Value, item: int | slice) -> Value:
        """``last`` / ``first`` for the item -1 / 0, ``item(index = k)`` for another, ``slice(start, stop)`` for a
        range of items."""
        ctx = self.ctx(node)
        if not x.layout.fixed:
            ctx.require_layout(x, x.time_major, "input")
        if isinstance(item, slice):
            if item.step not in (None, 1):
                self.fail(node, f"step {item.step}: slice keeps consecutive items")
            kwargs = f"start = {item.start or 0}" + ("" if item.stop is None else f", stop = {item.stop}")
            return ctx.op("slice", [x], kwargs, kind="items", name=self.b.fresh(f"{x.name}_items", "items"),
                          comment=f"{ctx.where()} -> slice: items [{item.start or ''}:{item.stop or ''}]")
        fn = {-1: "last", 0: "first"}.get(item)
        if fn is None:  # DeiT's distillation token x[:, 1]
            return ctx.op("item", [x], f"index = {item}", kind="vector", name=self.b.fresh(f"{x.name}_item", "item"),
                          comment=f"{ctx.where()} -> item: the sequence's item {item}")
        return ctx.op(fn, [x], kind="vector", name=self.b.fresh(f"{x.name}_{fn}", fn),
                      comment=f"{ctx.where()} -> {fn}: the sequence's {fn} item (time step {item})")


@dataclass(eq=False)
class _FinalState:
    """The final state of an RNN leaf (``which``: ``h`` = h_n, ``c`` = c_n, ``h_c`` = an LSTM's pair): usable only
    as ``h_n[-1]`` (see :meth:`_GraphConverter.final_state`)."""

    output: Value
    rnn: nn.RNNBase
    node: fx.Node
    which: str = "h"


@dataclass(eq=False)
class _Parts:
    """The parts of ``x`` made by ``chunk`` / ``split`` along its feature axis (``bounds``: each part's
    ``[start, stop)``): usable only indexed, each index one slice_features of ``x``."""

    x: Value
    bounds: list[tuple[int, int]]
    node: fx.Node
    made: dict[int, Value] = field(default_factory=dict)


def _lift_shape(wide: Value, time_major: bool) -> tuple[int, ...]:
    """The torch shape of a per-sample vector broadcast over ``wide`` (a batched grid, or a sequence in the given
    axis order)."""
    if wide.kind == "grid":
        return (wide.shape[0], wide.shape[1], *([1] * (len(wide.shape) - 2)))
    return (1, wide.shape[1], wide.shape[2]) if time_major else (wide.shape[0], 1, wide.shape[2])


def _broadcasts(a: Value, b: Value) -> bool:
    """``a`` and ``b`` (of one kind) broadcast as the spec's elementwise ops do: one rank, each axis equal or of size
    1 on one side, the channel/feature axis equal."""
    if a.kind not in ("vector", "items", "grid") or len(a.shape) != len(b.shape):
        return a.shape == b.shape
    feature = 1 if a.kind == "grid" else len(a.shape) - 1
    return all(x == y or (axis != feature and 1 in (x, y)) for axis, (x, y) in enumerate(zip(a.shape, b.shape)))


def _is_lift_of(out: Sequence[int], vec: tuple[int, ...]) -> bool:
    """``out`` is ``vec`` = [B, C] with size-1 axes added: [B, C, 1, ...], [B, 1, C] or [1, B, C]."""
    b, c = vec
    out = tuple(out)
    return (len(out) >= 3 and out[:2] == (b, c) and all(d == 1 for d in out[2:])) or out in ((b, 1, c), (1, b, c))


def _item_index(index: Any, time_major: bool) -> int | slice | None:
    """The item (an int) or item range (a slice) selected by ``index`` on a sequence (item axis 1 batch-first, 0
    time-first), or None when ``index`` touches another axis."""
    full = slice(None)
    parts = list(index) if isinstance(index, tuple) else [index]
    axis = 0 if time_major else 1
    while len(parts) > axis + 1 and (parts[-1] == full or parts[-1] is Ellipsis):
        parts.pop()
    if len(parts) != axis + 1 or any(p != full for p in parts[:axis]):
        return None
    item = parts[axis]
    if isinstance(item, slice) and all(v is None or isinstance(v, int) for v in (item.start, item.stop, item.step)):
        return None if item == full else item
    return item if isinstance(item, int) and not isinstance(item, bool) else None


# ================================================================================================ entry
def convert_traced(b: SpecBuilder, module: nn.Module, path: str, args: list, kwargs: dict, base: str,
                   call: RecordedCall | None) -> Value:
    """Convert ``module`` (a user module with its own forward) by tracing it; ``call`` is its recorded call."""
    if call is None:
        raise TorchImportError(path, class_name(module), None, "it was not called by the example run")
    gm, values, params = trace(module, path, call)
    named = Context(b, module, path, args, kwargs, call, base).named  # Values (or options) by parameter name
    defaults = inspect.signature(module.forward).parameters
    placeholders = {p: named.get(p, defaults[p].default) for p in params}
    return _GraphConverter(b, gm, module, path, base, values).run(placeholders)
