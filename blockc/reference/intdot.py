"""The NumPy oracle of q8_0i and q4_0i: q8_0's (q4_0's) weights multiplied by integer
dot products.

A product quantises each row of x per block of 32 columns (the last one
zero-padded): ``a = max|x|`` (float32), ``d_x = a / 127`` and
``q_x = rint(x * (127 / a))`` (float32 operations, rounding half to even); a
block holding a non-finite x gets ``d_x = NaN`` and ``q_x = 0``, one with
``a < 1e-30`` (zero, or too small for ``127 / a``) ``d_x = 0`` and ``q_x = 0``.
The weights are q8_0's (:func:`blockc.reference.quant.q8_0_blocks`: half ``d_w``,
int8 ``q_w``), or q4_0's (llama.cpp's blocks, :mod:`blockc.reference.ggml`: half ``d_w``,
``q_w`` = nibble - 8). Each output is then one chain over the blocks in order::

    acc = 0
    for b in blocks:  acc = fmaf(float(isum_b), d_w[b] * d_x[b], acc)

with ``isum_b = sum_k q_w[k] q_x[k]`` exact, ``d_w * d_x`` rounded to float32 and
``fmaf`` rounding once (emulated exactly here in float64 with the TwoSum
error); then ``y = r + acc`` (``acc`` without ``r``), ``+ b``. The C kernels give
these bits on every instruction set (csrc/kernels/fast_intdot.h).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from . import ggml
from .quant import q8_0_blocks

__all__ = ["quantise_rows", "fmaf", "linear_q8_0i", "linear_q4_0i", "q4_0_blocks"]

F32 = np.float32
_TINY = F32(1e-30)


def quantise_rows(x) -> Tuple[np.ndarray, np.ndarray]:
    """(q, d) of rows x (n, c): q (n, blocks, 32) int8, d (n, blocks) float32."""
    a = np.ascontiguousarray(x, dtype=F32)
    if a.ndim != 2:
        raise ValueError(f"x must be 2-D, got shape {a.shape}")
    n, c = a.shape
    nb = (c + 31) // 32
    blocks = np.zeros((n, nb * 32), F32)
    blocks[:, :c] = a
    blocks = blocks.reshape(n, nb, 32)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        absx = np.abs(blocks)
        bad = ~np.all(absx <= np.finfo(F32).max, axis=-1)
        amax = np.where(np.isnan(absx), F32(0), absx).max(axis=-1).astype(F32)
        live = ~bad & (amax >= _TINY)
        safe = np.where(live, amax, F32(1)).astype(F32)
        inv = (F32(127) / safe).astype(F32)
        q = np.rint((blocks * inv[..., None]).astype(F32))
        q = np.where(live[..., None], q, F32(0)).astype(np.int8)
        d = np.where(live, (safe / F32(127)).astype(F32), F32(0)).astype(F32)
        d = np.where(bad, F32(np.nan), d).astype(F32)
    return q, d


def fmaf(a, b, c) -> np.ndarray:
    """a * b + c rounded once to float32 (C's fmaf), for float32 arrays of finite values."""
    a64, b64, c64 = (np.asarray(v, F32).astype(np.float64) for v in (a, b, c))
    p = a64 * b64                      # exact: 24 + 24 bits
    s = p + c64
    bb = s - p
    e = (p - (s - bb)) + (c64 - bb)    # TwoSum: p + c == s + e exactly
    r = s.astype(F32)
    r64 = r.astype(np.float64)
    # rounding s to float32 is the correct rounding of s + e unless s lies exactly
    # halfway between two float32s and e breaks the tie
    other = np.nextafter(r, np.where(s > r64, F32(np.inf), F32(-np.inf)).astype(F32))
    mid = (s != r64) & ((r64 + other.astype(np.float64)) * 0.5 == s) & (e != 0)
    pick = np.where(np.sign(other.astype(np.float64) - r64) == np.sign(e), other, r)
    return np.where(mid, pick, r).astype(F32)


def linear_q8_0i(x, w, b: Optional[np.ndarray] = None,
                 r: Optional[np.ndarray] = None) -> np.ndarray:
    """y (n, out) = r + x (n, c) @ w (out, c)^T + b with w stored as q8_0i, as the
    C library computes it (the chain in the module's docstring)."""
    return _linear_int(x, *q8_0_blocks(w), b, r)


def q4_0_blocks(w) -> Tuple[np.ndarray, np.ndarray]:
    """(d, q) of ``w`` (out, c) stored as q4_0 (llama.cpp's ``quantize_row_q4_0_ref``,
    rows zero-padded to blocks of 32): d (out, blocks) float32 (halves), q (out, blocks,
    32) int8, the nibbles less 8."""
    a = np.ascontiguousarray(w, dtype=F32)
    out, c = a.shape
    nb = (c + 31) // 32
    padded = np.zeros((out, nb * 32), F32)
    padded[:, :c] = a
    raw = ggml.quantise(padded, "Q4_0").reshape(out, nb, 18)
    d = np.ascontiguousarray(raw[..., :2]).view(np.float16)[..., 0].astype(F32)
    qs = raw[..., 2:]
    q = np.concatenate([qs & 15, qs >> 4], axis=-1).astype(np.int8) - 8
    return d, q


def linear_q4_0i(x, w, b: Optional[np.ndarray] = None,
                 r: Optional[np.ndarray] = None) -> np.ndarray:
    """y (n, out) = r + x (n, c) @ w (out, c)^T + b with w stored as q4_0i, as the
    C library computes it (q8_0i's chain on q4_0's weights)."""
    return _linear_int(x, *q4_0_blocks(w), b, r)


def _linear_int(x, dw, qw, b, r) -> np.ndarray:
    xq, dx = quantise_rows(x)
    dw = dw.astype(F32)
    n, nb = dx.shape
    out = dw.shape[0]
    isum = np.einsum("nbk,obk->nob", xq.astype(np.int64), qw.astype(np.int64))
    acc = np.zeros((n, out), F32)
    with np.errstate(invalid="ignore", over="ignore"):
        for blk in range(nb):
            scale = (dw[None, :, blk] * dx[:, None, blk]).astype(F32)
            acc = fmaf(isum[:, :, blk].astype(F32), scale, acc)
        y = acc if r is None else (np.asarray(r, F32) + acc).astype(F32)
        if b is not None:
            y = (y + np.asarray(b, F32)).astype(F32)
    return y
