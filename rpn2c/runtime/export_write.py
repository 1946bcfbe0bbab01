"""A checked export: trace, write to a temporary file beside the target, load it back, compare, rename.

The program is compared with the module on fresh random inputs at the traced sizes and at another size of every
dim that stayed dynamic (``+1``, within the bounds the model sets), and only then renamed into place
(``os.replace``); a program that fails its check is removed, never left on disk. Dims are traced dynamic where the
model allows (``torch.export.Dim.AUTO``): a dim the trace specialises (a loop over its steps) is fixed, and where a
dynamic trace, conversion or check fails the export is retried with the dims the failure names static (else every
dim but the batch, then every dim), each retry's reason kept for the summary. What still fails is an
:class:`ExportError` located at the spec node the failure came from (the module running when torch raised, or the
node owning the parameter nearest the exported graph's node torch.onnx names), an input (a shape guard names it),
or else the model. ONNX's own steps are in :mod:`rpn2c.runtime.export_onnx`.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rpn2c.runtime.export_base import ExportError, quiet

TOLERANCE = {"float32": 1e-4, "float64": 1e-10}  # largest |difference| accepted, relative to max(1, |output|)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FX_NODE = re.compile(r"node %(\w+)")
_INPUT_AXIS = (re.compile(r"args_(\d+)\.size\(\)\[(\d+)\]"), re.compile(r"\['args'\]\[0\]\[(\d+)\]\.size\(\)\[(\d+)\]"))


_RUNTIME_LACKS = re.compile(r"NOT_IMPLEMENTED : Could not find an implementation for (\w+)\((?:.*?node with name "
                            r"'(?:node_)?(\w+)')?")


@dataclass
class Written:
    """What :func:`write_checked` wrote: the dims that stayed dynamic, the bounds the model put on them, the dims
    exported static with why, and each check's input shapes and largest difference (None: not checked)."""

    dynamic: list[str]
    bounds: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    static: list[tuple[list[str], str]] = field(default_factory=list)
    checks: list[tuple[str, float]] | None = None


class _Retry(Exception):
    """A failure that may come from a dynamic dim: retry with fewer."""

    def __init__(self, why: str, exc: BaseException, blamed: set[str]):
        super().__init__(why)
        self.why, self.exc, self.blamed = why, exc, blamed


