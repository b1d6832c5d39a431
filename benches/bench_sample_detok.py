"""Benchmark: the server's per-token Python work beside the forward (issue 52).

- top-p: :func:`blockc.generation.logits.top_p_mask` (the nucleus looked for among the
  largest logits, the whole sort only when that cannot tell) against the whole sort
  it replaced (kept here), on one row of random normal logits of a vocabulary of
  32,000 and 151,936 at three spreads (a flat row's nucleus is most of the vocabulary:
  the whole sort decides, after one failed look), and after top-k 40; the same mask
  asserted for every row timed.
- detokenisation: :class:`blockc.serve.engine.TextTail` (a window decoded per token)
  against decoding the whole answer again per token (what it did), per token at the
  end of answers of 100, 1,000 and 4,000 tokens of a byte-level BPE tokenizer trained
  here on a few lines; the same text asserted.

Medians of --repeats timings. The CPU, load average and steal time are printed.

    python benches/bench_sample_detok.py [--repeats 15] [--docs]

With --docs the output also replaces the "sample-detok" section of docs/serving.md.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import time
from typing import List, Optional

import numpy as np

import support_path  # noqa: F401  (tests/support: the tokenizer the tests train)
from doc_section import run as run_bench
from machine import cpu_name, cpu_times, steal_share

import blockc
from blockc.generation import logits as L
from blockc.serve.engine import TextTail


def whole_sort_top_p(z, p):
    """The whole-vocabulary sort top_p_mask was before."""
    order = np.argsort(z, axis=-1, kind="stable")
    probs = np.take_along_axis(L._softmax(z), order, axis=-1)
    drop = np.cumsum(probs, axis=-1) <= 1.0 - p
    drop[:, -1] = False
    keep = np.ones(z.shape, bool)
    np.put_along_axis(keep, order, ~drop, axis=-1)
    return keep


def timed(fn, repeats):
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args(argv)
    t0 = cpu_times()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} CPUs; load average "
          f"{os.getloadavg()[0]:.2f} at the start")

    print("\ntop-p 0.9 of one row (ms): the candidate sort vs the whole sort")
    print(f"  {'vocab':>7} {'logits':>16} {'candidates':>11} {'whole sort':>11} {'ratio':>6}")
    for v in (32000, 151936):
        for label, scale, k in (("normal x1", 1.0, None), ("normal x3", 3.0, None),
                                ("normal x8", 8.0, None), ("x1, top-k 40", 1.0, 40)):
            z = np.random.default_rng(0).standard_normal((1, v)) * scale
            z -= z.max()
            if k is not None:
                z = np.where(L.top_k_mask(z, k), z, -np.inf)
            assert np.array_equal(L.top_p_mask(z, 0.9), whole_sort_top_p(z, 0.9))
            a = timed(lambda: L.top_p_mask(z, 0.9), args.repeats)
            b = timed(lambda: whole_sort_top_p(z, 0.9), args.repeats)
            print(f"  {v:7d} {label:>16} {a * 1e3:11.2f} {b * 1e3:11.2f} {b / a:5.1f}x")

    from chat_dirs import chat_dir
    with tempfile.TemporaryDirectory() as d:
        chat_dir(__import__("pathlib").Path(d), "chatml", vocab=800)
        tok = blockc.Tokenizer.from_pretrained(d)
    ids = tok.encode("the block reads the stream, a résidual flows → 🙂 " * 400).tolist()

    def decode(x):
        return tok.decode(x, skip_special_tokens=True)
    print("\ndetokenisation per token at the answer's end (us): a window vs the whole answer")
    print(f"  {'tokens':>7} {'window':>9} {'whole':>9} {'ratio':>6}")
    for n in (100, 1000, 4000):
        base = TextTail(decode, [])
        for t in ids[:n - 20]:
            base.push(t)
        last = ids[n - 20:n]
        runs = []
        for _ in range(args.repeats + 1):
            tail = copy.deepcopy(base)
            t0_ = time.perf_counter()
            for t in last:
                tail.push(t)
            runs.append(time.perf_counter() - t0_)
            assert tail.text + tail.flush()[len(tail.text) - tail.sent:] == decode(ids[:n])
        a = statistics.median(runs[1:]) / len(last)

        def whole(base=ids[:n - 20], last=last):
            for i in range(len(last)):
                decode(base + last[:i + 1])
        b = timed(whole, args.repeats) / len(last)
        print(f"  {n:7d} {a * 1e6:9.1f} {b * 1e6:9.1f} {b / a:5.1f}x")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end; steal {steal_share(t0)}")
    return 0


if __name__ == "__main__":
    sys.exit(run_bench(main, "serving.md", "sample-detok"))
