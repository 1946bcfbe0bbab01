"""Citation graphs a user brings: the LINQS ``.content``/``.cites`` release (Cora, CiteSeer) and the Planetoid
``ind.<name>.*`` files (Cora, CiteSeer, PubMed as used by GCN and the paper's Table 6).

`load_citation` is what ``--data cora:PATH`` (``citeseer:``, ``pubmed:``) reads: Planetoid files when ``PATH``
holds ``ind.<name>.x`` (their public split: 20 training nodes per class, 1,000 test nodes), else the LINQS pair.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from .dataset import Dataset, node_dataset, stratified_split, undirected_edge_index
from .safe_pickle import UnsafePickleError, safe_load

PathLike = str | os.PathLike[str]


def per_class_split(labels: np.ndarray, per_class: int, test_nodes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The paper's node split (§9.2.3): ``per_class`` random training nodes of each class, then ``test_nodes``
    random test nodes among the others; sorted (train_idx, test_idx), the same for the same seed."""
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    train = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        if idx.size < per_class:
            raise ValueError(f"class {c} has {idx.size} nodes, fewer than per_class={per_class}")
        train.append(rng.choice(idx, size=per_class, replace=False))
    train_idx = np.sort(np.concatenate(train))
    rest = np.setdiff1d(np.arange(labels.size), train_idx)
    if rest.size < test_nodes:
        raise ValueError(f"{rest.size} nodes are left after the training nodes, fewer than test_nodes={test_nodes}")
    return train_idx, np.sort(rng.choice(rest, size=test_nodes, replace=False))


class Graph(NamedTuple):
    """A labelled graph read from disk: ``x`` float32 [N, F], ``edge_index`` int64 [2, E] (both directions),
    ``y`` int64 [N], ``class_names[y]`` the label text, ``node_ids`` the file's node identifiers."""

    x: torch.Tensor
    edge_index: torch.Tensor
    y: torch.Tensor
    class_names: list[str]
    node_ids: list[str]
    dropped_edges: int


def read_cora(content_path: PathLike, cites_path: PathLike) -> Graph:
    """The original Cora/CiteSeer release: ``.content`` lines ``<id> <f_1> ... <f_F> <label>`` (whitespace
    separated), ``.cites`` lines ``<cited id> <citing id>``. Nodes keep the content-file order, classes are the
    sorted label strings, citations are made undirected, duplicates and self citations are dropped, and
    citations naming an id absent from ``.content`` are dropped and counted in ``dropped_edges``."""
    cp, ep = Path(content_path), Path(cites_path)
    ids: list[str] = []
    rows: list[list[str]] = []
    label_text: list[str] = []
    with cp.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) < 3:
                raise ValueError(f"{cp}:{lineno}: expected '<id> <features...> <label>', got {line.strip()!r}")
            if rows and len(parts) - 2 != len(rows[0]):
                raise ValueError(f"{cp}:{lineno}: {len(parts) - 2} features, earlier lines have {len(rows[0])}")
            ids.append(parts[0])
            rows.append(parts[1:-1])
            label_text.append(parts[-1])
    if not ids:
        raise ValueError(f"{cp}: no nodes")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{cp}: duplicate node ids")
    try:
        x = np.asarray(rows, dtype=np.float32)
    except ValueError as exc:
        raise ValueError(f"{cp}: non-numeric feature value ({exc})") from exc
    class_names = sorted(set(label_text))
    y = np.searchsorted(np.asarray(class_names), np.asarray(label_text))
    index = {nid: i for i, nid in enumerate(ids)}
    src, dst, dropped = [], [], 0
    with ep.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2:
                raise ValueError(f"{ep}:{lineno}: expected '<cited id> <citing id>', got {line.strip()!r}")
            a, b = index.get(parts[0]), index.get(parts[1])
            if a is None or b is None:
                dropped += 1
                continue
            src.append(a)
            dst.append(b)
    edge_index = undirected_edge_index(np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64), len(ids))
    return Graph(torch.from_numpy(x), edge_index, torch.from_numpy(y.astype(np.int64)), class_names, ids, dropped)


