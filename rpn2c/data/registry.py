"""Named built-in datasets: real data that ships inside installed packages, so nothing is downloaded.

| name          | source (offline)                               | task                | input                  |
|---------------|------------------------------------------------|---------------------|------------------------|
| digits        | scikit-learn ``load_digits`` (UCI, 8x8)         | classification (10) | image[B, 1, 8, 8]      |
| iris          | scikit-learn ``load_iris``                      | classification (3)  | vector[B, 4]           |
| wine          | scikit-learn ``load_wine``                      | classification (3)  | vector[B, 13]          |
| breast_cancer | scikit-learn ``load_breast_cancer`` (WDBC)      | classification (2)  | vector[B, 30]          |
| sunspots      | statsmodels yearly sunspot numbers 1700-2008    | regression (1)      | sequence[B, 12, 1]     |
| co2           | statsmodels Mauna Loa CO2, monthly 1958-2001    | regression (1)      | sequence[B, 24, 1]     |
| macrodata     | statsmodels US macro quarterly 1959-2009        | regression (9)      | sequence[B, 8, 9]      |
| italy_power   | UCR ItalyPowerDemand (.ts in sktime / aeon)     | classification (2)  | sequence[B, 24, 1]     |
| gunpoint      | UCR GunPoint (.ts in sktime / aeon)             | classification (2)  | sequence[B, 150, 1]    |
| basic_motions | UEA BasicMotions (.ts in sktime / aeon)         | classification (4)  | sequence[B, 100, 6]    |
| karate        | networkx Zachary karate club, 'club' label      | node_classification | graph[N, 34]           |
| drosophila    | graspologic larval mushroom body connectome     | node_classification | graph[N, 4]            |
| majority      | generated from the seed (``data/tokens.py``)    | classification (4)  | tokens[B, 16]          |

Splits: image/tabular sets use a seeded stratified 80/20 split and are standardized with training statistics;
time series are split chronologically (seed unused); UCR/UEA sets keep the archive's train/test files; graphs use
a seeded stratified node split; generated token tasks draw their samples from the seed. ``root`` points
file-backed sets (UCR/UEA, drosophila) at a directory holding the files instead of the installed package's copy,
and is ignored by the others.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from . import sklearn_files
from .catalog import ENTRIES, available, catalog, lookup  # noqa: F401 - available, catalog: the registry's API
from .dataset import (Dataset, fit_standardizer, forecasting_dataset, node_dataset, stratified_split,
                      undirected_edge_index)
from .tokens import majority

TEST_FRACTION = 0.2
_DESC = {name: entry.description for name, entry in ENTRIES.items()}

# pip distribution and rpn2c extra for each optional package
_PIP = {"sklearn": ("scikit-learn", None), "statsmodels": ("statsmodels", "data"),
        "sktime": ("sktime", "data"), "graspologic": ("graspologic", None)}


def _require(module: str, dataset: str) -> ModuleType:
    """Import ``module`` or raise ImportError naming the pip extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        dist, extra = _PIP[module.split(".")[0]]
        how = f"pip install 'rpn2c[{extra}]' (or pip install {dist})" if extra else f"pip install {dist}"
        raise ImportError(f"dataset {dataset!r} needs the optional package {dist}: {how}") from exc


