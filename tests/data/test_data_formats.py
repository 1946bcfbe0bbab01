"""On-disk format readers: fixtures written in tmp_path, exact round trips, clear errors."""

from __future__ import annotations

import gzip
import pickle
import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rpn2c.data import (UnsafePickleError, load_cifar, load_cora, load_csv_series, load_mnist, load_path,
                        load_planetoid, load_ucr, read_cifar_batch, read_cora, read_csv_series, read_idx, read_ts)

# -------------------------------------------------------------------------------------------------------- IDX

_IDX_CODES = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C, np.float32: 0x0D, np.float64: 0x0E}


def idx_bytes(arr: np.ndarray) -> bytes:
    """Reference IDX writer: magic 00 00 type ndim, big-endian uint32 dims, big-endian payload."""
    code = _IDX_CODES[arr.dtype.type]
    head = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return head + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


@settings(max_examples=25, deadline=None)
@given(dtype=st.sampled_from(list(_IDX_CODES)), shape=st.lists(st.integers(0, 5), min_size=1, max_size=4),
       gz=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_idx_round_trip(tmp_path_factory, dtype, shape, gz, seed):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else None
    arr = (rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype) if info
           else rng.standard_normal(shape).astype(dtype))
    f = tmp_path_factory.mktemp("idx") / "a-idx-ubyte"
    payload = idx_bytes(arr)
    f.write_bytes(gzip.compress(payload) if gz else payload)
    out = read_idx(f)
    assert tuple(out.shape) == arr.shape
    assert np.array_equal(out.numpy(), arr) and out.numpy().dtype == np.dtype(dtype)


def test_idx_known_bytes(tmp_path):
    f = tmp_path / "x"
    f.write_bytes(bytes([0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 255]))
    assert read_idx(f).tolist() == [[1, 2, 3], [4, 5, 255]]


@pytest.mark.parametrize("payload, message", [
    (b"\x00\x00", "magic number alone"),
    (bytes([0, 1, 0x08, 1]) + struct.pack(">I", 1) + b"\x00", "bad IDX magic"),
    (bytes([0, 0, 0x07, 1]) + struct.pack(">I", 1) + b"\x00", "bad IDX magic"),
    (bytes([0, 0, 0x08, 0]), "bad IDX magic"),
    (bytes([0, 0, 0x08, 2]) + struct.pack(">I", 1), "truncated IDX header"),
    (bytes([0, 0, 0x08, 1]) + struct.pack(">I", 4) + b"\x01\x02", "truncated"),
    (bytes([0, 0, 0x0C, 1]) + struct.pack(">I", 1) + b"\x00" * 5, "trailing bytes"),
])
def test_idx_rejects_malformed_files(tmp_path, payload, message):
    f = tmp_path / "bad-idx1-ubyte"
    f.write_bytes(payload)
    with pytest.raises(ValueError, match=message):
        read_idx(f)


def _write_mnist(root, gz: bool, rng) -> dict[str, np.ndarray]:
    arrays = {"train-images-idx3-ubyte": rng.integers(0, 256, (7, 4, 5), dtype=np.uint8),
              "train-labels-idx1-ubyte": rng.integers(0, 10, 7, dtype=np.uint8),
              "t10k-images-idx3-ubyte": rng.integers(0, 256, (3, 4, 5), dtype=np.uint8),
              "t10k-labels-idx1-ubyte": np.array([9, 0, 3], dtype=np.uint8)}
    for name, arr in arrays.items():
        data = idx_bytes(arr)
        (root / (name + (".gz" if gz else ""))).write_bytes(gzip.compress(data) if gz else data)
    return arrays


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_directory(tmp_path, gz):
    arrays = _write_mnist(tmp_path, gz, np.random.default_rng(0))
    ds = load_path("mnist", tmp_path)
    assert ds.input_spec == "image[B, 1, 4, 5]" and ds.num_classes == 10
    assert ds.train[0].shape == (7, 1, 4, 5) and ds.train[0].dtype == torch.float32
    np.testing.assert_array_equal((ds.train[0][:, 0] * 255).round().to(torch.uint8).numpy(),
                                  arrays["train-images-idx3-ubyte"])
    assert ds.test[1].tolist() == [9, 0, 3] and ds.train[1].dtype == torch.int64


