"""Reading and writing GGUF files (llama.cpp's format), treating every file as hostile.

The format (versions 2 and 3, little-endian)::

    "GGUF"  uint32 version  uint64 tensor_count  uint64 kv_count
    kv_count x  (string key, uint32 value type, value)
    tensor_count x  (string name, uint32 n_dims, uint64 ne[n_dims], uint32 ggml type,
                     uint64 offset)
    padding to general.alignment (default 32)
    tensor data: each tensor at data start + offset, offsets multiples of the alignment

A string is a uint64 length and that many UTF-8 bytes; an array a uint32 element type, a uint64
count and the elements. ``ne[0]`` is the fastest-varying dimension: a (rows, cols) matrix is
stored with ``ne = [cols, rows]`` and rows of whole quantisation blocks.

:func:`read` reads the header (a prefix of the file, grown until the header fits) and keeps the
file open; a tensor's ``data`` are read from it when asked for (``os.preadv`` into a new array, one
copy from the page cache), never mapped: a file truncated or rewritten under a mapping kills the
reader with SIGBUS, while a short read here is a :class:`blockc.BlockcValueError` naming the tensor
(the policy of issue 19, as for safetensors). Before anything is read into an array, every field is
checked against the file's size: every count (a count is bounded by the bytes left: a lying count
cannot make it loop or allocate), every string length, every array, each tensor's dimensions (1 to
4 of them, each >= 1, the product below 2**40, the row a whole number of blocks), its type, its
offset (aligned, its bytes inside the data, no two tensors overlapping); duplicate keys and tensor
names, nested arrays and invalid UTF-8 are refused. Every error is a
:class:`blockc.BlockcValueError` naming the file and the key or tensor. Pure Python and NumPy: no C
code reads the header (every slice is bounds-checked; a string array, a vocabulary, in one pass:
:mod:`blockc.io.gguf_strings`).

:func:`write` writes a file atomically (a unique temporary name in the same directory, flushed
and fsynced, then renamed over the target), so a file blockc writes appears whole or not at
all.
"""
from __future__ import annotations

import os
import struct
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from .._errors import BlockcTypeError, BlockcValueError
from .._files import atomic_write, open_regular
from ..reference import ggml
from . import gguf_strings

__all__ = ["read", "write", "GGUFFile", "GGUFTensor", "Value", "TYPES", "TYPE_IDS",
           "VALUE_TYPES", "MAGIC", "DEFAULT_ALIGNMENT", "type_size", "row_bytes"]

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
_MAX_DIMS = 4
_MAX_ELEMENTS = 2 ** 40  # blockc's limit on one tensor (BC_MAX_ELEMENTS)
_HEADER_PREFIX = 1 << 22  # bytes :func:`read` reads first for the header (grown as needed)

# ---- the value types of the metadata ------------------------------------------------------------

#: value type id -> name (the spec's GGUF_TYPE_*)
VALUE_TYPES: Dict[int, str] = {0: "UINT8", 1: "INT8", 2: "UINT16", 3: "INT16", 4: "UINT32",
                               5: "INT32", 6: "FLOAT32", 7: "BOOL", 8: "STRING", 9: "ARRAY",
                               10: "UINT64", 11: "INT64", 12: "FLOAT64"}
_VT = {v: k for k, v in VALUE_TYPES.items()}
# the fixed-size scalar types: id -> struct format, NumPy dtype
_STRUCT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q",
           11: "<q", 12: "<d"}
_SCALAR: Dict[int, np.dtype] = {k: np.dtype(f) for k, f in _STRUCT.items()}

# ---- the tensor (ggml) types ---------------------------------------------------------------------

#: ggml type id -> (name, weights per block, bytes per block), for every type ggml defines
#: (ggml's facts, written once in :mod:`blockc.reference.ggml`; blockc reads the types it
#: dequantises, and refuses the others by name when a model needs them)
TYPES: Dict[int, Tuple[str, int, int]] = ggml.TYPES
#: ggml type name -> id
TYPE_IDS: Dict[str, int] = {v[0]: k for k, v in TYPES.items()}


def type_size(name: str) -> Tuple[int, int]:
    """(weights per block, bytes per block) of the ggml type ``name``.

    Raises
    ------
    ValueError
        An unknown type name.
    """
    t = TYPE_IDS.get(name)
    if t is None:
        raise BlockcValueError(f"unknown ggml type {name!r} (known: {', '.join(TYPE_IDS)})")
    return TYPES[t][1], TYPES[t][2]


