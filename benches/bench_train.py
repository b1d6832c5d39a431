"""Benchmark: one training step (forward, backward, clipping, AdamW) against PyTorch.

The same weights and the same batch in both: blockc's ``m.train_step`` (one C call
for the loss and its gradient, one for the update) and PyTorch eager on the
``transformers`` GPT2LMHeadModel (scaled-dot-product attention) loaded from the
directory blockc saved, ``torch.nn.functional.cross_entropy``,
``clip_grad_norm_`` and ``torch.optim.AdamW`` (its default foreach update), at 1
and 2 threads; each round runs both frameworks alternately, median of --repeats
rounds after two warm-up steps.

  gpt2      GPT-2 small (124M, tied head), B=4, T=64 (llm.c's CPU default)
  gpt-10m   width 384, 6 layers, 6 heads, vocab 2048 (~11M), B=8, T=256

Peak memory of a training step is measured in a fresh process per framework
(the peak resident set during three steps above the process's size once the
model and the optimizer exist): blockc keeps each layer's activations for the
backward but recomputes attention's probabilities tile by tile from each
query's log-sum-exp; PyTorch keeps what autograd saved.

    python benches/bench_train.py            # the table (about five minutes)
    python benches/bench_train.py --quick    # one size, fewer rounds

With --docs the output also replaces the "train" section of docs/speed.md.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional

import numpy as np

import blockc
from doc_section import run as run_bench

SIZES = {
    "gpt2": (dict(vocab=50257, context=1024, width=768, heads=12, layers=12), 4, 64),
    "gpt-10m": (dict(vocab=2048, context=256, width=384, heads=6, layers=6), 8, 256),
}
LR, CLIP = 3e-4, 1.0


def make(size: str, tmp: str):
    kw, b, t = SIZES[size]
    cfg = blockc.GPTConfig(**kw)
    m = blockc.GPT.random(cfg, seed=0)
    path = os.path.join(tmp, size)
    m.save_pretrained(path)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, cfg.vocab, (b, t))
    tg = rng.integers(0, cfg.vocab, (b, t))
    return m, path, ids, tg


def blockc_stepper(m, ids, tg) -> Callable[[], float]:
    opt = blockc.AdamW(m, lr=LR, weight_decay=0.1)
    return lambda: m.train_step(ids, tg, opt, max_grad_norm=CLIP)


def torch_model(path: str, ids, tg):
    """transformers' GPT2LMHeadModel of the directory blockc saved, training without dropout
    (the same function as blockc's), its AdamW (decay on matrices), and the batch as tensors:
    (model, parameters, optimizer, x, y, vocabulary)."""
    import torch
    import transformers
    hm = transformers.GPT2LMHeadModel.from_pretrained(path, attn_implementation="sdpa")
    hm.config.use_cache = False
    hm.train()
    for mod in hm.modules():  # no dropout: the same function as blockc's
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    params = [p for p in hm.parameters()]
    decay = [p for p in params if p.ndim == 2]
    rest = [p for p in params if p.ndim != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=LR)
    return hm, params, opt, torch.as_tensor(ids), torch.as_tensor(tg), hm.config.vocab_size


def torch_stepper(path: str, ids, tg) -> Callable[[], float]:
    import torch
    hm, params, opt, x, y, v = torch_model(path, ids, tg)

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        logits = hm(x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, v), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        return float(loss.detach())
    return step


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def _hwm_kb() -> int:
    """The peak resident set (VmHWM) since the last reset."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def memory_child(framework: str, size: str, path: str, threads: int) -> None:
    """In a fresh process: the peak RSS of three steps above the built model + optimizer."""
    kw, b, t = SIZES[size]
    rng = np.random.default_rng(0)
    cfg = blockc.GPTConfig(**kw)
    ids, tg = rng.integers(0, cfg.vocab, (b, t)), rng.integers(0, cfg.vocab, (b, t))
    blockc.set_num_threads(threads)
    if framework == "blockc":
        m = blockc.GPT.from_pretrained(path)
        step = blockc_stepper(m, ids, tg)
    else:
        import torch
        torch.set_num_threads(threads)
        step = torch_stepper(path, ids, tg)
    base = _rss_kb()
    with open("/proc/self/clear_refs", "w") as f:  # the peak restarts from here
        f.write("5")
    for _ in range(3):
        step()
    peak = _hwm_kb()
    print(json.dumps({"base_mb": base / 1024, "peak_mb": peak / 1024,
                      "step_mb": max(0.0, (peak - base) / 1024)}))


def memory(framework: str, size: str, path: str, threads: int) -> Optional[Dict[str, float]]:
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--memory-child", framework,
                        size, path, str(threads)], capture_output=True, text=True)
    if r.returncode:
        sys.stderr.write(r.stderr)
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="gpt-10m only, 3 rounds")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--memory-child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.memory_child:
        fw, size, path, threads = args.memory_child
        memory_child(fw, size, path, int(threads))
        return 0
    torch = None
    if not args.no_peers:
        try:
            import torch
            import transformers
            transformers.logging.set_verbosity_error()
        except ImportError:
            torch = None
    sizes = ["gpt-10m"] if args.quick else list(SIZES)
    repeats = 3 if args.quick else args.repeats
    from bench_decode import Machine  # here: the memory children stay lean
    machine = Machine()
    print(machine.header())
    print(f"blockc {blockc.__version__} ({blockc.get_isa()}); "
          + (f"torch {torch.__version__}" if torch else "no PyTorch"))
    print(f"median of {repeats} alternating rounds after 2 warm-up steps; a step is forward, "
          f"backward, clip to norm {CLIP}, AdamW")
    print()
    head = ("| model | B x T | threads | blockc ms | tokens/s | PyTorch ms | tokens/s | "
            "PyTorch / blockc |")
    rows = [head, "|---|---|---:|---:|---:|---:|---:|---:|"]
    mem_rows = ["| model | threads | blockc peak MB (step) | PyTorch peak MB (step) |",
                "|---|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            m, path, ids, tg = make(size, tmp)
            n_tok = ids.size
            for threads in (1, 2):
                blockc.set_num_threads(threads)
                if torch:
                    torch.set_num_threads(threads)
                fresh = blockc.GPT.from_pretrained(path)
                runners = {"blockc": blockc_stepper(fresh, ids, tg)}
                if torch:
                    runners["torch"] = torch_stepper(path, ids, tg)
                times: Dict[str, List[float]] = {k: [] for k in runners}
                first = {k: f() for k, f in runners.items()}  # warm-up 1 (the loss of step 1)
                for f in runners.values():
                    f()
                for _ in range(repeats):
                    for k, f in runners.items():
                        t0 = time.perf_counter()
                        f()
                        times[k].append(time.perf_counter() - t0)
                med = {k: statistics.median(v) for k, v in times.items()}
                if torch and threads == 1:
                    print(f"{size}: first-step loss blockc {first['blockc']:.6f}, "
                          f"PyTorch {first['torch']:.6f}")
                tb = med["blockc"]
                row = (f"| {size} | {ids.shape[0]} x {ids.shape[1]} | {threads} | {tb * 1e3:.0f} | "
                       f"{n_tok / tb:,.0f} | ")
                if torch:
                    tt = med["torch"]
                    row += f"{tt * 1e3:.0f} | {n_tok / tt:,.0f} | {tt / tb:.2f}x |"
                else:
                    row += "| | |"
                rows.append(row)
                del runners, fresh
            mb = memory("blockc", size, path, 2)
            mt = memory("torch", size, path, 2) if torch else None
            fmt = lambda r: "" if r is None else f"{r['peak_mb']:,.0f} ({r['step_mb']:,.0f})"  # noqa: E731
            mem_rows.append(f"| {size} | 2 | {fmt(mb)} | {fmt(mt)} |")
            del m
    print()
    for r in rows:
        print(r)
    print()
    print("peak resident memory of three steps in a fresh process; in parentheses, above the "
          "process once the model and the optimizer exist (activations, gradients, workspace):")
    print()
    for r in mem_rows:
        print(r)
    print()
    print(machine.footer())
    return 0


if __name__ == "__main__":
    if "--memory-child" in sys.argv:
        sys.exit(main(sys.argv[1:]))
    run_bench(main, "speed.md", "train")