def load_cora(path: PathLike, *, seed: int = 0, test_fraction: float = 0.2, name: str | None = None,
              per_class: int | None = None, test_nodes: int = 1000) -> Dataset:
    """Node classification from a ``.content``/``.cites`` pair: ``path`` is their directory (holding exactly one
    ``*.content``) or the ``.content`` file. Features are the file's word indicators; the split is a seeded
    stratified ``test_fraction`` of the nodes (`stratified_split`), or with ``per_class`` the paper's protocol
    (`per_class_split`: ``per_class`` training nodes of each class, ``test_nodes`` test nodes from the rest)."""
    p = Path(path)
    if p.is_dir():
        contents = sorted(p.glob("*.content"))
        if len(contents) != 1:
            raise FileNotFoundError(f"{p}: expected exactly one *.content file, found {len(contents)}")
        p = contents[0]
    cites = p.with_suffix(".cites")
    if not p.is_file() or not cites.is_file():
        raise FileNotFoundError(f"{p}: needs {p.name} and {cites.name} side by side")
    g = read_cora(p, cites)
    if per_class is not None:
        train_idx, test_idx = per_class_split(g.y.numpy(), per_class, test_nodes, seed)
    else:
        train_idx, test_idx = stratified_split(g.y.numpy(), test_fraction, seed)
    return node_dataset(name or p.stem, g.x.numpy(), g.edge_index, g.y.numpy(), train_idx=train_idx,
                        test_idx=test_idx, num_classes=len(g.class_names),
                        description=f"{p.stem} citation graph from {p.parent}",
                        meta={"class_names": g.class_names, "node_ids": g.node_ids, "dropped_edges": g.dropped_edges,
                              "features": "word indicators from the .content file", "seed": seed})