def row_bytes(name: str, cols: int) -> int:
    """Bytes of one row of ``cols`` weights of type ``name`` (cols a multiple of its block).

    Raises
    ------
    ValueError
        An unknown type, or ``cols`` not a whole number of blocks.
    """
    bs, nb = type_size(name)
    if cols % bs:
        raise BlockcValueError(f"{name} stores rows in blocks of {bs} weights; {cols} is not a "
                               "multiple")
    return cols // bs * nb


class Value(NamedTuple):
    """A metadata value with its GGUF type: ``type`` a :data:`VALUE_TYPES` name ("UINT32",
    ..., "ARRAY"), ``value`` a Python scalar, a str, or for an ARRAY a list or 1-D NumPy
    array of elements of ``element`` type."""
    type: str
    value: Any
    element: Optional[str] = None


class GGUFTensor:
    """One tensor of a GGUF file.

    ``type`` is the ggml type name ("Q4_K", ...); ``shape`` is NumPy order (the last
    dimension varies fastest: ``ne`` reversed, a matrix (rows, cols)); ``data`` is a
    read-only uint8 array of its bytes, shaped (rows..., bytes per row): for a file
    (:func:`read`) read from it each time it is asked for (nothing is kept), for
    :func:`parse_bytes` a view into the bytes given.
    """
    __slots__ = ("name", "type", "shape", "offset", "nbytes", "_data", "_source", "file")

    def __init__(self, name: str, type: str, shape: Tuple[int, ...], offset: int, nbytes: int,
                 data: Optional[np.ndarray], file: str, source: Optional[Tuple[Any, int]] = None):
        self.name, self.type, self.shape, self.offset, self.nbytes = name, type, shape, offset, nbytes
        self._data, self._source, self.file = data, source, file

    @property
    def data(self) -> np.ndarray:
        """The tensor's bytes (see the class)."""
        if self._data is not None:
            return self._data
        a = self._read()
        a.flags.writeable = False
        return a

    @property
    def source(self) -> Optional[Tuple[Any, int]]:
        """(reader, file offset) of a tensor read when asked for; None: :attr:`data` is held."""
        return self._source

    def _read(self) -> np.ndarray:
        """A new array of the bytes read from the file, shaped (rows..., bytes per row)."""
        reader, at = self._source
        a = reader.read_at(at, self.nbytes, f"tensor {self.name!r}")
        rb = self.nbytes // max(1, int(np.prod(self.shape[:-1], dtype=np.int64)))
        return a.reshape(tuple(self.shape[:-1]) + (rb,))

    def to_float32(self) -> np.ndarray:
        """The values as a new float32 array of :attr:`shape` (dequantised exactly as ggml
        does; an F32 tensor of a file is its bytes read into the array, no second copy).

        Raises
        ------
        ValueError
            A type blockc does not dequantise (named).
        """
        if self.type not in ggml.DEQUANTISE:
            raise BlockcValueError(f"{self.file}: tensor {self.name!r} has type {self.type}, which "
                                   f"blockc does not read (it reads {', '.join(ggml.DEQUANTISE)})")
        if self.type == "F32" and self._data is None and np.little_endian:
            return self._read().reshape(-1).view(np.float32).reshape(self.shape)
        return ggml.dequantise(self.data, self.type).reshape(self.shape)

    def __repr__(self) -> str:
        return f"GGUFTensor({self.name!r}, {self.type}, {self.shape})"


class GGUFFile:
    """A parsed GGUF file: ``version``, ``alignment``, ``fields`` (key -> :class:`Value`, in
    the file's order), ``tensors`` (name -> :class:`GGUFTensor`, in the file's order),
    ``data_offset`` (where the tensor data starts). ``metadata`` maps each key to its value
    alone. A file :func:`read` returned stays open (its tensors' ``data`` are read from it)
    until :meth:`close`, a ``with`` block's end, or collection."""

    def __init__(self, path: str, version: int, alignment: int, fields: Dict[str, Value],
                 tensors: Dict[str, GGUFTensor], data_offset: int, reader: Any = None):
        self.path, self.version, self.alignment = path, version, alignment
        self.fields, self.tensors = fields, tensors
        self.data_offset, self._reader = data_offset, reader

    def close(self) -> None:
        """Close the file (a tensor's ``data`` can no longer be read); also at exit of a
        ``with`` block, and when the object is collected."""
        if self._reader is not None:
            self._reader.close()

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def metadata(self) -> Dict[str, Any]:
        return {k: v.value for k, v in self.fields.items()}

    def get(self, key: str, default: Any = None) -> Any:
        """The value of metadata ``key`` (``default`` when absent)."""
        v = self.fields.get(key)
        return default if v is None else v.value

    def __repr__(self) -> str:
        return (f"GGUFFile({self.path!r}, version={self.version}, {len(self.fields)} keys, "
                f"{len(self.tensors)} tensors)")


