"""The NumPy oracle of the weight storage types: the weights a float32 matrix becomes
when stored as bfloat16, float16, q8_0, q4_0, q5_0, q4_1, q5_1, q4_k, q5_k or q6_k (no C;
written from the
formats' definitions).

- bfloat16: the high 16 bits of the float32, rounded to nearest, ties to even
  (NaN stays NaN, what ``torch.Tensor.to(torch.bfloat16)`` does).
- q8_0 (llama.cpp's ``quantize_row_q8_0_ref``): each row in blocks of 32 (the last
  one zero-padded); per block ``d = max|w| / 127`` in float32, ``id = 1 / d`` (0
  when d is 0), ``q = round(w * id)`` rounding half away from zero, ``d`` kept
  as an IEEE half; the weight is then ``float(half(d)) * q``.
- float16: numpy's ``astype(float16)`` (nearest even), for finite weights of magnitude
  at most 65504 (blockc refuses the rest).
- q4_0, q5_0, q4_1, q5_1 (rows zero-padded to blocks of 32), q4_k, q5_k, q6_k
  (columns a multiple of 256): llama.cpp's reference quantisers,
  :mod:`blockc.reference.ggml`.
- iq4_nl, iq4_xs: blockc's simple rule, not llama.cpp's search (which blockc does not
  run): iq4_nl per block of 32 (zero-padded) ``d = m / -127`` for ``m`` the first weight
  of largest magnitude, each weight the nearest of IQ4_NL's 16 values (the lower on a
  tie) to ``w * (1/d)``; iq4_xs per sub-block of 32 ``s_j = m_j / -127``, ``d = -s /
  32`` (a half) for ``s`` the first ``s_j`` of largest magnitude, ``ls_j =
  clip(rint(s_j * (1/d)), -32, 31)``, each weight the nearest value to ``w * (1 / (d
  ls_j))``. The weight is then ``d kv`` (``(d ls_j) kv``), exact.
- q2_k, q3_k (columns a multiple of 256): blockc's simple rules, not llama.cpp's search:
  q2_k per sub-block of 16 ``lo = min(0, min w)``, ``hi = max(max w, lo)``, scale ``(hi -
  lo) / 3``, min ``-lo``; ``d``, ``dmin`` = the largest of each / 15 (halves); ``sc =
  clip(rint(scale * (15 / max scale)), 0, 15)`` (``m`` likewise); each weight ``q =
  clip(rint((w + dmin m) / (d sc)), 0, 3)`` (0 where ``d sc`` is 0), then ``(d sc) q -
  dmin m``. q3_k as iq4_xs with sub-blocks of 16 and ``/ -4``: ``s_j = m_j / -4``, ``d =
  -s / 32``, ``ls_j`` in -32..31, ``q = clip(rint(w * (1 / (d ls_j))), -4, 3)``, then ``(d
  ls_j) q``.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

from . import ggml
from .ggml import bfloat16  # noqa: F401 (defined beside the ggml oracle, which rounds BF16 with it)

__all__ = ["bfloat16", "float16", "q8_0_blocks", "q8_0", "q4_0", "q5_0", "q4_1", "q5_1", "q4_k",
           "q5_k", "q6_k", "iq4_nl", "iq4_xs", "q2_k", "q3_k", "iq4_nl_blocks",
           "iq4_xs_blocks", "q2_k_blocks", "q3_k_blocks"]


def _round_half_away(v: np.ndarray) -> np.ndarray:
    """C's roundf: to nearest, halves away from zero (NumPy's round goes to even)."""
    t = np.trunc(v)
    return t + np.where(np.abs(v - t) >= 0.5, np.sign(v), 0.0).astype(v.dtype)


def q8_0_blocks(w) -> Tuple[np.ndarray, np.ndarray]:
    """(d, q) of a (rows, cols) matrix: d (rows, blocks) float16, q (rows, blocks, 32) int8."""
    a = np.ascontiguousarray(w, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"w must be 2-D, got shape {a.shape}")
    rows, cols = a.shape
    nb = (cols + 31) // 32
    blocks = np.zeros((rows, nb * 32), np.float32)
    blocks[:, :cols] = a
    blocks = blocks.reshape(rows, nb, 32)
    d = np.abs(blocks).max(axis=-1) / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = _round_half_away(blocks * inv[..., None]).astype(np.int8)
    return d.astype(np.float16), q


def q8_0(w) -> np.ndarray:
    """``w`` stored as q8_0, as the float32 weights it becomes."""
    a = np.asarray(w)
    d, q = q8_0_blocks(a)
    deq = d.astype(np.float32)[..., None] * q.astype(np.float32)
    return deq.reshape(a.shape[0], -1)[:, :a.shape[1]]


def float16(w) -> np.ndarray:
    """``w`` stored as float16 (IEEE halves, rounded to nearest even), as float32."""
    return np.asarray(w, np.float32).astype(np.float16).astype(np.float32)


def _ggml_blocks(w, typ: str) -> np.ndarray:
    a = np.ascontiguousarray(w, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"w must be 2-D, got shape {a.shape}")
    rows, cols = a.shape
    pad = np.zeros((rows, (cols + 31) // 32 * 32), np.float32)
    pad[:, :cols] = a
    return ggml.dequantise(ggml.quantise(pad, typ), typ)[:, :cols]


def q4_0(w) -> np.ndarray:
    """``w`` stored as q4_0 (llama.cpp's ``quantize_row_q4_0_ref``, rows zero-padded to
    blocks of 32: :mod:`blockc.reference.ggml`), as the float32 weights it becomes."""
    return _ggml_blocks(w, "Q4_0")


def q5_0(w) -> np.ndarray:
    """``w`` stored as q5_0 (llama.cpp's ``quantize_row_q5_0_ref``, rows zero-padded to
    blocks of 32: :mod:`blockc.reference.ggml`), as the float32 weights it becomes."""
    return _ggml_blocks(w, "Q5_0")


def q4_1(w) -> np.ndarray:
    """``w`` stored as q4_1 (llama.cpp's ``quantize_row_q4_1_ref``, rows zero-padded to
    blocks of 32), as the float32 weights it becomes."""
    return _ggml_blocks(w, "Q4_1")


def q5_1(w) -> np.ndarray:
    """``w`` stored as q5_1 (llama.cpp's ``quantize_row_q5_1_ref``, rows zero-padded to
    blocks of 32), as the float32 weights it becomes."""
    return _ggml_blocks(w, "Q5_1")


def q5_k(w) -> np.ndarray:
    """``w`` stored as q5_k (llama.cpp's ``quantize_row_q5_K_ref``), as the float32
    weights it becomes; the columns a multiple of 256."""
    return _k_blocks(w, "Q5_K")


def q4_k(w) -> np.ndarray:
    """``w`` stored as q4_k (llama.cpp's ``quantize_row_q4_K_ref``:
    :mod:`blockc.reference.ggml`), as the float32 weights it becomes; the columns a
    multiple of 256 (a Q4_K super-block has no short form)."""
    return _k_blocks(w, "Q4_K")


def q6_k(w) -> np.ndarray:
    """``w`` stored as q6_k (llama.cpp's ``quantize_row_q6_K_ref``:
    :mod:`blockc.reference.ggml`), as the float32 weights it becomes; the columns a
    multiple of 256 (a Q6_K super-block has no short form)."""
    return _k_blocks(w, "Q6_K")


def _k_blocks(w, typ: str) -> np.ndarray:
    a = np.ascontiguousarray(w, dtype=np.float32)
    if a.ndim != 2 or a.shape[1] % 256:
        raise ValueError(f"w must be 2-D with columns a multiple of 256, got shape {a.shape}")
    return ggml.dequantise(ggml.quantise(a, typ), typ)


def _iq4_nearest(v: np.ndarray) -> np.ndarray:
    """Index of IQ4_NL's value nearest each float32 v (the lower one on a tie)."""
    kv = ggml.KVALUES_IQ4NL.astype(np.float32)
    return np.abs((v[..., None] - kv).astype(np.float32)).argmin(axis=-1)


def _first_absmax(x: np.ndarray) -> np.ndarray:
    """Along the last axis, the first value of largest magnitude, with its sign."""
    i = np.abs(x).argmax(axis=-1)
    return np.take_along_axis(x, i[..., None], axis=-1)[..., 0]


def _inv32(d: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)


def iq4_nl_blocks(w) -> Tuple[np.ndarray, np.ndarray]:
    """(d, q) of ``w`` (rows, cols) stored as iq4_nl (blockc's rule above, rows zero-padded
    to blocks of 32): d (rows, blocks) float32 (halves), q (rows, blocks, 32) each
    weight's nibble, an index into ``ggml.KVALUES_IQ4NL``."""
    a = np.ascontiguousarray(w, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"w must be 2-D, got shape {a.shape}")
    rows, cols = a.shape
    nb = (cols + 31) // 32
    x = np.zeros((rows, nb * 32), np.float32)
    x[:, :cols] = a
    x = x.reshape(rows, nb, 32)
    d = (_first_absmax(x) / np.float32(-127)).astype(np.float32)
    q = _iq4_nearest((x * _inv32(d)[..., None]).astype(np.float32))
    return d.astype(np.float16).astype(np.float32), q


def iq4_nl(w) -> np.ndarray:
    """``w`` stored as iq4_nl (blockc's rule above), as the float32 weights it becomes."""
    dh, q = iq4_nl_blocks(w)
    out = dh[..., None] * ggml.KVALUES_IQ4NL[q].astype(np.float32)
    return out.reshape(q.shape[0], -1)[:, :np.shape(w)[1]]


def iq4_xs(w) -> np.ndarray:
    """``w`` stored as iq4_xs (blockc's rule above), as the float32 weights it becomes;
    the columns a multiple of 256."""
    d, ls, q = iq4_xs_blocks(w)
    dl = (d[..., None] * ls.astype(np.float32)).astype(np.float32)
    out = dl[..., None] * ggml.KVALUES_IQ4NL[q].astype(np.float32)
    return out.reshape(q.shape[0], -1)


def iq4_xs_blocks(w) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(d, ls, q) of ``w`` (rows, cols) stored as iq4_xs (blockc's rule above; cols a
    multiple of 256): d (rows, super-blocks) float32 (halves), ls (rows, super-blocks, 8)
    int8 the sub-blocks' scales (-32..31), q (rows, super-blocks, 8, 32) each weight's
    nibble, an index into ``ggml.KVALUES_IQ4NL``."""
    a = np.ascontiguousarray(w, dtype=np.float32)
    if a.ndim != 2 or a.shape[1] % 256:
        raise ValueError(f"w must be 2-D with columns a multiple of 256, got shape {a.shape}")
    rows, cols = a.shape
    x = a.reshape(rows, cols // 256, 8, 32)
    s = (_first_absmax(x) / np.float32(-127)).astype(np.float32)        # (rows, S, 8)
    dd = (-_first_absmax(s) / np.float32(32)).astype(np.float32)       # (rows, S)
    d = dd.astype(np.float16).astype(np.float32)
    ls = np.clip(np.rint((_inv32(dd)[..., None] * s).astype(np.float32)), -32, 31).astype(np.int8)
    dl = (d[..., None] * ls.astype(np.float32)).astype(np.float32)
    q = _iq4_nearest((x * _inv32(dl)[..., None]).astype(np.float32))
    return d, ls, q


def _k_rows(w) -> np.ndarray:
    a = np.ascontiguousarray(w, dtype=np.float32)
    if a.ndim != 2 or a.shape[1] % 256:
        raise ValueError(f"w must be 2-D with columns a multiple of 256, got shape {a.shape}")
    return a


def _rint_clip(v: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """C's k_clip: NaN as 0 (or lo above 0), else rint of v clipped to [lo, hi]."""
    out = np.rint(np.clip(v, np.float32(lo), np.float32(hi)))
    return np.where(np.isnan(v), max(lo, 0), out).astype(np.int32)


def q2_k(w) -> np.ndarray:
    """``w`` stored as q2_k (blockc's rule above), as the float32 weights it becomes;
    the columns a multiple of 256."""
    d, dmin, sc, m, q = q2_k_blocks(w)
    dj = (d[..., None] * sc.astype(np.float32)).astype(np.float32)
    dm = (dmin[..., None] * m.astype(np.float32)).astype(np.float32)
    out = (dj[..., None] * q.astype(np.float32)).astype(np.float32) - dm[..., None]
    return out.astype(np.float32).reshape(q.shape[0], -1)


def q2_k_blocks(w) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(d, dmin, sc, m, q) of ``w`` (rows, cols) stored as q2_k (blockc's rule above; cols
    a multiple of 256): d, dmin (rows, super-blocks) float32 (halves), sc, m (rows,
    super-blocks, 16) the sub-blocks' 4-bit scales and mins, q (rows, super-blocks, 16, 16)
    each weight's two bits (0..3)."""
    a = _k_rows(w)
    rows, cols = a.shape
    x = a.reshape(rows, cols // 256, 16, 16)
    lo = np.minimum(x.min(axis=-1), np.float32(0))
    hi = np.maximum(x.max(axis=-1), lo)
    scale = ((hi - lo) / np.float32(3)).astype(np.float32)
    mn = (-lo).astype(np.float32)
    ms, mm = scale.max(axis=-1), mn.max(axis=-1)  # (C's running maxima start at +0)
    ms = np.where(ms > 0, ms, np.float32(0)).astype(np.float32)
    mm = np.where(mm > 0, mm, np.float32(0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv_s = np.where(ms > 0, np.float32(15) / np.where(ms > 0, ms, 1), 0).astype(np.float32)
        inv_m = np.where(mm > 0, np.float32(15) / np.where(mm > 0, mm, 1), 0).astype(np.float32)
    d = (ms / np.float32(15)).astype(np.float16).astype(np.float32)
    dmin = (mm / np.float32(15)).astype(np.float16).astype(np.float32)
    sc = _rint_clip((inv_s[..., None] * scale).astype(np.float32), 0, 15)
    m = _rint_clip((inv_m[..., None] * mn).astype(np.float32), 0, 15)
    dj = (d[..., None] * sc.astype(np.float32)).astype(np.float32)
    dm = (dmin[..., None] * m.astype(np.float32)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = ((x + dm[..., None]).astype(np.float32) / np.where(dj != 0, dj, 1)[..., None])
    q = np.where(dj[..., None] != 0, _rint_clip(v.astype(np.float32), 0, 3), 0)
    return d, dmin, sc, m, q.astype(np.int32)


def _c_absmax(x: np.ndarray) -> np.ndarray:
    """:func:`_first_absmax` as C's running maximum from +0 finds it: +0 where every value
    is a zero."""
    return np.where(np.abs(x).max(axis=-1) > 0, _first_absmax(x), np.float32(0)).astype(np.float32)


def q3_k(w) -> np.ndarray:
    """``w`` stored as q3_k (blockc's rule above), as the float32 weights it becomes;
    the columns a multiple of 256."""
    d, ls, q = q3_k_blocks(w)
    dl = (d[..., None] * ls.astype(np.float32)).astype(np.float32)
    return (dl[..., None] * q.astype(np.float32)).astype(np.float32).reshape(q.shape[0], -1)


def q3_k_blocks(w) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(d, ls, q) of ``w`` (rows, cols) stored as q3_k (blockc's rule above; cols a
    multiple of 256): d (rows, super-blocks) float32 (halves), ls (rows, super-blocks, 16)
    the sub-blocks' scales (-32..31), q (rows, super-blocks, 16, 16) each weight's value
    (-4..3: its two low bits, less 4 where its high bit is clear)."""
    a = _k_rows(w)
    rows, cols = a.shape
    x = a.reshape(rows, cols // 256, 16, 16)
    s = (_c_absmax(x) / np.float32(-4)).astype(np.float32)             # (rows, S, 16)
    dd = (-_c_absmax(s) / np.float32(32)).astype(np.float32)          # (rows, S)
    d = dd.astype(np.float16).astype(np.float32)
    ls = _rint_clip((_inv32(dd)[..., None] * s).astype(np.float32), -32, 31)
    dl = (d[..., None] * ls.astype(np.float32)).astype(np.float32)
    q = _rint_clip((x * _inv32(dl)[..., None]).astype(np.float32), -4, 3)
    return d, ls, q
