"""Embeddings throughput: ``GPT.embed`` (last-token pooling, normalised) against
transformers (the same checkpoint's decoder through ``AutoModelForCausalLM``, the last ``hidden_states`` entry
pooled the same way, torch at the same thread count), on a random Llama-shaped model of
``--layers`` layers (width 768, 32,000 words) that blockc's save_pretrained writes.
Batches of ``--batch`` inputs of ``--tokens`` tokens; tokens/s, the best of ``--rounds``
alternating rounds. The two answers are checked to agree (max |difference|) first.

llama.cpp: the same weights written as an f32 GGUF file (benches/gguf_export.py's
write_llama), embedded by llama-cpp-python (``Llama(embedding=True)``, last-token pooling,
``Llama.embed(normalize=True)``: its own batching of the inputs, one sequence each) at the
same thread count, the same token ids (its ``tokenize`` handed the ids: the GGUF's vocabulary
is synthetic). Without llama_cpp importable the column is left out and the run says why.

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


def llama_embedder(path: str, ids: np.ndarray, threads: int):
    """A callable embedding the rows of ids with llama.cpp (the GGUF file at path), or
    (None, why) when llama-cpp-python is not there."""
    try:
        import llama_cpp
    except ImportError as e:
        return None, f"no llama.cpp column: {e}"
    from llama_peer import open_model
    b, t = ids.shape
    llm = open_model(llama_cpp, path, "f32", embedding=True, n_ctx=b * t, n_batch=b * t,
                     n_ubatch=b * t, n_threads=threads, n_threads_batch=threads,
                     pooling_type=llama_cpp.LLAMA_POOLING_TYPE_LAST, verbose=False)
    rows = {str(i).encode(): [int(x) for x in r] for i, r in enumerate(ids)}
    llm.tokenize = lambda text, *a, **k: rows[bytes(text)]  # the ids themselves
    keys = [str(i) for i in range(b)]

    def run() -> np.ndarray:
        return np.asarray(llm.embed(keys, normalize=True), np.float32)
    return run, f"llama-cpp-python {llama_cpp.__version__}"


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
    engines = {"blockc": ours, "transformers": hf}
    with tempfile.TemporaryDirectory() as tmp:
        from gguf_export import write_llama
        path = os.path.join(tmp, "embed-f32.gguf")
        write_llama(m, path, "f32")
        llama, why = llama_embedder(path, ids, threads)
        print(why)
        if llama is not None:
            engines["llama.cpp"] = llama
            ldiff = float(np.abs(llama() - ours()).max())
        best = {name: float("inf") for name in engines}
        for _ in range(args.rounds):
            for name, fn in engines.items():
                t0 = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - t0)
        del engines, llama  # the llama.cpp model freed before its file goes
    n = args.batch * args.tokens
    print(f"\nLlama-shaped, {args.layers} layers, width 768, 32,000 words, float32; "
          f"{args.batch} inputs of {args.tokens} tokens a call, last-token pooling, "
          f"normalised; best of {args.rounds} alternating rounds; torch {torch.__version__}, "
          f"transformers {transformers.__version__}; max |difference| {diff:.1e}"
          + (f", llama.cpp's {ldiff:.1e}" if "llama.cpp" in best else "") + "\n")
    print("| engine | ms a batch | tokens/s | inputs/s |")
    print("| --- | --- | --- | --- |")
    for name, t in best.items():
        print(f"| {name} | {t * 1e3:.1f} | {n / t:,.0f} | {args.batch / t:,.1f} |")
    print(f"\nblockc / transformers: {best['transformers'] / best['blockc']:.2f}x")
    if "llama.cpp" in best:
        print(f"blockc / llama.cpp: {best['llama.cpp'] / best['blockc']:.2f}x")
    print(machine.footer())
    return 0


if __name__ == "__main__":
    run_bench(main, "serving.md", "embed")
