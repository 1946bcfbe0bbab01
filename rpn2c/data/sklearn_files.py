"""The four data sets scikit-learn ships as files (``sklearn/datasets/data/``), read without importing it:
``import sklearn.datasets`` brings scipy.stats and pandas along (1-2 s, most of an ``rpn2c eval`` start) to read a
small CSV file. :func:`read` returns what scikit-learn's ``load_<name>()`` holds (data, target, names), or None where
this installation keeps no such file (the registry then calls scikit-learn's own loader)."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import NamedTuple

import numpy as np

FILES = {"digits": "digits.csv.gz", "iris": "iris.csv", "wine": "wine_data.csv", "breast_cancer": "breast_cancer.csv"}

_WDBC = ("radius", "texture", "perimeter", "area", "smoothness", "compactness", "concavity", "concave points",
         "symmetry", "fractal dimension")
# the column names scikit-learn's loaders give (its files hold none)
FEATURE_NAMES = {
    "digits": [f"pixel_{i}_{j}" for i in range(8) for j in range(8)],
    "iris": ["sepal length (cm)", "sepal width (cm)", "petal length (cm)", "petal width (cm)"],
    "wine": ["alcohol", "malic_acid", "ash", "alcalinity_of_ash", "magnesium", "total_phenols", "flavanoids",
             "nonflavanoid_phenols", "proanthocyanins", "color_intensity", "hue", "od280/od315_of_diluted_wines",
             "proline"],
    "breast_cancer": [f"mean {m}" for m in _WDBC] + [f"{m} error" for m in _WDBC] + [f"worst {m}" for m in _WDBC],
}


class Table(NamedTuple):
    data: np.ndarray  # float64 [n, features] (digits: the 64 pixel counts of each 8x8 image, row by row)
    target: np.ndarray  # int64 [n]
    feature_names: list[str]
    target_names: list[str]


def read(name: str, package: Path | None) -> Table | None:
    """Data set ``name`` from the scikit-learn installed at ``package`` (None: not installed), or None where the
    file is not there. The CSV files start with a line ``n_samples,n_features,target names...`` (digits has none);
    the last column is the class."""
    path = package / "datasets" / "data" / FILES[name] if package is not None else None
    if path is None or not path.is_file():
        return None
    if name == "digits":
        with gzip.open(path, "rt") as f:
            rows = np.loadtxt(f, delimiter=",", ndmin=2)
        target_names = [str(k) for k in range(10)]
    else:
        with path.open(encoding="utf-8") as f:
            head = next(f).strip().split(",")
            rows = np.loadtxt(f, delimiter=",", ndmin=2)
        target_names = head[2:]
        if rows.shape != (int(head[0]), int(head[1]) + 1):
            raise ValueError(f"{path}: {rows.shape[0]} rows of {rows.shape[1]} values, the first line promises "
                             f"{head[0]} of {int(head[1]) + 1}")
    return Table(rows[:, :-1], rows[:, -1].astype(np.int64), list(FEATURE_NAMES[name]), target_names)
