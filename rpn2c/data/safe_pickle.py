"""A restricted unpickler for the pickle-based dataset formats (CIFAR python batches, Planetoid ``ind.*`` files).

``pickle.load`` on a user file runs whatever callable the file names (``os.system`` included). ``safe_load``
resolves globals against a fixed allow-list instead and refuses everything else with `UnsafePickleError`:

* containers and scalars: ``dict list tuple set frozenset bytes bytearray str int float complex bool object``,
  ``collections.OrderedDict``, ``collections.defaultdict`` (factory limited to ``list dict set int`` or none),
  ``_codecs.encode`` (latin-1 only: how Python 3 writes ``bytes`` at protocols 0-2);
* numpy arrays and scalars (``numpy.core``/``numpy._core`` ``multiarray._reconstruct`` / ``multiarray.scalar`` /
  ``numeric._frombuffer``, ``numpy.ndarray``, ``numpy.dtype``). These names map to local stand-ins, never to
  numpy's own callables: a dtype must be a plain bool/int/uint/float/complex/bytes/str dtype (no object, no
  structured, no sub-array dtypes) and arrays are rebuilt from their raw bytes with ``numpy.frombuffer`` after a
  size check, so an object array (whose payload would be live Python objects) can never be produced;
* scipy sparse matrices ``csr/csc/coo`` (``scipy.sparse.*``), via ``copyreg._reconstructor`` only for those
  classes: their pickled state is collected into a stand-in and rebuilt with the validating scipy constructor.

Out-of-band buffers and persistent ids are refused too.
"""

from __future__ import annotations

import collections
import io
import os
import pickle
from typing import Any, BinaryIO

import numpy as np


class UnsafePickleError(pickle.UnpicklingError, ValueError):
    """The pickle names something outside the allow-list, or its numpy/scipy payload is malformed."""


_ALLOWED_KINDS = frozenset("biufcSU")  # bool, int, uint, float, complex, bytes, str: never 'O' or 'V'


class _DtypeState:
    """Stand-in for ``numpy.dtype(obj, align, copy)`` followed by BUILD(state)."""

    __slots__ = ("obj", "byteorder")

    def __init__(self, obj: Any) -> None:
        if isinstance(obj, bytes):  # Python 2 str under encoding='bytes'
            obj = obj.decode("latin1")
        if not isinstance(obj, str):
            raise UnsafePickleError(f"numpy dtype must be given by a type string, got {type(obj).__name__}")
        self.obj, self.byteorder = obj, "|"

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) < 5:
            raise UnsafePickleError("malformed numpy dtype state")
        byteorder, subarray, names, fields = state[1], state[2], state[3], state[4]
        if isinstance(byteorder, bytes):
            byteorder = byteorder.decode("latin1")
        if subarray is not None or names is not None or fields is not None:
            raise UnsafePickleError("structured or sub-array numpy dtypes are not allowed")
        if byteorder not in ("<", ">", "|", "="):
            raise UnsafePickleError(f"malformed numpy dtype byte order {byteorder!r}")
        self.byteorder = byteorder

    def resolve(self) -> np.dtype:
        try:
            dt = np.dtype(self.obj)
        except TypeError as exc:
            raise UnsafePickleError(f"unknown numpy dtype {self.obj!r}") from exc
        if dt.kind not in _ALLOWED_KINDS or dt.fields is not None or dt.subdtype is not None or dt.hasobject:
            raise UnsafePickleError(f"numpy dtype {dt!r} is not allowed (plain numeric/bytes/str only)")
        return dt.newbyteorder(self.byteorder) if self.byteorder in "<>" else dt


def _numpy_dtype(obj: Any, align: Any = False, copy: Any = False) -> _DtypeState:
    return _DtypeState(obj)


def _resolve_dtype(dtype: Any) -> np.dtype:
    if not isinstance(dtype, _DtypeState):
        raise UnsafePickleError(f"expected a numpy dtype, got {type(dtype).__name__}")
    return dtype.resolve()


def _as_bytes(data: Any) -> bytes:
    if isinstance(data, str):  # Python 2 str payloads decoded with encoding='latin1'
        return data.encode("latin1")
    if isinstance(data, (bytes, bytearray)):
        return bytes(data)
    raise UnsafePickleError(f"numpy payload must be raw bytes, got {type(data).__name__}")


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(isinstance(s, int) and s >= 0 for s in shape):
        raise UnsafePickleError(f"malformed numpy shape {shape!r}")
    return tuple(shape)


