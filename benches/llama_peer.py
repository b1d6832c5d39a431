"""llama.cpp through llama-cpp-python, as the benches' peer: one home for its workaround.

llama-cpp-python 0.3.36 on an AMX CPU (the Intel Xeon KVM guests these benches were run on)
repacks quantised weights into llama.cpp's extra buffer types (its CPU "repack" and AMX
buffers) and then crashes in the first quantised matmul. Its Python API has no switch for
them, so :func:`patch_extra_bufts` wraps ``llama_model_default_params`` to return
``use_extra_bufts = False``; every model loaded after it (``llama_cpp.Llama``, the server)
runs llama.cpp's plain CPU kernels. bench_serve launches the server through :data:`LAUNCH`
for a file they do not run.

The peer at its best (issue 51): those buffers are llama.cpp's default, what its users get,
and they run on other CPUs (an AMD Zen 4). Every bench opens its files through
:func:`open_model`, which asks :func:`extra_bufts_work` whether they work for that file on
this machine: a subprocess loads the file with and without them and runs a batch and a
decode step; they are used if it exits cleanly with next-token logits correlated at least
MIN_CORRELATION with the plain kernels', and turned off if it crashes, hangs or differs. The probe
runs once per file and process; its verdict is printed (a line "llama.cpp buffers: ..." before the figures
of the file) and kept in :data:`MODES`, and :func:`mode_of` names it for a table column.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from typing import Callable, Dict, Iterator, Tuple

import numpy as np

__all__ = ["open_model", "patch_extra_bufts", "extra_bufts_off", "extra_bufts_work", "mode_of",
           "agreement", "MIN_CORRELATION", "MODES", "LAUNCH", "NOTE"]

#: the least correlation of the two modes' logits (each probe step's) for the buffers to count
#: as working: a broken kernel's logits are unrelated to the plain ones' (correlation near 0);
#: a working one's differ by its own rounding (its activations' blocks, its sums' order),
#: which a deep random-weight model amplifies layer by layer: 1-7% of the logits' range at
#: the 1B and 3B shapes on an AMD Zen 4 (Q4_0, Q4_K_M), correlation 0.9966 and above
MIN_CORRELATION = 0.9

#: what a bench prints beside the peer's version
NOTE = ("its default repacked/AMX weight buffers (use_extra_bufts) on for each file where a "
        "probe in a subprocess runs them with the plain kernels' logits (correlation >= "
        f"{MIN_CORRELATION}), off where they "
        "crash or differ (a 'llama.cpp buffers:' line per file says which)")


def patch_extra_bufts() -> Callable[[], None]:
    """Make llama.cpp load every later model without its extra buffer types; returns the
    function that undoes it."""
    import llama_cpp.llama_cpp as c
    default = c.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p
    c.llama_model_default_params = params

    def restore() -> None:
        c.llama_model_default_params = default
    return restore


@contextlib.contextmanager
def extra_bufts_off() -> Iterator[None]:
    """:func:`patch_extra_bufts` for the models loaded inside the ``with``."""
    restore = patch_extra_bufts()
    try:
        yield
    finally:
        restore()


#: the probe: argv[1] the file, argv[2] "on"/"off"; prints the logits of the last
#: position after a batch of 16 tokens and after one more token, as JSON
_PROBE = f"""
import json, sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import llama_cpp, llama_peer
if sys.argv[2] == "off":
    llama_peer.patch_extra_bufts()
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, n_batch=32, n_threads=2,
                      n_threads_batch=2, verbose=False)
n = llm.n_vocab()
ids = [(7 + 31 * i) % n for i in range(16)]

def last():  # the last position's logits (llm.scores is filled only with logits_all)
    return [float(x) for x in llama_cpp.llama_get_logits(llm.ctx)[:n]]
llm.eval(ids)
a = last()
llm.eval([ids[3]])
print(json.dumps([a, last()]))
"""



def agreement(plain: np.ndarray, extra: np.ndarray) -> Tuple[float, float]:
    """(the least Pearson correlation over the probe's steps, the largest difference over the
    largest plain logit) of two modes' logits, each of shape (steps, vocab)."""
    plain = np.atleast_2d(np.asarray(plain, dtype=np.float64))
    extra = np.atleast_2d(np.asarray(extra, dtype=np.float64))
    corr = min(float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else
               float(np.array_equal(a, b)) for a, b in zip(plain, extra))
    scale = float(np.abs(plain).max()) or 1.0
    return corr, float(np.abs(plain - extra).max()) / scale


