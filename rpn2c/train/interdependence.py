"""The literal interdependence matrices of one layer, as the reference lowering builds them.

For a grid ξ the matrix is the paper's padding-mode ``A ∈ {0,1}^{N × P·p}`` (column q·p + j is one-hot at tap j of
patch q; ``x·A`` is im2col) or aggregation-mode ``A ∈ {0,1}^{N × P}``; for every other ξ it is
``XiModule.matrix(q, c, aux)`` evaluated on the layer's actual input during a forward pass of the reference
model: instance matrices are ``[N', N]`` (row = output item, ``Y = A Z``), attribute matrices ``[M, M']``
(``Y = Z A``). Data-dependent ξ (attention) are shown for one sample of the batch.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch
from torch import nn

from rpn2c.components.xi import aggregation_matrix, padding_matrix
from rpn2c.errors import did_you_mean
from rpn2c.ir.graph import Graph, head_slots
from rpn2c.lower.emitters import own_aux

from .errors import TrainError


@dataclass
class XiMatrix:
    """One picture panel: the matrix of ``slot`` in ``head`` (channel ``channel``) of layer ``layer``."""

    layer: str
    head: str
    slot: str
    channel: int
    component: str
    matrix: torch.Tensor
    rows: str
    cols: str

    @property
    def title(self) -> str:
        where = "" if self.head == "h" else f"{self.head}: "
        ch = f" [channel {self.channel}]" if self.channel else ""
        return f"{where}{self.slot} = {self.component}{ch}"


def layers_with_xi(graph: Graph) -> list[str]:
    """Ids of the layer nodes that have at least one interdependence function (recurrent layers have their
    state-feeding chain)."""
    return [n.id for n in graph.nodes()
            if n.kind == "recurrent" or (n.kind == "layer" and any(h.xi for h in n.layer.heads))]


def check_layer(graph: Graph, name: str) -> None:
    """TrainError unless ``name`` is a layer with an interdependence function (did-you-mean otherwise)."""
    ids = [n.id for n in graph.nodes()]
    with_xi = layers_with_xi(graph)
    listing = ", ".join(with_xi) if with_xi else "none"
    if name not in ids:
        hint = did_you_mean(name, [n.id for n in graph.nodes() if n.kind in ("layer", "recurrent")])
        raise TrainError(f"model '{graph.name}' has no layer '{name}'" + (f"; {hint}" if hint else "")
                         + f" (layers with an interdependence function: {listing})")
    node = graph.node(name)
    if node.kind not in ("layer", "recurrent"):
        raise TrainError(f"'{name}' is {'an' if node.kind[0] in 'aeiou' else 'a'} {node.kind} node of model "
                         f"'{graph.name}', not a head layer (layers with an interdependence function: {listing})")
    if name not in with_xi:
        raise TrainError(f"layer '{name}' of model '{graph.name}' has no interdependence function (every ξ is the "
                         f"identity); layers with one: {listing}")


def layer_module(root: nn.Module, path: str) -> nn.Module:
    """The sub-module of a layer of a compiled model by its spec path (``y.attn``)."""
    from rpn2c.lower.build import submodule

    return submodule(root, path)


@contextlib.contextmanager
def eval_mode(model: nn.Module):
    """``model`` in eval mode inside, its mode restored after: a picture or matrix drawn from a live model is
    deterministic (no dropout draw, running statistics), whatever the caller's mode."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def in_eval_mode(fn):
    """``fn(model, ...)`` run with ``model`` in :func:`eval_mode`."""

    @functools.wraps(fn)
    def run(model: nn.Module, *args, **kwargs):
        with eval_mode(model):
            return fn(model, *args, **kwargs)

    return run


@in_eval_mode
def layer_call(model: nn.Module, module: nn.Module, inputs: dict[str, torch.Tensor]) -> tuple[tuple, object]:
    """(arguments, output) of the layer ``module`` in an eval-mode forward pass of ``model`` on ``inputs``; the
    program calls the layer modules for this pass (an inlined layer would bypass the hooks)."""
    captured: dict = {}
    handles = [module.register_forward_pre_hook(lambda mod, args: captured.setdefault("args", args)),
               module.register_forward_hook(lambda mod, args, out: captured.setdefault("out", out))]
    inline = getattr(model, "_inline", False)
    if inline:
        model.emit(inline=False)
    try:
        model(**inputs)
    finally:
        for handle in handles:
            handle.remove()
        if inline:
            model.emit(inline=True)
    return tuple(captured["args"]), captured["out"]