def _package_dir(package: str) -> Path | None:
    """Directory of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


# ------------------------------------------------------------------------------------------- image / tabular


def _sklearn(name: str) -> sklearn_files.Table:
    """Data set ``name`` as scikit-learn's ``load_<name>()`` holds it: read from the file scikit-learn ships (no
    import of scikit-learn), or by its loader where that file is not where this version keeps it."""
    table = sklearn_files.read(name, _package_dir("sklearn"))
    if table is not None:
        return table
    bunch = getattr(_require("sklearn.datasets", name), f"load_{name}")()
    return sklearn_files.Table(np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target, dtype=np.int64),
                               [str(f) for f in bunch.feature_names], [str(c) for c in bunch.target_names])


def _tabular(name: str, seed: int, description: str) -> Dataset:
    table = _sklearn(name)
    x, y = table.data, table.target
    tr, te = stratified_split(y, TEST_FRACTION, seed)
    mean, std = fit_standardizer(x[tr])
    z = ((x - mean) / std).astype(np.float32)
    t = torch.from_numpy
    return Dataset(name=name, task="classification", train=(t(z[tr]), t(y[tr])), test=(t(z[te]), t(y[te])),
                   num_classes=int(y.max()) + 1, target_dim=None, input_spec=f"vector[B, {x.shape[1]}]",
                   description=description,
                   meta={"mean": t(mean.astype(np.float32)), "std": t(std.astype(np.float32)), "seed": seed,
                         "train_idx": t(tr), "test_idx": t(te), "feature_names": table.feature_names,
                         "class_names": table.target_names})


def _digits(seed: int, root: Path | None) -> Dataset:
    table = _sklearn("digits")
    x = (table.data.reshape(-1, 8, 8).astype(np.float32) / 16.0)[:, None]  # pixel counts 0..16 -> [0, 1]
    y = table.target
    tr, te = stratified_split(y, TEST_FRACTION, seed)
    t = torch.from_numpy
    return Dataset(name="digits", task="classification", train=(t(x[tr]), t(y[tr])), test=(t(x[te]), t(y[te])),
                   num_classes=10, target_dim=None, input_spec="image[B, 1, 8, 8]", description=_DESC["digits"],
                   meta={"seed": seed, "scale": "pixel / 16", "train_idx": t(tr), "test_idx": t(te),
                         "class_names": [str(c) for c in range(10)]})


# ------------------------------------------------------------------------------------------------ time series


def _sunspots(seed: int, root: Path | None) -> Dataset:
    df = _require("statsmodels.datasets.sunspots", "sunspots").load_pandas().data
    return forecasting_dataset("sunspots", df["SUNACTIVITY"].to_numpy(np.float64), window=12,
                               test_fraction=TEST_FRACTION, description=_DESC["sunspots"],
                               meta={"columns": ["SUNACTIVITY"], "start": int(df["YEAR"].iloc[0]), "freq": "yearly"})


def _co2(seed: int, root: Path | None) -> Dataset:
    df = _require("statsmodels.datasets.co2", "co2").load_pandas().data
    monthly = df["co2"].resample("MS").mean().interpolate(method="linear")  # 5 empty months are interpolated
    return forecasting_dataset("co2", monthly.to_numpy(np.float64), window=24, test_fraction=TEST_FRACTION,
                               description=_DESC["co2"],
                               meta={"columns": ["co2"], "start": str(monthly.index[0].date()), "freq": "monthly"})


_MACRO_GROWTH = ("realgdp", "realcons", "realinv", "realgovt", "realdpi", "cpi", "m1")
_MACRO_LEVEL = ("tbilrate", "unemp")


def _macrodata(seed: int, root: Path | None) -> Dataset:
    df = _require("statsmodels.datasets.macrodata", "macrodata").load_pandas().data
    growth = 100.0 * np.diff(np.log(df[list(_MACRO_GROWTH)].to_numpy(np.float64)), axis=0)  # % per quarter
    level = df[list(_MACRO_LEVEL)].to_numpy(np.float64)[1:]
    cols = [f"{c}_growth" for c in _MACRO_GROWTH] + list(_MACRO_LEVEL)
    return forecasting_dataset("macrodata", np.concatenate([growth, level], axis=1), window=8,
                               test_fraction=TEST_FRACTION, description=_DESC["macrodata"],
                               meta={"columns": cols, "start": "1959Q2", "freq": "quarterly"})


_UCR = {"italy_power": "ItalyPowerDemand", "gunpoint": "GunPoint", "basic_motions": "BasicMotions"}


def _ucr(name: str) -> Callable[[int, Path | None], Dataset]:
    archive = _UCR[name]

    def build(seed: int, root: Path | None) -> Dataset:
        candidates = [root] if root is not None else [
            d / "datasets" / "data" / archive for d in map(_package_dir, ("sktime", "aeon")) if d is not None]
        for d in candidates:
            if (d / f"{archive}_TRAIN.ts").is_file():
                from .formats import load_ucr  # the user-file readers: only these sets need one

                return load_ucr(d / f"{archive}_TRAIN.ts", name=name)
        where = f"{root}" if root is not None else "the installed sktime/aeon packages"
        raise ImportError(f"dataset {name!r} reads {archive}_TRAIN.ts / {archive}_TEST.ts, not found in {where}: "
                          "pip install 'rpn2c[data]' (or pip install sktime), or pass root=DIR holding the files")

    return build


# ----------------------------------------------------------------------------------------------------- graphs


def _karate(seed: int, root: Path | None) -> Dataset:
    import networkx as nx

    g = nx.karate_club_graph()
    nodes = sorted(g.nodes)
    clubs = sorted({g.nodes[v]["club"] for v in nodes})  # ['Mr. Hi', 'Officer']
    y = np.asarray([clubs.index(g.nodes[v]["club"]) for v in nodes], dtype=np.int64)
    src, dst = (np.asarray(a, dtype=np.int64) for a in zip(*g.edges))
    tr, te = stratified_split(y, 0.5, seed)
    return node_dataset("karate", np.eye(len(nodes), dtype=np.float32), undirected_edge_index(src, dst, len(nodes)),
                        y, train_idx=tr, test_idx=te, num_classes=len(clubs), description=_DESC["karate"],
                        meta={"class_names": clubs, "features": "one-hot node identity (x = I_34)", "seed": seed})


def _drosophila(seed: int, root: Path | None) -> Dataset:
    if root is None:
        pkg = _package_dir("graspologic")
        root = pkg / "datasets" / "drosophila" if pkg is not None else None
    adj_file = root / "left_adjacency.csv" if root is not None else None
    lab_file = root / "left_cell_labels.csv" if root is not None else None
    if adj_file is None or not adj_file.is_file() or not lab_file.is_file():
        raise ImportError("dataset 'drosophila' reads left_adjacency.csv / left_cell_labels.csv shipped in the "
                          "graspologic package (its numpy<2 pin may not suit your environment: "
                          "'pip install --no-deps graspologic' is enough for the data files), "
                          "or pass root=DIR holding those two files")
    adj = np.loadtxt(adj_file, dtype=np.float64)
    cells = lab_file.read_text().split()
    if adj.ndim != 2 or adj.shape[0] != adj.shape[1] or adj.shape[0] != len(cells):
        raise ValueError(f"{root}: adjacency {adj.shape} does not match {len(cells)} cell labels")
    if (adj < 0).any():
        raise ValueError(f"{adj_file}: negative synapse counts")
    classes = sorted(set(cells))
    y = np.searchsorted(np.asarray(classes), np.asarray(cells)).astype(np.int64)
    # directed synapse counts A[i, j] (i -> j); features: log1p of in/out degree and in/out synapse totals
    raw = np.stack([(adj > 0).sum(0), (adj > 0).sum(1), adj.sum(0), adj.sum(1)], axis=1)
    feats = np.log1p(raw)
    tr, te = stratified_split(y, TEST_FRACTION, seed)
    mean, std = fit_standardizer(feats[tr])
    src, dst = np.nonzero(adj)
    return node_dataset("drosophila", (feats - mean) / std, undirected_edge_index(src, dst, adj.shape[0]), y,
                        train_idx=tr, test_idx=te, num_classes=len(classes), description=_DESC["drosophila"],
                        meta={"class_names": classes, "seed": seed, "mean": torch.from_numpy(mean.astype(np.float32)),
                              "std": torch.from_numpy(std.astype(np.float32)),
                              "features": "log1p(in-degree, out-degree, in-synapses, out-synapses), standardized "
                                          "with training-node statistics; edges ignore direction and weight"})


# --------------------------------------------------------------------------------------------------- registry


def _tab(name: str) -> Callable[[int, Path | None], Dataset]:
    return lambda seed, root: _tabular(name, seed, _DESC[name])


_BUILDERS: dict[str, Callable[[int, Path | None], Dataset]] = {
    "digits": _digits, "iris": _tab("iris"), "wine": _tab("wine"), "breast_cancer": _tab("breast_cancer"),
    "sunspots": _sunspots, "co2": _co2, "macrodata": _macrodata, **{n: _ucr(n) for n in _UCR},
    "karate": _karate, "drosophila": _drosophila,
    "majority": lambda seed, root: majority(seed, _DESC["majority"]),
}


def load(name: str, *, seed: int = 0, root: str | Path | None = None) -> Dataset:
    """Load built-in dataset ``name`` with the split drawn from ``seed`` (same seed, same split).

    Unknown names raise ValueError with the closest known name; a missing optional package raises ImportError
    naming the pip extra.
    """
    return _BUILDERS[lookup(name)](int(seed), Path(root) if root is not None else None)
