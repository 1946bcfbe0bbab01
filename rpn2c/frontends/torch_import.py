"""``rpn2c.from_torch``: a torch module -> an equivalent RPN 2 spec (readable text + weights in rpn2c's naming).

    spec = rpn2c.from_torch(module, example_inputs)        # module: a supported layer, a stack, or a model
    model = spec.compile()                                 # = rpn2c.compile(spec.text) + .to(dtype) + weights + eval
    model(*example_inputs) == module(*example_inputs)      # primary output (RNN: output, MHA: attn_output)

How it works:

1. The module runs once, in eval mode and without gradients, on the example inputs with a forward hook on every
   submodule recording its positional/keyword inputs and its output (shapes and dtypes). That call is the only
   user code executed; training flags are restored afterwards.
2. The module tree is walked structurally: ``nn.Sequential`` containers (not subclasses with their own forward) are
   flattened in order; every other module needs a converter, looked up by exact class (or a base class whose
   ``forward`` it does not override). Built-in converters cover the torch layers listed in docs/unification.md;
   :func:`register_converter` adds more. A module with no converter whose class defines its own ``forward`` (a
   whole model, a residual block) is traced with torch.fx and converted node by node (``fx_import``). Anything
   else, or an option a converter cannot represent exactly, raises :class:`TorchImportError` (a
   :class:`rpn2c.SpecTypeError`, code E0390) naming the module path, class and option.
3. Each converter emits spec statements through a :class:`Context` and links every compiled parameter or buffer to
   the torch tensor it comes from (:class:`Link`: a row slice, a transpose, a reshape).

The compiled model's inputs are the module's tensor arguments in its ``forward`` signature order (tuples such as
LSTM's ``(h0, c0)`` flattened); non-tensor arguments (``need_weights``, ``is_causal``) are options baked into the
spec. :attr:`TorchSpec.input_names` lists them.
"""

from __future__ import annotations

import inspect
import keyword
import re
from collections import defaultdict, deque
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from rpn2c.frontends.kit import (  # noqa: F401  (re-exported: the importer's public names)
    ERROR_CODE, LENGTH_SYMBOLS, RESERVED, Context, Link, RecordedCall, SpecBuilder, Stacked, TorchImportError,
    TorchSpec, Value, _GRID_CTOR, _Input, class_name, convert_module, find_converter, library_of, lit,
    register_converter,
)
from rpn2c.frontends.sharing import share_weights


