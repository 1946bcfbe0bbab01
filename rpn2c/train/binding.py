"""Bind a dataset's tensors to a spec's inputs by name and type, and check the spec's output against the task.

* classification / regression: the one feature input (vector, sequence, image, ...) receives the sample tensor;
  its declared per-sample dims must equal the data's (symbolic dims match anything).
* node_classification: the nodes input receives ``x`` (``[N, F]``, or ``[1, N, F]`` when declared with a batch
  axis), the edges input ``edge_index``, an ``edge_weight`` input ones; the train/test masks pick the nodes.
* text with a pretrained table (``meta["embedding"]``, ``--embedding glove:FILE``): the samples are token ids and
  the input receives their rows of the table, ``x[b, t] = E[ids[b, t]]``; the table is data, never a parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

from rpn2c.data import Dataset
from rpn2c.ir.graph import Graph
from rpn2c.ir.types import TensorType

from .errors import BindError


class DimMismatch(BindError):
    """A size the spec declares and the data does not have: dimension ``axis`` of the type of ``value`` (an input's
    name, or ``None`` for the output) is ``want`` in the spec and ``have`` in the data. :meth:`named` says it with
    the model parameter that sets it (found by the command line, which can re-check the spec)."""

    def __init__(self, head: str, dim: str, want: int, have: int, detail: str, value: str | None, axis: int):
        self.head, self.dim, self.want, self.have, self.detail = head, dim, want, have, detail
        self.value, self.axis = value, axis
        if value is None:
            text = f"{head}: the last dimension must be {have} (set the spec's class/output parameter to {have})"
        else:
            text = self._text(f"dimension {dim}", "")
        super().__init__(text)

    def _text(self, dim: str, fix: str) -> str:
        if self.value is None:
            return f"{self.head}: its last dimension {dim} must be {self.have}{fix}"
        return f"{self.head}: {dim} is {self.want} in the spec but {self.have} in the data ({self.detail}){fix}"

    def named(self, param: str, value: int | None, why_not: str | None, trained: bool) -> BindError:
        """The same mismatch naming the model parameter ``param`` that sets the dimension, and the ``--param`` that
        fixes it (``value``; ``why_not``: why the data's size does not check). ``trained``: the model comes from a
        checkpoint, which holds the parameter's value (a new run is needed, not ``--param``)."""
        setting = f"--param {param}={value}" if value is not None else None
        if trained:
            fix = f"; the checkpoint was trained with {param} = {self.want}" + (
                f" (train one with {setting} for this data)" if setting else "")
        elif setting:
            fix = f": set it with {setting}"
        else:
            fix = f"; --param {param}={self.have} does not check: {why_not}" if why_not else ""
        return BindError(self._text(f"'{param}'" if self.value is None else f"dimension '{param}'", fix))


_DIM_NAMES = {"vector": "BF", "tabular": "BF", "sequence": "BTF", "nodes": "BNF", "set": "BNF", "items": "BNF",
              "image": "BCHW", "signal": "BCL", "volume": "BCDHW", "tokens": "BT"}
_FEATURE_KINDS = ("vector", "items", "grid", "tokens")


def _dim_name(t: TensorType, i: int) -> str:
    names = _DIM_NAMES.get(t.role, "")
    return names[i] if i < len(names) and len(names) == len(t.shape) else f"#{i}"


def _shape(dims) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


@dataclass(frozen=True)
class Binding:
    """How one dataset feeds one compiled spec."""

    task: str
    feature_input: str
    edge_input: str | None = None
    weight_input: str | None = None
    batched_nodes: bool = False
    num_classes: int | None = None
    target_dim: int | None = None
    time_major: bool = False  # the input is declared time-major: samples are fed as [T, B, ...]
    dims: dict[str, int] = field(default_factory=dict, compare=False)  # the data's size of each symbolic dim
    embedding: torch.Tensor | None = field(default=None, compare=False, repr=False)  # frozen [V, d] id -> vector
    _tables: dict = field(default_factory=dict, compare=False, repr=False)  # the table on each device used
    mlm: tuple[int, int, float] | None = None  # --objective mlm: (V logits per token, the [MASK] id, mask rate)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """``ids`` looked up in the frozen table (on their device; no gradient reaches the table)."""
        table = self._tables.get(ids.device)
        if table is None:
            table = self._tables[ids.device] = self.embedding.detach().to(ids.device)
        return torch.nn.functional.embedding(ids, table)

    def inputs(self, features: torch.Tensor, edges: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Keyword inputs of the compiled model for a batch of samples (or the whole graph)."""
        if self.task != "node_classification":
            if self.embedding is not None:
                features = self.embed(features)
            return {self.feature_input: features.transpose(0, 1) if self.time_major else features}
        out = {self.feature_input: features.unsqueeze(0) if self.batched_nodes else features}
        out[self.edge_input] = edges
        if self.weight_input is not None:
            out[self.weight_input] = torch.ones(edges.shape[1], dtype=features.dtype, device=features.device)
        return out

    def output(self, y: torch.Tensor) -> torch.Tensor:
        """Model output as ``[n, K]`` logits (``[N, K]`` for a graph) or ``[n, k]`` regression values."""
        if self.task == "node_classification" and self.batched_nodes:
            y = y.squeeze(0)
        return y


def bind(graph: Graph, dataset: Dataset, spec_name: str = "the spec", objective: str = "task",
         mask_rate: float = 0.15, mask_id: int | None = None) -> Binding:
    """The binding of ``dataset`` to the inputs of ``graph``, or a BindError saying which input and dims differ.
    ``objective = "mlm"`` binds token ids to a spec returning one row of logits per token (``rpn2c.train.mlm``)."""
    types = {name: graph.node(name).type for name in graph.inputs}
    out_type = _output_type(graph, spec_name)
    if dataset.task == "node_classification":
        if objective == "mlm":
            raise BindError(f"--objective mlm trains on token ids; dataset '{dataset.name}' is a graph")
        binding = _bind_graph(types, dataset, spec_name)
    else:
        binding = _bind_samples(types, dataset, spec_name)
    if objective == "mlm":
        binding = _bind_mlm(types[binding.feature_input], out_type, graph.outputs[0], dataset, binding, spec_name)
        vocab = binding.mlm[0]
        mask = vocab - 1 if mask_id is None else mask_id
        ids = torch.cat([dataset.train[0].flatten(), dataset.test[0].flatten()])
        if mask >= vocab or (ids.numel() and (int(ids.max()) >= vocab or bool((ids == mask).any()))):
            raise BindError(f"--objective mlm: the spec predicts V = {vocab} ids and [MASK] is id {mask}; dataset "
                            f"'{dataset.name}' holds ids up to {int(ids.max()) if ids.numel() else 0}: the ids must "
                            f"lie in [0, {vocab}) without the [MASK] id (give the embedding and the output one more "
                            f"id, or --mask-id)")
        return replace(binding, mlm=(vocab, mask, mask_rate))
    _check_output(out_type, graph.outputs[0], dataset, binding, spec_name)
    return binding


def _bind_mlm(t: TensorType, out_t: TensorType, out: str, ds: Dataset, b: Binding, spec: str) -> Binding:
    """The masked-LM binding: token ids in, ``sequence[B, T, V]`` logits out (V known), as many items as ids."""
    if t.kind != "tokens":
        raise BindError(f"--objective mlm masks token ids; input '{b.feature_input}' of {spec} is {t}")
    vocab = out_t.shape[-1] if out_t.kind == "items" else None
    if not isinstance(vocab, int) or str(out_t.shape[1]) != str(t.shape[1]):
        raise BindError(f"output '{out}' of {spec} is {out_t}; --objective mlm needs one row of logits per token, "
                        f"sequence[{t.shape[0]}, {t.shape[1]}, V] with the vocabulary V (the [MASK] id included) "
                        f"a number")
    return replace(b, mlm=(vocab, vocab - 1, 0.15))


def _describe(types: dict[str, TensorType]) -> str:
    return ", ".join(f"{n}: {t}" for n, t in types.items())


def feature_input(graph: Graph, spec: str = "the spec") -> tuple[str, TensorType]:
    """The one batched feature input of a spec (for user files fed to ``predict``), or BindError."""
    types = {name: graph.node(name).type for name in graph.inputs}
    feats = [n for n, t in types.items() if t.kind in _FEATURE_KINDS and t.batched]
    if len(feats) != 1 or len(types) != 1:
        raise BindError(f"{spec} has inputs {_describe(types)}; a user file can only feed a spec with one batched "
                        "feature input (use --data for graphs)")
    return feats[0], types[feats[0]]


def samples_from_array(array: torch.Tensor, graph: Graph, source: str, spec: str = "the spec") -> torch.Tensor:
    """Shape a user array as a batch for the spec's feature input: ``[n, *sample]`` as is, one sample
    ``[*sample]`` gets a batch axis, and flat rows ``[n, prod(sample)]`` (CSV) are reshaped when the sample's
    dims are all known."""
    name, t = feature_input(graph, spec)
    declared = tuple(t.shape[1:])
    if array.dim() == len(declared):
        array = array.unsqueeze(0)
    elif (array.dim() == 2 and len(declared) > 1 and all(isinstance(d, int) for d in declared)
          and array.shape[1] == math.prod(declared)):
        array = array.reshape(array.shape[0], *declared)
    _match(name, t, declared, tuple(array.shape[1:]), source,
           f"an array of shape {_shape(tuple(array.shape))}", spec)
    return _token_ids(array, graph, name, source) if t.kind == "tokens" else array


def _token_ids(array: torch.Tensor, graph: Graph, name: str, source: str) -> torch.Tensor:
    """A user array read as numbers, as the int64 ids a tokens input takes (whole numbers below the vocabulary)."""
    from rpn2c.components.sequence import token_bound

    bound = token_bound(graph, name)
    if array.is_floating_point() and not bool((array == array.round()).all()):
        raise BindError(f"{source}: input '{name}' takes integer token ids, the array holds fractions")
    ids = array.long()
    if ids.numel() and (int(ids.min()) < 0 or (bound is not None and int(ids.max()) >= bound)):
        raise BindError(f"{source}: input '{name}' takes token ids in [0, {bound}), the array holds "
                        f"{int(ids.min())} .. {int(ids.max())}")
    return ids


def _bind_samples(types: dict[str, TensorType], ds: Dataset, spec: str) -> Binding:
    feats = [n for n, t in types.items() if t.kind in _FEATURE_KINDS]
    others = [n for n in types if n not in feats]
    sample = tuple(ds.train[0].shape[1:])
    if others:
        extra = _describe({n: types[n] for n in others})
        raise BindError(f"{spec} has input {extra} that dataset '{ds.name}' cannot provide: it gives one "
                        f"{ds.input_spec} tensor per sample")
    if len(feats) != 1:
        raise BindError(f"{spec} has {len(feats)} feature inputs ({_describe(types)}); dataset '{ds.name}' "
                        f"({ds.task}) binds exactly one, of type {ds.input_spec}")
    name = feats[0]
    t = types[name]
    if not t.batched:
        raise BindError(f"input '{name}' of {spec} is {t}, a single graph without a batch axis; dataset "
                        f"'{ds.name}' gives a batch of samples of type {ds.input_spec} (declare it with B first)")
    table = ds.meta.get("embedding")
    if table is not None:
        if t.kind == "tokens":
            raise BindError(f"input '{name}' of {spec} is {t}, token ids, but the data comes with a pretrained "
                            f"embedding ({ds.input_spec}): drop --embedding, or declare `input {name}: "
                            f"{ds.input_spec}`")
        sample = sample + (int(table.shape[1]),)
    elif "vocab" in ds.meta and t.kind != "tokens":
        raise BindError(f"input '{name}' of {spec} is {t}, but dataset '{ds.name}' gives token ids "
                        f"({ds.input_spec}): give the vectors with --embedding glove:FILE, or declare "
                        f"`input {name}: {ds.input_spec}`")
    dims = _match(name, t, t.shape[1:], sample, f"dataset '{ds.name}'", ds.input_spec, spec)
    return Binding(ds.task, name, num_classes=ds.num_classes, target_dim=ds.target_dim,
                   time_major=bool(getattr(t, "time_major", False)), dims=dims, embedding=table)


def _bind_graph(types: dict[str, TensorType], ds: Dataset, spec: str) -> Binding:
    nodes = [n for n, t in types.items() if t.kind == "items"]
    edges = [n for n, t in types.items() if t.kind == "edges"]
    weights = [n for n, t in types.items() if t.kind == "edge_weight"]
    others = [n for n in types if n not in nodes + edges + weights]
    if len(nodes) != 1 or len(edges) != 1 or len(weights) > 1 or others:
        raise BindError(f"dataset '{ds.name}' is a graph ({ds.input_spec} node features and an edge list); "
                        f"{spec} must have one nodes input and one edges input (and at most one edge_weight), "
                        f"it has {_describe(types)}")
    name = nodes[0]
    t = types[name]
    x = ds.train[0]
    dims = _match(name, t, t.shape[1:], tuple(x.shape), f"dataset '{ds.name}'", ds.input_spec, spec,
                  "node features")
    for e in edges + weights:  # the edge count E of edges[2, E] / edge_weight[E]
        last = types[e].shape[-1]
        if isinstance(last, str):
            dims.setdefault(last, int(ds.train[1].shape[1]))
    return Binding(ds.task, name, edges[0], weights[0] if weights else None, batched_nodes=t.batched,
                   num_classes=ds.num_classes, dims=dims)


def _match(name: str, t: TensorType, declared, data_shape: tuple[int, ...], data_name: str, data_type: str,
           spec: str, what: str = "samples") -> dict[str, int]:
    """Compare the declared per-sample dims with the data's; BindError naming the first differing dim. Returns
    the data's size of each symbolic dim (``{"T": 100}`` for ``sequence[B, T, F]`` bound to 100-step samples)."""
    declared = tuple(declared)
    where = f"input '{name}' of {spec} is {t}, but {data_name} gives {data_type}"
    data_desc = f"{what} of shape {_shape(data_shape)}"
    if len(declared) != len(data_shape):
        hint = ""
        n_data = math.prod(data_shape)
        if all(isinstance(d, int) for d in declared) and math.prod(declared) == n_data:
            hint = (f"; both hold {n_data} values: declare `input {name}: {data_type}` and flatten() it "
                    "in the spec")
        raise BindError(f"{where}: the spec expects {len(declared)} dims per sample {_shape(declared)}, the data "
                        f"has {len(data_shape)} ({data_desc}){hint}")
    for i, (want, have) in enumerate(zip(declared, data_shape)):
        if isinstance(want, int) and want != have:
            raise DimMismatch(where, _dim_name(t, i + 1), want, int(have), f"{data_desc}, spec {_shape(declared)}",
                              name, len(t.shape) - len(declared) + i)
    return {want: int(have) for want, have in zip(declared, data_shape) if isinstance(want, str)}


def _output_type(graph: Graph, spec: str) -> TensorType:
    if len(graph.outputs) != 1:
        raise BindError(f"{spec} returns {len(graph.outputs)} values; training needs exactly one output")
    return graph.node(graph.outputs[0]).type


def _check_output(t: TensorType, out: str, ds: Dataset, b: Binding, spec: str) -> None:
    width = ds.output_dim
    what = f"{ds.num_classes} classes" if ds.num_classes is not None else f"{ds.target_dim} regression targets"
    if ds.task == "node_classification":
        ok_kind = t.kind == "items"
        expect = f"nodes[N, {width}] (one row of logits per node)"
    else:
        ok_kind = t.kind == "vector"
        expect = f"vector[B, {width}]"
    if not ok_kind:
        raise BindError(f"output '{out}' of {spec} is {t}; dataset '{ds.name}' ({ds.task}, {what}) needs {expect}")
    last = t.shape[-1]
    if isinstance(last, int) and last != width:
        raise DimMismatch(f"output '{out}' of {spec} is {t}, but dataset '{ds.name}' has {what}", "", last, width, "",
                          None, len(t.shape) - 1)
