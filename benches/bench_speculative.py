"""Benchmark: speculative decoding (issue 51), tokens/s against plain greedy decoding.

The target is bench_llama.py's Llama shape (width 768, 12 heads, 4 K/V heads, SwiGLU
2048, a 32,000-token vocabulary) with ``--layers`` layers, random weights, float32. A
draft from random weights disagrees with any target, so the drafts here agree by
construction, to varying degrees:

  oracle        a drafter that knows the answer (always right, free): the ceiling the
                verifying forward allows, what lookup on text the answer copies nears
  self          the target as its own draft: every draft accepted, the upper bound of
                acceptance (the draft costs as much as the target: a slow-down)
  q4_0i copy    the target's own weights as q4_0 with integer dot products: nearly
                the same argmax, at a fraction of the bytes a step reads
  first layers  the target cut to its first layers / 4 blocks (same embedding and head)
  lookup        prompt lookup (no draft model) on a prompt of random tokens ("free")
                and on one that repeats a 20-token chunk ("repetitive"). A random-weight
                model never copies its prompt: its answer loops on tokens of its own,
                which lookup then predicts; a trained model copying a document (the
                issue's summarising goal) could not be measured here (no trained model
                on this machine, none downloaded): the oracle row is its ceiling

Every row's output is checked token for token against plain greedy decoding's. Decode
tokens/s = (new - 1) / (time of ``new`` tokens - time of 1 token): the prompt's pass
left out; the best of ``--rounds`` rounds, the methods alternating within each round.

    python benches/bench_speculative.py [--layers 4] [--new 64] [--draft-max 4] [--rounds 2]

With --docs the output also replaces the "speculative" section of docs/results/generation.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import time
from typing import Any, Dict, List, Optional

import numpy as np

import blockc
from blockc.generation.config import GenerationConfig
from blockc.generation.speculative import Speculator, SpeculativeStats, speculate
from bench_decode import Machine
from bench_llama import llama_config
from doc_section import run as run_bench


def first_layers(m: "blockc.GPT", n: int) -> "blockc.GPT":
    """The model cut to its first n blocks (its embedding, final norm and head kept)."""
    sd = {k: v for k, v in m.state_dict().items()
          if not k.startswith("blocks.") or int(k.split(".")[1]) < n}
    return blockc.GPT.from_state_dict(sd, dataclasses.replace(m.config, layers=n))


class Oracle(Speculator):
    """Drafts the known answer: every draft right, at no cost."""

    def __init__(self, prompt_len: int, answer: np.ndarray):
        self.t, self.answer = prompt_len, answer

    def draft(self, seq, k, opts, rng):
        s = len(seq) - self.t
        return self.answer[s:s + k], None


def timed(m: "blockc.GPT", prompt: np.ndarray, n: int, opts: Dict[str, Any]):
    t0 = time.perf_counter()
    if "oracle" in opts:  # speculate itself, with the drafter no option names
        st = SpeculativeStats()
        g = GenerationConfig(eos_token_id=()).resolve(m.config.vocab)
        out = np.array(list(speculate(m, prompt[0], n, g, np.random.default_rng(0),
                                      Oracle(prompt.shape[1], opts["oracle"]),
                                      opts["k"], st)))
        return time.perf_counter() - t0, out, st
    run = m.prepare_generation(prompt, n, **opts)
    out = np.concatenate(list(run))
    return time.perf_counter() - t0, out, run.stats


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--draft-max", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    args = ap.parse_args(argv)
    machine = Machine()
    blockc.set_num_threads(args.threads)
    print(machine.header())
    cfg = llama_config(args.layers)
    m = blockc.GPT.random(cfg, seed=0)
    rng = np.random.default_rng(1)
    free = rng.integers(0, cfg.vocab, (1, 160))
    repetitive = np.tile(free[:, :20], (1, 8))
    k = args.draft_max
    drafts = {"self": m, "q4_0i copy": m.astype("q4_0i"),
              "first layers": first_layers(m, max(1, args.layers // 4))}
    prompts = {"free": free, "repetitive": repetitive}
    want = {p: m.generate(prompts[p], args.new, eos_token_id=())[0, prompts[p].shape[1]:]
            for p in prompts}
    methods = [("plain", "free", {}), ("oracle draft", "free", dict(oracle=want["free"], k=k))]
    methods += [(f"draft: {name}", "free", dict(assistant_model=d, num_assistant_tokens=k))
                for name, d in drafts.items()]
    methods += [("lookup", "free", dict(prompt_lookup_num_tokens=k)),
                ("plain", "repetitive", {}),
                ("lookup", "repetitive", dict(prompt_lookup_num_tokens=k))]
    best: Dict[str, float] = {}
    stats: Dict[str, Any] = {}
    for _ in range(args.rounds):
        for label, p, o in methods:
            o = o if "oracle" in o else dict(o, eos_token_id=())
            t1, _, _ = timed(m, prompts[p], 1, o)
            tn, out, st = timed(m, prompts[p], args.new, o)
            if not np.array_equal(out, want[p]):
                raise SystemExit(f"{label}: output differs from plain greedy decoding")
            key = f"{label}|{p}"
            best[key] = min(best.get(key, np.inf), (tn - t1) / (args.new - 1))
            stats[key] = st
    print(f"\ntarget: Llama shape, {args.layers} layers, width 768, vocabulary 32,000, float32 "
          f"({m.num_parameters() / 1e6:.0f}M parameters); prompts of {free.shape[1]} random tokens "
          f"(free) and a 20-token chunk 8 times (repetitive), {args.new} new tokens, greedy, up to {k} "
          f"drafted a round, {args.threads} threads, best of {args.rounds} rounds; every "
          "output equal to plain greedy decoding's token for token\n")
    print("| method | prompt | decode tokens/s | vs plain | acceptance | tokens / target forward |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, p, _ in methods:
        key, st = f"{label}|{p}", stats[f"{label}|{p}"]
        speed, base = 1 / best[key], 1 / best[f"plain|{p}"]
        acc = "" if st is None else f"{st.acceptance_rate:.2f}"
        tpf = "1" if st is None else f"{st.tokens_per_forward:.2f}"
        print(f"| {label} | {p} | {speed:.1f} | {speed / base:.2f}x | {acc} | {tpf} |")
    print(machine.footer())
    return 0


if __name__ == "__main__":
    run_bench(main, "results/generation.md", "speculative")
