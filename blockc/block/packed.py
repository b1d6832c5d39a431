"""Packed weights: a matrix in one of the C table's weight formats (:func:`pack`,
:class:`PackedWeight`), and a GGUF tensor's rows of blocks moved into a format's panels and
back by the C library (:func:`pack_ggml`, :func:`unpack_ggml`, :func:`convert_ggml`: no
layout is written in Python), and float32 rounded to GGUF's F16 and BF16 (:func:`round_ggml16`). :mod:`blockc.block.ops` re-exports them.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

from .._args import F32, as_choice, as_f32, as_size
from .._native import check, cptr, ffi, fptr, lib
from .._enums import C_DTYPE, DTYPES, FORMATS, GGML_CONVERTS, MAX_COLS, VALUE_LIMIT, WHOLE_BLOCKS
from .._errors import BlockcTypeError, BlockcValueError
from ..reference.ggml import TYPES as GGML_TYPES

__all__ = ["pack", "PackedWeight", "pack_ggml", "unpack_ggml", "convert_ggml", "round_ggml16"]


class PackedWeight:
    """A weight matrix (out, in) packed for the kernels, stored in one of the formats of
    :data:`DTYPES` (the C library's formats' table).

    Made by :func:`pack`; :func:`linear` accepts it in place of an array. The
    rows are stored in panels of 16 (bc_engine.h gives the layout), so one row
    of ``x`` and many rows get the same bits, and decoding (up to 3 rows)
    streams the packed bytes once. Immutable: its buffer is read-only, and
    nothing done to the array it was packed from reaches it.
    """
    __slots__ = ("_buf", "_ptr", "_shape", "_dtype")

    def __init__(self, buf: np.ndarray, shape: Tuple[int, int], dtype: str):
        buf.setflags(write=False)
        object.__setattr__(self, "_buf", buf)
        object.__setattr__(self, "_ptr", ffi.from_buffer("char[]", buf, False))
        object.__setattr__(self, "_shape", shape)
        object.__setattr__(self, "_dtype", dtype)

    def __setattr__(self, name, value):
        raise AttributeError("PackedWeight is immutable: pack() the new weights instead")

    @property
    def shape(self) -> Tuple[int, int]:
        """(out, in)."""
        return self._shape

    @property
    def dtype(self) -> str:
        """Its format, one of :data:`DTYPES`."""
        return self._dtype

    @property
    def nbytes(self) -> int:
        """Bytes of the packed buffer."""
        return int(self._buf.size)

    @property
    def c_buffer(self) -> Any:
        """The packed bytes as a cffi ``char *`` (read-only to the C library), valid while
        this object lives: what ``bc_linear_packed`` takes beside :attr:`nbytes`."""
        return self._ptr

    def unpack(self) -> np.ndarray:
        """The weights as a new float32 (out, in) array: exactly the ones the kernels use.

        Returns
        -------
        numpy.ndarray

        Examples
        --------
        >>> pack(np.ones((2, 3)), "bfloat16").unpack()
        array([[1., 1., 1.],
               [1., 1., 1.]], dtype=float32)
        """
        out = np.empty(self._shape, F32)
        check(lib.bc_unpack(fptr(out), self._ptr, self._buf.size, C_DTYPE[self._dtype],
                            self._shape[0], self._shape[1]), "unpack")
        return out

    def __reduce__(self):  # pickle / copy: the packed bytes as they are
        return (PackedWeight, (np.array(self._buf), self._shape, self._dtype))

    def __repr__(self) -> str:
        return f"PackedWeight(shape={self._shape}, dtype={self._dtype!r}, nbytes={self.nbytes})"


def pack(w: npt.ArrayLike, dtype: str = "float32") -> PackedWeight:
    """Pack a weight matrix (out, in) for :func:`linear`, stored as ``dtype``.

    Parameters
    ----------
    w : array_like, shape (out, in)
        As PyTorch's ``nn.Linear.weight`` (one row per output); floating.
    dtype : str, optional
        A format of :data:`DTYPES` (the C library's formats' table). float32 as is; bfloat16 and float16 (IEEE half) rounded to nearest even;
        q8_0 llama.cpp's blocks of 32 weights of a row with one half-precision
        scale (d = max|w| / 127, q = round(w / d)): the weights become d * q;
        q4_0 and q5_0 llama.cpp's 4- and 5-bit blocks (d = m / -8 and m / -16, m the
        weight of largest magnitude); q4_k its 4-bit super-blocks of 256 (a 6-bit
        scale and min per 32 weights, by its reference quantiser) and q6_k its 6-bit
        ones (an int8 scale per 16 weights), so ``in`` must be a multiple of 256.
        q8_0i (q4_0i, q5_0i, q4_ki): q8_0's (q4_0's, q5_0's, q4_k's) weights, and
        :func:`linear` quantises each row of ``x`` to 8 bits per block of 32 (d_x =
        max|x| / 127) and multiplies integers: faster, about 1e-2 relative error per
        output where the plain formats keep ``x`` exact.
        bfloat16i: bfloat16's weights (a subnormal stored as zero), and :func:`linear`
        rounds each row of ``x`` to bfloat16 and multiplies bfloat16 pairs in
        vdpbf16ps's order and rounding (the same bits on every CPU; emulated where the
        CPU has no AVX512_BF16): about 1e-3 relative error per output where bfloat16
        keeps ``x`` exact.

    Returns
    -------
    PackedWeight

    Raises
    ------
    TypeError
        A non-floating ``w``, a non-str ``dtype``.
    ValueError
        A shape that is not 2-D with both sizes >= 1, an unknown dtype, (a format of
        whole blocks: the K-quants) a number of columns that is not a multiple of 256,
        (quantised) a weight that is not finite or too large for a half-precision scale
        (the format's limit, from the C table), or (a format of bounded columns: the
        integer-dot ones, bfloat16i) more than 65536 columns.

    Examples
    --------
    >>> q = pack(np.arange(64.0).reshape(2, 32), "q8_0")  # d = 63/127, kept as a half
    >>> q.nbytes, float(q.unpack()[1, 31])
    (544, 63.00390625)
    """
    w = as_f32(w, "w")
    as_choice(dtype, "dtype", DTYPES)
    if w.ndim != 2 or 0 in w.shape:
        raise BlockcValueError(f"w must have shape (out, in) with both >= 1, got {w.shape}")
    rows, cols = w.shape
    whole = WHOLE_BLOCKS.get(dtype)
    if whole and cols % whole:
        raise BlockcValueError(f"w: {dtype} needs rows of whole blocks of {whole} weights, "
                               f"got {cols} columns")
    n = ffi.new("size_t *")
    st = lib.bc_pack_size(n, C_DTYPE[dtype], rows, cols)
    if st == lib.BC_ESIZE:
        raise BlockcValueError(f"w: {dtype} holds at most {MAX_COLS[dtype]} columns, "
                               f"got {cols}")
    check(st, "pack")
    buf = np.empty(int(n[0]), np.uint8)
    st = lib.bc_pack(ffi.from_buffer("char[]", buf), buf.size, cptr(w), C_DTYPE[dtype], rows, cols)
    if st == lib.BC_EVALUE:
        raise BlockcValueError(f"w: {dtype} needs {VALUE_LIMIT[dtype]}")
    check(st, "pack")
    return PackedWeight(buf, (rows, cols), dtype)


def _ggml_bytes(type: int, shape: Tuple[int, int], name: str) -> int:
    n = ffi.new("size_t *")
    st = lib.bc_ggml_size(n, type, shape[0], shape[1])
    if st == lib.BC_ESIZE:
        raise BlockcValueError(f"{name}: rows of GGUF type {type} are whole blocks; shape "
                               f"{shape} is not")
    check(st, "ggml")
    return int(n[0])


def _ggml_args(dtype: str, shape: Any) -> Tuple[str, Tuple[int, int], int]:
    dtype = as_choice(dtype, "dtype", DTYPES)
    if not isinstance(shape, tuple) or len(shape) != 2:
        raise BlockcValueError(f"shape must be a tuple (rows, cols), got {shape!r}")
    shape = (as_size(shape[0], "shape[0]"), as_size(shape[1], "shape[1]"))
    typ = FORMATS[dtype].ggml_type
    if typ < 0:
        raise BlockcValueError(f"dtype: {dtype} holds no GGUF type's blocks (the formats that "
                               f"do: {', '.join(d for d, f in FORMATS.items() if f.ggml_type >= 0)})")
    return dtype, shape, typ


def _bytes_of(a: Any, name: str, n: int) -> np.ndarray:
    if not isinstance(a, np.ndarray) or a.dtype != np.uint8:
        raise BlockcTypeError(f"{name} must be a numpy uint8 array, got "
                              f"{getattr(a, 'dtype', type(a).__name__)}")
    if a.size != n:
        raise BlockcValueError(f"{name} must hold {n} bytes, got {a.size}")
    return np.ascontiguousarray(a).reshape(-1)


def pack_ggml(blocks: np.ndarray, dtype: str, shape: Tuple[int, int],
              out: Optional[np.ndarray] = None) -> np.ndarray:
    """The packed bytes of a (rows, cols) matrix in format ``dtype`` holding the very blocks
    of a GGUF tensor, rearranged into panels (no weight is requantised).

    ``dtype``'s GGUF type (``blockc._enums.FORMATS[dtype].ggml_type``: q8_0 and q8_0i hold
    Q8_0's blocks, q4_k and q4_ki Q4_K's, float16 F16's, ...) is the type of ``blocks``;
    :func:`convert_ggml` makes Q8_0 blocks of Q4_0's and Q5_0's first.

    Parameters
    ----------
    blocks : numpy.ndarray of uint8
        The tensor's rows of blocks as a GGUF file stores them (rows one after another,
        little-endian), any shape of that many bytes.
    dtype : str
        A format of :data:`DTYPES` that holds a GGUF type's blocks.
    shape : tuple of int
        (rows, cols) of the matrix; cols whole blocks of the type.
    out : numpy.ndarray of uint8, optional
        Where to write the packed bytes: a writeable C-contiguous 1-D uint8 array of
        exactly their size (a model's parameter buffer's slice: loading packs each matrix
        in place, no temporary), not overlapping ``blocks``. None: a new array.

    Returns
    -------
    numpy.ndarray of uint8
        The packed matrix's bytes (``PackedWeight`` and the model's buffer hold these):
        ``out`` when given.

    Raises
    ------
    TypeError
        ``blocks`` or ``out`` not a uint8 array, a non-str dtype.
    ValueError
        An unknown dtype or one that holds no GGUF type's blocks, a shape the format or
        the type refuses, ``blocks`` of another size, ``out`` of another size, read-only,
        not contiguous or overlapping ``blocks``.

    Examples
    --------
    >>> w = pack(np.linspace(-1, 1, 64 * 32, dtype=np.float32).reshape(64, 32), "q8_0")
    >>> blocks = unpack_ggml(w)                      # (64, 34): one Q8_0 block a row
    >>> back = pack_ggml(blocks, "q8_0", (64, 32))   # the packed bytes again
    >>> bool((unpack_ggml(back, "q8_0", (64, 32)) == blocks).all()), back.size == w.nbytes
    (True, True)
    """
    dtype, shape, typ = _ggml_args(dtype, shape)
    src = _bytes_of(blocks, "blocks", _ggml_bytes(typ, shape, "shape"))
    n = ffi.new("size_t *")
    check(lib.bc_pack_size(n, C_DTYPE[dtype], shape[0], shape[1]), "pack_ggml")
    if out is None:
        out = np.empty(int(n[0]), np.uint8)
    else:
        if not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.ndim != 1:
            raise BlockcTypeError(f"out must be a 1-D numpy uint8 array, got "
                                  f"{getattr(out, 'dtype', type(out).__name__)}")
        if out.size != int(n[0]) or not out.flags.c_contiguous or not out.flags.writeable:
            raise BlockcValueError(f"out must be a writeable contiguous array of {int(n[0])} "
                                   f"bytes, got {out.size} bytes (contiguous "
                                   f"{out.flags.c_contiguous}, writeable {out.flags.writeable})")
        if np.may_share_memory(out, src):  # both contiguous: their bounds
            raise BlockcValueError("out must not overlap blocks")
    check(lib.bc_pack_ggml(ffi.from_buffer("char[]", out), out.size, ffi.from_buffer(src),
                           src.size, C_DTYPE[dtype], shape[0], shape[1]), "pack_ggml")
    return out


def unpack_ggml(packed: Union[np.ndarray, PackedWeight], dtype: Optional[str] = None,
                shape: Optional[Tuple[int, int]] = None) -> np.ndarray:
    """The inverse of :func:`pack_ggml`: the rows of blocks a GGUF file stores for a packed
    (rows, cols) matrix of ``dtype`` (its GGUF type's: the same blocks).

    Parameters
    ----------
    packed : numpy.ndarray of uint8, or PackedWeight
        The packed matrix's bytes (:func:`pack_ggml` made them, or a model's buffer holds
        them), or a :class:`PackedWeight` (its own dtype and shape then).
    dtype : str
        Its format, one that holds a GGUF type's blocks (not with a PackedWeight).
    shape : tuple of int
        (rows, cols) (not with a PackedWeight).

    Returns
    -------
    numpy.ndarray of uint8, shape (rows, row bytes)

    Raises
    ------
    TypeError, ValueError
        As :func:`pack_ggml`'s.

    Examples
    --------
    >>> unpack_ggml(pack(np.ones((16, 64), np.float32), "q4_0")).shape   # two Q4_0 blocks a row
    (16, 36)
    """
    if isinstance(packed, PackedWeight):
        if dtype is not None or shape is not None:
            raise BlockcValueError("dtype and shape are the PackedWeight's own: pass neither")
        packed, dtype, shape = packed._buf, packed.dtype, packed.shape
    dtype, shape, typ = _ggml_args(dtype, shape)
    n = ffi.new("size_t *")
    check(lib.bc_pack_size(n, C_DTYPE[dtype], shape[0], shape[1]), "unpack_ggml")
    src = _bytes_of(packed, "packed", int(n[0]))
    out = np.empty(_ggml_bytes(typ, shape, "shape"), np.uint8)
    check(lib.bc_unpack_ggml(ffi.from_buffer("char[]", out), out.size, ffi.from_buffer(src),
                             src.size, C_DTYPE[dtype], shape[0], shape[1]), "unpack_ggml")
    return out.reshape(shape[0], -1)


def convert_ggml(blocks: np.ndarray, from_type: int, to_type: int) -> np.ndarray:
    """Blocks of GGUF type ``from_type`` as blocks of ``to_type`` holding exactly the same
    weights (Q4_0's and Q5_0's as Q8_0's: the same half scale, each weight's quant less
    its offset; ``blockc._enums.GGML_CONVERTS`` lists the pairs).

    Parameters
    ----------
    blocks : numpy.ndarray of uint8, shape (rows, row bytes)
        Whole blocks of ``from_type``, a row of them per row.
    from_type, to_type : int
        GGUF type ids.

    Returns
    -------
    numpy.ndarray of uint8, shape (rows, row bytes of ``to_type``)

    Raises
    ------
    TypeError
        ``blocks`` not a 2-D uint8 array.
    ValueError
        A pair the C library does not convert, rows that are not whole blocks.

    Examples
    --------
    >>> q4 = unpack_ggml(pack(np.ones((16, 32), np.float32), "q4_0"))    # Q4_0 is type 2
    >>> convert_ggml(q4, 2, 8).shape                                      # Q8_0 is type 8
    (16, 34)
    """
    if not isinstance(blocks, np.ndarray) or blocks.dtype != np.uint8 or blocks.ndim != 2:
        raise BlockcTypeError("blocks must be a 2-D numpy uint8 array (rows, row bytes)")
    if from_type not in GGML_CONVERTS.get(to_type, ()):
        raise BlockcValueError(f"GGUF type {from_type}'s blocks do not convert to type "
                               f"{to_type}'s")
    src = np.ascontiguousarray(blocks).reshape(-1)
    fb, tb = GGML_TYPES[from_type][1:], GGML_TYPES[to_type][1:]
    if blocks.shape[1] % fb[1] or fb[0] != tb[0]:
        raise BlockcValueError(f"blocks must be rows of whole blocks of {fb[1]} bytes, got "
                               f"rows of {blocks.shape[1]} bytes")
    nb = src.size // fb[1]
    out = np.empty(nb * tb[1], np.uint8)
    check(lib.bc_ggml_convert(ffi.from_buffer("char[]", out), out.size, ffi.from_buffer(src),
                              src.size, to_type, from_type, nb), "convert_ggml")
    return out.reshape(blocks.shape[0], -1)


#: GGUF type name -> id of the 2-byte types :func:`round_ggml16` writes (from ggml's one type table)
_ROUND16 = {name: tid for tid, (name, _, _) in GGML_TYPES.items() if name in ("F16", "BF16")}


def round_ggml16(w: npt.ArrayLike, type: str) -> np.ndarray:
    """The bytes of a GGUF ``F16`` or ``BF16`` tensor of the float32 weights ``w``, rounded
    by the C library on every thread (F16C / AVX-512 where the CPU has them).

    Rounded to nearest even. F16: NumPy's ``astype(np.float16)`` bits (overflow to
    infinity, subnormals, a NaN keeping its sign and its payload's top bits); BF16:
    :func:`blockc.reference.ggml.bfloat16`'s (a NaN made quiet). The same bytes on any
    instruction set and thread count.

    Parameters
    ----------
    w : array_like
        Converted to float32 (C order).
    type : {"F16", "BF16"}

    Returns
    -------
    numpy.ndarray of uint8, shape (..., 2 * last dimension)
        Little-endian, as a GGUF file stores them.

    Raises
    ------
    ValueError
        Another type, or no weights.

    Examples
    --------
    >>> round_ggml16(np.array([1.0, -2.5], np.float32), "F16").view("<f2")
    array([ 1. , -2.5], dtype=float16)
    """
    type = as_choice(type, "type", tuple(_ROUND16))
    x = np.ascontiguousarray(w, dtype=F32)
    if x.ndim < 1 or x.size == 0:
        raise BlockcValueError(f"w must have at least one weight, got shape {x.shape}")
    out = np.empty(x.shape[:-1] + (2 * x.shape[-1],), np.uint8)
    check(lib.bc_ggml_from_f32(ffi.from_buffer("char[]", out), out.size, cptr(x), x.size,
                               _ROUND16[type]), "round_ggml16")
    return out
