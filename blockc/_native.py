"""The one thin layer between Python and the C library.

Everything that calls ``lib`` goes through :func:`check`, which maps the C
status codes to blockc's exceptions; and through :func:`fptr` / :func:`cptr`,
which hand NumPy buffers to C without copying.
"""
from __future__ import annotations

import math
from typing import List, NamedTuple, Optional

import numpy as np

from ._errors import BlockcError, BlockcMemoryError, BlockcValueError



def _installed_extension():
    """The extension module of a blockc installed elsewhere on sys.path, for when
    this package is the source tree (``pip install .`` then ``python -m blockc``
    from the repository root: the source folder shadows the installed package,
    and has no compiled extension of its own). None when there is none."""
    import importlib.machinery
    import importlib.util
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        pkg = os.path.join(os.path.abspath(entry or os.curdir), "blockc")
        if os.path.abspath(pkg) == here or not os.path.isdir(pkg):
            continue
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(pkg, "_blockc" + suffix)
            if os.path.exists(path):
                spec = importlib.util.spec_from_file_location("blockc._blockc", path)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                sys.modules["blockc._blockc"] = mod
                return mod
    return None


try:
    from ._blockc import ffi, lib
except ImportError:  # the source tree without a build: use an installed blockc's
    _ext = _installed_extension()
    if _ext is None:
        raise ImportError(
            "blockc's C extension is not built: install blockc (`pip install .`) or build it "
            "in place (`pip install -e .`)") from None
    ffi, lib = _ext.ffi, _ext.lib

__all__ = ["ffi", "lib", "check", "fptr", "cptr", "thread_buffer", "output_empty", "aligned_zeros",
           "aligned_copy",
           "c_formats", "CFormat", "c_ggml_converts"]

# status -> exception type; messages come from bc_strerror
_EXC = {
    lib.BC_ENULL: BlockcValueError,
    lib.BC_ESIZE: BlockcValueError,
    lib.BC_EOVERFLOW: BlockcValueError,
    lib.BC_EHEADS: BlockcValueError,
    lib.BC_EOPTION: BlockcValueError,
    lib.BC_ENOMEM: BlockcMemoryError,
    lib.BC_ERANGE: BlockcValueError,
    lib.BC_ECONTEXT: BlockcValueError,
    lib.BC_EALIAS: BlockcValueError,
    lib.BC_EVALUE: BlockcValueError,
    lib.BC_EEVICTED: BlockcValueError,
}


def check(status: int, where: str) -> None:
    """Raise the exception that C status ``status`` stands for (no-op on BC_OK)."""
    if status != lib.BC_OK:
        msg = ffi.string(lib.bc_strerror(status)).decode()
        raise _EXC.get(status, BlockcError)(f"{where}: {msg} (status {status})")


def fptr(a: np.ndarray):
    """A ``float *`` into a C-contiguous float32 array (no copy)."""
    return ffi.from_buffer("float[]", a)


def cptr(a: np.ndarray):
    """A ``const float *`` into a C-contiguous float32 array, read-only ones included."""
    return ffi.from_buffer("float[]", a, False)  # require_writable=False (positional: faster)


def thread_buffer(holder, n: int):
    """``(pointer, array)``: a grow-only float32 buffer of at least ``n`` floats kept
    on ``holder`` (a ``threading.local``, so each thread has its own) and reused."""
    buf = getattr(holder, "buf", None)
    if buf is None or buf.size < n:
        buf = np.empty(max(n, 1), dtype=np.float32)
        holder.buf, holder.ptr = buf, fptr(buf)
    return holder.ptr, buf


#: Bytes from which :func:`output_empty` advises small pages: NumPy's own threshold
#: for asking for huge pages (4 MiB).
SMALL_PAGES_FROM = 1 << 22


