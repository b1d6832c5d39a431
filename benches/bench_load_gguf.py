"""Benchmark: loading GGUF files of Qwen2.5-0.5B's shapes from a warm page cache (issue 51).

The files of benches/bench_sizes.py (random weights written by blockc's save_streaming, kept
in its --dir and reused; written here when missing): Q8_0, Q4_0 and Q4_K_M by default. Each
load runs in a fresh subprocess (a process's first touch of its memory is part of what a
user waits for, and its peak RSS is its own), engines alternating within each round:

  blockc     GPT.from_pretrained(file), with wall timers on its phases: the header (the
             metadata and the 151,936-token vocabulary parsed), the tensors' bytes read
             (os.preadv from the page cache), the blocks' checks (finite scales), Q4_0/Q5_0
             blocks converted to Q8_0's, the blocks moved into panels (C, into the model's
             buffer), the rest (the model, the generation config)
  llama.cpp  llama_cpp.Llama(model_path=file) with its plain CPU buffers (it maps the file;
             the repacked/AMX buffers crash on this machine, see docs/results/sizes.md)
  floor      one read of the file's bytes into memory already touched (what reading every
             byte once costs on this machine)

For each: the least load time of --repeats rounds, the process's CPU seconds for that load
(user + system: on a shared machine the wall time includes other processes' time slices),
its RSS growth while loading and its peak RSS (ru_maxrss). The header line gives the CPU,
the load average and the steal time.

    python benches/bench_load_gguf.py                      # Q8_0, Q4_0, Q4_K_M, 3 rounds
    python benches/bench_load_gguf.py --types Q8_0 --repeats 1

With --docs the output also replaces the "load-gguf" section of docs/results/sizes.md.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

from doc_section import run as run_bench
from machine import cpu_name, cpu_times, steal_share

ENGINES = ("blockc", "llama.cpp", "floor")


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _phases() -> Dict[str, float]:
    """Wall timers around the load's phases (wrapping the functions that do them)."""
    from blockc.checkpoint import gguf as g, gguf_tensors as gt
    from blockc.io import gguf as fmt
    times: Dict[str, float] = {}

    def wrap(mod: Any, name: str, label: str) -> None:
        f = getattr(mod, name)

        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                times[label] = times.get(label, 0.0) + time.perf_counter() - t0
        setattr(mod, name, timed)
    wrap(g.fmt, "read", "header")
    wrap(fmt._FileReader, "read_at", "read")
    wrap(gt, "_check_scales", "checks")
    wrap(gt, "_check_float_bits", "checks")
    wrap(gt, "convert_ggml", "convert")
    wrap(g, "pack_ggml", "panels")
    wrap(gt, "pack_ggml", "panels")
    return times


def worker(job: Dict[str, Any]) -> Dict[str, Any]:
    """One engine, one file: load it once; the figures."""
    engine, path = job["engine"], job["path"]
    times: Dict[str, float] = {}
    if engine == "blockc":
        import blockc
        times = _phases()
    elif engine == "llama.cpp":
        import llama_cpp
        import llama_peer
    else:
        import numpy as np
        dest = np.ones(os.path.getsize(path), np.uint8)  # touched: no page faults
    before = rss_mb()
    c0 = os.times()
    t0 = time.perf_counter()
    if engine == "blockc":
        m = blockc.GPT.from_pretrained(path)
    elif engine == "llama.cpp":
        with llama_peer.extra_bufts_off():
            m = llama_cpp.Llama(model_path=path, n_ctx=64, n_threads=1, verbose=False)
    else:
        with open(path, "rb") as f:
            f.readinto(memoryview(dest))
        m = dest
    wall = time.perf_counter() - t0
    c1 = os.times()
    out = {"load_s": wall, "cpu_s": (c1.user - c0.user) + (c1.system - c0.system),
           "rss_load_mb": rss_mb() - before,
           "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "phases": times}
    del m
    return out


def run_worker(job: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    # the worker imports the blockc this process runs (a worktree's, not another install's)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker",
                            json.dumps(job)], capture_output=True, text=True, timeout=600,
                           env=env)
    except subprocess.TimeoutExpired:
        print(f"  ({job['engine']} on {os.path.basename(job['path'])}: over 600 s)")
        return None
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["?"])[-1][:160]
        print(f"  ({job['engine']} on {os.path.basename(job['path'])}: exit {r.returncode}: "
              f"{tail})")
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="Q8_0,Q4_0,Q4_K_M")
    ap.add_argument("--size", default="qwen0.5b")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--dir", default=os.path.join(os.path.expanduser("~"), ".cache",
                                                  "blockc-bench-sizes"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    import bench_sizes  # the files' shapes and writer (imports blockc and llama_peer)
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        llama_cpp = None
    engines = [e for e in args.engines.split(",") if e != "llama.cpp" or llama_cpp is not None]
    os.makedirs(args.dir, exist_ok=True)
    t_start = cpu_times()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start; "
          f"{steal_share(None)} steal since boot")
    print(f"{args.size} files of benches/bench_sizes.py, warm page cache; each load in a fresh "
          f"process, engines alternating; the least wall time of {args.repeats} rounds and that "
          "load's CPU seconds (user + system)\n")
    rows = []
    for t in args.types.split(","):
        path = bench_sizes.ensure_file(args.dir, args.size, t)
        with open(path, "rb") as f:  # into the page cache
            while f.read(1 << 24):
                pass
        best: Dict[str, Dict[str, Any]] = {}
        for r in range(args.repeats):
            order = engines[r % len(engines):] + engines[:r % len(engines)]
            for e in order:
                res = run_worker({"engine": e, "path": path})
                if res is not None and (e not in best or res["load_s"] < best[e]["load_s"]):
                    best[e] = res
        size = os.path.getsize(path) / 1e6
        for e in engines:
            if e in best:
                rows.append((t, e, size, best[e], best.get("llama.cpp")))
    print("| file | engine | file MB | load s | CPU s | / llama.cpp | RSS after load MB "
          "| peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|")
    for t, e, size, b, peer in rows:
        ratio = f"{b['load_s'] / peer['load_s']:.2f}" if peer else "-"
        print(f"| {t} | {e} | {size:,.0f} | {b['load_s']:.2f} | {b['cpu_s']:.2f} | {ratio} | "
              f"{b['rss_load_mb']:,.0f} | {b['peak_mb']:,.0f} |")
    print("\nblockc's phases (wall s of the fastest load): header, read (preadv from the page "
          "cache), checks, convert (Q4_0/Q5_0 blocks to Q8_0's), panels (C), rest")
    print("| file | header | read | checks | convert | panels | rest |")
    print("|---|---|---|---|---|---|---|")
    for t, e, size, b, _ in rows:
        if e != "blockc":
            continue
        ph = b["phases"]
        rest = b["load_s"] - sum(ph.values())
        cells = [f"{ph.get(k, 0.0):.2f}" for k in ("header", "read", "checks", "convert",
                                                   "panels")]
        print(f"| {t} | " + " | ".join(cells) + f" | {rest:.2f} |")
    print(f"\nload average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end; steal "
          f"{steal_share(t_start)} during the run")
    return 0


if __name__ == "__main__":
    run_bench(main, "results/sizes.md", "load-gguf")