def test_mnist_count_mismatch(tmp_path):
    _write_mnist(tmp_path, False, np.random.default_rng(0))
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(idx_bytes(np.array([1, 2], dtype=np.uint8)))
    with pytest.raises(ValueError, match="3 t10k images but 2 labels"):
        load_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="t10k-labels"):
        load_mnist(tmp_path)


# ------------------------------------------------------------------------------------------------------ CIFAR


def _cifar_batch(rng, n: int, keys_as_bytes: bool, label_key: str = "labels", k: int = 10) -> tuple[dict, np.ndarray]:
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    labels = rng.integers(0, k, n).tolist()
    d = {"batch_label": "training batch 1 of 5", "data": data, label_key: labels,
         "filenames": [f"img_{i}.png".encode() for i in range(n)]}
    if keys_as_bytes:  # what the Python-2 release looks like under encoding='bytes'
        d = {key.encode(): v for key, v in d.items()}
    return d, data


@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize("keys_as_bytes", [False, True])
def test_cifar_batch_round_trip(tmp_path, protocol, keys_as_bytes):
    d, data = _cifar_batch(np.random.default_rng(protocol), 6, keys_as_bytes)
    f = tmp_path / "data_batch_1"
    f.write_bytes(pickle.dumps(d, protocol=protocol))
    x, y = read_cifar_batch(f)
    assert x.dtype == torch.uint8 and x.shape == (6, 3, 32, 32)
    assert np.array_equal(x.numpy().reshape(6, -1), data)
    assert np.array_equal(x[2, 1].numpy(), data[2, 1024:2048].reshape(32, 32))  # green plane, row-major
    labels = d[b"labels" if keys_as_bytes else "labels"]
    assert y.tolist() == labels and y.dtype == torch.int64


def _py2_cifar_pickle(data: np.ndarray, labels: list[int]) -> bytes:
    """Protocol-2 pickle as Python 2's cPickle wrote the CIFAR release: py2 ``str`` (BINSTRING) payloads."""
    def s(b: bytes) -> bytes:
        return b"T" + struct.pack("<I", len(b)) + b

    dtype = b"cnumpy\ndtype\n" + s(b"u1") + b"K\x00K\x01\x87R(K\x03" + s(b"|") + \
        b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
    arr = (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85" + s(b"b") + b"\x87R(K\x01"
           + b"J" + struct.pack("<i", data.shape[0]) + b"M\x00\x0c\x86" + dtype + b"\x89" + s(data.tobytes()) + b"tb")
    lab = b"](" + b"".join(b"K" + bytes([v]) for v in labels) + b"e"
    name = s(b"batch_label") + s(b"testing batch 1 of 1")
    return b"\x80\x02}(" + s(b"data") + arr + s(b"labels") + lab + name + b"u."


def test_cifar_python2_batch(tmp_path):
    data = np.random.default_rng(5).integers(0, 256, (3, 3072), dtype=np.uint8)
    f = tmp_path / "test_batch"
    f.write_bytes(_py2_cifar_pickle(data, [3, 9, 0]))
    ref = pickle.loads(f.read_bytes(), encoding="bytes")  # our own fixture: plain pickle as the reference
    assert np.array_equal(ref[b"data"], data)
    x, y = read_cifar_batch(f)
    assert np.array_equal(x.numpy().reshape(3, -1), data) and y.tolist() == [3, 9, 0]


def test_cifar10_directory(tmp_path):
    rng = np.random.default_rng(1)
    datas, labels = [], []
    for i in (1, 2):
        d, data = _cifar_batch(rng, 4, True)
        (tmp_path / f"data_batch_{i}").write_bytes(pickle.dumps(d, protocol=2))
        datas.append(data)
        labels += d[b"labels"]
    d, _ = _cifar_batch(rng, 3, True)
    (tmp_path / "test_batch").write_bytes(pickle.dumps(d, protocol=2))
    names = [f"c{i}".encode() for i in range(10)]
    (tmp_path / "batches.meta").write_bytes(pickle.dumps({b"label_names": names, b"num_vis": 3072}, protocol=2))
    ds = load_path("cifar", tmp_path)
    assert ds.name == "cifar10" and ds.num_classes == 10 and ds.input_spec == "image[B, 3, 32, 32]"
    assert ds.meta["class_names"] == [f"c{i}" for i in range(10)]
    np.testing.assert_array_equal((ds.train[0] * 255).round().to(torch.uint8).numpy().reshape(8, -1),
                                  np.concatenate(datas))
    assert ds.train[1].tolist() == labels and ds.test[0].shape == (3, 3, 32, 32)


@pytest.mark.parametrize("coarse", [False, True])
def test_cifar100_directory(tmp_path, coarse):
    rng = np.random.default_rng(2)
    for split, n in (("train", 5), ("test", 2)):
        d, _ = _cifar_batch(rng, n, False, "fine_labels", 100)
        d["coarse_labels"] = [v // 5 for v in d["fine_labels"]]
        (tmp_path / split).write_bytes(pickle.dumps(d))
    ds = load_cifar(tmp_path, coarse=coarse)
    assert ds.num_classes == (20 if coarse else 100)
    train = pickle.loads((tmp_path / "train").read_bytes())  # our own fixture, safe to load plainly
    assert ds.train[1].tolist() == train["coarse_labels" if coarse else "fine_labels"]


def test_cifar_bad_batches(tmp_path):
    f = tmp_path / "b"
    f.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(ValueError, match="pickled dict"):
        read_cifar_batch(f)
    f.write_bytes(pickle.dumps({"data": np.zeros((2, 3072), np.float32), "labels": [0, 1]}))
    with pytest.raises(ValueError, match="uint8"):
        read_cifar_batch(f)
    f.write_bytes(pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [0]}))
    with pytest.raises(ValueError, match="2 images"):
        read_cifar_batch(f)


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_cifar_malicious_pickle_is_refused(tmp_path, protocol):
    marker = tmp_path / "pwned"
    f = tmp_path / "data_batch_1"
    f.write_bytes(pickle.dumps({"data": _Evil(marker), "labels": [0]}, protocol=protocol))
    with pytest.raises(UnsafePickleError, match=r"refusing to unpickle global (posix|os|nt)\.system"):
        read_cifar_batch(f)
    assert not marker.exists()


