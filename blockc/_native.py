"""The one thin layer between Python and the C library.

Everything that calls ``lib`` goes through :func:`check`, which maps the C
status codes to Python exceptions; and through :func:`fptr` / :func:`cptr`,
which hand NumPy buffers to C without copying.
"""
from __future__ import annotations

import numpy as np

from ._blockc import ffi, lib

__all__ = ["ffi", "lib", "check", "BlockcError", "fptr", "cptr"]


class BlockcError(RuntimeError):
    """A C entry point reported a failure the Python layer did not anticipate."""


# status -> exception type; messages come from bc_strerror
_EXC = {
    lib.BC_ENULL: ValueError,
    lib.BC_ESIZE: ValueError,
    lib.BC_EOVERFLOW: ValueError,
    lib.BC_EHEADS: ValueError,
    lib.BC_EOPTION: ValueError,
    lib.BC_ENOMEM: MemoryError,
    lib.BC_ERANGE: ValueError,
    lib.BC_ECONTEXT: ValueError,
    lib.BC_EWORKSPACE: BlockcError,
    lib.BC_EALIAS: ValueError,
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
