"""``blockc experiment trainability``: the chapters' claims about training, as figures.

    blockc experiment trainability [--depths 2,6,12] [--steps 300] [--plot PNG]

The experiment itself is :mod:`blockc.experiments.trainability`.
"""
from __future__ import annotations

import argparse
import json
from typing import List

from .._errors import BlockcValueError
from ..experiments.trainability import (TASK_VOCAB, VARIANTS, plot_runs, results_table,
                                        trainability, write_section)
from ._options import add_threads, apply_threads, plot_path, require_positive


def register(subparsers) -> None:
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
    add_threads(e)
    e.add_argument("--plot", metavar="PNG", default=None, help="draw loss against step per depth")
    e.add_argument("--json", metavar="FILE", default=None, help="also write the curves as JSON")
    e.add_argument("--markdown", metavar="FILE", default=None,
                   help="write the results table into FILE's 'trainability' section")
    e.set_defaults(func=run_experiment)


def _ints(text: str, name: str) -> List[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BlockcValueError(f"--{name} must be comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise BlockcValueError(f"--{name} must be positive integers, got {text!r}")
    return vals


def run_experiment(args: argparse.Namespace) -> int:
    depths = _ints(args.depths, "depths")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        raise BlockcValueError(f"--variants must be among {', '.join(VARIANTS)}, got {bad or '[]'}")
    require_positive(args, "steps", "width")
    if args.width % 4:
        raise BlockcValueError(f"--width must be a multiple of the 4 heads, got {args.width}")
    plot = plot_path(args.plot) if args.plot else None
    apply_threads(args)
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
        plot_runs(res, plot)
        print(f"wrote {plot}")
    if args.markdown:
        write_section(args.markdown, res,
                      f"blockc experiment trainability --depths {args.depths} --steps {args.steps} "
                      f"--lr {args.lr} --width {args.width} --seed {args.seed}")
        print(f"wrote {args.markdown}")
    return 0


