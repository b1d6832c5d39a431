"""Benchmark: the cost of one ``blockc.block_forward`` call, Python path included.

At the book's toy size (128_Block: 4 positions, D=8, 2 heads, F=32) the work is
tiny, so this measures the call path: validation, the cached C view of the
weights, the per-thread workspace, the output allocation. Peers measured in the
same run, same weights, same input:

  C floor        the bare cffi call to bc_block_forward (no Python checks)
  blockc         block_forward with the PreparedBlock blockc.prepare returns
  blockc dict    block_forward with a plain dict (validated on every call)
  numpy oracle   blockc.reference.block.block_forward in float32
  torch          the same pre-norm RMS block in PyTorch eager (if installed), on
                 --torch-threads threads (default 1: at the toy size more threads
                 only add overhead, and they fight blockc's threads for 2 cores)

Each figure is the median of --repeats timings of --number calls, per call.
Ratios are peer time / blockc time (> 1: blockc is faster).

    python benches/bench_engine_call.py
    python benches/bench_engine_call.py --d-model 768 --heads 12 --seq 128 --number 20

With --docs the output also replaces the "engine-call" section of docs/results/kernels.md.
"""
from __future__ import annotations

import argparse
import statistics
import timeit

import numpy as np

import blockc
import support_path  # noqa: F401  (tests/support: the PyTorch reference)
from doc_section import run as run_bench  # noqa: E402
from blockc import engine
from blockc._native import cptr, fptr, lib
from blockc.reference import block as ref


def per_call(fn, number, repeats):
    fn()
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeats)) / number


def torch_block(torch, cfg, W):
    """The same block in PyTorch eager (tests/support/torch_ref.py)."""
    from torch_ref import Block
    return Block.like(cfg, W)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d-model", type=int, default=8)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--number", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--torch-threads", type=int, default=1)
    args = ap.parse_args(argv)

    cfg = blockc.BlockConfig(d_model=args.d_model, n_heads=args.heads, d_ff=4 * args.d_model)
    W = blockc.init_block(cfg, 42, "msvc")
    plain = dict(W)
    x = np.random.default_rng(0).uniform(-1, 1, (args.batch, args.seq, args.d_model)).astype(np.float32)
    y = np.empty_like(x)
    p = blockc.prepare(W, cfg)
    work, n = engine.workspace(cfg, args.batch, args.seq)
    yp, xp = fptr(y), cptr(x)
    want = ref.block_forward(x, W, cfg)
    np.testing.assert_allclose(blockc.block_forward(x, W, cfg), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())

    rows = [
        ("C floor", lambda: lib.bc_block_forward(yp, xp, cfg.c_config, p.c_weights, args.batch, args.seq, work, n)),
        ("blockc", lambda: blockc.block_forward(x, p, cfg)),
        ("blockc dict", lambda: blockc.block_forward(x, plain, cfg)),
        ("numpy oracle", lambda: ref.block_forward(x, W, cfg, np.float32)),
    ]
    try:
        import torch
        torch.set_num_threads(args.torch_threads)
        m = torch_block(torch, cfg, W)
        xt = torch.from_numpy(x)
        np.testing.assert_allclose(m(xt).detach().numpy(), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())

        def run_torch():
            with torch.no_grad():
                return m(xt).numpy()
        rows.append(("torch eager", run_torch))
    except ImportError:
        pass

    print(f"block_forward per call: B={args.batch} T={args.seq} D={cfg.d_model} H={cfg.n_heads} "
          f"F={cfg.d_ff}; median of {args.repeats} x {args.number} calls")
    times = {name: per_call(fn, args.number, args.repeats) for name, fn in rows}
    base = times["blockc"]
    print(f"  {'':14} {'per call':>12} {'vs blockc':>10}")
    for name, t in times.items():
        print(f"  {name:14} {t * 1e6:10.2f} us {t / base:9.2f}x")
    print(f"  Python path overhead: {(base - times['C floor']) * 1e6:.2f} us per call")


if __name__ == "__main__":
    run_bench(main, "results/kernels.md", "engine-call")
