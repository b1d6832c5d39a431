"""Benchmark: an integer format's products against its exact twin's (q8_0i against q8_0 by
default; --pair q5_k,q5_ki ...), one thread.

blockc.ops.linear on packed weights of SmolLM2-135M's MLP shapes (576 -> 1536,
1536 -> 576) and its tied head (576 -> 49,152), q8_0 (every int8 weight
converted to float, times the exact activation) against q8_0i (the activation
row quantised to 8 bits per block of 32, int8 x int8 into int32: vpdpbusd on
AVX-512 VNNI, pmaddubsw on AVX2), each instruction set forced in turn:

  decode   M = 1 row; --copies matrices of each MLP shape streamed in turn (8:
           more than a 2 MiB L2), so the figure is the weight stream, GB/s of
           weights read
  prefill  M = 128 rows (the GEMM), Gop/s (2 M K N over the time)

Times are the calling thread's CPU time (time.thread_time: a neighbour taking
the core does not count), best of --rounds, the engines alternating. The
relative RMS error of each against the exact product (float64, the same int8
weights, the exact activation) says what q8_0i trades. --pair names another exact
format and its integer twin (the same weights: q5_k,q5_ki, iq4_nl,iq4_nli, ...);
formats of whole super-blocks of 256 run on 768 -> 2048, 2048 -> 768 and 768 -> 49,152.

    python benches/bench_intdot.py [--rounds 5] [--copies 8] [--pair q5_k,q5_ki]
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Dict, List, Optional, Tuple

import numpy as np

import blockc
from blockc import ops
from blockc._enums import FORMATS
from machine import cpu_info  # noqa: E402

SHAPES = ((576, 1536), (1536, 576), (576, 49152))
#: the same roles for formats whose rows are whole super-blocks of 256
SHAPES_256 = ((768, 2048), (2048, 768), (768, 49152))


def _time(fn, reps: int) -> float:
    fn()
    t0 = time.thread_time()
    for _ in range(reps):
        fn()
    return (time.thread_time() - t0) / reps


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--copies", type=int, default=8, help="MLP matrices streamed in turn (8)")
    ap.add_argument("--pair", default="q8_0,q8_0i",
                    help="an exact format and its integer twin (q8_0,q8_0i)")
    args = ap.parse_args(argv)
    plain, integer = args.pair.split(",")
    if FORMATS[integer].ggml_type != FORMATS[plain].ggml_type or not FORMATS[integer].integer:
        ap.error(f"--pair: {integer} is not the integer twin of {plain}")
    shapes = SHAPES_256 if FORMATS[integer].whole else SHAPES
    wbytes = FORMATS[plain].block_bytes / FORMATS[plain].block  # the file's bytes: the same
    blockc.set_num_threads(1)
    have = blockc.runtime.ISAS.index(blockc.best_isa())
    isas = [i for i in ("avx2", "avx512") if blockc.runtime.ISAS.index(i) <= have] or ["generic"]
    name, flags = cpu_info()
    print(f"CPU: {name}; {' '.join(sorted(f for f in flags if 'vnni' in f)) or 'no VNNI'}; "
          f"load average {os.getloadavg()[0]:.2f} at the start")
    rng = np.random.default_rng(0)
    best: Dict[Tuple, float] = {}
    err: Dict[Tuple, float] = {}
    for c, oc in shapes:
        n = args.copies if oc * c < 4_000_000 else 1
        ws = [(rng.standard_normal((oc, c)) * 0.05).astype(np.float32) for _ in range(n)]
        packs = {dt: [ops.pack(w, dt) for w in ws] for dt in (plain, integer)}
        x1 = rng.standard_normal((1, c)).astype(np.float32)
        xp = rng.standard_normal((128, c)).astype(np.float32)
        exact = xp.astype(np.float64) @ packs[plain][0].unpack().T.astype(np.float64)
        for dt in packs:
            got = ops.linear(xp, packs[dt][0]).astype(np.float64)
            err[(c, oc, dt)] = float(np.sqrt(np.mean((got - exact) ** 2) / np.mean(exact ** 2)))
        for r in range(args.rounds):
            order = [(i, d) for i in isas for d in packs]
            for isa, dt in (order if r % 2 == 0 else order[::-1]):
                blockc.set_isa(isa)
                ps = packs[dt]
                dec = _time(lambda: [ops.linear(x1, p) for p in ps], max(2, 200 // n)) / n
                pre = _time(lambda: ops.linear(xp, ps[0]), 3 if oc > 10000 else 20)
                for k, t in (((c, oc, 1, isa, dt), dec), ((c, oc, 128, isa, dt), pre)):
                    best[k] = min(best.get(k, 1e9), t)
    blockc.set_isa("auto")
    blockc.set_num_threads(0)
    print(f"one thread, best of {args.rounds} rounds (thread CPU time); decode: GB/s of "
          f"weights ({args.copies} MLP matrices in turn), prefill: Gop/s at M = 128")
    print(f"| shape | M | ISA | {plain} | {integer} | {integer} / {plain} |")
    print("| --- | --- | --- | --- | --- | --- |")
    for c, oc in shapes:
        for m in (1, 128):
            for isa in isas:
                a, b = best[(c, oc, m, isa, plain)], best[(c, oc, m, isa, integer)]
                if m == 1:
                    fa, fb = (oc * c * wbytes / t / 1e9 for t in (a, b))
                    unit = "GB/s"
                else:
                    fa, fb = (2 * m * c * oc / t / 1e9 for t in (a, b))
                    unit = "Gop/s"
                print(f"| {c} -> {oc} | {m} | {isa} | {fa:.1f} {unit} | {fb:.1f} {unit} | {a / b:.2f}x |")
    print()
    print("relative RMS error against the exact product (float64, same weights, exact x):")
    for c, oc in shapes:
        print(f"  {c} -> {oc}: {plain} {err[(c, oc, plain)]:.1e}, "
              f"{integer} {err[(c, oc, integer)]:.1e}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
