"""llama.cpp through llama-cpp-python, as the benches' peer: one home for its workaround.

llama-cpp-python 0.3.36 on an AMX CPU (the Intel Xeon KVM guests these benches were run on)
repacks quantised weights into llama.cpp's extra buffer types (its CPU "repack" and AMX
buffers) and then crashes in the first quantised matmul. Its Python API has no switch for
them, so :func:`patch_extra_bufts` wraps ``llama_model_default_params`` to return
``use_extra_bufts = False``; every model loaded after it (``llama_cpp.Llama``, the server)
runs llama.cpp's plain CPU kernels. Every bench opens its files through :func:`open_model`,
which turns them off for quantised files only, so unquantised files run as llama.cpp's users
run them: an f16 file's matrices go to the AMX buffer and its own f16 kernels (as fast as the
plain ones on the Emerald Rapids guest: 24.8 against 24.7 tok/s, GPT-2 small, 1 thread), and
f32/bf16 files use no extra buffer. bench_serve launches the server through :data:`LAUNCH`.
"""
from __future__ import annotations

import contextlib
import os
from typing import Callable, Iterator

__all__ = ["open_model", "patch_extra_bufts", "extra_bufts_off", "LAUNCH", "NOTE"]

#: what a bench prints beside the peer's version
NOTE = ("use_extra_bufts=False for quantised files (its repacked/AMX weight buffers crash "
        "here), on for f32/f16/bf16")


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


#: the weight types whose files keep llama.cpp's extra buffer types
UNQUANTISED = ("f32", "f16", "bf16")


def open_model(llama_cpp, path: str, kind: str, **kw):
    """``llama_cpp.Llama(model_path=path, **kw)`` for a file of weight type ``kind`` ("f32",
    "F16", "q8_0", "Q4_K_M", ...): the extra buffer types off unless it is unquantised."""
    with contextlib.nullcontext() if kind.lower() in UNQUANTISED else extra_bufts_off():
        return llama_cpp.Llama(model_path=path, **kw)


#: a launcher for ``python -c``: llama-cpp-python's server (which has no setting for it)
#: with the extra buffer types off, then the server's own main
LAUNCH = f"""
import runpy, sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import llama_peer
llama_peer.patch_extra_bufts()
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""
