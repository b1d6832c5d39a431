"""Benchmark: the GIL is released. Two Python threads on two cores against one
thread doing both calls, for block_forward and the GPT, in one run.

The kernels' own threads are pinned to one (OMP_NUM_THREADS=1, set
before blockc loads) so that the two Python threads are the only parallelism:
with the GIL released they overlap, and two calls in two threads take about
the time of one call; with the GIL held they would take the time of two.

Peers in the same run calibrate the machine: a NumPy matmul (releases the GIL,
the best a shared machine allows right now) and a pure-Python loop (holds it: 1.0).

Each figure is the median of --repeats wall-clock timings of the pair of calls.
speed-up = one thread / two threads (2.0 ideal on two free cores, 1.0 = no overlap).
Then, timing-free: the longest pause of a spinning Python thread while another
thread is inside one call (the GIL held: the whole call; released: noise).

    python benches/threads.py
    python benches/threads.py --repeats 21 --seq 256

With --docs the output also replaces the "threads" section of docs/reliability.md.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before blockc (its default thread count) and numpy (BLAS) load

import argparse
import statistics  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import blockc  # noqa: E402
import support_path  # noqa: E402,F401  (tests/support on sys.path)
from doc_section import run as run_bench  # noqa: E402
from gilprobe import pauses  # noqa: E402


def sized(call, ms):
    """The batch (a power of two, up to 256) at which one call takes about ms milliseconds."""
    b = 1
    while b < 256:
        t0 = time.perf_counter()
        call(b)
        if (time.perf_counter() - t0) * 1e3 >= ms:
            break
        b *= 2
    return b


def one_thread(f, g):
    t0 = time.perf_counter()
    f()
    g()
    return time.perf_counter() - t0


def two_threads(f, g):
    ready = threading.Barrier(3)

    def run(fn):
        ready.wait()
        fn()

    ts = [threading.Thread(target=run, args=(fn,)) for fn in (f, g)]
    for t in ts:
        t.start()
    ready.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def stall(name, call, repeats):
    res = [pauses(call) for _ in range(repeats)]
    gaps, cover = [r[0] for r in res], [r[1] for r in res]
    print(f"{name:<22} {statistics.median(gaps):>14.1%} {max(gaps):>10.1%} "
          f"{statistics.median(cover):>12.0%}")


def measure(name, f, g, repeats):
    f(), g()  # warm-up: workspaces, caches
    serial, parallel = [], []
    for _ in range(repeats):  # interleaved, so a noisy neighbour hits both alike
        serial.append(one_thread(f, g))
        parallel.append(two_threads(f, g))
    s, p = statistics.median(serial), statistics.median(parallel)
    print(f"{name:<22} {s * 1e3:10.1f} {p * 1e3:12.1f} {s / p:9.2f}")
    return s / p


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--seq", type=int, default=128, help="positions per call")
    ap.add_argument("--ms", type=float, default=100.0,
                    help="batch calls up to about this long (short calls measure scheduling noise)")
    a = ap.parse_args(argv)
    print(f"kernel threads per call: {blockc.get_num_threads()}, cores: {os.cpu_count()}, "
          f"median of {a.repeats}")
    print(f"{'call pair':<22} {'1 thread ms':>10} {'2 threads ms':>12} {'speed-up':>9}")

    a1, a2 = (np.random.default_rng(i).standard_normal((384, 384)) for i in range(2))
    measure("numpy matmul", lambda: [a1 @ a1 for _ in range(8)], lambda: [a2 @ a2 for _ in range(8)],
            a.repeats)
    measure("python loop", lambda: sum(i * i for i in range(300_000)),
            lambda: sum(i * i for i in range(300_000)), a.repeats)

    cfg = blockc.BlockConfig(d_model=256, n_heads=4, d_ff=1024)
    W = blockc.init_block(cfg, seed=0, rand="normal")
    rng = np.random.default_rng(0)
    b = sized(lambda b: blockc.block_forward(np.zeros((b, a.seq, 256), np.float32), W, cfg), a.ms)
    x1, x2 = (rng.standard_normal((b, a.seq, 256)).astype(np.float32) for _ in range(2))
    measure(f"block_forward B={b}", lambda: blockc.block_forward(x1, W, cfg),
            lambda: blockc.block_forward(x2, W, cfg), a.repeats)

    gcfg = blockc.GPTConfig(vocab=2048, context=max(a.seq, 1), width=256, heads=4, layers=2)
    m = blockc.GPT.random(gcfg, seed=0)
    gb = sized(lambda b: m(np.zeros((b, a.seq), np.int64)), a.ms)
    i1, i2 = (rng.integers(0, 2048, size=(gb, a.seq)) for _ in range(2))
    measure(f"GPT forward B={gb}", lambda: m(i1), lambda: m(i2), a.repeats)

    print("\na spinning Python thread while another thread is inside one call:")
    print("its longest pause (share of the call) and the share of the call it ran in")
    print(f"{'call':<22} {'pause median':>14} {'worst':>10} {'ran in':>12}")
    stall("python loop", lambda: sum(range(10_000_000)), a.repeats)  # holds the GIL: ~100%
    stall("block_forward", lambda: blockc.block_forward(x1, W, cfg), a.repeats)
    stall("GPT forward", lambda: m(i1), a.repeats)


if __name__ == "__main__":
    run_bench(main, "reliability.md", "threads")
