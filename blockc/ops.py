"""blockc.ops: each kernel of the block, callable on its own from NumPy.

The chapter's point is that a transformer block is a handful of small pieces;
these functions hand you each piece, computed by the C library.

Conventions (NumPy's):

- inputs are array-likes of a floating dtype (float16/32/64); they are
  computed in float32 (float64 is rounded to float32 first) and the result is
  a new float32 array. Integer, bool, complex, object and string dtypes raise
  ``TypeError``; wrong shapes raise ``ValueError`` naming the argument.
- inputs are never modified; non-contiguous, Fortran-order and read-only
  arrays are accepted (copied to C order only when they are not already
  float32 C-contiguous).
- PyTorch tensors are accepted too (read through ``.detach().cpu().numpy()``);
  blockc never imports torch.
- empty batches give empty results.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

from ._args import F32, as_choice, as_f32, as_flag, as_size, check_eps
from ._native import check, cptr, ffi, fptr, lib, output_empty
from ._enums import C_DTYPE, DTYPES, FORMATS, GGML_CONVERTS, MAX_COLS, VALUE_LIMIT, WHOLE_BLOCKS
from ._errors import BlockcTypeError, BlockcValueError
from .reference.ggml import TYPES as GGML_TYPES

__all__ = [
    "linear", "pack", "PackedWeight", "DTYPES", "rmsnorm", "layernorm", "attention", "gelu_tanh",
    "gelu", "relu", "silu", "swiglu", "residual_add", "pack_ggml", "unpack_ggml", "convert_ggml",
]


def _vector(a: Any, n: int, name: str, what: str) -> Optional[np.ndarray]:
    if a is None:
        return None
    a = as_f32(a, name)
    if a.shape != (n,):
        raise BlockcValueError(f"{name} must have shape ({n},) ({what}), got {a.shape}")
    return a


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


def pack_ggml(blocks: np.ndarray, dtype: str, shape: Tuple[int, int]) -> np.ndarray:
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

    Returns
    -------
    numpy.ndarray of uint8
        The packed matrix's bytes (``PackedWeight`` and the model's buffer hold these).

    Raises
    ------
    TypeError
        ``blocks`` not a uint8 array, a non-str dtype.
    ValueError
        An unknown dtype or one that holds no GGUF type's blocks, a shape the format or
        the type refuses, ``blocks`` of another size.
    """
    dtype, shape, typ = _ggml_args(dtype, shape)
    src = _bytes_of(blocks, "blocks", _ggml_bytes(typ, shape, "shape"))
    n = ffi.new("size_t *")
    check(lib.bc_pack_size(n, C_DTYPE[dtype], shape[0], shape[1]), "pack_ggml")
    out = np.empty(int(n[0]), np.uint8)
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


def linear(x: npt.ArrayLike, w: Union[npt.ArrayLike, PackedWeight],
           b: Optional[npt.ArrayLike] = None) -> np.ndarray:
    """The linear layer ``x @ w.T + b``.

    Parameters
    ----------
    x : array_like, shape (..., in)
    w : array_like, shape (out, in), or PackedWeight
        Stored as PyTorch's ``nn.Linear.weight`` is (one row per output), or
        packed by :func:`pack` (any of its storage types).
    b : array_like, shape (out,), optional

    Returns
    -------
    numpy.ndarray
        float32, shape (..., out).

    Notes
    -----
    Up to 3 rows of ``x`` read ``w`` once, at the memory's speed (decoding). On
    a plain array those rows are dot products whose sums are ordered otherwise
    than for more rows, so a row's last bits can depend on the rows beside it;
    on a :class:`PackedWeight` every row gets the same bits either way.

    Raises
    ------
    TypeError
        A non-floating array.
    ValueError
        Shapes that do not match.

    Examples
    --------
    >>> linear(np.ones((2, 3)), np.ones((4, 3)), np.arange(4.0))
    array([[3., 4., 5., 6.],
           [3., 4., 5., 6.]], dtype=float32)
    >>> linear(np.ones((1, 3)), pack(np.ones((4, 3)), "bfloat16"))
    array([[3., 3., 3., 3.]], dtype=float32)
    """
    x = as_f32(x, "x")
    packed = isinstance(w, PackedWeight)
    if not packed:
        w = as_f32(w, "w")
        if w.ndim != 2:
            raise BlockcValueError(f"w must have shape (out, in), got {w.shape}")
    oc, c = w.shape
    if x.ndim < 1 or x.shape[-1] != c:
        raise BlockcValueError(f"x must have shape (..., {c}) to match w of shape {w.shape}, got {x.shape}")
    b = _vector(b, oc, "b", "one bias per output row of w")
    n = x.size // c if c else int(np.prod(x.shape[:-1]))
    y = output_empty(x.shape[:-1] + (oc,))
    if n == 0 or oc == 0:
        return y
    if c == 0:
        y[...] = 0.0 if b is None else b
        return y
    bp = cptr(b) if b is not None else ffi.NULL
    if packed:
        check(lib.bc_linear_packed(fptr(y), cptr(x), w._ptr, w._buf.size, C_DTYPE[w._dtype], bp,
                                   n, c, oc), "linear")
    else:
        check(lib.bc_linear(fptr(y), cptr(x), cptr(w), bp, n, c, oc), "linear")
    return y


