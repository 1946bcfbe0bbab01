"""What the commands that load data, checkpoints or models share (train, eval, predict, show, export): the error
guard, the spec with its model parameters, datasets, devices and checkpoints. Torch and the datasets are imported
inside the functions, so registering these commands costs ``rpn2c check`` nothing."""

from __future__ import annotations

import contextlib
import csv
import functools
import gc
import inspect
import math
import os
import sys
from pathlib import Path

from rpn2c.runtime.common import EXIT_SPEC, _err, _read, _Usage, budget_limits, parse_params

EXIT_INTERRUPTED = 130


def _guard(fn):
    """Turn the user-fixable errors of the training commands into messages and exit codes (no tracebacks)."""

    @functools.wraps(fn)
    def run(args) -> int:
        from rpn2c.errors import InputError
        from rpn2c.train.errors import TrainError
        from rpn2c.train.run import ConfigError

        try:
            with _start_up():
                return fn(args)
        except ConfigError as exc:  # a bad option or run folder: a usage error
            raise _Usage(str(exc)) from None
        except TrainError as exc:
            _err(f"rpn2c: error: {exc}")
            return EXIT_SPEC
        except InputError as exc:  # the data does not fit the compiled model (it names the input and the limit)
            _err(f"rpn2c: error: {exc}")
            return EXIT_SPEC
        except FileNotFoundError as exc:
            raise _Usage(f"no such file: {exc.filename or exc}") from None
        except KeyboardInterrupt:
            _err("rpn2c: interrupted")
            return EXIT_INTERRUPTED

    return run


@contextlib.contextmanager
def _threads(n: int | None):
    """Run with ``n`` torch intra-op threads (0/None: leave torch's setting), restoring the previous count."""
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


_RESUME = [False]  # whether the collector that _start_up paused is to resume once the model is built


@contextlib.contextmanager
def _start_up():
    """The cyclic garbage collector paused from a model command's start until its model is built (:func:`_compile`),
    then resumed with what is alive frozen (:func:`_settle_imports`): each full collection while torch, pydantic,
    the checker and the lowering are imported walks every object loaded before it (0.1–0.5 s apiece). At the end
    the collector is as it was."""
    was = gc.isenabled()
    _RESUME[0] = was
    gc.disable()
    try:
        yield
    finally:
        _RESUME[0] = False
        if was:
            gc.enable()


def _settle_imports() -> None:
    """Put what is alive now out of the garbage collector's reach once torch is imported (``gc.freeze``): its
    million objects live until the command ends, and every full collection walked them while the checker, the
    registry and the lowering were imported after it (a third of a second of a model command's start-up). The
    command line does this for itself; the library leaves a program's collector alone."""
    if "torch" in sys.modules:
        gc.freeze()


def _graph(args, params: dict | None = None):
    """The checked, optimised IR graph of ``args.spec`` with the model ``params`` (a checkpoint's), overridden by
    ``args.param`` (``--param``), and its text (SpecError propagates: exit 1; with params a last line names
    them)."""
    _settle_imports()
    from rpn2c.api import check_file
    from rpn2c.errors import SpecError
    from rpn2c.passes import optimize
    from rpn2c.train.errors import TrainError

    params = {**(params or {}), **parse_params(getattr(args, "param", None))}
    text = _read(args.spec)
    try:
        return optimize(check_file(args.spec, model=args.model, root=args.root, params=params or None,
                                   limits=budget_limits(args))), text
    except SpecError as exc:
        if not params:
            raise
        _err(exc.render(color=sys.stderr.isatty()))
        n = len(exc.diagnostics)
        given = ", ".join(f"{k}={v!r}" for k, v in params.items())
        raise TrainError(f"{n} error{'s' if n != 1 else ''} found with the model parameters {given} "
                         "(--param or the checkpoint)") from None


MAX_FIXES = 4  # further mismatches named after the first (each a re-check and a re-bind)


def _fit(exc, graph, spec_args, params: dict):
    """The model parameter that sets the dimension of the mismatch ``exc`` and its value for the data."""
    from rpn2c.runtime.dimension_fit import fit_dimension

    if exc.value is None:
        def dim(g):
            return g.node(g.outputs[0]).type.shape[exc.axis]
    else:
        def dim(g):
            return g.node(exc.value).type.shape[exc.axis]
    return fit_dimension(spec_args.spec, graph.name, spec_args.root, params, dim, exc.want, exc.have)


def _further_fixes(graph, spec_args, params: dict, rebind) -> list[str]:
    """The ``--param`` settings the data needs beyond those in ``params`` (which fix the mismatches found so far):
    the spec re-checked with them and bound again, until it binds or a mismatch has no fix found."""
    from rpn2c.api import check_file
    from rpn2c.errors import SpecError
    from rpn2c.train.binding import DimMismatch
    from rpn2c.train.errors import BindError

    more: list[str] = []
    for _ in range(MAX_FIXES):
        try:
            rebind(check_file(spec_args.spec, model=graph.name, root=spec_args.root, params=params))
            return more
        except DimMismatch as exc:
            fit = _fit(exc, graph, spec_args, params)
            if fit.param is None or fit.value is None or params.get(fit.param) == fit.value:
                return more
            params = {**params, fit.param: fit.value}
            more.append(f"--param {fit.param}={fit.value}")
        except (SpecError, BindError):  # another kind of refusal: the first fix is what can be said
            return more
    return more


