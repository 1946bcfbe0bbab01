"""Fuzzing ``rpn2c.from_torch``: random compositions of the torch layers and operations it claims to convert.

An input is a *recipe* drawn from one seed: an input kind (vector, sequence, a 1-3-D grid, a graph with an edge
list) and a list of steps (``nn.Linear``, every elementwise activation, norms, dropout, convolutions with groups,
dilation, 'same' and circular padding, pooling with ``ceil_mode``, adaptive pooling, ``MultiheadAttention`` both
batch layouts, ``TransformerEncoderLayer``, RNN/GRU/LSTM with layers and directions, torch_geometric's convolutions
where it is installed, ``Flatten``), each joined to the running value plainly, by a residual add or by ``torch.cat``.
The steps become an ``nn.Sequential`` (converted layer by layer) or a class whose ``forward`` loops over them (traced
with torch.fx). A step that does not fit the value it meets is left out, so every subset of a recipe's steps builds
a module: the minimiser drops steps.

``from_torch`` must refuse a module with :class:`~rpn2c.frontends.torch_import.TorchImportError` (located: the
module's path, class and option) or give a spec that compiles and equals the module in float64 on the example.

    python -m rpn2c.runtime.fuzz_torch --show SEED      # the recipe and the module of one seed
"""

from __future__ import annotations

import argparse
import json
import random
import sys

from rpn2c.runtime.fuzz import Outcome, alarm, crashed

TOLERANCE = 1e-7  # largest |difference| / max(1, |module output|) in float64
_ACTIVATIONS = ("ReLU", "Tanh", "Sigmoid", "SiLU", "ReLU6", "Hardsigmoid", "Hardswish", "SELU", "Mish", "Softsign",
                "Tanhshrink", "LogSigmoid", "GELU", "ELU", "CELU", "LeakyReLU", "Softplus", "Hardtanh", "Hardshrink",
                "Softshrink", "PReLU", "Softmax", "LogSoftmax", "Softmin", "GLU")
_GRAPH_CONVS = ("GCNConv", "GATConv", "SAGEConv", "GraphConv", "GINConv")


# ------------------------------------------------------------------------------------------------ recipes
def recipe(seed: int) -> dict:
    """The recipe of input ``seed``: input kind and size, the steps (drawn with their options) and the form."""
    rng = random.Random(seed)
    kind = rng.choice(["vector", "sequence", "sequence", "grid1", "grid2", "grid2", "grid3", "graph"])
    features = rng.choice([2, 4, 6, 8])
    steps = []
    for _ in range(rng.randint(1, 5)):
        op = rng.choice(["act", "act", "linear", "linear", "norm", "dropout", "conv", "conv", "pool", "adaptive",
                         "mha", "encoder", "rnn", "flatten", "graph"])
        steps.append({"op": op, "link": rng.choice(["", "", "", "add", "cat"]), "r": rng.randrange(10**9)})
    form = rng.choice(["class", "class", "sequential"])
    return {"seed": seed, "input": kind, "features": features, "steps": steps,
            "form": "class" if kind == "graph" else form}  # a graph layer takes two arguments


def _draw(step: dict) -> random.Random:
    return random.Random(step["r"])


def _activation(nn, rng, width: int):
    name = rng.choice(_ACTIVATIONS)
    cls = getattr(nn, name)
    if name in ("Softmax", "LogSoftmax", "Softmin"):
        return cls(dim=-1)
    if name == "GLU":
        return cls(dim=-1) if width % 2 == 0 else nn.ReLU()
    if name == "PReLU":
        return cls(rng.choice([1, width]))
    if name in ("ELU", "CELU"):
        return cls(alpha=rng.choice([1.0, 0.5, 2.0]))
    if name == "LeakyReLU":
        return cls(rng.choice([0.01, 0.2]))
    if name == "Softplus":
        return cls(beta=rng.choice([1.0, 2.0]), threshold=rng.choice([20.0, 1.0]))
    if name == "Hardtanh":
        return cls(-rng.choice([1.0, 2.0]), rng.choice([1.0, 0.5]))
    if name in ("Hardshrink", "Softshrink"):
        return cls(rng.choice([0.5, 0.1]))
    if name == "GELU":
        return cls(approximate=rng.choice(["none", "tanh"]))
    return cls()