def _rows(x: np.ndarray, name: str) -> Tuple[int, int]:
    if x.ndim < 1 or x.shape[-1] == 0:
        raise BlockcValueError(f"{name} must have shape (..., D) with D >= 1, got {x.shape}")
    c = x.shape[-1]
    return x.size // c, c


def rmsnorm(x: npt.ArrayLike, weight: Optional[npt.ArrayLike] = None,
            eps: float = 1e-5) -> np.ndarray:
    """RMSNorm over the last axis: ``x / sqrt(mean(x**2) + eps) * weight``.

    The mean square is summed in double, so every finite row normalises
    (rows beyond 1.8e19, whose squares overflow float32, included).

    Parameters
    ----------
    x : array_like, shape (..., D)
    weight : array_like, shape (D,), optional
        The gain (None: 1).
    eps : float, optional
        Finite, >= 0.

    Returns
    -------
    numpy.ndarray
        float32, shaped like ``x``.

    Raises
    ------
    TypeError, ValueError
        A non-floating array or eps; a shape or eps out of range.

    Examples
    --------
    >>> rmsnorm([[3.0, 4.0]], eps=0.0)
    array([[0.84852815, 1.1313709 ]], dtype=float32)
    """
    x = as_f32(x, "x")
    n, c = _rows(x, "x")
    g = _vector(weight, c, "weight", "one gain per feature")
    e = check_eps(eps)
    y = output_empty(x.shape)
    if n:
        check(lib.bc_rmsnorm(fptr(y), cptr(x), cptr(g) if g is not None else ffi.NULL, n, c, e),
              "rmsnorm")
    return y


def layernorm(x: npt.ArrayLike, weight: Optional[npt.ArrayLike] = None,
              bias: Optional[npt.ArrayLike] = None, eps: float = 1e-5) -> np.ndarray:
    """LayerNorm over the last axis: ``(x - mean) / sqrt(var + eps) * weight + bias``.

    Parameters
    ----------
    x : array_like, shape (..., D)
    weight, bias : array_like, shape (D,), optional
        Gain (None: 1) and shift (None: 0).
    eps : float, optional
        Finite, >= 0. The variance divides by D, not D-1.

    Returns
    -------
    numpy.ndarray
        float32, shaped like ``x``.

    Raises
    ------
    TypeError, ValueError
        As :func:`rmsnorm`.

    Examples
    --------
    >>> layernorm([[1.0, 3.0]], eps=0.0)
    array([[-1.,  1.]], dtype=float32)
    """
    x = as_f32(x, "x")
    n, c = _rows(x, "x")
    g = _vector(weight, c, "weight", "one gain per feature")
    b = _vector(bias, c, "bias", "one shift per feature")
    e = check_eps(eps)
    y = output_empty(x.shape)
    if n:
        check(lib.bc_layernorm(fptr(y), cptr(x), cptr(g) if g is not None else ffi.NULL,
                               cptr(b) if b is not None else ffi.NULL, n, c, e), "layernorm")
    return y


def attention(q: npt.ArrayLike, k: npt.ArrayLike, v: npt.ArrayLike,
              causal: bool = False) -> np.ndarray:
    """Scaled dot-product attention ``softmax(q @ k.T / sqrt(Dh)) @ v``.

    Parameters
    ----------
    q : array_like, shape (B, H, Tq, Dh)
    k, v : array_like, shape (B, H, Tk, Dh)
        Any number of leading axes is accepted (they must agree between q, k
        and v; no broadcasting).
    causal : bool, optional
        Query i sees keys 0..i (top-left aligned, as ``torch``'s ``is_causal``).

    Returns
    -------
    numpy.ndarray
        float32, shaped like ``q``.

    Raises
    ------
    TypeError, ValueError
        A non-floating array or a non-bool ``causal``; shapes that disagree.

    Examples
    --------
    >>> q = np.ones((1, 1, 2, 4)); v = np.arange(8.0).reshape(1, 1, 2, 4)
    >>> attention(q, q, v, causal=True)[0, 0, 0]
    array([0., 1., 2., 3.], dtype=float32)
    """
    q = as_f32(q, "q")
    k = as_f32(k, "k")
    v = as_f32(v, "v")
    causal = as_flag(causal, "causal")
    if q.ndim < 2:
        raise BlockcValueError(f"q must have shape (B, H, Tq, Dh), got {q.shape}")
    lead, (tq, dh) = q.shape[:-2], q.shape[-2:]
    if k.ndim != q.ndim or k.shape[:-2] != lead or k.shape[-1] != dh:
        raise BlockcValueError(f"k must have shape {lead + ('Tk', dh)} to match q {q.shape}, got {k.shape}")
    tk = k.shape[-2]
    if v.shape != k.shape:
        raise BlockcValueError(f"v must have the shape of k {k.shape}, got {v.shape}")
    y = output_empty(q.shape)
    bh = int(np.prod(lead, dtype=np.int64))
    if bh == 0 or tq == 0:
        return y
    if tk == 0 or dh == 0:
        raise BlockcValueError(f"k and v need at least one key and Dh >= 1, got k {k.shape}")
    check(lib.bc_attention(fptr(y), cptr(q), cptr(k), cptr(v), bh, 1, tq, tk, dh, bool(causal)),
          "attention")
    return y


