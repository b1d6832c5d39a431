"""The dynamic engine: the chapters' transformer block at any size, with every
variant they discuss, one C call per block (or per stack) from NumPy.

>>> cfg = BlockConfig()                        # the chapter-24 block: D=8, 2 heads, F=32
>>> Ws = init_blocks(cfg, 4, seed=42)          # 129_Stack's four blocks
>>> x = np.zeros((4, 8), np.float32) + 0.1
>>> ys = stack_forward(x, Ws, cfg, return_hidden=True)   # (5, 4, 8): input + 4 states

Semantics (``cfg.placement``):

- ``"pre"``: ``x = x + attn(norm1(x)); x = x + ffn(norm2(x))`` (chapter 24, GPT-2).
- ``"post"``: ``x = norm1(x + attn(x)); x = norm2(x + ffn(x))`` (the 2017 original).
- ``residual=False`` drops the ``x +`` (chapter 24, exercise 1).

``norm``: ``"rms"`` ``x / sqrt(mean(x**2) + eps) * gain``; ``"layer"``
``(x - mean) / sqrt(var + eps) * gain + shift`` with the variance over D (not
D-1); ``"none"`` (exercise 2). Attention scores are ``q.k / sqrt(Dh)``, ``causal``
masks the keys after each query (exercise 4), softmax, heads concatenated,
then ``attn.proj``. FFN: ``down(act(up(x)))`` with ``act`` GELU-tanh (the
listings, GPT-2), exact erf GELU (chapter 6, exercise 4), ReLU (exercise 3);
or ``"swiglu"``: ``down(silu(gate(x)) * up(x))``, the form LLaMA and DeepSeek use.
Exercise 6 writes its formula with a plain sigmoid gate,
``(W1 x * sigmoid(W3 x)) W2``: that is the older GLU (Dauphin et al., 2017);
SwiGLU swaps the sigmoid for ``silu(z) = z * sigmoid(z)``. Both cost the
same third matrix.

Weights are a mapping named like the chapter-6 ``GPTBlock`` state dict (so a
PyTorch block's ``state_dict()`` works unchanged; tensors are read with
``.detach().cpu().numpy()``, torch is never imported):

=====================  =========  ============================================
key                    shape      part
=====================  =========  ============================================
``attn.qkv.weight``    (3D, D)    Q, K, V stacked by rows; head h owns rows
                                  h*Dh..(h+1)*Dh of each (the book's
                                  ``W_Q[h][k][d]`` flattened is the Q part)
``attn.proj.weight``   (D, D)     output projection (the book's ``W_O``)
``up.weight``          (F, D)     ``W1``
``down.weight``        (D, F)     ``W2``
``gate.weight``        (F, D)     swiglu only (exercise 6's third matrix)
``<any above>.bias``   (rows,)    optional linear biases
``ln1.weight``         (D,)       optional gain of norm 1 (rms, layer)
``ln2.weight``         (D,)       optional gain of norm 2
``ln1.bias``           (D,)       optional shift of norm 1 (layer only)
``ln2.bias``           (D,)       optional shift of norm 2 (layer only)
=====================  =========  ============================================

An absent optional key means the part is absent (no bias, unit gain, zero
shift); the chapter-24 block has neither biases nor gains.

Inputs are computed in float32: float64 (and float16) inputs and weights are
rounded to float32 first; results are new float32 arrays and inputs are never
modified.

Speed: a plain mapping is validated on every call (its entries are read
once, and the call uses what it checked). :func:`prepare` validates once and
returns a :class:`PreparedBlock`, an immutable copy of the weights with its C
view built, which ``block_forward`` and ``stack_forward`` accept in place of
the mapping: the toy block then costs a few microseconds a call. Scratch
memory is a per-thread workspace reused across calls, so a call allocates only
its output.

The block's config and parameter count live in :mod:`blockc.block.config`, the weights'
checks and draws in :mod:`blockc.block.weights`; this module re-exports both, so
``blockc.block.engine`` (and ``blockc.engine``) name everything above.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, Iterable, List, Mapping, Sequence, Tuple, Union

import numpy.typing as npt

import numpy as np

from .._native import check, cptr, ffi, fptr, lib, output_empty, thread_buffer
from .._args import F32, as_f32, as_flag
from .._errors import BlockcTypeError, BlockcValueError
from .config import (ACTIVATIONS, NORMS, PLACEMENTS, WEIGHT_FIELDS, BlockConfig, check_config,
                     count_parameters)
from .weights import PreparedBlock, init_block, init_blocks, iter_blocks, prepare, weights_view

__all__ = [
    "BlockConfig", "PreparedBlock", "prepare", "init_block", "init_blocks", "iter_blocks",
    "block_forward",
    "stack_forward", "block_backward", "stack_backward", "count_parameters", "avg_norm", "NORMS", "PLACEMENTS", "ACTIVATIONS",
]


# ---- per-thread workspace -------------------------------------------------

_tls = threading.local()


def workspace(cfg: BlockConfig, b: int, t: int):
    """(pointer, length) of this thread's scratch, grown when needed."""
    tls = _tls
    if getattr(tls, "cfg", None) is cfg and tls.b == b and tls.t == t:
        return tls.ptr, tls.n
    n = ffi.new("size_t *")
    check(lib.bc_block_workspace_size(n, cfg.c_config, b, t), "block workspace")
    ptr, buf = thread_buffer(tls, int(n[0]))
    # holding cfg keeps its id from being reused by another config
    tls.cfg, tls.b, tls.t, tls.n = cfg, b, t, buf.size
    return ptr, buf.size


