"""Benchmark: generating tokens (decode), blockc against its peers on the same weights.

GPT-2 small (random N(0, 0.02) weights, 50,257-token vocabulary), a prompt, then
--new greedy tokens through a KV cache, timed from the first generated token
(the prompt is prefilled untimed), at two context lengths (the prompt sized so
that prompt + new tokens reach ~128 and ~1000 positions), on 1 and 2 threads:

  blockc       float32, bfloat16 and q8_0 weights (m.astype), m(token, cache=...)
  PyTorch      eager, the chapter's modules (tests/support/torch_ref.py) with a
               preallocated KV cache, float32 and bfloat16
  llama.cpp    through llama-cpp-python, GGUF files written from the same model
               (benches/gguf_export.py): f32, f16, bf16 and q8_0 (q8_0: blockc's own
               blocks, so the same int8 weights); when llama-cpp-python and gguf
               are installed

Engines alternate within each round (a busy neighbour slows all alike); every
figure is the median of --repeats rounds. The read bandwidth of this machine is
measured in the same run (benches/machine.py) and every row is also given as a
percentage of its bandwidth bound: bandwidth / bytes one decode step reads (the
weights, stored as that row's precision, plus the KV cache at the mean position).
Then one row with a busy neighbour (a second process spinning on a core), and
blockc.ops.linear at M=1 streaming a 1 x 768 by 768 x 50,257 float32 product
against NumPy.

    python benches/bench_decode.py                  # the table (about 10 minutes)
    python benches/bench_decode.py --layers 4 --new 32 --repeats 1   # a quick look

With --docs the output also replaces the "decode" section of docs/speed.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional

import numpy as np

import blockc
import support_path  # noqa: F401  (tests/support: the PyTorch reference)
from doc_section import run as run_bench  # noqa: E402
from bench_linear import burst  # noqa: E402
from machine import read_bandwidth  # noqa: E402

PRECISIONS = ("float32", "bfloat16", "q8_0")


def blockc_runner(m: "blockc.GPT", prompt: np.ndarray, new: int) -> Callable[[], float]:
    """A callable: prefill the prompt (untimed), then time `new` greedy steps; seconds."""
    def run() -> float:
        cache = m.new_cache(1, prompt.shape[1] + new)
        tok = np.argmax(m(prompt, cache=cache)[:, -1], axis=-1)[:, None]
        t0 = time.perf_counter()
        for _ in range(new):
            tok = np.argmax(m(tok, cache=cache)[:, -1], axis=-1)[:, None]
        return time.perf_counter() - t0
    return run


def torch_runner(torch, tm, prompt: np.ndarray, new: int) -> Callable[[], float]:
    ids = torch.as_tensor(prompt)

    @torch.no_grad()
    def run() -> float:
        cache = tm.new_cache(1, prompt.shape[1] + new)
        tok = tm(ids, cache, 0, last_only=True)[:, -1].argmax(-1, keepdim=True)
        start = prompt.shape[1]
        t0 = time.perf_counter()
        for _ in range(new):
            tok = tm(tok, cache, start, last_only=True)[:, -1].argmax(-1, keepdim=True)
            start += 1
        return time.perf_counter() - t0
    return run


def llama_runner(llm, prompt: np.ndarray, new: int) -> Callable[[], float]:
    ids = [int(i) for i in prompt[0]]

    def run() -> float:
        llm.reset()
        llm.eval(ids)
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t0 = time.perf_counter()
        for _ in range(new):
            llm.eval([tok])
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        return time.perf_counter() - t0
    return run


def step_bytes(m: "blockc.GPT", mean_pos: float) -> float:
    """Bytes one decode step reads: every tensor but the embedding tables (one row of
    each; a tied head reads the token table whole), and the keys and values of every
    layer at the mean position."""
    cfg = m.config
    weights = m.nbytes - (cfg.context - 1) * cfg.width * 4 * (cfg.positions == "learned")
    if not cfg.tie_weights:  # the token table as stored (packed in the model's dtype)
        weights -= m.layout["token.weight"].nbytes * (cfg.vocab - 1) // cfg.vocab
    kv = 2 * cfg.layers * mean_pos * cfg.kv_heads_ * cfg.head_dim_ * 4
    return weights + kv


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--new", type=int, default=128, help="generated tokens per run (128)")
    ap.add_argument("--contexts", default="128,1000", help="contexts reached (128,1000)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-peers", action="store_true", help="blockc only")
    ap.add_argument("--no-busy", action="store_true", help="skip the busy-neighbour row")
    args = ap.parse_args(argv)
    contexts = [int(c) for c in args.contexts.split(",")]
    thread_counts = [int(t) for t in args.threads.split(",")]

    torch = llama_cpp = None
    if not args.no_peers:
        try:
            import torch
        except ImportError:
            pass
        try:
            import gguf  # noqa: F401
            import llama_cpp
            from gguf_export import write_gpt2
        except ImportError:
            llama_cpp = None

    cfg = blockc.GPTConfig.preset("gpt2", layers=args.layers)
    m32 = blockc.GPT.random(cfg, seed=0)
    models = {"float32": m32, "bfloat16": m32.astype("bfloat16"), "q8_0": m32.astype("q8_0")}
    bw = read_bandwidth()
    try:
        load = f"load average {os.getloadavg()[0]:.2f} at the start; "
    except (AttributeError, OSError):
        load = ""
    print(f"{load}GPT-2 small widths: V={cfg.vocab} D={cfg.width} H={cfg.heads} L={cfg.layers}, "
          f"{blockc.gpt_parameter_count(cfg):,} parameters, random weights; blockc ISA "
          f"{blockc.get_isa()}")
    print("read bandwidth (benches/machine.py): " + (", ".join(
        f"{t} thread{'s' if t > 1 else ''} {g:.1f} GB/s" for t, g in bw.items()) or "n/a"))
    sizes = ", ".join(f"{k} {m.nbytes / 1e6:.0f} MB" for k, m in models.items())
    print(f"blockc weights: {sizes}; {args.new} new tokens per run, median of {args.repeats} "
          "rounds, engines alternating")

    tmp = tempfile.TemporaryDirectory()
    ggufs: Dict[str, str] = {}
    if llama_cpp is not None:
        for kind, src in (("f32", m32), ("f16", m32), ("bf16", m32), ("q8_0", models["q8_0"])):
            ggufs[kind] = os.path.join(tmp.name, f"gpt2-{kind}.gguf")
            write_gpt2(src, ggufs[kind], kind)
        print(f"llama.cpp {llama_cpp.__version__} (llama-cpp-python), GGUF from the same "
              "weights: f32, f16, bf16, q8_0 (blockc's own q8_0 blocks)")
    else:
        print("llama.cpp: not installed (pip install llama-cpp-python gguf)")
    tms = {}
    if torch is not None:
        from torch_ref import GPT as TorchGPT
        t32 = TorchGPT.like(cfg, m32.state_dict(keep_tied=True))
        tms = {"float32": t32, "bfloat16": TorchGPT.like(cfg, m32.state_dict(keep_tied=True)).to(torch.bfloat16)}
        print(f"PyTorch {torch.__version__} eager, float32 and bfloat16")

    rows = []
    rng = np.random.default_rng(1)
    for ctx in contexts:
        prompt = rng.integers(0, cfg.vocab, size=(1, max(1, ctx - args.new)))
        mean_pos = prompt.shape[1] + args.new / 2
        for th in thread_counts:
            blockc.set_num_threads(th)
            if torch is not None:
                torch.set_num_threads(th)
            runners = {}
            for p in PRECISIONS:
                runners[("blockc", p)] = blockc_runner(models[p], prompt, args.new)
            for p, tm in tms.items():
                runners[("PyTorch", p)] = torch_runner(torch, tm, prompt, args.new)
            llms = []
            for kind, path in ggufs.items():
                llm = llama_cpp.Llama(model_path=path, n_ctx=ctx + 8, n_batch=ctx + 8, n_threads=th,
                                      n_threads_batch=th, verbose=False)
                llms.append(llm)
                runners[("llama.cpp", kind)] = llama_runner(llm, prompt, args.new)
            for fn in runners.values():  # warm-up
                fn()
            times: Dict[tuple, List[float]] = {k: [] for k in runners}
            keys = list(runners)
            for r in range(args.repeats):
                for k in (keys if r % 2 == 0 else keys[::-1]):
                    times[k].append(runners[k]())
            for k in keys:
                rate = args.new / statistics.median(times[k])
                rows.append((ctx, th, k[0], k[1], rate))
            del llms

    def rate_of(ctx, th, engine, prec):
        for r in rows:
            if r[:4] == (ctx, th, engine, prec):
                return r[4]
        return None

    same = {"float32": "f32", "bfloat16": "f16", "q8_0": "q8_0"}
    print()
    print("| context | threads | engine | weights | tokens/s | % of bound | / llama.cpp | / PyTorch f32 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for ctx, th, engine, prec, rate in rows:
        bound = ""
        if engine == "blockc" and th in bw:
            b = bw[th] * 1e9 / step_bytes(models[prec], ctx - args.new / 2)
            bound = f"{100 * rate / b:.0f}%"
        vs_l = vs_t = ""
        if engine == "blockc":
            lr = rate_of(ctx, th, "llama.cpp", same[prec])
            tr = rate_of(ctx, th, "PyTorch", "float32")
            vs_l = f"{rate / lr:.2f}x ({same[prec]})" if lr else ""
            vs_t = f"{rate / tr:.2f}x" if tr else ""
        print(f"| {ctx} | {th} | {engine} | {prec} | {rate:.1f} | {bound} | {vs_l} | {vs_t} |")
    print("% of bound: tokens/s over read bandwidth / bytes a step reads (that precision's "
          "weights and the KV cache); / llama.cpp: against llama.cpp at the same size of "
          "weights (bfloat16 against f16); > 1 means blockc is faster")

    if not args.no_busy:
        spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            time.sleep(0.5)
            prompt = rng.integers(0, cfg.vocab, size=(1, 16))
            fn = blockc_runner(m32, prompt, args.new)
            res = {}
            for th in (1, 2):
                blockc.set_num_threads(th)
                fn()
                res[th] = []
            for r in range(args.repeats):
                for th in ((1, 2) if r % 2 == 0 else (2, 1)):
                    blockc.set_num_threads(th)
                    res[th].append(args.new / fn())
        finally:
            spin.kill()
            spin.wait()
        one, two = (statistics.median(res[t]) for t in (1, 2))
        print()
        print(f"busy neighbour (a process spinning on a core), blockc float32, context ~144: "
              f"1 thread {one:.1f} tokens/s, 2 threads {two:.1f} tokens/s (2 / 1: {two / one:.2f})")
    blockc.set_num_threads(0)

    # ops.linear at M = 1: a pure weight stream, larger than any cache. Each side runs
    # in bursts of consecutive calls after a pause (OpenBLAS's threads keep spinning for
    # 0.1 s after a call and would take the cores from the other side), alternating.
    rs = np.random.default_rng(2)
    w = rs.standard_normal((50257, 768), dtype=np.float32)
    x = rs.standard_normal((1, 768), dtype=np.float32)

    tb, tn = [], []
    for r in range(2 * args.repeats + 1):
        tb.append(burst(lambda: blockc.ops.linear(x, w)))
        tn.append(burst(lambda: w @ x[0]))
    gb = w.nbytes / 1e9
    b, n = gb / statistics.median(tb), gb / statistics.median(tn)
    top = max(bw.values()) if bw else float("nan")
    print(f"ops.linear 1 x 768 @ (50257 x 768)^T, {blockc.get_num_threads()} threads: blockc "
          f"{b:.1f} GB/s ({100 * b / top:.0f}% of {top:.1f} GB/s), NumPy {n:.1f} GB/s "
          "(alternating bursts after a pause, benches/bench_linear.py)")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    run_bench(main, "speed.md", "decode")
