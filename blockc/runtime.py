"""How the fast kernels run: thread count and instruction set.

- ``set_num_threads(n)`` / ``get_num_threads()``: the threads every kernel may
  use (``BLOCKC_NUM_THREADS`` in the environment sets the default, else
  ``OMP_NUM_THREADS``, else the processors). Results are bitwise identical
  whatever the count.
- ``get_isa()`` / ``set_isa(name)`` / ``best_isa()``: the kernels' instruction
  set. By default (``"auto"``) each kernel family (:data:`FAMILIES`: the GEMM
  tile, decoding per weight format, attention, elementwise) runs the variant
  that measured fastest on this CPU among the instruction sets with FMA
  (``"avx512"``, ``"avx2"``); ``BLOCKC_ISA=generic|avx2|avx512`` in the
  environment, or ``set_isa(name)``, forces one for every kernel. The
  portable C kernels (``"generic"``) differ in the last bits (no FMA), all
  within float32 tolerance; the FMA variants give a GPT the same bits in any
  mix.
- ``kernel_choices()``: what each family runs and why (timed, cached, forced),
  with the probe times; ``tune_kernels()`` measures again. The measurement
  (0.1-0.2 s) runs once per machine: its result is kept in
  ``$XDG_CACHE_HOME/blockc/`` (``~/.cache/blockc/``), one file per CPU model,
  flags and build, written whole or not at all; a file that does not parse or
  does not match is ignored and replaced. ``BLOCKC_KERNEL_CACHE=path`` puts it
  elsewhere, ``BLOCKC_KERNEL_CACHE=`` (empty) turns it off.

The GIL is released during every C call, so Python threads can run kernels
side by side; each call then uses up to ``get_num_threads()`` threads itself.
"""
from __future__ import annotations

import hashlib
import os
import platform
from typing import Dict, Optional

from . import _files
from ._native import check, ffi, lib
from ._args import as_choice, as_int
from ._errors import BlockcValueError

__all__ = ["set_num_threads", "get_num_threads", "get_isa", "set_isa", "best_isa", "ISAS",
           "FAMILIES", "kernel_choices", "describe_choices", "tune_kernels", "kernel_cache_path"]

ISAS = ("generic", "avx2", "avx512")
"""The instruction sets, in the order of the C library's BC_ISA_* numbers."""
AUTO = "auto"
FAMILIES = ("gemm", "decode_f32", "decode_bf16", "decode_q8_0", "decode_rows", "attention",
            "elementwise", "decode_q8_0i", "decode_bf16i")
"""The kernel families whose variants are chosen by timing, in BC_FAMILY_* order."""
_HOW = ("only candidate", "timed", "cached", "forced")
_CANDIDATES = ("avx2", "avx512")  # the variants a family chooses between (with FMA)


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
    """The instruction set forced on the kernels now, or ``"auto"``.

    Returns
    -------
    str
        ``"generic"``, ``"avx2"`` or ``"avx512"`` when forced (``BLOCKC_ISA``,
        :func:`set_isa`), else ``"auto"``: each family runs its measured variant
        (:func:`kernel_choices`).

    Examples
    --------
    >>> get_isa() in ISAS + ("auto",)
    True
    """
    out = ffi.new("int *")
    check(lib.bc_get_isa(out), "get_isa")
    return AUTO if out[0] == lib.BC_ISA_AUTO else ISAS[out[0]]


def best_isa() -> str:
    """The best instruction set this CPU (and build) supports.

    Returns
    -------
    str
        ``"generic"``, ``"avx2"`` or ``"avx512"``.

    Examples
    --------
    >>> best_isa() in ISAS
    True
    """
    out = ffi.new("int *")
    check(lib.bc_best_isa(out), "best_isa")
    return ISAS[out[0]]


