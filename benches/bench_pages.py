"""Benchmark: the first write to a fresh output, on NumPy's huge pages and on small ones,
and a write to a kept block (no first writes at all).

A prompt's logits are a new array every call (1024 positions x 32,000 words:
131 MB); NumPy asks for transparent huge pages on every array of 4 MiB or more
(madvise MADV_HUGEPAGE), and blockc's outputs from 4 MiB on are advised back to
small pages (the C entry point bc_advise_small_pages) and, once an output has
been handed back, come from that kept block (blockc._native.output_empty on
bc_out_take / bc_out_give: its pages are mapped already). This bench writes such
an output once after allocating it three ways, in turn (alternating orders), with
about a second of blockc GEMM work between them (what sits between two prompts'
logits in a real run: under a hypervisor, memory freed and left alone for a while
is handed back to the host and must be fetched again on the next first write):
NumPy's, a fresh small-page block (every kept block released first), and a kept
block. Per way: the median and best wall seconds of the write, and the median
system (kernel) seconds.

Then a GPT forward of the Llama-shaped model of bench_llama.py at 1024 tokens,
all logits, one thread: wall and system seconds per call, as the library now
runs it, and with every kept block released before each call.

    python benches/bench_pages.py [--rounds 8] [--docs]

With --docs the output also replaces the "pages" section of docs/results/kernels.md.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

import blockc
from blockc import ops
from blockc._native import lib, output_empty
from bench_decode import Machine
from bench_llama import llama_config
from doc_section import run as run_bench

SHAPE = (1024, 32000)


def sys_seconds() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def first_write(alloc: Callable[[], np.ndarray]) -> Tuple[float, float]:
    """(wall, system) seconds to allocate an output and write every element once."""
    s0, t0 = sys_seconds(), time.perf_counter()
    a = alloc()
    a[...] = 1.0
    t, s = time.perf_counter() - t0, sys_seconds() - s0
    del a
    return t, s


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--forwards", type=int, default=3)
    args = ap.parse_args(argv)
    machine = Machine()
    blockc.set_num_threads(1)
    print(machine.header())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1024, 768), dtype=np.float32)
    w = ops.pack(rng.standard_normal((3072, 768), dtype=np.float32))

    def work(seconds: float = 1.0) -> None:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            ops.linear(x, w)

    def fresh() -> np.ndarray:
        lib.bc_out_release()
        return output_empty(SHAPE)

    ways: Dict[str, Callable[[], np.ndarray]] = {
        "np.empty (NumPy's huge pages)": lambda: np.empty(SHAPE, np.float32),
        "a fresh block (small pages)": fresh,
        "output_empty (a kept block)": lambda: output_empty(SHAPE),
    }
    got: Dict[str, List[Tuple[float, float]]] = {k: [] for k in ways}
    keys = list(ways)
    for r in range(args.rounds):
        for k in (keys if r % 2 == 0 else keys[::-1]):
            work()
            got[k].append(first_write(ways[k]))
    mb = np.prod(SHAPE) * 4 / 1e6
    print(f"\nfirst write to a fresh {SHAPE[0]} x {SHAPE[1]} float32 output ({mb:.0f} MB), "
          f"{args.rounds} alternating rounds, ~1 s of GEMM before each:")
    print("| allocation | median s | best s | median system s | median GB/s |")
    print("| --- | --- | --- | --- | --- |")
    med = {}
    for k, v in got.items():
        walls, syss = [t for t, _ in v], [s for _, s in v]
        med[k] = statistics.median(walls)
        print(f"| {k} | {med[k]:.3f} | {min(walls):.3f} | {statistics.median(syss):.3f} | "
              f"{mb / 1e3 / med[k]:.2f} |")
    a, b, c = keys
    print(f"huge / small pages, median: {med[a] / med[b]:.2f}x; fresh small pages / a kept "
          f"block: {med[b] / med[c]:.2f}x")

    cfg = llama_config(12)
    m = blockc.GPT.random(cfg, seed=0)
    seq = rng.integers(0, cfg.vocab, size=(1, 1024))
    m(seq[:, :64])
    print(f"\nGPT forward, Llama-shaped (V={cfg.vocab} D={cfg.width} L={cfg.layers}), 1024 tokens, "
          "1 thread, as the library runs it:")
    print("| logits | median s | median system s | tokens/s |")
    print("| --- | --- | --- | --- |")
    cases = (("all", False, False), ("all, kept blocks released before each call", False, True),
             ("last", True, False))
    runs: Dict[str, List[Tuple[float, float]]] = {name: [] for name, _, _ in cases}
    for r in range(args.forwards):
        for name, last, release in (cases if r % 2 == 0 else cases[::-1]):
            work(0.5)
            if release:
                lib.bc_out_release()
            s0, t0 = sys_seconds(), time.perf_counter()
            m(seq, last_only=last)
            runs[name].append((time.perf_counter() - t0, sys_seconds() - s0))
    for name, _, _ in cases:
        wall = statistics.median(t for t, _ in runs[name])
        print(f"| {name} | {wall:.2f} | "
              f"{statistics.median(s for _, s in runs[name]):.3f} | {1024 / wall:.0f} |")
    print(machine.footer())
    return 0


if __name__ == "__main__":
    run_bench(main, "results/kernels.md", "pages")
