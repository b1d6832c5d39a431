"""Seconds to write a random Llama-3.2-1B-shaped model as each GGUF type blockc offers, on 1
and 2 threads, beside llama.cpp's quantiser on the same weights (issue 51).

blockc: ``blockc.checkpoint.gguf.save_streaming`` from float32 weights in memory (each
matrix quantised by blockc's C quantisers, written whole); llama.cpp: llama-cpp-python's
``llama_model_quantize`` from an F16 GGUF file of the same weights (that file written once,
untimed) with the same thread count. Both read their input, quantise every matrix and write
the file; the mixes (Q4_K_M, Q3_K_M, IQ4_XS, ...) are each one's own recipe (blockc's are
llama.cpp's rules, the same tensor types). The plain K types (Q3_K, Q4_K, Q5_K) are llama.cpp's
``pure`` files of its Q3_K_S, Q4_K_M and Q5_K_M (every matrix the one type).

    python benches/bench_quantise.py --size small            (a quick run: a 4-layer model)
    python benches/bench_quantise.py --docs                  (the 1B table, docs/results/quantise.md)

The weights: every matrix a Gaussian of standard deviation 0.05 (the matrices of one shape
share their values: the time is the quantisers', not the random generator's); norms 1.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from typing import Dict, List, Optional

import numpy as np

import blockc
from blockc.checkpoint import gguf as gm
from blockc.model import layout
from bench_sizes import SHAPES, _llama  # noqa: E402
from doc_section import run as run_bench  # noqa: E402
from machine import cpu_name, cpu_times, steal_share  # noqa: E402

SIZES = {"llama1b": SHAPES["llama1b"], "small": _llama(8192, 512, 8, 2, 1536, 4, True)}
TYPES = ("F16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q6_K", "Q5_K", "Q5_K_M", "Q5_K_S",
         "Q4_K", "Q4_K_M", "Q4_K_S", "Q3_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q2_K", "IQ4_NL",
         "IQ4_XS")
# blockc's plain K types as llama.cpp's pure files of these ftypes
_PURE = {"Q3_K": "Q3_K_S", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}


def weights(cfg: blockc.GPTConfig):
    """blockc name -> float32 tensor, one Gaussian array per shape (made before timing)."""
    lay = layout(cfg)
    by_shape: Dict[tuple, np.ndarray] = {}
    rng = np.random.default_rng(0)
    for name in lay:
        shape = tuple(lay[name].shape)
        if len(shape) > 1 and shape not in by_shape:
            by_shape[shape] = (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.05))

    def get(name: str) -> np.ndarray:
        shape = tuple(lay[name].shape)
        if len(shape) == 1:
            return (np.zeros if name.endswith(".bias") else np.ones)(shape, np.float32)
        return by_shape[shape]
    return get


def blockc_seconds(path: str, cfg: blockc.GPTConfig, t: str, get, threads: int) -> float:
    n0 = blockc.get_num_threads()
    blockc.set_num_threads(threads)
    try:
        t0 = time.perf_counter()
        gm.save_streaming(path, cfg, t, get)
        return time.perf_counter() - t0
    finally:
        blockc.set_num_threads(n0)


def llama_seconds(llama_cpp, src: str, path: str, t: str, threads: int) -> Optional[float]:
    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{_PURE.get(t, t)}", None)
    if ftype is None:
        return None
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype, p.nthread, p.pure = ftype, threads, t in _PURE
    t0 = time.perf_counter()
    rc = llama_cpp.llama_model_quantize(src.encode(), path.encode(), p)
    return time.perf_counter() - t0 if rc == 0 else None


def _quiet_llama(llama_cpp) -> None:
    """llama.cpp's log (a line per tensor) silenced."""
    cb = llama_cpp.llama_log_callback(lambda level, text, data: None)
    llama_cpp.llama_log_set(cb, None)
    _quiet_llama.keep = cb  # (the callback must outlive the call)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="llama1b", choices=sorted(SIZES))
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dir", default=os.path.join(os.path.expanduser("~"), ".cache",
                                                  "blockc-bench-quantise"))
    args = ap.parse_args(argv)
    try:
        import llama_cpp
        _quiet_llama(llama_cpp)
    except ImportError:
        llama_cpp = None
    cfg = SIZES[args.size]
    threads = [int(t) for t in args.threads.split(",")]
    types = [t.upper() for t in args.types.split(",")]
    os.makedirs(args.dir, exist_ok=True)
    t_start = cpu_times()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start; "
          f"{steal_share(None)} steal since boot; ISA {blockc.get_isa()}")
    print("llama.cpp: " + (f"llama-cpp-python {llama_cpp.__version__} (llama_model_quantize "
                           "from an F16 file)" if llama_cpp else
                           "not installed (pip install llama-cpp-python)"))
    print(f"model: {args.size}, {blockc.gpt_parameter_count(cfg) / 1e9:.2f}B parameters; "
          "seconds to write the file (blockc from float32 in memory); ratio = llama.cpp / "
          "blockc (above 1: blockc faster)\n")
    get = weights(cfg)
    src = os.path.join(args.dir, f"{args.size}-F16.gguf")
    if llama_cpp is not None:
        gm.save_streaming(src, cfg, "F16", get)
    out = os.path.join(args.dir, "out.gguf")
    head = "| type | MB |" + "".join(f" blockc {n}T s | llama.cpp {n}T s | ratio |"
                                      for n in threads)
    print(head)
    print("|---|---|" + "---|---|---|" * len(threads))
    for t in types:
        cells = []
        size = 0.0
        for n in threads:
            b = blockc_seconds(out, cfg, t, get, n)
            size = os.path.getsize(out) / 1e6
            ll = llama_seconds(llama_cpp, src, out, t, n) if llama_cpp else None
            cells.append(f" {b:.1f} | " + (f"{ll:.1f} | {ll / b:.2f} |" if ll else "n/a | n/a |"))
        print(f"| {t} | {size:,.0f} |" + "".join(cells), flush=True)
    for p in (out, src):
        if os.path.exists(p):
            os.unlink(p)
    shutil.rmtree(args.dir, ignore_errors=True)
    print(f"\nload average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end; "
          f"steal {steal_share(t_start)} during the run")
    return 0


#: the types a float file holds
FLOAT_TYPES = ("F32", "F16", "BF16")


def _float_run() -> bool:
    """Whether every type asked for is a float type: that quick table of rounding alone is
    recorded in its own section, "quantise-float", beside the quantised types' "quantise"."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--types", default=",".join(TYPES))
    a, _ = ap.parse_known_args()
    return all(t in FLOAT_TYPES for t in a.types.split(","))


if __name__ == "__main__":
    run_bench(main, "results/quantise.md", "quantise-float" if _float_run() else "quantise")
