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

from .._args import as_f32, as_flag, check_eps
from .._native import check, cptr, ffi, fptr, lib, output_empty
from .._enums import C_DTYPE, DTYPES
from .._errors import BlockcValueError
from .packed import PackedWeight, convert_ggml, pack, pack_ggml, round_ggml16, unpack_ggml

__all__ = [
    "linear", "pack", "PackedWeight", "DTYPES", "rmsnorm", "layernorm", "attention", "gelu_tanh",
    "gelu", "relu", "silu", "swiglu", "residual_add", "pack_ggml", "unpack_ggml", "convert_ggml",
    "round_ggml16",
]


def _vector(a: Any, n: int, name: str, what: str) -> Optional[np.ndarray]:
    if a is None:
        return None
    a = as_f32(a, name)
    if a.shape != (n,):
        raise BlockcValueError(f"{name} must have shape ({n},) ({what}), got {a.shape}")
    return a


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
        check(lib.bc_linear_packed(fptr(y), cptr(x), w.c_buffer, w.nbytes, C_DTYPE[w.dtype], bp,
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
