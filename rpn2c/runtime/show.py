"""``rpn2c show``: a layer's interdependence matrices, or the layer as one sparse matrix (seed 004), as a
picture or as data.

``--view xi`` draws the literal ξ matrices (``rpn2c.train.interdependence``); ``--view matrix`` the layer's matrix
``vec(y) = M·vec(x) + b`` (``rpn2c.runtime.layer_matrix``). The default picks ξ for layers that have one and the
matrix for the others (perceptrons, pooling, recurrent layers without a chain picture). ``--format npz|npy|json``
writes the matrix view as data; without ``--layer`` every layer is shown. ``--bounds`` prints the paper's §10
diagnostics of each ξ matrix instead (rank(A), ‖A‖∞, ‖AX‖₂→∞ and eq 189–193; ``rpn2c.runtime.bounds``).
"""

from __future__ import annotations

import json
from pathlib import Path

from rpn2c.runtime.common import EXIT_OK, _err, _out, _Usage, add_spec_command, parse_dims, parse_params
from rpn2c.runtime.workflow import _compile, _dataset, _graph, _guard, _load_checkpoint, _named_dims

FORMATS = ("png", "npz", "npy", "json")


def _random_inputs(graph, dims: dict[str, int]):
    """One random sample (float64) for every input, by ``rpn2c export``'s example inputs: B = 1 unless ``dims``
    says otherwise, other symbolic dims 8 within the sizes the model allows; an edge list cannot be made up."""
    import torch

    from rpn2c.runtime.export_cli import example_inputs
    from rpn2c.train.errors import TrainError

    for name in graph.inputs:
        t = graph.node(name).type
        if t.kind in ("edges", "edge_weight"):
            raise TrainError(f"input '{name}' is {t}: an edge list cannot be made up; pass --data with a graph "
                             "dataset (e.g. --data karate)")
    values, _ = example_inputs(graph, {"B": 1, **dims}, dtype=torch.float64)
    return dict(zip(graph.inputs, values))


def _model(args, graph):
    """The reference-lowered model in float64 and eval mode (trained weights with ``--checkpoint``), its graph, and
    the sizes of the symbolic dims in the checkpoint's training data (random inputs default to them)."""
    if not args.from_checkpoint:
        return graph, _compile(graph, reference=True).double().eval(), {}
    from rpn2c.runtime.export_cli import trained_dims
    from rpn2c.train import checkpoint

    ckpt = _load_checkpoint(args.from_checkpoint)
    graph, _ = _graph(args, checkpoint.model_params(ckpt) or None)
    model = _compile(graph, reference=True)
    checkpoint.restore(ckpt, graph, model, path=args.from_checkpoint)
    return graph, model.double().eval(), trained_dims(ckpt)


def _inputs(args, graph, trained: dict[str, int]):
    """The model inputs (one data sample, the whole graph, or random, sized by ``--dim``, else by the training data
    ``trained``, else by the defaults) and a phrase saying which."""
    from rpn2c.train.binding import bind

    if not args.data:
        from rpn2c.runtime.export_cli import known_dims

        inputs = _random_inputs(graph, {**trained, **known_dims(parse_dims(args.dim), graph)})
        return inputs, "random input " + ", ".join(f"{k}{list(v.shape)}" for k, v in inputs.items())
    from rpn2c.train import checkpoint

    if args.dim:
        raise _Usage(f"--dim {args.dim[0]}: --dim sizes the random input; with --data the sample has its own sizes")
    dataset = _dataset(args.data, args.seed)
    trained_params = checkpoint.model_params(_load_checkpoint(args.from_checkpoint)) if args.from_checkpoint else {}
    params = {**trained_params, **parse_params(getattr(args, "param", None))}
    def bind_to(g):
        return bind(g, dataset, args.spec)

    with _named_dims(graph, args, params, trained=bool(args.from_checkpoint), rebind=bind_to):
        binding = bind_to(graph)
    split = dataset.train if args.split == "train" else dataset.test
    def real(x):  # token ids stay integers
        return x.double() if x.is_floating_point() else x

    if dataset.task == "node_classification":
        return binding.inputs(real(split[0]), split[1]), f"{args.data} graph"
    n = split[0].shape[0]
    if not 0 <= args.index < n:
        raise _Usage(f"--index {args.index}: the {args.split} split has {n} samples")
    return binding.inputs(real(split[0][args.index:args.index + 1])), f"{args.data} {args.split} sample {args.index}"


@_guard
def cmd_show(args) -> int:
    from rpn2c.runtime.layer_matrix import ViewError
    from rpn2c.train.errors import TrainError

    try:
        return _show(args)
    except ViewError as exc:  # a named layer without a view (every layer: those are named and skipped)
        raise TrainError(str(exc)) from None


