"""The restricted unpickler: exact round trips of allowed data, refusal of everything else."""

from __future__ import annotations

import collections
import os
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from rpn2c.data import UnsafePickleError, safe_load

DTYPES = ["u1", "i1", "<i2", ">i4", "<i8", "<f4", ">f8", "<c16", "?", "S3", "<U2"]


@settings(max_examples=25, deadline=None)
@given(dtype=st.sampled_from(DTYPES), shape=st.lists(st.integers(0, 4), min_size=0, max_size=3),
       protocol=st.integers(0, 5), fortran=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_numpy_arrays_round_trip_exactly(dtype, shape, protocol, fortran, seed):
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8).tobytes()
    if np.dtype(dtype).kind in "SU?":
        arr = rng.integers(0, 2, size=shape).astype(dtype)
    else:
        arr = np.frombuffer(raw, dtype=dtype).reshape(shape)
    arr = np.asfortranarray(arr) if fortran else np.ascontiguousarray(arr)
    out = safe_load(pickle.dumps({"a": arr, "s": arr[()] if arr.ndim == 0 else None}, protocol=protocol))
    assert out["a"].dtype == arr.dtype and out["a"].shape == arr.shape
    assert out["a"].tobytes() == arr.tobytes()  # bit-exact, NaN payloads included


@pytest.mark.parametrize("protocol", range(6))
def test_containers_sparse_and_scalars(protocol):
    m = sp.random(5, 4, density=0.4, format="csr", random_state=0)
    obj = {"m": m, "c": sp.csc_matrix(m), "o": sp.coo_matrix(m), "g": collections.defaultdict(list, {3: [1, 2]}),
           "od": collections.OrderedDict(a=1), "t": (1, 2.5, "x", b"y", None, True), "set": {1, 2},
           "n": np.float32(1.5), "big": 2**70, "c1": 1 + 2j}
    out = safe_load(pickle.dumps(obj, protocol=protocol))
    for key in ("m", "c", "o"):
        assert sp.issparse(out[key]) and np.array_equal(out[key].toarray(), m.toarray())
    assert out["g"] == {3: [1, 2]} and out["g"].default_factory is list
    assert out["od"] == {"a": 1} and out["t"] == obj["t"] and out["set"] == {1, 2}
    assert out["n"] == np.float32(1.5) and out["n"].dtype == np.float32 and out["big"] == 2**70 and out["c1"] == 1 + 2j


class _Reduce:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


class _Plain:
    pass


@pytest.mark.parametrize("payload", [
    _Reduce(os.system, ("echo unsafe",)),
    _Reduce(eval, ("1 + 1",)),
    _Reduce(getattr, ("abc", "upper")),
    _Reduce(__import__, ("os",)),
    _Plain(),
    np.array([1, "a"], dtype=object),
    np.zeros(2, dtype=[("a", "<f4")]),
    np.ma.array([1, 2]),
    np.matrix([[1]]),
    np.dtype("O"),
])
@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_refuses_everything_else(payload, protocol, tmp_path):
    f = tmp_path / "p"
    f.write_bytes(pickle.dumps({"x": [payload]}, protocol=protocol))
    with pytest.raises(UnsafePickleError):
        safe_load(f)


def test_malicious_pickle_never_runs(tmp_path):
    marker = tmp_path / "ran"
    data = pickle.dumps(_Reduce(os.system, (f"touch {marker}",)))
    with pytest.raises(UnsafePickleError, match=r"posix\.system|os\.system|nt\.system"):
        safe_load(data)
    assert not marker.exists()
    pickle.loads(data)  # control: the same bytes do run under plain pickle
    assert marker.exists()


def test_malformed_array_payload_is_refused():
    good = pickle.dumps(np.arange(4, dtype=np.int32), protocol=2)
    bad = good.replace(b"\x00\x00\x00\x00\x01\x00\x00\x00", b"\x00\x00\x00\x00\x01\x00\x00")  # drop a byte
    assert bad != good
    with pytest.raises(UnsafePickleError):
        safe_load(bad)
    with pytest.raises(UnsafePickleError, match="not a valid data pickle"):
        safe_load(b"not a pickle")


# A Python-2 cPickle (protocol 2) of {'data': uint8 [[1, 2], [255, 0]], 'labels': [7]}, assembled opcode by opcode,
# as in the original CIFAR python release: py2 ``str`` payloads (SHORT_BINSTRING) instead of Python 3 bytes.
_PY2_DTYPE = b"cnumpy\ndtype\nU\x02u1K\x00K\x01\x87R(K\x03U\x01|NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
_PY2_ARRAY = (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85U\x01b\x87R"
              b"(K\x01K\x02K\x02\x86" + _PY2_DTYPE + b"\x89U\x04\x01\x02\xff\x00tb")
PY2_PICKLE = b"\x80\x02}U\x04data" + _PY2_ARRAY + b"sU\x06labels]K\x07as."


@pytest.mark.parametrize("encoding", ["latin1", "bytes"])
def test_python2_pickle(encoding):
    out = safe_load(PY2_PICKLE, encoding=encoding)
    key = "data" if encoding == "latin1" else b"data"
    assert out[key].dtype == np.uint8 and out[key].tolist() == [[1, 2], [255, 0]]
    ref = pickle.loads(PY2_PICKLE, encoding=encoding)  # our own bytes: plain pickle as the reference
    assert np.array_equal(ref[key], out[key])
