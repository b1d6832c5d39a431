"""Profile: the parts of one training step, blockc against PyTorch, at 1 thread.

For bench_train.py's shapes (gpt-10m B=8 T=256, GPT-2 small B=4 T=64) each part
of a step is timed on its own as thread CPU time (``time.thread_time``: less
sensitive to a shared machine's load than the wall clock), the median of
--repeats calls after a warm-up, and given as GFLOP/s beside the machine's
float32 FMA peak (benches/machine.py) and beside PyTorch's equivalent part:

  step         blockc ``m.train_step`` / PyTorch's whole step (zero_grad, forward,
               cross-entropy, backward, clip, AdamW)
  forward      blockc ``m.loss`` (forward and loss, no gradient, nothing kept) /
               PyTorch's forward and cross-entropy with autograd recording
  fwd+bwd      blockc's loss-and-gradient C call (what train_step runs before the
               update) / PyTorch's forward + ``backward()``
  backward     fwd+bwd minus forward (derived)
  clip+AdamW   blockc's gradient norm and ``bc_gpt_adamw`` / ``clip_grad_norm_`` +
               ``torch.optim.AdamW.step`` (foreach); GB/s of its 28 bytes a parameter
               (p, g, m, v read; p, m, v written) rather than GFLOP/s

then the kernels one layer is made of, at the model's shapes, through blockc.ops
and the same torch functions: each linear's forward (x @ W.T), and the two
products of its backward at their shapes (dX = dY @ W and dW = dY.T @ X, run
as ``ops.linear`` on transposed copies: the same GEMM at the backward's shapes,
not necessarily the backward's own code path), causal attention forward, and
layernorm. FLOPs: 2*N*K*M a product; the model's forward is 2 * 12 C^2 a token
a layer, + 2 T C a token a layer for causal attention's two products, + 2 C V
for the head; its backward twice the forward.

The loss-and-gradient call and the optimizer update are reached through
blockc.train's internals (the C calls train_step makes), since the public
``m.grad`` also unpacks the gradient into new arrays.

    python benches/profile_train.py              # both models (about 3 minutes)
    python benches/profile_train.py --quick      # gpt-10m only, 3 calls a part

With --docs the output also replaces the "train-profile" section of docs/results/training-step.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

import blockc
from blockc import ops
from blockc import train as btrain

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_train import CLIP, LR, SIZES, make, torch_model  # noqa: E402
from doc_section import run as run_bench  # noqa: E402
from machine import cpu_name, fma_peak  # noqa: E402


def cpu_ms(f: Callable[[], object], repeats: int, warm: int = 1) -> Tuple[float, float]:
    """(median thread-CPU ms, median wall ms) of ``repeats`` calls after ``warm``."""
    for _ in range(warm):
        f()
    cpu, wall = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.thread_time()
        f()
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
    return statistics.median(cpu) * 1e3, statistics.median(wall) * 1e3


def model_flops(kw: dict, b: int, t: int) -> float:
    """The forward's float ops (products only) of one batch."""
    c, n_l, v = kw["width"], kw["layers"], kw["vocab"]
    per_tok = n_l * (2 * 12 * c * c + 2 * t * c) + 2 * c * v
    return per_tok * b * t


def blockc_parts(m, ids, tg, repeats: int) -> Dict[str, float]:
    opt = blockc.AdamW(m, lr=LR, weight_decay=0.1)
    g = opt._grads

    def fwdbwd():
        g[...] = 0.0
        btrain._run_grad(m, ids, tg, -100, g)

    def update():
        opt._apply(g, opt._clip(g, CLIP))

    out = {}
    out["step"] = cpu_ms(lambda: m.train_step(ids, tg, opt, max_grad_norm=CLIP), repeats)
    out["forward"] = cpu_ms(lambda: m.loss(ids, tg), repeats)
    out["fwd+bwd"] = cpu_ms(fwdbwd, repeats)
    out["clip+AdamW"] = cpu_ms(update, repeats)
    return out


