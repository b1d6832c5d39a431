"""Benchmark: one transformer block, blockc against the NumPy oracle and PyTorch eager.

One run, one table. Every row times the three implementations interleaved
(round-robin, so a noisy neighbour hurts all of them alike) and reports the
median of --repeats rounds after a warm-up; the ratio columns are
peer time / blockc time (> 1: blockc is faster).

PyTorch runs on its default thread count, except on the toy row where it is
fastest on one thread.

Rows:
  toy       the book's block (T=4, D=8, 2 heads, d_ff=32; RMSNorm, no biases), per call
  gpt2-256  GPT-2 style (LayerNorm, biases, GELU-tanh), causal, T=256, D=512, 8 heads, d_ff=2048
  gpt2-1024 GPT-2 small block, causal, T=1024, D=768, 12 heads, d_ff=3072
  linear    blockc.ops.linear, x (1024, 768) @ w (3072, 768)^T, in GFLOP/s, vs NumPy's matmul
then the same three blocks on one thread each, in CPU time (needs threadpoolctl to
hold NumPy's BLAS to one thread), which a busy machine distorts far less; then the
memory check: one GPT-2 style causal block at T=8192, D=768, 12 heads
(in a child process) must stay under 16*T*D floats of extra memory, output included,
and the peak RSS of this process.

    python benches/bench_block.py                 # everything (a minute or two)
    python benches/bench_block.py --repeats 5 --no-memory

NumPy's OpenBLAS: this machine's environment may set OPENBLAS_CORETYPE, which
slows current NumPy; for the comparison run with it unset, e.g.
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benches/bench_block.py

With --docs the output also replaces the "block" section of docs/results/kernels.md.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

import blockc
import support_path  # noqa: F401  (tests/support: the PyTorch reference)
from doc_section import run as run_bench  # noqa: E402
from blockc import ops
from blockc.reference import block as ref
from machine import cpu_name  # noqa: E402


def interleaved(fns, repeats, inner=1, rounds=3, clock=time.perf_counter):
    """Median seconds per call of each fn: `rounds` rounds, each timing every fn
    `repeats` times in a row after one untimed call (so one library's idle
    threads, still spinning after its last call, do not land in the other's
    timings), the medians taken over all rounds."""
    times = [[] for _ in fns]
    per = max(1, repeats // rounds)
    for _ in range(rounds):
        for i, f in enumerate(fns):
            f()
            for _ in range(per):
                t0 = clock()
                for _ in range(inner):
                    f()
                times[i].append((clock() - t0) / inner)
    return [statistics.median(t) for t in times]


def torch_block(torch, cfg, W):
    """The same block in PyTorch eager (tests/support/torch_ref.py), fed the same weights."""
    from torch_ref import Block
    return Block.like(cfg, W)


SHAPES = [
    ("toy (T=4, D=8, 2 heads, d_ff=32)", dict(d_model=8, n_heads=2, d_ff=32), 4, "msvc"),
    ("T=256, D=512, 8 heads, d_ff=2048, causal",
     dict(d_model=512, n_heads=8, d_ff=2048, norm="layer", causal=True), 256, "normal"),
    ("GPT-2 small block, T=1024, causal",
     dict(d_model=768, n_heads=12, d_ff=3072, norm="layer", causal=True), 1024, "normal"),
]


def with_biases(W, cfg, rng):
    """GPT-2 style: biases on every linear (init_block's 'normal' may leave them out)."""
    W = dict(W)
    d, f = cfg.d_model, cfg.d_ff
    for key, n in (("attn.qkv.bias", 3 * d), ("attn.proj.bias", d), ("up.bias", f), ("down.bias", d)):
        W.setdefault(key, (rng.standard_normal(n) * 0.02).astype(np.float32))
    for key in ("ln1.weight", "ln2.weight", "ln1.bias", "ln2.bias"):
        if cfg.norm == "layer":
            W.setdefault(key, (1.0 + 0.1 * rng.standard_normal(d) if key.endswith("weight")
                               else 0.1 * rng.standard_normal(d)).astype(np.float32))
    return W


def bench_blocks(args, torch, rows, clock=time.perf_counter, single=False):
    rng = np.random.default_rng(0)
    for label, kw, t, rand in SHAPES:
        cfg = blockc.BlockConfig(**kw)
        W = blockc.init_block(cfg, seed=42, rand=rand)
        if rand == "normal":
            W = with_biases(W, cfg, rng)
        W = blockc.prepare(W, cfg)  # validated once, as a library user calling it in a loop would
        x = rng.standard_normal((t, cfg.d_model)).astype(np.float32)
        W64 = {k: np.asarray(v, np.float32) for k, v in W.items()}
        fns = [lambda: blockc.block_forward(x, W, cfg),
               lambda: ref.block_forward(x, W64, cfg, dtype=np.float32)]
        if torch is not None:
            # at the toy size PyTorch is fastest on one thread (more only add overhead)
            torch.set_num_threads(1 if single or t * cfg.d_model < 10_000 else args.torch_threads)
            m = torch_block(torch, cfg, W)
            xt = torch.from_numpy(x)[None]  # (1, T, D)

            def run_torch():
                with torch.no_grad():
                    return m(xt)
            fns.append(run_torch)
            want = run_torch().numpy()[0]
            got = blockc.block_forward(x, W, cfg)
            err = float(np.abs(got - want).max())
        else:
            err = float("nan")
        small = t * cfg.d_model < 10_000
        inner = 200 if small else 1
        reps = args.repeats * (3 if small else 1)
        times = interleaved(fns, reps, inner, clock=clock)
        rows.append((label, times, err))
        if torch is not None:
            torch.set_num_threads(args.torch_threads)


def bench_linear(args, rows):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1024, 768)).astype(np.float32)
    w = rng.standard_normal((3072, 768)).astype(np.float32)
    flop = 2 * 1024 * 768 * 3072
    tb, tn = interleaved([lambda: ops.linear(x, w), lambda: x @ w.T], args.repeats * 2)
    return flop / tb / 1e9, flop / tn / 1e9


