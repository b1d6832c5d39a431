"""Embeddings throughput: ``GPT.embed`` (last-token pooling, normalised) against
transformers (the same checkpoint's decoder through ``AutoModelForCausalLM``, the last ``hidden_states`` entry
pooled the same way, torch at the same thread count), on a random Llama-shaped model of
``--layers`` layers (width 768, 32,000 words) that blockc's save_pretrained writes.
Batches of ``--batch`` inputs of ``--tokens`` tokens; tokens/s, the best of ``--rounds``
alternating rounds. The two answers are checked to agree (max |difference|) first.

llama.cpp's embeddings are not measured here: this machine has no llama.cpp build.

    python benches/bench_embed.py [--layers 4] [--tokens 128] [--batch 8] [--docs]

With --docs the output also replaces the "embed" section of docs/serving.md.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import List, Optional

import numpy as np

import blockc
from bench_decode import Machine
from bench_llama import llama_config
from doc_section import run as run_bench


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    import torch
    import transformers
    machine = Machine()
    threads = min(2, os.cpu_count() or 1)
    blockc.set_num_threads(threads)
    torch.set_num_threads(threads)
    print(machine.header())
    m = blockc.GPT.random(llama_config(args.layers), seed=0)
    ids = np.random.default_rng(0).integers(0, 32000, (args.batch, args.tokens))
    with tempfile.TemporaryDirectory() as tmp:
        m.save_pretrained(tmp)
        hm = transformers.AutoModelForCausalLM.from_pretrained(
            tmp, dtype=torch.float32).model.eval()  # the decoder, no head

    @torch.no_grad()
    def hf() -> np.ndarray:
        h = hm(torch.as_tensor(ids), output_hidden_states=True).hidden_states[-1][:, -1]
        return torch.nn.functional.normalize(h, dim=-1).numpy()

    def ours() -> np.ndarray:
        return m.embed(ids, pooling="last")

    diff = float(np.abs(hf() - ours()).max())
    best = {"blockc": float("inf"), "transformers": float("inf")}
    for _ in range(args.rounds):
        for name, fn in (("blockc", ours), ("transformers", hf)):
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    n = args.batch * args.tokens
    print(f"\nLlama-shaped, {args.layers} layers, width 768, 32,000 words, float32; "
          f"{args.batch} inputs of {args.tokens} tokens a call, last-token pooling, "
          f"normalised; best of {args.rounds} alternating rounds; torch {torch.__version__}, "
          f"transformers {transformers.__version__}; max |difference| {diff:.1e}\n")
    print("| engine | ms a batch | tokens/s | inputs/s |")
    print("| --- | --- | --- | --- |")
    for name, t in best.items():
        print(f"| {name} | {t * 1e3:.1f} | {n / t:,.0f} | {args.batch / t:,.1f} |")
    print(f"\nblockc / transformers: {best['transformers'] / best['blockc']:.2f}x")
    print(machine.footer())
    return 0


if __name__ == "__main__":
    run_bench(main, "serving.md", "embed")
