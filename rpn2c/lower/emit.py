"""Straight-line emission: a compiled model's dataflow as one generated function (a ``torch.fx`` graph).

The interpreter in ``CompiledModel`` walked its node list, looked each module up by path and dispatched through
``LayerModule.forward`` on every call. Here the walk happens once: each IR node becomes fx nodes, and a layer
whose rewritten term (``node.terms``, see ``rpn2c/ir/terms.py``) is a kernel op on the layer input, under its
processing, is emitted as that op's torch call on the layer's own parameters (``get_attr("c1.psi.weight")``),
so ``state_dict`` names do not change (the table ``_KERNELS``):

- ``conv(x)`` (identity κ and ψ, zero padding, full kernel box): ``conv{1,2,3}d`` with the kernel a reshape of ψ
  and the bias in the call;
- ``linear(expand[identity](x))``: ``F.linear``;
- ``pool(x)`` (a max compression with no padding): ``max_pool{1,2,3}d``;
- ``process`` terms of activations: the activation function itself.

Everything else is a call of the node's module, exactly what the interpreter did; the emitted code therefore
computes the same function, which the differential tests check on every program. Inlined layers bypass their
module's ``__call__`` and so its hooks: ``inline=False`` keeps every layer a module call (FSDP needs that).
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import fx
from torch import nn

from rpn2c.components.processing import Apply
from rpn2c.lower.heads import conv_padding

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_MAXPOOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}


def emit(model: nn.Module, graph, inline: bool = True) -> tuple[Callable, str]:
    """The generated program of ``model`` (a ``CompiledModel``) and its source: ``program(model, *inputs)``
    takes the bound, validated inputs and returns the outputs before un-batching. It reads every parameter and
    sub-module from ``model`` at call time, so moving, converting, loading or sharding the model needs nothing
    else."""
    g = fx.Graph()
    env = {name: g.placeholder(name) for name in model.input_names}
    memo = g.call_function(dict) if model._shared else None
    for nid, kind, preds in model._steps:
        module = model.get_submodule(nid)
        if kind == "layer":
            x = env[preds["x"]]
            aux = {role[4:]: env[src] for role, src in preds.items() if role.startswith("aux:")}
            plain = inline and "context" not in preds and not aux
            y = _emit_layer(g, nid, module, graph.node(nid), x) if plain else None
            if y is None:
                if memo is not None:
                    aux["_memo"] = memo
                ctx = env[preds["context"]] if "context" in preds else None
                y = g.call_module(nid, (x, ctx, aux))
        elif kind == "recurrent":
            states = {role[4:]: env[src] for role, src in preds.items() if role.startswith("aux:")}
            y = g.call_module(nid, (env[preds["x"]],), states)
        else:
            y = g.call_module(nid, tuple(env[preds[f"arg{i}"]] for i in range(len(preds))))
        env[nid] = y
    outs = [env[o] for o in model.outputs]
    g.output(outs[0] if len(outs) == 1 else tuple(outs))
    code = g.python_code(root_module="self")
    scope = dict(code.globals)
    exec(compile(code.src, f"<rpn2c program {model._name}>", "exec"), scope)  # noqa: S102 - code we generated
    return scope["forward"], code.src


def _kernel_term(node):
    """The kernel op a layer's rewritten term applies to the layer input, under the layer's processing; None
    when the term is anything else (several heads or channels, a remainder, pre-processing, head processing)."""
    term = node.terms[1] if node.terms else None
    while term is not None and term.op == "process" and term.info.get("head") is None:
        term = term.args[0]
    if term is None or term.op not in _KERNELS:
        return None
    arg = term.args[0]
    if term.op == "linear" and arg.op == "expand" and arg.info.get("what") == "identity":
        arg = arg.args[0]
    return term if arg.op == "input" else None


def _emit_linear(g, nid, module, h, t, x):
    if h.psi.name != "identity":
        return None
    bias = g.get_attr(f"{nid}.bias") if module.bias is not None else None
    return g.call_function(F.linear, (x, g.get_attr(f"{nid}.psi.weight"), bias))


def _emit_layer(g: fx.Graph, nid: str, module, node, x):
    if module.reference:  # the oracle never runs a rule's kernel: every layer stays its literal module
        return None
    term = _kernel_term(node)
    if term is None or getattr(module, "head_modules", 0) is not None:
        return None
    y = _KERNELS[term.op](g, nid, module, node.layer.heads[0], node.trace["heads"][0], x)
    if y is None:
        return None
    for i, post in enumerate(module.post):
        y = g.call_function(post.fn, (y,)) if isinstance(post, Apply) else g.call_module(f"{nid}.post.{i}", (y,))
    return y


def _emit_conv(g, nid, module, h, t, x):
    geo = t.geometry
    padding = conv_padding(h.kappa.name, geo)
    if padding is None or h.psi.name != "identity" or geo.taps is not None or h.bias == "untied":
        return None
    n, per_group = module.psi.weight.shape  # [n, (C/g)·p]
    weight = g.call_method("reshape", (g.get_attr(f"{nid}.psi.weight"), (n, per_group // geo.patch_size,
                                                                           *geo.kernel)))
    bias = g.get_attr(f"{nid}.bias") if module.bias is not None else None
    return g.call_function(_CONV[geo.rank], (x, weight, bias),
                           {"stride": tuple(geo.stride), "padding": padding, "dilation": tuple(geo.dilation),
                            "groups": h.groups})


def _emit_pool(g, nid, module, h, t, x):
    pool = module.kappa
    geo = getattr(pool, "geo", None)
    if geo is None or not getattr(pool, "native", False) or pool.metric != "max" or any(geo.pad_before) \
            or any(geo.pad_after):
        return None
    return g.call_function(_MAXPOOL[geo.rank], (x, tuple(geo.kernel), tuple(geo.stride), 0, tuple(geo.dilation)))



_KERNELS = {"conv": _emit_conv, "linear": _emit_linear, "pool": _emit_pool}  # kernel op -> its torch call
