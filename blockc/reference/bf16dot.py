"""The NumPy oracle of bfloat16i: bfloat16's weights multiplied by bfloat16 dot products.

A product rounds each row of x to bfloat16 as the weights are rounded
(:func:`round_bf16`: nearest, ties to even, then a subnormal result stored as a
zero of its sign, since vdpbf16ps reads subnormals as zeros), pads the columns
to an even count with zeros and computes each output as one chain over the
pairs of columns, AVX512_BF16's ``vdpbf16ps`` order and rounding::

    acc = 0
    for j in pairs:  acc = ftz(fmaf(w[2j+1], x[2j+1], acc))
                     acc = ftz(fmaf(w[2j],   x[2j],   acc))

``fmaf`` rounding once (:func:`blockc.reference.intdot.fmaf`) and ``ftz`` a
subnormal result becoming a zero of its sign; then ``y = r + acc`` (``acc``
without ``r``), ``+ b``. The C kernels give these bits on every instruction set
(csrc/kernels/fast_bf16dot.h): vdpbf16ps where the CPU has it, FMAs with MXCSR's
FTZ and DAZ, or fmaf and a flush, elsewhere.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .ggml import bfloat16
from .intdot import fmaf

__all__ = ["round_bf16", "ftz", "linear_bfloat16i"]

F32 = np.float32
_TINY = np.finfo(F32).tiny


def ftz(a) -> np.ndarray:
    """a (float32) with every subnormal replaced by a zero of its sign."""
    v = np.asarray(a, F32)
    return np.where(np.abs(v) < _TINY, np.copysign(F32(0), v), v).astype(F32)


def round_bf16(a) -> np.ndarray:
    """a rounded to bfloat16 (as float32 values), subnormal results flushed to zero:
    bfloat16i's weights, and its rows of x."""
    return ftz(bfloat16(np.asarray(a, F32)))


def linear_bfloat16i(x, w, b: Optional[np.ndarray] = None,
                     r: Optional[np.ndarray] = None) -> np.ndarray:
    """y (n, out) = r + x (n, c) @ w (out, c)^T + b with w stored as bfloat16i, as the
    C library computes it (the chain in the module's docstring), for finite values."""
    xa = np.ascontiguousarray(x, dtype=F32)
    wa = np.ascontiguousarray(w, dtype=F32)
    if xa.ndim != 2 or wa.ndim != 2 or xa.shape[1] != wa.shape[1]:
        raise ValueError(f"x (n, c) and w (out, c) must share c, got {xa.shape} and {wa.shape}")
    n, c = xa.shape
    out = wa.shape[0]
    cp = c + c % 2
    xb = np.zeros((n, cp), F32)
    wb = np.zeros((out, cp), F32)
    xb[:, :c] = round_bf16(xa)
    wb[:, :c] = round_bf16(wa)
    acc = np.zeros((n, out), F32)
    with np.errstate(invalid="ignore", over="ignore"):
        for j in range(0, cp, 2):
            for k in (j + 1, j):
                acc = ftz(fmaf(xb[:, None, k], wb[None, :, k], acc))
        y = acc if r is None else (np.asarray(r, F32) + acc).astype(F32)
        if b is not None:
            y = (y + np.asarray(b, F32)).astype(F32)
    return y
