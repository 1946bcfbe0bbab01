"""What the built-in datasets are, without loading one: name, task, sample type, outputs and where the data ships,
and the kinds of user file ``--data KIND:PATH`` reads. Imports neither torch nor numpy (``rpn2c data`` prints this
table; ``rpn2c.data.registry`` loads the sets it describes)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    description: str
    task: str  # as Dataset.task
    input_spec: str  # as Dataset.input_spec
    outputs: int  # classes (classification) or target width (regression)
    package: str  # where the data ships


_C, _R, _N = "classification", "regression", "node_classification"
ENTRIES: dict[str, Entry] = {
    "digits": Entry("8x8 handwritten digits (scikit-learn/UCI), 1797 images, 10 classes",
                    _C, "image[B, 1, 8, 8]", 10, "scikit-learn"),
    "iris": Entry("Fisher's iris flowers (scikit-learn), 150 x 4 features, 3 classes",
                  _C, "vector[B, 4]", 3, "scikit-learn"),
    "wine": Entry("wine cultivars (scikit-learn/UCI), 178 x 13 features, 3 classes",
                  _C, "vector[B, 13]", 3, "scikit-learn"),
    "breast_cancer": Entry("Wisconsin diagnostic breast cancer (scikit-learn/UCI), 569 x 30 features, 2 classes",
                           _C, "vector[B, 30]", 2, "scikit-learn"),
    "sunspots": Entry("yearly sunspot numbers 1700-2008 (statsmodels), 12-year windows -> next year",
                      _R, "sequence[B, 12, 1]", 1, "statsmodels"),
    "co2": Entry("Mauna Loa CO2 ppm (statsmodels), monthly 1958-2001, 24-month windows -> next month",
                 _R, "sequence[B, 24, 1]", 1, "statsmodels"),
    "macrodata": Entry("US macro quarterly 1959-2009 (statsmodels), 9 series (7 log growth %, 2 rates), 8-quarter "
                       "windows -> next quarter", _R, "sequence[B, 8, 9]", 9, "statsmodels"),
    "italy_power": Entry("UCR ItalyPowerDemand (sktime/aeon .ts), 24-hour demand curves, winter vs summer, 2 classes",
                         _C, "sequence[B, 24, 1]", 2, "sktime"),
    "gunpoint": Entry("UCR GunPoint (sktime/aeon .ts), 150-step hand trajectories, gun vs point, 2 classes",
                      _C, "sequence[B, 150, 1]", 2, "sktime"),
    "basic_motions": Entry("UEA BasicMotions (sktime/aeon .ts), 6-axis smartwatch, 100 steps, 4 activities",
                           _C, "sequence[B, 100, 6]", 4, "sktime"),
    "karate": Entry("Zachary's karate club (networkx), 34 members, 78 ties, split into 2 clubs",
                    _N, "graph[N, 34]", 2, "networkx"),
    "drosophila": Entry("larval Drosophila mushroom body connectome, left (graspologic), 209 neurons, 4 cell types",
                        _N, "graph[N, 4]", 4, "graspologic"),
    "majority": Entry("generated token sequences (16 ids of 4), label = the most frequent id, 2000 + 500 samples",
                      _C, "tokens[B, 16]", 4, "generated"),
}

# the user file formats of ``--data KIND:PATH``: the keys of ``rpn2c.data.formats.LOADERS``, in its order
FILE_KINDS = ("mnist", "cifar", "cifar10", "cora", "citeseer", "pubmed", "planetoid", "csv", "ucr", "text")


def available() -> dict[str, str]:
    """Built-in dataset names mapped to one-line descriptions (whether or not their package is installed)."""
    return {name: entry.description for name, entry in ENTRIES.items()}


def catalog() -> list[dict]:
    """Every built-in dataset without loading it: ``name``, ``task``, ``input`` (the sample type, as a spec
    declares it), ``classes`` (or ``target_dim`` for regression), ``package`` (where it ships) and
    ``description``."""
    out = []
    for name, e in ENTRIES.items():
        key = "target_dim" if e.task == _R else "classes"
        out.append({"name": name, "task": e.task, "input": e.input_spec, key: e.outputs, "package": e.package,
                    "description": e.description})
    return out


def lookup(name: str) -> str:
    """The registry key of ``name`` (case and ``-``/``_`` ignored); ValueError with the closest known name."""
    key = name.strip().lower().replace("-", "_")
    if key not in ENTRIES:
        hint = difflib.get_close_matches(key, list(ENTRIES), n=1, cutoff=0.6)
        raise ValueError(f"unknown dataset {name!r}" + (f"; did you mean {hint[0]!r}?" if hint else "")
                         + f" (available: {', '.join(ENTRIES)})")
    return key