def _array_from_bytes(data: Any, dtype: np.dtype, shape: tuple[int, ...], fortran: bool) -> np.ndarray:
    raw = _as_bytes(data)
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        raise UnsafePickleError(f"numpy payload has {len(raw)} bytes, shape {shape} of {dtype} needs {expected}")
    flat = np.frombuffer(raw, dtype=dtype).copy()
    return flat.reshape(shape, order="F" if fortran else "C")


class _NdarrayClass:
    """Stand-in for the ``numpy.ndarray`` global (only ever passed to ``_reconstruct``)."""


class _ArrayState:
    """Stand-in for ``numpy.core.multiarray._reconstruct(ndarray, shape, typecode)`` followed by BUILD."""

    __slots__ = ("array",)

    def __init__(self) -> None:
        self.array: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise UnsafePickleError("malformed numpy array state")
        if len(state) == 5:
            state = state[1:]  # leading pickle-format version
        shape, dtype, fortran, data = state
        self.array = _array_from_bytes(data, _resolve_dtype(dtype), _shape(shape), bool(fortran))


def _reconstruct(subtype: Any, shape: Any = (0,), typecode: Any = b"b") -> _ArrayState:
    if subtype is not _NdarrayClass:
        raise UnsafePickleError("numpy array subclasses are not allowed")
    return _ArrayState()


def _frombuffer(buf: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    if order not in ("C", "F"):
        raise UnsafePickleError(f"malformed numpy order {order!r}")
    return _array_from_bytes(buf, _resolve_dtype(dtype), _shape(shape), order == "F")


def _scalar(dtype: Any, data: Any = None) -> Any:
    dt = _resolve_dtype(dtype)
    return _array_from_bytes(data, dt, (), False)[()]


def _codecs_encode(text: Any, encoding: Any = "utf-8") -> bytes:
    if not isinstance(text, str) or str(encoding).lower().replace("-", "") not in ("latin1", "iso88591"):
        raise UnsafePickleError("_codecs.encode is only allowed as latin-1 bytes encoding")
    return text.encode("latin1")


_FACTORIES = (list, dict, set, int, None)


def _defaultdict(factory: Any = None, *args: Any) -> collections.defaultdict:
    if factory not in _FACTORIES or args:
        raise UnsafePickleError(f"defaultdict factory {factory!r} is not allowed")
    return collections.defaultdict(factory)


class _SparseState:
    """Stand-in for a pickled scipy sparse matrix: collects its state dict, rebuilt after loading."""

    format = ""

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, dict):
            raise UnsafePickleError("malformed scipy sparse state")
        self.state = {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in state.items()}


class _CsrState(_SparseState):
    format = "csr"


class _CscState(_SparseState):
    format = "csc"


class _CooState(_SparseState):
    format = "coo"


def _copyreg_reconstructor(cls: Any, base: Any, state: Any) -> _SparseState:
    if not (isinstance(cls, type) and issubclass(cls, _SparseState)) or base is not object or state is not None:
        raise UnsafePickleError("copyreg._reconstructor is only allowed for scipy sparse matrices")
    return cls()


def _sparse_globals() -> dict[tuple[str, str], Any]:
    out: dict[tuple[str, str], Any] = {}
    for fmt, cls in (("csr", _CsrState), ("csc", _CscState), ("coo", _CooState)):
        for module in (f"scipy.sparse.{fmt}", f"scipy.sparse._{fmt}", "scipy.sparse"):
            for name in (f"{fmt}_matrix", f"{fmt}_array"):
                out[(module, name)] = cls
    return out


_ALLOWED: dict[tuple[str, str], Any] = {
    **{(m, t.__name__): t for m in ("builtins", "__builtin__")
       for t in (dict, list, tuple, set, frozenset, bytes, bytearray, str, int, float, complex, bool, object)},
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("collections", "defaultdict"): _defaultdict,
    ("_codecs", "encode"): _codecs_encode,
    ("copyreg", "_reconstructor"): _copyreg_reconstructor,
    ("copy_reg", "_reconstructor"): _copyreg_reconstructor,
    ("numpy", "ndarray"): _NdarrayClass,
    ("numpy", "dtype"): _numpy_dtype,
    **{(f"{core}.multiarray", "_reconstruct"): _reconstruct for core in ("numpy.core", "numpy._core")},
    **{(f"{core}.multiarray", "scalar"): _scalar for core in ("numpy.core", "numpy._core")},
    **{(f"{core}.numeric", "_frombuffer"): _frombuffer for core in ("numpy.core", "numpy._core")},
    **_sparse_globals(),
}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f"refusing to unpickle global {module}.{name}: only containers, numbers, strings, numpy arrays "
                "and scipy sparse matrices are allowed in data files") from None

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("persistent ids are not allowed in data files")


