"""``blockc train``: a decoder trained on a text file.

    blockc train --text FILE [--model DIR | --preset NAME] [--width D --layers L ...]
                 --steps N --batch B --seq T --lr LR --out DIR [--resume DIR] [--plot PNG]

``train`` reads a UTF-8 text (through the model directory's tokenizer.json, or
as bytes when there is none), holds out its tail, prints each step's loss and
tokens/s, evaluates on the tail, and writes a run directory that
``GPT.from_pretrained`` loads and ``--resume`` continues exactly (the loop and
the run directory are :mod:`blockc.train.fit`).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from typing import Any, Dict, Optional, Sequence

import numpy as np

from .. import _files
from ..train import fit as tr
from .._errors import BlockcValueError
from .._progress import Progress
from ..gpt import GPT_PRESETS, GPT, GPTConfig
from ..text.tokenizer import Tokenizer
from ..train import AdamW
from ._options import (add_shape_options, add_threads, apply_threads, overrides, plot_path, pyplot,
                       require_positive, save_figure)


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
                     help="continue the run in DIR to --steps with every option it was started "
                          "with (batch, seq, seed, lr, warmup, schedule, weight decay, gradient "
                          "clip, held-out fraction, tokens); an option that contradicts the "
                          "run is refused; a cosine schedule spans the new --steps")
    add_shape_options(p, "the default shape's")
    p.add_argument("--steps", type=int, default=200, help="total optimizer steps (200)")
    # the options a run keeps default to None here (RUN_DEFAULTS below): a resumed run
    # tells an option given from one left out
    p.add_argument("--batch", type=int, default=None, help="sequences per step (8)")
    p.add_argument("--seq", type=int, default=None, help="tokens per sequence (128)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (1e-3)")
    p.add_argument("--warmup", type=int, default=None, help="linear warmup steps (0)")
    p.add_argument("--schedule", choices=SCHEDULES, default=None,
                   help="after warmup: constant, or cosine down to lr/10")
    p.add_argument("--weight-decay", type=float, default=None,
                   help="AdamW's decay of matrices (0.1)")
    p.add_argument("--grad-clip", type=float, default=None,
                   help="clip the gradient to this global norm (1.0; 0 turns it off)")
    p.add_argument("--eval-frac", type=float, default=None,
                   help="the text's tail held out for evaluation (0.1)")
    p.add_argument("--eval-every", type=int, default=None,
                   help="evaluate every N steps (default: 10 times a run) and at the end")
    p.add_argument("--bytes", action="store_true", help="byte tokens even if --model has a tokenizer")
    p.add_argument("--seed", type=int, default=None, help="weights and batches (0)")
    add_threads(p)
    p.add_argument("--out", metavar="DIR", default=None,
                   help="the run directory to write (default: --resume's)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace --out when it holds a run or other files (as transformers' "
                        "--overwrite_output_dir); without it that is refused")
    p.add_argument("--plot", metavar="PNG", default=None, help="draw the loss curve (matplotlib)")
    p.add_argument("--quiet", action="store_true", help="print only evaluations and the summary")
    p.set_defaults(func=run_train)



SCHEDULES = ("constant", "cosine")

#: The options that decide a run's result, with their defaults: saved in its state,
#: restored by --resume (and an explicit one that differs is refused).
RUN_DEFAULTS: Dict[str, Any] = {"batch": 8, "seq": 128, "seed": 0, "lr": 1e-3, "warmup": 0,
                                "schedule": "constant", "weight_decay": 0.1, "grad_clip": 1.0,
                                "eval_frac": 0.1}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_run_options(vals: Dict[str, Any], name_of) -> None:
    """Every run option in range, each refusal naming it as ``name_of(key)`` says (an
    option of the command line, or a field of trainer_state.json): one check for both."""
    def bad(k: str, want: str) -> BlockcValueError:
        return BlockcValueError(f"{name_of(k)} must be {want}, got {vals[k]!r}")
    for k in ("batch", "seq"):
        if type(vals[k]) is not int or vals[k] < 1:
            raise bad(k, "an integer >= 1")
    if type(vals["seed"]) is not int or not 0 <= vals["seed"] < 2 ** 32:
        raise bad("seed", "an integer in [0, 2**32)")
    if type(vals["warmup"]) is not int or vals["warmup"] < 0:
        raise bad("warmup", "an integer >= 0")
    if not _number(vals["lr"]) or not math.isfinite(vals["lr"]) or vals["lr"] <= 0:
        raise bad("lr", "a positive number")
    for k in ("weight_decay", "grad_clip"):
        if not _number(vals[k]) or not math.isfinite(vals[k]) or vals[k] < 0:
            raise bad(k, "a finite number >= 0")
    if not _number(vals["eval_frac"]) or not 0.0 <= vals["eval_frac"] < 1.0:
        raise bad("eval_frac", "a number in [0, 1)")
    if vals["schedule"] not in SCHEDULES:
        raise bad("schedule", f"one of {', '.join(SCHEDULES)}")


def _tokenizer_file(d: str) -> Optional[str]:
    f = os.path.join(d, "tokenizer.json")
    return f if os.path.lexists(f) else None


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


def _same_shape(args, cfg: GPTConfig, src: str, what: str) -> None:
    """Refuse an architecture option that contradicts the model of ``src`` (--model or
    --resume trains that model's shape, whatever the option says)."""
    for k, v in overrides(args).items():
        have = getattr(cfg, k + "_") if k in ("kv_heads", "head_dim", "d_ff") else getattr(cfg, k)
        if v != have:
            opt = "--untied" if k == "tie_weights" else ("--bias" if k.endswith("_bias")
                                                         else f"{_flag(k)} {v}")
            raise BlockcValueError(f"{opt} contradicts {what} {src}: its model has {k} {have} "
                                   "(it trains the checkpoint's shape; leave the option out)")


def _sha256_text(path: str) -> str:
    return tr.sha256(path)


def _resume_options(args, state: Dict[str, Any], path: str) -> None:
    """The run's own options onto args: every one must be in the state and valid, and one
    given on the command line must agree with it."""
    where = os.path.join(path, tr.STATE)
    missing = [k for k in RUN_DEFAULTS if k not in state]
    if missing or state.get("tokens") not in ("bytes", "tokenizer"):
        raise BlockcValueError(f"{where}: no {(missing or ['tokens'])[0]!r} (every option that "
                               "decides the result is needed to resume exactly)")
    _check_run_options(state, lambda k: f"{where}: {k}")
    hist = state.get("history", [])
    if not isinstance(hist, list) or not all(
            isinstance(h, dict) and type(h.get("step")) is int for h in hist):
        raise BlockcValueError(f"{where}: history must be a list of records with a step")
    for k in RUN_DEFAULTS:
        given = getattr(args, k)
        if given is not None and given != state[k]:
            raise BlockcValueError(f"{_flag(k)} {given} contradicts the run in {path} ({k} "
                                   f"{state[k]}): a resumed run keeps its options")
        setattr(args, k, state[k])
    if args.bytes and state["tokens"] != "bytes":
        raise BlockcValueError(f"--bytes contradicts the run in {path}, which was trained on "
                               "its tokenizer's tokens")
    digest = state.get("text_sha256")
    if digest is not None and digest != _sha256_text(args.text):
        raise BlockcValueError(f"--text {args.text} is not the text the run in {path} was "
                               "trained on (its SHA-256 differs)")


def _check_out(args, out: str) -> None:
    """The run directory may be written: refused now, before any training, when it is a
    file, its parent is missing, or it holds something that --overwrite must confirm."""
    _files.check_output_dir(out, "--out")
    continuing = args.resume is not None and os.path.realpath(out) == os.path.realpath(args.resume)
    if continuing or args.overwrite or not os.path.isdir(out) or not os.listdir(out):
        return
    what = "a run" if os.path.lexists(os.path.join(out, tr.STATE)) else "files"
    raise BlockcValueError(f"--out {out} already holds {what}: pass --overwrite to replace it, "
                           "or --resume to continue it")


def run_train(args: argparse.Namespace) -> int:
    require_positive(args, "steps", "eval_every")
    out = args.out or args.resume
    if out is None:
        raise BlockcValueError("--out is required (the run directory to write)")
    _check_out(args, out)
    plot = plot_path(args.plot) if args.plot else None
    state: Dict[str, Any]
    src = args.resume or args.model
    tok_file = None if (args.bytes or src is None) else _tokenizer_file(src)
    if args.resume:
        state = tr.read_state(args.resume)  # one consistent step, or refused
        _resume_options(args, state, args.resume)
        tok_file = None
        if state["tokens"] == "tokenizer":
            if "tokenizer.json" not in state["files"]:
                raise BlockcValueError(f"--resume {args.resume}: the run used its tokenizer but "
                                       "its state names no tokenizer.json")
            tok_file = os.path.join(args.resume, "tokenizer.json")
    else:
        for k, v in RUN_DEFAULTS.items():
            if getattr(args, k) is None:
                setattr(args, k, v)
        _check_run_options(vars(args), _flag)
    apply_threads(args)
    tok = None
    if tok_file is not None:
        tok = Tokenizer.from_pretrained(tok_file)
    tokens = tr.text_tokens(args.text, tok)
    vocab = tok.vocab_size if tok is not None else 256
    if src is not None:
        with Progress(0, "loading") as bar:  # drawn when stderr is a terminal
            m = GPT.from_pretrained(src, progress=bar)
        _same_shape(args, m.config, src, "--resume" if args.resume else "--model")
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
        state = {k: v for k, v in state.items() if k != "files"}
    else:
        state = {**{k: getattr(args, k) for k in RUN_DEFAULTS},
                 "tokens": "tokenizer" if tok is not None else "bytes", "text": args.text,
                 "text_sha256": _sha256_text(args.text)}
    steps0 = opt.steps  # the optimizer counts the steps taken: what an interrupt saves
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
        history.append({k: (round(v, 6) if isinstance(v, float) else v) for k, v in rec.items()})
        if held.size and (rec["step"] % every == 0 or rec["step"] == args.steps):
            ev = tr.evaluate(m, held, args.seq, args.batch)
            history[-1]["eval"] = round(ev, 6)
            print(f"eval  {rec['step']:>5}/{args.steps}  held-out loss {ev:.4f}", flush=True)
            if rec["step"] < args.steps:
                save(rec["step"])  # a checkpoint at every evaluation

    try:
        tr.fit(m, opt, train, steps=args.steps, start=start, batch=args.batch, seq=args.seq,
               seed=args.seed, lr=args.lr, warmup=args.warmup, schedule=args.schedule,
               max_grad_norm=clip, on_step=on_step)
    except KeyboardInterrupt:  # keep what was trained: --resume continues from here
        # the step the weights are at is the optimizer's count (a step is whole: see
        # AdamW), whatever of its record, evaluation or checkpoint was cut short
        done = start + (opt.steps - steps0)
        history[:] = [h for h in history if h["step"] <= done]
        if not history or history[-1]["step"] < done:
            history.append({"step": done, "loss": None})  # its record was cut short
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
    ax.plot([h["step"] for h in history],
            [np.nan if h["loss"] is None else h["loss"] for h in history], lw=1,
            label="training batch")
    ev = [h for h in history if "eval" in h]
    if ev:
        ax.plot([h["step"] for h in ev], [h["eval"] for h in ev], "o-", label="held-out")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)