MEMORY_CHILD = r"""
import sys, gc, numpy as np, blockc
T, D, H = 8192, 768, 12
cfg = blockc.BlockConfig(d_model=D, n_heads=H, d_ff=4 * D, norm="layer", causal=True)
W = blockc.init_block(cfg, seed=1, rand="normal")
x = np.random.default_rng(0).standard_normal((T, D)).astype(np.float32)
gc.collect()
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to the current RSS
base = status("VmRSS:")
y = blockc.block_forward(x, W, cfg)
peak = status("VmHWM:")
assert np.isfinite(y).all()
print(base, peak)
"""


def memory_check():
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", MEMORY_CHILD], capture_output=True, text=True,
                       env=env, timeout=600)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1:]
    base, peak = map(int, r.stdout.split())
    return peak - base, None


def fmt_t(s):
    return f"{s * 1e6:.1f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def print_table(rows, with_err):
    """The markdown table of (label, (blockc, NumPy[, PyTorch]) times, max abs diff) rows;
    with_err adds the max-abs-diff column."""
    cols = ["shape", "blockc", "NumPy", "PyTorch eager", "NumPy / blockc", "PyTorch / blockc"]
    if with_err:
        cols.append("max abs diff vs PyTorch")
    print("| " + " | ".join(cols) + " |")
    print("|" + " --- |" * len(cols))
    for label, times, err in rows:
        tb, tn = times[0], times[1]
        tt = times[2] if len(times) > 2 else None
        print(f"| {label} | {fmt_t(tb)} | {fmt_t(tn)} | {fmt_t(tt) if tt else '-'} | "
              f"{tn / tb:.2f}x | {(f'{tt / tb:.2f}x') if tt else '-'} |"
              + (f" {err:.1e} |" if with_err else ""))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-single", action="store_true",
                    help="skip the one-thread CPU-time table (needs threadpoolctl for NumPy)")
    args = ap.parse_args(argv)
    args.torch_threads = 0
    torch = None
    if not args.no_torch:
        try:
            import torch  # noqa: F811
            args.torch_threads = torch.get_num_threads()
        except ImportError:
            torch = None
    try:
        from threadpoolctl import threadpool_info
        blas = ", ".join(f"{i['internal_api']} {i.get('architecture', '')} x{i['num_threads']}"
                         for i in threadpool_info() if i["user_api"] == "blas")
    except ImportError:
        blas = "numpy BLAS (threadpoolctl not installed)"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores, load average {load:.2f} at the start; "
          f"blockc {blockc.get_isa()} "
          f"x{blockc.get_num_threads()} threads; NumPy {np.__version__} ({blas})"
          + (f"; PyTorch {torch.__version__} x{torch.get_num_threads()} threads (x1 for the toy row)"
             if torch else "; PyTorch absent"))
    rows = []
    bench_blocks(args, torch, rows)
    gf_b, gf_n = bench_linear(args, rows)
    single = []
    if not args.no_single:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            threadpool_limits = None
        if threadpool_limits is not None:
            before = blockc.get_num_threads()
            blockc.set_num_threads(1)
            with threadpool_limits(1):
                bench_blocks(args, torch, single, clock=time.process_time, single=True)
            blockc.set_num_threads(before)
    print()
    print_table(rows, with_err=True)
    print(f"| linear 1024x768 -> 3072 | {gf_b:.0f} GFLOP/s | {gf_n:.0f} GFLOP/s | - | "
          f"blockc at {100 * gf_b / gf_n:.0f}% of NumPy | - | - |")
    if single:
        print()
        print("One thread each, CPU time per call (process time: what a busy neighbour "
              "cannot inflate much):")
        print()
        print_table(single, with_err=False)
    if not args.no_memory:
        extra, err = memory_check()
        limit = 16 * 8192 * 768 * 4
        if extra is None:
            print(f"\nmemory check failed: {err}")
        else:
            print(f"\nT=8192, D=768, 12 heads, causal block: peak extra memory {extra / 2**20:.0f} MiB "
                  f"(output included) vs limit 16*T*D floats = {limit / 2**20:.0f} MiB: "
                  f"{'OK' if extra < limit else 'OVER'} "
                  f"(one head's T x T scores alone would be {8192 * 8192 * 4 / 2**20:.0f} MiB)")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this benchmark process: {peak:.0f} MiB")


if __name__ == "__main__":
    run_bench(main, "results/kernels.md", "block")
