"""Book mode: chapter 24's listings at the book's fixed sizes, computed in C.

Each function runs the C library's fixed-size entry point (``csrc/book.c``),
which computes exactly what the listing computes, in the listing's float32
operation order, so the book's printed figures come out digit for digit.

Weights are dicts of float32 arrays, shaped like the listings' structs:

- 126_Ffn (:data:`FFN_SHAPES`): ``w1 (12, 6)``, ``b1 (12,)``, ``w2 (6, 12)``, ``b2 (6,)``.
- 128_Block / 129_Stack (:data:`BLOCK_SHAPES`): ``w_q``, ``w_k``, ``w_v (2, 4, 8)``
  (heads, d_head, d_model), ``w_o (8, 8)``, ``w1 (32, 8)``, ``w2 (8, 32)``.

Other sizes are a ``ValueError`` naming the argument and the shape it must have;
the dynamic engine is the place for other sizes. Inputs are array-likes of a
floating dtype (as in :mod:`blockc.ops`: integer, bool and complex arrays are a
``TypeError``); float64 input is converted to float32 and computed in float32.
Nothing is modified in place: every function returns new arrays.

Example::

    >>> from blockc import book
    >>> w = book.block_init(seed=42, rand="msvc")
    >>> y = book.block_forward(book.BLOCK_INPUT, w)
    >>> [f"{v:+.2f}" for v in y[0]][:4]
    ['+0.97', '+0.16', '-0.29', '+0.54']
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from .common import REAL_MODELS, book_array, check_keys, real_params_rows
from .._native import check, cptr, ffi, fptr, lib
from .rng import generator_id
from .._args import as_int, as_seed
from .._errors import BlockcValueError

__all__ = [
    "FFN_D_MODEL", "FFN_D_FF", "RESIDUAL_DIM", "SEQ_LEN", "D_MODEL", "N_HEADS",
    "D_HEAD", "D_FF", "N_BLOCKS", "FFN_SHAPES", "BLOCK_SHAPES",
    "FFN_INPUT", "RESIDUAL_INPUT", "RESIDUAL_SUBLAYER", "BLOCK_INPUT", "WORDS", "REAL_MODELS",
    "ffn_init", "ffn_forward", "ffn_params", "residual_add", "block_init", "block_forward",
    "stack_init", "stack_forward", "stack_norms", "avg_norm", "block_params", "real_params",
]

# --- the book's sizes (compile-time constants of the C library) -----------------
FFN_D_MODEL: int = lib.BC_BOOK_FFN_D_MODEL   # 6
FFN_D_FF: int = lib.BC_BOOK_FFN_D_FF         # 12
RESIDUAL_DIM: int = lib.BC_BOOK_RESIDUAL_DIM  # 4
SEQ_LEN: int = lib.BC_BOOK_SEQ_LEN           # 4
D_MODEL: int = lib.BC_BOOK_D_MODEL           # 8
N_HEADS: int = lib.BC_BOOK_N_HEADS           # 2
D_HEAD: int = lib.BC_BOOK_D_HEAD             # 4
D_FF: int = lib.BC_BOOK_D_FF                 # 32
N_BLOCKS: int = lib.BC_BOOK_N_BLOCKS         # 4

#: 126_Ffn's weights, in the struct's memory order.
FFN_SHAPES: Dict[str, Tuple[int, ...]] = {
    "w1": (FFN_D_FF, FFN_D_MODEL),
    "b1": (FFN_D_FF,),
    "w2": (FFN_D_MODEL, FFN_D_FF),
    "b2": (FFN_D_MODEL,),
}

#: One block of 128_Block / 129_Stack, in the struct's memory order.
BLOCK_SHAPES: Dict[str, Tuple[int, ...]] = {
    "w_q": (N_HEADS, D_HEAD, D_MODEL),
    "w_k": (N_HEADS, D_HEAD, D_MODEL),
    "w_v": (N_HEADS, D_HEAD, D_MODEL),
    "w_o": (D_MODEL, D_MODEL),
    "w1": (D_FF, D_MODEL),
    "w2": (D_MODEL, D_FF),
}

# --- the listings' inputs (read-only float32, as the C literals round them) -----
def _const(values) -> np.ndarray:
    a = np.array(values, dtype=np.float32)
    a.setflags(write=False)
    return a


#: 126_Ffn's input position (6,).
FFN_INPUT = _const([0.5, -0.2, 0.8, 0.1, -0.3, 0.6])
#: 127_Residual's input and sublayer output (4,).
RESIDUAL_INPUT = _const([1.0, 2.0, 3.0, 4.0])
RESIDUAL_SUBLAYER = _const([0.1, -0.2, 0.3, -0.1])
#: 128_Block's and 129_Stack's input (4, 8): the words of :data:`WORDS`.
BLOCK_INPUT = _const([
    [1.0, 0.2, -0.3, 0.5, -0.1, 0.8, 0.3, -0.2],
    [0.3, 0.9, 0.1, -0.2, 0.6, 0.4, -0.1, 0.5],
    [-0.1, 0.4, 0.8, 0.2, -0.5, 0.3, 0.7, 0.1],
    [0.6, -0.2, 0.5, 0.7, 0.3, -0.4, 0.2, 0.8],
])
WORDS: Tuple[str, ...] = ("The", "cat", "sat", "down")

# --- validation and marshalling --------------------------------------------------
def _to_struct(weights: Mapping[str, object], name: str, ctype: str,
               shapes: Mapping[str, tuple], out=None):
    """Copy a weight dict into a new C struct (or into ``out``) after validating it."""
    check_keys(weights, name, shapes)
    arrays = {k: book_array(weights[k], f"{name}[{k!r}]", shape) for k, shape in shapes.items()}
    s = ffi.new(f"{ctype} *") if out is None else out
    for k, arr in arrays.items():
        ffi.memmove(getattr(s, k), arr, arr.nbytes)
    return s


def _from_struct(s, shapes: Mapping[str, tuple]) -> Dict[str, np.ndarray]:
    return {k: np.frombuffer(ffi.buffer(getattr(s, k)), dtype=np.float32).reshape(shape).copy()
            for k, shape in shapes.items()}


def c_rng(seed: int, rand: str) -> Any:
    """A ``bc_rng *`` seeded with ``seed`` for generator ``rand`` (both checked): the C
    generator every book-mode init draws from."""
    seed = as_seed(seed)
    g = ffi.new("bc_rng *")
    check(lib.bc_rng_init(g, generator_id(rand), seed), "bc_rng_init")
    return g


# --- 126_Ffn ---------------------------------------------------------------------
def ffn_init(seed: int = 42, rand: str = "msvc") -> Dict[str, np.ndarray]:
    """126_Ffn's weights after ``srand(seed)`` with the named ``rand()`` (``msvc`` or ``glibc``).

    Parameters
    ----------
    seed : int in [0, 2**32), optional
    rand : {"msvc", "glibc"}, optional
        Whose ``rand()``: msvc gives the book's figures.

    Returns
    -------
    dict of str to numpy.ndarray
        ``{"w1": (12, 6), "b1": (12,), "w2": (6, 12), "b2": (6,)}`` float32; the
        biases are zero and the weights are ``(rand()/RAND_MAX * 2 - 1) * 0.1`` in
        the listing's order (W1 row by row, then W2).

    Raises
    ------
    TypeError
        A seed that is not an integer.
    ValueError
        A seed outside [0, 2**32) or an unknown ``rand``.

    Examples
    --------
    >>> {k: v.shape for k, v in ffn_init(42).items()}
    {'w1': (12, 6), 'b1': (12,), 'w2': (6, 12), 'b2': (6,)}
    """
    g = c_rng(seed, rand)
    s = ffi.new("bc_book_ffn *")
    check(lib.bc_book_ffn_init(s, g), "bc_book_ffn_init")
    return _from_struct(s, FFN_SHAPES)


def ffn_forward(x, weights: Mapping[str, object]) -> np.ndarray:
    """126_Ffn's forward pass for one position: ``w2 @ gelu(w1 @ x + b1) + b2``.

    GELU is the tanh approximation, as the listing writes it.

    Parameters
    ----------
    x : array_like, shape (6,)
    weights : mapping
        As :func:`ffn_init` returns them.

    Returns
    -------
    numpy.ndarray
        (6,) float32.

    Raises
    ------
    TypeError, ValueError
        A non-floating array; a shape other than the book's, a missing or extra key.

    Examples
    --------
    >>> y = ffn_forward(FFN_INPUT, ffn_init(42))      # the listing's input and weights
    >>> print(" ".join(f"{v:+.3f}" for v in y))        # the book's figure
    +0.000 +0.006 -0.006 +0.004 -0.007 -0.002
    """
    xa = book_array(x, "x", (FFN_D_MODEL,))
    s = _to_struct(weights, "weights", "bc_book_ffn", FFN_SHAPES)
    out = np.empty(FFN_D_MODEL, np.float32)
    check(lib.bc_book_ffn_forward(fptr(out), s, cptr(xa)), "bc_book_ffn_forward")
    return out


def ffn_params(d_model: int = FFN_D_MODEL, d_ff: int = FFN_D_FF) -> int:
    """Parameters of a biased FFN, ``2 * d_model * d_ff + d_ff + d_model``.

    Parameters
    ----------
    d_model, d_ff : int >= 1, optional

    Returns
    -------
    int

    Raises
    ------
    TypeError
        Sizes that are not integers.
    ValueError
        Sizes below 1, or a count past int64.

    Examples
    --------
    >>> ffn_params()          # 126_Ffn
    162
    """
    out = ffi.new("int64_t *")
    check(lib.bc_book_ffn_params(out, _int(d_model, "d_model"), _int(d_ff, "d_ff")),
          "bc_book_ffn_params")
    return int(out[0])


# --- 127_Residual ----------------------------------------------------------------
def residual_add(x, sublayer) -> np.ndarray:
    """127_Residual: ``x + sublayer``.

    Parameters
    ----------
    x, sublayer : array_like, shape (4,)

    Returns
    -------
    numpy.ndarray
        (4,) float32.

    Raises
    ------
    TypeError
        A non-floating array.
    ValueError
        A shape other than (4,).

    Examples
    --------
    >>> residual_add([1.0, 2.0, 3.0, 4.0], [0.1, -0.2, 0.3, -0.1])   # the listing's figure
    array([1.1, 1.8, 3.3, 3.9], dtype=float32)
    """
    xa = book_array(x, "x", (RESIDUAL_DIM,))
    sa = book_array(sublayer, "sublayer", (RESIDUAL_DIM,))
    out = np.empty(RESIDUAL_DIM, np.float32)
    check(lib.bc_book_residual_add(fptr(out), cptr(xa), cptr(sa)), "bc_book_residual_add")
    return out


# --- 128_Block -------------------------------------------------------------------
def block_init(seed: int = 42, rand: str = "msvc") -> Dict[str, np.ndarray]:
    """128_Block's weights after ``srand(seed)``: 768 draws in memory order
    (:data:`BLOCK_SHAPES`), each ``(rand()/RAND_MAX * 2 - 1) * 0.1`` in float32.

    Parameters
    ----------
    seed : int in [0, 2**32), optional
    rand : {"msvc", "glibc"}, optional

    Returns
    -------
    dict of str to numpy.ndarray

    Raises
    ------
    TypeError
        A seed that is not an integer.
    ValueError
        A seed outside [0, 2**32) or an unknown ``rand``.

    Examples
    --------
    >>> sum(v.size for v in block_init(42).values())
    768
    """
    g = c_rng(seed, rand)
    s = ffi.new("bc_book_block *")
    check(lib.bc_book_block_init(s, g), "bc_book_block_init")
    return _from_struct(s, BLOCK_SHAPES)


def block_forward(x, weights: Mapping[str, object]) -> np.ndarray:
    """One pre-norm transformer block, as 128_Block computes it.

    ``x + attn(rmsnorm(x))``, then ``+ ffn(rmsnorm(.))``: RMSNorm without gain
    (eps 1e-5), 2-head self-attention without mask, FFN ``w2 @ gelu(w1 @ .)``.

    Parameters
    ----------
    x : array_like, shape (4, 8)
    weights : mapping
        As :func:`block_init` returns them.

    Returns
    -------
    numpy.ndarray
        (4, 8) float32.

    Raises
    ------
    TypeError, ValueError
        As :func:`ffn_forward`.

    Examples
    --------
    >>> y = block_forward(BLOCK_INPUT, block_init(42))
    >>> print(" ".join(f"{v:+.2f}" for v in y[0]))    # "The" after one block: the book's row
    +0.97 +0.16 -0.29 +0.54 -0.09 +0.81 +0.31 -0.17
    """
    xa = book_array(x, "x", (SEQ_LEN, D_MODEL))
    s = _to_struct(weights, "weights", "bc_book_block", BLOCK_SHAPES)
    y = np.empty((SEQ_LEN, D_MODEL), np.float32)
    check(lib.bc_book_block_forward(fptr(y), s, cptr(xa)), "bc_book_block_forward")
    return y


# --- 129_Stack -------------------------------------------------------------------
def stack_init(seed: int = 42, rand: str = "msvc") -> List[Dict[str, np.ndarray]]:
    """129_Stack's 4 blocks after one ``srand(seed)``, drawn one after the other.

    Parameters
    ----------
    seed : int in [0, 2**32), optional
    rand : {"msvc", "glibc"}, optional

    Returns
    -------
    list of dict
        Four weight dicts, as :func:`block_init` returns.

    Raises
    ------
    TypeError
        A seed that is not an integer.
    ValueError
        A seed outside [0, 2**32) or an unknown ``rand``.

    Examples
    --------
    >>> len(stack_init(42))
    4
    """
    g = c_rng(seed, rand)
    s = ffi.new(f"bc_book_block[{N_BLOCKS}]")
    check(lib.bc_book_stack_init(s, g), "bc_book_stack_init")
    return [_from_struct(s[i], BLOCK_SHAPES) for i in range(N_BLOCKS)]


def stack_forward(x, blocks: Sequence[Mapping[str, object]]) -> Tuple[np.ndarray, np.ndarray]:
    """129_Stack: the 4 blocks in a row.

    Parameters
    ----------
    x : array_like, shape (4, 8)
    blocks : sequence of 4 mappings

    Returns
    -------
    y : numpy.ndarray
        The final representations, (4, 8) float32.
    norms : numpy.ndarray
        The average row norm (5,) float32 at the input and after each block.

    Raises
    ------
    TypeError
        A non-floating array or a weight dict that is not a mapping.
    ValueError
        A shape other than the book's, not 4 blocks, a missing or extra key.

    Examples
    --------
    >>> _, norms = stack_forward(BLOCK_INPUT, stack_init(42))
    >>> print(" ".join(f"{v:.4f}" for v in norms))     # the book's figures
    1.3809 1.3990 1.4163 1.4205 1.4256
    """
    xa = book_array(x, "x", (SEQ_LEN, D_MODEL))
    if isinstance(blocks, Mapping) or len(blocks) != N_BLOCKS:
        raise BlockcValueError(f"blocks must be a sequence of {N_BLOCKS} weight dicts (the book's "
                               f"stack), got {len(blocks) if not isinstance(blocks, Mapping) else 'a dict'}")
    s = ffi.new(f"bc_book_block[{N_BLOCKS}]")
    for i, w in enumerate(blocks):
        _to_struct(w, f"blocks[{i}]", "bc_book_block", BLOCK_SHAPES, out=s[i])
    y = np.empty((SEQ_LEN, D_MODEL), np.float32)
    norms = np.empty(N_BLOCKS + 1, np.float32)
    check(lib.bc_book_stack_forward(fptr(y), fptr(norms), s, cptr(xa)), "bc_book_stack_forward")
    return y, norms


def stack_norms(x, blocks: Sequence[Mapping[str, object]]) -> np.ndarray:
    """129_Stack's printed measure: the average row norm (5,) at the input and after
    each of the 4 blocks; :func:`stack_forward` returns it with the final ``x``.

    Parameters
    ----------
    x : array_like, shape (4, 8)
    blocks : sequence of 4 mappings

    Returns
    -------
    numpy.ndarray
        (5,) float32.

    Raises
    ------
    TypeError, ValueError
        As :func:`stack_forward`.

    Examples
    --------
    >>> print(f"{stack_norms(BLOCK_INPUT, stack_init(42))[-1]:.4f}")
    1.4256
    """
    return stack_forward(x, blocks)[1]


def avg_norm(x) -> np.float32:
    """129_Stack's measure: the mean over the 4 rows of ``x`` of each row's L2 norm.

    Parameters
    ----------
    x : array_like, shape (4, 8)

    Returns
    -------
    numpy.float32

    Raises
    ------
    TypeError
        A non-floating array.
    ValueError
        A shape other than (4, 8).

    Examples
    --------
    >>> print(f"{avg_norm(BLOCK_INPUT):.4f}")          # 129_Stack's input
    1.3809
    """
    xa = book_array(x, "x", (SEQ_LEN, D_MODEL))
    out = ffi.new("float *")
    check(lib.bc_book_avg_norm(out, cptr(xa)), "bc_book_avg_norm")
    return np.float32(out[0])


# --- 128_Block's and 130_Real_Params' counts --------------------------------------
def _int(v, name: str) -> int:
    return as_int(v, name, 1, 2 ** 63 - 1)


def block_params(d_model: int = D_MODEL, d_ff: int = D_FF, n_layers: int = 1) -> Dict[str, int]:
    """Parameters of ``n_layers`` pre-norm blocks: ``attn = 4 d^2``, ``ffn = 2 d d_ff``,
    ``norms = 2 d`` (two RMSNorm gains), ``per_block``, ``all_blocks``.

    Parameters
    ----------
    d_model, d_ff, n_layers : int >= 1, optional

    Returns
    -------
    dict of str to int

    Raises
    ------
    ValueError
        A size below 1, or a count past int64.

    Examples
    --------
    >>> block_params()                                  # 128_Block: 256 + 512 + 16
    {'attn': 256, 'ffn': 512, 'norms': 16, 'per_block': 784, 'all_blocks': 784}
    """
    p = ffi.new("bc_book_params *")
    check(lib.bc_book_block_params(p, _int(d_model, "d_model"), _int(d_ff, "d_ff"),
                                   _int(n_layers, "n_layers")), "bc_book_block_params")
    return {k: int(getattr(p, k)) for k in ("attn", "ffn", "norms", "per_block", "all_blocks")}


def real_params() -> List[Dict[str, object]]:
    """130_Real_Params' table: for each of :data:`REAL_MODELS`, its name, sizes,
    published count and the block counts :func:`block_params` computes.

    Returns
    -------
    list of dict

    Examples
    --------
    >>> real_params()[0]["all_blocks"]                  # GPT-2 Small's 12 blocks
    84953088
    """
    return real_params_rows(block_params)
