"""Benchmark: the in-memory format a quantised GGUF file loads as by default, chosen by
measurement (issue 53).

A random Llama-shaped model (vocab 8,192, D=512, 8 query and 4 K/V heads, SwiGLU of 1,536,
4 layers, tied; its matrices scaled 2.5x so the logits are not flat) is written by blockc's
own save_gguf as F32 (the reference) and as Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q6_K and the
mixes Q4_K_M, Q5_K_M, Q3_K_M, Q2_K, IQ4_NL and IQ4_XS (llama.cpp's recipes). Each
quantised file is loaded as every blockc choice it can load as: ``dtype="exact"`` (each
matrix in the format that holds the file's very weights, float activations: the exact
path), ``"integer"`` (each matrix's very blocks multiplied by integer dot products on
8-bit activations, as llama.cpp multiplies them), and each named format (float32,
bfloat16, float16, q8_0, q4_0, q5_0, q4_k, q6_k and their integer twins: requantised
where they do not hold the file's blocks). For each:

  decode  greedy tokens/s through a float32 KV cache, a 16-token prompt then --new tokens
          (the best of --repeats rounds, the least disturbed on a shared machine; the
          choices alternate within each round)
  KL      mean KL(float32 || choice) of the next-token distributions over a fixed
          64-token sequence, against the float32 model's logits

The default of each GGUF type (blockc.checkpoint.gguf.DEFAULT_FORMAT, what ``dtype=None``
loads) is the fastest choice whose KL is within llama.cpp's on the same file. llama.cpp is
not run here; its arithmetic is blockc's ``"integer"``
path (the file's blocks, activations quantised to 8 bits as ggml's vec_dot does), whose KL
the "gguf" section of docs/speed.md measured beside llama.cpp's on the same files (Q8_0
1.27e-02 against 1.26e-02, Q4_0 7.59e-01 against 7.60e-01). For Q4_1, which blockc has no
integer format of, the budget is the exact path's KL plus the most 8-bit activations in
blocks of 32 add on the Q4_0, Q5_0 and Q8_0 files of the same model (llama.cpp multiplies
Q4_1 by q8_1 activations, blocks of 32; every type has an integer format today). The file's
own blocks come first: the exact path, then the integer path if it is MARGIN (1.25x) as fast
within the budget, then any other choice (a conversion) if it is MARGIN x as fast as that
(the machine is shared; a choice's speed is the best of the rows computing what it computes,
every matrix in the same format: one computation measured several times); each must stay
within the budget on the models of seeds 1 and 2 too (KL only). The chosen table is
printed (each file's every choice with --detail); blockc.checkpoint.gguf.DEFAULT_FORMAT
holds it.

    python benches/bench_formats.py                   # the table (--detail: every choice)
    python benches/bench_formats.py --repeats 1 --new 16 --types Q4_1   # a look

With --docs the output also replaces the "formats" section of docs/results/sizes.md.
"""
from __future__ import annotations

import argparse
import os
import tempfile
from typing import Dict, List, Optional, Tuple

import numpy as np

import blockc
from blockc.checkpoint.gguf import INTEGER, GGUF_DTYPES
from blockc.checkpoint.hf import LOAD_DTYPES
from bench_gguf import decode_rate, kl  # noqa: E402
from doc_section import run as run_bench  # noqa: E402
from machine import cpu_name, steal_share  # noqa: E402

TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q6_K", "Q4_K_M", "Q5_K_M", "Q3_K_M", "Q2_K",
         "IQ4_NL", "IQ4_XS")


def config(layers: int) -> "blockc.GPTConfig":
    return blockc.GPTConfig(vocab=8192, context=512, width=512, heads=8, kv_heads=4,
                            layers=layers, d_ff=1536, eps=1e-5, tie_weights=True, norm="rms",
                            activation="swiglu", positions="rope", rope_theta=10000.0,
                            qkv_bias=False, out_bias=False, mlp_bias=False)


#: the random models: speed on the first, KL on each (a default must hold on all)
SEEDS = (0, 1, 2)