def set_isa(name: str) -> None:
    """Force the kernels' instruction set, or go back to ``"auto"`` (each call uses
    the setting in force when it starts).

    Parameters
    ----------
    name : {"generic", "avx2", "avx512", "auto"}
        At most :func:`best_isa`; ``"auto"``: each kernel family its measured
        variant.

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
    as_choice(name, "name", ISAS + (AUTO,))
    if name == AUTO:
        check(lib.bc_set_isa(lib.BC_ISA_AUTO), "set_isa")
        return
    if ISAS.index(name) > ISAS.index(best_isa()):
        raise BlockcValueError(f"this CPU supports at most {best_isa()!r}, not {name!r}")
    check(lib.bc_set_isa(ISAS.index(name)), "set_isa")


# ---------------------------------------------------------------- kernel choices

def kernel_choices() -> Dict[str, dict]:
    """What each kernel family runs now, and why.

    Returns
    -------
    dict
        family name (:data:`FAMILIES`) -> ``{"variant": isa name, "why": one of
        "timed", "cached", "forced", "only candidate", "seconds": {isa name: the
        least time of its probe}}`` (seconds of the measurement behind the
        choice, this process's or the cached one's; empty when none was made).

    Examples
    --------
    >>> sorted(kernel_choices()) == sorted(FAMILIES)
    True
    """
    isa, how = ffi.new("int *"), ffi.new("int *")
    sec = ffi.new("double[]", len(ISAS))
    out = {}
    for f, name in enumerate(FAMILIES):
        check(lib.bc_kernel_choice(isa, how, sec, f, len(ISAS)), "kernel_choices")
        seconds = {ISAS[i]: float(sec[i]) for i in range(len(ISAS)) if sec[i] > 0}
        if how[0] == lib.BC_CHOSEN_GIVEN and _cached_seconds.get(name):
            seconds = dict(_cached_seconds[name])
        out[name] = {"variant": ISAS[isa[0]], "why": _HOW[how[0]], "seconds": seconds}
    return out


def describe_choices() -> str:
    """One line per family: its variant, why, and the probe times (for benches).

    Returns
    -------
    str
        e.g. ``"decode_bf16 avx2 (timed: avx2 140 us, avx512 151 us)"`` lines.

    Examples
    --------
    >>> len(describe_choices().splitlines()) == len(FAMILIES)
    True
    """
    lines = []
    for name, c in kernel_choices().items():
        times = ", ".join(f"{i} {s * 1e6:.0f} us" for i, s in sorted(c["seconds"].items()))
        lines.append(f"{name} {c['variant']} ({c['why']}{': ' + times if times else ''})")
    return "\n".join(lines)


def tune_kernels(save: bool = True) -> Dict[str, dict]:
    """Measure every family's variants again now, run the fastest from now on
    (unless an instruction set is forced), and keep the result in the cache.

    Parameters
    ----------
    save : bool
        Write the result to :func:`kernel_cache_path` (when there is one).

    Returns
    -------
    dict
        :func:`kernel_choices` after the measurement.

    Raises
    ------
    MemoryError
        The probes' few megabytes could not be had.

    Examples
    --------
    >>> sorted(tune_kernels(save=False)) == sorted(FAMILIES)
    True
    """
    check(lib.bc_tune_kernels(), "tune_kernels")
    _cached_seconds.clear()
    if save:
        _save_cache()
    return kernel_choices()


_cached_seconds: Dict[str, Dict[str, float]] = {}
_CACHE_MAX = 65536
_CACHE_FORMAT = 1


def _cpu_identity() -> str:
    """The CPU as the cache keys it: vendor, family, model, stepping, name and the
    flags the kernels care about (Linux: /proc/cpuinfo; else what platform says)."""
    fields: Dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", "rb") as f:
            text = f.read(1 << 20).decode("utf-8", "replace")
        for line in text.split("\n\n", 1)[0].splitlines():
            k, _, v = line.partition(":")
            fields[k.strip()] = v.strip()
    except OSError:
        pass
    want = ("avx", "fma", "f16c", "amx")
    flags = sorted(fl for fl in fields.get("flags", "").split() if fl.startswith(want))
    return "|".join([platform.machine(), fields.get("vendor_id", ""), fields.get("cpu family", ""),
                     fields.get("model", ""), fields.get("stepping", ""),
                     fields.get("model name", platform.processor()), " ".join(flags)])


def _cache_key() -> str:
    """What a cached choice is valid for: this CPU, this build of the kernels (the
    extension's size and modification time), the families and instruction sets."""
    import sys
    try:
        st = os.stat(sys.modules["blockc._blockc"].__file__)
        build = f"{st.st_size}:{st.st_mtime_ns}"
    except (AttributeError, KeyError, OSError, TypeError):
        build = "?"
    return "|".join([_cpu_identity(), build, ",".join(FAMILIES), ",".join(ISAS)])


def kernel_cache_path() -> Optional[str]:
    """Where the measured kernel choices of this CPU and build are kept.

    Returns
    -------
    str or None
        ``BLOCKC_KERNEL_CACHE`` if set (None when set empty: no cache), else
        ``$XDG_CACHE_HOME/blockc/kernels-<key hash>.json`` (``~/.cache`` when
        XDG_CACHE_HOME is unset); None when neither can be found.

    Examples
    --------
    >>> p = kernel_cache_path(); p is None or p.endswith(".json")
    True
    """
    env = os.environ.get("BLOCKC_KERNEL_CACHE")
    if env is not None:
        return env or None
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    digest = hashlib.sha256(_cache_key().encode()).hexdigest()[:16]
    return os.path.join(base, "blockc", f"kernels-{digest}.json")


def _read_cache(path: str) -> Optional[dict]:
    """The cache's choices, or None when the file is missing, not a regular file,
    too large, not JSON, or not for this CPU and build."""
    try:
        data = _files.read_json(path, "the kernel cache", limit=_CACHE_MAX, depth=4)
    except (OSError, ValueError):
        return None
    if (not isinstance(data, dict) or data.get("format") != _CACHE_FORMAT
            or data.get("key") != _cache_key()):
        return None
    choices, seconds = data.get("choices"), data.get("seconds")
    if (not isinstance(choices, dict) or set(choices) != set(FAMILIES)
            or any(v not in _CANDIDATES for v in choices.values())
            or not isinstance(seconds, dict)):
        return None
    return data


def _save_cache() -> None:
    """Write this process's measured choices to the cache (quietly skipped when the
    directory cannot be written: the cache only saves the next process a few ms)."""
    path = kernel_cache_path()
    if path is None:
        return
    isa, how = ffi.new("int *"), ffi.new("int *")
    sec = ffi.new("double[]", len(ISAS))
    choices, seconds = {}, {}
    for f, name in enumerate(FAMILIES):
        check(lib.bc_kernel_choice(isa, how, sec, f, len(ISAS)), "kernel_choices")
        if how[0] != lib.BC_CHOSEN_TIMED:
            return  # forced, or one candidate: nothing measured worth keeping
        choices[name] = ISAS[isa[0]]
        seconds[name] = {ISAS[i]: float(sec[i]) for i in range(len(ISAS)) if sec[i] > 0}
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        _files.write_json(path, {"format": _CACHE_FORMAT, "key": _cache_key(),
                                 "choices": choices, "seconds": seconds}, indent=1)
    except (OSError, ValueError):
        pass


def _load_choices() -> None:
    """At import: install the cached choices when the cache is valid; else measure
    now (unless an instruction set is forced or there is one candidate) and save."""
    out = ffi.new("int *")
    check(lib.bc_get_isa(out), "get_isa")
    if out[0] != lib.BC_ISA_AUTO or best_isa() != "avx512":
        return  # forced (nothing to choose), or at most one FMA instruction set
    path = kernel_cache_path()
    data = _read_cache(path) if path else None
    if data is not None:
        ok = all(lib.bc_set_kernel_choice(f, ISAS.index(data["choices"][name])) == 0
                 for f, name in enumerate(FAMILIES))
        if ok:
            for name in FAMILIES:
                s = data["seconds"].get(name)
                if isinstance(s, dict):
                    _cached_seconds[name] = {k: float(v) for k, v in s.items()
                                             if k in ISAS and isinstance(v, (int, float))}
            return
        check(lib.bc_tune_kernels(), "tune_kernels")  # a half-installed cache: measure all
    _save_cache()  # bc_kernel_choice measures what is not chosen yet


_load_choices()
