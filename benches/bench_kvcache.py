"""Benchmark: the KV cache's element type (issue 51) at a long context. A random
Llama-shaped model (q8_0 weights; width 512, 8 query heads of 64, ``--kv-heads`` K/V heads
(8), ``--layers`` layers (8), SwiGLU 1024, vocabulary 1024) is prefilled to ``--context`` -
``--new`` positions, then decodes ``--new`` tokens one at a time, once per cache type.
The default shape gives a decode step what a long context gives a real model: a cache
larger than the last-level cache (128 MiB of float32 keys and values at 4,096
positions, against 22 MiB of weights), so the step's time is the cache's reading; with
2 K/V heads and 4 layers (16 MiB) the whole step fits in a 32 MiB L3 and no cache type
reads faster than another.

  tokens/s     decode steps per second (best of --rounds rounds, the types
               alternating; each round truncates the cache back to the prompt)
  vs float32   that speed over the float32 cache's
  cache        the cache's bytes (KVCache.nbytes: keys and values, every layer)
  KL           mean KL of the decoded steps' next-token distributions against
               the float32 cache's (the same tokens fed to each)
  llama.cpp KL llama.cpp's own mean KL for the same cache type (llama-cpp-python:
               the model saved as an F32 GGUF, ``type_k`` = ``type_v`` = f32, f16,
               q8_0 or q4_0 with flash attention, which a quantised V cache needs),
               against its own f32 cache, on the same tokens decoded one at a time
               (one thread, plain CPU kernels: only its logits are used, not its
               speed); left out with --no-peer or without llama_cpp importable

Prints the CPU (lscpu's model name), the load average and the steal time over the run.

    python benches/bench_kvcache.py
    python benches/bench_kvcache.py --context 1024 --rounds 2 --no-peer

With --docs the output also replaces the "kvcache" section of docs/results/kvcache.md.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Dict, List, Optional

import numpy as np

import blockc
from blockc import GPT, GPTConfig
from doc_section import run as run_bench  # noqa: E402
from machine import cpu_name, cpu_times, steal_share  # noqa: E402

DTYPES = ("float32", "float16", "q8_0", "q4_0")
#: llama.cpp's cache type (a ggml type: GGML_TYPE_F32, F16, Q8_0, Q4_0) for each of blockc's
GGML_CACHE = {"float32": ("f32", 0), "float16": ("f16", 1), "q8_0": ("q8_0", 8),
              "q4_0": ("q4_0", 2)}


def mean_kl(p_logits: np.ndarray, q_logits: np.ndarray) -> float:
    """Mean over positions of KL(softmax(p) || softmax(q)), in float64."""
    p = np.asarray(p_logits, np.float64).reshape(-1, p_logits.shape[-1])
    q = np.asarray(q_logits, np.float64).reshape(-1, q_logits.shape[-1])
    lp = p - p.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    lq = q - q.max(-1, keepdims=True)
    lq -= np.log(np.exp(lq).sum(-1, keepdims=True))
    return float(np.mean(np.sum(np.exp(lp) * (lp - lq), axis=-1)))


def llama_cpp_logits(m: GPT, ids: np.ndarray, n0: int) -> Dict[str, np.ndarray]:
    """llama.cpp's logits of the decode steps n0.. of ``ids`` (1, T) for each cache type
    of GGML_CACHE: ``m`` saved as an F32 GGUF (its q8_0 weights dequantised, exactly),
    the prompt evaluated in batches of 512, then each token alone. Empty without
    llama_cpp (the reason printed)."""
    try:
        import llama_cpp
        from llama_peer import extra_bufts_off
    except ImportError as e:
        print(f"llama.cpp: not importable ({e}): no llama.cpp KL column")
        return {}
    toks = [int(t) for t in ids[0]]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model-f32.gguf")
        m.save_gguf(path, "F32")
        for d, (_, gt) in GGML_CACHE.items():
            with extra_bufts_off():  # plain CPU kernels: logits only, no speed is taken
                llm = llama_cpp.Llama(model_path=path, n_ctx=len(toks), n_batch=512,
                                      n_ubatch=512, flash_attn=True, type_k=gt, type_v=gt,
                                      logits_all=True, n_threads=1, n_threads_batch=1,
                                      verbose=False)
            llm.eval(toks[:n0])
            rows = []
            for t in range(n0, len(toks)):
                llm.eval([toks[t]])
                rows.append(np.array(llm.scores[t], np.float32))
            out[d] = np.stack(rows)[None]
            del llm
    print(f"llama.cpp {llama_cpp.__version__} (llama-cpp-python): F32 GGUF of the same "
          f"model, flash attention, cache types {', '.join(v[0] for v in GGML_CACHE.values())}")
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--kv-heads", type=int, default=8, help="K/V heads of 64 (8 query heads)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--no-peer", action="store_true", help="leave out llama.cpp's KL")
    args = ap.parse_args(argv)
    if args.kv_heads < 1 or 8 % args.kv_heads or args.layers < 1:
        ap.error("--kv-heads: a divisor of 8; --layers: at least 1")
    if args.threads:
        blockc.set_num_threads(args.threads)
    t0 = cpu_times()
    print(f"CPU: {cpu_name()}; load average {os.getloadavg()[0]:.2f} at the start; "
          f"blockc ISA {blockc.get_isa()}, {blockc.get_num_threads()} threads")
    cfg = GPTConfig(vocab=1024, context=args.context, width=512, heads=8, kv_heads=args.kv_heads,
                    layers=args.layers, d_ff=1024, norm="rms", activation="swiglu", positions="rope",
                    qkv_bias=False, out_bias=False, mlp_bias=False, tie_weights=False)
    m = GPT.random(cfg, seed=0, dtype="q8_0")
    n0 = args.context - args.new
    ids = np.random.default_rng(0).integers(0, cfg.vocab, size=(1, args.context))
    caches = {}
    for d in DTYPES:
        caches[d] = m.new_cache(1, args.context, dtype=d)
        m(ids[:, :n0], cache=caches[d], last_only=True)
    best = {d: float("inf") for d in DTYPES}
    logits = {}
    for r in range(args.rounds):
        for d in (DTYPES if r % 2 == 0 else DTYPES[::-1]):
            c = caches[d]
            c.truncate(0, n0)
            out = []
            start = time.perf_counter()
            for t in range(n0, args.context):
                out.append(m(ids[:, t:t + 1], cache=c))
            best[d] = min(best[d], time.perf_counter() - start)
            logits[d] = np.concatenate(out, axis=1)
    peer = {} if args.no_peer else llama_cpp_logits(m, ids, n0)
    print(f"\nmodel: width {cfg.width}, {cfg.heads} heads of {cfg.width // cfg.heads}, "
          f"{cfg.kv_heads} K/V heads, {cfg.layers} layers, q8_0 weights ({m.nbytes / 2**20:.1f} "
          f"MiB); {args.new} decode steps after {n0} positions, best of {args.rounds} rounds\n")
    head = "| cache | tokens/s | vs float32 | cache bytes | vs float32 | KL vs float32 |"
    if peer:
        head += " llama.cpp KL vs its f32 |"
    print(head)
    print("| --- " * (head.count("|") - 1) + "|")
    f32_rate, f32_bytes = args.new / best["float32"], caches["float32"].nbytes
    for d in DTYPES:
        rate, nb = args.new / best[d], caches[d].nbytes
        kl = mean_kl(logits["float32"], logits[d])
        row = (f"| {d} | {rate:.1f} | {rate / f32_rate:.2f}x | {nb / 2**20:.2f} MiB | "
               f"{nb / f32_bytes:.3f} | {kl:.2e} |")
        if peer:
            row += f" {mean_kl(peer['float32'], peer[d]):.2e} ({GGML_CACHE[d][0]}) |"
        print(row)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end; steal {steal_share(t0)} "
          f"of the run")
    return 0


if __name__ == "__main__":
    run_bench(main, "results/kvcache.md", "kvcache")