def load_planetoid(path: PathLike, *, name: str | None = None) -> Dataset:
    """Planetoid ``ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}`` files (Yang et al. 2016, as used by GCN).

    The pickles are read with `safe_load` (numpy arrays, scipy csr matrices and a dict of adjacency lists are
    all they hold). Assembly follows Kipf's ``load_data``: features = vstack(allx, tx) and labels =
    argmax(vstack(ally, ty)) with test rows moved to the node ids in ``test.index`` (gaps in that range, as in
    CiteSeer, become all-zero rows labelled 0). Split is the public one: train = the first len(y) nodes,
    test = the ``test.index`` nodes; the 500 validation nodes after train are in ``meta['val_idx']``.
    """
    root = Path(path)
    if name is None:
        found = sorted(root.glob("ind.*.x"))
        if len(found) != 1:
            raise FileNotFoundError(f"{root}: expected exactly one ind.<name>.x file, found {len(found)}")
        name = found[0].name[len("ind."):-len(".x")]
    parts: dict[str, Any] = {}
    for key in ("x", "y", "tx", "ty", "allx", "ally", "graph"):
        f = root / f"ind.{name}.{key}"
        if not f.is_file():
            raise FileNotFoundError(f"{f}: missing Planetoid file")
        try:
            parts[key] = safe_load(f, encoding="latin1")
        except UnsafePickleError as exc:
            raise UnsafePickleError(f"{f}: {exc}") from exc
    index_file = root / f"ind.{name}.test.index"
    if not index_file.is_file():
        raise FileNotFoundError(f"{index_file}: missing Planetoid file")
    try:
        test_index = np.asarray([int(line) for line in index_file.read_text().split()], dtype=np.int64)
    except ValueError as exc:
        raise ValueError(f"{index_file}: expected one integer per line") from exc

    def dense(key: str) -> np.ndarray:
        v = parts[key]
        v = v.toarray() if hasattr(v, "toarray") else v
        if not isinstance(v, np.ndarray) or v.ndim != 2:
            raise ValueError(f"ind.{name}.{key}: expected a 2-D array or sparse matrix, got {type(v).__name__}")
        return np.asarray(v, dtype=np.float64)

    y, tx, ty, allx, ally = (dense(k) for k in ("y", "tx", "ty", "allx", "ally"))
    if tx.shape[0] != test_index.size or ty.shape[0] != test_index.size:
        raise ValueError(f"ind.{name}: tx/ty have {tx.shape[0]}/{ty.shape[0]} rows, test.index {test_index.size}")
    if allx.shape[0] != ally.shape[0] or allx.shape[1] != tx.shape[1] or ally.shape[1] != ty.shape[1]:
        raise ValueError(f"ind.{name}: allx/ally/tx/ty shapes disagree")
    sorted_index = np.sort(test_index)
    if test_index.size and (sorted_index[0] != allx.shape[0] or np.unique(test_index).size != test_index.size):
        raise ValueError(f"ind.{name}.test.index must hold distinct ids starting at {allx.shape[0]} (= rows of allx)")
    span = int(sorted_index[-1] - sorted_index[0]) + 1 if test_index.size else 0
    tx_full, ty_full = np.zeros((span, tx.shape[1])), np.zeros((span, ty.shape[1]))
    tx_full[sorted_index - allx.shape[0]], ty_full[sorted_index - allx.shape[0]] = tx, ty
    feats, onehot = np.vstack([allx, tx_full]), np.vstack([ally, ty_full])
    feats[test_index], onehot[test_index] = feats[sorted_index], onehot[sorted_index]
    labels = onehot.argmax(axis=1)
    n = feats.shape[0]
    graph = parts["graph"]
    if not isinstance(graph, dict):
        raise ValueError(f"ind.{name}.graph: expected a dict of adjacency lists, got {type(graph).__name__}")
    try:
        src = np.asarray([int(u) for u, vs in graph.items() for _ in vs], dtype=np.int64)
        dst = np.asarray([int(v) for vs in graph.values() for v in vs], dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"ind.{name}.graph: adjacency lists must hold integer node ids") from exc
    edge_index = undirected_edge_index(src, dst, n)
    n_train = y.shape[0]
    val_idx = np.arange(n_train, min(n_train + 500, n))
    return node_dataset(name, feats, edge_index, labels, train_idx=np.arange(n_train), test_idx=sorted_index,
                        num_classes=onehot.shape[1], description=f"Planetoid {name} from {root}",
                        meta={"val_idx": torch.from_numpy(val_idx), "source": str(root),
                              "features": "Planetoid feature rows (allx + tx)"})


def load_citation(path: PathLike, *, name: str = "cora", seed: int = 0, **options: Any) -> Dataset:
    """``--data cora:PATH`` (``citeseer:``/``pubmed:`` set ``name``): `load_planetoid` when ``PATH`` holds
    ``ind.<name>.x`` (a folder of several Planetoid sets is fine), else `load_cora` on the ``<name>.content`` /
    ``<name>.cites`` pair (or the folder's one ``*.content``), with ``seed`` and ``options`` (``per_class``,
    ``test_nodes``, ``test_fraction``)."""
    p = Path(path)
    if p.is_dir() and (p / f"ind.{name}.x").is_file():
        if options:
            raise TypeError(f"Planetoid files keep their public split; options {sorted(options)} do not apply")
        return load_planetoid(p, name=name)
    if p.is_dir() and (p / f"{name}.content").is_file():
        p = p / f"{name}.content"
    elif p.is_dir() and not any(p.glob("*.content")):
        raise FileNotFoundError(f"{p}: neither Planetoid files (ind.{name}.x, .tx, .allx, .y, .ty, .ally, .graph, "
                                f".test.index) nor a LINQS pair ({name}.content, {name}.cites)")
    return load_cora(p, seed=seed, name=name, **options)
