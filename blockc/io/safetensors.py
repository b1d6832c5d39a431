"""Reading and writing safetensors files, treating every file as hostile.

The format: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
mapping each tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}``
(offsets into the data that follows the header; an optional ``__metadata__``
maps strings to strings), then the raw little-endian tensor bytes.

:func:`read` opens the file (refused unless it is a regular file), reads and
checks the header, and returns :class:`Tensor` objects that read their bytes
from the open file when asked (``Tensor.data``). Before anything is read into
an array, every field is checked: the header's length against the file, the
JSON (duplicate names refused, nesting bounded), each entry's keys and types,
the dtype, the shape (at most 64 dimensions of at most 2**40 elements, whose
product fits), the offsets (inside the data, end - begin equal to the shape's
bytes, no two tensors overlapping). Every error is a
:class:`blockc.BlockcValueError` naming the file and the tensor. Pure Python
and NumPy: no C code reads the header.

The bytes are read (``pread``), not memory-mapped: a file truncated while it is
open (another process writing over it in place) gives a short read, refused as
a ``BlockcValueError`` naming the tensor, where a mapping would kill the process
with SIGBUS. What a caller keeps is its own copy; a file replaced by rename
after :func:`read` is still read whole from the file that was opened.

:func:`write` writes to a temporary file with a unique name in the target's
directory and renames it into place (:func:`blockc._files.atomic_write`): a
reader sees the old file or the new one, whole, and two writers never share a
temporary file.

Python's pickle-based checkpoints (``pytorch_model.bin``) are never opened.
"""
from __future__ import annotations

import json
import os
import struct
import threading
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from .. import _files
from .._args import MAX_ELEMENTS
from .._errors import BlockcTypeError, BlockcValueError

__all__ = ["read", "write", "Tensor", "DTYPES", "MAX_HEADER", "MAX_DIMS"]

#: safetensors dtype -> (NumPy dtype, how blockc reads it). BF16 is read as uint16
#: (NumPy has no bfloat16) and widened exactly by :func:`to_float32`.
DTYPES: Dict[str, np.dtype] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"), "I64": np.dtype("<i8"), "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}

#: Largest header blockc reads (transformers' own limit is 100 MB).
MAX_HEADER = 100 * 1024 * 1024

#: Most dimensions a tensor may have (NumPy's limit).
MAX_DIMS = 64


class _Source:
    """The open file a :func:`read`'s tensors read from (closed with the last of them)."""
    __slots__ = ("file", "path", "lock", "__weakref__")

    def __init__(self, file, path: str):
        self.file, self.path, self.lock = file, path, threading.Lock()

    def read_into(self, buf: memoryview, offset: int, what: str) -> None:
        """Fill ``buf`` from the file at ``offset``; a short read (the file truncated
        since it was opened) is refused."""
        fd, done, n = self.file.fileno(), 0, len(buf)
        while done < n:
            if hasattr(os, "preadv"):
                got = os.preadv(fd, [buf[done:]], offset + done)
            else:  # no positional read: one reader at a time
                with self.lock:
                    self.file.seek(offset + done)
                    got = self.file.readinto(buf[done:])
            if not got:
                raise _fail(self.path, f"{what}: the file ended after {done} of its {n} bytes "
                                       "(truncated since it was opened)")
            done += got

    def __del__(self):
        try:
            self.file.close()
        except Exception:
            pass


class Tensor:
    """One tensor of a file: ``dtype`` (the safetensors name), ``shape``, ``data`` (its
    values, of ``DTYPES[dtype]``, read from the file each time ``data`` is asked for:
    a new read-only array)."""
    __slots__ = ("name", "dtype", "shape", "file", "_src", "_offset", "_data")

    def __init__(self, name: str, dtype: str, shape: Tuple[int, ...], data: Optional[np.ndarray],
                 file: str, _src: Optional[_Source] = None, _offset: int = 0):
        self.name, self.dtype, self.shape, self.file = name, dtype, tuple(shape), file
        self._src, self._offset, self._data = _src, _offset, data

    @property
    def data(self) -> np.ndarray:
        if self._data is not None:
            return self._data
        dt = DTYPES[self.dtype]
        a = np.empty(self.shape, dt)
        if a.nbytes:
            self._src.read_into(memoryview(a.reshape(-1).view(np.uint8)), self._offset,
                                f"tensor {self.name!r}")
        a.flags.writeable = False
        return a

    @property
    def nbytes(self) -> int:
        n = DTYPES[self.dtype].itemsize
        for s in self.shape:
            n *= s
        return n

    def to_float32(self) -> np.ndarray:
        """The values as float32 (bfloat16 and float16 widened exactly; float64 rounded).
        Other dtypes are refused."""
        return to_float32(self.data, self.dtype, f"{self.file}: tensor {self.name!r}")

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.dtype}, {self.shape})"



def to_float32(a: np.ndarray, dtype: str, where: str) -> np.ndarray:
    """Array ``a`` of safetensors dtype ``dtype`` as float32 (see :meth:`Tensor.to_float32`)."""
    if dtype == "F32":
        return a
    if dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    if dtype in ("F16", "F64"):
        return a.astype(np.float32)
    raise BlockcValueError(f"{where} has dtype {dtype}, not a floating dtype (F32, F16, BF16, F64)")


