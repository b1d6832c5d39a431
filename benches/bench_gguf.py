"""Benchmark: GGUF files, blockc against llama.cpp on the same files.

Two models with random weights, shaped like SmolLM2-135M (vocab 49,152, D=576, 30 layers,
9 query and 3 K/V heads, SwiGLU of 1,536, tied) and GPT-2 small (vocab 50,257, D=768,
12 layers); each written by blockc's save_gguf as F32 (the reference), F16, Q8_0, Q4_0, Q5_0,
Q4_1, Q5_1, Q4_K_M and Q5_K_M (llama.cpp's recipes; SmolLM's rows of 576 are not whole
K-blocks, so llama.cpp's fallbacks Q5_0 and Q5_1 take them, as its own quantiser does). For
each file:

  load      GPT.from_pretrained(file) from a warm page cache (best of 3), seconds
  decode    greedy tokens/s through the KV cache at contexts ~128 and ~1000, 1 and 2 threads:
            blockc's float32 cache and its float16 one (new_cache(dtype="float16"): what
            llama.cpp keeps by default, F16 keys and values)
  prefill   tokens/s of one prompt of 128 tokens (the last position's logits)
  accuracy  mean KL(float32 || file) of the next-token distributions over a 128-token
            sequence, blockc's and llama.cpp's (each against blockc's float32 model)

llama.cpp runs through llama-cpp-python when it is installed (it is not in CI); its column
is then filled. The plain rows load each file with dtype="exact": blockc holds each matrix in
the native format of its file type (F16, Q8_0,
Q4_0, Q5_0, Q4_1, Q5_1, Q4_K, Q5_K, Q6_K as float16, q8_0, q4_0, ..., q6_k: the file's blocks,
streamed by their kernels; blockc.checkpoint.gguf.EXACT), each part of a fused q, k, v in
its own (Q4_K_M's Q4_K q and k beside a Q6_K v), so a Q4_K_M file is a model of mixed
formats ("blockc holds": mixed). Every
quantised file is run once more with dtype="integer" (what it loads as by default,
blockc.checkpoint.gguf.DEFAULT_FORMAT: each matrix's very blocks as q8_0i, q4_0i, q5_0i, q4_1i, q5_1i, q4_ki,
q5_ki or q6_ki, multiplied by integer dot products on 8-bit activations, as llama.cpp does).
Engines alternate within each round; the figures are medians of --repeats rounds.

    python benches/bench_gguf.py                      # the tables (long: quantising is NumPy)
    python benches/bench_gguf.py --layers 2 --repeats 1 --new 16 --models smollm  # a look

With --docs the output also replaces the "gguf" section of docs/speed.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Dict, List, Optional

import numpy as np

import blockc
from doc_section import run as run_bench  # noqa: E402
from machine import cpu_name, steal_share  # noqa: E402
from llama_peer import NOTE, last_logits, open_model  # noqa: E402

TYPES = ("F16", "Q8_0", "Q4_0", "Q5_0", "Q4_1", "Q5_1", "Q4_K_M", "Q5_K_M")
#: the files run once more with dtype="integer" (every quantised type: each has integer formats)
INTEGER_TYPES = ("Q8_0", "Q4_0", "Q5_0", "Q4_1", "Q5_1", "Q4_K_M", "Q5_K_M")


def config(name: str, layers: Optional[int]) -> "blockc.GPTConfig":
    if name == "smollm":
        return blockc.GPTConfig(vocab=49152, context=2048, width=576, heads=9, kv_heads=3,
                                layers=layers or 30, d_ff=1536, eps=1e-5, tie_weights=True,
                                norm="rms", activation="swiglu", positions="rope",
                                rope_theta=100000.0, qkv_bias=False, out_bias=False,
                                mlp_bias=False)
    return blockc.GPTConfig(vocab=50257, context=1024, width=768, heads=12, layers=layers or 12)


def kl(p_logits: np.ndarray, q_logits: np.ndarray) -> float:
    """Mean over positions of KL(softmax(p) || softmax(q)), in float64."""
    p = p_logits.astype(np.float64)
    q = q_logits.astype(np.float64)
    lp = p - p.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    lq = q - q.max(-1, keepdims=True)
    lq -= np.log(np.exp(lq).sum(-1, keepdims=True))
    return float((np.exp(lp) * (lp - lq)).sum(-1).mean())


def decode_rate(m, prompt: np.ndarray, new: int, cache_dtype: str = "float32") -> float:
    cache = m.new_cache(1, prompt.shape[1] + new, dtype=cache_dtype)
    tok = np.argmax(m(prompt, cache=cache)[:, -1], axis=-1)[:, None]
    t0 = time.perf_counter()
    for _ in range(new):
        tok = np.argmax(m(tok, cache=cache)[:, -1], axis=-1)[:, None]
    return new / (time.perf_counter() - t0)


def prefill_rate(m, prompt: np.ndarray) -> float:
    cache = m.new_cache(1, prompt.shape[1])
    t0 = time.perf_counter()
    m(prompt, cache=cache, last_only=True)  # what llama.cpp computes: the last position's logits
    return prompt.shape[1] / (time.perf_counter() - t0)


def llama_decode(llama_cpp, llm, prompt: np.ndarray, new: int) -> float:
    """llama.cpp's greedy decode rate: each step's token the argmax of the last position's
    logits, read through llama_get_logits (llm.scores, filled only with logits_all, would
    read zeros: every step token 0)."""
    ids = [int(i) for i in prompt[0]]
    llm.reset()
    llm.eval(ids)
    tok = int(np.argmax(last_logits(llama_cpp, llm)))
    t0 = time.perf_counter()
    for _ in range(new):
        llm.eval([tok])
        tok = int(np.argmax(last_logits(llama_cpp, llm)))
    return new / (time.perf_counter() - t0)


def llama_prefill(llm, prompt: np.ndarray) -> float:
    llm.reset()
    t0 = time.perf_counter()
    llm.eval([int(i) for i in prompt[0]])
    return prompt.shape[1] / (time.perf_counter() - t0)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm,gpt2")
    ap.add_argument("--layers", type=int, default=None, help="override the layer count")
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--new", type=int, default=64, help="generated tokens per decode run")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--contexts", default="128,1000")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    try:
        import llama_cpp
    except ImportError:
        llama_cpp = None
    threads = [int(t) for t in args.threads.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]
    types = args.types.split(",")
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average "
          f"{os.getloadavg()[0]:.2f} at the start; {steal_share(None)} steal since boot; ISA {blockc.get_isa()}")
    print("llama.cpp: " + (f"llama-cpp-python {llama_cpp.__version__}, {NOTE}" if llama_cpp else
                           "not installed (pip install llama-cpp-python): blockc only"))
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d:
        for model in args.models.split(","):
            cfg = config(model, args.layers)
            m32 = blockc.GPT.random(cfg, seed=0)
            # weights of a trained model's scale spread: the logits are not flat
            for name, t in m32.layout.items():
                if t.packed:
                    m32.write_tensor(name, m32.read_tensor(name) * np.float32(2.5))
            files = {"F32": os.path.join(d, f"{model}-F32.gguf")}
            m32.save_gguf(files["F32"], "F32")
            for t in types:
                files[t] = os.path.join(d, f"{model}-{t}.gguf")
                t0 = time.perf_counter()
                m32.save_gguf(files[t], t)
                print(f"{model}: wrote {t} in {time.perf_counter() - t0:.1f} s "
                      f"({os.path.getsize(files[t]) / 1e6:.1f} MB)")
            text = rng.integers(0, cfg.vocab, (1, 128))
            ref = m32(text)[0]
            print(f"\n{model} ({cfg.layers} layers, {blockc.gpt_parameter_count(cfg):,} "
                  "parameters)\n")
            print("| file | blockc holds | load s | KL blockc | KL llama.cpp |")
            print("|---|---|---|---|---|")
            models = {}
            # each row: (label, the file's type, blockc's dtype: "exact", the file's own
            # weights with float activations); the quantised files once more with
            # dtype="integer" (their default: integer dot products, as llama.cpp multiplies them)
            rows_of = [(t, t, "exact") for t in ["F32"] + types]
            rows_of += [(f"{t} as integer", t, "integer") for t in INTEGER_TYPES if t in types]
            for label, t, dt in rows_of:
                loads = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    mt = blockc.GPT.from_pretrained(files[t], dtype=dt)
                    loads.append(time.perf_counter() - t0)
                models[label] = mt
                k_b = kl(ref, mt(text)[0])
                k_l = "n/a"
                if llama_cpp is not None:
                    llm = open_model(llama_cpp, files[t], t, n_ctx=256, logits_all=True,
                                     n_threads=threads[-1], verbose=False)
                    llm.eval([int(i) for i in text[0]])
                    k_l = f"{kl(ref, np.array(llm.scores[:text.shape[1]])):.2e}"
                    del llm
                print(f"| {label} | {mt.dtype} | {min(loads):.3f} | {k_b:.2e} | {k_l} |")
            print("\n| file | threads | context | blockc decode tok/s | blockc, float16 cache | "
                  "llama.cpp decode tok/s (f16 cache) | ratio | ratio, float16 cache | "
                  "blockc prefill tok/s | llama.cpp prefill tok/s |")
            print("|---|---|---|---|---|---|---|---|---|---|")
            for label, t, _ in rows_of[1:] + rows_of[:1]:
                for th in threads:
                    blockc.set_num_threads(th)
                    for ctx in contexts:
                        prompt = rng.integers(0, cfg.vocab, (1, max(1, ctx - args.new)))
                        llm = None
                        if llama_cpp is not None:
                            llm = open_model(llama_cpp, files[t], t, n_ctx=ctx + 8,
                                             n_batch=ctx + 8, n_threads=th,
                                             n_threads_batch=th, verbose=False)
                        rows: Dict[str, List[float]] = {"bd": [], "bh": [], "ld": [], "bp": [],
                                                        "lp": []}
                        pre = prompt[:, :128]
                        for _ in range(args.repeats):
                            rows["bd"].append(decode_rate(models[label], prompt, args.new))
                            rows["bh"].append(decode_rate(models[label], prompt, args.new,
                                                          "float16"))
                            rows["bp"].append(prefill_rate(models[label], pre))
                            if llm is not None:
                                rows["ld"].append(llama_decode(llama_cpp, llm, prompt, args.new))
                                rows["lp"].append(llama_prefill(llm, pre))
                        med = {k: statistics.median(v) if v else None for k, v in rows.items()}
                        ratio = f"{med['bd'] / med['ld']:.2f}" if med["ld"] else "n/a"
                        ratio_h = f"{med['bh'] / med['ld']:.2f}" if med["ld"] else "n/a"

                        def fmt(v):
                            return f"{v:.1f}" if v else "n/a"
                        print(f"| {label} | {th} | {ctx} | {fmt(med['bd'])} | {fmt(med['bh'])} | "
                              f"{fmt(med['ld'])} | {ratio} | {ratio_h} | {fmt(med['bp'])} | "
                              f"{fmt(med['lp'])} |")
                        del llm
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    run_bench(main, "speed.md", "gguf")