def _record(module: nn.Module, args: tuple, kwargs: dict) -> tuple[dict[int, deque], Any]:
    """Run ``module`` once (eval, no grad) with hooks recording each submodule's calls."""
    calls: dict[int, deque] = defaultdict(deque)
    handles = []

    def hook(mod, a, k, out):
        calls[id(mod)].append(RecordedCall(tuple(a), dict(k), out))

    for m in module.modules():
        handles.append(m.register_forward_hook(hook, with_kwargs=True))
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with torch.no_grad():
            out = module(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
        for m, mode in modes:
            m.training = mode
    return calls, out


_INPUT_RENAMES = {"input": "x", "hx": "h0", "src": "src", "x": "x"}


def _root_arguments(b: SpecBuilder, module: nn.Module, args: tuple, kwargs: dict) -> tuple[list, dict]:
    """The root call's arguments in signature order; tensors become undecided model inputs."""
    try:
        sig = inspect.signature(module.forward)
        bound = sig.bind(*args, **kwargs)
        ordered = list(bound.arguments.items())
        positional = [n for n, p in sig.parameters.items()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        ordered = [(f"x{i}" if i else "x", a) for i, a in enumerate(args)] + list(kwargs.items())
        positional = [n for n, _ in ordered[:len(args)]]
    pos_args, kw = [], {}
    for pname, value in ordered:
        conv = _to_value(b, pname, value)
        if pname in positional and len(pos_args) == positional.index(pname):
            pos_args.append(conv)
        else:
            kw[pname] = conv
    return pos_args, kw


def _to_value(b: SpecBuilder, pname: str, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        name = b.fresh(_INPUT_RENAMES.get(pname, pname), "x")
        inp = _Input(name, value)
        v = Value(name, None, tuple(value.shape), dtype=value.dtype, input=inp)
        b.inputs.append(inp)
        b.input_values.append(v)
        return v
    if isinstance(value, (tuple, list)) and value and all(isinstance(t, torch.Tensor) for t in value):
        names = {"hx": ["h0", "c0"]}.get(pname, [f"{pname}{i}" for i in range(len(value))])
        return tuple(_to_value(b, n, t) for n, t in zip(names, value))
    return value


def from_torch(module: nn.Module, example_inputs: Any = (), example_kwargs: Mapping[str, Any] | None = None, *,
               name: str | None = None) -> TorchSpec:
    """An RPN 2 spec equivalent to ``module`` on inputs shaped like ``example_inputs`` (a tensor or a tuple of
    positional arguments; keyword arguments in ``example_kwargs``).

    The compiled spec takes the module's tensor arguments in signature order and returns its primary output;
    spatial sizes are fixed from the example, batch and sequence lengths stay symbolic where the spec allows it.
    Raises :class:`TorchImportError` for modules or options with no exact RPN 2 form.
    """
    from rpn2c.frontends import converters  # noqa: F401  (registers the built-in converters)
    from rpn2c.frontends.fx_import import convert_traced

    if not isinstance(module, nn.Module):
        raise TypeError(f"from_torch needs an nn.Module, got {type(module).__name__}")
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    kwargs = dict(example_kwargs or {})
    calls, _ = _record(module, args, kwargs)
    b = SpecBuilder(module, calls, convert_traced)
    pos, kw = _root_arguments(b, module, args, kwargs)
    out = convert_module(b, module, "", pos, kw, "")
    if out.input is not None:
        raise TorchImportError("", class_name(module), None, "the module computes nothing (its output is its input)")
    unused = [v.name for v in b.input_values if v.uses == 0]
    if unused:
        raise TorchImportError("", class_name(module), None, f"inputs {unused} are not used by the converted spec")
    if out.time_major:
        out = Context(b, module, "", [], {}, None, "").op(
            "time_major", [out], comment="return time-first [T, B, F], as the torch module does",
            name=b.fresh("out", "out"), shape=out.shape, time_major=True)
    model_name = re.sub(r"\W", "_", name or type(module).__name__.lower())
    if not model_name or model_name[0].isdigit() or model_name in RESERVED or keyword.iskeyword(model_name):
        model_name = "m_" + model_name
    share_weights(b)
    text = _render(b, module, model_name, out)
    desc = {"RNN": "output", "GRU": "output", "LSTM": "output", "MultiheadAttention": "attn_output"}
    return TorchSpec(text, b.tensors, [i.name for i in b.inputs], b.links, b.source_shapes,
                     desc.get(type(module).__name__, "the output"))


def _default_type(v: Value, module: nn.Module) -> None:
    nd, shape = len(v.shape), v.shape
    ctx = Context(None, module, "", [], {}, None, "")
    if nd == 2:
        ctx.declare(v, "vector", f"vector[B, {shape[1]}]")
    elif nd == 3:
        ctx.declare(v, "items", f"sequence[B, {{items}}, {shape[2]}]", item_axis=1, item_symbol="T")
    elif nd in (4, 5):
        ctx.declare(v, "grid", f"{_GRID_CTOR[nd - 2]}[B, {', '.join(map(str, shape[1:]))}]")
    else:
        raise TorchImportError("", class_name(module), None, f"input '{v.name}' of shape {list(shape)}")


def _render(b: SpecBuilder, module: nn.Module, model_name: str, out: Value) -> str:
    n_params = sum(p.numel() for p in module.parameters())
    lines = [
        f"# Generated by rpn2c.from_torch from {class_name(module)} ({n_params:,} parameters).",
        "# Every layer is an RPN 2 head g(X) = ⟨κ_ξ(X), ψ(w)⟩ + π(X): ξ = data interdependence (grid patches,",
        "# chains, graphs, attention), κ = expansion/compression, ψ = parameter reconciliation, π = remainder.",
        "# The comment above each statement names the torch module it replaces and the function in each slot.",
        f"# Inputs, in the torch module's argument order: {', '.join(i.name for i in b.inputs)}.",
        *[f"# Note: {n}" for n in b.notes],
        f"model {model_name} {{",
    ]
    for inp, value in zip(b.inputs, b.input_values):
        if inp.type_text is None:  # only elementwise modules saw it: type it by its rank
            _default_type(value, module)
        text = inp.type_text
        if "{items}" in text:
            axis, sym = next(iter(inp.item_dims.items()))
            text = text.replace("{items}", str(inp.example.shape[axis]) if sym is None else sym)
        lines.append(f"  input {inp.name}: {text}")
    for stmt in b.stmts:
        lines += stmt.render()
    lines += [f"  return {out.name}", "}", ""]
    return "\n".join(lines)
