"""IR graph -> ``torch.nn.Module``.

Each node becomes a registered sub-module at its spec path (``conv1``, ``enc.attn`` ...), so parameters get
readable names (``conv1.psi.weight``), ``train()``/``eval()`` reach everything and ``state_dict`` saves it all.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from rpn2c.errors import InputError
from rpn2c.ir.graph import Graph, Node
from rpn2c.ir.types import TensorType
from rpn2c.lower.heads import LayerModule
from rpn2c.lower.oracle import ReferenceLayer
from rpn2c.lower.recurrent import RecurrentModule


class _Scope(nn.Module):
    """A namespace for the nodes of an inlined block (``enc.attn`` lives at ``model.enc.attn``)."""


class CompiledModel(nn.Module):
    """A compiled RPN 2 spec. ``forward`` takes the model inputs in declaration order (or by name).

    ``forward`` reads only plain Python data precomputed here (never ``self.graph``), so ``torch.compile``
    traces it as one graph.
    """

    def __init__(self, graph: Graph, reference: bool = False):
        super().__init__()
        self.graph = graph
        self.reference = reference
        if not reference:
            _unoptimised_terms(graph)
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
        self._name = graph.name
        self._shared = any(n.trace.get("xi_share") for n in graph.nodes() if n.kind == "layer") and not reference
        self._input_checks = {i: _InputCheck.of(t) for i, t in self.input_types.items()}
        # per output: (swap the first two axes back, drop the implicit sample axis)
        self._unbatch_flags = [_unbatch_flags(graph.node(o).type) for o in self.outputs]
        self.emit()

    def emit(self, inline: bool = True) -> None:
        """Generate the straight-line program (``self.program_source`` shows it). ``inline=False`` calls every
        layer module instead of inlining its torch calls, so hooks registered on layer modules (FSDP's
        parameter gathering, user forward hooks) run."""
        from rpn2c.lower.emit import emit

        self._inline = inline
        self._program, self.program_source = emit(self, self.graph, inline=inline)

    def _build(self, node: Node, preds: dict[str, str]) -> nn.Module:
        g = self.graph
        if node.kind == "layer":
            x = g.node(preds["x"]).type
            ctx = g.node(preds["context"]).type if "context" in preds else None
            aux = {src: g.node(src).type for role, src in preds.items() if role.startswith("aux:")}
            if self.reference:  # the oracle: built on its own, no rewritten term
                return ReferenceLayer(node.layer, node.trace["heads"], x, ctx, aux, node.type)
            return LayerModule(node.layer, node.trace["heads"], x, ctx, aux, node.type, node, preds)
        if node.kind == "recurrent":
            x = g.node(preds["x"]).type
            # the rewritten term's op: the fused kernel, a parallel scan, a time loop; ``recur`` (no rule) and the
            # reference lowering run the paper's form
            op = node.terms[1].op if node.terms and not self.reference else "recur"
            return RecurrentModule(node.layer, x.features, node.trace["recurrent"], op == "recur",
                                   fused=op == "rnn_fused", scan=op == "parallel_scan")
        args = [g.node(preds[f"arg{i}"]).type for i in range(len(preds))]
        comp = node.op.component
        return comp.build(args) if node.op.component.family == "op" else comp.build(args[0])

    def forward(self, *args: torch.Tensor, **kwargs: torch.Tensor):
        env = self._bind(args, kwargs)
        outs = self._program(self, *(env[n] for n in self.input_names))
        if len(self.outputs) == 1:
            return _unbatch(outs, *self._unbatch_flags[0])
        return tuple(_unbatch(o, *flags) for o, flags in zip(outs, self._unbatch_flags))

    def _bind(self, args, kwargs) -> dict[str, torch.Tensor]:
        names = self.input_names
        if len(args) > len(names):
            raise TypeError(f"{self._name} takes {len(names)} inputs ({', '.join(names)}), got {len(args)}")
        env = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"{self._name} has no input '{k}' (inputs: {', '.join(names)})")
            env[k] = v
        missing = [n for n in names if n not in env]
        if missing:
            raise TypeError(f"{self._name} is missing inputs: {', '.join(missing)}")
        sizes: dict[str, tuple[int, str]] = {}  # a symbol's size, from the first input that has it
        for name in names:
            check = self._input_checks[name]
            value = check(name, env[name])
            check.agree(name, env[name], sizes)  # on the input as given, whose axes the symbols name
            env[name] = value
        return env

    def extra_repr(self) -> str:
        return f"model={self.graph.name!r}, reference={self.reference}, hash={self.content_hash[:12]}"

    def _repr_svg_(self) -> str:
        """Jupyter's picture of the compiled graph, with the kernels the optimiser chose (as ``rpn2c graph``)."""
        return self.graph._repr_svg_()


