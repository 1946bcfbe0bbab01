"""``rpn2c export SPEC CHECKPOINT --format pt2|onnx``: a trained model as a deployable program.

``pt2`` is a ``torch.export`` program (``torch.export.save``; load it with ``torch.export.load(path).module()``);
``onnx`` is the same program converted by ``torch.onnx.export(..., dynamo=True)`` (needs the ``export`` extra:
onnx, onnxscript; onnxruntime to check the file). The model comes from the checkpoint exactly as ``rpn2c eval``
loads it. Every symbolic dimension of the inputs (the batch ``B``, a sequence length ``T`` ...) is exported as
dynamic where the model allows (``torch.export.Dim.AUTO``); the summary says which stayed dynamic. The example
inputs take each dim's size in the checkpoint's training data (``--dim`` overrides it), so a dim the model fixes is
fixed at the size the model was trained on. The program is written to a temporary file beside the target,
loaded back and compared with the module on fresh random inputs (at the example sizes and at another size of every
dynamic dim) and renamed into place only when it passes (``rpn2c.runtime.export_write``): a failed export leaves no
file. A dim whose dynamic trace or check fails is exported static, with the reason in the summary; what cannot be
exported at all is a located error.
"""

from __future__ import annotations

from pathlib import Path

from rpn2c.runtime.common import EXIT_OK, EXIT_SPEC, _err, _out, _Usage, parse_dims
from rpn2c.runtime.export_base import INSTALL
from rpn2c.runtime.workflow import _guard

FORMATS = {"pt2": ".pt2", "onnx": ".onnx"}
EXAMPLE_BATCH, OTHER = 4, 8  # example sizes of the batch and of other symbolic dims (the check adds 1 to dynamic ones)
# optimiser rules whose kernels ONNX has no operator for; the exported model takes the next form of their slot
ONNX_DISABLED_RULES = ("graph_spmm",)  # the rpn2c::graph_mm custom op -> gather / scatter_add


# ------------------------------------------------------------------------------------------------ inputs
def _layout(t, dims: dict[str, int]):
    """(runtime shape, symbolic dim name or None per axis) of an input of type ``t``."""
    axes = list(t.shape if t.batched else t.shape[1:])
    names = [d if isinstance(d, str) else None for d in axes]
    shape = [d if isinstance(d, int) else dims.get(d, EXAMPLE_BATCH if d == "B" else OTHER) for d in axes]
    if t.time_major:
        shape[0], shape[1], names[0], names[1] = shape[1], shape[0], names[1], names[0]
    return shape, names


def known_dims(given: dict[str, int], graph) -> dict[str, int]:
    """``given`` (``--dim`` sizes) when each names a symbolic dimension of the inputs of ``graph``, else a usage
    error naming the closest (a misspelt ``--dim t=16`` would otherwise be ignored)."""
    from rpn2c.errors import did_you_mean

    names = list(dict.fromkeys(d for n in graph.inputs for d in _layout(graph.node(n).type, {})[1] if d))
    for name in given:
        if name not in names:
            has = f"its inputs' symbolic dimensions: {', '.join(names)}" if names else "its inputs have none"
            hint = did_you_mean(name, names)
            raise _Usage(f"--dim {name}={given[name]}: model '{graph.name}' has no dimension '{name}' ({has})"
                         + (f"; {hint}" if hint else ""))
    return given


def example_sizes(graph, dims: dict[str, int] | None = None) -> dict[str, int]:
    """Every symbolic input dim's example size: its size in ``dims``, else B = 4 and others 8, within what the
    model allows (``rpn2c.runtime.axis_limits``: 4 steps for ``learned_position(max_len = 4)``)."""
    from rpn2c.runtime.axis_limits import axis_limits

    dims = dict(dims or {})
    symbols = dict.fromkeys(d for n in graph.inputs for d in graph.node(n).type.shape if isinstance(d, str))
    sizes = {d: dims.get(d, EXAMPLE_BATCH if d == "B" else OTHER) for d in symbols}
    limits = axis_limits(graph, sizes)
    return {**dims, **{d: limits[d].clamp(v) if d in limits and d not in dims else v for d, v in sizes.items()}}