#: the types whose llama.cpp products quantise activations in blocks of 32, as Q4_1's do
SAME_ACTIVATIONS = ("Q4_0", "Q5_0", "Q8_0")


def model(cfg: "blockc.GPTConfig", seed: int) -> "blockc.GPT":
    """A random model of ``cfg``, its matrices scaled 2.5x (logits that are not flat)."""
    m = blockc.GPT.random(cfg, seed=seed)
    for name, t in m.layout.items():
        if t.packed:
            m.write_tensor(name, m.read_tensor(name) * np.float32(2.5))
    return m


#: a choice other than the exact path must decode this much faster to be the default (the
#: machine is shared: each rate is the best of the rounds, the least disturbed)
MARGIN = 1.25


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--new", type=int, default=48, help="generated tokens per decode run")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--detail", action="store_true", help="every choice's row, per file")
    args = ap.parse_args(argv)
    try:
        import llama_cpp
    except ImportError:
        llama_cpp = None
    types = args.types.split(",")
    assert all(t in GGUF_DTYPES for t in types), types
    blockc.set_num_threads(args.threads)
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average "
          f"{os.getloadavg()[0]:.2f} at the start; {steal_share(None)} steal since boot; "
          f"ISA {blockc.get_isa()}; {args.threads} thread(s)")
    cfg = config(args.layers)
    rng = np.random.default_rng(0)
    text = rng.integers(0, cfg.vocab, (1, 64))
    prompt = rng.integers(0, cfg.vocab, (1, 16))
    choices = ["exact", "integer"] + [d for d in LOAD_DTYPES
                                      if d not in ("integer", "exact", "bfloat16i")]
    summary: list = []
    with tempfile.TemporaryDirectory() as d:
        refs: Dict[int, Tuple["blockc.GPT", np.ndarray]] = {}
        file_types: Dict[str, set] = {}  # file type -> the ggml types of its matrices
        kls: Dict[Tuple[int, str, str], float] = {}

        def ref(seed: int):
            if seed not in refs:
                m = model(cfg, seed)
                refs[seed] = (m, m(text)[0])
            return refs[seed]

        def path(seed: int, t: str) -> str:
            p = os.path.join(d, f"m{seed}-{t}.gguf")
            if not os.path.exists(p):
                ref(seed)[0].save_gguf(p, t)
            return p

        def kl_of(seed: int, t: str, c: str) -> float:
            if (seed, t, c) not in kls:
                m = blockc.GPT.from_pretrained(path(seed, t), dtype=c)
                kls[seed, t, c] = kl(ref(seed)[1], m(text)[0])
            return kls[seed, t, c]

        def budget(seed: int, t: str) -> float:
            """llama.cpp's arithmetic's KL on the file (blockc's integer path) where blockc
            has it; else the exact path's plus the most 8-bit activations in blocks of 32
            (q8_0's, as Q4_1's q8_1) add on Q4_0, Q5_0 and Q8_0 files of that model."""
            if _has_integer(file_types[t]):
                return kl_of(seed, t, "integer")
            return kl_of(seed, t, "exact") + max(
                kl_of(seed, x, "integer") - kl_of(seed, x, "exact") for x in SAME_ACTIVATIONS)

        print(f"model: {cfg.layers} layers, {blockc.gpt_parameter_count(cfg):,} parameters; "
              f"decode {args.new} tokens after 16, best of {args.repeats}\n")
        for t in types:
            models = {}
            for c in choices:
                try:
                    models[c] = blockc.GPT.from_pretrained(path(0, t), dtype=c)
                except (ValueError, TypeError) as e:  # a choice this file cannot load as
                    print(f"{t} as {c}: not loadable ({e})")
            rates: Dict[str, List[float]] = {c: [] for c in models}
            computes: Dict[str, tuple] = {}
            for _ in range(args.repeats):
                for c, m in models.items():
                    rates[c].append(decode_rate(m, prompt, args.new))
            v = {}
            for c, m in models.items():
                kls[0, t, c] = kl(ref(0)[1], m(text)[0])
                v[c] = (max(rates[c]), kls[0, t, c], m.dtype)
                # what it computes with: every matrix's format (a mixed file's exact and
                # integer paths are both m.dtype "mixed")
                computes[c] = tuple(sorted((k, str(f)) for k, f in m.dtypes.items()))
                file_types[t] = set(m.gguf_types.values())
            del models
            b0 = budget(0, t)
            # a choice's speed: the best of every choice computing what it computes (the same
            # computation, measured once per such row)
            def speed(c: str) -> float:
                return max(v[o][0] for o in v if computes[o] == computes[c])

            def fits(c: str) -> bool:  # within the budget on every other seed too
                worse = [(sd, kl_of(sd, t, c), budget(sd, t)) for sd in SEEDS[1:]
                         if kl_of(sd, t, c) > budget(sd, t)]
                notes.extend(f"{c}: KL {k:.3e} over the budget {b:.3e} on seed {sd}"
                             for sd, k, b in worse)
                return not worse

            # the file's own blocks first: the exact path, then the integer path (the file's
            # blocks, llama.cpp's arithmetic) when MARGIN x as fast within the budget, then
            # the fastest other choice (a conversion) within the budget when MARGIN x as fast
            # as that
            best, notes = "exact", []
            if ("integer" in v and computes["integer"] != computes["exact"]
                    and v["integer"][1] <= b0 and speed("integer") > MARGIN * speed("exact")
                    and fits("integer")):
                best = "integer"
                notes.append(f"integer: within the budget on seeds {SEEDS[1:]} too")
            for r, c in sorted(((speed(c), c) for c, (r, k, held) in v.items() if k <= b0
                                and computes[c] != computes[best]
                                and speed(c) > MARGIN * speed(best)),
                               reverse=True):
                if fits(c):
                    best = c
                    notes.append(f"{c}: within the budget on seeds {SEEDS[1:]} too")
                    break
            same = speed("exact")
            if args.detail:
                print(f"\n{t} file (KL budget {b0:.3e})\n")
                print("| load as | blockc holds | decode tok/s | KL from float32 | within budget |")
                print("|---|---|---|---|---|")
                for c, (r, k, held) in sorted(v.items(), key=lambda kv: -kv[1][0]):
                    print(f"| {c}{' **default**' if c == best else ''} | {held} | {r:.1f} | "
                          f"{k:.3e} | {'yes' if k <= b0 else 'no'} |")
            summary.append((t, best, v, same, b0, "; ".join(notes)))
    print("\n| file | default (dtype=None) | tok/s | KL | exact: tok/s | KL | integer: tok/s | "
          "KL | KL budget | checked on seeds 1, 2 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for t, best, v, same, b0, note in summary:
        r, k = (same, v["exact"][1]) if best == "exact" else v[best][:2]
        print(f"| {t} | {best} ({v[best][2]}) | {r:.0f} | {k:.4e} | {same:.0f} | "
              f"{v['exact'][1]:.4e} | {v['integer'][0]:.0f} | {v['integer'][1]:.4e} | "
              f"{b0:.4e} | {note or '-'} |")
    print("\nllama.cpp: " + (f"llama-cpp-python {llama_cpp.__version__} installed, not run by "
                              "this bench" if llama_cpp else "not installed") + "; its arithmetic "
          "is the integer path (the gguf section's KL of both agree). "
          "blockc.checkpoint.gguf.DEFAULT_FORMAT holds the defaults; "
          "tests/test_gguf_default_format.py checks they load so within the budget.")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    return 0


def _has_integer(types: set) -> bool:
    """Whether blockc multiplies every matrix of a file whose matrices have the ggml
    ``types`` as llama.cpp does (each type has an integer format; F32's norms aside)."""
    return all(x in INTEGER for x in types if x not in ("F32", "F16", "BF16"))


if __name__ == "__main__":
    run_bench(main, "results/sizes.md", "formats")