class _InputCheck(NamedTuple):
    """A declared input type as plain data: the runtime shape (``None`` = symbolic dim) and boundary flags."""

    text: str
    shape: tuple[int | None, ...]
    batched: bool
    time_major: bool
    symbols: tuple[str | None, ...] = ()  # the symbol of each runtime dimension (None: a fixed size)

    @classmethod
    def of(cls, t: TensorType) -> "_InputCheck":
        shape = t.shape if t.batched else t.shape[1:]
        if t.time_major:
            shape = (shape[1], shape[0], *shape[2:])
        return cls(str(t), tuple(d if isinstance(d, int) else None for d in shape), t.batched, t.time_major,
                   tuple(d if isinstance(d, str) else None for d in shape))

    def agree(self, name: str, value: torch.Tensor, sizes: dict[str, tuple[int, str]]) -> None:
        """Every input gives a symbol one size (``B`` of a mask is the batch of the features it masks); a traced
        or exported graph leaves this to its own shape guards."""
        if torch.compiler.is_compiling():
            return
        for i, (symbol, have) in enumerate(zip(self.symbols, value.shape)):
            if symbol is None:
                continue
            want, other = sizes.setdefault(symbol, (have, name))
            if want != have:
                raise InputError(f"input '{name}' must be {self.text}: dimension {i} ({symbol}) is {have}, but "
                                 f"input '{other}' has {symbol} = {want}")

    def __call__(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """Validate a runtime input (known dims must match); add an implicit batch axis."""
        if not isinstance(value, torch.Tensor):
            raise InputError(f"input '{name}' must be a tensor, got {type(value).__name__}")
        if value.dim() != len(self.shape):
            raise InputError(f"input '{name}' must be {self.text} ({len(self.shape)} dims), "
                             f"got shape {tuple(value.shape)}")
        for i, (want, have) in enumerate(zip(self.shape, value.shape)):
            if want is not None and want != have:
                raise InputError(f"input '{name}' must be {self.text}: dimension {i} is {have}, expected {want}")
        if self.time_major:
            return value.transpose(0, 1)
        return value if self.batched else value.unsqueeze(0)


def _unbatch_flags(t: TensorType | None) -> tuple[bool, bool]:
    """(time_major, squeeze) for an output of type ``t``: ``time_major`` outputs swap axes 0 and 1 back,
    unbatched ones drop the implicit sample axis."""
    if t is None:
        return False, False
    return t.time_major, not t.time_major and not t.batched


def _unbatch(value: torch.Tensor, time_major: bool, squeeze: bool) -> torch.Tensor:
    """An internal (sample-first) output at the model boundary: ``[B, T, ...] -> [T, B, ...]`` or ``[1, ...] -> [...]``."""
    if time_major:
        return value.transpose(0, 1)
    return value.squeeze(0) if squeeze else value


def _unoptimised_terms(graph: Graph) -> None:
    """A graph that never went through the optimiser runs its terms as built: no rule, the paper's forms."""
    missing = [n for n in graph.nodes() if n.kind in ("layer", "recurrent") and not getattr(n, "terms", None)]
    if missing:
        from rpn2c.ir.terms import build_terms

        terms = build_terms(graph)
        for n in missing:
            n.terms = (terms[n.id], terms[n.id])


def _set_path(root: nn.Module, path: str, module: nn.Module) -> None:
    parts = path.split(".")
    cur = root
    for p in parts[:-1]:
        if not hasattr(cur, p) or not isinstance(getattr(cur, p), nn.Module):
            cur.add_module(p, _Scope())
        cur = getattr(cur, p)
    cur.add_module(parts[-1], module)
