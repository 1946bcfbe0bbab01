"""A training run on disk: its options, its folder and its ``run.yaml``.

Options come in layers, later ones winning: the defaults < the resumed run's ``run.yaml`` < a ``--config`` file <
the command-line flags (``params`` merge by name). A run folder holds one run: training into a folder that already
holds one needs ``resume`` (continue it) or ``overwrite`` (clear it first); files of an earlier run (an exported
``checkpoint.pt2``, an old ``best.pt``) are never left beside a new run's.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from rpn2c.errors import did_you_mean

from .errors import TrainError

RUN_YAML = "run.yaml"
# options that decide what a resumed run computes: changing them cannot continue the same run
FIXED_ON_RESUME = ("data", "data_options", "params", "batch_size", "lr", "weight_decay", "schedule", "seed",
                   "strategy", "eval_batch_size", "val_fraction")
PATH_KEYS = ("spec", "root", "out", "metrics_out")
# what `rpn2c train` writes into a run folder, and what `rpn2c export` writes beside its checkpoints
RUN_FILES = ("checkpoint.pt", "best.pt", RUN_YAML, "metrics.csv", "metrics.json", "curves.png", "spec")
EXPORTS = ("checkpoint.pt2", "checkpoint.onnx", "best.pt2", "best.onnx")
MIN_VALIDATION = 20  # fewer validation items than this cannot tell epochs apart: warn


class ConfigError(TrainError):
    """A bad option, config file or run folder (a usage error on the command line: exit 2)."""


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(text).name if ":" in text else text).strip("_") or "data"


def data_path(data: str, resolve) -> str:
    """``KIND:PATH`` with ``resolve(PATH)``; a built-in name unchanged."""
    from rpn2c.data.catalog import FILE_KINDS

    kind, sep, path = data.partition(":")
    return f"{kind}:{resolve(os.path.expanduser(path))}" if sep and kind in FILE_KINDS else data


def embedding_path(options: dict | None, resolve) -> dict | None:
    """``data_options`` with the file of its ``embedding`` (``glove:FILE``) made ``resolve(FILE)``."""
    value = (options or {}).get("embedding")
    kind, sep, file = value.partition(":") if isinstance(value, str) else ("", "", "")
    if not sep or not file:
        return options
    return {**options, "embedding": f"{kind}:{resolve(os.path.expanduser(file))}"}


def text_length(cfg, graph):
    """``cfg`` with ``data_options["length"]`` set to the spec's declared length T for ``text:`` data that does
    not give one (a ``sequence[B, T, F]`` / ``tokens[B, T]`` input with a number T), so the texts are cut or
    padded to what the spec takes; ``cfg`` itself otherwise."""
    if not cfg.data.startswith("text:") or "length" in cfg.data_options:
        return cfg
    lengths = {graph.node(n).type.shape[1] for n in graph.inputs
               if graph.node(n).type.kind in ("items", "tokens") and graph.node(n).type.batched}
    if len(lengths) != 1 or not isinstance(next(iter(lengths)), int):
        return cfg
    return cfg.model_copy(update={"data_options": {**cfg.data_options, "length": lengths.pop()}})


def _errors(exc, where: str | None) -> str:
    from .config import RunConfig

    parts = []
    for e in exc.errors():
        name = ".".join(map(str, e["loc"]))
        if not e["loc"]:
            parts.append((f"{where}: " if where else "") + e["msg"].removeprefix("Value error, "))
        elif where is None:
            parts.append(f"--{str(e['loc'][0]).replace('_', '-')}: {e['msg']}")
        elif e["type"] == "extra_forbidden":
            near = did_you_mean(name, list(RunConfig.model_fields))
            parts.append(f"{where}: unknown option '{name}'" + (f" ({near})" if near else "")
                         + f"; the options are: {', '.join(RunConfig.model_fields)}")
        else:
            parts.append(f"{where}: {name or 'the file'}: {e['msg']}")
    return "; ".join(parts)


def validated(values: dict, where: str | None):
    """``values`` as a RunConfig; ConfigError naming each bad option (``where``: the file, None: the flags)."""
    from pydantic import ValidationError

    from .config import RunConfig

    try:
        return RunConfig(**values)
    except ValidationError as exc:
        raise ConfigError(_errors(exc, where)) from None


def read_config(path: str) -> dict:
    """The options of a config file (a run folder means its run.yaml), relative paths made relative to the file's
    folder; unknown keys and bad values are ConfigErrors naming them."""
    import yaml

    p = Path(path)
    if p.is_dir():
        p = p / RUN_YAML
    if not p.is_file():
        raise ConfigError(f"--config {path}: no such file")
    try:
        values = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--config {p}: not readable YAML ({str(exc).splitlines()[0]})") from None
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"--config {p}: expected a mapping of option: value, got {type(values).__name__}")
    validated(values, str(p))

    def here(v: str) -> str:
        return v if os.path.isabs(v) else os.path.normpath(os.path.join(p.parent, v))

    for key in PATH_KEYS:
        if isinstance(values.get(key), str):
            values[key] = here(values[key])
    if isinstance(values.get("data"), str):
        values["data"] = data_path(values["data"], here)
    if isinstance(values.get("data_options"), dict):
        values["data_options"] = embedding_path(values["data_options"], here)
    return values


def merge(*layers: dict) -> dict:
    """Later layers win; ``params`` merge by name; a layer naming a spec without a root drops the earlier root."""
    out: dict = {}
    for layer in layers:
        if "spec" in layer and "root" not in layer:
            out.pop("root", None)
        for k, v in layer.items():
            out[k] = {**out.get(k, {}), **v} if k == "params" else v
    return out


def default_out(cfg) -> Path:
    return Path(cfg.out) if cfg.out else Path("runs") / f"{Path(cfg.spec).stem}-{slug(cfg.data)}"


def resolve(given: dict, config: str | None = None, resume: str | None = None):
    """(RunConfig, checkpoint to resume or None, its path) from the flags ``given`` (None values left out), a
    config file and ``resume`` (None: a new run; "": the run folder the options name; else a folder or file)."""
    validated(given, None)
    file = read_config(config) if config else {}
    ckpt = path = None
    base: dict = {}
    if resume is not None:
        target = Path(resume) if resume else None
        if target is None:
            first = merge(file, given)
            if "spec" not in first or ("data" not in first and "out" not in first):
                raise ConfigError("--resume without a path resumes --out DIR (or runs/<spec-stem>-<data>/): give "
                                  "SPEC and --data, --out, or --resume RUN_DIR")
            target = default_out(validated(first, None))
        path = target / "checkpoint.pt" if target.is_dir() else target
        if not path.is_file():
            raise ConfigError(f"--resume {resume or target}: no checkpoint at {path}")
        from . import checkpoint  # torch: only a resumed run reads a checkpoint

        ckpt = checkpoint.load(path)
        if "train_state" not in ckpt:
            raise ConfigError(f"--resume {path}: this checkpoint holds no training state (best.pt keeps only the "
                              f"best weights); resume from {path.parent / 'checkpoint.pt'}")
        recorded = path.parent / RUN_YAML
        base = read_config(str(recorded)) if recorded.is_file() else {**ckpt["config"], "out": str(path.parent)}
    merged = merge(base, file, given)
    if "spec" not in merged:
        raise ConfigError("give the SPEC to train, --config RUN_YAML or --resume RUN_DIR")
    if "data" not in merged:
        raise ConfigError("the following arguments are required: --data (or --config RUN_YAML)")
    merged["data"] = data_path(merged["data"], os.path.abspath)
    if merged.get("data_options"):
        merged["data_options"] = embedding_path(merged["data_options"], os.path.abspath)
    cfg = validated(merged, None)
    if ckpt is not None:
        trained = ckpt["config"]
        changed = [k for k in FIXED_ON_RESUME if k in trained and getattr(cfg, k) != trained[k]]
        if changed:
            raise ConfigError("--resume continues the run with its own settings; "
                              + ", ".join(f"{k} was {trained[k]!r}, now {getattr(cfg, k)!r}" for k in changed)
                              + " (when resuming, epochs, patience, device, threads, compile and the output "
                                "options may change)")
    return cfg, ckpt, path


# ------------------------------------------------------------------------------------------------ the folder
def earlier_run(out_dir: Path) -> list[str]:
    """The files of a run (or of its exports) already in ``out_dir``, sorted."""
    if not out_dir.is_dir():
        return []
    return sorted(p.name for p in out_dir.iterdir() if p.name in RUN_FILES + EXPORTS)


def _describe(out_dir: Path) -> str:
    """'a 20-epoch run of mlp on iris' from the folder's metrics.json, or its files."""
    import json

    try:
        summary = json.loads((out_dir / "metrics.json").read_text(encoding="utf-8"))
        return (f"a {summary['stopped']['epoch']}-epoch run of model '{summary['model']}' on "
                f"{summary['data']}")
    except (OSError, ValueError, KeyError, TypeError):
        return "a run (" + ", ".join(earlier_run(out_dir)) + ")"