def _layer(step: dict, shape: tuple, kind: str, nn):
    """(module, how it is called) for ``step`` on a value of per-sample ``shape`` and ``kind``, or None."""
    rng, op = _draw(step), step["op"]
    width = shape[-1] if kind in ("vector", "sequence", "graph") else shape[0]
    grid = kind.startswith("grid")
    rank = len(shape) - 1 if grid else 0
    if op == "act":
        return (_activation(nn, rng, width), "plain") if not grid or rng.random() < 0.5 else (nn.ReLU(), "plain")
    if op == "dropout":
        return nn.Dropout(rng.choice([0.0, 0.1, 0.5])), "plain"
    if op == "linear" and not grid:
        return nn.Linear(width, rng.choice([2, 3, 4, 6, 8]), bias=rng.random() < 0.8), "plain"
    if op == "norm":
        if grid:
            return getattr(nn, f"BatchNorm{rank}d")(width, affine=rng.random() < 0.8), "plain"
        if kind == "vector" and rng.random() < 0.4:
            return nn.BatchNorm1d(width), "plain"
        return nn.LayerNorm(width, elementwise_affine=rng.random() < 0.8, bias=rng.random() < 0.7), "plain"
    if op == "conv" and grid:
        groups = rng.choice([g for g in (1, 2, width) if width % g == 0])
        out = groups * rng.choice([1, 2, 3])
        stride = rng.choice([1, 1, 2])
        padding = "same" if stride == 1 and rng.random() < 0.3 else rng.choice([0, 1, 2])
        mode = rng.choice(["zeros", "zeros", "circular", "reflect", "replicate"])
        return getattr(nn, f"Conv{rank}d")(width, out, rng.choice([1, 2, 3]), stride=stride, padding=padding,
                                           dilation=rng.choice([1, 1, 2]), groups=groups,
                                           bias=rng.random() < 0.8, padding_mode=mode), "plain"
    if op == "pool" and grid:
        k = rng.choice([2, 3])
        kwargs = {"stride": rng.choice([None, 1, 2]), "padding": rng.choice([0, 0, 1]),
                  "ceil_mode": rng.random() < 0.3}
        if rng.random() < 0.5:
            return getattr(nn, f"MaxPool{rank}d")(k, dilation=rng.choice([1, 1, 2]), **kwargs), "plain"
        return getattr(nn, f"AvgPool{rank}d")(k, count_include_pad=rng.random() < 0.5, **kwargs), "plain"
    if op == "adaptive" and grid:
        size = tuple(rng.choice([1, 2, 3]) for _ in range(rank))
        cls = getattr(nn, f"Adaptive{rng.choice(['Avg', 'Max'])}Pool{rank}d")
        return cls(size if rank > 1 else size[0]), "plain"
    if op == "flatten" and (grid or kind == "sequence"):
        return nn.Flatten(1), "plain"
    if op == "mha" and kind == "sequence":
        heads = rng.choice([h for h in (1, 2, 4) if width % h == 0])
        first = rng.random() < 0.7
        return nn.MultiheadAttention(width, heads, bias=rng.random() < 0.8, batch_first=first), \
            ("mha" if first else "mha_time_first")
    if op == "encoder" and kind == "sequence":
        heads = rng.choice([h for h in (1, 2) if width % h == 0])
        return nn.TransformerEncoderLayer(width, heads, dim_feedforward=rng.choice([4, 8]), dropout=0.0,
                                          activation=rng.choice(["relu", "gelu"]), batch_first=True,
                                          norm_first=rng.random() < 0.5), "plain"
    if op == "rnn" and kind == "sequence":
        cls = getattr(nn, rng.choice(["RNN", "GRU", "LSTM"]))
        return cls(width, rng.choice([2, 3, 4]), num_layers=rng.choice([1, 2]), batch_first=True,
                   bidirectional=rng.random() < 0.4, bias=rng.random() < 0.8), "first"
    if op == "graph" and kind == "graph":
        try:
            import torch_geometric.nn as gnn
        except ImportError:
            return None
        name, out = rng.choice(_GRAPH_CONVS), rng.choice([2, 4])
        if name == "GATConv":
            return gnn.GATConv(width, out, heads=rng.choice([1, 2]), concat=rng.random() < 0.5), "graph"
        if name == "SAGEConv":
            return gnn.SAGEConv(width, out, normalize=rng.random() < 0.3), "graph"
        if name == "GINConv":
            inner = nn.Sequential(nn.Linear(width, out), nn.ReLU(), nn.Linear(out, out))
            return gnn.GINConv(inner, train_eps=rng.random() < 0.5), "graph"
        return getattr(gnn, name)(width, out), "graph"
    return None


