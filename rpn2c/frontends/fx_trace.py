"""The tracer behind ``from_torch`` for modules with their own ``forward``: torch.fx with the example's values.

    gm, values, names = trace(module, path, call)     # fx graph, each node's example value, the inputs' names

Every proxy carries the value its node takes on the example call (``node.meta["example"]``, computed while
tracing). Library code that reads a traced tensor's metadata then runs as it did on the example, as
``transformers.utils.fx`` does with meta tensors:

- ``x.ndim``, ``x.dtype``, ``x.device`` are the example's (``torch.finfo(x.dtype)``, ``if mask.ndim == 2``);
- ``x.shape`` / ``x.size()`` stay graph nodes (so ``torch.arange(x.size(1))`` is still traced, read as positions
  from the length), but comparing, indexing or testing them evaluates on the example: ``if b != ids.shape[0]``,
  ``assert t <= max_len``, ``range(t)``, ``b, t = x.shape``;
- ``bool(tensor)`` (a branch on a tensor's values, ``if mask.all()``) is refused: it would bake the example's data
  into the model;
- ``callable(x)`` is the example's (a tensor is not callable, although an fx proxy defines ``__call__``).

The root ``forward`` is traced through a wrapper whose parameters are the example's tensor arguments by name; every
other argument (``return_dict``, ``use_cache``, ``None`` defaults, ``**kwargs`` entries) is bound to its example
value. A ``ModelOutput`` / dict result keeps its first entry (``last_hidden_state``, ``logits``), a tuple its first
element: what ``out[0]`` reads.

Errors raised inside library code name the library's file and line and the module path where tracing stopped.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import traceback
from collections.abc import Mapping
from typing import Any, NoReturn

import torch
import torch.fx as fx
from torch import nn

from rpn2c.errors import Diagnostic, Span, SpecTypeError
from rpn2c.frontends import fx_params
from rpn2c.frontends.kit import (
    ERROR_CODE, RecordedCall, TorchImportError, class_name, find_converter, library_of,
)

_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
_MISSING = object()
_CONCRETE_ATTRS = ("ndim", "dtype", "device", "layout", "is_cuda", "is_sparse", "is_quantized", "is_meta")


class DataDependentBranch(Exception):
    """``bool()`` of a traced tensor: Python control flow on the example's values."""


class _ExampleProxy(fx.Proxy):
    """An fx proxy that knows its node's example value (``node.meta["example"]``)."""

    def _example(self) -> Any:
        return self.node.meta.get("example", _MISSING)

    def __getattr__(self, k: str) -> Any:
        node = self.__dict__.get("node")
        if node is None:  # not constructed yet (copy, pickle)
            raise AttributeError(k)
        v = node.meta.get("example", _MISSING)
        if isinstance(v, torch.Tensor) and k in _CONCRETE_ATTRS:
            return getattr(v, k)
        if isinstance(v, torch.Tensor) and k == "dim":
            return v.dim
        if k == "shape":  # a node now, so that `b, t = x.shape` and `x.shape[1]` carry examples
            return self.tracer.create_proxy("call_function", getattr, (self, k), {})
        return super().__getattr__(k)

    def __bool__(self) -> bool:
        v = self._example()
        if v is _MISSING:
            return super().__bool__()
        if isinstance(v, torch.Tensor):
            raise DataDependentBranch(f"a Python branch on the values of '{self.node.name}' (bool of a tensor): the "
                                      "example's data would be baked into the model")
        return bool(v)

    def __index__(self) -> int:
        v = self._example()
        if isinstance(v, int):
            return v
        return _refuse_item(self) if isinstance(v, torch.Tensor) else super().__index__()

    def __int__(self) -> int:
        v = self._example()
        if isinstance(v, int):
            return v
        return _refuse_item(self) if isinstance(v, torch.Tensor) else super().__int__()

    def __len__(self) -> int:
        v = self._example()
        if v is _MISSING:
            return super().__len__()
        return len(v)

    def __iter__(self):
        v = self._example()
        if isinstance(v, (tuple, list, torch.Size)):
            return iter([self[i] for i in range(len(v))])
        return super().__iter__()

    def item(self) -> NoReturn:
        _refuse_item(self)

    def tolist(self) -> NoReturn:
        _refuse_item(self)