# ---- reading ------------------------------------------------------------------------------------

def _fail(path: str, msg: str) -> BlockcValueError:
    return BlockcValueError(f"{path}: {msg}")


class _More(Exception):
    """The header runs past the prefix read so far (not past the file): read more."""

    def __init__(self, upto: int):
        self.upto = upto


class _FileReader:
    """An open GGUF file read with ``os.preadv``: every read is checked to return all
    the bytes asked for (a file truncated since it was opened is an error, not SIGBUS)."""

    def __init__(self, fd: int, path: str, size: int):
        self.fd, self.path, self.size = fd, path, size

    def read_at(self, offset: int, n: int, what: str, into: Any = None) -> np.ndarray:
        """The ``n`` bytes at ``offset``: a new uint8 array, or ``into``'s first n (1-D)."""
        if self.fd < 0:
            raise _fail(self.path, f"{what}: the file was closed")
        out = np.empty(n, np.uint8) if into is None else into[:n]
        view, got = memoryview(out), 0
        while got < n:
            k = os.preadv(self.fd, [view[got:]], offset + got)
            if k <= 0:
                raise _fail(self.path, f"{what}: the file ended at offset {offset + got}, "
                                       f"{n - got} bytes short of what its header describes "
                                       f"(truncated while blockc read it?)")
            got += k
        return out

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __del__(self) -> None:
        self.close()


class _Cursor:
    """Reads the header from ``buf`` at ``pos``, every read checked against the file's
    ``size`` (a lying count or length is refused) and against the bytes ``buf`` holds (a
    prefix of the file: :class:`_More` when the header runs past it)."""

    def __init__(self, buf: Any, path: str, size: Optional[int] = None):
        self.buf, self.path, self.pos, self.have = buf, path, 0, len(buf)
        self.size = self.have if size is None else size

    def have_to(self, end: int) -> None:
        if end > self.have:
            raise _More(end)

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise _fail(self.path, f"truncated: {what} needs {n} bytes at offset {self.pos}, "
                                   f"the file has {self.size - self.pos} left")
        self.have_to(self.pos + n)

    def scalar(self, vt: int, what: str) -> Any:
        fmt = _STRUCT[vt]
        n = struct.calcsize(fmt)
        self.need(n, what)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v

    def string(self, what: str) -> str:
        n = self.scalar(10, f"the length of {what}")
        if n > self.size - self.pos:
            raise _fail(self.path, f"{what}: a string of {n} bytes at offset {self.pos}, longer "
                                   f"than the {self.size - self.pos} bytes left in the file")
        self.have_to(self.pos + n)
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as e:
            raise _fail(self.path, f"{what}: not valid UTF-8 ({e.reason} at byte {e.start})") from None

    def value(self, vt: int, where: str) -> Value:
        name = VALUE_TYPES.get(vt)
        if name is None:
            raise _fail(self.path, f"{where}: unknown value type {vt}")
        if vt == 8:
            return Value("STRING", self.string(where))
        if vt == 9:
            et = self.scalar(4, f"{where}'s element type")
            ename = VALUE_TYPES.get(et)
            if ename is None:
                raise _fail(self.path, f"{where}: an array of unknown value type {et}")
            if et == 9:
                raise _fail(self.path, f"{where}: an array of arrays (nested arrays are refused)")
            n = self.scalar(10, f"{where}'s element count")
            if et == 8:  # each string takes at least its 8-byte length
                if n > (self.size - self.pos) // 8:
                    raise _fail(self.path, f"{where}: an array of {n} strings cannot fit in the "
                                           f"{self.size - self.pos} bytes left")
                buf, pos, size, have = self.buf, self.pos, self.size, self.have
                fast = gguf_strings.strings(buf, pos, n, min(size, have))  # in one pass, or
                if isinstance(fast, int) and fast <= size:  # (past the prefix read so far)
                    raise _More(fast)
                if isinstance(fast, tuple):  # (None) one by one, naming the string at fault
                    self.pos = fast[1]
                    return Value("ARRAY", fast[0], "STRING")
                out: List[str] = []
                unpack = struct.Struct("<Q").unpack_from
                for i in range(n):
                    if 8 > size - pos:
                        raise _fail(self.path, f"{where}[{i}]: truncated at offset {pos}")
                    if pos + 8 > have:
                        raise _More(pos + 8)
                    (ln,) = unpack(buf, pos)
                    pos += 8
                    if ln > size - pos:
                        raise _fail(self.path, f"{where}[{i}]: a string of {ln} bytes at offset "
                                               f"{pos}, longer than the {size - pos} bytes left")
                    if pos + ln > have:
                        raise _More(pos + ln)
                    try:
                        out.append(bytes(buf[pos:pos + ln]).decode("utf-8"))
                    except UnicodeDecodeError as e:
                        raise _fail(self.path, f"{where}[{i}]: not valid UTF-8 ({e.reason})") from None
                    pos += ln
                self.pos = pos
                return Value("ARRAY", out, "STRING")
            dt = _SCALAR[et]
            if n > (self.size - self.pos) // dt.itemsize:
                raise _fail(self.path, f"{where}: an array of {n} {ename} cannot fit in the "
                                       f"{self.size - self.pos} bytes left")
            self.have_to(self.pos + n * dt.itemsize)
            a = np.frombuffer(self.buf, dtype=dt, count=n, offset=self.pos)
            self.pos += n * dt.itemsize
            if et == 7:
                if n and int(a.max()) > 1:
                    raise _fail(self.path, f"{where}: a BOOL array holds a byte other than 0 or 1")
                a = a.astype(bool)
            else:
                a = a.astype(dt.newbyteorder("="))  # an aligned native copy (keys are small)
            return Value("ARRAY", a, ename)
        v = self.scalar(vt, where)
        if vt == 7:
            if v not in (0, 1):
                raise _fail(self.path, f"{where}: a BOOL holds {v}, not 0 or 1")
            v = bool(v)
        return Value(name, v)


