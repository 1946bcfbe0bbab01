"""IR graph -> ``torch.nn.Module``.

Each node becomes a registered sub-module at its spec path (``conv1``, ``enc.attn`` ...), so parameters get
readable names (``conv1.psi.weight``), ``train()``/``eval()`` reach everything and ``state_dict`` saves it all. A
path segment that cannot name a torch sub-module (a value named ``train``, ``to`` or ``class``) takes a free name
instead (``train_``: ``rpn2c.ir.names.module_paths``); :func:`submodule` finds a node's module by its id.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from rpn2c.errors import InputError
from rpn2c.ir.estimate import BYTES_PER_ELEMENT, run_time_check
from rpn2c.ir.graph import Graph, Node
from rpn2c.ir.names import module_paths
from rpn2c.ir.types import TensorType
from rpn2c.lower.heads import LayerModule


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
        self._steps: list[tuple[str, str, str, dict[str, str]]] = []  # (node id, module path, kind, preds)
        paths = module_paths(n.id for n in graph.nodes() if n.kind != "input")
        for node in graph.nodes():
            if node.kind == "input":
                continue
            preds = graph.preds(node.id)
            module = self._build(node, preds)
            _set_path(self, paths[node.id], module)
            self._steps.append((node.id, paths[node.id], node.kind, preds))
        # (node, the node it is tied to, the op component that ties its module itself, if it may)
        self._tied = [(n.id, n.tie, n.op.component if n.kind == "op" else None) for n in graph.nodes()
                      if n.tie is not None]
        self._tie_parameters()
        self._bind_tied_psi()
        self.register_load_state_dict_post_hook(lambda module, keys: module._tie_parameters())
        self.outputs = list(graph.outputs)
        self.content_hash = graph.content_hash()
        self._name = graph.name
        self._shared = any(n.trace.get("xi_share") for n in graph.nodes() if n.kind == "layer") and not reference
        self._input_checks = {i: _InputCheck.of(t) for i, t in self.input_types.items()}
        self._limits = getattr(graph, "limits", None)  # the check's budgets, held again with the inputs' sizes
        self._sized: dict[tuple, object] = {}  # symbol sizes -> the refusal they earn (None: within the budgets)
        self._itemsize = _widest_element(self)  # bytes an element of the floating tensors it holds (literal matrices)
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
                from rpn2c.lower.oracle import ReferenceLayer

                return ReferenceLayer(node.layer, node.trace["heads"], x, ctx, aux, node.type)
            return LayerModule(node.layer, node.trace["heads"], x, ctx, aux, node.type, node, preds)
        if node.kind == "recurrent":  # imported here: its module registers torch ops, which few models need
            from rpn2c.lower.program import recurrent_program
            from rpn2c.lower.recurrent import RecurrentModule

            features, trace = g.node(preds["x"]).type.features, node.trace["recurrent"]
            if self.reference:  # the oracle: the literal recurrence on the module's tensors, no rewritten term
                from rpn2c.lower.literal_forms import literal

                return literal(RecurrentModule(node.layer, features, trace))
            # the rewritten term's op runs: the fused kernel, a parallel scan, a time loop, ``recur``'s step loop
            return RecurrentModule(node.layer, features, trace, recurrent_program(node))
        args = [g.node(preds[f"arg{i}"]).type for i in range(len(preds))]
        comp = node.op.component
        module = comp.build(args) if comp.family == "op" else comp.build(args[0])
        if self.reference:  # the oracle: an op module that has a literal form computes by it
            from rpn2c.lower.literal_forms import literal

            return literal(module)
        return module

    def _tie_parameters(self) -> None:
        """``tie = c1``: the tied node's module holds ``c1``'s very parameter and buffer objects at the same paths,
        so both compute with one tensor and their gradients accumulate in it (``parameters()`` lists it once;
        ``state_dict`` names it under both paths, as torch does for tied weights)."""
        for mine, theirs, op in self._tied:
            holder, source = submodule(self, mine), submodule(self, theirs)
            if op is None or not op.tie(holder, source):  # (an op may tie itself: Component.tie)
                share(holder, source)

    def _bind_tied_psi(self) -> None:
        """``psi = tied(src)``: each such ψ reads the source node's weight matrix (components/psi_tied.py);
        ``graph_attention(share_psi = true)`` scores with its head's ψ weight."""
        g = self.graph
        for node in g.nodes():
            if node.kind != "layer":
                continue
            module = submodule(self, node.id)
            for h in node.layer.heads:
                holder = module.heads[h.name] if len(node.layer.heads) > 1 else module
                xi = h.xi.get("xi_instance")
                if xi is not None and getattr(xi.component.hp, "share_psi", False):
                    holder.xi_instance.bind_psi(holder.psi)  # GAT: the scores' W is the head's ψ
                if h.psi.name == "tied":
                    src = g.node(h.psi.component.hp.source.name)
                    src = g.node(src.tie) if src.tie is not None else src
                    owner = submodule(self, src.id)
                    holder.psi.bind(owner.psi if src.kind == "layer" else owner, "weight")

    def _apply(self, fn, recurse=True):
        """Conversions (``.to``, ``.double()``) may replace tensors: the ties are made again afterwards."""
        out = super()._apply(fn, recurse)
        self._tie_parameters()
        self._itemsize = _widest_element(self)
        return out

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
        if (sizes or self.reference) and self._limits is not None:
            widest = max([v.element_size() for v in env.values() if v.is_floating_point()], default=0)
            self._within_budgets({k: v[0] for k, v in sizes.items()}, max(widest, self._itemsize) or BYTES_PER_ELEMENT)
        return env

    def _within_budgets(self, sizes: dict[str, int], itemsize: int) -> None:
        """Refuse, before anything is allocated, inputs whose sizes take the check's memory or step estimates over
        its budgets (a located E0605 / E0604; the reference lowering's literal matrices too, E0606, at ``itemsize``
        bytes an element); the verdict is kept per set of sizes."""
        key = (tuple(sorted(sizes.items())), itemsize)
        if key not in self._sized:
            if len(self._sized) >= 64:
                self._sized.clear()
            self._sized[key] = run_time_check(self.graph, sizes, self._limits, self.reference, itemsize)
        refusal = self._sized[key]
        if refusal is not None:
            raise type(refusal)(refusal.diagnostics, refusal.sources)

    def extra_repr(self) -> str:
        return f"model={self.graph.name!r}, reference={self.reference}, hash={self.content_hash[:12]}"

    def _repr_svg_(self) -> str:
        """Jupyter's picture of the compiled graph, with the kernels the optimiser chose (as ``rpn2c graph``)."""
        return self.graph._repr_svg_()


