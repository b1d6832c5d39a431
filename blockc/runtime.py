"""How the fast kernels run: thread count and instruction set.

- ``set_num_threads(n)`` / ``get_num_threads()``: the threads every kernel may
  use (``BLOCKC_NUM_THREADS`` in the environment sets the default, else
  ``OMP_NUM_THREADS``, else the processors). Results are bitwise identical
  whatever the count.
- ``get_isa()`` / ``set_isa(name)`` / ``best_isa()``: the kernels' instruction
  set, ``"avx512"``, ``"avx2"`` (with FMA) or ``"generic"`` (portable C),
  chosen at run time from what the CPU supports; ``BLOCKC_ISA=generic|avx2|avx512``
  in the environment forces one at start-up. Different instruction sets may
  differ in the last bits (FMA), all within float32 tolerance.

The GIL is released during every C call, so Python threads can run kernels
side by side; each call then uses up to ``get_num_threads()`` threads itself.
"""
from __future__ import annotations

from ._native import check, ffi, lib
from ._args import as_choice, as_int
from ._errors import BlockcValueError

__all__ = ["set_num_threads", "get_num_threads", "get_isa", "set_isa", "best_isa", "ISAS"]

ISAS = ("generic", "avx2", "avx512")


def set_num_threads(n: int) -> None:
    """Use ``n`` threads in the kernels from now on.

    Parameters
    ----------
    n : int in [0, 4096]
        Threads; 0 restores the default (``BLOCKC_NUM_THREADS`` if set, else
        ``OMP_NUM_THREADS``, else the processors; never more than the processors).
        Results are the same bits whatever n.
        In a child forked after the parent ran threads, blockc stays on one.

    Raises
    ------
    TypeError, ValueError
        Not an integer; out of range.

    Examples
    --------
    >>> set_num_threads(1); get_num_threads()
    1
    >>> set_num_threads(0)
    """
    n = as_int(n, "n", 0, 4096)
    check(lib.bc_set_num_threads(n), "set_num_threads")


def get_num_threads() -> int:
    """The number of threads the next kernel call may use.

    Returns
    -------
    int
        At least 1 (1 in a build without threads, BLOCKC_NO_THREADS=1).

    Examples
    --------
    >>> get_num_threads() >= 1
    True
    """
    out = ffi.new("int *")
    check(lib.bc_get_num_threads(out), "get_num_threads")
    return int(out[0])


def get_isa() -> str:
    """The instruction set the kernels use now.

    Returns
    -------
    str
        ``"generic"``, ``"avx2"`` or ``"avx512"``.

    Examples
    --------
    >>> get_isa() in ISAS
    True
    """
    out = ffi.new("int *")
    check(lib.bc_get_isa(out), "get_isa")
    return ISAS[out[0]]


def best_isa() -> str:
    """The best instruction set this CPU (and build) supports.

    Returns
    -------
    str
        ``"generic"``, ``"avx2"`` or ``"avx512"``.

    Examples
    --------
    >>> ISAS.index(best_isa()) >= ISAS.index(get_isa())
    True
    """
    out = ffi.new("int *")
    check(lib.bc_best_isa(out), "best_isa")
    return ISAS[out[0]]


def set_isa(name: str) -> None:
    """Force the kernels' instruction set (each call uses the one in force when it starts).

    Parameters
    ----------
    name : {"generic", "avx2", "avx512"}
        At most :func:`best_isa`.

    Raises
    ------
    TypeError, ValueError
        Not a str; unknown, or more than this CPU supports.

    Examples
    --------
    >>> old = get_isa(); set_isa("generic"); get_isa()
    'generic'
    >>> set_isa(old)
    """
    as_choice(name, "name", ISAS)
    if ISAS.index(name) > ISAS.index(best_isa()):
        raise BlockcValueError(f"this CPU supports at most {best_isa()!r}, not {name!r}")
    check(lib.bc_set_isa(ISAS.index(name)), "set_isa")