_STANDINS = (_ArrayState, _DtypeState, _SparseState)


def _finalize(obj: Any, memo: dict[int, Any]) -> Any:
    """Replace array/sparse stand-ins by real objects throughout the loaded container tree."""
    key = id(obj)
    if key in memo:
        return memo[key]
    if isinstance(obj, _ArrayState):
        if obj.array is None:
            raise UnsafePickleError("numpy array without state")
        memo[key] = obj.array
    elif isinstance(obj, _DtypeState):
        memo[key] = obj.resolve()
    elif isinstance(obj, _SparseState):
        memo[key] = _build_sparse(obj, memo)
    elif isinstance(obj, dict):  # dict, OrderedDict, defaultdict: patched in place
        if any(isinstance(k, _STANDINS) for k in obj):
            raise UnsafePickleError("arrays are not allowed as dict keys")
        memo[key] = obj
        for k in list(obj):
            obj[k] = _finalize(obj[k], memo)
    elif isinstance(obj, list):
        memo[key] = obj
        obj[:] = [_finalize(v, memo) for v in obj]
    elif isinstance(obj, (tuple, set, frozenset)):
        memo[key] = type(obj)(_finalize(v, memo) for v in obj)
    elif isinstance(obj, type) or callable(obj) and not isinstance(obj, (np.ndarray, np.generic)):
        raise UnsafePickleError(f"a bare {obj!r} is not allowed as data")
    else:
        memo[key] = obj
    return memo[key]


def _build_sparse(obj: _SparseState, memo: dict[int, Any]) -> Any:
    import scipy.sparse as sp

    state = getattr(obj, "state", None)
    if state is None:
        raise UnsafePickleError("scipy sparse matrix without state")
    state = {k: _finalize(v, memo) for k, v in state.items()}
    shape = _shape(state.get("_shape", state.get("shape")))
    if len(shape) != 2:
        raise UnsafePickleError(f"sparse matrix shape must be 2-D, got {shape}")

    def arr(k: str) -> np.ndarray:
        v = state.get(k)
        if not isinstance(v, np.ndarray) or v.ndim != 1:
            raise UnsafePickleError(f"scipy {obj.format} state needs a 1-D array {k!r}")
        return v

    try:
        if obj.format == "coo":
            if "coords" in state:
                row, col = (np.asarray(c) for c in state["coords"])
            else:
                row, col = arr("row"), arr("col")
            m = sp.coo_matrix((arr("data"), (row, col)), shape=shape)
        else:
            cls = sp.csr_matrix if obj.format == "csr" else sp.csc_matrix
            m = cls((arr("data"), arr("indices"), arr("indptr")), shape=shape)
            m.check_format(full_check=True)
    except (ValueError, TypeError, IndexError) as exc:
        raise UnsafePickleError(f"malformed scipy {obj.format} matrix: {exc}") from exc
    return m


def safe_load(source: str | os.PathLike[str] | bytes | BinaryIO, *, encoding: str = "latin1") -> Any:
    """Unpickle ``source`` (a path, the raw bytes, or a binary file object) with the allow-list above.

    ``encoding`` decodes Python 2 ``str`` payloads ('latin1' keeps numpy buffers byte-exact; 'bytes' keeps them as
    bytes). Raises `UnsafePickleError` for anything outside the allow-list.
    """
    if isinstance(source, (bytes, bytearray)):
        stream: BinaryIO = io.BytesIO(source)
    elif isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as fh:
            stream = io.BytesIO(fh.read())
    else:
        stream = source
    try:
        return _finalize(_RestrictedUnpickler(stream, encoding=encoding, buffers=None).load(), {})
    except UnsafePickleError:
        raise
    except (pickle.UnpicklingError, EOFError, TypeError, AttributeError, IndexError, ValueError, KeyError,
            RecursionError) as exc:
        raise UnsafePickleError(f"not a valid data pickle: {type(exc).__name__}: {exc}") from exc
