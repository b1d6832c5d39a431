"""Benchmark: the checkpoint families' GGUF files, blockc beside llama.cpp (issue 50).

Random-weight GGUF files of four families, written by blockc's streaming writer and run by
both engines exactly as bench_sizes.py runs its Llama shapes (its weights, quantiser,
worker, rounds and tables are imported from it: see its docstring for what each engine
holds and how rates are taken). The shapes are the published config.json facts (Hugging
Face ``Qwen/Qwen3-0.6B``, ``google/gemma-3-1b-it``, ``meta-llama/Llama-3.2-1B``), read by
blockc's own family records (``GPTConfig.from_hf``), so each file is what blockc writes for
such a checkpoint:

  llama1b     Llama-3.2-1B   bench_sizes' shape (vocab 128,256, width 2,048, 32 heads,
              8 K/V heads, SwiGLU 8,192, 16 layers, tied, theta 5e5)      GGUF ``llama``
  qwen3-0.6b  Qwen3-0.6B     vocab 151,936, width 1,024, 16 heads, 8 K/V heads, head_dim
              128, SwiGLU 3,072, 28 layers, q/k RMSNorm per head, tied, theta 1e6,
              RMS eps 1e-6                                                 GGUF ``qwen3``
  gemma3-1b   Gemma-3-1B     vocab 262,144, width 1,152, 4 heads, 1 K/V head, head_dim 256,
              GeGLU 6,912, 26 layers, sandwich norms, q/k norms, embedding x sqrt(width),
              query_pre_attn_scalar 256, sliding window 512 on 5 layers of every 6 (base
              1e4), the others global (base 1e6), tied                    GGUF ``gemma3``
  moe         Mixtral-shaped, small experts (narrower than the model, as Qwen3-30B-A3B's
              768 at width 2,048): vocab 32,000, width 2,048, 16 heads, 4 K/V heads, 16 layers,
              8 SwiGLU experts of 1,024, top 2 renormalised, untied, theta 1e6 (1.10B
              parameters, 0.50B active; Q8_0 1.2 GB)        GGUF ``llama`` + expert_count
  moe-dense   the same with one dense SwiGLU of 2 x 1,024 = 2,048: the MoE's active
              parameters, for "an MoE decode step within 1.2x of the dense model's"

Types Q8_0 and Q4_K_M (llama.cpp's recipe), 1 and 2 threads, a prefill of --prefill tokens
(tokens/s of the whole prompt) and --decode greedy tokens at that depth. Beside the speed
tables:

- agreement: each engine's last-position logits after the prompt, and its greedy tokens,
  against llama.cpp's on the same prompt (the files' matrices repeat a 64-row tile, so
  token ids are compared modulo 64 and logits over the first 64): top-1 agreement, the
  margin of llama.cpp's own top two (a disagreement below the logits' difference is a near
  tie), the largest logit difference (both over llama.cpp's logit range), the rank of
  llama.cpp's top-1 among the engine's logits, and how many greedy tokens agree before the
  first that differs;
- MoE against dense: the time of a decode step of ``moe`` over ``moe-dense``'s, per type,
  thread count and engine (the goal: <= 1.2);
- the sliding cache: the bytes of the KV cache blockc allocates for the Gemma-3-1B shape
  (``KVCache(cfg, 1, context, dtype).nbytes``; nothing is run) at 1k to 32k positions,
  beside a cache without the window, split into the sliding layers' share (constant past
  the window) and the global layers'.

    python benches/bench_families.py --docs              # the full run, into docs
    python benches/bench_families.py --quick             # every shape and engine, tiny
    python benches/bench_families.py --shapes gemma3-1b --types Q8_0 --threads 1

Files are kept in --dir (reused when present). ``--docs`` (refused with --quick or
--layers) replaces section "families" of docs/results/families.md with the output.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

import blockc
from blockc.model.cache import KVCache
from doc_section import run as run_bench  # noqa: E402
import bench_sizes as bs  # noqa: E402
import llama_peer  # noqa: E402

__all__ = ["SHAPES", "shape", "agreement", "short_of_goal", "moe_rows", "cache_rows", "main"]

_QWEN3 = {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024,
          "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
          "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
          "rms_norm_eps": 1e-6, "rope_theta": 1000000, "tie_word_embeddings": True,
          "hidden_act": "silu", "attention_bias": False}
_GEMMA3 = {"model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 1152,
           "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4,
           "num_key_value_heads": 1, "head_dim": 256, "max_position_embeddings": 32768,
           "rms_norm_eps": 1e-6, "rope_theta": 1000000, "rope_local_base_freq": 10000,
           "sliding_window": 512, "sliding_window_pattern": 6, "query_pre_attn_scalar": 256,
           "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True}
_MOE = {"model_type": "mixtral", "vocab_size": 32000, "hidden_size": 2048,
        "intermediate_size": 1024, "num_hidden_layers": 16, "num_attention_heads": 16,
        "num_key_value_heads": 4, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5,
        "rope_theta": 1000000, "num_local_experts": 8, "num_experts_per_tok": 2,
        "tie_word_embeddings": False, "sliding_window": None}
_DENSE = dict({k: v for k, v in _MOE.items()
               if k not in ("num_local_experts", "num_experts_per_tok", "sliding_window")},
              model_type="llama", intermediate_size=2 * 1024)

#: shape -> a config.json of it (read by blockc's family records) or a GPTConfig
SHAPES: Dict[str, Any] = {"llama1b": bs.SHAPES["llama1b"], "qwen3-0.6b": _QWEN3,
                          "gemma3-1b": _GEMMA3, "moe": _MOE, "moe-dense": _DENSE}
TYPES = ("Q8_0", "Q4_K_M")
#: the cache sizes of the sliding-cache table
CACHE_CONTEXTS = (1024, 4096, 16384, 32768)


def shape(name: str, layers: Optional[int] = None) -> blockc.GPTConfig:
    """The GPTConfig of shape ``name`` (with ``layers`` layers when given: a quick run's)."""
    s = SHAPES[name]
    if isinstance(s, blockc.GPTConfig):
        return s if layers is None else dataclasses.replace(s, layers=layers)
    return blockc.GPTConfig.from_hf(s if layers is None else dict(s, num_hidden_layers=layers))


def agreement(label: str, best: Mapping[str, Mapping[str, Any]]) -> List[str]:
    """Rows of blockc's engines against llama.cpp on one file: top-1 agreement of the
    prompt's last logits, llama.cpp's own margin (its top two apart; a disagreement where
    it is below the logits' difference is a near tie, not a bug), their largest difference
    (both over llama.cpp's range), the rank of llama.cpp's top-1 in the engine's logits,
    and the greedy tokens agreeing before the first that differs."""
    ref = best.get("llama.cpp", {}).get("check")
    if ref is None:
        return []
    b = np.asarray(ref["logits"])
    span = float(np.ptp(b)) or 1.0
    top2 = np.sort(b)[-2:]
    rows = []
    for e, res in best.items():
        if e == "llama.cpp" or "check" not in res:
            continue
        a = np.asarray(res["check"]["logits"])
        same = 0
        for x, y in zip(res["check"]["tokens"], ref["tokens"]):
            if x != y:
                break
            same += 1
        rank = 1 + int(np.sum(a > a[np.argmax(b)]))  # of llama.cpp's top-1 among a's
        rows.append(f"| {label} | {e} | {'yes' if np.argmax(a) == np.argmax(b) else 'NO'} | "
                    f"{(top2[1] - top2[0]) / span:.3f} | {float(np.abs(a - b).max()) / span:.3f} | "
                    f"{rank} | {same} of {len(ref['tokens'])} |")
    return rows


def short_of_goal(label: str, best: Mapping[str, Mapping[str, Any]], threads: List[int],
                  ctx: int, goal: float = 1.1) -> List[str]:
    """The (file, threads, phase) cells where neither blockc engine reaches ``goal`` times
    llama.cpp's rate, each with its best ratio."""
    ll = best.get("llama.cpp")
    out = []
    for th in threads:
        k = f"{th},{ctx}"
        for f in ("decode", "prefill") if ll else ():
            r = max((best[e]["runs"][k][f] / ll["runs"][k][f] for e in best if e != "llama.cpp"),
                    default=None)
            if r is not None and r < goal:
                out.append(f"{label} {th} thread{'s' * (th > 1)} {f} {r:.2f}x")
    return out


def moe_rows(t: str, moe: Mapping[str, Mapping[str, Any]],
             dense: Mapping[str, Mapping[str, Any]], threads: List[int], ctx: int) -> List[str]:
    """Rows of the MoE's decode step time over the dense model's, per engine and thread
    count (engines that ran both)."""
    rows = []
    for th in threads:
        k = f"{th},{ctx}"
        for e in moe:
            if e not in dense:
                continue
            m, d = moe[e]["runs"][k]["decode"], dense[e]["runs"][k]["decode"]
            rows.append(f"| {t} | {th} | {e} | {m:.1f} | {d:.1f} | {d / m:.2f} | "
                        f"{'yes' if d / m <= 1.2 else 'no'} |")
    return rows


def cache_rows(cfg: blockc.GPTConfig, dtype: str) -> List[str]:
    """Rows of the KV cache blockc allocates for ``cfg`` (one sequence) at
    :data:`CACHE_CONTEXTS` positions, beside the cache of ``cfg`` without its window."""
    full_cfg = dataclasses.replace(cfg, sliding_window=None, sliding_layers=None)
    glob = sum(cfg.layer_window(i) is None for i in range(cfg.layers))
    rows = []
    for ctx in CACHE_CONTEXTS:
        ours = KVCache(cfg, 1, ctx, dtype).nbytes
        full = KVCache(full_cfg, 1, ctx, dtype).nbytes
        glob_b = full * glob // cfg.layers  # every layer of the full cache the same size
        rows.append(f"| {ctx:,} | {ours / 2**20:,.1f} | {(ours - glob_b) / 2**20:,.1f} | "
                    f"{glob_b / 2**20:,.1f} | {full / 2**20:,.1f} | {full / ours:.2f} |")
    return rows


def _label(name: str, layers: Optional[int]) -> str:
    return name if layers is None else f"{name}-L{layers}"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=",".join(SHAPES), help=", ".join(SHAPES))
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--engines", default=",".join(bs.ENGINES))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prefill", type=int, default=256, help="prompt tokens")
    ap.add_argument("--decode", type=int, default=32, help="greedy tokens after the prompt")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache", default="float16", help="blockc's KV cache dtype")
    ap.add_argument("--layers", type=int, help="every shape with this many layers (a check)")
    ap.add_argument("--quick", action="store_true",
                    help="--layers 2 --prefill 16 --decode 4 --repeats 1: every shape and "
                         "engine end to end in a few minutes")
    ap.add_argument("--dir", default=os.path.join(os.path.expanduser("~"), ".cache",
                                                  "blockc-bench-families"))
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per worker")
    args = ap.parse_args(argv)
    if args.quick:
        args.layers = args.layers or 2
        args.prefill, args.decode, args.repeats = 16, 4, 1
    for name in args.shapes.split(","):
        if name not in SHAPES:
            raise SystemExit(f"unknown shape {name!r}: one of {', '.join(SHAPES)}")
    llama_cpp = bs.peer()
    engines = [e for e in args.engines.split(",") if e != "llama.cpp" or llama_cpp is not None]
    threads = [int(t) for t in args.threads.split(",")]
    os.makedirs(args.dir, exist_ok=True)
    t_start = bs.preamble(llama_cpp, args.cache, args.decode)
    types = bs.supported(args.types, args.dir)
    job = {"threads": threads, "contexts": [args.prefill], "new": args.decode,
           "cache": args.cache}
    loads, speeds, agree, short = [], [], [], []
    results: Dict[str, Dict[str, Any]] = {}
    print("| shape | architecture | parameters | active | layers | file prefix |")
    print("|---|---|---|---|---|---|")
    for name in args.shapes.split(","):
        cfg = shape(name, args.layers)
        total = blockc.gpt_parameter_count(cfg)
        active = (blockc.gpt_parameter_count(shape("moe-dense", args.layers))
                  if cfg.n_experts else total)
        print(f"| {name} | {bs.gm.arch_of(cfg)}{' (experts)' if cfg.n_experts else ''} | "
              f"{total / 1e9:.3f}B | {active / 1e9:.3f}B | {cfg.layers} | "
              f"{_label(name, args.layers)} |")
    print()
    for name in args.shapes.split(","):
        cfg = shape(name, args.layers)
        for t in types:
            label = f"{name} {t}"
            path = bs.ensure_file(args.dir, _label(name, args.layers), t, cfg)
            repack = llama_peer.extra_bufts_work(path, label)[0] if llama_cpp else False
            best = bs.best_of(path, engines, dict(job, repack=repack), args.repeats,
                              args.timeout)
            results[label] = best
            loads += bs.load_rows(label, path, best, engines, repack)
            speeds += bs.speed_rows(label, best, threads, [args.prefill])
            agree += agreement(label, best)
            short += short_of_goal(label, best, threads, args.prefill)
    print(f"\n{args.repeats} round{'s' * (args.repeats > 1)} per file; ratios blockc / "
          "llama.cpp (goal >= 1.1)\n")
    print(bs.LOAD_HEAD + "\n" + "\n".join(loads))
    print("\n" + bs.SPEED_HEAD + "\n" + "\n".join(speeds))
    print(f"\nBelow 1.1x llama.cpp with blockc's faster engine: {len(short)} of "
          f"{2 * len(threads) * len(results)} cells" + (": " + "; ".join(short) if short else ""))
    print("\nAgreement with llama.cpp (same prompt; ids modulo the 64-row tile):\n")
    print("| file | engine | top-1 agree | llama.cpp top-2 gap / range | max logit diff / "
          "range | rank of llama.cpp's top-1 | greedy tokens agreeing |\n"
          "|---|---|---|---|---|---|---|")
    print("\n".join(agree))
    moe = [r for t in types if f"moe {t}" in results and f"moe-dense {t}" in results
           for r in moe_rows(t, results[f"moe {t}"], results[f"moe-dense {t}"], threads,
                             args.prefill)]
    if moe:
        print(f"\nMoE decode step against the dense model of its active parameters (at "
              f"depth {args.prefill}; goal: moe step / dense step <= 1.2):\n")
        print("| file | threads | engine | moe decode tok/s | moe-dense decode tok/s | "
              "moe step / dense step | within 1.2 |\n|---|---|---|---|---|---|---|")
        print("\n".join(moe))
    g = shape("gemma3-1b")
    print(f"\nKV cache of the Gemma-3-1B shape (full {g.layers} layers: "
          f"{sum(g.layer_window(i) is not None for i in range(g.layers))} sliding with window "
          f"{g.sliding_window}, the rest global), one sequence, {args.cache}, MiB as blockc "
          "allocates it (KVCache.nbytes), beside the cache without the window (the size "
          "llama.cpp keeps for every layer as llama-cpp-python opens a model: its log says "
          "'using full-size SWA cache'):\n")
    print("| context | blockc cache | sliding layers' share | global layers' share | "
          "without the window | ratio |\n|---|---|---|---|---|---|")
    print("\n".join(cache_rows(g, args.cache)))
    bs.epilogue(t_start)
    return 0


def _check_docs() -> None:
    """--docs records the full run only: a tiny one must not replace the table."""
    if "--docs" in sys.argv and any(a.split("=")[0] in ("--quick", "--layers") for a in sys.argv):
        raise SystemExit("--docs records the full shapes: drop --quick and --layers")


if __name__ == "__main__":
    _check_docs()
    run_bench(main, "results/families.md", "families")