@contextlib.contextmanager
def _named_dims(graph, spec_args, params: dict | None, *, trained: bool = False, rebind=None):
    """Say a data/spec size mismatch (:class:`rpn2c.train.binding.DimMismatch`) with the model parameter that sets
    the dimension and the ``--param`` that fixes it (``trained``: the model's parameters come from a checkpoint).
    ``rebind(graph)`` binds the data again: with it, the sizes the data needs after that fix are named too (a spec
    whose features and classes both differ from the data gets both settings in one message)."""
    from rpn2c.train.binding import DimMismatch

    try:
        yield
    except DimMismatch as exc:
        params = dict(params or {})
        fit = _fit(exc, graph, spec_args, params)
        if fit.param is None:
            raise
        named = exc.named(fit.param, fit.value, fit.why_not, trained)
        if rebind is None or trained or fit.value is None:
            raise named from None
        more = _further_fixes(graph, spec_args, {**params, fit.param: fit.value}, rebind)
        if more:
            raise type(named)(f"{named}; the data also needs {' and '.join(more)}") from None
        raise named from None


def _compile(graph, *, reference: bool = False):
    from rpn2c.lower.build import CompiledModel

    model = CompiledModel(graph, reference=reference)
    if _RESUME[0]:  # start-up is over: what it loaded stays out of the collector's walks
        _RESUME[0] = False
        _settle_imports()
        gc.enable()
    return model


def _data_options(items: list[str] | None) -> dict:
    """``KEY=VALUE`` strings -> a dict with int / float / bool values where they parse."""
    out: dict = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _Usage(f"--data-option {item}: expected KEY=VALUE (e.g. window=12)")
        low = value.lower()
        if low in ("true", "false"):
            out[key] = low == "true"
            continue
        for kind in (int, float):
            try:
                out[key] = kind(value)
                break
            except ValueError:
                continue
        else:
            out[key] = value
    return out


def _dataset(name: str, seed: int, options: dict | None = None):
    """A built-in dataset by name, or ``KIND:PATH`` for a user file (mnist, cifar, cora, planetoid, csv, ucr,
    text, ...: ``rpn2c.data.LOADERS``) read with the loader's ``options``."""
    from rpn2c import data

    kind, sep, path = name.partition(":")
    try:
        if sep and kind in data.LOADERS:
            opts = dict(options or {})
            if "seed" in inspect.signature(data.LOADERS[kind]).parameters:  # the loader draws a split
                opts.setdefault("seed", seed)
            return data.load_path(kind, os.path.expanduser(path), **opts)
        if options:
            raise _Usage(f"--data-option applies to user files (KIND:PATH), not to the built-in {name!r}")
        return data.load(name, seed=seed)
    except TypeError as exc:  # an option the loader does not take
        raise _Usage(f"--data-option for {kind!r}: {exc}") from None
    except ValueError as exc:
        msg = str(exc)
        if not sep and name.lower() in data.LOADERS:  # a user-file format named without its file
            msg = f"--data {name} reads your own files: give its path, --data {name.lower()}:PATH"
        elif not sep and "unknown dataset" in msg:
            listing = "\n".join(f"  {k:<14} {v}" for k, v in data.available().items())
            msg = (msg.split(" (available")[0] + f"\navailable datasets:\n{listing}\nor KIND:PATH for a user file, "
                   f"KIND one of {', '.join(data.LOADERS)}")
        raise _Usage(msg) from None
    except ImportError as exc:
        raise _Usage(str(exc)) from None
    except FileNotFoundError as exc:
        raise _Usage(f"dataset {name!r}: {exc}") from None


def _device(name: str, env=None):
    from rpn2c.train import distributed

    try:
        return distributed.resolve_device(name, env or distributed.DistEnv())
    except RuntimeError as exc:
        raise _Usage(f"--device {name}: {exc}") from None


def _same_options(name: str, cfg: dict) -> dict:
    """The training run's loader options when evaluating on the same user file."""
    return dict(cfg.get("data_options") or {}) if name == cfg.get("data") else {}



def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def _write_csv(path: Path, rows: list[dict]) -> None:
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)


def _load_checkpoint(path: str):
    from rpn2c.train import checkpoint

    if not Path(path).is_file():
        raise _Usage(f"no such checkpoint: {path}")
    return checkpoint.load(path)


def _restored_model(args, ckpt, *, reference: bool = False):
    """The spec compiled with the checkpoint's model parameters, its weights loaded (mismatch: exit 1)."""
    from rpn2c.train import checkpoint

    graph, _ = _graph(args, checkpoint.model_params(ckpt))
    model = _compile(graph, reference=reference)
    checkpoint.restore(ckpt, graph, model, path=args.checkpoint)
    return graph, model