def _act(x: Any, kind: int, where: str) -> np.ndarray:
    x = as_f32(x, "x")
    y = output_empty(x.shape)
    if x.size:
        check(lib.bc_activation(fptr(y), cptr(x), x.size, kind), where)
    return y


def gelu_tanh(x: npt.ArrayLike) -> np.ndarray:
    """GELU, tanh approximation (GPT-2, the chapter's listings):
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))``.

    Parameters
    ----------
    x : array_like
        Any shape.

    Returns
    -------
    numpy.ndarray
        float32, shaped like ``x``.

    Raises
    ------
    TypeError
        A non-floating array.

    Examples
    --------
    >>> gelu_tanh([1.0])
    array([0.841192], dtype=float32)
    """
    return _act(x, lib.BC_ACT_GELU_TANH, "gelu_tanh")


def gelu(x: npt.ArrayLike) -> np.ndarray:
    """GELU, exact: ``0.5 x (1 + erf(x / sqrt(2)))``.

    Parameters
    ----------
    x : array_like
        Any shape.

    Returns
    -------
    numpy.ndarray
        float32, shaped like ``x``.

    Raises
    ------
    TypeError
        A non-floating array.

    Examples
    --------
    >>> gelu([1.0])
    array([0.8413447], dtype=float32)
    """
    return _act(x, lib.BC_ACT_GELU, "gelu")


def relu(x: npt.ArrayLike) -> np.ndarray:
    """``max(x, 0)`` (NaN stays NaN).

    Parameters
    ----------
    x : array_like
        Any shape.

    Returns
    -------
    numpy.ndarray
        float32, shaped like ``x``.

    Raises
    ------
    TypeError
        A non-floating array.

    Examples
    --------
    >>> relu([-1.0, 2.0])
    array([0., 2.], dtype=float32)
    """
    return _act(x, lib.BC_ACT_RELU, "relu")


def silu(x: npt.ArrayLike) -> np.ndarray:
    """``x * sigmoid(x)``, also called swish.

    Parameters
    ----------
    x : array_like
        Any shape.

    Returns
    -------
    numpy.ndarray
        float32, shaped like ``x``.

    Raises
    ------
    TypeError
        A non-floating array.

    Examples
    --------
    >>> silu([1.0])
    array([0.7310586], dtype=float32)
    """
    return _act(x, lib.BC_ACT_SILU, "silu")


def _same(a: Any, b: Any, na: str, nb: str) -> Tuple[np.ndarray, np.ndarray]:
    a = as_f32(a, na)
    b = as_f32(b, nb)
    if a.shape != b.shape:
        raise BlockcValueError(f"{nb} must have the shape of {na} {a.shape}, got {b.shape}")
    return a, b


def swiglu(gate: npt.ArrayLike, up: npt.ArrayLike) -> np.ndarray:
    """``silu(gate) * up``, elementwise: the gated hidden layer of a SwiGLU FFN.

    Parameters
    ----------
    gate, up : array_like
        The same shape (no broadcasting).

    Returns
    -------
    numpy.ndarray
        float32, the shape of ``gate``.

    Raises
    ------
    TypeError, ValueError
        A non-floating array; shapes that differ.

    Examples
    --------
    >>> swiglu([0.0, 1.0], [5.0, 2.0])
    array([0.       , 1.4621172], dtype=float32)
    """
    gate, up = _same(gate, up, "gate", "up")
    y = output_empty(gate.shape)
    if y.size:
        check(lib.bc_swiglu(fptr(y), cptr(gate), cptr(up), y.size), "swiglu")
    return y


def residual_add(x: npt.ArrayLike, sub: npt.ArrayLike) -> np.ndarray:
    """``x + sub`` (127_Residual): the residual connection.

    Parameters
    ----------
    x, sub : array_like
        The same shape (no broadcasting).

    Returns
    -------
    numpy.ndarray
        float32, the shape of ``x``.

    Raises
    ------
    TypeError, ValueError
        A non-floating array; shapes that differ.

    Examples
    --------
    >>> residual_add([1.0, 2.0, 3.0, 4.0], [0.1, -0.2, 0.3, -0.1])
    array([1.1, 1.8, 3.3, 3.9], dtype=float32)
    """
    x, sub = _same(x, sub, "x", "sub")
    y = output_empty(x.shape)
    if y.size:
        check(lib.bc_residual_add(fptr(y), cptr(x), cptr(sub), y.size), "residual_add")
    return y