# ------------------------------------------------------------------------------------------------------- Cora


def _write_cora(root, stem="cora"):
    content = [("31336", [0, 1, 0, 0], "Neural_Networks"), ("1061127", [1, 0, 0, 1], "Rule_Learning"),
               ("1106406", [0, 0, 1, 0], "Reinforcement_Learning"), ("13195", [1, 1, 0, 0], "Neural_Networks"),
               ("37879", [0, 0, 0, 1], "Rule_Learning"), ("1126012", [1, 0, 1, 0], "Reinforcement_Learning")]
    (root / f"{stem}.content").write_text(
        "".join(f"{pid}\t" + "\t".join(map(str, f)) + f"\t{lab}\n" for pid, f, lab in content))
    cites = [("31336", "1061127"), ("1061127", "31336"), ("13195", "31336"), ("37879", "37879"),
             ("1106406", "1126012"), ("999", "31336")]  # duplicate (reversed), self citation, unknown id
    (root / f"{stem}.cites").write_text("".join(f"{a}\t{b}\n" for a, b in cites))
    return content


def test_cora_round_trip(tmp_path):
    content = _write_cora(tmp_path)
    g = read_cora(tmp_path / "cora.content", tmp_path / "cora.cites")
    assert g.node_ids == [c[0] for c in content]
    assert g.x.dtype == torch.float32 and g.x.tolist() == [c[1] for c in content]
    assert g.class_names == ["Neural_Networks", "Reinforcement_Learning", "Rule_Learning"]
    assert [g.class_names[i] for i in g.y.tolist()] == [c[2] for c in content]
    assert g.edge_index.tolist() == [[0, 0, 1, 2, 3, 5], [1, 3, 0, 5, 0, 2]]
    assert g.dropped_edges == 1


def test_cora_dataset_split(tmp_path):
    _write_cora(tmp_path)
    ds = load_path("cora", tmp_path, seed=0, test_fraction=0.5)
    _, _, y, train_mask = ds.train
    test_mask = ds.test[3]
    assert ds.task == "node_classification" and ds.num_classes == 3 and ds.input_spec == "graph[N, 4]"
    assert not (train_mask & test_mask).any() and bool((train_mask | test_mask).all())
    assert torch.bincount(y[test_mask], minlength=3).tolist() == [1, 1, 1]  # stratified: one per class
    again = load_cora(tmp_path / "cora.content", seed=0, test_fraction=0.5)
    assert torch.equal(again.test[3], test_mask)