def example_inputs(graph, dims: dict[str, int] | None = None, *, dtype=None, seed: int = 0):
    """Random inputs in declaration order (symbolic dims sized by ``dims``, else B = 4 and others 8 within what
    the model allows: :func:`example_sizes`) and, per input, the symbolic name of each axis. An edge list's ids
    lie below the length of every axis a graph ξ it feeds runs over; masks attend to all."""
    import torch

    from rpn2c.components.sequence import random_tokens

    dims = example_sizes(graph, dims)
    gen = torch.Generator().manual_seed(seed)
    dtype = dtype or torch.get_default_dtype()
    layouts = {n: _layout(graph.node(n).type, dims) for n in graph.inputs}
    nodes = next((layouts[n][0][0] for n in graph.inputs
                  if graph.node(n).type.kind == "items" and not graph.node(n).type.batched), dims.get("N", OTHER))
    sized = {a: size for shape, names in layouts.values() for a, size in zip(names, shape) if a}
    indexed = _indexed_sizes(graph, sized)
    values, names = [], []
    for n in graph.inputs:
        t = graph.node(n).type
        shape, axis_names = layouts[n]
        if t.kind == "edges":
            v = torch.randint(0, indexed.get(n, nodes), shape, generator=gen)
        elif t.kind == "tokens":
            v = random_tokens(graph, n, shape, gen)
        elif t.kind == "edge_weight":
            v = torch.rand(shape, generator=gen, dtype=dtype) + 0.5
        elif t.kind == "mask":
            fill = {"block": False, "keep": True}.get(t.mask_mode)
            v = torch.full(shape, fill) if fill is not None else torch.zeros(shape, dtype=dtype)
        else:
            v = torch.randn(shape, generator=gen, dtype=dtype)
        values.append(v)
        names.append(axis_names)
    return tuple(values), names


def _indexed_sizes(graph, sizes: dict[str, int]) -> dict[str, int]:
    """Per edge-list input, the fewest nodes (or features) of any axis a graph ξ it feeds runs over, with the
    inputs' symbols sized by ``sizes``: a head's nodes may be a literal count, or its features (an attribute ξ)."""
    from rpn2c.ir.estimate import dim_size
    from rpn2c.ir.graph import HEAD_SLOT

    fewest: dict[str, int] = {}
    for n in graph.nodes():
        if n.kind != "layer":
            continue
        preds = graph.preds(n.id)
        for h, tr in zip(n.layer.heads, n.trace.get("heads", ())):
            for slot, use in h.xi.items():
                for key, ref in use.component.value_refs():
                    src = preds.get(f"aux:{ref.name}")
                    if key == "edges" and src in graph.inputs:
                        size = dim_size(HEAD_SLOT[slot].size(tr), sizes)
                        fewest[src] = min(fewest.get(src, size), size)
    return fewest


# ------------------------------------------------------------------------------------------------ export
def _unexportable(graph) -> None:
    """Refuse, with the node's location, a spec using a component that cannot be traced into a graph."""
    from rpn2c.runtime.export_write import ExportError
    from rpn2c.runtime.report import compile_limitations

    found = compile_limitations(graph)
    if found:
        lines = [f"{graph.node(f['node']).span}: '{f['node']}' uses {f['component']} ({f['family']}), which "
                 f"torch.export cannot trace: {f['reason']}" for f in found]
        raise ExportError(f"model '{graph.name}' cannot be exported:\n  " + "\n  ".join(lines))


def export_program(model, graph, inputs, axis_names, *, dynamic: bool = True):
    """``torch.export.export`` of ``model`` on ``inputs``: every named axis ``Dim.AUTO`` (dynamic where the model
    allows), falling back to static shapes when the dynamic trace fails. Returns (program, dynamic dim names,
    why the dims are static or None). ``rpn2c export`` goes further (:func:`export_write.write_checked`)."""
    from rpn2c.runtime.export_write import ExportError, dynamic_dims, reason, trace

    _unexportable(graph)
    names = {d for axes in axis_names for d in axes if d} if dynamic else set()
    why = None
    if names:
        try:
            program = trace(model, inputs, axis_names, names)
            return program, dynamic_dims(program, axis_names)[0], None
        except Exception as exc:  # noqa: BLE001 - any trace failure: try static shapes, say why
            why = reason(exc)
    try:
        program = trace(model, inputs, axis_names, set())
    except Exception as exc:  # noqa: BLE001 - torch.export's errors are many types; report the innermost
        raise ExportError(f"torch.export cannot trace model '{graph.name}': {reason(exc)}") from exc
    return program, [], why


