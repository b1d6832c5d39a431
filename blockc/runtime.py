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
- ``get_prefetch()`` / ``set_prefetch(mode)``: whether integer decoding
  prefetches its weights in software, per group of formats
  (:data:`PREFETCH_GROUPS`). By default (``"auto"``) each group runs the mode a
  probe on this CPU measured faster, keeping the compiled default unless the
  other is 5% faster (the probe is timed with the kernel choices, and cached
  with them); ``BLOCKC_PREFETCH=default|on|off`` in the environment, or
  ``set_prefetch(mode)``, forces one. Prefetching changes no bit of a result.

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
           "FAMILIES", "kernel_choices", "describe_choices", "tune_kernels", "kernel_cache_path",
           "get_prefetch", "set_prefetch", "PREFETCH_MODES", "PREFETCH_GROUPS"]

ISAS = ("generic", "avx2", "avx512")
"""The instruction sets, in the order of the C library's BC_ISA_* numbers."""
AUTO = "auto"
FAMILIES = ("gemm", "decode_f32", "decode_bf16", "decode_q8_0", "decode_rows", "attention",
            "elementwise", "decode_q8_0i", "decode_bf16i", "decode_q4_ki")
"""The kernel families whose variants are chosen by timing, in BC_FAMILY_* order."""
_HOW = ("only candidate", "timed", "cached", "forced")
PREFETCH_MODES = ("auto", "default", "on", "off")
"""The software prefetch modes of integer decoding, in BC_PREFETCH_* order: each group's
measured mode, the compiled split, on for every format, off for every format."""
PREFETCH_GROUPS = ("prefetch_forward", "prefetch_blocks")
"""The groups of integer formats whose decoding prefetches or not, in BC_PF_GROUP_* order:
the K-quant super-blocks read forward (compiled default off), and the other integer
formats (compiled default on); csrc/runtime/prefetch.c's group_of names the members."""
_PF_HOW = ("default", "timed", "cached", "forced")  # BC_CHOSEN_WIDEST: nothing to time
_ON_OFF = ("off", "on")
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


def get_prefetch() -> str:
    """The software prefetch mode forced on integer decoding now, or ``"auto"``.

    Returns
    -------
    str
        One of :data:`PREFETCH_MODES`: ``"default"``, ``"on"`` or ``"off"`` when forced
        (``BLOCKC_PREFETCH``, :func:`set_prefetch`), else ``"auto"``: each group of
        formats its measured mode (:func:`kernel_choices`).

    Examples
    --------
    >>> get_prefetch() in PREFETCH_MODES
    True
    """
    out = ffi.new("int *")
    check(lib.bc_get_prefetch(out), "get_prefetch")
    return PREFETCH_MODES[out[0]]


def set_prefetch(mode: str) -> None:
    """Force whether integer decoding prefetches its weights in software, or go back
    to ``"auto"`` (each call uses the setting in force when it starts).

    Parameters
    ----------
    mode : {"auto", "default", "on", "off"}
        ``"auto"``: each group of formats (:data:`PREFETCH_GROUPS`) its measured
        mode; ``"default"``: the compiled split (the forward-read K-quants off, the
        other integer formats on), never measured; ``"on"``, ``"off"``: every
        integer format. The results are the same bits in every mode.

    Raises
    ------
    TypeError, ValueError
        Not a str; not one of the modes.

    Examples
    --------
    >>> old = get_prefetch(); set_prefetch("off"); get_prefetch()
    'off'
    >>> set_prefetch(old)
    """
    as_choice(mode, "mode", PREFETCH_MODES)
    check(lib.bc_set_prefetch(PREFETCH_MODES.index(mode)), "set_prefetch")


# ---------------------------------------------------------------- kernel choices