def _show(args) -> int:
    from rpn2c.runtime.layer_matrix import check_matrix_layer, matrix_layers
    from rpn2c.train.interdependence import check_layer, layers_with_xi
    from rpn2c.train.loop import seed_everything

    graph, _ = _graph(args)
    if args.bounds and args.format not in ("png", "json"):
        raise _Usage("--bounds prints text, or JSON with --format json")
    if args.layer:
        check_matrix_layer(graph, args.layer)
        if args.view == "xi" or args.bounds:
            check_layer(graph, args.layer)
    layers = [args.layer] if args.layer else (layers_with_xi(graph) if args.view == "xi" or args.bounds
                                              else matrix_layers(graph))
    if args.format == "npy" and len(layers) != 1:
        raise _Usage("--format npy holds one matrix: name a --layer (or use --format npz)")
    seed_everything(args.seed)
    graph, model, trained = _model(args, graph)
    inputs, where = _inputs(args, graph, trained)
    if args.bounds:
        return _bounds(args, graph, model, inputs, where)
    if args.format == "png":
        return _pictures(args, graph, model, inputs, where, layers, set(layers_with_xi(graph)))
    return _data(args, graph, model, inputs, layers, args.format)


def _views(args, model, inputs, layers):
    """(layer, matrix view) for each layer; without ``--layer`` the layers that have none are named and skipped."""
    from rpn2c.runtime.layer_matrix import ViewError, layer_matrix

    for layer in layers:
        try:
            yield layer, layer_matrix(model, layer, inputs)
        except ViewError as exc:
            if args.layer:
                raise
            _err(f"{layer}: no matrix view: {exc}")


def _pictures(args, graph, model, inputs, where, layers, xi) -> int:
    from rpn2c.train import plots
    from rpn2c.train.interdependence import layer_matrices

    stem = Path(args.spec).stem
    folder = Path(args.out) if args.out and not args.layer else Path(f"{stem}-show")
    by_xi = [layer for layer in layers if args.view == "xi" or (args.view == "auto" and layer in xi)]
    views = dict(_views(args, model, inputs, [layer for layer in layers if layer not in by_xi]))
    for layer in [layer for layer in layers if layer in by_xi or layer in views]:
        path = Path(args.out) if args.out and args.layer else (
            Path(f"{stem}-{layer}.png") if args.layer else folder / f"{layer}.png")
        if layer in by_xi:
            mats = layer_matrices(model, layer, inputs)
            panels = [{"matrix": m.matrix, "title": m.title, "rows": m.rows, "cols": m.cols} for m in mats]
            title = f"{graph.name}.{layer}: interdependence matrices ({where})"
            lines = [(m.title, m.matrix) for m in mats]
        else:
            lm = views[layer]
            panels = _matrix_panels(lm)
            title = f"{graph.name}.{layer}: {lm.kind} as one matrix, vec(y) = M·u + b ({where})"
            lines = [(f"{lm.kind}: M", lm.matrix)]
        path.parent.mkdir(parents=True, exist_ok=True)
        plots.matrices(panels, path, title=title)
        for text, m in lines:
            r, c = m.shape
            _out(f"{layer}: {text}: {r}×{c}, {int((m != 0).sum())} non-zero")
        _out(f"wrote {path}")
    return EXIT_OK


def _bounds(args, graph, model, inputs, where) -> int:
    from rpn2c.errors import InputError
    from rpn2c.runtime.bounds import layer_bounds
    from rpn2c.train.interdependence import layers_with_xi

    layers = [args.layer] if args.layer else layers_with_xi(graph)
    try:
        found = [b for layer in layers for b in layer_bounds(model, layer, inputs, labelled=args.labelled,
                                                             delta=args.delta, lipschitz=args.lipschitz)]
    except InputError:  # the data does not fit the model (a longer sequence than its positions): not a usage error
        raise
    except ValueError as exc:  # a labelled count or δ out of range
        raise _Usage(str(exc)) from None
    if args.format == "json":
        text = json.dumps({"model": graph.name, "input": where, "matrices": [b.summary() for b in found]},
                          indent=2, ensure_ascii=False)
        if args.out:
            Path(args.out).write_text(text + "\n", encoding="utf-8")
            _out(f"wrote {args.out}")
        else:
            _out(text)
        return EXIT_OK
    _out(f"{graph.name}: §10 diagnostics on {where} (sample 0)")
    for b in found:
        for line in b.lines():
            _out(line)
    return EXIT_OK


