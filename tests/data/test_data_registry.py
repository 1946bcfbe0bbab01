"""Built-in dataset registry: shapes, dtypes, label ranges, seeded splits, train-only standardization."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rpn2c.data import Dataset, available, load, sklearn_files, stratified_split
from rpn2c.data.registry import _package_dir

SKLEARN_SETS = {  # name: (n_total, input shape per item, classes)
    "digits": (1797, (1, 8, 8), 10),
    "iris": (150, (4,), 3),
    "wine": (178, (13,), 3),
    "breast_cancer": (569, (30,), 2),
}


def test_available_lists_every_name_with_a_one_line_description():
    names = available()
    assert set(SKLEARN_SETS) | {"sunspots", "co2", "macrodata", "karate", "drosophila", "italy_power",
                                "gunpoint", "basic_motions", "majority"} == set(names)
    assert all(isinstance(d, str) and d and "\n" not in d for d in names.values())


@pytest.mark.parametrize("bad, suggestion", [("digit", "digits"), ("iriss", "iris"), ("breast-cancr", "breast_cancer"),
                                             ("karat", "karate"), ("sunspot", "sunspots")])
def test_unknown_name_raises_with_did_you_mean(bad, suggestion):
    with pytest.raises(ValueError, match=f"did you mean '{suggestion}'"):
        load(bad)


def test_unknown_name_without_close_match_lists_available():
    with pytest.raises(ValueError, match="available: digits") as info:
        load("imagenet")
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize("name", list(SKLEARN_SETS))
def test_sklearn_sets_shapes_dtypes_labels(name):
    pytest.importorskip("sklearn")
    n_total, item_shape, k = SKLEARN_SETS[name]
    ds = load(name)
    (xtr, ytr), (xte, yte) = ds.train, ds.test
    assert isinstance(ds, Dataset) and ds.task == "classification" and ds.num_classes == k and ds.target_dim is None
    assert xtr.shape[1:] == item_shape and xte.shape[1:] == item_shape
    assert xtr.dtype == torch.float32 and ytr.dtype == torch.int64
    assert xtr.shape[0] + xte.shape[0] == n_total and ds.num_train == xtr.shape[0]
    assert xte.shape[0] == pytest.approx(0.2 * n_total, abs=k)  # stratified 20 %, rounded per class
    assert set(torch.cat([ytr, yte]).unique().tolist()) == set(range(k))
    assert set(yte.unique().tolist()) == set(range(k))  # every class on both sides
    assert ds.output_dim == k and ds.input_spec.endswith(f"[B, {', '.join(map(str, item_shape))}]")
    # train and test indices partition the data set
    tr, te = ds.meta["train_idx"].numpy(), ds.meta["test_idx"].numpy()
    assert np.array_equal(np.sort(np.concatenate([tr, te])), np.arange(n_total))


@pytest.mark.parametrize("name", list(SKLEARN_SETS))
def test_the_files_scikit_learn_ships_read_as_its_loaders_give_them(name):
    """The registry reads scikit-learn's data files itself (importing scikit-learn costs seconds): the same
    numbers, classes and names as ``load_<name>()``."""
    sk = pytest.importorskip("sklearn.datasets")
    table = sklearn_files.read(name, _package_dir("sklearn"))
    assert table is not None, f"scikit-learn keeps {sklearn_files.FILES[name]} elsewhere: the registry falls back"
    bunch = getattr(sk, f"load_{name}")()
    assert table.data.dtype == np.float64 and np.array_equal(table.data, bunch.data)
    assert table.target.dtype == np.int64 and np.array_equal(table.target, bunch.target)
    assert table.feature_names == [str(f) for f in bunch.feature_names]
    assert table.target_names == [str(c) for c in bunch.target_names]
    assert sklearn_files.read(name, None) is None  # not installed: the loader decides (and names the package)


def test_a_data_file_that_breaks_its_own_header_is_refused(tmp_path):
    data = tmp_path / "datasets" / "data"
    data.mkdir(parents=True)
    (data / "iris.csv").write_text("3,2,a,b\n1.0,2.0,0\n3.0,4.0,1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="promises 3 of 3"):
        sklearn_files.read("iris", tmp_path)
    (data / "iris.csv").write_text("2,2,a,b\n1.0,2.0,0\n3.5,4.0,1\n", encoding="utf-8")
    table = sklearn_files.read("iris", tmp_path)
    assert table.data.tolist() == [[1.0, 2.0], [3.5, 4.0]] and table.target.tolist() == [0, 1]
    assert table.target_names == ["a", "b"]


def test_the_catalog_names_every_user_file_kind_and_needs_no_loader():
    from rpn2c.data import FILE_KINDS, LOADERS
    from rpn2c.data.catalog import catalog

    assert tuple(LOADERS) == FILE_KINDS
    assert [r["name"] for r in catalog()] == list(available())


def test_digits_pixels_are_counts_over_16():
    sk = pytest.importorskip("sklearn.datasets")
    ds = load("digits", seed=3)
    raw = sk.load_digits()
    x = torch.cat([ds.train[0], ds.test[0]])
    assert float(x.min()) == 0.0 and float(x.max()) == 1.0
    idx = ds.meta["train_idx"].numpy()
    assert np.array_equal(ds.train[0][:, 0].numpy() * 16.0, raw.images[idx])
    assert np.array_equal(ds.train[1].numpy(), raw.target[idx])


@pytest.mark.parametrize("name", ["iris", "wine", "breast_cancer"])
def test_tabular_standardized_with_train_statistics_only(name):
    sk = pytest.importorskip("sklearn.datasets")
    ds = load(name, seed=1)
    raw = getattr(sk, f"load_{name}")().data.astype(np.float64)
    tr, te = ds.meta["train_idx"].numpy(), ds.meta["test_idx"].numpy()
    mean, std = ds.meta["mean"].numpy(), ds.meta["std"].numpy()
    np.testing.assert_allclose(mean, raw[tr].mean(0), rtol=1e-6)
    np.testing.assert_allclose(std, raw[tr].std(0), rtol=1e-6)
    assert not np.allclose(mean, raw.mean(0), rtol=1e-6)  # the full-data mean would be a leak
    z_tr, z_te = ds.train[0].double().numpy(), ds.test[0].double().numpy()
    np.testing.assert_allclose(z_tr.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(z_tr.std(0), 1.0, atol=1e-5)
    np.testing.assert_allclose(z_te * std + mean, raw[te], rtol=1e-5, atol=1e-4)  # same transform on test
    assert np.abs(z_te.mean(0)).max() > 1e-3


@pytest.mark.parametrize("name", ["digits", "iris", "karate"])
def test_split_is_deterministic_per_seed_and_changes_with_seed(name):
    if name != "karate":
        pytest.importorskip("sklearn")
    a, b, c = load(name, seed=7), load(name, seed=7), load(name, seed=8)
    for ta, tb in zip(a.train + a.test, b.train + b.test):
        assert torch.equal(ta, tb)
    assert not all(torch.equal(ta, tc) for ta, tc in zip(a.train + a.test, c.train + c.test))


def test_stratified_split_properties():
    y = np.repeat(np.arange(4), [10, 3, 1, 25])
    tr, te = stratified_split(y, 0.2, seed=0)
    assert np.intersect1d(tr, te).size == 0 and np.array_equal(np.union1d(tr, te), np.arange(y.size))
    assert np.bincount(y[te], minlength=4).tolist() == [2, 1, 0, 5]  # round(0.2 n), clipped to [1, n-1]
    assert np.array_equal(stratified_split(y, 0.2, seed=0)[1], te)
    with pytest.raises(ValueError):
        stratified_split(y, 1.0, seed=0)


# ------------------------------------------------------------------------------------------------ time series

SERIES = {"sunspots": (309, 12, 1), "co2": (526, 24, 1), "macrodata": (202, 8, 9)}  # steps, window, features


@pytest.mark.parametrize("name", list(SERIES))
def test_series_windows_are_chronological_and_standardized_on_train_period(name):
    pytest.importorskip("statsmodels")
    steps, window, feats = SERIES[name]
    ds = load(name)
    (xtr, ytr), (xte, yte) = ds.train, ds.test
    assert ds.task == "regression" and ds.target_dim == feats and ds.num_classes is None
    assert ds.input_spec == f"sequence[B, {window}, {feats}]"
    assert xtr.shape[1:] == (window, feats) and ytr.shape[1:] == (feats,) and xtr.dtype == torch.float32
    t_train = ds.meta["train_steps"]
    assert t_train == int(0.8 * steps)
    assert xtr.shape[0] == t_train - window and xte.shape[0] == steps - t_train
    # rebuild the standardized series from the windows and check it is consistent everywhere
    series = torch.cat([xtr[0], ytr, yte])  # steps 0..T-1
    assert series.shape == (steps, feats)
    for x, offset in ((xtr, 0), (xte, t_train - window)):
        for i in (0, x.shape[0] // 2, x.shape[0] - 1):
            assert torch.equal(x[i], series[offset + i: offset + i + window])
    train_part = series[:t_train].double()
    torch.testing.assert_close(train_part.mean(0), torch.zeros(feats, dtype=torch.float64), atol=1e-5, rtol=0)
    torch.testing.assert_close(train_part.std(0, unbiased=False), torch.ones(feats, dtype=torch.float64),
                               atol=1e-5, rtol=0)
    assert load(name, seed=5).train[0].equal(xtr)  # chronological: the seed does not matter


def test_sunspots_values_round_trip_to_statsmodels():
    sm = pytest.importorskip("statsmodels.datasets.sunspots")
    raw = sm.load_pandas().data["SUNACTIVITY"].to_numpy()
    ds = load("sunspots")
    mean, std = ds.meta["mean"].double(), ds.meta["std"].double()
    np.testing.assert_allclose(mean.numpy(), raw[: ds.meta["train_steps"]].mean(), rtol=1e-6)
    restored = ds.test[1].double() * std + mean
    np.testing.assert_allclose(restored[:, 0].numpy(), raw[ds.meta["train_steps"]:], rtol=1e-5, atol=1e-3)


UCR = {"italy_power": (67, 1029, 24, 1, 2), "gunpoint": (50, 150, 150, 1, 2), "basic_motions": (40, 40, 100, 6, 4)}


@pytest.mark.parametrize("name", list(UCR))
def test_ucr_sets_keep_archive_split(name):
    if _package_dir("sktime") is None and _package_dir("aeon") is None:
        pytest.skip("needs sktime or aeon for the bundled .ts files")
    n_tr, n_te, length, ch, k = UCR[name]
    ds = load(name)
    assert ds.train[0].shape == (n_tr, length, ch) and ds.test[0].shape == (n_te, length, ch)
    assert ds.num_classes == k and ds.train[1].dtype == torch.int64
    assert set(ds.train[1].unique().tolist()) == set(range(k)) == set(ds.test[1].unique().tolist())
    z = ds.train[0].double()
    torch.testing.assert_close(z.mean((0, 1)), torch.zeros(ch, dtype=torch.float64), atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------------------------------- graphs


def test_karate_club_graph():
    import networkx as nx

    ds = load("karate", seed=0)
    x, edge_index, y, train_mask = ds.train
    test_mask = ds.test[3]
    g = nx.karate_club_graph()
    assert ds.task == "node_classification" and ds.num_classes == 2 and ds.input_spec == "graph[N, 34]"
    assert torch.equal(x, torch.eye(34)) and x.dtype == torch.float32
    assert edge_index.dtype == torch.int64 and edge_index.shape == (2, 2 * g.number_of_edges())
    pairs = set(map(tuple, edge_index.t().tolist()))
    assert pairs == {(u, v) for u, v in g.edges} | {(v, u) for u, v in g.edges}
    assert y.tolist() == [int(g.nodes[v]["club"] == "Officer") for v in range(34)]
    assert not (train_mask & test_mask).any() and bool((train_mask | test_mask).all())
    assert ds.num_train + ds.num_test == 34
    assert ds.test[0] is x and ds.test[1] is edge_index  # same full graph on both sides


def _write_drosophila(root, adj, labels):
    np.savetxt(root / "left_adjacency.csv", adj, fmt="%d")
    (root / "left_cell_labels.csv").write_text("\n".join(labels) + "\n")


def test_drosophila_from_root_directory(tmp_path):
    adj = np.zeros((6, 6), dtype=np.int64)
    adj[0, 1], adj[1, 2], adj[2, 0], adj[3, 4], adj[4, 3], adj[5, 5], adj[0, 5] = 3, 1, 2, 5, 1, 4, 1
    labels = ["K", "K", "P", "O", "O", "P"]
    _write_drosophila(tmp_path, adj, labels)
    ds = load("drosophila", root=tmp_path, seed=0)
    x, edge_index, y, train_mask = ds.train
    assert ds.num_classes == 3 and ds.meta["class_names"] == ["K", "O", "P"]
    assert y.tolist() == [0, 0, 2, 1, 1, 2]
    expected = {(0, 1), (1, 2), (2, 0), (3, 4), (0, 5)}  # self loop 5->5 dropped, directions merged
    assert set(map(tuple, edge_index.t().tolist())) == expected | {(b, a) for a, b in expected}
    raw = np.log1p(np.stack([(adj > 0).sum(0), (adj > 0).sum(1), adj.sum(0), adj.sum(1)], 1))
    np.testing.assert_allclose(x.numpy() * ds.meta["std"].numpy() + ds.meta["mean"].numpy(), raw, rtol=1e-5)
    np.testing.assert_allclose(ds.meta["mean"].numpy(), raw[train_mask.numpy()].mean(0), rtol=1e-5)


def test_drosophila_real_data_if_installed():
    pkg = _package_dir("graspologic")
    if pkg is None or not (pkg / "datasets" / "drosophila" / "left_adjacency.csv").is_file():
        pytest.skip("graspologic data files not installed")
    ds = load("drosophila")
    assert ds.train[0].shape == (209, 4) and ds.num_classes == 4
    assert torch.bincount(ds.train[2]).tolist() == [21, 101, 29, 58]


def test_missing_root_files_give_clear_error(tmp_path):
    with pytest.raises(ImportError, match="left_adjacency.csv"):
        load("drosophila", root=tmp_path)
    with pytest.raises(ImportError, match="GunPoint_TRAIN.ts"):
        load("gunpoint", root=tmp_path)


def test_missing_optional_package_names_the_extra(monkeypatch):
    import importlib

    from rpn2c.data import registry

    real, real_dir = importlib.import_module, registry._package_dir
    monkeypatch.setattr(registry, "_package_dir", lambda p: None if p == "sklearn" else real_dir(p))  # no data files

    def fake_import_module(name, *args):
        if name.split(".")[0] in ("sklearn", "statsmodels"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", fake_import_module)
    with pytest.raises(ImportError, match=r"scikit-learn: pip install scikit-learn"):
        load("iris")
    with pytest.raises(ImportError, match=r"statsmodels: pip install 'rpn2c\[data\]'"):
        load("sunspots")


def test_dataset_validation_and_to():
    x, y = torch.zeros(4, 2), torch.zeros(4, dtype=torch.int64)
    ds = Dataset("t", "classification", (x, y), (x, y), num_classes=2, target_dim=None, input_spec="vector[B, 2]")
    d64 = ds.to(dtype=torch.float64)
    assert d64.train[0].dtype == torch.float64 and d64.train[1].dtype == torch.int64 and ds.train[0].dtype == x.dtype
    with pytest.raises(ValueError, match="exactly one"):
        Dataset("t", "classification", (x, y), (x, y), num_classes=2, target_dim=1, input_spec="")
    with pytest.raises(ValueError, match="leading size"):
        Dataset("t", "classification", (x, y[:3]), (x, y), num_classes=2, target_dim=None, input_spec="")
    with pytest.raises(ValueError, match="task"):
        Dataset("t", "ranking", (x, y), (x, y), num_classes=2, target_dim=None, input_spec="")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ds.meta["x"] = 1  # type: ignore[index]
