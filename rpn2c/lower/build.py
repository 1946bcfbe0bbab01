"""IR graph -> ``torch.nn.Module``.

Each node becomes a registered sub-module at its spec path (``conv1``, ``enc.attn`` ...), so parameters get
readable names (``conv1.psi.weight``), ``train()``/``eval()`` reach everything and ``state_dict`` saves it all.
"""

from __future__ import annotations

import torch
from torch import nn

from rpn2c.ir.graph import Graph, Node
from rpn2c.ir.types import TensorType
from rpn2c.lower.heads import LayerModule
from rpn2c.lower.recurrent import RecurrentModule


class _Scope(nn.Module):
    """A namespace for the nodes of an inlined block (``enc.attn`` lives at ``model.enc.attn``)."""


class CompiledModel(nn.Module):
    """A compiled RPN 2 spec. ``forward`` takes the model inputs in declaration order (or by name)."""

    def __init__(self, graph: Graph, reference: bool = False):
        super().__init__()
        self.graph = graph
        self.reference = reference
        self.input_names = list(graph.inputs)
        self.input_types = {i: graph.node(i).type for i in graph.inputs}
        self._steps: list[tuple[str, str, dict[str, str]]] = []
        for node in graph.nodes():
            if node.kind == "input":
                continue
            preds = graph.preds(node.id)
            module = self._build(node, preds)
            _set_path(self, node.id, module)
            self._steps.append((node.id, node.kind, preds))
        self.outputs = list(graph.outputs)
        self.content_hash = graph.content_hash()

    def _build(self, node: Node, preds: dict[str, str]) -> nn.Module:
        g = self.graph
        if node.kind == "layer":
            x = g.node(preds["x"]).type
            ctx = g.node(preds["context"]).type if "context" in preds else None
            aux = {src: g.node(src).type for role, src in preds.items() if role.startswith("aux:")}
            return LayerModule(node.layer, node.trace["heads"], x, ctx, aux, node.type, node.plan, self.reference)
        if node.kind == "recurrent":
            x = g.node(preds["x"]).type
            return RecurrentModule(node.layer, x.features, node.trace["recurrent"], self.reference)
        args = [g.node(preds[f"arg{i}"]).type for i in range(len(preds))]
        comp = node.op.component
        return comp.build(args) if node.op.component.family == "op" else comp.build(args[0])

    def forward(self, *args: torch.Tensor, **kwargs: torch.Tensor):
        env = self._bind(args, kwargs)
        for nid, kind, preds in self._steps:
            module = _get_path(self, nid)
            if kind == "layer":
                aux = {role[4:]: env[src] for role, src in preds.items() if role.startswith("aux:")}
                env[nid] = module(env[preds["x"]], env.get(preds.get("context", "")), aux)
            elif kind == "recurrent":
                states = {role[4:]: env[src] for role, src in preds.items() if role.startswith("aux:")}
                env[nid] = module(env[preds["x"]], **states)
            else:
                env[nid] = module(*(env[preds[f"arg{i}"]] for i in range(len(preds))))
        outs = [self._unbatch(o, env[o]) for o in self.outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _bind(self, args, kwargs) -> dict[str, torch.Tensor]:
        names = self.input_names
        if len(args) > len(names):
            raise TypeError(f"{self.graph.name} takes {len(names)} inputs ({', '.join(names)}), got {len(args)}")
        env = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"{self.graph.name} has no input '{k}' (inputs: {', '.join(names)})")
            env[k] = v
        missing = [n for n in names if n not in env]
        if missing:
            raise TypeError(f"{self.graph.name} is missing inputs: {', '.join(missing)}")
        for name in names:
            env[name] = _check_input(name, env[name], self.input_types[name])
        return env

    def _unbatch(self, nid: str, value: torch.Tensor) -> torch.Tensor:
        t = self.graph.node(nid).type
        if t is not None and t.time_major:
            return value.transpose(0, 1)
        return value.squeeze(0) if t is not None and not t.batched else value

    def extra_repr(self) -> str:
        return f"model={self.graph.name!r}, reference={self.reference}, hash={self.content_hash[:12]}"


def _check_input(name: str, value: torch.Tensor, t: TensorType) -> torch.Tensor:
    """Validate a runtime input against its declared type (known dims must match); add an implicit batch axis."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"input '{name}' must be a tensor, got {type(value).__name__}")
    shape = t.shape if t.batched else t.shape[1:]
    if t.time_major:
        shape = (shape[1], shape[0], *shape[2:])
    if value.dim() != len(shape):
        raise ValueError(f"input '{name}' must be {t} ({len(shape)} dims), got shape {tuple(value.shape)}")
    for i, (want, have) in enumerate(zip(shape, value.shape)):
        if isinstance(want, int) and want != have:
            raise ValueError(f"input '{name}' must be {t}: dimension {i} is {have}, expected {want}")
    if t.time_major:
        return value.transpose(0, 1)
    return value if t.batched else value.unsqueeze(0)


def _set_path(root: nn.Module, path: str, module: nn.Module) -> None:
    parts = path.split(".")
    cur = root
    for p in parts[:-1]:
        if not hasattr(cur, p) or not isinstance(getattr(cur, p), nn.Module):
            cur.add_module(p, _Scope())
        cur = getattr(cur, p)
    cur.add_module(parts[-1], module)


def _get_path(root: nn.Module, path: str) -> nn.Module:
    cur = root
    for p in path.split("."):
        cur = getattr(cur, p)
    return cur
