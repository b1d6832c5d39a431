"""The NumPy oracle of ggml's weight types: dequantise and quantise, block by block.

Written from the formats' definitions (ggml's ``block_q4_0`` ... ``block_q6_K`` and
its reference quantisers ``quantize_row_*_ref``); every value is float32 as in C,
every rounding is C's (``roundf``, a truncating cast, ``nearest_int``'s
round-half-to-even), every sum accumulated in C's order.

Layouts (little-endian; ``half`` an IEEE binary16):

- ``Q8_0``  32 weights: half d, int8 q[32];                   w = d * q
- ``Q4_0``  32 weights: half d, uint8 qs[16];                 w = d * (nibble - 8)
  (low nibbles are weights 0..15, high nibbles 16..31)
- ``Q4_1``  32 weights: half d, half m, uint8 qs[16];         w = d * nibble + m
- ``Q5_0``  32 weights: half d, uint32 qh, uint8 qs[16];      w = d * (nibble | bit << 4) - 16 d
  (bit j of qh is the fifth bit of weight j)
- ``Q5_1``  32 weights: half d, half m, uint32 qh, qs[16];    w = d * (nibble | bit << 4) + m
- ``Q4_K``  256 weights, 8 sub-blocks of 32: half d, half dmin, uint8 scales[12]
  (eight 6-bit scales and eight 6-bit mins), uint8 qs[128];  w = d*sc * q - dmin*m
  (each 32 bytes of qs hold two sub-blocks: low nibbles the first, high the second)
- ``Q5_K``  as Q4_K with uint8 qh[32] before qs: bit 2i / 2i+1 of qh[l] is the fifth bit
  of sub-block 2i / 2i+1's weight l
- ``Q6_K``  256 weights, 16 sub-blocks of 16: uint8 ql[128], uint8 qh[64], int8 scales[16],
  half d;   w = d * scale * (q - 32), q six bits (four in ql, two in qh)
- ``IQ4_NL`` 32 weights: half d, uint8 qs[16];                 w = d * KVALUES_IQ4NL[nibble]
  (nibbles as Q4_0's: low nibbles weights 0..15, high 16..31)
- ``IQ4_XS`` 256 weights, 8 sub-blocks of 32: half d, uint16 scales_h, uint8 scales_l[4],
  uint8 qs[128]; sub-block j's 6-bit ls = nibble j % 2 of scales_l[j / 2] | bits 2j, 2j+1
  of scales_h << 4;  w = (d * (ls - 32)) * KVALUES_IQ4NL[nibble] (qs bytes 16j.. as an
  IQ4_NL block's)
- ``Q2_K``  256 weights, 16 sub-blocks of 16: uint8 scales[16] (scale low nibble, min
  high), uint8 qs[64], half d, half dmin;  w = (d * scale) * q - dmin * min, q two bits:
  weight 128h + 32s + i at bits 2s of qs[32h + i]
- ``Q3_K``  256 weights, 16 sub-blocks of 16: uint8 hmask[32], uint8 qs[64] (the low two
  bits, as Q2_K's), uint8 scales[12], half d; sub-block j's 6-bit scale = nibble j // 8 of
  scales[j % 8] | bits 2 (j // 4) of scales[8 + j % 4] << 4;  w = (d * (scale - 32)) * q,
  q = low - 4 when bit t // 32 of hmask[t % 32] is clear, low when set (-4..3)
- ``F32``, ``F16``, ``BF16``: one value per block.

The K-quant quantisers are llama.cpp's reference ones (``make_qkx2_quants`` for Q4_K
and Q5_K, ``make_qx_quants`` for Q6_K: a few candidate scales, the one with the
least weighted squared error kept).
"""
from __future__ import annotations

from typing import Callable, Dict, Tuple

import numpy as np

__all__ = ["DEQUANTISE", "QUANTISE", "BLOCKS", "TYPES", "dequantise", "quantise", "q6_k_values", "q6_k_bits",
           "scale_min_k4", "k_nibbles", "KVALUES_IQ4NL", "k2_bits", "q3_k_scales"]

F32 = np.float32