# ------------------------------------------------------------------------------------------------ command
def _load(args):
    """(graph, model, where the weights came from, the sizes of symbolic dims in the training data): the
    checkpoint restored as ``rpn2c eval`` does, or a fresh random initialisation with --random-init."""
    import torch

    from rpn2c.runtime import workflow

    if args.checkpoint is not None:
        ckpt = workflow._load_checkpoint(args.checkpoint)
        graph, model = workflow._restored_model(args, ckpt)
        _unexportable(graph)
        return graph, model, f"weights from {args.checkpoint}", trained_dims(ckpt)
    graph, _ = workflow._graph(args)
    _unexportable(graph)  # before building the module
    torch.manual_seed(args.seed)
    return (graph, workflow._compile(graph), f"RANDOM weights (--random-init, seed {args.seed}): not a trained "
            "model", {})


def trained_dims(ckpt: dict) -> dict[str, int]:
    """The size of each symbolic input dim in the data the checkpoint was trained on (recorded by ``rpn2c train``
    as ``data.dims``), the batch excepted: the example sizes an export defaults to, so the program accepts its
    own training data."""
    dims = (ckpt.get("data") or {}).get("dims") or {}
    return {k: int(v) for k, v in dims.items() if k != "B"}


def _without_rules(model, rules):
    """The same model (same weights) lowered with ``rules`` switched off."""
    import copy

    from rpn2c.lower.build import CompiledModel
    from rpn2c.passes import optimize

    if not any(d.rule in rules for n in model.graph.nodes() for d in n.decisions):
        return model
    plain = CompiledModel(optimize(copy.deepcopy(model.graph), disable=rules))
    plain.load_state_dict(model.state_dict())
    return plain


def _model_span(spec: str, name: str) -> str:
    """``FILE:LINE:COL`` of model ``name``'s declaration in ``spec`` (the file alone if it is declared elsewhere)."""
    from rpn2c.errors import SpecError
    from rpn2c.syntax.parser import parse

    try:
        found = parse(Path(spec).read_text(encoding="utf-8"), spec).definition(name)
    except (OSError, SpecError):
        found = None
    return str(found.span) if found is not None else spec


@_guard
def cmd_export(args) -> int:
    import torch

    from rpn2c.runtime import export_write
    from rpn2c.runtime.export_onnx import MissingPackage, require_onnx
    from rpn2c.runtime.export_write import TOLERANCE, ExportError

    if (args.checkpoint is None) == (not args.random_init):
        raise _Usage("give a CHECKPOINT written by `rpn2c train`, or --random-init for untrained weights"
                     if args.checkpoint is None else "give a CHECKPOINT or --random-init, not both")
    given = parse_dims(args.dim)
    dtype = getattr(torch, args.dtype)
    try:
        if args.format == "onnx":
            require_onnx()
        graph, model, source, trained = _load(args)
    except MissingPackage as exc:
        raise _Usage(str(exc)) from None
    except ExportError as exc:
        _err(f"rpn2c: error: {exc}")
        return EXIT_SPEC
    dims = {**trained, **known_dims(given, graph)}
    from_data = {k: v for k, v in trained.items() if k not in given}
    if args.format == "onnx":
        model = _without_rules(model, ONNX_DISABLED_RULES)
    model = model.to(dtype).eval()
    out = Path(args.out) if args.out else (Path(args.checkpoint).with_suffix(FORMATS[args.format])
                                           if args.checkpoint else Path(Path(args.spec).stem + FORMATS[args.format]))
    full = example_sizes(graph, dims)
    _, axis_names = example_inputs(graph, full, dtype=dtype)
    sizes = {d: full[d] for names in axis_names for d in names if d}
    limits = _within_limits(graph, sizes, given)
    try:
        written = export_write.write_checked(
            model, graph, args.format, out, sizes, lambda at, seed: example_inputs(graph, at, dtype=dtype, seed=seed),
            dynamic=not args.static, tolerance=TOLERANCE[args.dtype], where=_model_span(args.spec, graph.name),
            limits=limits)
    except ExportError as exc:
        _err(f"rpn2c: error: {exc}")
        return EXIT_SPEC
    except OSError as exc:
        _err(f"rpn2c: error: cannot write {out}: {exc.strerror or exc}")
        return EXIT_SPEC
    _summary(args, graph, out, source, sizes, from_data, written)
    return EXIT_OK