def _input(x: Any, cfg: BlockConfig):
    """x as float32 (B,T,D)-compatible C array plus (B, T)."""
    x = as_f32(x, "x")
    shape = x.shape
    if len(shape) == 3:
        b, t, d = shape
    elif len(shape) == 2:
        (t, d), b = shape, 1
    else:
        raise BlockcValueError(f"x must have shape (T, d_model) or (B, T, d_model) with "
                               f"d_model={cfg.d_model}, got {shape}")
    if d != cfg.d_model:
        raise BlockcValueError(f"x must have shape (T, {cfg.d_model}) or (B, T, {cfg.d_model}) "
                               f"(last axis d_model={cfg.d_model}), got {shape}")
    return x, b, t


# ---- forward ----------------------------------------------------------------

def block_forward(x: npt.ArrayLike, W: Union[Mapping[str, Any], PreparedBlock],
                  cfg: BlockConfig) -> np.ndarray:
    """One transformer block.

    Parameters
    ----------
    x : array_like, shape (T, D) or (B, T, D)
        The input, floating (computed in float32).
    W : mapping of str to array_like, or PreparedBlock
        The block's weights (see the module docstring), or :func:`prepare`'s result.
    cfg : BlockConfig
        The block's shape and options.

    Returns
    -------
    numpy.ndarray
        A new float32 array shaped like ``x``.

    Raises
    ------
    TypeError
        A wrong type: ``cfg``, ``W`` or a floating array expected.
    ValueError
        A wrong shape or key, or weights prepared for another config.

    Examples
    --------
    >>> cfg = BlockConfig()
    >>> y = block_forward(np.full((4, 8), 0.1, np.float32), init_block(cfg), cfg)
    >>> y.shape, y.dtype
    ((4, 8), dtype('float32'))
    """
    # the lean path: prepared weights, a float32 C-contiguous x
    if type(cfg) is not BlockConfig:
        check_config(cfg)
    p = weights_view(W, cfg)
    if not (type(x) is np.ndarray and x.dtype is F32 and x.flags.c_contiguous):
        x = as_f32(x, "x")
    shape = x.shape
    if len(shape) == 3 and shape[2] == cfg.d_model:
        b, t = shape[0], shape[1]
    elif len(shape) == 2 and shape[1] == cfg.d_model:
        b, t = 1, shape[0]
    else:
        x, b, t = _input(x, cfg)  # raises the shape error
    y = output_empty(shape)
    if b and t:
        work, n = workspace(cfg, b, t)
        st = lib.bc_block_forward(fptr(y), cptr(x), cfg.c_config, p.c_weights, b, t, work, n)
        if st:
            check(st, "block_forward")
    return y


