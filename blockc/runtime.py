"""How the fast kernels run: thread count and instruction set.

- ``set_num_threads(n)`` / ``get_num_threads()``: the threads every kernel may
  use (``BLOCKC_NUM_THREADS`` in the environment sets the default, else
  OpenMP's). Results are bitwise identical whatever the count.
- ``get_isa()`` / ``set_isa(name)`` / ``best_isa()``: the kernels' instruction
  set, ``"avx512"``, ``"avx2"`` (with FMA) or ``"generic"`` (portable C),
  chosen at run time from what the CPU supports; ``BLOCKC_ISA=generic|avx2|avx512``
  in the environment forces one at start-up. Different instruction sets may
  differ in the last bits (FMA), all within float32 tolerance.

The GIL is released during every C call, so Python threads can run kernels
side by side; each call then uses up to ``get_num_threads()`` threads itself.
"""
from __future__ import annotations

import numbers

from ._native import check, ffi, lib
from ._errors import BlockcTypeError, BlockcValueError

__all__ = ["set_num_threads", "get_num_threads", "get_isa", "set_isa", "best_isa", "ISAS"]

ISAS = ("generic", "avx2", "avx512")


def set_num_threads(n: int) -> None:
    """Use ``n`` threads (n >= 1) in the kernels from now on; ``n = 0`` restores the default."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise BlockcTypeError(f"n must be an integer, got {type(n).__name__}")
    if not 0 <= int(n) <= 4096:
        raise BlockcValueError(f"n must be in [0, 4096] (0 = the default), got {n}")
    check(lib.bc_set_num_threads(int(n)), "set_num_threads")


def get_num_threads() -> int:
    """The number of threads the next kernel call may use (1 in a build without OpenMP)."""
    out = ffi.new("int *")
    check(lib.bc_get_num_threads(out), "get_num_threads")
    return int(out[0])


def get_isa() -> str:
    """The instruction set the kernels use now: ``"generic"``, ``"avx2"`` or ``"avx512"``."""
    out = ffi.new("int *")
    check(lib.bc_get_isa(out), "get_isa")
    return ISAS[out[0]]


def best_isa() -> str:
    """The best instruction set this CPU (and build) supports."""
    out = ffi.new("int *")
    check(lib.bc_best_isa(out), "best_isa")
    return ISAS[out[0]]


def set_isa(name: str) -> None:
    """Force the kernels' instruction set; ValueError if unknown or not supported here."""
    if not isinstance(name, str) or name not in ISAS:
        raise BlockcValueError(f"name must be one of {ISAS}, got {name!r}")
    if ISAS.index(name) > ISAS.index(best_isa()):
        raise BlockcValueError(f"this CPU supports at most {best_isa()!r}, not {name!r}")
    check(lib.bc_set_isa(ISAS.index(name)), "set_isa")
