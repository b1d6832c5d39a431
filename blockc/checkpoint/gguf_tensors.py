"""A GGUF file's tensors as blockc packs them: a tensor's very blocks (checked) when a format
holds its type, else its floats (refused when not finite), a split q/k/v's parts each in
its own format, and llama.cpp's q/k row order (:mod:`blockc.checkpoint.gguf` loads with
these).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from .._enums import FORMATS, GGML_CONVERTS
from .._errors import BlockcValueError
from ..block.ops import convert_ggml, pack_ggml
from ..io import gguf as fmt

__all__ = ["fail", "unpermute", "permute", "holds", "file_blocks", "file_floats", "fill_part",
           "fill_blocks", "piecewise"]


def fail(path: str, msg: str) -> BlockcValueError:
    return BlockcValueError(f"{path}: {msg}")


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k reordering: within each head of ``2h`` rows, row ``2i`` back
    to ``i`` and row ``2i + 1`` to ``i + h`` (weights (rows, cols) or biases (rows,))."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k reordering (the inverse of :func:`unpermute`)."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def holds(dtype: str, type: str) -> bool:
    """Whether format ``dtype`` holds the very blocks of ggml type ``type`` (its own type's,
    as the C formats' table says, or a type the C library converts to it exactly: Q4_0's
    and Q5_0's as Q8_0's): such a matrix is moved into panels, no weight requantised."""
    own = FORMATS[dtype].ggml_type
    t = fmt.TYPE_IDS.get(type)
    return own >= 0 and t is not None and (t == own or t in GGML_CONVERTS.get(own, ()))


#: the block types whose blocks start with their half scale
_SCALE_FIRST = ("Q8_0", "Q4_0", "Q5_0")


def _check_scales(path: str, name: str, raw: np.ndarray, typ: str, row0: int = 0) -> None:
    """Refuse a tensor ``name`` whose blocks (``raw``: rows of ``typ``'s blocks, each
    starting with its half scale) have an infinite or NaN scale: its weights are not
    numbers, and the kernels read a block's weights as fma(f, 2^e d, -(2^e + z) d) (exact
    for every finite d), so such a block would not even give the dequantised infinities."""
    block = fmt.type_size(typ)[1]  # even (34, 18, 22 bytes): a block is whole half words
    # each block's scale, a strided view (no copy); one pass: a half is an infinity or a
    # NaN when its magnitude bits reach 0x7C00 (the exponent all ones)
    d = np.ascontiguousarray(raw).view(np.uint16).reshape(raw.shape[0], -1, block // 2)[..., 0]
    if int(np.bitwise_and(d, 0x7FFF).max(initial=0)) < 0x7C00:
        return
    bad = np.argwhere((d & 0x7C00) == 0x7C00)
    if bad.size:
        raise fail(path, f"tensor {name!r}: row {row0 + int(bad[0][0])}, block {int(bad[0][1])} has "
                          "an infinite or NaN scale; its weights are not numbers")


#: the float types whose blocks load as their bits, and the exponent mask of each element
#: (all ones: an infinity or a NaN)
_FLOAT_BITS = {"F32": (np.dtype("<u4"), 0x7F800000), "F16": (np.dtype("<u2"), 0x7C00),
               "BF16": (np.dtype("<u2"), 0x7F80)}


def _check_float_bits(path: str, name: str, raw: np.ndarray, typ: str, row0: int = 0) -> None:
    """Refuse a tensor ``name`` of float ``typ`` (``raw``: its bytes from row ``row0``, loaded
    as they are) holding an infinity or a NaN: its weights are not numbers (read on the
    bits, no copy); the element named is the tensor's."""
    kind, mask = _FLOAT_BITS[typ]
    bits = np.ascontiguousarray(raw).reshape(-1).view(kind)
    bad = np.flatnonzero((bits & mask) == mask) + row0 * (bits.size // max(1, len(raw)))
    if bad.size:
        raise fail(path, f"tensor {name!r} holds an infinity or a NaN at element {int(bad[0])} "
                          f"({bad.size} elements that are not finite): its weights are not "
                          "numbers")


def _own_blocks(f: fmt.GGUFFile, name: str, fm: str, w: np.ndarray, row0: int) -> np.ndarray:
    """Rows ``row0..`` of tensor ``name`` (``w``: its blocks as the file has them) as format
    ``fm``'s own type's blocks (converted when another type), checked."""
    t = f.tensors[name]
    own = FORMATS[fm].ggml_type
    if fmt.TYPE_IDS[t.type] != own:
        w = convert_ggml(np.ascontiguousarray(w), fmt.TYPE_IDS[t.type], own)
    if fmt.TYPES[own][0] in _SCALE_FIRST:
        _check_scales(f.path, name, w, fmt.TYPES[own][0], row0)
    elif fmt.TYPES[own][0] in _FLOAT_BITS:
        _check_float_bits(f.path, name, w, fmt.TYPES[own][0], row0)
    return w


def file_blocks(f: fmt.GGUFFile, name: str, fm: str) -> Optional[np.ndarray]:
    """Tensor ``name``'s blocks as format ``fm``'s own type's (rows, row bytes), checked,
    when ``fm`` :func:`holds` its type (else None: it loads as floats)."""
    t = f.tensors[name]
    if not holds(fm, t.type):
        return None
    return _own_blocks(f, name, fm, t.data, 0)


#: bytes of a tensor :func:`fill_blocks` reads at a time (whole panels' rows)
_PIECE = 1 << 23


def piecewise(f: fmt.GGUFFile, name: str, fm: str) -> bool:
    """Whether :func:`fill_blocks` can load 2-D tensor ``name`` as format ``fm``: ``fm``
    holds its type's blocks, its panels are each their own bytes (``group`` 1), and the
    tensor is read from a file (not bytes in memory)."""
    t = f.tensors[name]
    return (len(t.shape) == 2 and holds(fm, t.type) and FORMATS[fm].group == 1
            and t.source is not None)


def fill_blocks(f: fmt.GGUFFile, name: str, fm: str, out: np.ndarray) -> None:
    """Tensor ``name`` (:func:`piecewise`) packed as format ``fm`` into ``out`` (its packed
    bytes: a slice of a model's buffer), a few panels' rows at a time through one buffer
    of about 8 MB: each piece read from the file (a short read refused by name), converted
    when ``fm``'s type is another, checked, packed into its panels' bytes. The bytes
    :func:`file_blocks` then ``pack_ggml`` write, without the tensor's bytes ever in memory
    whole: no new memory touched per tensor, the peak RSS the model's buffer's."""
    t = f.tensors[name]
    rows, cols = t.shape
    row = t.nbytes // rows  # bytes
    step = max(16, _PIECE // row // 16 * 16)  # whole panels of rows
    buf = np.empty(min(rows, step) * row, np.uint8)
    panel = out.size // (-(-rows // 16))  # each panel's bytes
    reader, at = t.source
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        w = reader.read_at(at + r0 * row, (r1 - r0) * row, f"tensor {name!r}", into=buf)
        w = _own_blocks(f, name, fm, w.reshape(r1 - r0, row), r0)
        pack_ggml(w, fm, (r1 - r0, cols), out=out[r0 // 16 * panel:-(-r1 // 16) * panel])


def file_floats(f: fmt.GGUFFile, name: str) -> np.ndarray:
    """Tensor ``name`` dequantised, refused when a weight is not finite."""
    w = f.tensors[name].to_float32()
    if not np.isfinite(np.sum(w, dtype=np.float64)):  # NaN, inf carry through
        bad = np.argwhere(~np.isfinite(w))
        if bad.size:
            raise fail(f.path, f"tensor {name!r} holds {w[tuple(bad[0])]} at "
                                f"{[int(i) for i in bad[0]]} ({len(bad)} elements that "
                                "are not finite): its weights are not numbers")
    return w


def fill_part(m: Any, f: fmt.GGUFFile, name: str, ours: str, rows: Any, heads: Any,
               state: Dict[str, Any]) -> None:
    """File tensor ``name``, rows ``rows`` of the split matrix ``ours`` (each of its q, k
    and v rows in its own format: bc_gpt.h), into ``m``: its part's very blocks when the
    part's format holds them, else its floats; once every part has come (``state`` keeps
    them meanwhile), written, and ``state["inexact"]`` set when a part packed from floats
    in a format other than float32 does not read back as the file's weights."""
    tl = m.layout[ours]
    part = next(p for p in tl.parts if p.row0 == rows[0] and p.row1 == rows[1])
    fm = m.dtypes[ours][tl.parts.index(part)]
    w = file_blocks(f, name, fm)
    raw = w is not None
    if not raw:
        w = file_floats(f, name)
    if heads is not None:
        w = unpermute(w, heads)  # whole rows: whole blocks
    state.setdefault("parts", []).append((part, fm, raw, np.ascontiguousarray(w)))
    if len(state["parts"]) < len(tl.parts):
        return
    floats = [(p, fm, w) for p, fm, raw, w in state["parts"] if not raw]
    if floats:  # the float parts packed (the rows of the others zeros, replaced below)
        whole = np.zeros(tl.shape, np.float32)
        for p, _, w in floats:
            whole[p.row0:p.row1] = w
        m.write_tensor(ours, whole)
    for p, fm, raw, w in state["parts"]:
        if raw:
            pack_ggml(w, fm, (p.row1 - p.row0, tl.shape[1]),
                      out=m.params[p.offset:p.offset + p.nbytes])
    back = m.read_tensor(ours) if floats else None
    state["inexact"] = any(fm != "float32" and not np.array_equal(
        back[p.row0:p.row1].view(np.uint32), w.view(np.uint32)) for p, fm, w in floats)
    del state["parts"]
