"""The bytes of packed matrices against ggml's block rows: blockc's panels of 16 rows (as
bc_engine.h lays out each format) hold a GGUF tensor's very blocks, rearranged; these
functions move them each way (:func:`raw_panels`, :func:`file_rows`) and between two
formats of the same blocks (:func:`repack`). The GGUF loader and saver
(:mod:`blockc.gguf.model`) and :meth:`blockc.GPT.astype` read and write through them."""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from ..reference import ggml

__all__ = ["PANELS", "FILE_ROWS", "raw_panels", "file_rows", "repack"]


#: blockc format -> the GGUF type whose rows raw_panels rearranges into its panels
PANELS = {"q8_0": "Q8_0", "q4_0": "Q4_0", "float16": "F16", "q5_0": "Q5_0", "q8_0i": "Q8_0",
           "q4_0i": "Q4_0", "q5_0i": "Q5_0",
           "q4_k": "Q4_K", "q6_k": "Q6_K", "q4_ki": "Q4_K", "q6_ki": "Q6_K"}


def _k4_unpack(b: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Q4_K's 12 bytes (..., 12) of eight 6-bit scales and eight 6-bit mins -> (..., 8)
    scales and (..., 8) mins (bytes 0-3: scales 0-3 and the top bits of scales 4-7;
    4-7: the same for the mins; 8-11: the low nibbles of scales and mins 4-7)."""
    lo, hi, last = b[..., 0:4], b[..., 4:8], b[..., 8:12]
    sc = np.concatenate([lo & 63, (last & 15) | ((lo >> 6) << 4)], axis=-1)
    mn = np.concatenate([hi & 63, (last >> 4) | ((hi >> 6) << 4)], axis=-1)
    return sc, mn


def _k4_pack(sc: np.ndarray, mn: np.ndarray) -> np.ndarray:
    """The inverse of :func:`_k4_unpack` (every one of the 96 bits is a scale's or a min's)."""
    out = np.empty(sc.shape[:-1] + (12,), np.uint8)
    out[..., 0:4] = (sc[..., :4] & 63) | ((sc[..., 4:] >> 4) << 6)
    out[..., 4:8] = (mn[..., :4] & 63) | ((mn[..., 4:] >> 4) << 6)
    out[..., 8:12] = (sc[..., 4:] & 15) | ((mn[..., 4:] & 15) << 4)
    return out


def _q6_widen(b: np.ndarray) -> np.ndarray:
    """Q6_K super-blocks (..., 210: ql[128], qh[64], int8 sc[16], d) -> blockc's rows of
    them (..., 274: d, sc[16], q[256] with q the six-bit value - 32, an int8)."""
    lead = b.shape[:-1]
    f = b.reshape(-1, 210)
    q = ggml.q6_k_values(f[:, :128], f[:, 128:192]).astype(np.int16) - 32
    out = np.concatenate([f[:, 208:210], f[:, 192:208], q.astype(np.int8).view(np.uint8)], axis=1)
    return out.reshape(lead + (274,))


def _q6_narrow(b: np.ndarray) -> np.ndarray:
    """The inverse of :func:`_q6_widen` (every quant in -32..31: its six bits)."""
    lead = b.shape[:-1]
    f = b.reshape(-1, 274)
    ql, qh = ggml.q6_k_bits((f[:, 18:].view(np.int8).astype(np.int16) + 32).astype(np.uint8))
    out = np.concatenate([ql, qh, f[:, 2:18], f[:, 0:2]], axis=1)
    return out.reshape(lead + (210,))


def _panel_fields(typ: str, dtype: str = "") -> Tuple[int, List[Tuple[int, int, int]]]:
    """(bytes of a row's block in blockc's panels, fields): each field (start, end, unit)
    of a panel block is the 16 rows' bytes [start, end) of the row's block, in units of
    ``unit`` bytes interleaved row by row (bc_engine.h): the halves (unit 2) side by side,
    the quants byte by byte. Q4_K's scales are its 12 bytes unpacked to 16 first, Q6_K's
    quants widened to a byte each (:func:`_q6_widen`); q4_ki's qs 4 bytes by 4."""
    if typ == "Q4_K":  # d, dmin, sc[8], m[8], qs[128] of a 148-byte row
        qs = 4 if dtype == "q4_ki" else 1
        return 148, [(0, 2, 2), (2, 4, 2), (4, 12, 1), (12, 20, 1), (20, 148, qs)]
    if typ == "Q6_K" and dtype == "q6_ki":  # the file's 210 bytes: d, sc[16], ql, qh 4 by 4
        return 210, [(208, 210, 2), (192, 208, 1), (0, 128, 4), (128, 192, 4)]
    if typ == "Q6_K":  # d, sc[16], q[256] of a 274-byte row: its quants widened, q - 32
        return 274, [(0, 2, 2), (2, 18, 1), (18, 274, 1)]
    if typ == "Q5_0":  # d, the uint32 of fifth bits, qs[16]
        return 22, [(0, 2, 2), (2, 6, 4), (6, 22, 1)]
    if typ == "F16":  # a block of one weight: panel [k][l]
        return 2, [(0, 2, 2)]
    bb = {"Q8_0": 34, "Q4_0": 18}[typ]
    return bb, [(0, 2, 2), (2, bb, 1)]


def _k_panels(raw: np.ndarray, typ: str, dtype: str = "") -> np.ndarray:
    """raw_panels of Q4_K or Q6_K rows: every field of the 16 rows' super-blocks
    interleaved (Q4_K: d, dmin, the 6-bit scales and mins a byte each, the qs byte by
    byte, or for ``dtype="q4_ki"`` 4 bytes by 4 and the panels in runs of 4; Q6_K: d, the
    int8 scales, each quant a byte)."""
    rows = raw.shape[0]
    fb = ggml.BLOCKS[typ][1]  # a super-block's bytes in the file
    nb = raw.shape[1] // fb
    blocks = raw.reshape(rows, nb, fb)
    if typ == "Q4_K":
        sc, mn = _k4_unpack(blocks[..., 4:16])
        blocks = np.concatenate([blocks[..., :4], sc, mn, blocks[..., 16:]], axis=-1)
    elif dtype != "q6_ki":  # (q6_ki keeps the file's bits)
        blocks = _q6_widen(blocks)
    bb, fields = _panel_fields(typ, dtype)
    panels = -(-rows // 16)
    r = np.zeros((panels * 16, nb, bb), np.uint8)
    r[:rows] = blocks
    r = r.reshape(panels, 16, nb, bb)
    out = [r[..., a:b].reshape(panels, 16, nb, (b - a) // u, u).transpose(0, 2, 3, 1, 4)
           .reshape(panels, nb, 16 * (b - a)) for a, b, u in fields]
    if dtype in ("q4_ki", "q6_ki"):
        return _runs(np.concatenate(out, axis=2))
    return np.concatenate(out, axis=2).reshape(-1)


#: q8_0i's, q4_0i's, q5_0i's and float16's panels in runs of this many (BC_INTDOT_GROUP and
#: BC_HALF_GROUP, bc_format.h)
_RUN = 4


def _runs(p: np.ndarray) -> np.ndarray:
    """The bytes of panels ``p`` (panels, blocks, a panel block's bytes) with each run of
    :data:`_RUN` panels (the last: those left) interleaved block by block: block b of
    panel q of a run of n at b * n + q (bc_engine.h, q8_0i)."""
    whole = p.shape[0] // _RUN * _RUN
    runs = p[:whole].reshape(whole // _RUN, _RUN, *p.shape[1:]).swapaxes(1, 2)
    return np.concatenate([runs.reshape(-1), p[whole:].swapaxes(0, 1).reshape(-1)])


def _unruns(b: np.ndarray, panels: int, bb: int) -> np.ndarray:
    """The inverse of :func:`_runs`: the bytes ``b`` of ``panels`` panels in runs ->
    (panels, blocks, bb) with a panel's blocks of ``bb`` bytes side by side."""
    nb = b.size // (panels * bb)
    whole = panels // _RUN * _RUN
    cut = whole * nb * bb
    runs = b[:cut].reshape(whole // _RUN, nb, _RUN, bb).swapaxes(1, 2).reshape(whole, nb, bb)
    rest = b[cut:].reshape(nb, panels - whole, bb).swapaxes(0, 1)
    return np.concatenate([runs, rest])


def raw_panels(raw: np.ndarray, typ: str, dtype: str = "") -> np.ndarray:
    """The bytes of blockc's packed matrix (panels of 16 rows, block by block: the 16 rows'
    half scales, then (Q5_0) their fifth bits, then their quants interleaved; F16 column by
    column, its panels in runs of 4 (:func:`_runs`); Q4_K's every field, its 6-bit scales
    and mins a byte each; Q6_K's every field, bc_engine.h) holding the rows ``raw`` (rows,
    row bytes) of Q8_0, Q4_0, Q5_0, Q4_K, Q6_K or F16 blocks as they lie in a GGUF file:
    the same blocks, rearranged (rows past the end zero).
    ``dtype="q8_0i"``: Q8_0's quants 4 by 4 per row, each + 128 (q8_0i's panels);
    ``dtype="q4_0i"``: Q4_0's bytes 4 by 4 per row (q4_0i's panels);
    ``dtype="q5_0i"``: Q5_0's nibbles as q4_0i's, then each vector's fifth bits as a 64-bit
    mask (q5_0i's panels); their panels in runs of 4."""
    if typ in ("Q4_K", "Q6_K"):
        return _k_panels(raw, typ, dtype)
    rows = raw.shape[0]
    if typ == "F16":  # panel [k][l] = w[16p + l][k], two bytes each (moved as uint16s), in runs
        cols = raw.shape[1] // 2
        panels = -(-rows // 16)
        r = np.zeros((panels * 16, cols), np.uint16)
        r[:rows] = np.ascontiguousarray(raw).view(np.uint16)
        p = np.ascontiguousarray(r.reshape(panels, 16, cols).transpose(0, 2, 1))
        return _runs(p.view(np.uint8).reshape(panels, cols, 32))
    bb, nh = {"Q8_0": (34, 0), "Q4_0": (18, 0), "Q5_0": (22, 4)}[typ]
    nb = raw.shape[1] // bb
    panels = -(-rows // 16)
    r = np.zeros((panels * 16, nb, bb), np.uint8)
    r[:rows] = raw.reshape(rows, nb, bb)
    if dtype == "q8_0i":  # the real rows' quants + 128 (mod 256: the top bit flipped); the
        r[:rows, :, 2:] ^= np.uint8(0x80)  # rows past the end stay zero bytes, as bc_pack's
    r = r.reshape(panels, 16, nb, bb)
    d = r[..., :2].transpose(0, 2, 1, 3).reshape(panels, nb, 32)
    if dtype == "q5_0i":  # d, u[j][l][t] = nibble byte 4j + t, h[j][s] bit 4l + t = qh bit 16s + 4j + t
        u = (r[..., 6:].reshape(panels, 16, nb, 4, 4).transpose(0, 2, 3, 1, 4)
             .reshape(panels, nb, 256))
        qh = np.ascontiguousarray(r[..., 2:6]).view("<u4")[..., 0].astype(np.uint64)
        qh = qh.transpose(0, 2, 1)  # (panels, nb, 16 rows)
        at = np.arange(16, dtype=np.uint64) * np.uint64(4)  # row l's 4 bits at 4l
        h = np.empty((panels, nb, 4, 2), "<u8")
        for j in range(4):
            for s in range(2):  # bits 16s + 4j .. + 3 of each row, side by side (disjoint: sum = or)
                four = (qh >> np.uint64(16 * s + 4 * j)) & np.uint64(15)
                h[..., j, s] = (four << at).sum(axis=-1, dtype=np.uint64)
        return _runs(np.concatenate([d, u, h.view(np.uint8).reshape(panels, nb, 64)], axis=2))
    if dtype in ("q8_0i", "q4_0i"):  # u[j][l][t] = byte 4j + t of row l's quants
        nq = bb - 2
        q = (r[..., 2:].reshape(panels, 16, nb, nq // 4, 4).transpose(0, 2, 3, 1, 4)
             .reshape(panels, nb, 16 * nq))
        return _runs(np.concatenate([d, q], axis=2))
    h = r[..., 2:2 + nh].transpose(0, 2, 1, 3).reshape(panels, nb, 16 * nh)  # each row's uint32
    q = r[..., 2 + nh:].transpose(0, 2, 3, 1).reshape(panels, nb, 16 * (bb - 2 - nh))
    return np.concatenate([d, h, q], axis=2).reshape(-1)


#: the formats whose panels :func:`file_rows` reads back as their GGUF type's rows
#: (q8_0i's, q4_0i's and q5_0i's quants are rearranged: saved from their weights instead;
#: q4_ki's and q6_ki's blocks are read back, since quantising again may find others)
FILE_ROWS = ("q8_0", "q4_0", "q5_0", "float16", "q4_k", "q6_k", "q4_ki", "q6_ki")


def file_rows(packed: np.ndarray, typ: str, rows: int, dtype: str = "") -> np.ndarray:
    """The inverse of :func:`raw_panels` (Q8_0, Q4_0, Q5_0, Q4_K, Q6_K, F16; Q4_K from
    ``dtype="q4_ki"``'s panels too): the (rows, row bytes) of ``typ`` blocks a GGUF file
    stores for blockc's packed matrix ``packed`` (its bytes) of ``rows`` rows."""
    bb, fields = _panel_fields(typ, dtype)
    panels = -(-rows // 16)
    p = np.asarray(packed, np.uint8).reshape(-1)
    runs = typ == "F16" or dtype in ("q4_ki", "q6_ki")
    p = _unruns(p, panels, 16 * bb) if runs else p.reshape(panels, -1, 16 * bb)
    nb = p.shape[1]
    r = np.empty((panels, 16, nb, bb), np.uint8)
    at = 0
    for a, b, u in fields:
        n = 16 * (b - a)
        r[..., a:b] = (p[..., at:at + n].reshape(panels, nb, (b - a) // u, 16, u)
                       .transpose(0, 3, 1, 2, 4).reshape(panels, 16, nb, b - a))
        at += n
    blocks = r.reshape(panels * 16, nb, bb)[:rows]
    if typ == "Q4_K":
        k4 = _k4_pack(blocks[..., 4:12], blocks[..., 12:20])
        blocks = np.concatenate([blocks[..., :4], k4, blocks[..., 20:]], axis=-1)
    if typ == "Q6_K" and dtype != "q6_ki":
        blocks = _q6_narrow(blocks)
    return np.ascontiguousarray(blocks).reshape(rows, -1)


def repack(packed: np.ndarray, src: str, dst: str, rows: int) -> Optional[np.ndarray]:
    """The bytes of a packed matrix of ``rows`` rows in format ``dst`` holding the very
    blocks of ``packed`` (format ``src``), when both lay out the same GGUF type's blocks
    and ``src``'s read back as that type's rows (q4_k <-> q4_ki: a rearrangement, where
    quantising the weights again could find other blocks); else None."""
    typ = PANELS.get(src)
    if src not in FILE_ROWS or typ is None or PANELS.get(dst) != typ or src == dst:
        return None
    return raw_panels(file_rows(packed, typ, rows, src), typ, dst)
