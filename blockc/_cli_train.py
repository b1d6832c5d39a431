"""``blockc train`` and ``blockc experiment trainability``.

    blockc train --text FILE [--model DIR | --preset NAME] [--width D --layers L ...]
                 --steps N --batch B --seq T --lr LR --out DIR [--resume DIR] [--plot PNG]
    blockc experiment trainability [--depths 2,6,12] [--steps 300] [--plot PNG]

``train`` reads a UTF-8 text (through the model directory's tokenizer.json, or
as bytes when there is none), holds out its tail, prints each step's loss and
tokens/s, evaluates on the tail, and writes a run directory that
``GPT.from_pretrained`` loads and ``--resume`` continues exactly.

``experiment trainability`` puts chapters 6 and 24's claims about training to a
test: the same small task (text from a random order-2 Markov chain, whose
exact entropy is the floor no model can beat) trained at several depths for
pre-norm, post-norm, no residual, no norm, and ReLU instead of GELU.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _trainer as tr
from ._cli_gpt import add_shape_options, overrides
from ._errors import BlockcValueError
from ._plot import plot_path, pyplot
from .gpt import GPT_PRESETS, GPT, GPTConfig
from .train import AdamW


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train", help="train a decoder on a text file (AdamW, in C)",
        description="Train a model on a UTF-8 text file: a checkpoint directory's model and "
                    "tokenizer (--model), a preset's shape, or a small model of the given "
                    "shape (default: width 128, 4 layers, 4 heads), on byte tokens when there "
                    "is no tokenizer. The tail of the text is held out for evaluation. The run "
                    "directory (--out) is a checkpoint (config.json, model.safetensors, "
                    "tokenizer.json) with the optimizer's state and the history beside it.")
    p.add_argument("--text", required=True, metavar="FILE", help="the training text")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", metavar="DIR", help="start from this checkpoint directory")
    src.add_argument("--preset", choices=list(GPT_PRESETS), help="a new model of this shape")
    src.add_argument("--resume", metavar="DIR",
                     help="continue the run in DIR to --steps (its batch, seq, seed, lr and "
                          "schedule; a cosine schedule spans the new --steps)")
    add_shape_options(p, "the default shape's")
    p.add_argument("--steps", type=int, default=200, help="total optimizer steps (200)")
    p.add_argument("--batch", type=int, default=8, help="sequences per step (8)")
    p.add_argument("--seq", type=int, default=128, help="tokens per sequence (128)")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (1e-3)")
    p.add_argument("--warmup", type=int, default=0, help="linear warmup steps (0)")
    p.add_argument("--schedule", choices=("constant", "cosine"), default="constant",
                   help="after warmup: constant, or cosine down to lr/10")
    p.add_argument("--weight-decay", type=float, default=0.1, help="AdamW's decay of matrices (0.1)")
    p.add_argument("--grad-clip", type=float, default=1.0,
                   help="clip the gradient to this global norm (1.0; 0 turns it off)")
    p.add_argument("--eval-frac", type=float, default=0.1,
                   help="the text's tail held out for evaluation (0.1)")
    p.add_argument("--eval-every", type=int, default=None,
                   help="evaluate every N steps (default: 10 times a run) and at the end")
    p.add_argument("--bytes", action="store_true", help="byte tokens even if --model has a tokenizer")
    p.add_argument("--seed", type=int, default=0, help="weights and batches (0)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", metavar="DIR", default=None,
                   help="the run directory to write (default: --resume's)")
    p.add_argument("--plot", metavar="PNG", default=None, help="draw the loss curve (matplotlib)")
    p.add_argument("--quiet", action="store_true", help="print only evaluations and the summary")
    p.set_defaults(func=run_train)

    e = subparsers.add_parser(
        "experiment", help="the chapters' claims about training, as figures",
        description="trainability: one small task (a random order-2 Markov text, its entropy "
                    "the floor) trained at several depths with pre-norm, post-norm, no "
                    "residual, no norm and ReLU; prints each variant's final losses and draws "
                    "the curves.")
    e.add_argument("name", choices=("trainability",))
    e.add_argument("--depths", default="2,6,12", help="comma-separated layer counts (2,6,12)")
    e.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"comma-separated, of {', '.join(VARIANTS)}")
    e.add_argument("--steps", type=int, default=400, help="steps per run (400)")
    e.add_argument("--lr", type=float, default=2e-3, help="learning rate, no warmup (2e-3)")
    e.add_argument("--width", type=int, default=64)
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--threads", type=int, default=None)
    e.add_argument("--plot", metavar="PNG", default=None, help="draw loss against step per depth")
    e.add_argument("--json", metavar="FILE", default=None, help="also write the curves as JSON")
    e.add_argument("--markdown", metavar="FILE", default=None,
                   help="write the results table into FILE's 'trainability' section")
    e.set_defaults(func=run_experiment)


# ---------------------------------------------------------------------------- train

def _positive(args, *names) -> None:
    for n in names:
        v = getattr(args, n)
        if v is not None and v < 1:
            raise BlockcValueError(f"--{n.replace('_', '-')} must be >= 1, got {v}")


def _tokenizer_file(d: str) -> Optional[str]:
    f = os.path.join(d, "tokenizer.json")
    return f if os.path.exists(f) else None


def _new_config(args, vocab: int) -> GPTConfig:
    over = overrides(args)
    if args.preset is not None:
        import dataclasses
        base = GPTConfig.preset(args.preset)
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    else:
        fields = dict(width=128, heads=4, layers=4)
    fields.update(over)
    fields["vocab"] = over.get("vocab", vocab)
    fields["context"] = over.get("context", args.seq)
    return GPTConfig(**fields)


def run_train(args: argparse.Namespace) -> int:
    from . import runtime
    _positive(args, "steps", "batch", "seq", "eval_every")
    if not (0.0 <= args.eval_frac < 1.0):
        raise BlockcValueError(f"--eval-frac must lie in [0, 1), got {args.eval_frac}")
    if args.lr <= 0 or not math.isfinite(args.lr):
        raise BlockcValueError(f"--lr must be a positive number, got {args.lr}")
    out = args.out or args.resume
    if out is None:
        raise BlockcValueError("--out is required (the run directory to write)")
    plot = plot_path(args.plot) if args.plot else None
    if args.threads is not None:
        runtime.set_num_threads(args.threads)
    state: Dict[str, Any]
    src = args.resume or args.model
    tok_file = None if (args.bytes or src is None) else _tokenizer_file(src)
    if args.resume:
        state = tr.read_state(args.resume)
        tok_file = _tokenizer_file(args.resume) if state.get("tokens") == "tokenizer" else None
        for k in ("batch", "seq", "seed", "lr", "warmup", "schedule"):  # the run's own
            if k in state:
                setattr(args, k, state[k])
    tok = None
    if tok_file is not None:
        from .text import Tokenizer
        tok = Tokenizer.from_pretrained(tok_file)
    tokens = tr.text_tokens(args.text, tok)
    vocab = tok.vocab_size if tok is not None else 256
    if src is not None:
        m = GPT.from_pretrained(src)
        if m.dtype != "float32":
            m = m.astype("float32")
    else:
        m = GPT.random(_new_config(args, vocab), seed=args.seed)
    cfg = m.config
    if int(tokens.max(initial=0)) >= cfg.vocab:
        raise BlockcValueError(f"the text has token {int(tokens.max())}, the model's vocab is "
                               f"{cfg.vocab}")
    if args.seq > cfg.context:
        raise BlockcValueError(f"--seq {args.seq} exceeds the model's context {cfg.context}")
    train, held = tr.split(tokens, args.seq, args.eval_frac)
    opt = AdamW(m, lr=args.lr, weight_decay=args.weight_decay)
    start, history = 0, []
    if args.resume:
        tr.load_optimizer(args.resume, opt)
        start, history = state["step"], list(state.get("history", []))
        if start >= args.steps:
            raise BlockcValueError(f"--resume {args.resume} is at step {start}: give --steps "
                                   f"beyond it")
    else:
        state = {"batch": args.batch, "seq": args.seq, "seed": args.seed, "lr": args.lr,
                 "warmup": args.warmup, "schedule": args.schedule,
                 "tokens": "tokenizer" if tok is not None else "bytes", "text": args.text}
    every = args.eval_every or max(1, args.steps // 10)
    say = (lambda s: None) if args.quiet else (lambda s: print(s, flush=True))
    print(f"model: {m.num_parameters():,} parameters ({cfg.layers} layers, width {cfg.width}); "
          f"{train.size:,} training and {held.size:,} held-out "
          f"{'tokens' if tok is not None else 'bytes'}; steps {start + 1}..{args.steps}", flush=True)
    clip = args.grad_clip if args.grad_clip > 0 else None
    t_start = time.perf_counter()

    def save(step: int) -> None:
        state.update(step=step, steps=args.steps, history=history)
        tr.save_run(out, m, opt, state, tok_file)

    def on_step(rec: Dict[str, Any]) -> None:
        say(f"step {rec['step']:>5}/{args.steps}  loss {rec['loss']:.4f}  lr {rec['lr']:.2e}  "
            f"{rec['tokens_per_s']:,.0f} tokens/s")
        if held.size and (rec["step"] % every == 0 or rec["step"] == args.steps):
            rec["eval"] = tr.evaluate(m, held, args.seq, args.batch)
            print(f"eval  {rec['step']:>5}/{args.steps}  held-out loss {rec['eval']:.4f}", flush=True)
        history.append({k: (round(v, 6) if isinstance(v, float) else v) for k, v in rec.items()})
        if "eval" in rec and rec["step"] < args.steps:
            save(rec["step"])  # a checkpoint at every evaluation

    try:
        tr.fit(m, opt, train, steps=args.steps, start=start, batch=args.batch, seq=args.seq,
               seed=args.seed, lr=args.lr, warmup=args.warmup, schedule=args.schedule,
               max_grad_norm=clip, on_step=on_step)
    except KeyboardInterrupt:  # keep what was trained: --resume continues from here
        done = history[-1]["step"] if history else start
        save(done)
        sys.stderr.write(f"blockc train: interrupted; saved step {done} to {out}\n")
        raise
    dt = time.perf_counter() - t_start
    n_tok = (args.steps - start) * args.batch * args.seq
    save(args.steps)
    print(f"trained {args.steps - start} steps in {dt:.1f} s ({n_tok / dt:,.0f} tokens/s); "
          f"wrote {out}", flush=True)
    if plot:
        _plot_history(history, plot)
        print(f"wrote {plot}")
    return 0


def _plot_history(history: Sequence[Dict[str, Any]], path: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([h["step"] for h in history], [h["loss"] for h in history], lw=1, label="training batch")
    ev = [h for h in history if "eval" in h]
    if ev:
        ax.plot([h["step"] for h in ev], [h["eval"] for h in ev], "o-", label="held-out")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------- experiment

#: the experiment's vocabulary (a chain over 16 tokens: 256 pairs, each allowing 3 next tokens)
TASK_VOCAB = 16

#: variant -> the GPTConfig options it changes from GPT-2's pre-norm block
VARIANTS = {
    "pre-norm": {},
    "post-norm": {"placement": "post"},
    "no-residual": {"residual": False},
    "no-norm": {"norm": "none"},
    "relu": {"activation": "relu"},
}


def markov_task(vocab: int = 16, choices: int = 3, n: int = 120_000, seed: int = 0
                ) -> Tuple[np.ndarray, float]:
    """Tokens of a random order-2 Markov chain (each pair of tokens allows ``choices``
    next tokens, Dirichlet(1) weights) and its floor: the mean of -log p(next | pair)
    over the stream, the loss of the chain itself (nats per token)."""
    rng = np.random.default_rng(seed)
    nxt = np.stack([rng.choice(vocab, choices, replace=False) for _ in range(vocab * vocab)])
    prob = rng.dirichlet(np.ones(choices), vocab * vocab)
    cum = prob.cumsum(axis=1)
    u = rng.random(n)
    out = np.empty(n, np.int64)
    out[:2] = rng.integers(0, vocab, 2)
    nll = 0.0
    for i in range(2, n):
        c = out[i - 2] * vocab + out[i - 1]
        j = min(int(np.searchsorted(cum[c], u[i])), choices - 1)
        out[i] = nxt[c, j]
        nll -= math.log(prob[c, j])
    return out, nll / (n - 2)


def trainability(depths: Sequence[int], variants: Sequence[str], steps: int, lr: float,
                 width: int, seed: int, report=print) -> Dict[str, Any]:
    """Train every (depth, variant) on the Markov task: the curves and final losses."""
    tokens, floor = markov_task(TASK_VOCAB, seed=seed)
    train, held = tr.split(tokens, 32, 0.1)
    batch, seq = 16, 32
    runs = []
    for depth in depths:
        for name in variants:
            cfg = GPTConfig(vocab=TASK_VOCAB, context=seq, width=width, heads=4, layers=depth,
                            **VARIANTS[name])
            m = GPT.random(cfg, seed=seed)
            opt = AdamW(m, lr=lr, weight_decay=0.0)
            t0 = time.perf_counter()
            recs = tr.fit(m, opt, train, steps=steps, batch=batch, seq=seq, seed=seed, lr=lr)
            losses = [r["loss"] for r in recs]
            tail = losses[-max(1, steps // 10):]
            run = {"depth": depth, "variant": name, "losses": [round(x, 5) for x in losses],
                   "final_train": float(np.mean(tail)),
                   "held_out": tr.evaluate(m, held, seq, batch),
                   "seconds": time.perf_counter() - t0}
            runs.append(run)
            report(f"  depth {depth:>3}  {name:<12} held-out {run['held_out']:.3f}  "
                   f"(last {len(tail)} steps {run['final_train']:.3f}; {run['seconds']:.0f} s)")
    return {"floor": floor, "unigram": _unigram(train, held), "bigram": _bigram(train, held),
            "steps": steps, "lr": lr, "width": width, "batch": batch, "seq": seq, "runs": runs}


def _unigram(train: np.ndarray, held: np.ndarray) -> float:
    p = np.bincount(train, minlength=TASK_VOCAB) + 1.0
    p /= p.sum()
    return float(-np.log(p[held]).mean())


def _bigram(train: np.ndarray, held: np.ndarray) -> float:
    c = np.ones((TASK_VOCAB, TASK_VOCAB))
    np.add.at(c, (train[:-1], train[1:]), 1.0)
    p = c / c.sum(axis=1, keepdims=True)
    return float(-np.log(p[held[:-1], held[1:]]).mean())


def results_table(res: Dict[str, Any]) -> List[str]:
    variants = list(dict.fromkeys(r["variant"] for r in res["runs"]))
    depths = list(dict.fromkeys(r["depth"] for r in res["runs"]))
    by = {(r["depth"], r["variant"]): r for r in res["runs"]}
    lines = ["| layers | " + " | ".join(variants) + " |",
             "|---:|" + "---:|" * len(variants)]
    for d in depths:
        lines.append(f"| {d} | " + " | ".join(
            f"{by[(d, v)]['held_out']:.3f}" if (d, v) in by else "" for v in variants) + " |")
    return lines


def _plot_runs(res: Dict[str, Any], path: str) -> None:
    plt = pyplot()
    depths = list(dict.fromkeys(r["depth"] for r in res["runs"]))
    fig, axes = plt.subplots(1, len(depths), figsize=(4.2 * len(depths), 3.8), sharey=True,
                             squeeze=False)
    for ax, d in zip(axes[0], depths):
        for r in res["runs"]:
            if r["depth"] != d:
                continue
            y = np.asarray(r["losses"])
            k = max(1, len(y) // 30)  # a moving mean over k steps
            ys = np.convolve(y, np.ones(k) / k, mode="valid")
            ax.plot(np.arange(len(ys)) + k, ys, lw=1.2, label=r["variant"])
        for level, name in ((res["floor"], "floor (the chain's entropy)"),
                            (res["unigram"], "unigram")):
            ax.axhline(level, color="grey", lw=0.8, ls="--")
            ax.text(1, level, name, fontsize=7, va="bottom", color="grey")
        ax.set_title(f"{d} layers")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("training loss (nats per token)")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _ints(text: str, name: str) -> List[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BlockcValueError(f"--{name} must be comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise BlockcValueError(f"--{name} must be positive integers, got {text!r}")
    return vals


def run_experiment(args: argparse.Namespace) -> int:
    from . import runtime
    depths = _ints(args.depths, "depths")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        raise BlockcValueError(f"--variants must be among {', '.join(VARIANTS)}, got {bad or '[]'}")
    _positive(args, "steps", "width")
    if args.width % 4:
        raise BlockcValueError(f"--width must be a multiple of the 4 heads, got {args.width}")
    plot = plot_path(args.plot) if args.plot else None
    if args.threads is not None:
        runtime.set_num_threads(args.threads)
    print(f"trainability: a random order-2 Markov text over {TASK_VOCAB} tokens, {args.steps} steps of "
          f"16 x 32 tokens, AdamW lr {args.lr}, width {args.width}", flush=True)
    res = trainability(depths, variants, args.steps, args.lr, args.width, args.seed,
                       report=lambda s: print(s, flush=True))
    print(f"held-out loss (nats per token); floor {res['floor']:.3f} (the chain's entropy), "
          f"bigram {res['bigram']:.3f}, unigram {res['unigram']:.3f}")
    for line in results_table(res):
        print(line)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f)
    if plot:
        _plot_runs(res, plot)
        print(f"wrote {plot}")
    if args.markdown:
        _write_section(args.markdown, res, args)
        print(f"wrote {args.markdown}")
    return 0


def _write_section(path: str, res: Dict[str, Any], args) -> None:
    body = [f"`blockc experiment trainability --depths {args.depths} --steps {args.steps} "
            f"--lr {args.lr} --width {args.width} --seed {args.seed}` "
            f"(held-out loss after {res['steps']} steps, nats per token; the floor is "
            f"{res['floor']:.3f}, a bigram model {res['bigram']:.3f}, unigram {res['unigram']:.3f}):",
            ""] + results_table(res)
    begin, end = "<!-- trainability:begin -->", "<!-- trainability:end -->"
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
    block = begin + "\n" + "\n".join(body) + "\n" + end
    if begin in text and end in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text + ("\n" if text and not text.endswith("\n") else "") + block + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
