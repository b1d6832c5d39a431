"""Benchmark: loading a GPT-2 small checkpoint directory from a warm page cache.

A Hugging Face directory (config.json + model.safetensors) of GPT-2 small's shapes
with random weights is written to a scratch directory (float32, and a bfloat16
copy), read once so that the page cache holds it, then loaded again and again,
the loaders alternating within each round, median of --repeats rounds:

  blockc         GPT.from_pretrained(dir) as float32, and as bfloat16 and q8_0
                 (packing converts), and from the bfloat16 directory
  transformers   GPT2LMHeadModel.from_pretrained(dir) (when installed)
  floor          one copy of the mapped file's bytes into an array already in
                 memory (reading the weights once at this machine's bandwidth; a
                 loader that packs them into new memory pays that and page faults)

    python benches/bench_load.py              # the table (about a minute)
    python benches/bench_load.py --layers 2   # a quick look

With --docs the output also replaces the "load" section of docs/results/generation.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Callable, Dict, List, Optional

import numpy as np

import blockc
from doc_section import run as run_bench


def timed(f: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    r = f()
    dt = time.perf_counter() - t0
    del r
    return dt


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-peers", action="store_true")
    args = ap.parse_args(argv)

    transformers = None
    if not args.no_peers:
        try:
            import torch  # noqa: F401
            import transformers
            transformers.logging.set_verbosity_error()
            transformers.utils.logging.disable_progress_bar()
        except ImportError:
            transformers = None

    cfg = blockc.GPTConfig.preset("gpt2", layers=args.layers)
    tmp = tempfile.TemporaryDirectory()
    d32, d16 = os.path.join(tmp.name, "f32"), os.path.join(tmp.name, "bf16")
    m = blockc.GPT.random(cfg, seed=0)
    m.save_pretrained(d32)
    m.astype("bfloat16").save_pretrained(d16)
    del m
    f32 = os.path.join(d32, "model.safetensors")
    size = os.path.getsize(f32)
    for d in (d32, d16):  # into the page cache
        with open(os.path.join(d, "model.safetensors"), "rb") as f:
            while f.read(1 << 24):
                pass

    mapped = np.memmap(f32, dtype=np.uint8, mode="r")
    dest = np.ones(size, np.uint8)  # touched: the floor pays no page faults

    def floor():
        np.copyto(dest, mapped)

    loaders: Dict[str, Callable[[], object]] = {
        "floor: copy the file once": floor,
        "blockc float32": lambda: blockc.GPT.from_pretrained(d32),
        "blockc float32 -> bfloat16": lambda: blockc.GPT.from_pretrained(d32, dtype="bfloat16"),
        "blockc float32 -> q8_0": lambda: blockc.GPT.from_pretrained(d32, dtype="q8_0"),
        "blockc bfloat16 dir": lambda: blockc.GPT.from_pretrained(d16),
    }
    if transformers is not None:
        loaders["transformers float32"] = (
            lambda: transformers.GPT2LMHeadModel.from_pretrained(d32))
        loaders["transformers bfloat16 dir"] = (
            lambda: transformers.GPT2LMHeadModel.from_pretrained(d16, torch_dtype="auto"))
    for _ in range(2):  # warm: imports, and this VM's first touch of memory (the host's
        for f in loaders.values():  # page faults: a fresh process's first 500 MB cost ~1 s)
            timed(f)
    times: Dict[str, List[float]] = {k: [] for k in loaders}
    for _ in range(args.repeats):
        for k, f in loaders.items():
            times[k].append(timed(f))
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}

    try:
        load = f"load average {os.getloadavg()[0]:.2f}; "
    except (AttributeError, OSError):
        load = ""
    print(f"{load}GPT-2 small shapes, {cfg.layers} layers, {blockc.gpt_parameter_count(cfg):,} "
          f"parameters; float32 file {size / 1e6:.0f} MB, bfloat16 file "
          f"{os.path.getsize(os.path.join(d16, 'model.safetensors')) / 1e6:.0f} MB; warm page "
          f"cache; median of {args.repeats} rounds, loaders alternating; "
          f"{blockc.get_num_threads()} blockc threads")
    print()
    base = med.get("transformers float32")
    head = f"{'loader':<30} {'median s':>8} {'fastest s':>9} {'GB/s of file':>13} {'x floor':>8}"
    head += f" {'transformers f32 / this':>24}" if base else ""
    print(head)
    for k, t in med.items():
        row = f"{k:<30} {t:>8.3f} {best[k]:>9.3f} {size / t / 1e9:>13.2f} {t / med['floor: copy the file once']:>8.2f}"
        if base:
            row += f" {base / t:>24.2f}"
        print(row)
    print()
    print("(on this VM the kernel's page faults for new memory vary from run to run, by up to a "
          "second for 500 MB;\n the fastest run shows the loader without them. transformers maps "
          "the file and copies nothing;\n blockc packs the weights into panels, one pass over them)")
    return 0


if __name__ == "__main__":
    run_bench(main, "results/generation.md", "load")