def _widest_element(model: nn.Module) -> int:
    """Bytes an element of the widest floating dtype among ``model``'s parameters and buffers (0 when it has
    none)."""
    return max((t.element_size() for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()),
               default=0)


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


def submodule(model: CompiledModel, nid: str) -> nn.Module:
    """The module of node ``nid`` (a value's id, ``enc.attn``) in ``model``."""
    path = next((p for n, p, _, _ in model._steps if n == nid), None)
    if path is None:
        raise KeyError(f"model '{model._name}' has no layer or operation '{nid}'")
    return model.get_submodule(path)


def _set_path(root: nn.Module, path: str, module: nn.Module) -> None:
    parts = path.split(".")
    cur = root
    for p in parts[:-1]:
        if not hasattr(cur, p) or not isinstance(getattr(cur, p), nn.Module):
            cur.add_module(p, _Scope())
        cur = getattr(cur, p)
    cur.add_module(parts[-1], module)


def share(holder: nn.Module, source: nn.Module) -> None:
    """Point every parameter and buffer of ``holder`` at ``source``'s, in registration order (the checker made sure
    both hold the same tensors; processing without weights may sit at other positions)."""
    for kind in ("_parameters", "_buffers"):
        mine = [(m, k) for m in holder.modules() for k, t in getattr(m, kind).items() if t is not None]
        theirs = [t for m in source.modules() for t in getattr(m, kind).values() if t is not None]
        if [tuple(getattr(m, kind)[k].shape) for m, k in mine] != [tuple(t.shape) for t in theirs]:
            raise ValueError(f"tied modules hold different tensors: {type(holder).__name__} vs {type(source).__name__}")
        for (m, k), t in zip(mine, theirs):
            getattr(m, kind)[k] = t