def stack_forward(x: npt.ArrayLike, Ws: Sequence[Union[Mapping[str, Any], PreparedBlock]],
                  cfg: BlockConfig, return_hidden: bool = False) -> np.ndarray:
    """The blocks ``Ws`` applied in order, in one C call.

    Parameters
    ----------
    x : array_like, shape (T, D) or (B, T, D)
        The input.
    Ws : sequence of mappings or PreparedBlocks
        One block's weights per entry.
    cfg : BlockConfig
        The configuration every block shares.
    return_hidden : bool, optional
        Also return the input and every block's output (chapter 6, exercise 2).

    Returns
    -------
    numpy.ndarray
        The final state, shaped like ``x``; with ``return_hidden``, an array
        ``(len(Ws) + 1, *x.shape)``: the input (as float32), then the state after
        every block.

    Raises
    ------
    TypeError, ValueError
        As :func:`block_forward`, naming ``Ws[i]``.

    Examples
    --------
    >>> cfg = BlockConfig()
    >>> hs = stack_forward(np.full((4, 8), 0.1, np.float32), init_blocks(cfg, 4), cfg,
    ...                    return_hidden=True)
    >>> hs.shape
    (5, 4, 8)
    """
    check_config(cfg)
    as_flag(return_hidden, "return_hidden")
    if isinstance(Ws, Mapping) or not isinstance(Ws, Iterable):
        raise BlockcTypeError("Ws must be a sequence of weight mappings, one per block")
    preps = [weights_view(W, cfg, f"Ws[{i}]") for i, W in enumerate(Ws)]
    x, b, t = _input(x, cfg)
    n = len(preps)
    if return_hidden:
        out = output_empty((n + 1,) + x.shape)
        out[0] = x
        y, hidden = output_empty(x.shape), out[1:]
    else:
        out = y = np.array(x, dtype=F32, copy=True) if n == 0 else output_empty(x.shape)
        hidden = None
    if n and b and t:
        ws = ffi.new("bc_block_weights[]", n)
        for i, p in enumerate(preps):
            ws[i] = p.c_weights[0]
        work, wn = workspace(cfg, b, t)
        check(lib.bc_stack_forward(fptr(y), ffi.NULL if hidden is None else fptr(hidden),
                                   cptr(x), cfg.c_config, ws, n, b, t, work, wn), "stack_forward")
    return out


# ---- backward -------------------------------------------------------------------

