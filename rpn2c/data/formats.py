"""Readers for standard on-disk dataset formats that users bring (nothing is downloaded).

Single-file readers return tensors; the ``load_*`` functions assemble a `Dataset`; `load_path` dispatches on a
format name. Every reader validates what it reads and raises ``ValueError`` (``FileNotFoundError`` for missing
files) with the offending path and reason. Pickle-based formats go through `safe_load`, never ``pickle.load``.
Citation graphs live in ``citation.py``, text classification and GloVe tables in ``text.py``.
"""

from __future__ import annotations

import csv
import difflib
import functools
import gzip
import io
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from .citation import load_citation, load_planetoid
from .dataset import Dataset, fit_standardizer, forecasting_dataset
from .safe_pickle import UnsafePickleError, safe_load
from .text import load_text

PathLike = str | os.PathLike[str]

# ---------------------------------------------------------------------------------------------------- MNIST IDX

_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def _read_maybe_gzip(path: Path) -> bytes:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise ValueError(f"{path}: corrupt gzip stream ({exc})") from exc
    return raw


def read_idx(path: PathLike) -> torch.Tensor:
    """Read one IDX file (the MNIST ``*-idx?-ubyte`` format; gzip detected by its magic bytes, not the name).

    Layout: magic ``00 00 <type> <ndim>``, ``ndim`` big-endian uint32 sizes, then the big-endian payload. Types:
    0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64. Returns a tensor of that dtype and
    shape; a bad magic number, a truncated header, or a payload size that disagrees with the header raises.
    """
    p = Path(path)
    raw = _read_maybe_gzip(p)
    if len(raw) < 4:
        raise ValueError(f"{p}: not an IDX file ({len(raw)} bytes, the magic number alone needs 4)")
    if raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES or raw[3] == 0:
        raise ValueError(f"{p}: bad IDX magic number {raw[:4].hex()} (expected 0000TTNN with type TT in "
                         f"{sorted(hex(k) for k in _IDX_DTYPES)} and NN >= 1 dimensions)")
    ndim, dtype = raw[3], np.dtype(_IDX_DTYPES[raw[2]])
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{p}: truncated IDX header ({len(raw)} bytes, {ndim} dimensions need {header})")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    got = len(raw) - header
    if got != expected:
        what = "truncated" if got < expected else "has trailing bytes"
        raise ValueError(f"{p}: IDX payload {what}: header says shape {shape} of {dtype.name} = {expected} bytes, "
                         f"file has {got}")
    arr = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return torch.from_numpy(arr.astype(dtype.newbyteorder("="), copy=True))


def _find_one(directory: Path, prefix: str, must_contain: str = "") -> Path:
    found = sorted(f for f in directory.iterdir()
                   if f.is_file() and f.name.startswith(prefix) and must_contain in f.name)
    if not found:
        raise FileNotFoundError(f"{directory}: no file named {prefix}*{must_contain}*")
    plain = [f for f in found if not f.name.endswith(".gz")]
    return (plain or found)[0]


def _standardize_images(xtr: torch.Tensor, xte: torch.Tensor, meta: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x - mean) / std`` per channel with the training images' statistics (kept in ``meta``)."""
    mean, std = fit_standardizer(xtr.numpy(), axis=(0, 2, 3))
    m = torch.from_numpy(mean.astype(np.float32)).view(1, -1, 1, 1)
    s = torch.from_numpy(std.astype(np.float32)).view(1, -1, 1, 1)
    meta.update(mean=m.flatten(), std=s.flatten(), standardized=True)
    return (xtr - m) / s, (xte - m) / s


