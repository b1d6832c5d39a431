"""The one thin layer between Python and the C library.

Everything that calls ``lib`` goes through :func:`check`, which maps the C
status codes to blockc's exceptions; and through :func:`fptr` / :func:`cptr`,
which hand NumPy buffers to C without copying.
"""
from __future__ import annotations

import math

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
           "c_dtypes", "c_whole_blocks"]

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


def _c_formats():
    """``(BC_DTYPE_*, name, block)`` of every weight format the C library has, in its
    order (its formats' table: csrc/kernels/formats.c); a value with no format yet,
    below BC_NDTYPE, is skipped."""
    block = ffi.new("size_t *")
    name = ffi.new("char[]", lib.BC_DTYPE_NAME_MAX)
    for code in range(lib.BC_NDTYPE):
        st = lib.bc_dtype_info(name, lib.BC_DTYPE_NAME_MAX, block, ffi.NULL, code)
        if st == lib.BC_EOPTION:
            continue
        check(st, "dtypes")
        yield code, ffi.string(name).decode(), int(block[0])


def c_dtypes() -> dict:
    """``{name: BC_DTYPE_*}`` of every weight format the C library has, in its
    order, read once at import by the modules that name dtypes, so a format added
    in C needs no Python edit."""
    return {name: code for code, name, _ in _c_formats()}


def c_whole_blocks() -> dict:
    """``{name: block}`` of the weight formats whose rows must be whole blocks
    (q4_k: 256 columns; llama.cpp's K-quants have no short block), read from the
    C library: its packing refuses a row of ``block + 1`` columns of these."""
    n = ffi.new("size_t *")
    return {name: b for code, name, b in _c_formats()
            if b > 1 and lib.bc_pack_size(n, code, 1, b + 1) == lib.BC_ESIZE}


def c_max_cols() -> dict:
    """``{name: columns}`` of the weight formats whose matrices have a bounded number
    of columns (q8_0i, q4_0i, bfloat16i: BC_Q8_0I_MAX_COLS, so one row's int32 sums
    cannot overflow and a rounded row fits a call's scratch), read from the C library: its packing takes the bound and refuses 256
    whole blocks more (a multiple of every block, the K-quants' 256 too)."""
    n = ffi.new("size_t *")
    limit = lib.BC_Q8_0I_MAX_COLS
    out = {}
    for code, name, b in _c_formats():
        check(lib.bc_pack_size(n, code, 1, limit), "dtypes")
        if lib.bc_pack_size(n, code, 1, limit + 256 * b) == lib.BC_ESIZE:
            out[name] = limit
    return out
