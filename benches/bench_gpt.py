"""Benchmark: the chapter-6 GPT in C (blockc) against PyTorch eager, same weights, one run.

Two measurements, each the median of --repeats runs after one warm-up, blockc and PyTorch
runs alternating (a busy neighbour slows both alike):
  forward     logits for one sequence of --seq tokens (default 1024, GPT-2 small's context);
  generation  greedy decoding of --new tokens after a --prompt-token prompt, both with a
              KV cache (blockc: m.generate; PyTorch: the same loop over a preallocated
              K/V cache, attention by F.scaled_dot_product_attention), in tokens/s.
GPT-2 small widths (D=768, 12 heads, V=50,257, C=1,024), random N(0, 0.02) weights.
--layers defaults to 12 (the real GPT-2 small); a smaller count is reported in the header.
The speedup column is PyTorch time / blockc time (> 1: blockc is faster).

    python benches/bench_gpt.py                      # GPT-2 small, T=1024, 32 new tokens
    python benches/bench_gpt.py --layers 4 --repeats 3
    python benches/bench_gpt.py --threads 1         # both libraries on one thread

With --docs the output also replaces the "gpt" section of docs/results/generation.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import blockc
import support_path  # noqa: F401  (tests/support: the PyTorch reference)
from doc_section import run as run_bench  # noqa: E402


def _once(fn):
    """(wall seconds, process CPU seconds) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def median_times(fc, ft, repeats):
    """Medians (wall, CPU) of blockc's fc and torch's ft (None: blockc only), after one
    warm-up each.

    The runs alternate (blockc then torch, then torch then blockc, ...), so that a busy
    neighbour on a shared machine slows both sides alike instead of only one of them.
    With one thread each, process CPU time is the steadier measure on a busy machine:
    it leaves out the time a preempted process waits for a core."""
    fc()
    if ft is not None:
        ft()
    tc, tt = [], []
    for i in range(repeats):
        order = [(fc, tc), (ft, tt)] if i % 2 == 0 else [(ft, tt), (fc, tc)]
        for fn, acc in order:
            if fn is not None:
                acc.append(_once(fn))

    def med(acc):
        if not acc:
            return None, None
        return statistics.median(a[0] for a in acc), statistics.median(a[1] for a in acc)

    return med(tc), med(tt)


def torch_gpt(torch, cfg, state_dict):
    """The chapter's GPT in PyTorch eager (tests/support/torch_ref.py), with a KV cache."""
    from torch_ref import GPT
    return GPT.like(cfg, state_dict)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024, help="forward sequence length (1024)")
    ap.add_argument("--prompt", type=int, default=16, help="generation prompt tokens (16)")
    ap.add_argument("--new", type=int, default=32, help="generated tokens (32)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for both blockc and torch (default: each library's own)")
    ap.add_argument("--skip-forward", action="store_true")
    ap.add_argument("--skip-generate", action="store_true")
    args = ap.parse_args(argv)

    try:
        import torch
    except ImportError:
        torch = None
    if args.threads is not None:
        blockc.set_num_threads(args.threads)
        if torch is not None:
            torch.set_num_threads(args.threads)
    cfg = blockc.GPTConfig.preset("gpt2", layers=args.layers)
    m = blockc.GPT.random(cfg, seed=args.seed)
    tm = torch_gpt(torch, cfg, m.state_dict(keep_tied=True)) if torch is not None else None
    rng = np.random.default_rng(args.seed)

    try:
        load = f"load average {os.getloadavg()[0]:.2f} at the start; "
    except (AttributeError, OSError):
        load = ""
    print(f"{load}GPT-2 small widths: V={cfg.vocab} C={cfg.context} D={cfg.width} H={cfg.heads} "
          f"L={cfg.layers}{'' if cfg.layers == 12 else ' (reduced from 12)'}, "
          f"{blockc.gpt_parameter_count(cfg):,} parameters, random weights")
    print(f"blockc {blockc.get_num_threads()} threads, ISA {blockc.get_isa()}; "
          + (f"torch {torch.__version__}, {torch.get_num_threads()} threads" if torch else
             "torch not installed: blockc only")
          + f"; median of {args.repeats} alternating runs after 1 warm-up")
    rows = []
    one_thread = blockc.get_num_threads() == 1 and (torch is None or torch.get_num_threads() == 1)

    def add(name, unit, tc, tt, scale=None):
        """Rows of the table from (wall, cpu) medians; scale: tokens for a rate."""
        for k, kind in enumerate(("wall", "CPU")):
            if kind == "CPU" and not one_thread:
                continue
            c, t = tc[k], tt[k]
            if scale is not None:
                c, t = scale / c, (None if t is None else scale / t)
            rows.append((f"{name}, {kind}", unit, c, t, scale is not None))

    if not args.skip_forward:
        ids = rng.integers(0, cfg.vocab, size=(1, args.seq))
        if tm is not None:
            tids = torch.as_tensor(ids)
            with torch.no_grad():
                t_c, t_t = median_times(lambda: m(ids), lambda: tm(tids), args.repeats)
                diff = float(np.abs(tm(tids).numpy() - m(ids)).max())
            print(f"forward max |blockc - torch| logit difference: {diff:.2e}")
        else:
            t_c, t_t = median_times(lambda: m(ids), None, args.repeats)
        add(f"forward, B=1 T={args.seq}", "s", t_c, t_t)

    if not args.skip_generate:
        prompt = rng.integers(0, cfg.vocab, size=(1, args.prompt))
        if tm is not None:
            tp = torch.as_tensor(prompt)
            with torch.no_grad():
                t_c, t_t = median_times(lambda: m.generate(prompt, args.new),
                                        lambda: tm.generate(tp, args.new), args.repeats)
                same = np.array_equal(tm.generate(tp, args.new).numpy(),
                                      m.generate(prompt, args.new))
            print(f"greedy generation, blockc tokens == torch tokens: {same}")
        else:
            t_c, t_t = median_times(lambda: m.generate(prompt, args.new), None, args.repeats)
        add(f"generate {args.prompt}+{args.new} (KV cache)", "tokens/s", t_c, t_t, args.new)

    print()
    print(f"| {'measurement':<44} | {'blockc':>14} | {'PyTorch eager':>14} | {'blockc speedup':>14} |")
    print(f"|{'-' * 46}|{'-' * 16}|{'-' * 16}|{'-' * 16}|")
    for name, unit, c, t, higher_better in rows:
        fmt = (lambda v: f"{v:.1f} {unit}") if higher_better else (lambda v: f"{v:.3f} {unit}")
        speedup = "n/a" if t is None else f"{(c / t) if higher_better else (t / c):.2f}x"
        print(f"| {name:<44} | {fmt(c):>14} | {('n/a' if t is None else fmt(t)):>14} | "
              f"{speedup:>14} |")
    print("speedup: PyTorch time / blockc time (forward), blockc tokens/s / PyTorch tokens/s"
          " (generation); > 1 means blockc is faster")
    return 0


if __name__ == "__main__":
    run_bench(main, "results/generation.md", "gpt")
