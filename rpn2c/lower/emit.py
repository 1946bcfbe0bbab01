"""Straight-line emission: a compiled model's dataflow as one generated function (a ``torch.fx`` graph).

Each IR node becomes fx nodes. A layer of the default lowering is its program (``lower/program.py``: the rewritten
term, one emitter call per op), written inline: each step is a call of its emitter on the layer module
(``get_attr("c1")``) and the values of earlier steps, so ``state_dict`` names do not change and the generated code
is exactly the layer's own forward, without the interpretation. Recurrent nodes (whose module runs its one-step
program, ``lower/program.recurrent_program``), operations and the reference lowering's layers are module calls. Inlined layers bypass their module's ``__call__`` and so its hooks:
``inline=False`` keeps every layer a module call (FSDP needs that).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import fx
from torch import nn

from rpn2c.ir.names import PYTHON
from rpn2c.lower.program import arguments


def emit(model: nn.Module, graph, inline: bool = True) -> tuple[Callable, str]:
    """The generated program of ``model`` (a ``CompiledModel``) and its source: ``program(model, *inputs)``
    takes the bound, validated inputs and returns the outputs before un-batching. It reads every parameter and
    sub-module from ``model`` at call time, so moving, converting, loading or sharding the model needs nothing
    else."""
    g = fx.Graph()
    env = {name: g.placeholder(arg) for name, arg in _parameters(model.input_names).items()}
    memo = g.call_function(dict) if model._shared else None
    for nid, path, kind, preds in model._steps:
        module = model.get_submodule(path)
        if kind == "layer":
            aux = {role[4:]: env[src] for role, src in preds.items() if role.startswith("aux:")}
            if memo is not None:
                aux["_memo"] = memo
            ctx = env[preds["context"]] if "context" in preds else None
            if inline and module.program:  # the default lowering's layer: its steps inlined
                y = _emit_program(g, path, module, {preds["x"]: env[preds["x"]], preds.get("context"): ctx}, aux)
            else:
                y = g.call_module(path, (env[preds["x"]], ctx, aux))
        elif kind == "recurrent":
            states = {role[4:]: env[src] for role, src in preds.items() if role.startswith("aux:")}
            y = g.call_module(path, (env[preds["x"]],), states)
        else:
            y = g.call_module(path, tuple(env[preds[f"arg{i}"]] for i in range(len(preds))))
        env[nid] = y
    outs = [env[o] for o in model.outputs]
    g.output(outs[0] if len(outs) == 1 else tuple(outs))
    code = g.python_code(root_module="self")
    scope = dict(code.globals)
    exec(compile(code.src, f"<rpn2c program {model._name}>", "exec"), scope)  # noqa: S102 - code we generated
    return scope["forward"], code.src


def _parameters(names: list[str]) -> dict[str, str]:
    """The generated function's parameter for each input: its name, or for a Python keyword (or ``self``) the name
    with ``_`` appended until it is neither that nor another input's (``lambda`` -> ``lambda_``)."""
    taken, out = set(names), {}
    for name in names:
        arg = name
        if arg in PYTHON:
            arg += "_"
            while arg in PYTHON or arg in taken:
                arg += "_"
            taken.add(arg)
        out[name] = arg
    return out


def _emit_program(g: fx.Graph, path: str, module, inputs: dict, aux: dict):
    layer = g.get_attr(path)
    if module.needs_prologue:
        g.call_method("prologue", (layer,))
    values: list = []
    for step in module.program:
        values.append(g.call_function(step.run, (layer, *arguments(step, values, inputs, aux))))
    return values[-1]