def kernel_choices() -> Dict[str, dict]:
    """What each kernel family runs now, and why.

    Returns
    -------
    dict
        family name (:data:`FAMILIES`) -> ``{"variant": isa name, "why": one of
        "timed", "cached", "forced", "only candidate", "seconds": {isa name: the
        least time of its probe}}`` (seconds of the measurement behind the
        choice, this process's or the cached one's; empty when none was made);
        then each group of integer formats (:data:`PREFETCH_GROUPS`) ->
        ``{"variant": "on" or "off", "why": "timed", "cached", "forced" or
        "default" (nothing to time on this CPU), "seconds": {"off": s, "on": s}}``:
        whether its decoding prefetches in software.

    Examples
    --------
    >>> list(kernel_choices()) == list(FAMILIES + PREFETCH_GROUPS)
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
    for g, name in enumerate(PREFETCH_GROUPS):
        check(lib.bc_prefetch_choice(isa, how, sec, g, 2), "kernel_choices")
        seconds = {_ON_OFF[i]: float(sec[i]) for i in range(2) if sec[i] > 0}
        if how[0] == lib.BC_CHOSEN_GIVEN and _cached_seconds.get(name):
            seconds = dict(_cached_seconds[name])
        out[name] = {"variant": _ON_OFF[isa[0]], "why": _PF_HOW[how[0]], "seconds": seconds}
    return out


def describe_choices() -> str:
    """One line per family: its variant, why, and the probe times (for benches).

    Returns
    -------
    str
        e.g. ``"decode_bf16 avx2 (timed: avx2 140 us, avx512 151 us)"`` lines, then
        ``"prefetch_forward off (timed: off 1210 us, on 1850 us)"`` lines.

    Examples
    --------
    >>> len(describe_choices().splitlines()) == len(FAMILIES + PREFETCH_GROUPS)
    True
    """
    lines = []
    for name, c in kernel_choices().items():
        times = ", ".join(f"{i} {s * 1e6:.0f} us" for i, s in sorted(c["seconds"].items()))
        lines.append(f"{name} {c['variant']} ({c['why']}{': ' + times if times else ''})")
    return "\n".join(lines)


def tune_kernels(save: bool = True) -> Dict[str, dict]:
    """Measure every family's variants and every prefetch group's modes again now,
    run the fastest from now on (unless forced), and keep the result in the cache.

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
    >>> list(tune_kernels(save=False)) == list(FAMILIES + PREFETCH_GROUPS)
    True
    """
    check(lib.bc_tune_kernels(), "tune_kernels")
    check(lib.bc_tune_prefetch(), "tune_kernels")
    _cached_seconds.clear()
    if save:
        _save_cache()
    return kernel_choices()


_cached_seconds: Dict[str, Dict[str, float]] = {}
_CACHE_MAX = 65536
_CACHE_FORMAT = 2  # 2: the prefetch groups' modes beside the families' variants


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
    return "|".join([_cpu_identity(), build, ",".join(FAMILIES), ",".join(ISAS),
                     ",".join(PREFETCH_GROUPS)])


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


def _section_ok(choices, seconds, names, values) -> bool:
    """A cache's section: choices either empty (nothing measured) or one of ``values``
    for every one of ``names``; seconds a dict."""
    return (isinstance(choices, dict) and isinstance(seconds, dict)
            and (not choices or (set(choices) == set(names)
                                 and all(v in values for v in choices.values()))))


def _read_cache(path: str) -> Optional[dict]:
    """The cache's choices, or None when the file is missing, not a regular file,
    too large, not JSON, or not for this CPU and build. Its "choices" (the
    families' variants) and "prefetch" (the groups' modes) may each be empty:
    not measured."""
    try:
        data = _files.read_json(path, "the kernel cache", limit=_CACHE_MAX, depth=4)
    except (OSError, ValueError):
        return None
    if (not isinstance(data, dict) or data.get("format") != _CACHE_FORMAT
            or data.get("key") != _cache_key()):
        return None
    if not (_section_ok(data.get("choices"), data.get("seconds"), FAMILIES, _CANDIDATES)
            and _section_ok(data.get("prefetch"), data.get("prefetch_seconds"),
                            PREFETCH_GROUPS, _ON_OFF)):
        return None
    if not data["choices"] and not data["prefetch"]:
        return None
    return data


def _timed(entry, names, n, values):
    """({name: value}, {name: {value: seconds}}) of what entry(out, how, sec, i, n)
    reports for each of names, or None unless every one was timed by this process."""
    out, how = ffi.new("int *"), ffi.new("int *")
    sec = ffi.new("double[]", n)
    choices, seconds = {}, {}
    for i, name in enumerate(names):
        check(entry(out, how, sec, i, n), "kernel_choices")
        if how[0] != lib.BC_CHOSEN_TIMED:
            return None  # forced, one candidate, or cached: nothing measured worth keeping
        choices[name] = values[out[0]]
        seconds[name] = {values[k]: float(sec[k]) for k in range(n) if sec[k] > 0}
    return choices, seconds


def _save_cache() -> None:
    """Write this process's measured choices to the cache (quietly skipped when the
    directory cannot be written: the cache only saves the next process a few ms).
    A section this process did not measure keeps the file's (when valid)."""
    path = kernel_cache_path()
    if path is None:
        return
    families = _timed(lib.bc_kernel_choice, FAMILIES, len(ISAS), ISAS)
    prefetch = _timed(lib.bc_prefetch_choice, PREFETCH_GROUPS, 2, _ON_OFF)
    if families is None and prefetch is None:
        return
    old = _read_cache(path) or {}
    if families is None:
        families = old.get("choices", {}), old.get("seconds", {})
    if prefetch is None:
        prefetch = old.get("prefetch", {}), old.get("prefetch_seconds", {})
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        _files.write_json(path, {"format": _CACHE_FORMAT, "key": _cache_key(),
                                 "choices": families[0], "seconds": families[1],
                                 "prefetch": prefetch[0], "prefetch_seconds": prefetch[1]},
                          indent=1)
    except (OSError, ValueError):
        pass


