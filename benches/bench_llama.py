"""Benchmark: a Llama-shaped decoder of GPT-2 small's size, blockc against its peers.

D=768, 12 layers, 12 query heads and 4 K/V heads, SwiGLU MLP of 2048, RMSNorm,
rotary positions, a 32,000-token vocabulary, untied head; random weights (or
with --shape smollm2 the shape of SmolLM2-135M: 30 layers, width 576, 9 heads,
3 K/V heads, d_ff 1536, a tied 49,152-token vocabulary; section llama-smollm2; or
with --shape gpt2 GPT-2 small itself, prefill only by default: its decode table is
bench_decode.py's; section llama-gpt2).
blockc's weights: float32, bfloat16, bfloat16i (bfloat16's weights by bfloat16 dot
products: vdpbf16ps where the CPU has AVX512_BF16), q8_0 and q8_0i (q8_0's weights by
integer dot products on 8-bit activations). blockc runs as chosen (auto: each kernel family its measured variant) and
forced to each FMA instruction set the CPU has (a column each). The
peers run the same weights:

  transformers  LlamaForCausalLM (GPT2LMHeadModel for gpt2; eager PyTorch, its
                default SDPA attention),
                loaded from the directory blockc's save_pretrained writes; float32
                and bfloat16
  llama.cpp     through llama-cpp-python, GGUF files written from the same model
                (benches/gguf_export.py write_llama or write_gpt2: f32, f16, bf16, and q8_0 from
                blockc's own q8_0 blocks); when llama-cpp-python and gguf are
                installed

  prefill   one sequence of --seq tokens (1024): blockc and transformers computing
            the logits of every position; blockc and llama.cpp only the last
            position's (what generation needs; llama.cpp's eval)
  decode    greedy tokens through a KV cache after a prompt, at two context lengths
            (prompt + new tokens reaching ~128 and ~1000), on 1 and 2 threads, as
            tokens/s and as a percentage of the bandwidth bound (read bandwidth of
            this machine measured in the run / the bytes one step reads)

Under the prefill table, per thread count: the arithmetic of a float32 prompt
with every position's logits (the products, the attention's two, the head) over
the measured time, for blockc and transformers, as a share of the machine's FMA
peak (benches/machine.py fma_peak, measured in the run): how far above
transformers any engine could be on this CPU.

Engines alternate within each round; every figure is the median of --repeats rounds.

    python benches/bench_llama.py                 # the tables (about 15 minutes)
    python benches/bench_llama.py --layers 2 --repeats 1 --new 16   # a quick look

With --docs the output also replaces the "llama" section of docs/speed.md (the
other shapes: their sections of docs/results/generation.md).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from typing import Callable, Dict, List, Optional

import numpy as np

import blockc
from blockc.model import block_parameter_parts
from bench_decode import (Machine, blockc_runner, llama_runner, smollm2_config,  # noqa: E402
                          step_bytes, variants, with_isa)
from llama_peer import NOTE, open_model  # noqa: E402
from doc_section import run as run_bench  # noqa: E402
from machine import fma_peak, read_bandwidth  # noqa: E402

PRECISIONS = ("float32", "bfloat16", "bfloat16i", "q8_0", "q8_0i")
SAME = {"float32": "f32", "bfloat16": "bf16", "bfloat16i": "bf16", "q8_0": "q8_0", "q8_0i": "q8_0"}
#: transformers' weights each blockc precision is also compared with (its bfloat16)
SAME_HF = {"bfloat16": "bfloat16", "bfloat16i": "bfloat16"}


def llama_config(layers: int) -> "blockc.GPTConfig":
    return blockc.GPTConfig(vocab=32000, context=2048, width=768, heads=12, layers=layers,
                            kv_heads=4, d_ff=2048, eps=1e-5, tie_weights=False, norm="rms",
                            activation="swiglu", positions="rope", qkv_bias=False,
                            out_bias=False, mlp_bias=False)


def hf_runner(torch, hm, prompt: np.ndarray, new: int) -> Callable[[], float]:
    ids = torch.as_tensor(prompt)

    @torch.no_grad()
    def run() -> float:
        out = hm(ids, use_cache=True, logits_to_keep=1)
        past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        t0 = time.perf_counter()
        for _ in range(new):
            out = hm(tok, past_key_values=past, use_cache=True)
            past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        return time.perf_counter() - t0
    return run


def timed(fn: Callable[[], object]) -> Callable[[], float]:
    def run() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    return run


def alternate(runners: Dict[tuple, Callable[[], float]], repeats: int) -> Dict[tuple, float]:
    """Median seconds of each runner, one warm-up each, the order reversed every round."""
    for fn in runners.values():
        fn()
    times: Dict[tuple, List[float]] = {k: [] for k in runners}
    keys = list(runners)
    for r in range(repeats):
        for k in (keys if r % 2 == 0 else keys[::-1]):
            times[k].append(runners[k]())
    return {k: statistics.median(v) for k, v in times.items()}


def prefill_flops(cfg: "blockc.GPTConfig", t: int) -> float:
    """Floating-point operations of a float32 prompt of t tokens with every position's
    logits: the layers' products (2 per matrix weight and token: the attention's and
    the MLP's parts of blockc.model.block_parameter_parts), causal attention's two
    products (2 t^2 H Dh per layer, half of the t x t scores), the head."""
    weights = sum(n for part, _, n in block_parameter_parts(cfg)
                  if part.startswith(("attention", "MLP")))
    per_layer = 2 * t * weights + 2 * t * t * cfg.heads * cfg.head_dim_
    return cfg.layers * per_layer + 2 * t * cfg.width * cfg.vocab


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=("llama", "smollm2", "gpt2"), default="llama")
    ap.add_argument("--layers", type=int, default=None, help="(12; 30 for smollm2)")
    ap.add_argument("--seq", type=int, default=1024, help="prefill tokens (1024)")
    ap.add_argument("--new", type=int, default=64, help="decoded tokens per run (64)")
    ap.add_argument("--contexts", default=None,
                    help="decode contexts (128,1000; none for gpt2); empty: no decode")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-peers", action="store_true")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renamings
    if args.contexts is None:
        args.contexts = "" if args.shape == "gpt2" else "128,1000"
    contexts = [int(c) for c in args.contexts.split(",") if c]
    thread_counts = [int(t) for t in args.threads.split(",")]

    torch = transformers = llama_cpp = None
    if not args.no_peers:
        try:
            import torch
            import transformers
            transformers.logging.set_verbosity_error()
            transformers.utils.logging.disable_progress_bar()
        except ImportError:
            torch = transformers = None
        try:
            import gguf  # noqa: F401
            import llama_cpp
            from gguf_export import write_gpt2, write_llama
        except ImportError:
            llama_cpp = None

    smol, gpt2 = args.shape == "smollm2", args.shape == "gpt2"
    cfg = (smollm2_config(args.layers or 30) if smol
           else blockc.GPTConfig.preset("gpt2", layers=args.layers or 12) if gpt2
           else llama_config(args.layers or 12))
    name = "SmolLM2-135M-shaped" if smol else "GPT-2 small" if gpt2 else "Llama-shaped"
    machine = Machine()
    m32 = blockc.GPT.random(cfg, seed=0)
    models = {p: m32 if p == "float32" else m32.astype(p) for p in PRECISIONS}
    bw = read_bandwidth()
    peak = fma_peak()
    print(machine.header())
    print(f"{name}: V={cfg.vocab} D={cfg.width} "
          f"H={cfg.heads} KV={cfg.kv_heads_} F={cfg.d_ff_} L={cfg.layers}, "
          f"{blockc.gpt_parameter_count(cfg):,} parameters, random weights")
    print("read bandwidth (benches/machine.py): " + (", ".join(
        f"{t} thread{'s' if t > 1 else ''} {g:.1f} GB/s" for t, g in bw.items()) or "n/a"))
    tmp = tempfile.TemporaryDirectory()
    hms = {}
    if transformers is not None:
        m32.save_pretrained(tmp.name + "/hf")
        auto = transformers.AutoModelForCausalLM
        hm = auto.from_pretrained(tmp.name + "/hf").eval()
        hms = {"float32": hm, "bfloat16": auto.from_pretrained(
            tmp.name + "/hf", dtype=torch.bfloat16).eval()}
        print(f"transformers {transformers.__version__} {type(hm).__name__}, torch {torch.__version__}"
              f" ({hm.config._attn_implementation} attention), float32 and bfloat16")
    ggufs: Dict[str, str] = {}
    if llama_cpp is not None:
        for kind, src in (("f32", m32), ("f16", m32), ("bf16", m32), ("q8_0", models["q8_0"])):
            ggufs[kind] = os.path.join(tmp.name, f"llama-{kind}.gguf")
            (write_gpt2 if gpt2 else write_llama)(src, ggufs[kind], kind)
        print(f"llama.cpp {llama_cpp.__version__} (llama-cpp-python), GGUF from the same weights; "
              f"{NOTE}")
    else:
        print("llama.cpp: not installed (pip install llama-cpp-python gguf): no peer column")
    rng = np.random.default_rng(1)

    # parity first: the peers compute the same model
    ids = rng.integers(0, cfg.vocab, size=(1, 64))
    if hms:
        with torch.no_grad():
            ref = hms["float32"](torch.as_tensor(ids)).logits.numpy()
        print(f"parity: max |blockc - transformers| logit {np.abs(m32(ids) - ref).max():.1e} "
              f"(largest {np.abs(ref).max():.2f}); greedy 32 tokens equal: "
              f"{np.array_equal(m32.generate(ids[:, :8], 32), hms['float32'].generate(torch.as_tensor(ids[:, :8]), max_new_tokens=32, do_sample=False, pad_token_id=0, eos_token_id=None).numpy())}")
    if ggufs:
        llm = open_model(llama_cpp, ggufs["f32"], "f32", n_ctx=128, logits_all=True, verbose=False)
        llm.eval([int(i) for i in ids[0]])
        diff = np.abs(np.array(llm.scores[:64]) - m32(ids)[0]).max()
        print(f"parity: max |blockc - llama.cpp f32| logit {diff:.1e} (llama.cpp keeps its KV "
              "cache in float16)")
        del llm

    # prefill
    print()
    seq = rng.integers(0, cfg.vocab, size=(1, args.seq))
    rows = []
    for th in thread_counts:
        blockc.set_num_threads(th)
        if torch is not None:
            torch.set_num_threads(th)
        runners: Dict[tuple, Callable[[], float]] = {}
        for p in PRECISIONS:
            for v in variants():
                runners[("blockc", p, "all", v)] = with_isa(timed(lambda mm=models[p]: mm(seq)), v)
                runners[("blockc", p, "last", v)] = with_isa(
                    timed(lambda mm=models[p]: mm(seq, last_only=True)), v)
        for p, hm in hms.items():
            tseq = torch.as_tensor(seq)
            runners[("transformers", p, "all")] = timed(lambda hm=hm: torch_no_grad(torch, hm, tseq))
        llms = []
        for kind, path in ggufs.items():
            llm = open_model(llama_cpp, path, kind, n_ctx=args.seq + 8, n_batch=args.seq + 8,
                             n_threads=th, n_threads_batch=th, verbose=False)
            llms.append(llm)
            toks = [int(i) for i in seq[0]]
            runners[("llama.cpp", kind, "last")] = timed(lambda llm=llm: (llm.reset(), llm.eval(toks)))
        for k, t in alternate(runners, args.repeats).items():
            rows.append((th,) + k + (args.seq / t,))
        del llms

    def find(rs, key):
        for r in rs:
            if r[:-1] == key:
                return r[-1]
        return None

    forced = variants()[1:]
    fcols = " | ".join(f"forced {v}" for v in forced)

    def forced_cells(rs, key, rate, fmt):
        """blockc's row `key` forced to each variant (formatted), and auto / the best of them."""
        fr = [find(rs, key + (f,)) for f in forced]
        return [format(x, fmt) for x in fr], (f"{rate / max(fr):.2f}" if fr else "")

    print(f"prefill, one sequence of {args.seq} tokens (tokens/s; higher is faster):")
    print(f"| threads | engine | weights | logits | tokens/s | {fcols} | auto / best forced "
          "| / transformers f32 | / transformers bf16 | / llama.cpp |")
    print("| --- " * (9 + len(forced)) + "|")
    for r in rows:
        if r[1] == "blockc" and r[-2] != "auto":
            continue
        th, eng, p, logits, rate = r[0], r[1], r[2], r[3], r[-1]
        vs_t = vs_h = vs_l = vs_b = ""
        cols = ["" for _ in forced]
        if eng == "blockc":
            cols, vs_b = forced_cells(rows, (th, eng, p, logits), rate, ".0f")
            t = find(rows, (th, "transformers", "float32", "all"))
            vs_t = f"{rate / t:.2f}x" if t and logits == "all" else ""
            h = find(rows, (th, "transformers", SAME_HF.get(p, ""), "all"))
            vs_h = f"{rate / h:.2f}x" if h and logits == "all" else ""
            lr = find(rows, (th, "llama.cpp", SAME[p], "last"))
            vs_l = f"{rate / lr:.2f}x ({SAME[p]})" if lr and logits == "last" else ""
        print(f"| {th} | {eng} | {p} | {logits} | {rate:.0f} | " + " | ".join(cols)
              + f" | {vs_b} | {vs_t} | {vs_h} | {vs_l} |")
    gflop = prefill_flops(cfg, args.seq) / 1e9
    for th in thread_counts:
        parts = []
        for eng in ("blockc", "transformers"):
            rate = find(rows, (th, eng, "float32", "all") + (("auto",) if eng == "blockc" else ()))
            if rate:
                g = gflop * rate / args.seq
                share = f" ({100 * g / peak[th]:.0f}% of it)" if th in peak else ""
                parts.append(f"{eng} {g:.0f} GFLOP/s{share}")
        if parts:
            pk = f"FMA peak {peak[th]:.0f} GFLOP/s" if th in peak else "FMA peak n/a"
            print(f"float32 prompt, all logits, {th} thread{'s' if th > 1 else ''}: {gflop:.0f} "
                  f"GFLOP; {pk}; " + ", ".join(parts))

    # decode
    drows = []
    for ctx in contexts:
        prompt = rng.integers(0, cfg.vocab, size=(1, max(1, ctx - args.new)))
        for th in thread_counts:
            blockc.set_num_threads(th)
            if torch is not None:
                torch.set_num_threads(th)
            runners = {("blockc", p, v): with_isa(blockc_runner(models[p], prompt, args.new), v)
                       for p in PRECISIONS for v in variants()}
            for p, hm in hms.items():
                runners[("transformers", p)] = hf_runner(torch, hm, prompt, args.new)
            llms = []
            for kind, path in ggufs.items():
                llm = open_model(llama_cpp, path, kind, n_ctx=ctx + 8, n_batch=ctx + 8,
                                 n_threads=th, n_threads_batch=th, verbose=False)
                llms.append(llm)
                runners[("llama.cpp", kind)] = llama_runner(llm, prompt, args.new)
            for k, t in alternate(runners, args.repeats).items():
                drows.append((ctx, th) + k + (args.new / t,))
            del llms
    if contexts:
        print()
        print(f"decode, {args.new} greedy tokens after a prompt (tokens/s):")
        print(f"| context | threads | engine | weights | tokens/s | {fcols} | auto / best forced "
              "| % of bound | / llama.cpp | / transformers f32 |")
        print("| --- " * (9 + len(forced)) + "|")
        for r in drows:
            if r[2] == "blockc" and r[-2] != "auto":
                continue
            ctx, th, eng, p, rate = r[0], r[1], r[2], r[3], r[-1]
            bound = vs_l = vs_t = vs_b = ""
            cols = ["" for _ in forced]
            if eng == "blockc":
                cols, vs_b = forced_cells(drows, (ctx, th, eng, p), rate, ".1f")
                if th in bw:
                    b = bw[th] * 1e9 / step_bytes(models[p], ctx - args.new / 2)
                    bound = f"{100 * rate / b:.0f}%"
                lr = find(drows, (ctx, th, "llama.cpp", SAME[p]))
                tr = find(drows, (ctx, th, "transformers", "float32"))
                vs_l = f"{rate / lr:.2f}x ({SAME[p]})" if lr else ""
                vs_t = f"{rate / tr:.2f}x" if tr else ""
            print(f"| {ctx} | {th} | {eng} | {p} | {rate:.1f} | " + " | ".join(cols)
                  + f" | {vs_b} | {bound} | {vs_l} | {vs_t} |")
        print("tokens/s: blockc as chosen (auto); forced: BLOCKC_ISA for every kernel; % of bound: "
              "tokens/s over read bandwidth / bytes a step reads (that precision's "
              "weights and the KV cache at the mean position); > 1x means blockc is faster")
    print(machine.footer())
    blockc.set_num_threads(0)
    tmp.cleanup()
    return 0


def torch_no_grad(torch, hm, ids):
    with torch.no_grad():
        return hm(ids).logits


if __name__ == "__main__":
    # the Llama shape is speed.md's headline table, the other shapes results/generation.md's
    if "smollm2" in sys.argv:
        run_bench(main, "results/generation.md", "llama-smollm2")
    elif "gpt2" in sys.argv:
        run_bench(main, "results/generation.md", "llama-gpt2")
    else:
        run_bench(main, "speed.md", "llama")