def _labels(component: str, axis: str) -> tuple[str, str]:
    if axis == "attribute":
        return "input attribute m", "output attribute m'"
    if component.startswith("graph"):
        return "target node i", "source node j"
    if "bilinear" in component or component.startswith("attention"):
        return "query item i", "key item j"
    return "output item t", "input item t'"


@torch.no_grad()
@in_eval_mode
def layer_matrices(model: nn.Module, layer: str, inputs: dict[str, torch.Tensor], *, sample: int = 0) -> list[XiMatrix]:
    """Every ξ matrix of ``layer`` in a reference-lowered ``model`` run on ``inputs`` (sample ``sample`` of the
    batch for data-dependent ones), in eval mode."""
    graph: Graph = model.graph
    check_layer(graph, layer)
    module = layer_module(model, layer)
    args, _ = layer_call(model, module, inputs)
    x, context, aux = (list(args) + [None, None])[:3]
    if graph.node(layer).kind == "recurrent":
        return _recurrent_chains(graph, layer, x)
    aux = aux or {}
    for p in module.pre:
        x = p(x)
    data = context if context is not None else x
    holders = [("h", module)] if not hasattr(module, "heads") else list(module.heads.items())
    out: list[XiMatrix] = []
    for head_name, hd in holders:
        spec, trace = hd.spec, hd.trace
        vec = trace.view == "vector"
        q = x.unsqueeze(1) if vec else x
        z0 = data.unsqueeze(1) if vec else data
        for slot in head_slots(spec):
            use = spec.xi[slot.name]
            comp = use.component
            if comp.kind == "grid":
                spatial = tuple(int(s) for s in data.shape[2:])
                build = padding_matrix if comp.mode == "padding" else aggregation_matrix
                a = build(trace.geometry, spatial, torch.float64, data.device)
                cols = "patch q × tap j (column q·p + j)" if comp.mode == "padding" else "patch q"
                cells = "×".join(map(str, spatial))
                out.append(XiMatrix(layer, head_name, slot.name, 0, str(use), a,
                                    f"input cell n (row-major over {cells})", cols))
                continue
            mod = getattr(hd, slot.name)
            mods = list(mod) if isinstance(mod, nn.ModuleList) else [mod]
            for c, m in enumerate(mods):
                size = slot.size(trace)
                if not isinstance(size, int):  # a symbolic item count: this input's
                    size = z0.shape[-2]
                a = m.matrix(q, z0, own_aux(m, aux), size)  # its inputs by its hyper-parameters' names
                if a.dim() == 3:
                    a = a[min(sample, a.shape[0] - 1)]
                rows, cols = _labels(str(use), m.axis)
                out.append(XiMatrix(layer, head_name, slot.name, c, str(use), a.detach().to(torch.float64), rows, cols))
    return out


def _recurrent_chains(graph: Graph, layer: str, x: torch.Tensor) -> list[XiMatrix]:
    """The chain matrices that feed a recurrent layer its own previous output: ``A[t, t-1] = 1`` (forward),
    ``A[t, t+1] = 1`` (backward direction of a bidirectional layer), over the ``T`` steps of the input."""
    spec = graph.node(layer).layer
    steps = x.shape[1]
    ones = torch.ones(max(steps - 1, 0), dtype=torch.float64, device=x.device)
    out = []
    for direction, offset in (("forward", -1), ("backward", 1))[:spec.directions]:
        out.append(XiMatrix(layer, "h", "state chain", 0, f'chain(direction = "{direction}") feeding the '
                            f"{spec.cell} cell", torch.diag(ones, offset) if steps > 1 else ones.new_zeros(1, 1),
                            "step t", "output row s (h_s fed to step t)"))
    return out