def load_mnist(path: PathLike, *, name: str = "mnist", standardize: bool = False) -> Dataset:
    """MNIST-layout directory (also Fashion-/K-MNIST): ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
    ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte`` (each optionally ``.gz``; ``.`` before ``idx`` also
    accepted). Images become float32 ``[n, 1, H, W]`` = pixel / 255 (``standardize``: then z-scored with the
    training pixels' mean and std, the paper's mean-std normalisation), labels int64; the file split is kept."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: expected a directory holding the four MNIST IDX files")
    splits = []
    for prefix in ("train", "t10k"):
        images = read_idx(_find_one(root, f"{prefix}-images", "ubyte"))
        labels = read_idx(_find_one(root, f"{prefix}-labels", "ubyte"))
        if images.ndim != 3 or labels.ndim != 1:
            raise ValueError(f"{root}: {prefix} images must be [n, H, W] and labels [n], got "
                             f"{tuple(images.shape)} and {tuple(labels.shape)}")
        if images.shape[0] != labels.shape[0]:
            raise ValueError(f"{root}: {images.shape[0]} {prefix} images but {labels.shape[0]} labels")
        if images.dtype != torch.uint8:
            raise ValueError(f"{root}: {prefix} images must be uint8 IDX (type 0x08), got {images.dtype}")
        splits.append((images.unsqueeze(1).to(torch.float32) / 255.0, labels.to(torch.int64)))
    (xtr, ytr), (xte, yte) = splits
    if int(torch.cat([ytr, yte]).min()) < 0:
        raise ValueError(f"{root}: negative labels")
    k = int(torch.cat([ytr, yte]).max()) + 1
    h, w = xtr.shape[-2:]
    meta: dict[str, Any] = {"source": str(root)}
    if standardize:
        xtr, xte = _standardize_images(xtr, xte, meta)
    return Dataset(name=name, task="classification", train=(xtr, ytr), test=(xte, yte), num_classes=k,
                   target_dim=None, input_spec=f"image[B, 1, {h}, {w}]",
                   description=f"IDX images from {root}", meta=meta)


# ------------------------------------------------------------------------------------------------------ CIFAR


def _str_keys(d: dict) -> dict:
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in d.items()}


def _decode_names(names: Any) -> list[str]:
    return [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in names]


def read_cifar_batch(path: PathLike, *, label_key: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One CIFAR python batch (a pickled dict; read with `safe_load`): ``data`` uint8 [n, 3072] row-major
    R, G, B planes of 32x32 -> uint8 ``[n, 3, 32, 32]``; labels from ``label_key`` (default ``labels`` for
    CIFAR-10, ``fine_labels`` for CIFAR-100; ``coarse_labels`` for the 20 superclasses) -> int64 ``[n]``."""
    p = Path(path)
    try:
        batch = safe_load(p)
    except UnsafePickleError as exc:
        raise UnsafePickleError(f"{p}: {exc}") from exc
    if not isinstance(batch, dict):
        raise ValueError(f"{p}: a CIFAR batch must be a pickled dict, got {type(batch).__name__}")
    batch = _str_keys(batch)
    if label_key is None:
        label_key = next((k for k in ("labels", "fine_labels") if k in batch), "labels")
    if "data" not in batch or label_key not in batch:
        raise ValueError(f"{p}: CIFAR batch needs keys 'data' and {label_key!r}, has {sorted(batch)}")
    data, labels = batch["data"], batch[label_key]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise ValueError(f"{p}: 'data' must be a uint8 array [n, 3072], got "
                         f"{getattr(data, 'dtype', type(data).__name__)} {getattr(data, 'shape', '')}")
    try:
        y = np.asarray(labels, dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{p}: {label_key!r} must be a list of integers") from exc
    if y.shape != (data.shape[0],):
        raise ValueError(f"{p}: {data.shape[0]} images but {label_key!r} has shape {y.shape}")
    if y.size and y.min() < 0:
        raise ValueError(f"{p}: negative labels in {label_key!r}")
    return torch.from_numpy(data.reshape(-1, 3, 32, 32).copy()), torch.from_numpy(y)


def load_cifar(path: PathLike, *, coarse: bool = False, name: str | None = None,
               standardize: bool = False) -> Dataset:
    """CIFAR python directory: ``cifar-10-batches-py`` (``data_batch_*`` + ``test_batch``, names from
    ``batches.meta``) or ``cifar-100-python`` (``train`` + ``test``, names from ``meta``; ``coarse`` selects the
    20 superclasses). Images become float32 ``[n, 3, 32, 32]`` = pixel / 255 (``standardize``: then z-scored per
    channel with the training images' statistics)."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: expected a CIFAR python directory")
    if (root / "test_batch").is_file():
        train_files = sorted(root.glob("data_batch_*"), key=lambda f: (len(f.name), f.name))
        if not train_files:
            raise FileNotFoundError(f"{root}: has test_batch but no data_batch_* files")
        test_file, meta_file, label_key, names_key = root / "test_batch", root / "batches.meta", "labels", "label_names"
        default_name, k = "cifar10", 10
    elif (root / "train").is_file() and (root / "test").is_file():
        train_files, test_file, meta_file = [root / "train"], root / "test", root / "meta"
        label_key = "coarse_labels" if coarse else "fine_labels"
        names_key = "coarse_label_names" if coarse else "fine_label_names"
        default_name, k = ("cifar100_coarse", 20) if coarse else ("cifar100", 100)
    else:
        raise FileNotFoundError(f"{root}: neither a CIFAR-10 (data_batch_*, test_batch) nor a CIFAR-100 "
                                "(train, test) python directory")
    parts = [read_cifar_batch(f, label_key=label_key) for f in train_files]
    xtr, ytr = torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])
    xte, yte = read_cifar_batch(test_file, label_key=label_key)
    meta: dict[str, Any] = {"source": str(root)}
    if meta_file.is_file():
        m = safe_load(meta_file)
        if isinstance(m, dict) and names_key in _str_keys(m):
            meta["class_names"] = _decode_names(_str_keys(m)[names_key])
    k = max(k, len(meta.get("class_names", ())), int(torch.cat([ytr, yte]).max()) + 1)
    ftr, fte = xtr.to(torch.float32) / 255.0, xte.to(torch.float32) / 255.0
    if standardize:
        ftr, fte = _standardize_images(ftr, fte, meta)
    return Dataset(name=name or default_name, task="classification", train=(ftr, ytr), test=(fte, yte),
                   num_classes=k, target_dim=None, input_spec="image[B, 3, 32, 32]",
                   description=f"CIFAR python batches from {root}", meta=meta)


# ------------------------------------------------------------------------------------------------- CSV series


def _sniff_delimiter(first_line: str) -> str | None:
    for d in (",", ";", "\t"):
        if d in first_line:
            return d
    return None  # whitespace


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def read_csv_series(path: PathLike, *, delimiter: str | None = None, header: bool | None = None,
                    columns: Sequence[str | int] | None = None) -> tuple[torch.Tensor, list[str]]:
    """A time series stored one time step per row. Returns (values float64 ``[T, F]``, column names).

    ``delimiter`` defaults to the first of ``, ; \\t`` in the first line, else whitespace; ``header`` defaults to
    'the first row has a non-numeric field'; blank lines and lines starting with ``#`` are skipped. Without
    ``columns`` every numeric column is kept (a column is numeric when its first data value parses as a float;
    e.g. a date column is dropped); ``columns`` picks by name or index. An empty or non-numeric value in a kept
    column raises with its data-row number.
    """
    p = Path(path)
    text = p.read_text(encoding="utf-8-sig")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        raise ValueError(f"{p}: no data rows")
    delim = delimiter if delimiter is not None else _sniff_delimiter(lines[0])
    if delim is None:
        rows = [ln.split() for ln in lines]
    else:
        rows = [[c.strip() for c in r] for r in csv.reader(io.StringIO("\n".join(lines)), delimiter=delim)]
    if header is None:
        header = not all(_is_number(c) for c in rows[0])
    names = rows[0] if header else [f"c{i}" for i in range(len(rows[0]))]
    data = rows[1:] if header else rows
    if not data:
        raise ValueError(f"{p}: header but no data rows")
    width = len(names)
    for i, r in enumerate(data):
        if len(r) != width:
            raise ValueError(f"{p}: data row {i + 1} has {len(r)} fields, expected {width}")
    if columns is None:
        keep = [j for j in range(width) if _is_number(data[0][j])]
    else:
        keep = []
        for c in columns:
            if isinstance(c, int):
                if not -width <= c < width:
                    raise ValueError(f"{p}: column index {c} out of range for {width} columns")
                keep.append(c % width)
            elif c in names:
                keep.append(names.index(c))
            else:
                hint = difflib.get_close_matches(str(c), names, n=1)
                raise ValueError(f"{p}: no column {c!r}" + (f"; did you mean {hint[0]!r}?" if hint else ""))
    if not keep:
        raise ValueError(f"{p}: no numeric columns")
    out = np.empty((len(data), len(keep)), dtype=np.float64)
    for i, r in enumerate(data):
        for k, j in enumerate(keep):
            try:
                out[i, k] = float(r[j])
            except ValueError:
                raise ValueError(f"{p}: data row {i + 1}, column {names[j]!r}: {r[j]!r} is not a number "
                                 "(missing values are not supported)") from None
    return torch.from_numpy(out), [names[j] for j in keep]


def load_csv_series(path: PathLike, *, window: int = 16, horizon: int = 1,
                    target: Sequence[str | int] | None = None, test_fraction: float = 0.2,
                    standardize: bool = True, delimiter: str | None = None, header: bool | None = None,
                    columns: Sequence[str | int] | None = None, name: str | None = None) -> Dataset:
    """Forecasting samples from a CSV series: inputs ``[n, window, F]`` -> the values ``horizon`` steps after the
    window (``target`` columns, default all kept columns), split chronologically (`forecasting_dataset`)."""
    # from the command line one value: --data-option target=Open, columns=Open,High or an index
    columns, target = (v.split(",") if isinstance(v, str) else [v] if isinstance(v, int) else v
                       for v in (columns, target))
    values, names = read_csv_series(path, delimiter=delimiter, header=header, columns=columns)
    tcols = None
    if target is not None:
        tcols = []
        for t in target:
            if isinstance(t, int):
                if not -len(names) <= t < len(names):
                    raise ValueError(f"{path}: target index {t} out of range for {len(names)} columns")
                tcols.append(t % len(names))
            elif t in names:
                tcols.append(names.index(t))
            else:
                raise ValueError(f"{path}: target column {t!r} is not among the kept columns {names}")
        tcols = np.asarray(tcols)
    return forecasting_dataset(name or Path(path).stem, values.numpy(), window=window, horizon=horizon,
                               test_fraction=test_fraction, target_columns=tcols, standardize=standardize,
                               description=f"CSV series {path}",
                               meta={"columns": names,
                                     "target_columns": [names[i] for i in (tcols if tcols is not None
                                                                           else range(len(names)))]})


# ------------------------------------------------------------------------------------ UCR / UEA .ts (sktime)


class TsData(NamedTuple):
    """A ``.ts`` file: ``x`` float32 ``[n, T, C]`` (time-major, channels last), ``labels`` the raw label strings
    per series, ``class_labels`` the header's declared classes (None for regression files)."""

    x: torch.Tensor
    labels: list[str]
    class_labels: list[str] | None


def read_ts(path: PathLike) -> TsData:
    """Read an equal-length ``.ts`` file (the UCR/UEA archive format used by sktime/aeon): ``@`` header lines
    (``@classLabel true a b ...`` or ``@targetLabel true``), then ``@data`` rows ``dim1:dim2:...:label`` with
    comma-separated values. Unequal-length, timestamped and missing-value files raise ValueError."""
    p = Path(path)
    class_labels: list[str] | None = None
    has_label, in_data = False, False
    series: list[list[list[float]]] = []
    labels: list[str] = []
    with p.open(encoding="utf-8", errors="replace") as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if not in_data:
                if not line.startswith("@"):
                    raise ValueError(f"{p}:{lineno}: expected an @ header line before @data")
                tokens = line.split()
                key = tokens[0].lower()
                flag = tokens[1].lower() if len(tokens) > 1 else ""
                if key == "@data":
                    in_data = True
                elif key == "@timestamps" and flag == "true":
                    raise ValueError(f"{p}: timestamped .ts files are not supported")
                elif key == "@equallength" and flag == "false":
                    raise ValueError(f"{p}: unequal-length .ts files are not supported")
                elif key == "@classlabel" and flag == "true":
                    class_labels, has_label = tokens[2:], True
                elif key == "@targetlabel" and flag == "true":
                    has_label = True
                continue
            parts = line.split(":")
            if has_label:
                labels.append(parts[-1].strip())
                parts = parts[:-1]
            try:
                dims = [[float(v) for v in d.split(",")] for d in parts]
            except ValueError as exc:
                raise ValueError(f"{p}:{lineno}: non-numeric value ({exc}); missing values are not supported") \
                    from None
            if series and (len(dims) != len(series[0]) or any(len(d) != len(series[0][0]) for d in dims)):
                raise ValueError(f"{p}:{lineno}: series shape differs from the first series")
            if len({len(d) for d in dims}) != 1:
                raise ValueError(f"{p}:{lineno}: dimensions of unequal length")
            series.append(dims)
    if not series:
        raise ValueError(f"{p}: no @data rows")
    x = np.asarray(series, dtype=np.float32).transpose(0, 2, 1)  # [n, C, T] -> [n, T, C]
    if not np.isfinite(x).all():
        raise ValueError(f"{p}: NaN or inf values")
    if class_labels is not None:
        unknown = sorted(set(labels) - set(class_labels))
        if unknown:
            raise ValueError(f"{p}: labels {unknown[:5]} are not declared in @classLabel")
    return TsData(torch.from_numpy(np.ascontiguousarray(x)), labels, class_labels)


def load_ucr(path: PathLike, *, standardize: bool = True, name: str | None = None) -> Dataset:
    """A ``<NAME>_TRAIN.ts`` / ``<NAME>_TEST.ts`` pair (``path``: their directory or the TRAIN file), keeping the
    archive's own split. Classification when the header declares class labels (classes indexed in declaration
    order), regression on ``@targetLabel`` files. With ``standardize`` each channel is z-scored with the mean/std
    over all training series and time steps."""
    p = Path(path)
    if p.is_dir():
        found = sorted(p.glob("*_TRAIN.ts"))
        if len(found) != 1:
            raise FileNotFoundError(f"{p}: expected exactly one *_TRAIN.ts file, found {len(found)}")
        p = found[0]
    stem = p.name[: -len("_TRAIN.ts")] if p.name.endswith("_TRAIN.ts") else p.stem
    test_path = p.with_name(f"{stem}_TEST.ts")
    if not p.is_file() or not test_path.is_file():
        raise FileNotFoundError(f"{p}: needs {stem}_TRAIN.ts and {stem}_TEST.ts side by side")
    tr, te = read_ts(p), read_ts(test_path)
    if tr.x.shape[1:] != te.x.shape[1:]:
        raise ValueError(f"{p}: train series {tuple(tr.x.shape[1:])} and test series {tuple(te.x.shape[1:])} differ")
    xtr, xte = tr.x.numpy().astype(np.float64), te.x.numpy().astype(np.float64)
    meta: dict[str, Any] = {"source": str(p.parent), "standardized": standardize}
    if standardize:
        mean, std = fit_standardizer(xtr, axis=(0, 1))
        xtr, xte = (xtr - mean) / std, (xte - mean) / std
        meta.update(mean=torch.from_numpy(mean.astype(np.float32)), std=torch.from_numpy(std.astype(np.float32)))
    def to_t(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))

    t_len, ch = tr.x.shape[1], tr.x.shape[2]
    common: dict[str, Any] = {"name": name or stem, "input_spec": f"sequence[B, {t_len}, {ch}]",
                              "description": f"UCR/UEA .ts archive {stem} ({p.parent})"}
    if tr.class_labels is not None:
        classes = tr.class_labels
        lookup = {c: i for i, c in enumerate(classes)}
        missing = sorted(set(te.labels) - set(lookup))
        if missing:
            raise ValueError(f"{test_path}: labels {missing[:5]} not declared in the TRAIN header")
        ytr = torch.tensor([lookup[v] for v in tr.labels], dtype=torch.int64)
        yte = torch.tensor([lookup[v] for v in te.labels], dtype=torch.int64)
        return Dataset(task="classification", train=(to_t(xtr), ytr), test=(to_t(xte), yte),
                       num_classes=len(classes), target_dim=None, meta=dict(meta, class_names=list(classes)),
                       **common)
    try:
        ytr = torch.tensor([float(v) for v in tr.labels], dtype=torch.float32).unsqueeze(1)
        yte = torch.tensor([float(v) for v in te.labels], dtype=torch.float32).unsqueeze(1)
    except ValueError as exc:
        raise ValueError(f"{p}: regression targets must be numbers") from exc
    if ytr.shape[0] != xtr.shape[0] or yte.shape[0] != xte.shape[0]:
        raise ValueError(f"{p}: file has no @classLabel / @targetLabel line, so no targets")
    return Dataset(task="regression", train=(to_t(xtr), ytr), test=(to_t(xte), yte), num_classes=None,
                   target_dim=1, meta=meta, **common)