def _refuse_item(p: _ExampleProxy) -> NoReturn:
    raise DataDependentBranch(f"reading the values of '{p.node.name}' as Python numbers (item, tolist, int): the "
                              "example's data would be baked into the model")


def _example_of(x: Any) -> Any:
    return x.node.meta.get("example", _MISSING) if isinstance(x, fx.Proxy) else x


class ExampleTracer(fx.Tracer):
    """Leaves: modules rpn2c converts as a whole, and every torch / torch_geometric layer (a missing converter is
    then reported for that module); user modules, library model classes and plain containers are traced through.
    Each created node gets its example value (the operation applied to its arguments' example values)."""

    proxy_buffer_attributes = True  # a buffer read in forward is a node (fx_params: sliced masks, position tables)

    def __init__(self, examples: Mapping[str, Any]):
        super().__init__()
        self.examples = examples

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        if isinstance(m, _CONTAINERS) and type(m).forward in (c.forward for c in _CONTAINERS):
            return False
        if isinstance(m, nn.Identity) or find_converter(m) is not None:
            return True
        return library_of(type(m)) is not None

    def proxy(self, node: fx.Node) -> fx.Proxy:
        return _ExampleProxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None, proxy_factory_fn=None):
        p = super().create_proxy(kind, target, args, kwargs, name, type_expr, proxy_factory_fn)
        value = self._compute(kind, target, args, kwargs)
        if value is not _MISSING:
            p.node.meta["example"] = value
        return p

    def _compute(self, kind: str, target: Any, args: tuple, kwargs: dict) -> Any:
        if kind == "placeholder":
            return self.examples.get(target, _MISSING)
        if kind == "get_attr":
            obj = self.root
            with _untraced_modules():
                for part in str(target).split("."):
                    obj = getattr(obj, part, _MISSING)
            # a copy: an in-place op traced on it (a buffer update) must not change the model
            return obj.detach().clone() if isinstance(obj, torch.Tensor) else obj
        a, k = fx.node.map_aggregate((args, kwargs), _example_of)
        if _has_missing((a, k)):
            return _MISSING
        try:
            with torch.no_grad(), _untraced_modules():
                if kind == "call_function":
                    return target(*a, **k)
                if kind == "call_method":
                    return getattr(a[0], target)(*a[1:], **k)
                if kind == "call_module":
                    return self.root.get_submodule(target)(*a, **k)
        except Exception:  # noqa: BLE001  (the node is kept; its example stays unknown)
            return _MISSING
        return _MISSING


_PLAIN = [0]  # example computations in progress: module calls and attribute reads run as plain Python
_TRACED: dict[str, Any] = {}  # fx's patched nn.Module.__call__ / __getattr__ of the trace in progress


def _call(mod, *args, **kwargs):
    from torch.fx import _symbolic_trace as st

    return (st._orig_module_call if _PLAIN[0] else _TRACED["__call__"])(mod, *args, **kwargs)


def _getattr(mod, name):
    from torch.fx import _symbolic_trace as st

    return (st._orig_module_getattr if _PLAIN[0] else _TRACED["__getattr__"])(mod, name)


@contextlib.contextmanager
def _untraced_modules():
    """Module calls run as plain Python while an example value is computed (fx patches ``nn.Module.__call__`` and
    ``__getattr__`` during tracing). The patches are swapped once per trace for wrappers that read a flag: setting
    an attribute of ``nn.Module`` invalidates the method caches of every subclass (thousands with timm or
    transformers imported), too slow to do around each node."""
    if nn.Module.__call__ is not _call:
        _TRACED.update(__call__=nn.Module.__call__, __getattr__=nn.Module.__getattr__)
        nn.Module.__call__, nn.Module.__getattr__ = _call, _getattr  # fx restores its originals after the trace
    _PLAIN[0] += 1
    try:
        yield
    finally:
        _PLAIN[0] -= 1


def _has_missing(x: Any) -> bool:
    found = []
    fx.node.map_aggregate(x, lambda v: found.append(v is _MISSING))
    return any(found)