def output_empty(shape, dtype: "np.typing.DTypeLike" = np.float32) -> np.ndarray:
    """``np.empty(shape, dtype)`` for an output the C library is about to write once
    (logits, hidden states, a linear's result). From :data:`SMALL_PAGES_FROM` bytes
    on, the memory comes from the C library's kept outputs (``bc_out_take``): a
    block an earlier output handed back when one fits, its pages already mapped (a
    fresh output is all first writes, each page a fault: a prompt's logits lose a
    tenth of their time to them), else a fresh block advised onto small pages
    (NumPy asks for transparent huge pages on every large array, and under a
    hypervisor the first write to a fresh 2 MiB page can cost many times what its
    512 small pages do; benches/bench_pages.py measures both). The block goes back
    when the last array viewing it is gone. The array does not own its memory
    (``a.base`` holds it), so ``a.resize`` refuses; everything else is NumPy's.
    ``BLOCKC_OUTPUT_POOL=0`` keeps no blocks."""
    dt = np.dtype(dtype)
    shp = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
    nbytes = math.prod(shp) * dt.itemsize
    if nbytes < SMALL_PAGES_FROM or nbytes >= 1 << 62:  # (NumPy refuses the impossible)
        return np.empty(shp, dt)
    out = ffi.new("void **")
    check(lib.bc_out_take(out, nbytes), "output_empty")
    block = ffi.gc(out[0], lib.bc_out_give, size=nbytes)
    return np.frombuffer(ffi.buffer(block, nbytes), dt).reshape(shp)


def aligned_zeros(n: int, dtype: "np.typing.DTypeLike" = np.float32) -> np.ndarray:
    """A 1-D array of ``n`` zeros starting on a 64-byte boundary (the C kernels read
    whole cache lines and vectors from the buffers the model and training own)."""
    dt = np.dtype(dtype)
    raw = np.zeros(n * dt.itemsize + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start:start + n * dt.itemsize].view(dt)


def aligned_copy(a: np.ndarray) -> np.ndarray:
    """A 64-byte aligned, C-contiguous copy of the 1-D array ``a``."""
    out = aligned_zeros(a.size, a.dtype)
    out[...] = a
    return out


class CFormat(NamedTuple):
    """One row of the C library's formats' table (csrc/kernels/formats.c), as
    ``bc_dtype_info`` and ``bc_dtype_traits_of`` give it."""
    code: int             #: its BC_DTYPE_*
    name: str             #: its name in Python ("q8_0")
    block: int            #: weights of a row per block
    block_bytes: int      #: bytes of one row's block in the panels
    max_cols: int         #: the columns a matrix may have; 0: any
    whole: bool           #: a row must be whole blocks
    ggml_type: int        #: the GGUF type id whose blocks its panels hold bit for bit, or -1
    integer: bool         #: products by integer dot products over 8-bit rows of x
    limit: Optional[str]  #: the weights packing refuses, in words; None: every float
    group: int = 1        #: panels interleaved in runs of this many; 1: each panel (16
    #:                      rows) its own bytes, as a matrix of those rows alone packs


def c_formats() -> List[CFormat]:
    """Every weight format the C library has, in its order (its formats' table); a
    value with no format yet, below BC_NDTYPE, is skipped. Read once at import by
    :mod:`blockc._enums`, so that a format added in C needs no Python edit."""
    block = ffi.new("size_t *")
    name = ffi.new("char[]", lib.BC_DTYPE_NAME_MAX)
    t = ffi.new("bc_dtype_traits *")
    out = []
    for code in range(lib.BC_NDTYPE):
        st = lib.bc_dtype_info(name, lib.BC_DTYPE_NAME_MAX, block, ffi.NULL, code)
        if st == lib.BC_EOPTION:
            continue
        check(st, "dtypes")
        check(lib.bc_dtype_traits_of(t, code), "dtypes")
        out.append(CFormat(code, ffi.string(name).decode(), int(t.block), int(t.block_bytes),
                           int(t.max_cols), bool(t.whole), int(t.ggml_type), bool(t.integer),
                           ffi.string(t.limit).decode() if t.limit != ffi.NULL else None,
                           int(t.group)))
    return out


def c_ggml_converts() -> dict:
    """``{to: (from, ...)}``: the GGUF type ids whose blocks the C library converts to
    blocks of type ``to`` holding the same weights (bc_ggml_convert: Q4_0's and Q5_0's
    as Q8_0's), for every type a format holds. bc_ggml_convert checks the pair before
    the sizes, so zero blocks ask it: BC_ESIZE, it converts; BC_EOPTION, it does not."""
    buf = ffi.new("char[]", 1)
    out = {}
    for to in sorted({f.ggml_type for f in c_formats() if f.ggml_type >= 0}):
        found = tuple(src for src in range(64)
                      if lib.bc_ggml_convert(buf, 0, buf, 0, to, src, 0) == lib.BC_ESIZE)
        if found:
            out[to] = found
    return out