def _example(r: dict):
    import torch

    gen = torch.Generator().manual_seed(r["seed"])
    f, kind = r["features"], r["input"]
    if kind == "graph":
        n = 6
        return torch.randn(n, f, generator=gen, dtype=torch.float64), torch.randint(0, n, (2, 12), generator=gen)
    shape = {"vector": (3, f), "sequence": (3, 5, f), "grid1": (2, f % 4 + 1, 9), "grid2": (2, f % 4 + 1, 7, 6),
             "grid3": (2, f % 4 + 1, 5, 4, 5)}[kind]
    return (torch.randn(*shape, generator=gen, dtype=torch.float64),)


def build(r: dict):
    """The module of recipe ``r`` (float64, eval mode, seeded) and its example arguments. Steps that do not fit
    the value they meet (or whose call fails) are left out."""
    import torch
    from torch import nn

    torch.manual_seed(r["seed"])
    args = _example(r)
    x, graph = args[0], r["input"] == "graph"
    kind = r["input"] if not r["input"].startswith("grid") else "grid"
    layers, calls, links = [], [], []
    for step in r["steps"]:
        made = _layer(step, tuple(x.shape[1:]), kind if kind != "grid" else f"grid{x.dim() - 2}", nn)
        if made is None or (r["form"] == "sequential" and made[1] != "plain"):
            continue
        layer, call = made
        layer = layer.double().eval()
        _randomise_stats(layer)
        try:
            with torch.no_grad():
                y = _call(layer, call, x, args)
        except Exception:  # noqa: BLE001 - an option that does not fit this value (a pool larger than the grid)
            continue
        link = step["link"] if r["form"] == "class" else ""
        if link == "add" and y.shape != x.shape:
            link = ""
        if link == "cat":  # along the channels of a grid, else the features
            axis = 1 if kind == "grid" and y.dim() > 2 else -1
            rest = [i for i in range(y.dim()) if i != axis % y.dim()]
            link = f"cat{axis}" if y.dim() == x.dim() and all(y.shape[i] == x.shape[i] for i in rest) else ""
        x = _join(y, x, link)
        layers.append(layer)
        calls.append(call)
        links.append(link)
        if y.dim() == 2 and kind in ("sequence", "grid"):
            kind = "vector"
    if r["form"] == "sequential":
        module = nn.Sequential(*layers)
    else:
        net, graph_net = _classes()
        module = (graph_net if graph else net)(layers, calls, links)
    return module.double().eval(), args


def _randomise_stats(layer) -> None:
    """Batch norms with running statistics other than 0 and 1, so that eval mode uses them visibly."""
    import torch
    from torch import nn

    for m in layer.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 2.0)


def _call(layer, call: str, x, args):
    if call == "mha":
        return layer(x, x, x, need_weights=False)[0]
    if call == "mha_time_first":
        t = x.transpose(0, 1)
        return layer(t, t, t, need_weights=False)[0].transpose(0, 1)
    if call == "first":
        return layer(x)[0]
    if call == "graph":
        return layer(x, args[1])
    return layer(x)


def _join(y, x, link: str):
    """The step's output ``y`` joined to its input ``x``: as it is, ``add`` (residual) or ``cat<axis>``."""
    import torch

    if link == "add":
        return y + x
    if link.startswith("cat"):
        return torch.cat([y, x], dim=int(link[3:]))
    return y