def test_cora_ragged_rows(tmp_path):
    (tmp_path / "c.content").write_text("1\t0\t1\tA\n2\t1\tB\n")
    (tmp_path / "c.cites").write_text("")
    with pytest.raises(ValueError, match=r"c.content:2: 1 features, earlier lines have 2"):
        load_cora(tmp_path)


# -------------------------------------------------------------------------------------------------- Planetoid


def _write_planetoid(root, name="tiny", gap=False):
    import collections

    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    n_all, f, k = 5, 3, 3
    test_ids = [7, 5, 6] if not gap else [8, 5, 6]  # with gap: node 7 is an isolated test-range node
    allx = rng.integers(0, 2, (n_all, f)).astype(np.float32)
    tx = rng.integers(0, 2, (3, f)).astype(np.float32)
    ally = np.eye(k)[[0, 1, 2, 0, 1]]
    ty = np.eye(k)[[2, 0, 1]]
    graph = collections.defaultdict(list, {0: [1, 5], 1: [0], 2: [3], 5: [0, 6], 6: [5]})
    objs = {"x": sp.csr_matrix(allx[:2]), "y": ally[:2], "allx": sp.csr_matrix(allx), "ally": ally,
            "tx": sp.csr_matrix(tx), "ty": ty, "graph": graph}
    for key, obj in objs.items():
        (root / f"ind.{name}.{key}").write_bytes(pickle.dumps(obj, protocol=2))
    (root / f"ind.{name}.test.index").write_text("\n".join(map(str, test_ids)) + "\n")
    return allx, tx, ally, ty, test_ids


@pytest.mark.parametrize("gap", [False, True])
def test_planetoid_round_trip(tmp_path, gap):
    allx, tx, ally, ty, test_ids = _write_planetoid(tmp_path, gap=gap)
    ds = load_path("planetoid", tmp_path)
    x, edge_index, y, train_mask = ds.train
    n = 9 if gap else 8
    assert x.shape == (n, 3) and ds.num_classes == 3 and ds.name == "tiny"
    np.testing.assert_array_equal(x[:5].numpy(), allx)
    for row, node in enumerate(test_ids):  # tx row i belongs to node test.index[i]
        np.testing.assert_array_equal(x[node].numpy(), tx[row])
        assert int(y[node]) == int(ty[row].argmax())
    if gap:
        assert x[7].abs().sum() == 0 and int(y[7]) == 0
    assert y[:5].tolist() == ally.argmax(1).tolist()
    assert train_mask.nonzero().flatten().tolist() == [0, 1]
    assert ds.test[3].nonzero().flatten().tolist() == sorted(test_ids)
    assert ds.meta["val_idx"].tolist() == list(range(2, n))
    expected = {(0, 1), (0, 5), (2, 3), (5, 6)}
    assert set(map(tuple, edge_index.t().tolist())) == expected | {(b, a) for a, b in expected}


def test_planetoid_malicious_graph_is_refused(tmp_path):
    _write_planetoid(tmp_path)
    marker = tmp_path / "pwned"
    (tmp_path / "ind.tiny.graph").write_bytes(pickle.dumps({0: _Evil(marker)}, protocol=2))
    with pytest.raises(UnsafePickleError, match="ind.tiny.graph"):
        load_planetoid(tmp_path)
    assert not marker.exists()


# ------------------------------------------------------------------------------------------------- CSV series


def test_csv_round_trip_with_header_and_date_column(tmp_path):
    rng = np.random.default_rng(0)
    values = np.round(rng.standard_normal((30, 2)) * 100, 3)
    lines = ["date,load,temp"] + [f"2020-01-{i + 1:02d},{a!r},{b!r}" for i, (a, b) in enumerate(values.tolist())]
    f = tmp_path / "s.csv"
    f.write_text("\n".join(lines) + "\n")
    out, names = read_csv_series(f)
    assert names == ["load", "temp"] and out.dtype == torch.float64
    assert np.array_equal(out.numpy(), values)  # exact: repr round trip of float64
    ds = load_path("csv", f, window=5, test_fraction=0.2, standardize=False)
    (xtr, ytr), (xte, yte) = ds.train, ds.test
    assert ds.input_spec == "sequence[B, 5, 2]" and ds.target_dim == 2
    assert xtr.shape == (19, 5, 2) and xte.shape == (6, 5, 2)  # train period = 24 steps
    v32 = torch.from_numpy(values.astype(np.float32))
    for i in range(xtr.shape[0]):
        assert torch.equal(xtr[i], v32[i:i + 5]) and torch.equal(ytr[i], v32[i + 5])
    for i in range(xte.shape[0]):
        assert torch.equal(xte[i], v32[19 + i:24 + i]) and torch.equal(yte[i], v32[24 + i])