# ------------------------------------------------------------------------------------------------ messages
def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from, outermost first."""
    out = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def reason(exc: BaseException) -> str:
    """The innermost cause's type and first line (torch's wrappers only say which step failed)."""
    for e in reversed(_chain(exc)):
        lines = [ln.strip() for ln in _ANSI.sub("", str(e)).splitlines() if ln.strip()]
        if lines:
            text = lines[0] if len(lines[0]) <= 300 else lines[0][:297] + "..."
            return f"{type(e).__name__}: {text}"
    return type(exc).__name__


def _blamed(exc: BaseException, axis_names) -> set[str]:
    """The spec dims a shape guard in the messages of ``exc`` names (``args_0.size()[1]`` is input 0's axis 1)."""
    found = set()
    for e in _chain(exc):
        for pattern in _INPUT_AXIS:
            for i, j in pattern.findall(str(e)):
                i, j = int(i), int(j)
                if i < len(axis_names) and j < len(axis_names[i]) and axis_names[i][j]:
                    found.add(axis_names[i][j])
    return found


def locate(exc: BaseException, model, graph, program=None, default: str = "") -> str:
    """Where in the spec ``exc`` came from: the innermost frame on its traceback running a node's module (as
    ``self`` or as the layer an inlined step reads), else the node of the parameter nearest upstream of the exported
    graph's node the message names, else an input a shape guard names, else ``default``."""
    modules = {id(m): name for name, m in model.named_modules() if name and _node(graph, name)}
    for e in _chain(exc):
        tb, found = e.__traceback__, None
        while tb is not None:
            found = next((modules[id(v)] for v in tb.tb_frame.f_locals.values() if id(v) in modules), found)
            tb = tb.tb_next
        if found:
            return str(_node(graph, found).span)
    node = _fx_origin(exc, program, graph) if program is not None else None
    if node is not None:
        return str(node.span)
    for e in _chain(exc):
        for pattern in _INPUT_AXIS:
            for i, _ in pattern.findall(str(e)):
                if int(i) < len(graph.inputs):
                    return str(graph.node(graph.inputs[int(i)]).span)
    return default


def _fx_origin(exc: BaseException, program, graph):
    """The spec node owning the parameter or buffer nearest upstream of the exported graph's node that a message
    in ``exc`` names (``Error when translating node %graph_mm``), else the one nearest downstream (an op on an
    input, such as the edge list's sort, feeds the head that reads it), or None."""
    sig = program.graph_signature
    owners = {k: _node(graph, v) for k, v in {**sig.inputs_to_parameters, **sig.inputs_to_buffers}.items()}
    fx = {n.name: n for n in program.graph.nodes}
    names = [name for e in _chain(exc) for name in _FX_NODE.findall(str(e)) if name in fx]
    for step in (lambda n: n.all_input_nodes, lambda n: list(n.users)):
        for name in names:
            frontier, seen = [fx[name]], {name}
            while frontier:
                for n in frontier:
                    for m in n.all_input_nodes:  # a parameter feeding this node or one on the way
                        if owners.get(m.name) is not None:
                            return owners[m.name]
                frontier = [m for n in frontier for m in step(n) if m.name not in seen]
                seen.update(m.name for m in frontier)
    return None


def _node(graph, path: str):
    """The spec node a module path belongs to (its longest dotted prefix that is a node id), or None."""
    parts = path.split(".")
    for k in range(len(parts), 0, -1):
        name = ".".join(parts[:k])
        if graph.g.has_node(name):
            return graph.node(name)
    return None


# ------------------------------------------------------------------------------------------------ trace
def trace(model, inputs, axis_names, dynamic, limits=None):
    """``torch.export.export`` of ``model`` on ``inputs``, every axis named in ``dynamic`` ``Dim.AUTO``, within
    ``limits`` (``{name: (fewest, most or None)}``, the sizes the model allows: ``rpn2c.runtime.axis_limits``)."""
    import torch
    from torch.export import Dim

    model.eval()
    spec = None
    if any(nm in dynamic for names in axis_names for nm in names):
        hint = {nm: _hint(Dim.AUTO, *(limits or {}).get(nm, (1, None))) for nm in dynamic}
        spec = (tuple({i: hint[nm] for i, nm in enumerate(names) if nm in dynamic} for names in axis_names),)
    with quiet():  # on copies: a failed trace leaves dynamic-dim marks on the tensors it saw
        return torch.export.export(model, tuple(x.clone() for x in inputs), dynamic_shapes=spec)


def _hint(auto, fewest: int, most: int | None):
    """``Dim.AUTO`` bounded by what the model allows: below 2 torch specialises a dim anyway, so only the bounds
    that say more are passed."""
    low, high = (fewest if fewest > 2 else None), (most if most is not None and most > 2 else None)
    return auto if low is None and high is None else auto(min=low, max=high)


def dynamic_dims(program, axis_names) -> tuple[list[str], dict[str, tuple[int, int | None]]]:
    """The spec dims whose axes stayed symbolic in ``program``, and the bounds the program puts on each of them
    (only those with an upper bound)."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int
    from torch.utils._sympy.numbers import int_oo

    user = set(program.graph_signature.user_inputs)
    placeholders = [p for p in program.graph.nodes if p.op == "placeholder" and p.name in user]
    found, bounds = [], {}
    for p, names in zip(placeholders, axis_names):
        for size, name in zip(p.meta["val"].shape, names):
            if name and not is_concrete_int(size) and name not in found:
                found.append(name)
                vr = program.range_constraints.get(size.node.expr)
                if vr is not None and vr.upper != int_oo:
                    bounds[name] = (int(vr.lower), int(vr.upper))
    return found, bounds


# ------------------------------------------------------------------------------------------------ formats
def _runner(fmt: str, path: Path):
    """A function running the written file on a tuple of inputs (None when onnxruntime is not installed)."""
    import torch

    if fmt == "onnx":
        from rpn2c.runtime.export_onnx import onnx_runner

        return onnx_runner(path)
    with quiet():
        module = torch.export.load(path).module()

    def run(inputs):
        with quiet():
            return module(*inputs)
    return run


def difference(ours, theirs) -> float:
    """Largest |a - b| / max(1, |a|) over every output."""
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, (tuple, list)) else (theirs,)
    if len(ours) != len(theirs):
        return float("inf")
    worst = 0.0
    for a, b in zip(ours, theirs):
        if a.shape != b.shape:
            return float("inf")
        a, b = a.detach().double(), b.detach().double()
        worst = max(worst, float(((a - b).abs() / a.abs().clamp_min(1.0)).max()) if a.numel() else 0.0)
    return worst


# ------------------------------------------------------------------------------------------------ the ladder
def write_checked(model, graph, fmt: str, out: Path, sizes: dict[str, int],
                  inputs_at: Callable[[dict[str, int], int], tuple], *, dynamic: bool = True,
                  tolerance: float = 1e-4, where: str = "", limits=None) -> Written:
    """Export ``model`` to ``out`` in ``fmt`` (``pt2`` or ``onnx``), checked, renamed into place only when the
    check passes. ``sizes``: the example size of every named dim; ``inputs_at(sizes, seed)``: random inputs and
    each input's axis names; ``where``: the model's location, for failures no node can be blamed for; ``limits``:
    ``{name: (fewest, most or None)}``, the sizes the model allows a dynamic dim."""
    inputs, axis_names = inputs_at(sizes, 0)
    want = [d for names in axis_names for d in names if d] if dynamic else []
    want = list(dict.fromkeys(want))
    static: list[tuple[list[str], str]] = []
    while True:
        try:
            written = _attempt(model, graph, fmt, out, sizes, inputs_at, inputs, axis_names, want, tolerance, where,
                               limits)
        except _Retry as r:  # only raised while some dim is dynamic: the ladder ends with none
            fewer = _fewer(want, r.blamed)
            static.append(([d for d in want if d not in fewer], f"with {', '.join(want)} dynamic {r.why}"))
            want = fewer
            continue
        written.static = static + written.static
        return written


def _fewer(want: list[str], blamed: set[str]) -> list[str]:
    """The dims to try dynamic next: without those a failure named, else the batch alone, else none."""
    if blamed & set(want):
        return [d for d in want if d not in blamed]
    if any(d != "B" for d in want) and "B" in want:
        return ["B"]
    return []


def _attempt(model, graph, fmt, out, sizes, inputs_at, inputs, axis_names, want: list[str], tolerance, where,
             limits=None):
    """One export with the dims in ``want`` dynamic: a :class:`_Retry` where the failure may be theirs."""
    program = None

    def fail(stage: str, exc: BaseException, retry: bool = True):
        why = f"{stage} ({reason(exc)})"
        if retry and want:
            return _Retry(why, exc, _blamed(exc, axis_names))
        try:
            place = locate(exc, model, graph, program, where)
        except Exception:  # noqa: BLE001 - the message matters more than its place
            place = where
        return ExportError(f"{place}: model '{graph.name}' cannot be exported to {fmt}: {why}")

    try:
        program = trace(model, inputs, axis_names, want, limits)
    except Exception as exc:  # noqa: BLE001 - torch.export raises many types; all end in a located message
        raise fail("torch.export cannot trace it", exc) from exc
    dynamic, bounds = dynamic_dims(program, axis_names)
    ones = [d for d in want if d not in dynamic and sizes.get(d) == 1]
    fixed = [d for d in want if d not in dynamic and d not in ones]
    static = [(fixed, f"the model's trace fixes {'it' if len(fixed) == 1 else 'them'} (a loop over its steps, "
                      "or a size the model sets)")] if fixed else []
    if ones:  # torch.export specialises every dimension whose example size is 1
        static.append((ones, "torch.export fixes a dimension whose example size is 1; an example size of 2 or "
                             "more (--dim) keeps it dynamic"))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.part"  # same folder: the rename is atomic
    try:
        try:
            if fmt == "pt2":
                import torch

                with quiet():
                    torch.export.save(program, tmp)
            else:
                from rpn2c.runtime.export_onnx import save_onnx

                save_onnx(program, tmp, graph)
        except ExportError:  # a package the format needs is missing: no retry helps
            raise
        except Exception as exc:  # noqa: BLE001 - an operator without an ONNX translation, among others
            raise fail("the ONNX conversion failed" if fmt == "onnx" else "torch.export.save failed", exc) from exc
        try:
            run = _runner(fmt, tmp)
        except Exception as exc:  # noqa: BLE001 - onnxruntime refuses the file (an operator it lacks)
            lacking = _RUNTIME_LACKS.search(str(exc))
            if lacking:  # the ONNX file is valid; onnxruntime has no kernel for one of its operators in this dtype
                named = RuntimeError(f"node %{lacking[2]}")  # the traced node it translates: where to blame
                named.__cause__ = exc
                raise fail(f"onnxruntime cannot run it: it has no kernel for {lacking[1]} in this dtype (export "
                           "with --dtype float32, or as pt2)", named, retry=False) from exc  # no dim helps
            raise fail("the written file does not load", exc) from exc
        checks = None if run is None else _check(model, graph, run, sizes, inputs_at, dynamic, bounds, tolerance,
                                                 fail)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return Written(dynamic, bounds, static, checks)


def _check(model, graph, run, sizes, inputs_at, dynamic, bounds, tolerance, fail) -> list[tuple[str, float]]:
    """The written program against the module on fresh inputs at the traced sizes, then at another size of each
    dynamic dim: a failure at the traced sizes is the program's; at other sizes, a dynamic dim's."""
    import torch

    other = dict(sizes)
    for d in dynamic:
        low, high = bounds.get(d, (0, None))
        other[d] = sizes[d] + 1 if high is None or sizes[d] < high else max(low, sizes[d] - 1)
    rounds = [(sizes, False)] + ([(other, True)] if other != sizes else [])
    done = []
    for at, varied in rounds:
        fresh, _ = inputs_at(at, len(done) + 1)
        shapes = ", ".join(f"{n}{list(x.shape)}" for n, x in zip(graph.inputs, fresh))
        with torch.no_grad():
            want = model(*fresh)
        try:
            got = run(fresh)
        except Exception as exc:  # noqa: BLE001 - a shape guard, an onnxruntime kernel it lacks ...
            raise fail(f"the written program fails on inputs {shapes}", exc, varied) from exc
        diff = difference(want, got)
        if not diff <= tolerance:
            exc = ArithmeticError(f"relative difference {diff:.3g} from the module")
            raise fail(f"the written program differs from the module on inputs {shapes}", exc, varied)
        done.append((shapes, diff))
    return done
