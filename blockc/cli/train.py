"""``blockc train``: a decoder trained on a text file.

    blockc train --text FILE [--model DIR | --preset NAME] [--width D --layers L ...]
                 --steps N --batch B --seq T --lr LR --out DIR [--resume DIR] [--plot PNG]

``train`` reads a UTF-8 text (through the model directory's tokenizer.json, or
as bytes when there is none), holds out its tail, prints each step's loss and
tokens/s, evaluates on the tail, and writes a run directory that
``GPT.from_pretrained`` loads and ``--resume`` continues exactly (the loop and
the run directory are :mod:`blockc._trainer`).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from typing import Any, Dict, Optional, Sequence

from .. import _trainer as tr
from .._errors import BlockcValueError
from ..gpt import GPT_PRESETS, GPT, GPTConfig
from ..text import Tokenizer
from ..train import AdamW
from ._options import (add_shape_options, add_threads, apply_threads, overrides, plot_path, pyplot,
                       require_positive)


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
    add_threads(p)
    p.add_argument("--out", metavar="DIR", default=None,
                   help="the run directory to write (default: --resume's)")
    p.add_argument("--plot", metavar="PNG", default=None, help="draw the loss curve (matplotlib)")
    p.add_argument("--quiet", action="store_true", help="print only evaluations and the summary")
    p.set_defaults(func=run_train)



def _tokenizer_file(d: str) -> Optional[str]:
    f = os.path.join(d, "tokenizer.json")
    return f if os.path.exists(f) else None


def _new_config(args, vocab: int) -> GPTConfig:
    over = overrides(args)
    if args.preset is not None:
        base = GPTConfig.preset(args.preset)
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    else:
        fields = dict(width=128, heads=4, layers=4)
    fields.update(over)
    fields["vocab"] = over.get("vocab", vocab)
    fields["context"] = over.get("context", args.seq)
    return GPTConfig(**fields)


def run_train(args: argparse.Namespace) -> int:
    require_positive(args, "steps", "batch", "seq", "eval_every")
    if not (0.0 <= args.eval_frac < 1.0):
        raise BlockcValueError(f"--eval-frac must lie in [0, 1), got {args.eval_frac}")
    if args.lr <= 0 or not math.isfinite(args.lr):
        raise BlockcValueError(f"--lr must be a positive number, got {args.lr}")
    out = args.out or args.resume
    if out is None:
        raise BlockcValueError("--out is required (the run directory to write)")
    plot = plot_path(args.plot) if args.plot else None
    apply_threads(args)
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
