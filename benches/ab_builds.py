"""Two builds of blockc against each other: did a change cost speed?

Each round runs the same measurements once with each build, in fresh processes,
alternating which goes first; the table shows each build's median over the rounds
and new / old (< 1: the new build is faster). Both builds on the same machine in
the same run, so a busy neighbour slows both alike.

    git worktree add /tmp/old <commit> && (cd /tmp/old && python setup.py build_ext -i)
    python benches/ab_builds.py --old /tmp/old --new . --rounds 5
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from machine import cpu_name, cpu_times

PROBE = r"""
import json, sys, time, statistics
import numpy as np
import blockc

def per_call(f, seconds):
    f()
    n, t0 = 0, time.perf_counter()
    times = []
    while time.perf_counter() - t0 < seconds or len(times) < 5:
        s = time.perf_counter(); f(); times.append(time.perf_counter() - s)
    return statistics.median(times)

def prepared(W, cfg):
    prep = getattr(blockc, "prepare", None)      # this build's way of validating once
    return prep(W, cfg) if prep else blockc.BlockWeights(W)

out = {}
rng = np.random.default_rng(0)
for name, kw, t, rand in [("toy block", dict(), 4, "msvc"),
                          ("block T=256 D=512", dict(d_model=512, n_heads=8, d_ff=2048, norm="layer", causal=True), 256, "normal"),
                          ("GPT-2 block T=1024", dict(d_model=768, n_heads=12, d_ff=3072, norm="layer", causal=True), 1024, "normal")]:
    cfg = blockc.BlockConfig(**kw)
    W = prepared(blockc.init_block(cfg, 42, rand), cfg)
    x = rng.standard_normal((t, cfg.d_model)).astype(np.float32)
    out[name] = per_call(lambda: blockc.block_forward(x, W, cfg), 0.5 if t < 100 else 2.0)
cfg = blockc.GPTConfig.preset("gpt2", layers=int(sys.argv[1]))
m32 = blockc.GPT.random(cfg, seed=0)
ids = rng.integers(0, cfg.vocab, size=(1, 16))
for dtype in sys.argv[2].split(","):
    m = m32 if dtype == "float32" else m32.astype(dtype)
    tag = "" if dtype == "float32" else f" {dtype}"
    out[f"GPT{tag} decode, s/token"] = per_call(lambda: m.generate(ids, 16), 3.0) / 16
    out[f"GPT{tag} forward T=256"] = per_call(lambda: m(rng.integers(0, cfg.vocab, size=(1, 256))), 3.0)
print(json.dumps(out))
"""


def run(tree: str, layers: int, dtypes: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    r = subprocess.run([sys.executable, "-c", PROBE, str(layers), dtypes], env=env, cwd=os.path.abspath(tree),
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{tree}: {r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="a source tree with its extension built in place")
    ap.add_argument("--new", default=".")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layers", type=int, default=12, help="GPT-2 small layers (12)")
    ap.add_argument("--dtypes", default="float32",
                    help="the GPT's weight types, comma-separated (float32,bfloat16,q8_0)")
    a = ap.parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{cpu_name()}, {os.cpu_count()} CPUs; load average {load:.2f} at the start; "
          f"{a.rounds} rounds, builds alternating")
    t0 = cpu_times()
    res = {"old": [], "new": []}
    for i in range(a.rounds):
        order = ("old", "new") if i % 2 == 0 else ("new", "old")
        for which in order:
            res[which].append(run(getattr(a, which), a.layers, a.dtypes))
    t1 = cpu_times()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    steal = (100.0 * (t1[0] - t0[0]) / max(1, t1[1] - t0[1])) if t0 and t1 else float("nan")
    print(f"load average {load:.2f} at the end; steal {steal:.1f}% over the run")
    print()
    print("| measurement | old | new | new / old |")
    print("| --- | --- | --- | --- |")
    for key in res["old"][0]:
        o = statistics.median(r[key] for r in res["old"])
        n = statistics.median(r[key] for r in res["new"])
        unit, scale = ("µs", 1e6) if o < 1e-3 else ("ms", 1e3)
        print(f"| {key} | {o * scale:.2f} {unit} | {n * scale:.2f} {unit} | {n / o:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