def _fail(path: str, msg: str) -> "BlockcValueError":
    return BlockcValueError(f"{path}: {msg}")


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def read_header(read: Any, size: int, path: str) -> Tuple[Dict[str, Any], Dict[str, str], int]:
    """(entries, metadata, data start) of a file of ``size`` bytes, all checked against
    each other and the size; ``read(offset, n)`` returns n bytes of the file (or raises)."""
    if size < 8:
        raise _fail(path, f"not a safetensors file: {size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", read(0, 8))
    if n > MAX_HEADER:
        raise _fail(path, f"header length {n} exceeds the limit of {MAX_HEADER} bytes")
    if n > size - 8:
        raise _fail(path, f"truncated: the header claims {n} bytes, the file has {size - 8} after the length")
    header = _files.loads_json(read(8, n), f"{path}: the header", object_pairs_hook=_no_duplicates)
    if not isinstance(header, dict):
        raise _fail(path, f"the header must be a JSON object, got {type(header).__name__}")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in meta.items()):
        raise _fail(path, "__metadata__ must map strings to strings")
    start = 8 + n
    data_len = size - start
    spans = []
    for name, e in header.items():
        where = f"tensor {name!r}"
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise _fail(path, f"{where}: an entry must have exactly dtype, shape and data_offsets")
        dt, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if not isinstance(dt, str) or dt not in DTYPES:
            raise _fail(path, f"{where}: unknown dtype {dt!r}")
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            raise _fail(path, f"{where}: the shape must be a list of integers >= 0, got {shape!r}")
        if len(shape) > MAX_DIMS:
            raise _fail(path, f"{where}: {len(shape)} dimensions, more than the {MAX_DIMS} "
                              "blockc reads")
        if any(s > MAX_ELEMENTS for s in shape):
            raise _fail(path, f"{where}: a dimension of {max(shape)}, more than the 2**40 "
                              "elements a tensor may have")
        if (not isinstance(offs, list) or len(offs) != 2
                or not all(type(o) is int for o in offs)):
            raise _fail(path, f"{where}: data_offsets must be two integers, got {offs!r}")
        begin, end = offs
        count = 1
        for s in shape:
            count *= s
        nbytes = count * DTYPES[dt].itemsize
        if not 0 <= begin <= end <= data_len:
            raise _fail(path, f"{where}: data_offsets [{begin}, {end}] lie outside the "
                              f"{data_len} bytes of data (truncated, or the header lies)")
        if end - begin != nbytes:
            raise _fail(path, f"{where}: data_offsets [{begin}, {end}] hold {end - begin} bytes "
                              f"but {dt} of shape {tuple(shape)} needs {nbytes}")
        spans.append((begin, end, name))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise _fail(path, f"tensors {n0!r} and {n1!r} overlap in the data")
    return header, meta, start


def read(path: str) -> Tuple[Dict[str, Tensor], Dict[str, str]]:
    """The tensors of a safetensors file and its metadata, every field checked.

    The file stays open while its tensors live; each ``Tensor.data`` reads the
    tensor's bytes from it into a new array (a short read, the file truncated
    since, is a ``ValueError``, never a crash).

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    tensors : dict of str to Tensor
        In the header's order.
    metadata : dict of str to str

    Raises
    ------
    ValueError
        Anything wrong with the file, naming it and the tensor; not a regular file.
    OSError
        The file cannot be opened.
    """
    path = os.fspath(path)
    f = _files.open_regular(path, "a safetensors file")
    src = _Source(f, path)
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        raise _fail(path, "empty file")

    def read_at(offset: int, n: int) -> bytes:
        buf = bytearray(n)
        src.read_into(memoryview(buf), offset, "the header")
        return bytes(buf)

    header, meta, start = read_header(read_at, size, path)
    out: Dict[str, Tensor] = {}
    for name, e in header.items():
        begin, _ = e["data_offsets"]
        out[name] = Tensor(name, e["dtype"], tuple(e["shape"]), None, path, src, start + begin)
    return out, meta


_FROM_NUMPY = {np.dtype("float32"): "F32", np.dtype("float16"): "F16", np.dtype("float64"): "F64",
               np.dtype("int64"): "I64", np.dtype("int32"): "I32", np.dtype("int8"): "I8",
               np.dtype("uint8"): "U8", np.dtype("bool"): "BOOL"}


def write(path: str, tensors: Mapping[str, Any], metadata: Optional[Mapping[str, str]] = None,
          bf16: Tuple[str, ...] = ()) -> None:
    """Write ``tensors`` (name -> NumPy array) as a safetensors file, in the mapping's order.

    Parameters
    ----------
    path : str or os.PathLike
    tensors : mapping of str to numpy.ndarray
    metadata : mapping of str to str, optional
        Stored as ``__metadata__`` (transformers expects ``{"format": "pt"}``).
    bf16 : tuple of str, optional
        Names whose arrays hold bfloat16 bits (uint16), written as BF16.

    Raises
    ------
    TypeError
        A name that is not a str, or an array of a dtype safetensors lacks.
    OSError
        The file cannot be written (the target is then untouched, no temporary file left).
    """
    header: Dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    arrays = []
    off = 0
    for name, a in tensors.items():
        if not isinstance(name, str):
            raise BlockcTypeError(f"tensor names must be str, got {type(name).__name__}")
        a = np.asarray(a, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        if name in bf16:
            if a.dtype != np.uint16:
                raise BlockcTypeError(f"tensor {name!r}: bfloat16 bits must be uint16, got {a.dtype}")
            dt = "BF16"
        else:
            dt = _FROM_NUMPY.get(a.dtype.newbyteorder("=") if a.dtype.byteorder == ">" else a.dtype)
            if dt is None:
                raise BlockcTypeError(f"tensor {name!r}: dtype {a.dtype} has no safetensors name")
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        arrays.append(a)
        off += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with _files.atomic_write(path) as f:  # a unique temporary name, renamed into place
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for a in arrays:
            f.write(a.reshape(-1).view(np.uint8).data)  # empty and 0-d arrays too
