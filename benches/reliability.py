"""The reliability table: each class of failure blockc guards against, what is tried, and
the result, measured now (the C driver built and run on every instruction set; each
class's tests counted and run).

    python benches/reliability.py
    python benches/reliability.py --docs       # also writes docs/reliability.md, section "table"
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "c"))
import build_driver  # noqa: E402
from doc_section import run as run_bench  # noqa: E402

# (class, what is tried, pytest selection)
CLASSES = [
    ("hostile input through the Python API",
     "bad types, shapes, sizes, dtypes, keys, ids, flags; odd but valid arrays (non-contiguous, "
     "read-only, float16/64, empty)",
     [["tests/test_block_inputs.py", "tests/test_gpt_inputs.py", "-k", "not never_crashes and not "
       "tiny_temperatures and not tied_state_dict and not training_targets and not stream_refuses"],
      ["tests/test_block_numerics.py", "-k", "not rmsnorm_of and not rmsnorm_bits"],
      ["tests/test_book.py", "-k", "bad_book or book_weights or book_stack_needs or book_odd"],
      ["tests/test_runtime.py", "-k", "bad_thread_count or bad_isa"],
      ["tests/test_cli_errors.py", "-k", "bad_command_line"]]),
    ("property tests",
     "random configs, shapes, dtypes, weight mutations, token ids, cached chunks; each draw "
     "predicted valid (must equal the oracle) or invalid (must be refused)",
     [["tests/test_block_inputs.py", "tests/test_gpt_inputs.py", "-k", "never_crashes"]]),
    ("check-then-use: inputs changed during a call",
     "ids flipped by another thread between valid and 10^12; a dict entry swapped while calls "
     "read it; two threads appending to one KV cache; the cache's state replaced from Python; "
     "a cache continued by another model",
     [["tests/test_threads.py", "-k", "changed_during or appending_to_one_cache or c_embedding"],
      ["tests/test_gpt_inputs.py", "-k", "cache_state or cache_belongs or cache_arrays"]]),
    ("threads",
     "8 Python threads running block, GPT and generate jobs concurrently; the GIL released in "
     "every C call",
     [["tests/test_threads.py"]]),
    ("the process model",
     "fork (and a fork-based multiprocessing.Pool) after the parent ran the pool's threads; "
     "OMP_NUM_THREADS=1000000; Ctrl-C during a long run",
     [["tests/test_runtime.py", "-k", "fork or omp_num_threads or ctrl_c"]]),
    ("the argument layer and the command line",
     "NumPy integers as counts, 2**64 sizes, non-bool flags, tiny temperatures, NaN in a tied "
     "embedding, torch bfloat16; --plot into a directory or a missing one, sizes too large to "
     "allocate, bad overrides, bare blockc",
     [["tests/test_args.py"], ["tests/test_gpt_inputs.py", "-k", "tiny_temperatures or tied_state_dict"],
      ["tests/test_cli_errors.py", "-k", "cli_errors_are or cli_version or cli_help or cli_plot"]]),
    ("numerics at the edges of float32",
     "RMSNorm of rows near 1e20, 1e30, 3e38 and 1e-25 (eps 0); NaN and inf through the kernels; "
     "scores large enough to overflow a naive softmax",
     [["tests/test_block_numerics.py", "-k", "rmsnorm_of or rmsnorm_bits"], ["tests/test_kernels_fast.py", "-k", "nan or overflow or activations"]]),
    ("checkpoint atomicity and concurrent writers",
     "every file through a unique temporary name and a rename; a write failing part-way "
     "(RLIMIT_FSIZE, an injected ENOSPC, Ctrl-C); two processes saving one file or one run "
     "directory while a third loads it; a file truncated under a reader (another thread); "
     "save_pretrained over a sharded checkpoint",
     [["tests/test_files_atomic.py"], ["tests/test_train_runs.py", "-k", "save_that or full_disk or writers"],
      ["tests/test_checkpoint_files.py", "-k", "sharded"]]),
    ("resume consistency",
     "a run directory with another step's weights, a missing file, no manifest; a resumed run "
     "against the uninterrupted one; SIGINT the instant AdamW's C update returns, Ctrl-C during "
     "the evaluation and during the final save; options "
     "that contradict the run (--layers, --eval-frac, a lost tokenizer); a hand-edited "
     "trainer_state.json",
     [["tests/test_train_runs.py", "-k", "run_directory or resume or interrupt or ctrl_c or "
       "trainer_state or shape_option"]]),
    ("special files and hostile JSON",
     "a FIFO or a link to /dev/zero as config.json, weights, index or tokenizer.json; JSON "
     "nested 100,000 deep or too large; 65-dimensional shapes and 2**70 dimensions; config "
     "fields of the wrong type; a config that lies about the tensors' shapes",
     [["tests/test_checkpoint_files.py", "-k", "special_files or json or shapes or config_field or "
       "lies"], ["tests/test_train_runs.py", "-k", "deep_json"], ["tests/test_cli_errors.py", "-k", "not_json"]]),
    ("tokenizer failures",
     "a tokenizer.json whose precompiled charsmap makes tokenizers panic (on load and on "
     "encode); decode of -1 and 2**32; a failed TextStream.push followed by good ones; "
     "WordPiece without [UNK]; non-UTF-8 text; special tokens as transformers adds them",
     [["tests/test_text_tokenizer.py"], ["tests/test_train_runs.py", "-k", "tokenizer"]]),
    ("allocation",
     "the single kernels called 50 rounds after a warm-up (malloc counted); every entry point "
     "with an allocator that always fails",
     [["tests/test_c_alloc.py"]]),
]


def run_pytest(runs):
    """(passed, failed, skipped) over the pytest runs (each a list of arguments)."""
    totals = [0, 0, 0]
    for args in runs:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                           cwd=ROOT, capture_output=True, text=True)
        last = (r.stdout.strip().splitlines() or [""])[-1]
        counts = [int(m.group(1)) if m else 0 for m in
                  (re.search(r"(\d+) %s" % w, last) for w in ("passed", "failed", "skipped"))]
        if r.returncode not in (0, 5) and not counts[1]:
            counts[1] = 1  # a crash or an error: count it
        totals = [t + c for t, c in zip(totals, counts)]
    return tuple(totals)


def command(args):
    return "python -m pytest " + " ".join(f'"{a}"' if " " in a else a for a in args)


def run_driver():
    """{isa: (passed, failed)} of the C driver, built as the extension is."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "driver")
        r = subprocess.run(build_driver.command(exe), capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(r.stderr)
        for isa in ("", "avx2", "generic"):
            env = dict(os.environ, BLOCKC_ISA=isa)
            r = subprocess.run([exe], capture_output=True, text=True, env=env, timeout=600)
            m = re.search(r"^(\d+) passed, (\d+) failed$", r.stdout, flags=re.M)
            out[isa or "best"] = (int(m.group(1)), int(m.group(2))) if m else (0, -1)
    return out


def main(argv=None) -> int:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average {load:.2f} at the start")
    print()
    print("| class | what is tried | result | command |")
    print("| --- | --- | --- | --- |")
    drv = run_driver()
    checks = ", ".join(f"{p:,} with {isa}" for isa, (p, _) in drv.items())
    failed = sum(f for _, f in drv.values())
    print(f"| the C contract | every public C entry point called directly with NULL pointers, "
          f"zero, (size_t)-1, wrapping size products, bad options, overlapping buffers, short "
          f"workspaces, out-of-range ids; outputs canary-filled and guard-zoned; the same bits at "
          f"1, 2, 3 and 5 threads | {checks} checks: {failed} failed | "
          f"`python tests/c/build_driver.py /tmp/driver && /tmp/driver` |")
    bad = failed
    for name, what, runs in CLASSES:
        p, f, s = run_pytest(runs)
        bad += f
        skipped = f", {s} skipped" if s else ""
        cmds = "; ".join(f"`{command(r)}`" for r in runs)
        print(f"| {name} | {what} | {p} tests passed, {f} failed{skipped} | {cmds} |")
    return 1 if bad else 0


if __name__ == "__main__":
    run_bench(main, "reliability.md", "table")
