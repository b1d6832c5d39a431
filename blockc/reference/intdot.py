"""The NumPy oracle of q8_0i, q4_0i, q5_0i, q4_ki, q6_ki, q5_ki, iq4_nli, iq4_xsi, q4_1i,
q5_1i, q2_ki and q3_ki: q8_0's (q4_0's, q5_0's, q4_k's, q6_k's, q5_k's, iq4_nl's, iq4_xs's,
q4_1's, q5_1's, q2_k's, q3_k's) weights multiplied by integer dot products (the chains with
more than one step a block: :func:`linear_q4_ki`, :func:`linear_q5_ki`, :func:`linear_q6_ki`,
:func:`linear_q4_1i`, :func:`linear_q2_ki`, :func:`linear_q3_ki`).

A product quantises each row of x per block of 32 columns (the last one
zero-padded): ``a = max|x|`` (float32), ``d_x = a / 127`` and
``q_x = rint(x * (127 / a))`` (float32 operations, rounding half to even); a
block holding a non-finite x gets ``d_x = NaN`` and ``q_x = 0``, one with
``a < 1e-30`` (zero, or too small for ``127 / a``) ``d_x = 0`` and ``q_x = 0``.
The weights are q8_0's (:func:`blockc.reference.quant.q8_0_blocks`: half ``d_w``,
int8 ``q_w``), q4_0's (llama.cpp's blocks, :mod:`blockc.reference.ggml`: half ``d_w``,
``q_w`` = nibble - 8) or q5_0's (``q_w`` = the five bits - 16). Each output is then one chain over the blocks in order::

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
from . import quant
from .quant import q8_0_blocks

__all__ = ["quantise_rows", "fmaf", "linear_q8_0i", "linear_q4_0i", "linear_q5_0i",
           "linear_q4_ki", "linear_q6_ki", "linear_q5_ki", "q4_0_blocks", "q5_0_blocks",
           "q4_k_blocks", "q5_k_blocks", "q6_k_blocks", "linear_iq4_nli",
           "linear_iq4_xsi", "linear_q4_1i", "linear_q5_1i", "q4_1_blocks", "q5_1_blocks",
           "linear_q2_ki", "linear_q3_ki"]

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


def _ggml_blocks(w, typ: str) -> np.ndarray:
    """llama.cpp's blocks of ``w`` (out, c) in ``typ`` (rows zero-padded to blocks of 32):
    (out, blocks, block bytes) uint8."""
    a = np.ascontiguousarray(w, dtype=F32)
    out, c = a.shape
    nb = (c + 31) // 32
    padded = np.zeros((out, nb * 32), F32)
    padded[:, :c] = a
    return ggml.quantise(padded, typ).reshape(out, nb, -1)


def q4_0_blocks(w) -> Tuple[np.ndarray, np.ndarray]:
    """(d, q) of ``w`` (out, c) stored as q4_0 (llama.cpp's ``quantize_row_q4_0_ref``,
    rows zero-padded to blocks of 32): d (out, blocks) float32 (halves), q (out, blocks,
    32) int8, the nibbles less 8."""
    raw = _ggml_blocks(w, "Q4_0")
    d = np.ascontiguousarray(raw[..., :2]).view(np.float16)[..., 0].astype(F32)
    qs = raw[..., 2:]
    q = np.concatenate([qs & 15, qs >> 4], axis=-1).astype(np.int8) - 8
    return d, q


def q5_0_blocks(w) -> Tuple[np.ndarray, np.ndarray]:
    """(d, q) of ``w`` (out, c) stored as q5_0 (llama.cpp's ``quantize_row_q5_0_ref``):
    as :func:`q4_0_blocks`, q the five bits (nibble and bit k of the block's qh) less 16."""
    raw = _ggml_blocks(w, "Q5_0")
    d = np.ascontiguousarray(raw[..., :2]).view(np.float16)[..., 0].astype(F32)
    qh = np.ascontiguousarray(raw[..., 2:6]).view("<u4")[..., 0]
    bits = ((qh[..., None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int16)
    qs = raw[..., 6:]
    nib = np.concatenate([qs & 15, qs >> 4], axis=-1).astype(np.int16)
    return d, (nib | bits << 4).astype(np.int8) - 16


def linear_q4_0i(x, w, b: Optional[np.ndarray] = None,
                 r: Optional[np.ndarray] = None) -> np.ndarray:
    """y (n, out) = r + x (n, c) @ w (out, c)^T + b with w stored as q4_0i, as the
    C library computes it (q8_0i's chain on q4_0's weights)."""
    return _linear_int(x, *q4_0_blocks(w), b, r)


def linear_q5_0i(x, w, b: Optional[np.ndarray] = None,
                 r: Optional[np.ndarray] = None) -> np.ndarray:
    """y (n, out) = r + x (n, c) @ w (out, c)^T + b with w stored as q5_0i, as the
    C library computes it (q8_0i's chain on q5_0's weights)."""
    return _linear_int(x, *q5_0_blocks(w), b, r)


def q4_k_blocks(w) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(d, dmin, sc, m, q) of ``w`` (out, c) stored as q4_k (llama.cpp's
    ``quantize_row_q4_K_ref``; c a multiple of 256): d, dmin (out, super-blocks) float32
    (halves), sc, m (out, super-blocks, 8) the 6-bit scales and mins, q (out,
    super-blocks, 8, 32) the nibbles of each sub-block."""
    a = np.ascontiguousarray(w, dtype=F32)
    if a.ndim != 2 or a.shape[1] % 256:
        raise ValueError(f"w must be 2-D with columns a multiple of 256, got shape {a.shape}")
    out, c = a.shape
    raw = ggml.quantise(a, "Q4_K").reshape(-1, 144)
    half = lambda b: np.ascontiguousarray(b).view(np.float16)[:, 0].astype(F32)  # noqa: E731
    sc, m = ggml.scale_min_k4(raw[:, 4:16])
    q = ggml.k_nibbles(raw[:, 16:144])
    ns = c // 256
    return (half(raw[:, 0:2]).reshape(out, ns), half(raw[:, 2:4]).reshape(out, ns),
            sc.reshape(out, ns, 8), m.reshape(out, ns, 8), q.reshape(out, ns, 8, 32))


def linear_q4_ki(x, w, b: Optional[np.ndarray] = None,
                 r: Optional[np.ndarray] = None) -> np.ndarray:
    """y (n, out) = r + x (n, c) @ w (out, c)^T + b with w stored as q4_ki, as the C
    library computes it: x quantised as for q8_0i (sub-block j of super-block s is x's
    block 8s + j), then per output, for each super-block and each of its sub-blocks in
    order, ``acc = fmaf(isum, (d sc) d_x, acc)`` and ``acc = fmaf(-(dmin m), d_x
    sum(q_x), acc)`` (``isum`` the exact sum of nibble times q_x; ``d sc`` and ``dmin m``
    exact in float32; ``d_x sum(q_x)`` rounded to float32)."""
    return _linear_k(x, *q4_k_blocks(w), b, r)


def q5_k_blocks(w) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(d, dmin, sc, m, q) of ``w`` (out, c) stored as q5_k (llama.cpp's
    ``quantize_row_q5_K_ref``; c a multiple of 256): as :func:`q4_k_blocks`, q the five
    bits of each weight (its nibble, and bit j of qh byte i for weight i of sub-block j)."""
    a = np.ascontiguousarray(w, dtype=F32)
    if a.ndim != 2 or a.shape[1] % 256:
        raise ValueError(f"w must be 2-D with columns a multiple of 256, got shape {a.shape}")
    out, c = a.shape
    raw = ggml.quantise(a, "Q5_K").reshape(-1, 176)
    half = lambda b: np.ascontiguousarray(b).view(np.float16)[:, 0].astype(F32)  # noqa: E731
    sc, m = ggml.scale_min_k4(raw[:, 4:16])
    high = (raw[:, None, 16:48] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1
    q = ggml.k_nibbles(raw[:, 48:176]) | (high << 4)
    ns = c // 256
    return (half(raw[:, 0:2]).reshape(out, ns), half(raw[:, 2:4]).reshape(out, ns),
            sc.reshape(out, ns, 8), m.reshape(out, ns, 8), q.reshape(out, ns, 8, 32))


def linear_q5_ki(x, w, b: Optional[np.ndarray] = None,
                 r: Optional[np.ndarray] = None) -> np.ndarray:
    """y (n, out) = r + x (n, c) @ w (out, c)^T + b with w stored as q5_ki, as the C
    library computes it: :func:`linear_q4_ki`'s chain on q5_k's weights (``isum`` the
    exact sum of the five-bit q times q_x)."""
    return _linear_k(x, *q5_k_blocks(w), b, r)


def linear_iq4_nli(x, w, b: Optional[np.ndarray] = None,
                   r: Optional[np.ndarray] = None) -> np.ndarray:
    """y (n, out) = r + x (n, c) @ w (out, c)^T + b with w stored as iq4_nli, as the C
    library computes it: q8_0i's chain on iq4_nl's weights (``d_w`` the block's half
    scale, ``q_w`` the signed value ``KVALUES_IQ4NL[nibble]``, -127..113)."""
    d, q = quant.iq4_nl_blocks(w)
    return _linear_int(x, d, ggml.KVALUES_IQ4NL[q].astype(np.int16), b, r)


def linear_iq4_xsi(x, w, b: Optional[np.ndarray] = None,
                   r: Optional[np.ndarray] = None) -> np.ndarray:
    """y (n, out) = r + x (n, c) @ w (out, c)^T + b with w stored as iq4_xsi, as the C
    library computes it: q8_0i's chain with sub-block j of super-block s as x's block 8s +
    j, its scale ``d sc_j`` (exact in float32), ``q_w`` the signed value
    ``KVALUES_IQ4NL[nibble]``."""
    d, ls, q = quant.iq4_xs_blocks(w)
    out = d.shape[0]
    dw = (d[..., None] * ls.astype(F32)).astype(F32).reshape(out, -1)
    return _linear_int(x, dw, ggml.KVALUES_IQ4NL[q].astype(np.int16).reshape(out, -1, 32), b, r)


def linear_q2_ki(x, w, b: Optional[np.ndarray] = None,
                 r: Optional[np.ndarray] = None) -> np.ndarray:
    """y (n, out) = r + x (n, c) @ w (out, c)^T + b with w stored as q2_ki, as the C
    library computes it: x quantised as for q8_0i, then per output, for each super-block
    and each of its sub-blocks of 16 in order (x block j / 2), ``acc = fmaf(isum, (d sc)
    d_x, acc)`` and ``acc = fmaf(-(dmin m), d_x sum16(q_x), acc)`` (``isum`` the exact sum
    of the two-bit q times q_x, ``sum16(q_x)`` the sub-block's sum of q_x, llama.cpp's
    ``bsums``; ``d sc`` and ``dmin m`` exact in float32, ``d_x sum16`` rounded to
    float32)."""
    d, dmin, sc, m, q = quant.q2_k_blocks(w)
    out = d.shape[0]
    ds = (d[..., None] * sc.astype(F32)).astype(F32).reshape(out, -1)
    dm = (dmin[..., None] * m.astype(F32)).astype(F32).reshape(out, -1)
    return _linear_16(x, ds, dm, q, b, r)


def linear_q3_ki(x, w, b: Optional[np.ndarray] = None,
                 r: Optional[np.ndarray] = None) -> np.ndarray:
    """y (n, out) = r + x (n, c) @ w (out, c)^T + b with w stored as q3_ki, as the C
    library computes it: :func:`linear_q2_ki`'s chain without the min term, ``q`` the
    signed value -4..3 (the high bit clear: the two low bits less 4), ``sc`` the signed
    6-bit scale."""
    d, ls, q = quant.q3_k_blocks(w)
    ds = (d[..., None] * ls.astype(F32)).astype(F32).reshape(d.shape[0], -1)
    return _linear_16(x, ds, None, q, b, r)


def _linear_16(x, ds, dm, q, b, r) -> np.ndarray:
    """The chain over sub-blocks of 16: ds, dm (out, sub-blocks) exact float32 products,
    dm None for no min term; q (out, super-blocks, 16, 16)."""
    xq, dx = quantise_rows(x)
    n, nb = dx.shape
    out = ds.shape[0]
    if nb * 2 != ds.shape[1]:
        raise ValueError(f"x has {x.shape[1]} columns, w {ds.shape[1] * 16}")
    x16 = xq.reshape(n, 2 * nb, 16).astype(np.int64)
    isum = np.einsum("njk,ojk->noj", x16, q.reshape(out, 2 * nb, 16).astype(np.int64))
    bsum = x16.sum(axis=-1).astype(F32)  # (n, sub-blocks): exact
    acc = np.zeros((n, out), F32)
    with np.errstate(invalid="ignore", over="ignore"):
        for j in range(2 * nb):
            scale = (ds[None, :, j] * dx[:, None, j // 2]).astype(F32)
            acc = fmaf(isum[:, :, j].astype(F32), scale, acc)
            if dm is not None:
                xm = (dx[:, j // 2] * bsum[:, j]).astype(F32)
                acc = fmaf(np.broadcast_to(-dm[None, :, j], acc.shape),
                           np.broadcast_to(xm[:, None], acc.shape), acc)
        y = acc if r is None else (np.asarray(r, F32) + acc).astype(F32)
        if b is not None:
            y = (y + np.asarray(b, F32)).astype(F32)
    return y


def q4_1_blocks(w) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(d, m, q) of ``w`` (out, c) stored as q4_1 (llama.cpp's ``quantize_row_q4_1_ref``,
    rows zero-padded to blocks of 32): d, m (out, blocks) float32 (halves: the scale and
    the minimum), q (out, blocks, 32) int16, the nibbles (0..15)."""
    raw = _ggml_blocks(w, "Q4_1")
    d = np.ascontiguousarray(raw[..., 0:2]).view(np.float16)[..., 0].astype(F32)
    m = np.ascontiguousarray(raw[..., 2:4]).view(np.float16)[..., 0].astype(F32)
    qs = raw[..., 4:]
    return d, m, np.concatenate([qs & 15, qs >> 4], axis=-1).astype(np.int16)


def q5_1_blocks(w) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(d, m, q) of ``w`` (out, c) stored as q5_1 (llama.cpp's ``quantize_row_q5_1_ref``):
    as :func:`q4_1_blocks`, q the five bits (nibble and bit k of the block's qh, 0..31)."""
    raw = _ggml_blocks(w, "Q5_1")
    d = np.ascontiguousarray(raw[..., 0:2]).view(np.float16)[..., 0].astype(F32)
    m = np.ascontiguousarray(raw[..., 2:4]).view(np.float16)[..., 0].astype(F32)
    qh = np.ascontiguousarray(raw[..., 4:8]).view("<u4")[..., 0]
    bits = ((qh[..., None] >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int16)
    qs = raw[..., 8:]
    nib = np.concatenate([qs & 15, qs >> 4], axis=-1).astype(np.int16)
    return d, m, (nib | bits << 4).astype(np.int16)


def linear_q4_1i(x, w, b: Optional[np.ndarray] = None,
                 r: Optional[np.ndarray] = None) -> np.ndarray:
    """y (n, out) = r + x (n, c) @ w (out, c)^T + b with w stored as q4_1i, as the C
    library computes it (llama.cpp's q4_1 x q8_1 product): x quantised as for q8_0i, then
    per output, for each block in order, ``acc = fmaf(isum, d_w d_x, acc)`` and ``acc =
    fmaf(m_w, d_x sum(q_x), acc)`` (``isum`` the exact sum of nibble times q_x; ``d_w
    d_x`` and ``d_x sum(q_x)`` rounded to float32: q8_1's block sum ``s``, kept in
    float32 where llama.cpp rounds it and ``d_x`` to halves)."""
    return _linear_min(x, *q4_1_blocks(w), b, r)


def linear_q5_1i(x, w, b: Optional[np.ndarray] = None,
                 r: Optional[np.ndarray] = None) -> np.ndarray:
    """y (n, out) = r + x (n, c) @ w (out, c)^T + b with w stored as q5_1i, as the C
    library computes it: :func:`linear_q4_1i`'s chain on q5_1's weights (``isum`` the
    exact sum of the five-bit q times q_x)."""
    return _linear_min(x, *q5_1_blocks(w), b, r)


def _linear_min(x, dw, mw, qw, b, r) -> np.ndarray:
    xq, dx = quantise_rows(x)
    n, nb = dx.shape
    out = dw.shape[0]
    if dw.shape[1] != nb:
        raise ValueError(f"x has {x.shape[1]} columns, w {dw.shape[1] * 32}")
    isum = np.einsum("nbk,obk->nob", xq.astype(np.int64), qw.astype(np.int64))
    xm = (dx * xq.astype(np.int64).sum(axis=-1).astype(F32)).astype(F32)  # (n, nb)
    acc = np.zeros((n, out), F32)
    with np.errstate(invalid="ignore", over="ignore"):
        for blk in range(nb):
            scale = (dw[None, :, blk] * dx[:, None, blk]).astype(F32)
            acc = fmaf(isum[:, :, blk].astype(F32), scale, acc)
            acc = fmaf(np.broadcast_to(mw[None, :, blk], acc.shape),
                       np.broadcast_to(xm[:, None, blk], acc.shape), acc)
        y = acc if r is None else (np.asarray(r, F32) + acc).astype(F32)
        if b is not None:
            y = (y + np.asarray(b, F32)).astype(F32)
    return y


def _linear_k(x, d, dmin, sc, m, q, b, r) -> np.ndarray:
    xq, dx = quantise_rows(x)
    n, nb = dx.shape
    out, ns = d.shape
    if nb != ns * 8:
        raise ValueError(f"x has {x.shape[1]} columns, w {ns * 256}")
    qw = q.reshape(out, nb, 32).astype(np.int64)
    isum = np.einsum("nbk,obk->nob", xq.astype(np.int64), qw)
    xm = (dx * xq.astype(np.int64).sum(axis=-1).astype(F32)).astype(F32)  # (n, nb)
    dsc = (d[:, :, None] * sc.astype(F32)).astype(F32).reshape(out, nb)
    dm = (dmin[:, :, None] * m.astype(F32)).astype(F32).reshape(out, nb)
    acc = np.zeros((n, out), F32)
    with np.errstate(invalid="ignore", over="ignore"):
        for blk in range(nb):
            scale = (dsc[None, :, blk] * dx[:, None, blk]).astype(F32)
            acc = fmaf(isum[:, :, blk].astype(F32), scale, acc)
            acc = fmaf(np.broadcast_to(-dm[None, :, blk], acc.shape),
                       np.broadcast_to(xm[:, None, blk], acc.shape), acc)
        y = acc if r is None else (np.asarray(r, F32) + acc).astype(F32)
        if b is not None:
            y = (y + np.asarray(b, F32)).astype(F32)
    return y


def q6_k_blocks(w) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(d, sc, q) of ``w`` (out, c) stored as q6_k (llama.cpp's ``quantize_row_q6_K_ref``;
    c a multiple of 256): d (out, super-blocks) float32 (halves), sc (out, super-blocks,
    16) the int8 scales, q (out, super-blocks, 16, 16) the six-bit values less 32."""
    a = np.ascontiguousarray(w, dtype=F32)
    if a.ndim != 2 or a.shape[1] % 256:
        raise ValueError(f"w must be 2-D with columns a multiple of 256, got shape {a.shape}")
    out, c = a.shape
    raw = ggml.quantise(a, "Q6_K").reshape(-1, 210)
    ns = c // 256
    q = ggml.q6_k_values(raw[:, :128], raw[:, 128:192]).astype(np.int16) - 32
    d = np.ascontiguousarray(raw[:, 208:210]).view(np.float16)[:, 0].astype(F32)
    sc = np.ascontiguousarray(raw[:, 192:208]).view(np.int8)
    return d.reshape(out, ns), sc.reshape(out, ns, 16), q.reshape(out, ns, 16, 16)


def linear_q6_ki(x, w, b: Optional[np.ndarray] = None,
                 r: Optional[np.ndarray] = None) -> np.ndarray:
    """y (n, out) = r + x (n, c) @ w (out, c)^T + b with w stored as q6_ki, as the C
    library computes it: x quantised as for q8_0i, then per output, for each super-block
    and each of its sub-blocks of 16 in order (x block j / 2), ``acc = fmaf(isum, (d sc)
    d_x, acc)`` (``isum`` the exact sum of (q - 32) q_x; ``d sc`` exact in float32)."""
    d, sc, q = q6_k_blocks(w)
    xq, dx = quantise_rows(x)
    n, nb = dx.shape
    out, ns = d.shape
    if nb != ns * 8:
        raise ValueError(f"x has {x.shape[1]} columns, w {ns * 256}")
    isum = np.einsum("nbk,obk->nob", xq.reshape(n, 2 * nb, 16).astype(np.int64),
                     q.reshape(out, 2 * nb, 16).astype(np.int64))
    ds = (d[:, :, None] * sc.astype(F32)).astype(F32).reshape(out, 2 * nb)
    acc = np.zeros((n, out), F32)
    with np.errstate(invalid="ignore", over="ignore"):
        for j in range(2 * nb):
            scale = (ds[None, :, j] * dx[:, None, j // 2]).astype(F32)
            acc = fmaf(isum[:, :, j].astype(F32), scale, acc)
        y = acc if r is None else (np.asarray(r, F32) + acc).astype(F32)
        if b is not None:
            y = (y + np.asarray(b, F32)).astype(F32)
    return y


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