def _keep_seconds(data: dict, key: str, names, values) -> None:
    """The cached probe times of names (data[key]: {name: {one of values: seconds}})
    for kernel_choices to report."""
    for name in names:
        s = data[key].get(name)
        if isinstance(s, dict):
            _cached_seconds[name] = {k: float(v) for k, v in s.items()
                                     if k in values and isinstance(v, (int, float))}


def _load_choices() -> None:
    """At import: install the cached choices when the cache is valid; else measure
    now what is to be chosen (the families' variants unless an instruction set is
    forced or there is one candidate; the prefetch groups' modes unless a mode is
    forced or the CPU has no FMA kernels) and save."""
    out = ffi.new("int *")
    check(lib.bc_get_isa(out), "get_isa")
    isa_todo = out[0] == lib.BC_ISA_AUTO and best_isa() == "avx512"
    check(lib.bc_get_prefetch(out), "get_prefetch")
    pf_todo = out[0] == lib.BC_PREFETCH_AUTO and best_isa() != "generic"
    if not isa_todo and not pf_todo:
        return  # forced, or nothing to choose between
    path = kernel_cache_path()
    data = _read_cache(path) if path else None
    measure = False
    if isa_todo:
        if data is not None and data["choices"]:
            ok = all(lib.bc_set_kernel_choice(f, ISAS.index(data["choices"][name])) == 0
                     for f, name in enumerate(FAMILIES))
            if ok:
                _keep_seconds(data, "seconds", FAMILIES, ISAS)
            else:
                check(lib.bc_tune_kernels(), "tune_kernels")  # a half-installed cache
                measure = True
        else:
            measure = True
    if pf_todo:
        if data is not None and data["prefetch"]:
            for g, name in enumerate(PREFETCH_GROUPS):
                check(lib.bc_set_prefetch_choice(g, _ON_OFF.index(data["prefetch"][name])),
                      "set_prefetch_choice")
            _keep_seconds(data, "prefetch_seconds", PREFETCH_GROUPS, _ON_OFF)
        else:
            measure = True
    if measure:
        _save_cache()  # bc_kernel_choice, bc_prefetch_choice measure what is not chosen yet


_load_choices()