#: realpath -> (whether the extra buffer types are used, why): every verdict of this process
MODES: Dict[str, Tuple[bool, str]] = {}


def _probe(path: str, mode: str, timeout: float, python: str) -> Tuple[object, str]:
    try:
        r = subprocess.run([python, "-c", _PROBE, path, mode], capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"hung over {timeout:.0f} s"
    if r.returncode != 0:
        why = f"signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
        tail = (r.stderr.strip().splitlines() or [""])[-1][:120]
        return None, f"crashed ({why}{': ' + tail if tail else ''})"
    return json.loads(r.stdout.strip().splitlines()[-1]), ""


def extra_bufts_work(path: str, kind: str = "", timeout: float = 900.0,
                     python: str = sys.executable) -> Tuple[bool, str]:
    """Whether llama.cpp's extra buffer types (its default: repacked/AMX weights) run the file
    at ``path`` on this machine: (True, why) when a subprocess with them exits cleanly with
    next-token logits correlated at least :data:`MIN_CORRELATION` with the plain kernels' (after
    a batch of 16 tokens and after one decode step), else (False, why). Once per file and process (:data:`MODES`);
    the verdict is printed. ``python`` is the interpreter whose llama-cpp-python is asked
    (the bench's own unless it runs the peer from another venv)."""
    key = os.path.realpath(path) + ("" if python == sys.executable else f" ({python})")
    if key in MODES:
        return MODES[key]
    plain, why = _probe(path, "off", timeout, python)
    if plain is None:
        verdict = (False, f"the plain kernels fail too: {why}")
    else:
        extra, why = _probe(path, "on", timeout, python)
        if extra is None:
            verdict = (False, why)
        else:
            corr, err = agreement(np.array(plain), np.array(extra))
            verdict = ((True, f"runs (logits within {err:.1e} of the plain kernels', "
                              f"correlation {corr:.4f})")
                       if corr >= MIN_CORRELATION else
                       (False, f"differ from the plain kernels' (correlation {corr:.4f}, "
                               f"{err:.1e} of their range)"))
    MODES[key] = verdict
    print(f"llama.cpp buffers: {kind or os.path.basename(path)}: repacked/AMX "
          f"{'on' if verdict[0] else 'off'}: {verdict[1]}", flush=True)
    return verdict


def mode_of(path: str, kind: str = "") -> str:
    """"repack" or "plain": the buffers llama.cpp runs the file with (:func:`extra_bufts_work`)."""
    return "repack" if extra_bufts_work(path, kind)[0] else "plain"


def last_logits(llama_cpp, llm) -> np.ndarray:
    """The logits of the last position ``llm`` evaluated (a view of llama.cpp's buffer, valid
    until its next eval): ``llm.scores`` is filled only with ``logits_all``, and reads zeros
    otherwise."""
    return np.ctypeslib.as_array(llama_cpp.llama_get_logits(llm.ctx), shape=(llm.n_vocab(),))


def open_model(llama_cpp, path: str, kind: str, **kw):
    """``llama_cpp.Llama(model_path=path, **kw)`` for a file of weight type ``kind`` ("f32",
    "F16", "q8_0", "Q4_K_M", ...): with llama.cpp's extra buffer types (its default) where
    :func:`extra_bufts_work` finds they work for this file here, else without them."""
    on, _ = extra_bufts_work(path, kind)
    with contextlib.nullcontext() if on else extra_bufts_off():
        return llama_cpp.Llama(model_path=path, **kw)


#: a launcher for ``python -c``: llama-cpp-python's server (which has no setting for it)
#: with the extra buffer types off, then the server's own main (for a file
#: :func:`extra_bufts_work` finds they do not run; ``-m llama_cpp.server`` where they do)
LAUNCH = f"""
import runpy, sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import llama_peer
llama_peer.patch_extra_bufts()
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""
