"""Benchmark: long contexts. A causal GPT-2 small block (D=768, 12 heads, d_ff=3072,
LayerNorm, biases, GELU-tanh) at T = 1024 ... 16384, one sequence:

  block      blockc.block_forward, microseconds per token
  parts      the same computation as separate calls (layernorm, the q/k/v linear,
             attention, the output linear, layernorm, the up linear with GELU,
             the down linear): their sum against the fused block
  attention  blockc.ops.attention on (1, 12, T, 64), causal, in GFLOP/s and as a
             percentage of this machine's FMA peak (benches/machine.py, the same
             run), beside PyTorch's F.scaled_dot_product_attention when installed
  memory     the block's peak extra memory at T = 8192 and 16384 (a child process,
             /proc/self/status), against the 16 T D floats the block's own
             buffers need at most

Attention FLOPs are 4 T^2 D / 2 (the causal half of QK^T and PV). Median of
--repeats runs, blockc and PyTorch alternating.

    python benches/bench_long.py
    python benches/bench_long.py --sizes 1024,8192 --repeats 1

With --docs the output also replaces the "long" section of docs/results/kernels.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from typing import List, Optional

import numpy as np

import blockc
from blockc import ops
from doc_section import run as run_bench  # noqa: E402
from machine import fma_peak  # noqa: E402

D, H, F = 768, 12, 3072

MEMORY_CHILD = r"""
import sys, gc, numpy as np, blockc
T = int(sys.argv[1])
cfg = blockc.BlockConfig(d_model=768, n_heads=12, d_ff=3072, norm="layer", causal=True)
W = blockc.prepare(blockc.init_block(cfg, seed=1, rand="normal"), cfg)
x = np.random.default_rng(0).standard_normal((T, 768)).astype(np.float32)
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
print(peak - base)
"""


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,2048,4096,8192,16384")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-memory", action="store_true")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    try:
        import torch
        import torch.nn.functional as tf
    except ImportError:
        torch = None
    peak = fma_peak().get(blockc.get_num_threads())
    try:
        load = f"load average {os.getloadavg()[0]:.2f} at the start; "
    except (AttributeError, OSError):
        load = ""
    print(f"{load}blockc ISA {blockc.get_isa()}, {blockc.get_num_threads()} threads; FMA peak "
          f"(benches/machine.py) {peak:.1f} GFLOP/s" if peak else "FMA peak: n/a")
    cfg = blockc.BlockConfig(d_model=D, n_heads=H, d_ff=F, norm="layer", causal=True)
    rng = np.random.default_rng(0)
    W = {k: (v + rng.normal(0, 0.02, v.shape).astype(np.float32)) if k.endswith("bias") else v
         for k, v in blockc.init_block(cfg, seed=1, rand="normal").items()}
    P = blockc.prepare(W, cfg)
    print()
    print("| T | block, per token | parts, per token | parts / block | attention | % of peak | "
          "PyTorch SDPA | blockc / SDPA |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for t in sizes:
        x = rng.standard_normal((t, D)).astype(np.float32)

        def parts():
            a = ops.layernorm(x, W["ln1.weight"], W["ln1.bias"])
            qkv = ops.linear(a, W["attn.qkv.weight"], W["attn.qkv.bias"])
            q, k, v = (s.reshape(t, H, D // H).transpose(1, 0, 2)[None] for s in np.split(qkv, 3, axis=1))
            att = ops.attention(q, k, v, causal=True)[0].transpose(1, 0, 2).reshape(t, D)
            h = x + ops.linear(att, W["attn.proj.weight"], W["attn.proj.bias"])
            u = ops.gelu_tanh(ops.linear(ops.layernorm(h, W["ln2.weight"], W["ln2.bias"]),
                                         W["up.weight"], W["up.bias"]))
            return h + ops.linear(u, W["down.weight"], W["down.bias"])

        qh = rng.standard_normal((1, H, t, D // H)).astype(np.float32)
        kh, vh = qh[:, :, ::-1].copy(), qh * np.float32(0.5)
        fns = {"block": lambda: blockc.block_forward(x, P, cfg), "parts": parts,
               "attention": lambda: ops.attention(qh, kh, vh, causal=True)}
        if torch is not None:
            tq, tk, tv = (torch.from_numpy(a) for a in (qh, kh, vh))
            fns["sdpa"] = lambda: tf.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
        np.testing.assert_allclose(fns["block"](), parts(), rtol=1e-3, atol=1e-3)
        times = {k: [] for k in fns}
        for r in range(args.repeats):
            for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
                times[k].append(timed(fns[k]))
        med = {k: statistics.median(v) for k, v in times.items()}
        flops = 4.0 * t * t * D / 2
        att = flops / med["attention"] / 1e9
        pct = f"{100 * att / peak:.0f}%" if peak else ""
        sdpa = f"{flops / med['sdpa'] / 1e9:.1f} GFLOP/s" if "sdpa" in med else "n/a"
        ratio = f"{med['sdpa'] / med['attention']:.2f}x" if "sdpa" in med else ""
        print(f"| {t} | {med['block'] / t * 1e6:.1f} µs | {med['parts'] / t * 1e6:.1f} µs | "
              f"{med['parts'] / med['block']:.2f} | {att:.1f} GFLOP/s | {pct} | {sdpa} | {ratio} |")
    if not args.no_memory and sys.platform.startswith("linux"):
        print()
        for t in (8192, 16384):
            r = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(t)], capture_output=True,
                               text=True, timeout=1200)
            if r.returncode != 0:
                print(f"T={t}: memory check failed: {r.stderr.strip().splitlines()[-1:]}")
                continue
            extra, limit = int(r.stdout), 16 * t * D * 4
            print(f"T={t}: peak extra memory of one block {extra / 2**20:.0f} MiB (output "
                  f"included) against 16*T*D floats = {limit / 2**20:.0f} MiB: "
                  f"{'OK' if extra <= limit else 'OVER'}; one head's T x T scores would be "
                  f"{t * t * 4 / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    run_bench(main, "results/kernels.md", "long")