#: ggml type id (GGUF's numbering) -> (name, weights per block, bytes per block), for every
#: type ggml defines: the one table of ggml's block sizes (blockc.gguf.format.TYPES is this;
#: the C library's formats name a type by its id)
TYPES: Dict[int, Tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
}

#: the types this oracle reads or writes -> (weights per block, bytes per block) (of :data:`TYPES`)
BLOCKS: Dict[str, Tuple[int, int]] = {
    n: (bs, bb) for n, bs, bb in TYPES.values()
    if n in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K",
             "IQ4_NL", "IQ4_XS", "Q2_K", "Q3_K")}

#: the 16 values an IQ4_NL / IQ4_XS nibble stands for (ggml's kvalues_iq4nl)
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89,
                          113], np.int8)


def _half(b: np.ndarray) -> np.ndarray:
    """Two bytes per row as a float32 column (the half widened exactly)."""
    return np.ascontiguousarray(b).view(np.float16).astype(F32)


def _to_half(x: np.ndarray) -> np.ndarray:
    """float32 values as the bytes of halves (round to nearest even), (n, 2)."""
    return np.ascontiguousarray(x, dtype=F32).astype(np.float16).reshape(-1, 1).view(np.uint8)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(n, 16) bytes -> (n, 32): the low nibbles, then the high ones."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _bits32(qh: np.ndarray) -> np.ndarray:
    """(n, 4) bytes of a little-endian uint32 -> (n, 32) bits, bit j in column j."""
    h = np.ascontiguousarray(qh).view("<u4").astype(np.uint32)
    return ((h >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)


def scale_min_k4(sc: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit scales and mins of K-quant blocks' 12 bytes, each (n, 8) uint8."""
    s = sc.astype(np.uint8)
    d = np.empty((s.shape[0], 8), np.uint8)
    m = np.empty((s.shape[0], 8), np.uint8)
    d[:, :4] = s[:, 0:4] & 63
    m[:, :4] = s[:, 4:8] & 63
    d[:, 4:] = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    m[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return d, m


# ---- dequantise: (n blocks, bytes) -> (n blocks, weights) float32 -------------------------------

def _dq_f32(b):
    return np.ascontiguousarray(b).view("<f4").astype(F32)


def _dq_f16(b):
    return np.ascontiguousarray(b).view("<f2").astype(F32)


def _dq_bf16(b):
    return (np.ascontiguousarray(b).view("<u2").astype(np.uint32) << 16).view(F32)


def _dq_q8_0(b):
    return _half(b[:, :2]) * np.ascontiguousarray(b[:, 2:]).view(np.int8).astype(F32)


def _dq_q4_0(b):
    return _half(b[:, :2]) * (_nibbles(b[:, 2:]).astype(np.int8) - 8).astype(F32)


def _dq_q4_1(b):
    return _half(b[:, :2]) * _nibbles(b[:, 4:]).astype(F32) + _half(b[:, 2:4])


def _dq_q5_0(b):
    q = _nibbles(b[:, 6:]) | (_bits32(b[:, 2:6]) << 4)
    return _half(b[:, :2]) * (q.astype(np.int8) - 16).astype(F32)


def _dq_q5_1(b):
    q = _nibbles(b[:, 8:]) | (_bits32(b[:, 4:8]) << 4)
    return _half(b[:, :2]) * q.astype(F32) + _half(b[:, 2:4])


def _dq_iq4_nl(b):
    return _half(b[:, :2]) * KVALUES_IQ4NL[_nibbles(b[:, 2:])].astype(F32)


def _dq_iq4_xs(b):
    n = b.shape[0]
    d = _half(b[:, 0:2])
    sh = np.ascontiguousarray(b[:, 2:4]).view("<u2").astype(np.uint32)      # (n, 1)
    sl = b[:, 4:8]
    j = np.arange(8)
    ls = ((sl[:, j // 2] >> (4 * (j % 2))) & 15) | (((sh >> (2 * j)) & 3) << 4)
    dl = (d * (ls.astype(np.int32) - 32).astype(F32)).reshape(n, 8, 1)
    q = _nibbles(b[:, 8:136].reshape(n * 8, 16)).reshape(n, 8, 32)
    return (dl * KVALUES_IQ4NL[q].astype(F32)).reshape(n, 256)


def k_nibbles(qs: np.ndarray) -> np.ndarray:
    """(n, 128) bytes of K-quant nibbles -> (n, 8, 32): sub-block 2i the low nibbles of
    bytes 32i.., sub-block 2i+1 their high nibbles."""
    q = qs.reshape(-1, 4, 1, 32)
    return np.concatenate([q & 0x0F, q >> 4], axis=2).reshape(-1, 8, 32)


def _dq_q4_k(b):
    n = b.shape[0]
    d, dmin = _half(b[:, 0:2]), _half(b[:, 2:4])
    sc, m = scale_min_k4(b[:, 4:16])
    q = k_nibbles(b[:, 16:144]).astype(F32)
    ds = (d * sc.astype(F32)).reshape(n, 8, 1)
    dm = (dmin * m.astype(F32)).reshape(n, 8, 1)
    return (ds * q - dm).reshape(n, 256)


def _dq_q5_k(b):
    n = b.shape[0]
    d, dmin = _half(b[:, 0:2]), _half(b[:, 2:4])
    sc, m = scale_min_k4(b[:, 4:16])
    qh = b[:, 16:48]
    high = ((qh.reshape(n, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1)
    q = (k_nibbles(b[:, 48:176]) | (high << 4)).astype(F32)
    ds = (d * sc.astype(F32)).reshape(n, 8, 1)
    dm = (dmin * m.astype(F32)).reshape(n, 8, 1)
    return (ds * q - dm).reshape(n, 256)


def q6_k_values(ql: np.ndarray, qh: np.ndarray) -> np.ndarray:
    """(n, 128) ql and (n, 64) qh -> (n, 256) six-bit values 0..63, in weight order."""
    n = ql.shape[0]
    out = np.empty((n, 2, 4, 32), np.uint8)
    for h in range(2):  # each half of 128 weights: 64 bytes of ql, 32 of qh
        lo = ql[:, 64 * h:64 * h + 64]
        hi = qh[:, 32 * h:32 * h + 32]
        out[:, h, 0] = (lo[:, :32] & 0x0F) | (((hi >> 0) & 3) << 4)
        out[:, h, 1] = (lo[:, 32:] & 0x0F) | (((hi >> 2) & 3) << 4)
        out[:, h, 2] = (lo[:, :32] >> 4) | (((hi >> 4) & 3) << 4)
        out[:, h, 3] = (lo[:, 32:] >> 4) | (((hi >> 6) & 3) << 4)
    return out.reshape(n, 256)


def q6_k_bits(q: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The inverse of :func:`q6_k_values`: (n, 256) six-bit values 0..63 in weight order ->
    (n, 128) ql and (n, 64) qh."""
    n = q.shape[0]
    ql = np.empty((n, 128), np.uint8)
    qh = np.empty((n, 64), np.uint8)
    for h in range(2):
        g = q[:, 128 * h:128 * h + 128].reshape(n, 4, 32)
        ql[:, 64 * h:64 * h + 32] = (g[:, 0] & 0x0F) | ((g[:, 2] & 0x0F) << 4)
        ql[:, 64 * h + 32:64 * h + 64] = (g[:, 1] & 0x0F) | ((g[:, 3] & 0x0F) << 4)
        qh[:, 32 * h:32 * h + 32] = ((g[:, 0] >> 4) | ((g[:, 1] >> 4) << 2) | ((g[:, 2] >> 4) << 4)
                                     | ((g[:, 3] >> 4) << 6))
    return ql, qh


def _dq_q6_k(b):
    n = b.shape[0]
    q = (q6_k_values(b[:, 0:128], b[:, 128:192]).astype(np.int8) - 32).astype(F32)
    sc = np.ascontiguousarray(b[:, 192:208]).view(np.int8).astype(F32)
    d = _half(b[:, 208:210])
    ds = (d * sc).reshape(n, 16, 1)
    return (ds * q.reshape(n, 16, 16)).reshape(n, 256)


def k2_bits(qs: np.ndarray) -> np.ndarray:
    """(n, 64) bytes of Q2_K / Q3_K low bits -> (n, 256): weight 128h + 32s + i is bits
    2s, 2s+1 of byte 32h + i."""
    n = qs.shape[0]
    g = qs.reshape(n, 2, 1, 32) >> (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)
    return (g & 3).reshape(n, 256)


def _dq_q2_k(b):
    n = b.shape[0]
    sc = b[:, 0:16]
    d, dmin = _half(b[:, 80:82]), _half(b[:, 82:84])
    s = (d * (sc & 15).astype(F32)).reshape(n, 16, 1)
    m = (dmin * (sc >> 4).astype(F32)).reshape(n, 16, 1)
    q = k2_bits(b[:, 16:80]).astype(F32).reshape(n, 16, 16)
    return (s * q - m).reshape(n, 256)


def q3_k_scales(sc: np.ndarray) -> np.ndarray:
    """The sixteen 6-bit scales of Q3_K blocks' 12 bytes, (n, 16) uint8 (0..63)."""
    j = np.arange(16)
    lo = (sc[:, j % 8] >> (4 * (j // 8))) & 15
    hi = (sc[:, 8 + j % 4] >> (2 * (j // 4))) & 3
    return (lo | (hi << 4)).astype(np.uint8)


def _dq_q3_k(b):
    n = b.shape[0]
    t = np.arange(256)
    high = (b[:, t % 32] >> (t // 32).astype(np.uint8)) & 1                       # (n, 256)
    q = k2_bits(b[:, 32:96]).astype(np.int32) - 4 * (1 - high.astype(np.int32))
    s = (_half(b[:, 108:110]) * (q3_k_scales(b[:, 96:108]).astype(np.int32) - 32).astype(F32))
    return (s.reshape(n, 16, 1) * q.astype(F32).reshape(n, 16, 16)).reshape(n, 256)


_DQ: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "F32": _dq_f32, "F16": _dq_f16, "BF16": _dq_bf16, "Q8_0": _dq_q8_0, "Q4_0": _dq_q4_0,
    "Q4_1": _dq_q4_1, "Q5_0": _dq_q5_0, "Q5_1": _dq_q5_1, "Q4_K": _dq_q4_k, "Q5_K": _dq_q5_k,
    "Q6_K": _dq_q6_k, "IQ4_NL": _dq_iq4_nl, "IQ4_XS": _dq_iq4_xs, "Q2_K": _dq_q2_k,
    "Q3_K": _dq_q3_k}

#: the types :func:`dequantise` reads
DEQUANTISE = tuple(_DQ)


def dequantise(data, type: str) -> np.ndarray:
    """The float32 weights of ``data``, the bytes of rows of ``type``.

    Parameters
    ----------
    data : array_like of uint8, shape (..., row bytes)
    type : str
        One of :data:`DEQUANTISE`.

    Returns
    -------
    numpy.ndarray
        float32, shape (..., row weights).

    Raises
    ------
    ValueError
        An unknown type, or rows that are not whole blocks.
    """
    if type not in _DQ:
        raise ValueError(f"type must be one of {', '.join(DEQUANTISE)}, got {type!r}")
    b = np.asarray(data)
    if b.dtype != np.uint8 or b.ndim < 1:
        raise ValueError("data must be uint8 bytes of shape (..., row bytes)")
    bs, bb = BLOCKS[type]
    if b.shape[-1] % bb:
        raise ValueError(f"{type}: rows of {b.shape[-1]} bytes are not whole blocks of {bb}")
    lead = b.shape[:-1]
    nb = b.shape[-1] // bb
    with np.errstate(invalid="ignore", over="ignore"):  # a file's NaN/inf scales stay so
        out = _DQ[type](np.ascontiguousarray(b).reshape(-1, bb))
    return np.ascontiguousarray(out, dtype=F32).reshape(lead + (nb * bs,))


# ---- quantise: (n blocks, weights) float32 -> (n blocks, bytes) ---------------------------------

def _trunc_i(v: np.ndarray) -> np.ndarray:
    """C's (int) cast of float32 values: toward zero."""
    return np.trunc(v).astype(np.int32)


def _nearest_int(v: np.ndarray) -> np.ndarray:
    """ggml's nearest_int (the 1.5 * 2**23 trick): round half to even for |v| < 2**22."""
    return np.rint(v.astype(F32)).astype(np.int32)


def _absmax_signed(x: np.ndarray) -> np.ndarray:
    """Per row, the value of largest magnitude with its sign (the first such, as C's loop)."""
    i = np.abs(x).argmax(axis=-1)
    return np.take_along_axis(x, i[:, None], axis=-1)[:, 0]


def _inv(d: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(d != 0, F32(1) / d, F32(0)).astype(F32)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """(n, 32) values 0..15 -> (n, 16) bytes: weight j low, weight j + 16 high."""
    q = q.astype(np.uint8)
    return q[:, :16] | (q[:, 16:] << 4)


def _q_f32(x):
    return x.astype("<f4").view(np.uint8)


def bfloat16(w) -> np.ndarray:
    """``w`` rounded to bfloat16, as float32 values."""
    a = np.ascontiguousarray(w, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    r = np.where(np.isnan(a), (u.astype(np.uint32) | 0x00400000) & 0xFFFF0000, r)
    return r.astype(np.uint32).view(np.float32).reshape(a.shape)


def _q_f16(x):
    return x.astype("<f2").view(np.uint8)


def _q_bf16(x):
    return (bfloat16(x).view(np.uint32) >> 16).astype("<u2").view(np.uint8)


def _q_q8_0(x):
    amax = np.abs(x).max(axis=-1)
    d = (amax / F32(127)).astype(F32)
    iv = _inv(d)
    v = x * iv[:, None]
    q = (np.trunc(v) + np.where(np.abs(v - np.trunc(v)) >= 0.5, np.sign(v), 0)).astype(np.int8)
    return np.concatenate([_to_half(d), q.view(np.uint8)], axis=1)


def _q_q4_0(x):
    mx = _absmax_signed(x)
    d = (mx / F32(-8)).astype(F32)
    iv = _inv(d)
    q = np.minimum(15, _trunc_i(x * iv[:, None] + F32(8.5)).astype(np.int8))
    return np.concatenate([_to_half(d), _pack_nibbles(q)], axis=1)


def _q_q4_1(x):
    lo, hi = x.min(axis=-1), x.max(axis=-1)
    d = ((hi - lo) / F32(15)).astype(F32)
    iv = _inv(d)
    q = np.minimum(15, _trunc_i((x - lo[:, None]) * iv[:, None] + F32(0.5)).astype(np.int8))
    return np.concatenate([_to_half(d), _to_half(lo), _pack_nibbles(q)], axis=1)


def _qh_bytes(q: np.ndarray) -> np.ndarray:
    """(n, 32) five-bit values -> (n, 4) bytes of the uint32 of their fifth bits."""
    bits = ((q.astype(np.uint32) >> 4) & 1) << np.arange(32, dtype=np.uint32)
    return bits.sum(axis=1, dtype=np.uint32).astype("<u4").reshape(-1, 1).view(np.uint8)


def _q_q5_0(x):
    mx = _absmax_signed(x)
    d = (mx / F32(-16)).astype(F32)
    iv = _inv(d)
    q = np.minimum(31, _trunc_i(x * iv[:, None] + F32(16.5)).astype(np.int8))
    return np.concatenate([_to_half(d), _qh_bytes(q), _pack_nibbles(q & 0x0F)], axis=1)


def _q_q5_1(x):
    lo, hi = x.min(axis=-1), x.max(axis=-1)
    d = ((hi - lo) / F32(31)).astype(F32)
    iv = _inv(d)
    q = np.minimum(31, _trunc_i((x - lo[:, None]) * iv[:, None] + F32(0.5)).astype(np.int8))
    return np.concatenate([_to_half(d), _to_half(lo), _qh_bytes(q), _pack_nibbles(q & 0x0F)],
                          axis=1)


def _seqsum(a: np.ndarray) -> np.ndarray:
    """Row sums of float32 ``a`` (m, n) added left to right in float32, as C's loop adds
    them (``cumsum`` accumulates in order; ``sum`` would pair them up)."""
    return np.cumsum(a, axis=1, dtype=F32)[:, -1]


def _make_qkx2(x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float,
               nstep: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """llama.cpp's make_qkx2_quants over rows of x (m, n) with weights w: (scale, -min, L).

    Sums accumulate element by element, in order (C's loop), vectorised over rows."""
    m, n = x.shape
    xmin = np.minimum(x.min(axis=1), F32(0))
    xmax = x.max(axis=1)
    sum_w = _seqsum(w)
    sum_x = _seqsum(w * x)
    flat = xmax == xmin
    rng = np.where(flat, F32(1), xmax - xmin).astype(F32)
    iscale = (F32(nmax) / rng).astype(F32)
    scale = (F32(1) / iscale).astype(F32)
    L = np.clip(_nearest_int(iscale[:, None] * (x - xmin[:, None])), 0, nmax)
    diff = (scale[:, None] * L.astype(F32) + xmin[:, None] - x).astype(F32)
    best = _seqsum(w * (diff * diff))
    for step in range(nstep + 1):
        # llama.cpp divides by max - min with min the best so far (updated below)
        rng = np.where(flat, F32(1), xmax - xmin).astype(F32)
        with np.errstate(divide="ignore", invalid="ignore"):
            isc = ((F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)) / rng).astype(F32)
        La = np.clip(_nearest_int(isc[:, None] * (x - xmin[:, None])), 0, nmax)
        Lf = La.astype(F32)
        wl = w * Lf
        sum_l = _seqsum(wl)
        sum_l2 = _seqsum(wl * Lf)
        sum_xl = _seqsum(wl * x)
        D = (sum_w * sum_l2 - sum_l * sum_l).astype(F32)
        ok = D > 0
        Ds = np.where(ok, D, F32(1)).astype(F32)
        this_scale = ((sum_w * sum_xl - sum_x * sum_l) / Ds).astype(F32)
        this_min = ((sum_l2 * sum_x - sum_l * sum_xl) / Ds).astype(F32)
        pos = this_min > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            alt = (sum_xl / sum_l2).astype(F32)
        this_scale = np.where(pos, alt, this_scale).astype(F32)
        this_min = np.where(pos, F32(0), this_min).astype(F32)
        diff = (this_scale[:, None] * Lf + this_min[:, None] - x).astype(F32)
        mad = _seqsum(w * (diff * diff))
        take = ok & (mad < best) & ~flat
        L = np.where(take[:, None], La, L)
        best = np.where(take, mad, best)
        scale = np.where(take, this_scale, scale)
        xmin = np.where(take, this_min, xmin)
    scale = np.where(flat, F32(0), scale).astype(F32)
    L = np.where(flat[:, None], 0, L)
    return scale, (-xmin).astype(F32), L


def _k_weights(x: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K's importance of each weight of sub-blocks x (m, 32): rms + |x|."""
    av = np.sqrt((_seqsum(x * x) / F32(32)).astype(F32)).astype(F32)
    return (av[:, None] + np.abs(x)).astype(F32)


def _packscale_min_k4(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """(n, 8) 6-bit scales and mins -> (n, 12) bytes (get_scale_min_k4's inverse)."""
    ls, lm = ls.astype(np.uint8), lm.astype(np.uint8)
    out = np.zeros((ls.shape[0], 12), np.uint8)
    out[:, 0:4] = ls[:, :4]
    out[:, 4:8] = lm[:, :4]
    out[:, 8:12] = (ls[:, 4:] & 0x0F) | ((lm[:, 4:] & 0x0F) << 4)
    out[:, 0:4] |= (ls[:, 4:] >> 4) << 6
    out[:, 4:8] |= (lm[:, 4:] >> 4) << 6
    return out


def _k_common(x: np.ndarray, nmax: int, rmin: float, nstep: int):
    """The shared part of Q4_K and Q5_K: (d, dmin halves, packed scales, L (n, 256))."""
    n = x.shape[0]
    sub = x.reshape(n * 8, 32)
    sc, mn, L = _make_qkx2(sub, _k_weights(sub), nmax, rmin, 0.1, nstep)
    sc, mn, L = sc.reshape(n, 8), mn.reshape(n, 8), L.reshape(n, 256)
    # llama.cpp's maxima start at +0 and take only larger values: a super-block whose
    # every min is zero (or -0.0) stores dmin +0, not the -0.0 a plain max would give
    max_scale = np.where(sc.max(axis=1) > 0, sc.max(axis=1), F32(0)).astype(F32)
    max_min = np.where(mn.max(axis=1) > 0, mn.max(axis=1), F32(0)).astype(F32)
    inv_s = np.where(max_scale > 0, F32(63) / np.where(max_scale > 0, max_scale, 1), 0).astype(F32)
    inv_m = np.where(max_min > 0, F32(63) / np.where(max_min > 0, max_min, 1), 0).astype(F32)
    # ggml: MIN(63, (uint8_t)nearest_int(...)), the int wrapped to a byte first
    ls = np.minimum(63, _nearest_int(inv_s[:, None] * sc).astype(np.uint8))
    lm = np.minimum(63, _nearest_int(inv_m[:, None] * mn).astype(np.uint8))
    scales = _packscale_min_k4(ls, lm)
    dh = _to_half((max_scale / F32(63)).astype(F32))
    mh = _to_half((max_min / F32(63)).astype(F32))
    s6, m6 = scale_min_k4(scales)
    d = (_half(dh) * s6.astype(F32)).astype(F32)      # (n, 8)
    dm = (_half(mh) * m6.astype(F32)).astype(F32)
    nz = d != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        q = _nearest_int(((x.reshape(n, 8, 32) + dm[:, :, None]) / d[:, :, None]).astype(F32))
    q = np.clip(q, 0, nmax)
    L = np.where(nz[:, :, None], q, L.reshape(n, 8, 32)).reshape(n, 256)
    return dh, mh, scales, L


def _q_q4_k(x):
    dh, mh, scales, L = _k_common(x, 15, -1.0, 20)
    L = L.reshape(-1, 4, 2, 32).astype(np.uint8)
    qs = (L[:, :, 0] | (L[:, :, 1] << 4)).reshape(-1, 128)
    return np.concatenate([dh, mh, scales, qs], axis=1)


def _q_q5_k(x):
    dh, mh, scales, L = _k_common(x, 31, -0.5, 15)
    n = x.shape[0]
    L = L.reshape(n, 8, 32).astype(np.uint8)
    high = ((L >> 4) & 1) << np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    qh = np.bitwise_or.reduce(high, axis=1)
    lo = (L & 0x0F).reshape(n, 4, 2, 32)
    qs = (lo[:, :, 0] | (lo[:, :, 1] << 4)).reshape(n, 128)
    return np.concatenate([dh, mh, scales, qh, qs], axis=1)


_GROUP_MAX_EPS = F32(1e-15)


def _make_qx(x: np.ndarray, nmax: int) -> Tuple[np.ndarray, np.ndarray]:
    """llama.cpp's make_qx_quants(n, nmax, x, L, rmse_type=1, NULL) over rows x (m, n):
    (scale, L with nmax added)."""
    m, n = x.shape
    mx = _absmax_signed(x)
    amax = np.abs(mx)
    tiny = amax < _GROUP_MAX_EPS
    mxs = np.where(tiny, F32(1), mx).astype(F32)
    w = (x * x).astype(F32)

    def sums(isc):
        lq = np.clip(_nearest_int(isc[:, None] * x), -nmax, nmax - 1)
        lf = lq.astype(F32)
        return lq, _seqsum((w * x) * lf), _seqsum((w * lf) * lf)

    iscale = (F32(-nmax) / mxs).astype(F32)
    L, sumlx, suml2 = sums(iscale)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(suml2 != 0, sumlx / np.where(suml2 != 0, suml2, 1), F32(0)).astype(F32)
    best = (scale * sumlx).astype(F32)
    for step in range(-9, 10):
        if step == 0:
            continue
        isc = (-(F32(nmax) + F32(0.1) * F32(step)) / mxs).astype(F32)
        lq, slx, sl2 = sums(isc)
        take = (sl2 > 0) & ((slx * slx).astype(F32) > (best * sl2).astype(F32))
        with np.errstate(divide="ignore", invalid="ignore"):
            ns = (slx / np.where(sl2 > 0, sl2, 1)).astype(F32)
        L = np.where(take[:, None], lq, L)
        scale = np.where(take, ns, scale)
        best = np.where(take, (ns * slx).astype(F32), best)
    scale = np.where(tiny, F32(0), scale).astype(F32)
    L = np.where(tiny[:, None], 0, L + nmax)
    return scale, L


def _q_q6_k(x):
    n = x.shape[0]
    sc, L = _make_qx(x.reshape(n * 16, 16), 32)
    sc, L = sc.reshape(n, 16), L.reshape(n, 16, 16)
    i = np.abs(sc).argmax(axis=1)
    max_scale = np.take_along_axis(sc, i[:, None], axis=1)[:, 0]
    zero = np.abs(max_scale) < _GROUP_MAX_EPS
    ms = np.where(zero, F32(1), max_scale).astype(F32)
    iscale = (F32(-128) / ms).astype(F32)
    dh = _to_half(np.where(zero, F32(0), (F32(1) / iscale)).astype(F32))
    s8 = np.minimum(127, _nearest_int(iscale[:, None] * sc))
    s8 = np.where(zero[:, None], 0, s8).astype(np.int8)
    d = (_half(dh) * s8.astype(F32)).astype(F32)   # (n, 16)
    nz = d != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        q = _nearest_int((x.reshape(n, 16, 16) / d[:, :, None]).astype(F32))
    q = np.clip(q, -32, 31) + 32
    L = np.where(nz[:, :, None], q, L).reshape(n, 256)
    L = np.where(zero[:, None], 0, L).astype(np.uint8)
    ql, qh = q6_k_bits(L)
    return np.concatenate([ql, qh, s8.view(np.uint8), dh], axis=1)


_Q: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "F32": _q_f32, "F16": _q_f16, "BF16": _q_bf16, "Q8_0": _q_q8_0, "Q4_0": _q_q4_0,
    "Q4_1": _q_q4_1, "Q5_0": _q_q5_0, "Q5_1": _q_q5_1, "Q4_K": _q_q4_k, "Q5_K": _q_q5_k,
    "Q6_K": _q_q6_k}

#: the types :func:`quantise` writes
QUANTISE = tuple(_Q)


def quantise(w, type: str) -> np.ndarray:
    """The bytes of ``w`` (rows of float32 weights) stored as ``type``.

    Parameters
    ----------
    w : array_like, shape (..., row weights)
        Converted to float32; each row a whole number of the type's blocks.
    type : str
        One of :data:`QUANTISE`.

    Returns
    -------
    numpy.ndarray
        uint8, shape (..., row bytes).

    Raises
    ------
    ValueError
        An unknown type, rows that are not whole blocks, or weights that are not finite.
    """
    if type not in _Q:
        raise ValueError(f"type must be one of {', '.join(QUANTISE)}, got {type!r}")
    x = np.ascontiguousarray(w, dtype=F32)
    if x.ndim < 1:
        raise ValueError("w must have at least one dimension")
    bs, bb = BLOCKS[type]
    if x.shape[-1] % bs:
        raise ValueError(f"{type}: rows of {x.shape[-1]} weights are not whole blocks of {bs}")
    if type not in ("F32", "F16", "BF16") and not np.isfinite(x).all():
        raise ValueError(f"{type} needs finite weights")
    lead = x.shape[:-1]
    nb = x.shape[-1] // bs
    blocks = x.reshape(-1, bs)
    step = 2048 if type.endswith("_K") else 1 << 16  # a chunk's work arrays stay in cache
    out = np.empty((blocks.shape[0], bb), np.uint8)
    for i in range(0, blocks.shape[0], step):
        out[i:i + step] = _Q[type](blocks[i:i + step])
    return out.reshape(lead + (nb * bb,))