class _Recorder(fx.Interpreter):
    """Runs the traced graph, keeping every node's value."""

    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm, garbage_collect_values=False)
        self.values: dict[fx.Node, Any] = {}

    def run_node(self, n: fx.Node) -> Any:
        out = super().run_node(n)
        self.values[n] = out
        return out


@contextlib.contextmanager
def _refusing_autograd_functions(path: str, module: nn.Module):
    """While tracing, a custom ``torch.autograd.Function`` applied to a traced value raises a located error: fx
    would trace through its ``forward`` and drop its own ``backward`` (a straight-through estimator, a clipped
    gradient), converting it to a model with other gradients."""
    original = torch.autograd.Function.__dict__["apply"]

    def apply(cls, *args, **kwargs):
        if _has_proxy((args, kwargs)):
            raise TorchImportError(path, class_name(module), f"{cls.__qualname__}.apply",
                                   "a custom torch.autograd.Function: its own backward has no spec form (tracing "
                                   "keeps only its forward); write it with torch operations or modules")
        return original.__func__(cls, *args, **kwargs)

    torch.autograd.Function.apply = classmethod(apply)
    try:
        yield
    finally:
        torch.autograd.Function.apply = original


@contextlib.contextmanager
def _example_callable():
    """While tracing, ``callable(x)`` of a traced value answers as on the example: fx's proxies define ``__call__``,
    so library code such as ``arg() if callable(arg) else arg`` (x-transformers' ``default``) would call a tensor."""
    import builtins

    original = builtins.callable

    def example_callable(obj: Any) -> bool:
        if isinstance(obj, _ExampleProxy):
            v = obj._example()
            return original(v) if v is not _MISSING else True
        return original(obj)

    builtins.callable = example_callable
    try:
        yield
    finally:
        builtins.callable = original


def _has_proxy(x: Any) -> bool:
    found = []
    fx.node.map_aggregate(x, lambda v: found.append(isinstance(v, fx.Proxy)))
    return any(found)


def first_output(out: Any) -> Any:
    """The output ``out[0]`` reads: a ModelOutput's / dict's first entry, a tuple's first element."""
    if isinstance(out, Mapping) and out:
        return next(iter(out.values()))
    if isinstance(out, (tuple, list)) and out:
        return out[0]
    return out


def trace(module: nn.Module, path: str, call: RecordedCall) -> tuple[fx.GraphModule, dict[fx.Node, Any], list[str]]:
    """The traced graph, its recorded node values and the tensor parameters of ``forward`` in placeholder order."""
    sig = inspect.signature(module.forward)
    try:
        bound = sig.bind(*call.args, **call.kwargs)
    except TypeError as err:
        raise TorchImportError(path, class_name(module), None, f"its recorded call does not bind: {err}") from err
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    for n, v in arguments.items():
        if isinstance(v, (tuple, list)) and any(isinstance(t, torch.Tensor) for t in v):
            star = sig.parameters[n].kind == inspect.Parameter.VAR_POSITIONAL
            raise TorchImportError(path, class_name(module), f"*{n}" if star else f"{n}=tuple",
                                   f"tensor tuples{' (*args)' if star else ''} are not traced; pass the tensors as "
                                   "separate arguments")
        if isinstance(v, dict) and any(isinstance(t, torch.Tensor) for t in v.values()):
            raise TorchImportError(path, class_name(module), f"**{n}", "a tensor passed through **kwargs would be "
                                   "baked into the model; the traced inputs are forward's named tensor parameters")
    tensors = [n for n, v in arguments.items() if isinstance(v, torch.Tensor)]
    concrete = {n: v for n, v in arguments.items() if n not in tensors}
    examples = {n: arguments[n].detach().clone() for n in tensors}
    modes = [(m, m.training) for m in module.modules()]
    original = type(module)
    module.eval()
    tracer = ExampleTracer(examples)
    tracer.record_stack_traces = True  # node.meta["stack_trace"]: a refusal names the library's line
    try:
        module.__class__ = _wrapper_class(original, tensors, concrete)
        with _refusing_autograd_functions(path, module), fx_params.factory_sizes(), _example_callable(), \
                torch.no_grad():
            graph = tracer.trace(module)
        module.__class__ = original
        gm = fx.GraphModule(module, graph)
        rec = _Recorder(gm)
        with torch.no_grad():
            rec.run(*(arguments[n] for n in tensors))
    except TorchImportError:
        raise
    except Exception as err:  # noqa: BLE001  (fx's TraceError and whatever the traced forward raises)
        raise _located(err, module, original, path, tracer) from err
    finally:
        module.__class__ = original
        for m, mode in modes:
            m.training = mode
    return gm, rec.values, tensors


