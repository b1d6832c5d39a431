"""Leak check: N calls of every public C entry point (through cffi, good and
failing arguments alternately, so the error paths run too) and of the main
Python API calls; peak RSS and glibc's malloc'd bytes before and after.

Each entry point runs in a fresh subprocess, so each peak-RSS figure is its own:
after --warmup calls, ru_maxrss (peak RSS) and mallinfo2().uordblks (bytes
malloc'd and not freed) are read; after --calls more calls they are read again.
A leak of even 16 bytes a call shows in the second column; the first column is
the issue's figure (20,000 calls, peak RSS flat: under --limit-mb growth).

    python benches/leaks.py                  # every entry point, 20,000 calls each
    python benches/leaks.py --calls 2000 bc_attention GPT.__call__
    python benches/leaks.py --list

Exit status 1 when a case grows peak RSS past --limit-mb.

With --docs the output also replaces the "leaks" section of docs/reliability.md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import support_path  # noqa: F401  (tests/support on sys.path)
from doc_section import run as run_bench  # noqa: E402
from leak_cases import CALL_CAP, _cases, c_entry_points, measure  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="cases to run (default: all)")
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--limit-mb", type=float, default=20.0)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(measure(a.one, a.calls, a.warmup)))
        return 0
    cases = _cases()
    missing = sorted(set(c_entry_points()) - set(cases))
    if a.list:
        print("\n".join(cases))
        return 0
    names = a.names or list(cases)
    print(f"{'entry point':<26} {'calls':>7} {'s':>6} {'peak RSS MB':>11} "
          f"{'RSS growth MB':>13} {'malloc growth KB':>16}")
    worst, failed = 0.0, []
    for name in names:
        calls = min(a.calls, CALL_CAP.get(name, a.calls))
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", name,
                              "--calls", str(calls), "--warmup", str(min(a.warmup, calls))],
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{name:<26} FAILED\n{out.stderr}")
            failed.append(name)
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        worst = max(worst, r["rss_growth_mb"])
        flag = "" if r["rss_growth_mb"] < a.limit_mb else "  <-- over the limit"
        if flag:
            failed.append(name)
        print(f"{name:<26} {r['calls']:>7} {r['seconds']:>6.1f} {r['peak_rss_mb']:>11.1f} "
              f"{r['rss_growth_mb']:>13.2f} {r['malloc_growth_kb']:>16.1f}{flag}")
    print(f"{len(names)} entry points, {a.calls} calls each: worst peak-RSS growth "
          f"{worst:.2f} MB (limit {a.limit_mb} MB)")
    if missing:
        print(f"public C entry points without a case: {missing}")
    return 1 if failed or missing else 0


if __name__ == "__main__":
    run_bench(main, "reliability.md", "leaks")