def _classes():
    from torch import nn

    class Net(nn.Module):
        """The steps in a loop (traced with torch.fx): plain calls, residual adds and concatenations."""

        def __init__(self, layers, calls, links):
            super().__init__()
            self.layers = nn.ModuleList(layers)
            self.calls, self.links = list(calls), list(links)

        def forward(self, x):
            for layer, call, link in zip(self.layers, self.calls, self.links):
                x = _join(_call(layer, call, x, (x,)), x, link)
            return x

    class GraphNet(Net):
        def forward(self, x, edge_index):
            for layer, call, link in zip(self.layers, self.calls, self.links):
                x = _join(_call(layer, call, x, (x, edge_index)), x, link)
            return x

    return Net, GraphNet


# ------------------------------------------------------------------------------------------------ run
def run_torch(r: dict, time_limit: float = 60.0) -> Outcome:
    """Build recipe ``r``, convert it with ``from_torch`` and judge (see the module docstring)."""
    import torch

    import rpn2c

    stage = "build"
    try:
        with alarm(time_limit):
            module, args = build(r)
            if not len(list(module.children())):
                return Outcome("ok", "no step fits")
            with torch.no_grad():
                want = module(*args)
            stage = "from_torch"
            try:
                spec = rpn2c.from_torch(module, args)
            except rpn2c.SpecTypeError as exc:
                if not hasattr(exc, "module_path"):  # not the importer's refusal (a TorchImportError)
                    raise
                if not exc.diagnostics or "module '" not in exc.diagnostics[0].message:
                    return Outcome("failure", "from_torch: refusal that names no module", exc.render())
                return Outcome("ok", "refused: " + exc.module_class.rsplit(".", 1)[-1])
            stage = "compile"
            model = spec.compile()
            stage = "forward"
            inputs = [a for a in args if isinstance(a, torch.Tensor)]
            with torch.no_grad():
                got = model(*inputs)
            diff = _difference(got, want)
            if not diff <= TOLERANCE:
                return Outcome("failure", "from_torch: the spec differs from the module",
                               f"relative difference {diff:.3g}\n{spec.text}")
            return Outcome("ok", "converted")
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - classifying every crash is the point
        o = crashed(exc, stage)
        return Outcome(o.status, f"from_torch: {o.detail}", o.trace)


def _difference(got, want) -> float:
    """Largest |got − want| / max(1, |want|); entries equal as values (infinities of one sign, both NaN) differ by 0."""
    import torch

    if got.shape != want.shape:
        return float("inf")
    same = (got == want) | (torch.isnan(got) & torch.isnan(want))
    diff = torch.where(same, 0.0, (got - want).abs() / want.abs().clamp_min(1.0))
    return float(torch.nan_to_num(diff, nan=float("inf")).max()) if want.numel() else 0.0


def minimise_recipe(r: dict, kind: str, time_limit: float = 30.0, tries: int = 60) -> dict:
    """A recipe with fewer steps that fails with the same ``kind`` (steps dropped one at a time)."""
    steps, i = list(r["steps"]), 0
    while i < len(steps) and tries > 0:
        trial = dict(r, steps=steps[:i] + steps[i + 1:])
        tries -= 1
        if trial["steps"] and run_torch(trial, time_limit).detail == kind:
            steps = trial["steps"]
        else:
            i += 1
    return dict(r, steps=steps)


def describe(r: dict) -> str:
    """The recipe as JSON and the module it builds."""
    module, args = build(r)
    shapes = ", ".join(str(list(a.shape)) for a in args)
    return f"{json.dumps(r)}\n# example inputs: {shapes}\n{module}\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rpn2c.runtime.fuzz_torch", description=__doc__.splitlines()[0])
    p.add_argument("--show", type=int, required=True, help="print the recipe and module of input SEED")
    p.add_argument("--run", action="store_true", help="also convert it and print the outcome")
    args = p.parse_args(argv)
    r = recipe(args.show)
    sys.stdout.write(describe(r))
    if args.run:
        o = run_torch(r)
        sys.stdout.write(f"# {o.status} {o.detail}\n{o.trace}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