def _matrix_panels(lm) -> list[dict]:
    """M with its magnitudes (zeros white), its sparsity pattern (unless M is 0/1), and the data-dependent slices
    of attention."""
    import torch

    rows, cols = f"output entry ({'×'.join(map(str, lm.out_shape))}, row-major)", "input entry u"
    pattern = (lm.matrix != 0).double()
    panels = [{"matrix": lm.matrix, "title": f"M ({lm.kind})", "rows": rows, "cols": cols}]
    if not torch.equal(pattern, lm.matrix):
        panels.append({"matrix": pattern, "title": "sparsity pattern of M", "rows": rows, "cols": cols})
    if "tensor" in lm.factors:
        panels += [{"matrix": t, "title": f"T[{h}]: attention of head {h} (data-dependent)", "rows": "query item i",
                    "cols": "key item j"} for h, t in enumerate(lm.factors["tensor"][:2])]
    return panels


def _data(args, graph, model, inputs, layers, fmt) -> int:
    import numpy as np

    views = [view for _, view in _views(args, model, inputs, layers)]
    summaries = [v.summary() for v in views]
    stem = Path(args.spec).stem
    name = args.layer or "all"
    if fmt == "json":
        text = json.dumps(summaries[0] if args.layer else {"model": graph.name, "layers": summaries}, indent=2,
                          ensure_ascii=False)
        if not args.out:
            _out(text)
            return EXIT_OK
        Path(args.out).write_text(text + "\n", encoding="utf-8")
        _out(f"wrote {args.out}")
        return EXIT_OK
    path = Path(args.out) if args.out else Path(f"{stem}-{name}.{fmt}")
    if fmt == "npy":
        np.save(path, views[0].matrix.numpy())
    else:
        arrays = {}
        for v in views:
            arrays.update({f"{v.layer}/M": v.matrix, f"{v.layer}/b": v.bias, f"{v.layer}/u": v.u})
            arrays.update({f"{v.layer}/{k}": t for k, t in v.factors.items()})
        with open(path, "wb") as fh:  # np.savez would append .npz to any other name
            np.savez(fh, **{k: t.detach().numpy() for k, t in arrays.items()})
    for s in summaries:
        _out(f"{s['layer']}: {s['kind']}: {s['shape'][0]}×{s['shape'][1]}, {s['nnz']} non-zero")
    _out(f"wrote {path}")
    return EXIT_OK


def register(sub) -> None:
    """Add ``show`` to the ``rpn2c`` sub-command parser."""
    s = add_spec_command(sub, "show", "draw a layer's interdependence matrices, or the layer as one sparse matrix "
                                      "(PNG, or npz/npy/json data)", cmd_show)
    s.add_argument("--layer", help="layer name as in the spec (y.attn for block layers; default: every layer)")
    s.add_argument("--view", choices=["auto", "xi", "matrix"], default="auto",
                   help="xi: the interdependence matrices; matrix: the layer as vec(y) = M·vec(x) + b (seed 004); "
                        "auto (default): xi where the layer has one, else the matrix")
    s.add_argument("--format", choices=FORMATS, default="png",
                   help="png picture, or the matrix view as data: npz (M, b, u and factors per layer), npy (M), "
                        "json (shape, non-zeros, bandwidths, structure)")
    s.add_argument("--out", metavar="FILE",
                   help="output file (default <spec-stem>-<layer>.<format>; a folder for pictures of every layer; "
                        "json: standard output)")
    s.add_argument("--data", metavar="NAME", help="take the input from this dataset (graphs need it for edges)")
    s.add_argument("--split", choices=["test", "train"], default="test")
    s.add_argument("--index", type=int, default=0, help="which sample of the split (default 0)")
    s.add_argument("--dim", action="append", metavar="NAME=N",
                   help="size of a symbolic dim for random input (default B=1, others 8); repeatable")
    s.add_argument("--checkpoint", dest="from_checkpoint", metavar="CKPT",
                   help="use trained weights (learned ξ such as attention)")
    s.add_argument("--seed", type=int, default=0, help="seed of the random weights / input (default 0)")
    s.add_argument("--bounds", action="store_true",
                   help="print the paper's §10 diagnostics of each ξ matrix: rank(A), ‖A‖∞, ‖AX‖₂→∞ and the "
                        "VC / Rademacher bounds of eq 189-193 (text, or --format json)")
    s.add_argument("--labelled", type=int, metavar="M",
                   help="--bounds: labelled instances m of the n items (default n // 2)")
    s.add_argument("--delta", type=float, default=0.05, help="--bounds: confidence δ (default 0.05)")
    s.add_argument("--lipschitz", type=float, default=1.0,
                   help="--bounds: Lipschitz constant L of the activation (default 1)")
