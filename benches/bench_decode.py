"""Benchmark: generating tokens (decode), blockc against its peers on the same weights.

GPT-2 small (random N(0, 0.02) weights, 50,257-token vocabulary; or with --model
smollm2 the SmolLM2-135M shape: a Llama of 30 layers, width 576, 9 heads, 3 K/V
heads, d_ff 1536, a tied 49,152-token vocabulary), a prompt, then
--new greedy tokens through a KV cache, timed from the first generated token
(the prompt is prefilled untimed), at two context lengths (the prompt sized so
that prompt + new tokens reach ~128 and ~1000 positions), on 1 and 2 threads:

  blockc       float32, bfloat16, bfloat16i, float16, q8_0, q5_0, q8_0i, q4_0, q4_0i and q4_k
               weights (m.astype), m(token, cache=...) (q8_0i, q4_0i: q8_0's, q4_0's weights by
               integer dot products on 8-bit activations; bfloat16i: bfloat16's by bfloat16
               dot products, vdpbf16ps where the CPU has AVX512_BF16)
  PyTorch      eager, the chapter's modules (tests/support/torch_ref.py) with a
               preallocated KV cache, float32 and bfloat16
  llama.cpp    through llama-cpp-python, GGUF files written from the same model
               (benches/gguf_export.py): f32, f16, bf16 and q8_0 (q8_0: blockc's own
               blocks, so the same int8 weights), and q5_0, q4_0, q4_k (Q4_K) when
               blockc's runs (its save_gguf: the same blocks); when llama-cpp-python and gguf are
               installed

blockc runs each precision three ways, alternating with the rest: as chosen
("auto": each kernel family the variant that measured fastest, blockc.runtime),
and forced to each instruction set with FMA the CPU has (BLOCKC_ISA=avx2,
avx512): a column each, and auto / the best forced one.

Engines and thread counts alternate within each round (a busy neighbour slows all
alike); every figure is the median of --repeats rounds. --clock cpu times each run by the process's
CPU time instead of the wall clock (a neighbour taking the core then does not count;
meant for 1 thread, where every engine computes on one thread). The read bandwidth of this
machine is measured at the start of every round, for each thread count
(benches/machine.py ReadBound: a shared host's bandwidth moves from minute to minute), and
every row is also given as a percentage of its bandwidth bound: the rounds' median
bandwidth / bytes one decode step reads (the weights, stored as that row's precision, plus
the KV cache at the mean position). A second table puts each precision's 2 threads / 1
thread beside llama.cpp's and beside the bound's own ratio, all from the same rounds.
Then one row with a busy neighbour (a second process spinning on a core), and
blockc.ops.linear at M=1 streaming a 1 x 768 by 768 x 50,257 float32 product
against NumPy.

    python benches/bench_decode.py                  # the table (about 10 minutes)
    python benches/bench_decode.py --model smollm2  # the SmolLM2-135M shape (section decode-smollm2)
    python benches/bench_decode.py --layers 4 --new 32 --repeats 1   # a quick look

With --docs the output also replaces the "decode" section of docs/results/generation.md
("decode-smollm2" with --model smollm2).
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
from machine import ReadBound, cpu_info, cpu_times, read_bandwidth, run_footer  # noqa: E402
from llama_peer import NOTE, open_model  # noqa: E402

PRECISIONS = ("float32", "bfloat16", "bfloat16i", "float16", "q8_0", "q5_0", "q8_0i", "q4_0",
              "q4_0i", "q4_k")
CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = time.perf_counter


def smollm2_config(layers: int = 30) -> "blockc.GPTConfig":
    """The shape of SmolLM2-135M (HuggingFaceTB/SmolLM2-135M): a small instruct model
    CPU users run; deep (30 layers) and narrow (576)."""
    return blockc.GPTConfig(vocab=49152, context=2048, width=576, heads=9, layers=layers,
                            kv_heads=3, d_ff=1536, eps=1e-5, tie_weights=True, norm="rms",
                            activation="swiglu", positions="rope", qkv_bias=False,
                            out_bias=False, mlp_bias=False)


def variants() -> List[str]:
    """blockc's ways to run: "auto" (measured choices), then every FMA instruction set
    this CPU has, forced."""
    have = blockc.runtime.ISAS.index(blockc.best_isa())
    return ["auto"] + [i for i in ("avx2", "avx512") if blockc.runtime.ISAS.index(i) <= have]


def with_threads(fn: Callable[[], float], threads: int, torch=None) -> Callable[[], float]:
    """fn run on `threads` threads (blockc's, and PyTorch's when given)."""
    def run() -> float:
        blockc.set_num_threads(threads)
        if torch is not None:
            torch.set_num_threads(threads)
        return fn()
    return run


def with_isa(fn: Callable[[], float], isa: str) -> Callable[[], float]:
    """fn run with the instruction set `isa` (or "auto") in force, then auto again."""
    def run() -> float:
        blockc.set_isa(isa)
        try:
            return fn()
        finally:
            blockc.set_isa("auto")
    return run


class Machine:
    """The CPU (model name and SIMD flags), the load average, the kernels chosen, and
    the steal time over the run (/proc/stat): what every table states."""

    def __init__(self) -> None:
        self.t0 = cpu_times()

    @staticmethod
    def cpu() -> str:
        name, flags = cpu_info()
        simd = sorted(fl for fl in flags if fl.startswith(("avx2", "avx512", "avx_vnni", "amx", "fma")))
        return f"{name}, {os.cpu_count()} CPUs; {' '.join(simd) or 'no AVX2'}"

    def header(self) -> str:
        try:
            load = f"load average {os.getloadavg()[0]:.2f} at the start"
        except (AttributeError, OSError):
            load = "load average n/a"
        choices = "; ".join(blockc.runtime.describe_choices().splitlines())
        return f"CPU: {self.cpu()}\n{load}\nblockc auto kernels: {choices}"

    def footer(self) -> str:
        return run_footer(self.t0)


def blockc_runner(m: "blockc.GPT", prompt: np.ndarray, new: int) -> Callable[[], float]:
    """A callable: prefill the prompt (untimed), then time `new` greedy steps; seconds."""
    def run() -> float:
        cache = m.new_cache(1, prompt.shape[1] + new)
        tok = np.argmax(m(prompt, cache=cache)[:, -1], axis=-1)[:, None]
        t0 = _clock()
        for _ in range(new):
            tok = np.argmax(m(tok, cache=cache)[:, -1], axis=-1)[:, None]
        return _clock() - t0
    return run


def torch_runner(torch, tm, prompt: np.ndarray, new: int) -> Callable[[], float]:
    ids = torch.as_tensor(prompt)

    @torch.no_grad()
    def run() -> float:
        cache = tm.new_cache(1, prompt.shape[1] + new)
        tok = tm(ids, cache, 0, last_only=True)[:, -1].argmax(-1, keepdim=True)
        start = prompt.shape[1]
        t0 = _clock()
        for _ in range(new):
            tok = tm(tok, cache, start, last_only=True)[:, -1].argmax(-1, keepdim=True)
            start += 1
        return _clock() - t0
    return run


def llama_runner(llm, prompt: np.ndarray, new: int) -> Callable[[], float]:
    ids = [int(i) for i in prompt[0]]

    def run() -> float:
        llm.reset()
        llm.eval(ids)
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t0 = _clock()
        for _ in range(new):
            llm.eval([tok])
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        return _clock() - t0
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
    ap.add_argument("--model", choices=("gpt2", "smollm2"), default="gpt2")
    ap.add_argument("--layers", type=int, default=None, help="(12 for gpt2, 30 for smollm2)")
    ap.add_argument("--new", type=int, default=128, help="generated tokens per run (128)")
    ap.add_argument("--contexts", default="128,1000", help="contexts reached (128,1000)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-peers", action="store_true", help="blockc only")
    ap.add_argument("--no-busy", action="store_true", help="skip the busy-neighbour row")
    ap.add_argument("--precisions", default=",".join(PRECISIONS),
                    help=f"blockc's weights ({','.join(PRECISIONS)})")
    ap.add_argument("--clock", choices=tuple(CLOCK), default="wall",
                    help="wall (default) or cpu: the process's CPU time")
    args = ap.parse_args(argv)
    precisions = [p for p in args.precisions.split(",") if p]
    if not precisions or any(p not in PRECISIONS for p in precisions):
        ap.error(f"--precisions: a comma-separated list of {', '.join(PRECISIONS)}")
    global _clock
    _clock = CLOCK[args.clock]
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
            from gguf_export import write_gpt2, write_llama
        except ImportError:
            llama_cpp = None

    smol = args.model == "smollm2"
    cfg = (smollm2_config(args.layers or 30) if smol
           else blockc.GPTConfig.preset("gpt2", layers=args.layers or 12))
    if smol:
        torch = None  # the chapter's PyTorch modules are GPT-2's (bench_llama has transformers)
    machine = Machine()
    m32 = blockc.GPT.random(cfg, seed=0)
    models = {p: m32 if p == "float32" else m32.astype(p) for p in precisions}
    reader = ReadBound()  # the read bound, measured now and in every round
    bw = read_bandwidth(reader=reader)
    print(machine.header())
    print(f"{'SmolLM2-135M' if smol else 'GPT-2 small'} widths: V={cfg.vocab} D={cfg.width} "
          f"H={cfg.heads} KV={cfg.kv_heads_} F={cfg.d_ff_} L={cfg.layers}, "
          f"{blockc.gpt_parameter_count(cfg):,} parameters, random weights")
    print("read bandwidth at the start (benches/machine.py): " + (", ".join(
        f"{t} thread{'s' if t > 1 else ''} {g:.1f} GB/s" for t, g in bw.items()) or "n/a"))
    sizes = ", ".join(f"{k} {m.nbytes / 1e6:.0f} MB" for k, m in models.items())
    print(f"blockc weights: {sizes}; {args.new} new tokens per run, median of {args.repeats} "
          f"rounds, engines alternating, {args.clock} clock")

    tmp = tempfile.TemporaryDirectory()
    ggufs: Dict[str, str] = {}
    if llama_cpp is not None:
        for kind, src in (("f32", m32), ("f16", m32), ("bf16", m32), ("q8_0", m32.astype("q8_0"))):
            ggufs[kind] = os.path.join(tmp.name, f"gpt2-{kind}.gguf")
            (write_llama if smol else write_gpt2)(src, ggufs[kind], kind)
        for kind in ("q5_0", "q4_0", "q4_k"):  # blockc's own blocks, saved as they are
            src = models.get(kind) or (models.get("q4_0i") if kind == "q4_0" else None)
            if src is not None:  # (q4_0i's weights are q4_0's: the same file)
                ggufs[kind] = os.path.join(tmp.name, f"{kind}.gguf")
                src.save_gguf(ggufs[kind], dtype=kind.upper())
        print(f"llama.cpp {llama_cpp.__version__} (llama-cpp-python), GGUF from the same "
              f"weights: f32, f16, bf16, q8_0 (blockc's own q8_0 blocks); {NOTE}")
    else:
        print("llama.cpp: not installed (pip install llama-cpp-python gguf): no peer column")
    tms = {}
    if torch is not None:
        from torch_ref import GPT as TorchGPT
        t32 = TorchGPT.like(cfg, m32.state_dict(keep_tied=True))
        tms = {"float32": t32, "bfloat16": TorchGPT.like(cfg, m32.state_dict(keep_tied=True)).to(torch.bfloat16)}
        print(f"PyTorch {torch.__version__} eager, float32 and bfloat16")

    rows = []
    bound: Dict[tuple, List[float]] = {}  # (ctx, threads) -> GB/s, one reading a round
    rng = np.random.default_rng(1)
    for ctx in contexts:
        # every thread count in the same rounds: a ratio of 2 threads to 1 (and the
        # bound's own ratio) compares figures measured minutes, not a table, apart
        prompt = rng.integers(0, cfg.vocab, size=(1, max(1, ctx - args.new)))
        runners = {}
        llms = []
        for th in thread_counts:
            for p in precisions:
                for v in variants():
                    runners[(th, "blockc", p, v)] = with_threads(
                        with_isa(blockc_runner(models[p], prompt, args.new), v), th, torch)
            for p, tm in tms.items():
                runners[(th, "PyTorch", p)] = with_threads(
                    torch_runner(torch, tm, prompt, args.new), th, torch)
            for kind, path in ggufs.items():
                llm = open_model(llama_cpp, path, kind, n_ctx=ctx + 8, n_batch=ctx + 8,
                                 n_threads=th, n_threads_batch=th, verbose=False)
                llms.append(llm)
                runners[(th, "llama.cpp", kind)] = llama_runner(llm, prompt, args.new)
        for fn in runners.values():  # warm-up
            fn()
        times: Dict[tuple, List[float]] = {k: [] for k in runners}
        keys = list(runners)
        for r in range(args.repeats):
            for th in thread_counts:
                bound.setdefault((ctx, th), []).append(reader(th))
            for k in (keys if r % 2 == 0 else keys[::-1]):
                times[k].append(runners[k]())
        for k in keys:
            rate = args.new / statistics.median(times[k])
            rows.append((ctx, k[0], k[1], k[2], k[3] if len(k) > 3 else "", rate))
        del llms
    reader.close()
    bw_at = {k: statistics.median(v) for k, v in bound.items()}
    print("read bandwidth measured in the rounds (median, min-max): " + "; ".join(
        f"ctx {c} {t} thread{'s' if t > 1 else ''} {bw_at[c, t]:.1f} GB/s "
        f"({min(v):.1f}-{max(v):.1f})" for (c, t), v in bound.items()))

    def rate_of(ctx, th, engine, prec, v=""):
        for r in rows:
            if r[:5] == (ctx, th, engine, prec, v if engine == "blockc" else ""):
                return r[5]
        return None

    same = {"float32": "f32", "bfloat16": "bf16", "bfloat16i": "bf16", "float16": "f16",
            "q8_0": "q8_0", "q5_0": "q5_0",
            "q8_0i": "q8_0", "q4_0": "q4_0", "q4_0i": "q4_0", "q4_k": "q4_k"}
    print()
    forced = variants()[1:]
    print("| context | threads | engine | weights | tokens/s | "
          + " | ".join(f"forced {v}" for v in forced) + " | auto / best forced | % of bound "
          "| / llama.cpp | / PyTorch f32 |")
    print("| --- " * (9 + len(forced)) + "|")
    for ctx, th, engine, prec, v, rate in rows:
        if engine == "blockc" and v != "auto":
            continue  # a column of the auto row
        cols = ["" for _ in forced]
        vs_best = ""
        if engine == "blockc":
            f_rates = [rate_of(ctx, th, engine, prec, f) for f in forced]
            cols = [f"{r:.1f}" for r in f_rates]
            vs_best = f"{rate / max(f_rates):.2f}" if f_rates else ""
        pct = ""
        if engine == "blockc" and bw_at.get((ctx, th), 0) > 0:
            b = bw_at[ctx, th] * 1e9 / step_bytes(models[prec], ctx - args.new / 2)
            pct = f"{100 * rate / b:.0f}%"
        vs_l = vs_t = ""
        if engine == "blockc":
            lr = rate_of(ctx, th, "llama.cpp", same[prec])
            tr = rate_of(ctx, th, "PyTorch", "float32")
            vs_l = f"{rate / lr:.2f}x ({same[prec]})" if lr else ""
            vs_t = f"{rate / tr:.2f}x" if tr else ""
        print(f"| {ctx} | {th} | {engine} | {prec} | {rate:.1f} | " + " | ".join(cols)
              + f" | {vs_best} | {pct} | {vs_l} | {vs_t} |")
    print("tokens/s: blockc as chosen (auto); forced: BLOCKC_ISA for every kernel; % of bound: "
          "tokens/s over read bandwidth / bytes a step reads (that precision's "
          "weights and the KV cache; the bandwidth measured in the same rounds); / llama.cpp: "
          "against llama.cpp on the same weights "
          "(float16 against f16, bfloat16 against bf16); > 1 means blockc is faster")
    if 1 in thread_counts and 2 in thread_counts:
        print()
        print("2 threads / 1 thread, measured in the same rounds; the bound's own ratio is "
              "what a memory-bound row can reach:")
        print()
        print("| context | weights | blockc | llama.cpp (same weights) | read bound |")
        print("| --- | --- | --- | --- | --- |")
        for ctx in contexts:
            b2 = bw_at.get((ctx, 2), 0) / bw_at.get((ctx, 1), float("nan"))
            for prec in precisions:
                one, two = (rate_of(ctx, t, "blockc", prec, "auto") for t in (1, 2))
                l1, l2 = (rate_of(ctx, t, "llama.cpp", same[prec]) for t in (1, 2))
                peer = f"{l2 / l1:.2f} ({same[prec]})" if l1 and l2 else ""
                print(f"| {ctx} | {prec} | {two / one:.2f} | {peer} | {b2:.2f} |")

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
    print(machine.footer())
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    run_bench(main, "results/generation.md", "decode-smollm2" if "smollm2" in sys.argv else "decode")