def _within_limits(graph, sizes: dict[str, int], given: dict[str, int]) -> dict[str, tuple[int, int | None]]:
    """``{dim: (fewest, most or None)}``, the sizes the model allows each dim (``rpn2c.runtime.axis_limits``); a
    usage error for a ``--dim`` outside them."""
    from rpn2c.runtime.axis_limits import axis_limits

    limits = axis_limits(graph, sizes)
    for d, size in given.items():
        limit = limits.get(d)
        if limit is not None and not limit.holds(size):
            most = f"at most {limit.most} ({limit.why})" if limit.most is not None and size > limit.most else \
                f"at least {limit.fewest}"
            raise _Usage(f"--dim {d}={size}: model '{graph.name}' takes {d} {most}")
    return {d: (limit.fewest, limit.most) for d, limit in limits.items()}


def _summary(args, graph, out: Path, source: str, sizes: dict[str, int], from_data: dict[str, int], written) -> None:
    what = {"pt2": "torch.export program", "onnx": "ONNX model"}[args.format]
    _out(f"wrote {out}: {what} of model {graph.name} ({args.dtype}), {source}")
    for n in graph.inputs:
        t = graph.node(n).type
        names = sorted({d for d in _layout(t, sizes)[1] if d})
        dyn = [d + (f" in {written.bounds[d][0]}..{written.bounds[d][1]}" if d in written.bounds else "")
               for d in names if d in written.dynamic]
        fixed = [f"{d}={sizes[d]}" for d in names if d not in written.dynamic]
        note = ", ".join(([f"dynamic {', '.join(dyn)}"] if dyn else []) + ([f"fixed {', '.join(fixed)}"] if fixed
                                                                            else []))
        _out(f"  input {n}: {t}" + (f" ({note})" if note else ""))
    for n in graph.outputs:
        _out(f"  output {n}: {graph.node(n).type}")
    if from_data:
        _out("  example sizes from the training data: " + ", ".join(f"{k}={v}" for k, v in from_data.items())
             + " (--dim NAME=SIZE to change)")
    for dims, why in written.static:
        _out(f"  static {', '.join(f'{d}={sizes[d]}' for d in dims)}: {why}")
    if written.checks is None:
        _out("  not checked: onnxruntime is not installed")
        return
    shapes = " and ".join(f"({s})" for s, _ in written.checks)
    worst = max(d for _, d in written.checks)
    _out(f"  checked: equals the module on fresh random inputs {shapes}, largest difference {worst:.2g}")


def register(sub) -> None:
    """Add ``export`` to the ``rpn2c`` sub-command parser."""
    from rpn2c.runtime.common import add_spec_command

    s = add_spec_command(sub, "export", "export a trained model for deployment: a torch.export program (pt2) or "
                                        "ONNX, checked against the module", cmd_export)
    s.add_argument("checkpoint", nargs="?", metavar="CHECKPOINT", help="checkpoint written by rpn2c train")
    s.add_argument("--format", choices=list(FORMATS), default="pt2",
                   help=f"pt2: torch.export.save; onnx: torch.onnx.export(dynamo=True), needs {INSTALL}")
    s.add_argument("--out", metavar="FILE", help="output file (default: the checkpoint's path with .pt2 / .onnx)")
    s.add_argument("--dim", action="append", metavar="NAME=SIZE",
                   help="example size of a symbolic dim (default: its size in the checkpoint's training data, "
                        "else B=4 and others 8); repeatable. A dim the model fixes (a sequence length a recurrent "
                        "layer unrolls) is exported at this size")
    s.add_argument("--static", action="store_true", help="export every dimension at its example size")
    s.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    s.add_argument("--random-init", action="store_true",
                   help="no checkpoint: export randomly initialised (untrained) weights, e.g. to try a deployment")
    s.add_argument("--seed", type=int, default=0, help="seed of --random-init (default 0)")