# ---------------------------------------------------------------------------------------------------- dispatch

LOADERS: dict[str, Callable[..., Dataset]] = {
    "mnist": load_mnist,
    "cifar": load_cifar,
    "cifar10": load_cifar,
    "cora": load_citation,
    "citeseer": functools.partial(load_citation, name="citeseer"),
    "pubmed": functools.partial(load_citation, name="pubmed"),
    "planetoid": load_planetoid,
    "csv": load_csv_series,
    "ucr": load_ucr,
    "text": load_text,
}


def load_path(kind: str, path: PathLike, **options: Any) -> Dataset:
    """Load a user dataset of format ``kind`` from ``path``; ``options`` go to that format's loader:
    mnist -> `load_mnist`, cifar / cifar10 -> `load_cifar`, cora / citeseer / pubmed -> `load_citation`
    (Planetoid ``ind.<name>.*`` files or the LINQS ``.content``/``.cites`` pair), planetoid -> `load_planetoid`,
    csv -> `load_csv_series`, ucr -> `load_ucr`, text -> `load_text` (``embedding="glove:FILE"``)."""
    loader = LOADERS.get(kind)
    if loader is None:
        hint = difflib.get_close_matches(kind, list(LOADERS), n=1)
        raise ValueError(f"unknown data format {kind!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
                         + f" (known: {', '.join(LOADERS)})")
    if not Path(path).exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    return loader(path, **options)