def test_csv_headerless_whitespace_target_and_standardization(tmp_path):
    values = np.arange(40, dtype=np.float64).reshape(20, 2) ** 1.5
    f = tmp_path / "s.txt"
    f.write_text("\n".join(" ".join(repr(v) for v in row) for row in values.tolist()))
    ds = load_csv_series(f, window=3, horizon=2, target=[1], test_fraction=0.25)
    mean, std = values[:15].mean(0), values[:15].std(0)  # train period: first 15 steps only
    np.testing.assert_allclose(ds.meta["mean"].numpy(), mean, rtol=1e-6)
    z = (values - mean) / std
    assert ds.target_dim == 1 and ds.meta["target_columns"] == ["c1"]
    np.testing.assert_allclose(ds.train[0][0].numpy(), z[0:3], rtol=1e-6)
    np.testing.assert_allclose(ds.train[1][:, 0].numpy(), z[4:15, 1], rtol=1e-6)  # target t = i + 3 + 2 - 1
    np.testing.assert_allclose(ds.test[1][:, 0].numpy(), z[15:, 1], rtol=1e-6)


def test_csv_errors(tmp_path):
    f = tmp_path / "s.csv"
    f.write_text("a,b\n1,2\n3,\n")
    with pytest.raises(ValueError, match=r"data row 2, column 'b': '' is not a number"):
        read_csv_series(f)
    f.write_text("a,b\n1,2\n3,4\n")
    with pytest.raises(ValueError, match="did you mean 'b'"):
        read_csv_series(f, columns=["bb"])
    with pytest.raises(ValueError, match="too short"):
        load_csv_series(f, window=5)


# --------------------------------------------------------------------------------------------------------- .ts


def test_ts_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    series = np.round(rng.standard_normal((5, 2, 7)), 4)  # [n, channels, length]
    labels = ["up", "down", "up", "flat", "down"]
    header = ["# comment", "@problemName Toy", "@timeStamps false", "@missing false", "@univariate false",
              "@dimensions 2", "@equalLength true", "@seriesLength 7", "@classLabel true up down flat", "@data"]
    rows = [":".join(",".join(repr(v) for v in ch) for ch in s) + f":{lab}" for s, lab in zip(series.tolist(), labels)]
    (tmp_path / "Toy_TRAIN.ts").write_text("\n".join(header + rows[:3]) + "\n")
    (tmp_path / "Toy_TEST.ts").write_text("\n".join(header + rows[3:]) + "\n")
    ts = read_ts(tmp_path / "Toy_TRAIN.ts")
    assert ts.class_labels == ["up", "down", "flat"] and ts.labels == labels[:3]
    np.testing.assert_array_equal(ts.x.numpy(), series[:3].transpose(0, 2, 1).astype(np.float32))
    ds = load_ucr(tmp_path, standardize=False)
    assert ds.name == "Toy" and ds.input_spec == "sequence[B, 7, 2]" and ds.num_classes == 3
    assert ds.train[1].tolist() == [0, 1, 0] and ds.test[1].tolist() == [2, 1]
    np.testing.assert_array_equal(ds.test[0].numpy(), series[3:].transpose(0, 2, 1).astype(np.float32))


def test_ts_rejects_unequal_length(tmp_path):
    f = tmp_path / "X_TRAIN.ts"
    f.write_text("@classLabel true a b\n@data\n1,2,3:a\n1,2:b\n")
    with pytest.raises(ValueError, match="series shape differs"):
        read_ts(f)


def test_load_path_unknown_kind_and_missing_path(tmp_path):
    with pytest.raises(ValueError, match="did you mean 'cifar'"):
        load_path("cifra", tmp_path)
    with pytest.raises(FileNotFoundError):
        load_path("csv", tmp_path / "nope.csv")