def _wrapper_class(cls: type, tensors: list[str], concrete: dict[str, Any]) -> type:
    """A subclass of ``cls`` whose ``forward(self, <tensors>)`` calls ``cls.forward`` with the other arguments bound
    to their example values and returns what ``out[0]`` reads (see the module docstring)."""
    sig = inspect.signature(cls.forward)
    order = [n for n in sig.parameters if n != "self"]
    kinds = {n: p.kind for n, p in sig.parameters.items()}
    star = next((i for i, n in enumerate(order) if kinds[n] == inspect.Parameter.VAR_POSITIONAL), -1)

    def body(self, *xs):
        values = dict(concrete)
        values.update(zip(tensors, xs))
        args, kwargs = [], {}
        for i, n in enumerate(order):
            v, kind = values[n], kinds[n]
            if kind == inspect.Parameter.VAR_POSITIONAL:
                args.extend(v)
            elif kind == inspect.Parameter.VAR_KEYWORD:
                kwargs.update(v)
            elif kind == inspect.Parameter.POSITIONAL_ONLY or i < star:  # before *args: positional
                args.append(v)
            else:
                kwargs[n] = v
        return first_output(cls.forward(self, *args, **kwargs))

    src = f"def forward(self, {', '.join(tensors)}):\n    return _body(self, {', '.join(tensors)})\n"
    scope: dict[str, Any] = {"_body": body}
    exec(compile(src, f"<from_torch: {cls.__qualname__}.forward>", "exec"), scope)  # noqa: S102
    return type(cls.__name__, (cls,), {"forward": scope["forward"], "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__})


_OWN_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, fx) if getattr(m, "__file__", None))
_RPN2C_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _user_frame(err: BaseException) -> traceback.FrameSummary | None:
    """The innermost traceback frame in the traced model's code (not torch's, not rpn2c's, not a wrapper)."""
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if not f.filename.startswith(_OWN_DIRS) and not f.filename.startswith(_RPN2C_DIR)
              and not f.filename.startswith("<")]
    return frames[-1] if frames else None


def _located(err: Exception, module: nn.Module, cls: type, path: str, tracer: ExampleTracer) -> TorchImportError:
    """``err`` (raised while tracing) as a TorchImportError naming the innermost module being traced and the line
    of library/user code that raised it."""
    stack = list(getattr(tracer, "module_stack", {}).items())
    inner, inner_cls = path, f"{cls.__module__}.{cls.__qualname__}"
    for local, (_, owner) in reversed(stack):
        if local:
            inner = f"{path}.{local}" if path else local
            inner_cls = f"{owner.__module__}.{owner.__qualname__}" if isinstance(owner, type) else str(owner)
            break
    why = str(err).splitlines()[0] if str(err) else type(err).__name__
    frame = _user_frame(err)
    at = f" at {frame.filename}:{frame.lineno} ({frame.line})" if frame else ""
    if isinstance(err, DataDependentBranch):
        message = f"{why}{at}; only control flow on sizes, ranks and dtypes converts (it follows the example)"
    else:
        message = (f"tracing its forward failed{at}: {type(err).__name__}: {why}; a forward converts when its Python "
                   "control flow reads only sizes, ranks and dtypes of traced tensors")
    e = TorchImportError(inner, inner_cls, None, message)
    if frame is not None:
        SpecTypeError.__init__(e, [Diagnostic(ERROR_CODE, e.diagnostics[0].message,
                                              Span(frame.filename, frame.lineno or 0, 1, frame.lineno or 0, 1))])
    e.library_file, e.library_line = (frame.filename, frame.lineno) if frame else (None, None)
    return e
