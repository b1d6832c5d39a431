"""Two builds' integer GEMMs (a prompt's products) against each other.

A prompt of --rows rows of x by a matrix of --outputs rows of K columns, packed in
each integer format (``blockc.ops.pack``) and multiplied by ``blockc.ops.linear``:
the products a prefill runs (vpdpbusd on AVX-512 VNNI, pmaddubsw or AVX-VNNI on
AVX2). Each round runs every format and K once with each build, in fresh
processes, alternating which goes first; a process times each product --repeats
times and keeps its best. The table: each build's best GOPS (2 rows K outputs over
the time) over the rounds, and new / old (> 1: the new build is faster), with the
CPU, the load average and the hypervisor's steal. --isa forces an instruction set
in both (BLOCKC_ISA).

    git worktree add /tmp/old <commit> && (cd /tmp/old && python setup.py build_ext -i)
    python benches/ab_gemm.py --old /tmp/old --new . --formats q5_ki,q6_ki --cols 3072,8192

``--docs`` writes the table into docs/results/panels.md, section ab-gemm (ab-gemm-<tag>
with ``--tag``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Dict, List, Optional

from machine import cpu_name, cpu_times, run_footer

PROBE = r"""
import json, sys, time
import numpy as np
import blockc
from blockc import ops
fmts, cols, rows, outs, threads, repeats = sys.argv[1:7]
blockc.set_num_threads(int(threads))
n, oc, out = int(rows), int(outs), {}
for K in map(int, cols.split(",")):
    rng = np.random.default_rng(K)
    w = rng.standard_normal((oc, K), dtype=np.float32) * np.float32(0.05)
    x = rng.standard_normal((n, K), dtype=np.float32)
    for fmt in fmts.split(","):
        p = ops.pack(w, fmt)
        ops.linear(x, p)
        best = float("inf")
        for _ in range(int(repeats)):
            t = time.perf_counter()
            ops.linear(x, p)
            best = min(best, time.perf_counter() - t)
        out[f"{fmt} {K}"] = 2.0 * n * K * oc / best / 1e9
print(json.dumps(out))
"""


def run(tree: str, a: argparse.Namespace) -> Dict[str, float]:
    """One process of ``tree``'s build: {"<format> <K>": GOPS}."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    if a.isa:
        env["BLOCKC_ISA"] = a.isa
    r = subprocess.run([sys.executable, "-c", PROBE, a.formats, a.cols, str(a.rows),
                        str(a.outputs), str(a.threads), str(a.repeats)],
                       env=env, cwd=os.path.abspath(tree), capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{tree}: {r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="a source tree with its extension built in place")
    ap.add_argument("--new", default=".")
    ap.add_argument("--formats", default="q5_ki,q6_ki,q4_ki,iq4_xsi")
    ap.add_argument("--cols", default="3072,8192,14336", help="K: the rows' lengths")
    ap.add_argument("--rows", type=int, default=512, help="the prompt's rows (512)")
    ap.add_argument("--outputs", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5, help="timings a process keeps the best of")
    ap.add_argument("--isa", default="", help="BLOCKC_ISA for both builds (default: auto)")
    ap.add_argument("--tag", default="", help="with --docs: the section ab-gemm-<tag>")
    a = ap.parse_args(argv)
    for name in ("rows", "outputs", "threads", "rounds", "repeats"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1")
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; load average "
          f"{os.getloadavg()[0]:.2f} at the start; ISA {a.isa or 'auto'}; {a.threads} "
          f"thread(s); {a.rows} rows x K -> {a.outputs} outputs; best of {a.repeats} a "
          f"process, of {a.rounds} rounds, builds alternating")
    t0 = cpu_times()
    res: Dict[str, List[Dict[str, float]]] = {"old": [], "new": []}
    for i in range(a.rounds):
        for which in (("old", "new") if i % 2 == 0 else ("new", "old")):
            res[which].append(run(getattr(a, which), a))
    print()
    print("| format | K | old GOPS | new GOPS | new / old |")
    print("|---|---|---|---|---|")
    for key in res["old"][0]:
        o = max(r[key] for r in res["old"])
        n = max(r[key] for r in res["new"])
        fmt, k = key.split()
        print(f"| {fmt} | {int(k):,} | {o:.0f} | {n:.0f} | {n / o:.3f} |")
    print()
    print(run_footer(t0))
    return 0


if __name__ == "__main__":
    from doc_section import run as run_bench
    pre = argparse.ArgumentParser(add_help=False)  # the section is the tag's
    pre.add_argument("--tag", default="")
    known = pre.parse_known_args()[0]
    run_bench(main, "results/panels.md", f"ab-gemm-{known.tag}" if known.tag else "ab-gemm")