def stack_backward(x: npt.ArrayLike, Ws: Sequence[Union[Mapping[str, Any], PreparedBlock]],
                   cfg: BlockConfig, dy: npt.ArrayLike
                   ) -> Tuple[np.ndarray, List[Dict[str, np.ndarray]]]:
    """The gradients of :func:`stack_forward` ``(x, Ws, cfg)``, given ``dy``.

    For a loss L of the stack's output y with dL/dy = ``dy``: dL/dx and, for every
    block, dL/dW. One C call runs the forward again keeping what the backward
    needs, then the backward (attention's probabilities recomputed tile by tile
    from each query's log-sum-exp, never a (T, T) matrix).

    Parameters
    ----------
    x : array_like, shape (T, D) or (B, T, D)
    Ws : sequence of mappings or PreparedBlocks
    cfg : BlockConfig
    dy : array_like, shaped like ``x``

    Returns
    -------
    dx : numpy.ndarray
        Shaped like ``x``, float32.
    dWs : list of dict of str to numpy.ndarray
        For every block, its weights' gradients keyed like its weights.

    Raises
    ------
    TypeError, ValueError
        As :func:`stack_forward`; ``dy`` not shaped like ``x``.

    Examples
    --------
    >>> cfg = BlockConfig(causal=True)
    >>> x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    >>> dx, dWs = stack_backward(x, init_blocks(cfg, 2), cfg, np.ones((4, 8), np.float32))
    >>> dx.shape, sorted(dWs[0])
    ((4, 8), ['attn.proj.weight', 'attn.qkv.weight', 'down.weight', 'up.weight'])
    """
    check_config(cfg)
    if isinstance(Ws, Mapping) or not isinstance(Ws, Iterable):
        raise BlockcTypeError("Ws must be a sequence of weight mappings, one per block")
    preps = [weights_view(W, cfg, f"Ws[{i}]") for i, W in enumerate(Ws)]
    x, b, t = _input(x, cfg)
    dy = as_f32(dy, "dy")
    if dy.shape != x.shape:
        raise BlockcValueError(f"dy must have the shape of x {x.shape}, got {dy.shape}")
    n = len(preps)
    grads = [{k: np.zeros(a.shape, F32) for k, a in p.arrays.items()} for p in preps]
    if n == 0:
        return np.array(dy, dtype=F32, copy=True), grads
    dx = output_empty(x.shape)
    if not (b and t):
        dx[...] = 0.0
        return dx, grads
    ws = ffi.new("bc_block_weights[]", n)
    gs = ffi.new("bc_block_grads[]", n)
    keep = []
    for i, p in enumerate(preps):
        ws[i] = p.c_weights[0]
        for key, fld in WEIGHT_FIELDS:
            if key in grads[i]:
                ptr = fptr(grads[i][key])
                keep.append(ptr)
                setattr(gs[i], fld, ptr)
    nw = ffi.new("size_t *")
    check(lib.bc_stack_backward_workspace_size(nw, cfg.c_config, n, b, t), "stack_backward")
    work = np.empty(int(nw[0]) + 16, F32)
    check(lib.bc_stack_backward(fptr(dx), gs, cptr(dy), cptr(x), cfg.c_config, ws, n, b, t,
                                fptr(work), work.size), "stack_backward")
    return dx, grads


def block_backward(x: npt.ArrayLike, W: Union[Mapping[str, Any], PreparedBlock],
                   cfg: BlockConfig, dy: npt.ArrayLike
                   ) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    """The gradients of :func:`block_forward` ``(x, W, cfg)`` given ``dy`` = dL/dy.

    Parameters
    ----------
    x : array_like, shape (T, D) or (B, T, D)
    W : mapping of str to array_like, or PreparedBlock
    cfg : BlockConfig
    dy : array_like, shaped like ``x``

    Returns
    -------
    dx : numpy.ndarray
        dL/dx, shaped like ``x``.
    dW : dict of str to numpy.ndarray
        dL/dW, keyed and shaped like ``W``.

    Raises
    ------
    TypeError, ValueError
        As :func:`block_forward`; ``dy`` not shaped like ``x``.

    Examples
    --------
    >>> cfg = BlockConfig()
    >>> x = np.full((4, 8), 0.1, np.float32)
    >>> dx, dW = block_backward(x, init_block(cfg), cfg, np.ones((4, 8), np.float32))
    >>> dW["up.weight"].shape
    (32, 8)
    """
    dx, dWs = stack_backward(x, [W], cfg, dy)
    return dx, dWs[0]



def avg_norm(x: Any) -> float:
    """129_Stack's figure: the mean over positions of each position's L2 norm,
    computed the listing's way in float32 (squares summed in order, ``sqrtf``,
    the norms summed in order and divided by the number of positions).
    x (..., D); every leading position counts."""
    x = as_f32(x, "x")
    if x.ndim < 1 or x.size == 0:
        raise BlockcValueError(f"x must have shape (..., D) with at least one position, got {x.shape}")
    rows = x.reshape(-1, x.shape[-1])
    ss = np.cumsum(rows * rows, axis=1, dtype=np.float32)[:, -1]  # cumsum: sequential float adds
    total = np.cumsum(np.sqrt(ss), dtype=np.float32)[-1]
    return float(total / np.float32(rows.shape[0]))