def torch_parts(path: str, ids, tg, repeats: int) -> Dict[str, Tuple[float, float]]:
    import torch
    hm, params, opt, x, y, v = torch_model(path, ids, tg)

    def fwd():
        logits = hm(x).logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, v), y.reshape(-1))

    def fwdbwd():
        opt.zero_grad(set_to_none=True)
        fwd().backward()

    def update():
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()

    def step():
        fwdbwd()
        update()

    out = {}
    out["step"] = cpu_ms(step, repeats)
    out["forward"] = cpu_ms(lambda: fwd().detach(), repeats)
    out["fwd+bwd"] = cpu_ms(fwdbwd, repeats)
    out["clip+AdamW"] = cpu_ms(update, repeats)
    return out


def kernel_parts(kw: dict, b: int, t: int, repeats: int, torch) -> List[tuple]:
    """(name, flops, blockc ms, torch ms or None) of one layer's kernels at the model's shapes."""
    c, h, vocab = kw["width"], kw["heads"], kw["vocab"]
    n = b * t
    rng = np.random.default_rng(1)
    rows = []
    mats = [("qkv", c, 3 * c), ("attn.proj", c, c), ("mlp.up", c, 4 * c),
            ("mlp.down", 4 * c, c), ("head", c, vocab)]
    for name, k, mo in mats:
        x = rng.standard_normal((n, k), dtype=np.float32)
        w = rng.standard_normal((mo, k), dtype=np.float32) * 0.02
        dy = rng.standard_normal((n, mo), dtype=np.float32)
        wt, dyt, xt = np.ascontiguousarray(w.T), np.ascontiguousarray(dy.T), np.ascontiguousarray(x.T)
        fl = 2.0 * n * k * mo
        cases = [(f"{name} fwd  {n}x{k} @ {k}x{mo}", lambda: ops.linear(x, w),
                  (lambda tx, tw: lambda: torch.nn.functional.linear(tx, tw)) if torch else None,
                  (x, w)),
                 (f"{name} dX   {n}x{mo} @ {mo}x{k}", lambda: ops.linear(dy, wt),
                  (lambda ty, tw: lambda: ty @ tw) if torch else None, (dy, w)),
                 (f"{name} dW   {mo}x{n} @ {n}x{k}", lambda: ops.linear(dyt, xt),
                  (lambda ty, tx: lambda: ty.t() @ tx) if torch else None, (dy, x))]
        for label, fb, mk, args in cases:
            tb = cpu_ms(fb, repeats)[0]
            tt = cpu_ms(mk(*(torch.from_numpy(a) for a in args)), repeats)[0] if mk else None
            rows.append((label, fl, tb, tt))
    dh = c // h
    q, k_, v_ = (rng.standard_normal((b, h, t, dh), dtype=np.float32) for _ in range(3))
    fl = 2.0 * 2 * b * h * t * t * dh / 2  # QK^T and PV, causal: half the pairs
    tb = cpu_ms(lambda: ops.attention(q, k_, v_, causal=True), repeats)[0]
    tt = None
    if torch:
        tq, tk, tv = (torch.from_numpy(a) for a in (q, k_, v_))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        tt = cpu_ms(lambda: sdpa(tq, tk, tv, is_causal=True), repeats)[0]
    rows.append((f"attention fwd causal B={b} H={h} T={t} Dh={dh}", fl, tb, tt))
    xs = rng.standard_normal((n, c), dtype=np.float32)
    gam, bet = np.ones(c, np.float32), np.zeros(c, np.float32)
    tb = cpu_ms(lambda: ops.layernorm(xs, gam, bet), repeats)[0]
    tt = None
    if torch:
        tx, tg_, tb_ = (torch.from_numpy(a) for a in (xs, gam, bet))
        tt = cpu_ms(lambda: torch.nn.functional.layer_norm(tx, (c,), tg_, tb_), repeats)[0]
    rows.append((f"layernorm fwd {n}x{c}", 8.0 * n * c, tb, tt))  # ~8 flops an element
    # one whole GPT-2 style block (LayerNorm, causal, d_ff=4C) through blockc.engine: its
    # forward, and its backward (one C call: the forward again keeping activations, then
    # the backward, so 3x the forward's products)
    cfg = blockc.BlockConfig(d_model=c, n_heads=h, d_ff=4 * c, norm="layer", causal=True)
    W = blockc.prepare(blockc.init_block(cfg, seed=42, rand="normal"), cfg)
    xb = rng.standard_normal((b, t, c), dtype=np.float32)
    dyb = rng.standard_normal((b, t, c), dtype=np.float32)
    fl = float(n) * (2 * 12 * c * c + 2 * t * c)
    rows.append((f"block forward (engine) {b}x{t}x{c}", fl,
                 cpu_ms(lambda: blockc.block_forward(xb, W, cfg), repeats)[0], None))
    rows.append((f"block backward incl. re-forward (engine) {b}x{t}x{c}", 3 * fl,
                 cpu_ms(lambda: blockc.block_backward(xb, W, cfg, dyb), repeats)[0], None))
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="gpt-10m only, 3 calls a part")
    ap.add_argument("--no-peers", action="store_true")
    args = ap.parse_args(argv)
    torch = None
    if not args.no_peers:
        try:
            import torch
            import transformers
            transformers.logging.set_verbosity_error()
            torch.set_num_threads(1)
        except ImportError:
            torch = None
    blockc.set_num_threads(1)
    sizes = ["gpt-10m"] if args.quick else ["gpt-10m", "gpt2"]
    repeats = 3 if args.quick else args.repeats
    peak = fma_peak().get(1, float("nan"))
    print(f"{cpu_name()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"blockc {blockc.__version__} ({blockc.get_isa()}); "
          + (f"torch {torch.__version__}" if torch else "no PyTorch"))
    print(f"1 thread; FMA peak {peak:.1f} GFLOP/s (benches/machine.py); thread CPU time, "
          f"median of {repeats} calls after 1 warm-up")
    for size in sizes:
        kw, b, t = SIZES[size]
        with tempfile.TemporaryDirectory() as tmp:
            m, path, ids, tg = make(size, tmp)
            bp = blockc_parts(m, ids, tg, repeats)
            tp = torch_parts(path, ids, tg, repeats) if torch else {}
        f_fwd = model_flops(kw, b, t)
        flops = {"step": 3 * f_fwd, "forward": f_fwd, "fwd+bwd": 3 * f_fwd, "backward": 2 * f_fwd}
        bp["backward"] = tuple(a - f for a, f in zip(bp["fwd+bwd"], bp["forward"]))
        if tp:
            tp["backward"] = tuple(a - f for a, f in zip(tp["fwd+bwd"], tp["forward"]))
        n_par = m.nbytes / 4
        print()
        print(f"{size} B={b} T={t}: forward {f_fwd / 1e9:.2f} GFLOP, {n_par / 1e6:.1f}M parameters")
        print()
        print("| part | blockc ms | blockc GFLOP/s | % of peak | PyTorch ms | PyTorch GFLOP/s | "
              "PyTorch / blockc | blockc wall ms |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for part in ("step", "forward", "fwd+bwd", "backward", "clip+AdamW"):
            cb, wb = bp[part]
            if part == "clip+AdamW":
                rate = lambda ms: f"{28 * n_par / ms / 1e6:.1f} GB/s"  # noqa: E731
                pct = ""
            else:
                rate = lambda ms, fl=flops[part]: f"{fl / ms / 1e6:.1f}"  # noqa: E731
                pct = f"{100 * flops[part] / cb / 1e6 / peak:.0f}%"
            row = f"| {part} | {cb:.1f} | {rate(cb)} | {pct} | "
            if tp:
                ct = tp[part][0]
                row += f"{ct:.1f} | {rate(ct)} | {ct / cb:.2f}x |"
            else:
                row += "| | |"
            print(row + f" {wb:.1f} |")
        print()
        print(f"{size}: one layer's kernels at B*T={b * t} rows (blockc.ops / torch)")
        print()
        print("| kernel | GFLOP | blockc ms | blockc GFLOP/s | % of peak | PyTorch ms | "
              "PyTorch GFLOP/s | PyTorch / blockc |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for label, fl, tb, tt in kernel_parts(kw, b, t, repeats, torch):
            row = (f"| {label} | {fl / 1e9:.3f} | {tb:.2f} | {fl / tb / 1e6:.1f} | "
                   f"{100 * fl / tb / 1e6 / peak:.0f}% | ")
            row += (f"{tt:.2f} | {fl / tt / 1e6:.1f} | {tt / tb:.2f}x |" if tt else "| | |")
            print(row)
    return 0


if __name__ == "__main__":
    run_bench(main, "results/training-step.md", "train-profile")
