"""Benchmark: the linear layer on GPT-2's shapes, blockc against NumPy's BLAS.

y = x @ w.T for x (M, in) and w (out, in), at M = 1, 64, 256, 1024 and the four
GPT-2 small projections (768 -> 2304 q/k/v, 768 -> 768 output, 768 -> 3072 up,
3072 -> 768 down), on 1 and 2 threads: blockc.ops.linear on the plain float32
array (row-major: the GEMM copies its blocks of w into panels on every call),
against NumPy's x @ w.T on the same array (OpenBLAS copies its blocks too);
and on ops.pack(w) (float32 panels, what the GPT stores: nothing copied),
against NumPy on a pre-transposed contiguous copy (its best case).

Each side runs in bursts of calls, the bursts alternating, with a pause of
0.25 s before each: OpenBLAS's threads keep spinning for about 0.1 s after a
call and would otherwise take the cores from whoever runs next (blockc's pool
would see a busy machine and back off). Medians of --repeats bursts. GFLOP/s
for M >= 64, GB/s of weights for M = 1.

    python benches/bench_linear.py
    python benches/bench_linear.py --threads 2 --sizes 64,1024

With --docs the output also replaces the "linear" section of docs/results/kernels.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable, List, Optional

import numpy as np

import blockc
from blockc import ops
from doc_section import run as run_bench  # noqa: E402

SHAPES = [(768, 2304, "qkv"), (768, 768, "proj"), (768, 3072, "up"), (3072, 768, "down")]


def blas_threads(n: int) -> Optional[Callable[[], None]]:
    """Hold NumPy's BLAS to n threads (threadpoolctl), returning the undo; None without it."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    lim = threadpool_limits(limits=n, user_api="blas")
    return lim.unregister if hasattr(lim, "unregister") else lim.restore_original_limits


def burst(fn: Callable[[], object], seconds: float = 0.15) -> float:
    """Seconds per call over a burst of back-to-back calls (after a 0.25 s pause)."""
    time.sleep(0.25)
    fn()
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        t = time.perf_counter() - t0
        if t > seconds and n >= 3:
            return t / n


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,64,256,1024")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    try:
        load = f"load average {os.getloadavg()[0]:.2f} at the start; "
    except (AttributeError, OSError):
        load = ""
    cfg = np.show_config(mode="dicts") if hasattr(np, "show_config") else None
    blas = ""
    try:
        info = cfg["Build Dependencies"]["blas"]
        blas = f"{info.get('name', '')} {info.get('version', '')}".strip()
    except (TypeError, KeyError):
        pass
    print(f"{load}blockc ISA {blockc.get_isa()}; NumPy {np.__version__} ({blas or 'BLAS'}); "
          f"median of {args.repeats} alternating bursts")
    rng = np.random.default_rng(0)
    print()
    print("| M | shape | threads | blockc, w | NumPy x @ w.T | ratio | blockc, pack(w) | "
          "NumPy x @ wt | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for th in threads:
        blockc.set_num_threads(th)
        undo = blas_threads(th)
        if undo is None and th == 1 and len(threads) > 1:
            print(f"(threadpoolctl missing: NumPy runs its own thread count on the {th}-thread rows)")
        for m in sizes:
            for c, oc, name in SHAPES:
                x = rng.standard_normal((m, c), dtype=np.float32)
                w = rng.standard_normal((oc, c), dtype=np.float32)
                wt = np.ascontiguousarray(w.T)
                p = ops.pack(w)
                fns = [lambda: ops.linear(x, w), lambda: x @ w.T,
                       lambda: ops.linear(x, p), lambda: x @ wt]
                times = [[] for _ in fns]
                for r in range(args.repeats):
                    order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
                    for k in order:
                        times[k].append(burst(fns[k]))
                med = [statistics.median(t) for t in times]
                if m == 1:
                    val = [f"{w.nbytes / t / 1e9:.1f} GB/s" for t in med]
                else:
                    val = [f"{2 * m * c * oc / t / 1e9:.1f} GF/s" for t in med]
                print(f"| {m} | {c} -> {oc} ({name}) | {th} | {val[0]} | {val[1]} | "
                      f"{med[1] / med[0]:.2f} | {val[2]} | {val[3]} | {med[3] / med[2]:.2f} |")
        if undo is not None:
            undo()
    blockc.set_num_threads(0)
    print("ratio: NumPy's time over blockc's (> 1: blockc is faster); w: a plain (out, in) "
          "array; pack(w): float32 panels; wt: w.T made contiguous beforehand")
    return 0


if __name__ == "__main__":
    run_bench(main, "results/kernels.md", "linear")