def claim(out_dir: Path, *, resume: bool, overwrite: bool, remove: bool = True) -> list[str]:
    """Make ``out_dir`` ready for a run; returns the files removed (``remove=False``: only check). A folder holding
    another run is refused (ConfigError) unless ``overwrite`` (its run files are removed; other files stay); a
    resumed run loses only its exported programs, which its new weights make stale."""
    found = earlier_run(out_dir)
    if not found:
        return []
    if resume:
        stale = [n for n in found if n in EXPORTS]
    elif overwrite:
        stale = found
    else:
        raise ConfigError(f"{out_dir} already holds {_describe(out_dir)}; continue it with `rpn2c train --resume "
                          f"{out_dir}`, replace it with --overwrite, or train into another folder with --out DIR")
    for name in stale if remove else ():
        p = out_dir / name
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()
    return stale


# ------------------------------------------------------------------------------------------------ run.yaml
def write_run_yaml(out_dir: Path, cfg, files: list[Path], root: Path, split: dict | None = None) -> None:
    """``out_dir/run.yaml``: every option, with copies of the spec ``files`` (under ``root``) in ``out_dir/spec/``
    so the folder alone repeats the run (``rpn2c train --config out_dir/run.yaml``); ``split`` (the sizes of the
    training, validation and test splits) goes in a comment."""
    import yaml

    spec = Path(cfg.spec)
    copies = out_dir / "spec"
    for f in files:
        dest = copies / f.relative_to(root)
        if f != dest.resolve():
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(f.read_text(encoding="utf-8"), encoding="utf-8")
    values = cfg.model_dump(mode="json")
    values.update(spec=(Path("spec") / spec.resolve().relative_to(root)).as_posix(), root="spec", out=".",
                  data=data_path(cfg.data, os.path.abspath))
    if cfg.metrics_out:
        values["metrics_out"] = os.path.abspath(cfg.metrics_out)
    first = ("spec", "model", "root", "params", "data", "data_options")
    ordered = {k: values[k] for k in first} | {k: v for k, v in values.items() if k not in first}
    header = (f"# rpn2c train: every option of this run ({cfg.spec} on {cfg.data}).\n"
              "# Repeat it with `rpn2c train --config run.yaml` (flags override these values); relative paths are\n"
              "# relative to this folder, and spec/ holds copies of the spec files.\n")
    if split:
        header += f"# split: {describe_split(split)}\n"
    tmp = out_dir / (RUN_YAML + ".tmp")
    tmp.write_text(header + yaml.safe_dump(ordered, sort_keys=False, allow_unicode=True), encoding="utf-8")
    os.replace(tmp, out_dir / RUN_YAML)


# ------------------------------------------------------------------------------------------------ the split
def split_sizes(dataset, fraction: float, seed: int) -> dict:
    """``{"train", "validation", "test"}``: how many items (nodes of a graph) each split holds, as ``fit`` draws
    them (TrainError when the validation split would leave a part empty)."""
    from . import holdout

    part = holdout.split(dataset, fraction, seed)
    test = dataset.test[3].sum() if dataset.task == "node_classification" else dataset.test[0].shape[0]
    return {"train": int(part.train_idx.size), "validation": int(part.val_idx.size), "test": int(test)}


def describe_split(split: dict) -> str:
    return f"{split['train']} training, {split['validation']} validation, {split['test']} test items"


def split_warning(split: dict, fraction: float) -> str | None:
    """A warning when the validation split is too small to choose the best epoch by, else None."""
    n = split["validation"]
    if not fraction or n >= MIN_VALIDATION:
        return None
    return (f"warning: the validation split holds only {n} item{'s' if n != 1 else ''} (--val-fraction {fraction}); "
            f"best.pt is chosen on it, so it may not be the better model: raise --val-fraction (fewer than "
            f"{MIN_VALIDATION} items cannot tell epochs apart) or use --val-fraction 0 to keep the last epoch")