def _parse(buf: Any, path: str, reader: Optional[_FileReader] = None) -> GGUFFile:
    """The header of the file whose bytes are ``buf`` (with ``reader``: a prefix of the file
    it reads, :class:`_More` when the header runs past it), every field checked (buf only
    sliced); the tensors' data are views into ``buf``, or read by ``reader``."""
    c = _Cursor(buf, path, None if reader is None else reader.size)
    if c.size >= 4:
        c.have_to(4)
    if c.size < 4 or bytes(buf[:4]) != MAGIC:
        raise _fail(path, "not a GGUF file (it does not start with the bytes 'GGUF')")
    c.pos = 4
    version = c.scalar(4, "the version")
    if version not in (2, 3):
        if version in (1,):
            raise _fail(path, "GGUF version 1 (32-bit counts) is not read; convert it with a "
                              "recent llama.cpp")
        if struct.unpack("<I", struct.pack(">I", version))[0] in (2, 3):
            raise _fail(path, "a big-endian GGUF file; blockc reads little-endian ones")
        raise _fail(path, f"GGUF version {version}; blockc reads versions 2 and 3")
    n_tensors = c.scalar(10, "the tensor count")
    n_kv = c.scalar(10, "the metadata count")
    # a key takes at least 8 (length) + 4 (type) + 1 bytes; a tensor info at least 8 + 4 + 8 + 4 + 8
    if n_kv > (c.size - c.pos) // 13:
        raise _fail(path, f"the header claims {n_kv} metadata keys, more than the file can hold")
    if n_tensors > (c.size - c.pos) // 32:
        raise _fail(path, f"the header claims {n_tensors} tensors, more than the file can hold")
    fields: Dict[str, Value] = {}
    for i in range(n_kv):
        key = c.string(f"metadata key {i}")
        if key in fields:
            raise _fail(path, f"metadata key {key!r} appears twice")
        vt = c.scalar(4, f"the type of metadata key {key!r}")
        fields[key] = c.value(vt, f"metadata key {key!r}")
    alignment = DEFAULT_ALIGNMENT
    if "general.alignment" in fields:
        a = fields["general.alignment"]
        if a.type != "UINT32" or not 0 < a.value <= 2 ** 20 or a.value & (a.value - 1):
            raise _fail(path, f"metadata key 'general.alignment' must be a UINT32 power of two "
                              f"up to 2**20, got {a.type} {a.value!r}")
        alignment = a.value
    infos = []
    names = set()
    for i in range(n_tensors):
        name = c.string(f"tensor name {i}")
        where = f"tensor {name!r}"
        if name in names:
            raise _fail(path, f"{where} appears twice")
        names.add(name)
        nd = c.scalar(4, f"{where}'s dimension count")
        if not 1 <= nd <= _MAX_DIMS:
            raise _fail(path, f"{where} has {nd} dimensions; GGUF tensors have 1 to {_MAX_DIMS}")
        ne = [c.scalar(10, f"{where}'s dimensions") for _ in range(nd)]
        tt = c.scalar(4, f"{where}'s type")
        off = c.scalar(10, f"{where}'s offset")
        if tt not in TYPES:
            raise _fail(path, f"{where} has unknown ggml type {tt}")
        tname, bs, bb = TYPES[tt]
        count = 1
        for d in ne:
            if d < 1:
                raise _fail(path, f"{where} has a dimension of {d}; every dimension must be >= 1")
            count *= d
            if count > _MAX_ELEMENTS:
                raise _fail(path, f"{where} has dimensions {ne}: more than 2**40 elements")
        if ne[0] % bs:
            raise _fail(path, f"{where}: type {tname} stores rows in blocks of {bs}, but its rows "
                              f"have {ne[0]} elements")
        if off % alignment:
            raise _fail(path, f"{where}: offset {off} is not a multiple of the alignment "
                              f"{alignment} (misaligned data)")
        nbytes = count // bs * bb
        infos.append((name, tname, tuple(reversed(ne)), off, nbytes, ne[0] // bs * bb))
    start = c.pos + (-c.pos % alignment)
    data_len = c.size - start if c.size >= start else -1
    if infos and data_len < 0:
        raise _fail(path, f"truncated: the tensor data should start at offset {start}, the file "
                          f"has {c.size} bytes")
    spans = []
    for name, tname, shape, off, nbytes, _ in infos:
        if off > data_len or nbytes > data_len - off:
            raise _fail(path, f"tensor {name!r}: {nbytes} bytes at data offset {off} lie outside "
                              f"the {max(data_len, 0)} bytes of data (truncated, or the header lies)")
        spans.append((off, off + nbytes, name))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise _fail(path, f"tensors {n0!r} and {n1!r} overlap in the data")
    tensors: Dict[str, GGUFTensor] = {}
    for name, tname, shape, off, nbytes, rb in infos:
        if reader is not None:  # read when asked for (GGUFTensor.data)
            tensors[name] = GGUFTensor(name, tname, shape, off, nbytes, None, path,
                                       (reader, start + off))
            continue
        a = np.frombuffer(buf, dtype=np.uint8, count=nbytes, offset=start + off)
        tensors[name] = GGUFTensor(name, tname, shape, off, nbytes,
                                   a.reshape(shape[:-1] + (rb,)), path)
    return GGUFFile(path, version, alignment, fields, tensors, start, reader)


def read(path: Union[str, "os.PathLike[str]"]) -> GGUFFile:
    """The header and tensors of a GGUF file, every field checked; the file stays open and
    each tensor's ``data`` is read from it when asked for (never mapped: see the module).

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    GGUFFile
        Its tensors' ``data`` are read-only arrays read from the file (a short read, the
        file truncated since it was opened, is a ValueError naming the tensor).

    Raises
    ------
    ValueError
        Anything wrong with the file (not a regular file, truncated, a lying count, length
        or offset, a duplicate, an unknown type, ...), naming it and the key or tensor.
    OSError
        The file cannot be opened.

    Examples
    --------
    >>> f = read("model.gguf")                          # doctest: +SKIP
    >>> f.get("general.architecture"), f.tensors["token_embd.weight"].type   # doctest: +SKIP
    ('llama', 'Q8_0')
    """
    path = os.fspath(path)
    with open_regular(path, "a GGUF file") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise _fail(path, "empty file")
        reader = _FileReader(os.dup(f.fileno()), path, size)
    try:
        want = min(size, _HEADER_PREFIX)
        while True:
            prefix = reader.read_at(0, want, "the header")
            try:
                return _parse(memoryview(prefix), path, reader)
            except _More as more:  # a header longer than the prefix (large vocabularies)
                want = min(size, max(2 * want, more.upto))
    except BaseException:
        reader.close()
        raise


def parse_bytes(data: bytes, path: str = "<bytes>") -> GGUFFile:
    """:func:`read` of a file's bytes already in memory (views into ``data``)."""
    return _parse(memoryview(data), path)


# ---- writing ------------------------------------------------------------------------------------

def _typed(key: str, v: Any) -> Value:
    """A metadata value with its type: a :class:`Value` as given, else the usual type of a
    Python value (bool BOOL, int UINT32 or INT64 or UINT64, float FLOAT32, str STRING, a
    list or array an ARRAY of its elements' type)."""
    if isinstance(v, Value):
        return v
    if isinstance(v, (bool, np.bool_)):
        return Value("BOOL", bool(v))
    if isinstance(v, (int, np.integer)):
        v = int(v)
        return Value("UINT32" if 0 <= v < 2 ** 32 else "INT64" if v < 2 ** 63 else "UINT64", v)
    if isinstance(v, (float, np.floating)):
        return Value("FLOAT32", float(v))
    if isinstance(v, str):
        return Value("STRING", v)
    if isinstance(v, np.ndarray):
        rev = {np.dtype(d).newbyteorder("="): k for k, d in _SCALAR.items() if k != 7}
        if v.dtype == np.bool_:
            return Value("ARRAY", v, "BOOL")
        et = rev.get(v.dtype.newbyteorder("="))
        if et is None:
            raise BlockcTypeError(f"metadata {key!r}: an array of {v.dtype} has no GGUF type")
        return Value("ARRAY", v, VALUE_TYPES[et])
    if isinstance(v, (list, tuple)):
        if all(isinstance(x, str) for x in v):
            return Value("ARRAY", list(v), "STRING")
        if all(isinstance(x, (bool, np.bool_)) for x in v):
            return Value("ARRAY", list(v), "BOOL")
        if all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in v):
            return Value("ARRAY", list(v), "INT32")
        if all(isinstance(x, (int, float, np.integer, np.floating)) for x in v):
            return Value("ARRAY", list(v), "FLOAT32")
        raise BlockcTypeError(f"metadata {key!r}: a list of mixed types has no GGUF type")
    raise BlockcTypeError(f"metadata {key!r}: a {type(v).__name__} has no GGUF type")


def _str_bytes(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _encode(key: str, v: Value) -> bytes:
    vt = _VT.get(v.type)
    if vt is None:
        raise BlockcValueError(f"metadata {key!r}: unknown value type {v.type!r}")
    out = [struct.pack("<I", vt)]
    if vt == 8:
        if not isinstance(v.value, str):
            raise BlockcTypeError(f"metadata {key!r}: a STRING must be a str")
        out.append(_str_bytes(v.value))
    elif vt == 9:
        et = _VT.get(v.element or "")
        if et is None or et == 9:
            raise BlockcValueError(f"metadata {key!r}: an ARRAY needs an element type (not ARRAY), "
                                   f"got {v.element!r}")
        out.append(struct.pack("<IQ", et, len(v.value)))
        if et == 8:
            out.extend(_str_bytes(s) for s in v.value)
        else:
            try:
                a = np.asarray(v.value)
                if et == 7:
                    a = a.astype(bool)
                if a.ndim != 1:
                    raise ValueError("not 1-D")
                out.append(a.astype(_SCALAR[et]).tobytes())
            except (ValueError, TypeError, OverflowError) as e:
                raise BlockcValueError(f"metadata {key!r}: not a 1-D array of "
                                       f"{v.element}: {e}") from None
    else:
        x = v.value
        if vt == 7:
            x = int(bool(x))
        try:
            out.append(struct.pack(_STRUCT[vt], x))
        except struct.error as e:
            raise BlockcValueError(f"metadata {key!r}: {x!r} is not a {v.type}: {e}") from None
    return b"".join(out)


class _Out(NamedTuple):
    name: str
    type: int
    ne: Tuple[int, ...]
    data: Any  # the bytes (a uint8 array), or a function giving them while the file is written
    nbytes: int


def _raw(name: str, tname: str, shape: Tuple[int, ...], data: Any, want: int) -> np.ndarray:
    raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    if raw.nbytes != want:
        raise BlockcValueError(f"tensor {name!r}: {raw.nbytes} bytes of data, but {tname} of "
                               f"shape {shape} is {want}")
    return raw


def write(path: Union[str, "os.PathLike[str]"], metadata: Mapping[str, Any],
          tensors: Iterable[Tuple[str, str, Sequence[int], Any]],
          alignment: int = DEFAULT_ALIGNMENT) -> None:
    """Write a GGUF (version 3) file atomically.

    Parameters
    ----------
    path : str or os.PathLike
    metadata : mapping of str to value
        Each value a :class:`Value`, or a Python value typed as :func:`_typed` says.
        ``general.alignment`` is written when ``alignment`` is not 32.
    tensors : iterable of (name, type, shape, data)
        ``type`` a ggml type name ("F32", "Q4_K", ...), ``shape`` NumPy order (the last
        dimension the row), ``data`` the tensor's bytes (any array: its raw bytes are
        written; they must be exactly the type's size of the shape), or a function of no
        arguments returning them, called when the tensor is written (one tensor at a
        time in memory: a model larger than memory is written tensor by tensor).
    alignment : int, optional
        A power of two.

    Raises
    ------
    TypeError
        A metadata value that has no GGUF type.
    ValueError
        A duplicate tensor name, an unknown type, data of the wrong size, a bad alignment.
    """
    path = os.fspath(path)
    if type(alignment) is not int or alignment < 1 or alignment & (alignment - 1):
        raise BlockcValueError(f"alignment must be a power of two, got {alignment!r}")
    meta = dict(metadata)
    if alignment != DEFAULT_ALIGNMENT:
        meta["general.alignment"] = Value("UINT32", alignment)
    outs: List[_Out] = []
    seen = set()
    for name, tname, shape, data in tensors:
        if not isinstance(name, str):
            raise BlockcTypeError(f"tensor names must be str, got {type(name).__name__}")
        if name in seen:
            raise BlockcValueError(f"tensor {name!r} appears twice")
        seen.add(name)
        tt = TYPE_IDS.get(tname)
        if tt is None:
            raise BlockcValueError(f"tensor {name!r}: unknown ggml type {tname!r}")
        shape = tuple(int(s) for s in shape)
        if not 1 <= len(shape) <= _MAX_DIMS or min(shape) < 1:
            raise BlockcValueError(f"tensor {name!r}: shape {shape} must have 1 to 4 dimensions "
                                   ">= 1")
        _, bs, bb = TYPES[tt]
        if shape[-1] % bs:
            raise BlockcValueError(f"tensor {name!r}: {tname} rows are blocks of {bs}; a row of "
                                   f"{shape[-1]} is not")
        want = int(np.prod(shape, dtype=np.int64)) // bs * bb
        outs.append(_Out(name, tt, tuple(reversed(shape)),
                         data if callable(data) else _raw(name, tname, shape, data, want), want))
    head = [MAGIC, struct.pack("<IQQ", 3, len(outs), len(meta))]
    for k, v in meta.items():
        if not isinstance(k, str):
            raise BlockcTypeError(f"metadata keys must be str, got {type(k).__name__}")
        head.append(_str_bytes(k))
        head.append(_encode(k, _typed(k, v)))
    off = 0
    offsets = []
    for o in outs:
        offsets.append(off)
        off += o.nbytes
        off += -off % alignment
    for o, offset in zip(outs, offsets):
        head.append(_str_bytes(o.name))
        head.append(struct.pack("<I", len(o.ne)) + struct.pack(f"<{len(o.ne)}Q", *o.ne))
        head.append(struct.pack("<IQ", o.type, offset))
    header = b"".join(head)
    header += b"\0" * (-len(header) % alignment)
    _atomic_write(path, header, outs, alignment)


def _atomic_write(path: str, header: bytes, outs: List[_Out], alignment: int) -> None:
    """header, then each tensor padded to the alignment, through :func:`blockc._files.atomic_write`
    (a unique temporary name beside ``path``, flushed, fsynced, renamed over it)."""
    with atomic_write(path) as f:
        f.write(header)
        for o in outs:
            data = o.data
            if callable(data):
                data = _raw(o.name, TYPES[o.type][0], tuple(reversed(o.ne)), data(), o.nbytes)
            f.write(data.data)
            pad = -o.nbytes % alignment
            if pad:
                f.write(b"\0" * pad)
