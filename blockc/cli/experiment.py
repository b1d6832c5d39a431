"""``blockc experiment NAME``: the chapters' claims about training, as figures.

    blockc experiment trainability [--depths 2,6,12] [--steps 300] [--plot PNG]
    blockc experiment gradients [--depths 6,12,24,48] [--seeds 5] [--plot PNG]
    blockc experiment warmup [--depths 6,24] [--lrs ...] [--seeds 3] [--jobs 2] [--plot PNG]
    blockc experiment activation [--depths 6,24] [--lrs ...] [--seeds 3] [--plot PNG]

Each prints its figures and, with ``--markdown FILE``, writes its tables into
FILE's section of its name. The experiments themselves are
:mod:`blockc.experiments.trainability`, :mod:`~blockc.experiments.gradients`
and :mod:`~blockc.experiments.warmup`.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any, Dict, List

from .._errors import BlockcValueError
from ..experiments.trainability import (TASK_VOCAB, VARIANTS, plot_runs, read_markdown,
                                        results_table, trainability, write_section)
from .. import _files
from .._files import read_json, write_json
from ..experiments import gradients, warmup
from ..experiments._report import cpu_name, read_section_file
from ._options import add_threads, apply_threads, plot_path, require_positive


def register(subparsers) -> None:
    top = subparsers.add_parser(
        "experiment", help="the chapters' claims about training, as figures",
        description="The chapters' claims about training as figures: trainability, "
                    "gradients, warmup, activation (see docs/training.md).")
    sub = top.add_subparsers(dest="name", metavar="NAME", required=True)
    e = sub.add_parser(
        "trainability", help="one run per variant and depth",
        description="trainability: one small task (a random order-2 Markov text, its entropy "
                    "the floor) trained at several depths with pre-norm, post-norm, no "
                    "residual, no norm and ReLU; prints each variant's final losses and draws "
                    "the curves.")
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
    _register_issue23(sub)


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
    if args.json:  # every output path checked before the experiment runs, not after it
        _files.check_output_file(args.json, "--json")
    if args.markdown:
        read_markdown(args.markdown)
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
        _files.write_json(args.json, res, indent=None)
    if plot:
        plot_runs(res, plot)
        print(f"wrote {plot}")
    if args.markdown:
        write_section(args.markdown, res,
                      f"blockc experiment trainability --depths {args.depths} --steps {args.steps} "
                      f"--lr {args.lr} --width {args.width} --seed {args.seed}")
        print(f"wrote {args.markdown}")
    return 0


# ---------------------------------------------------------------------------- gradients, warmup, activation

def _floats(text: str, name: str) -> List[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BlockcValueError(f"--{name} must be comma-separated numbers, got {text!r}") from None
    if not vals or not all(v > 0 and math.isfinite(v) for v in vals):
        raise BlockcValueError(f"--{name} must be positive numbers, got {text!r}")
    return vals


def _names(text: str, name: str, allowed) -> List[str]:
    vals = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in vals if v not in allowed]
    if bad or not vals:
        raise BlockcValueError(f"--{name} must be among {', '.join(allowed)}, got {bad or '[]'}")
    return vals


def _json(path: str, res: Dict[str, Any]) -> None:
    def clean(o):  # NaN (a run that stopped) as null: strict JSON
        if isinstance(o, float) and not math.isfinite(o):
            return None
        if isinstance(o, dict):
            return {k: clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o
    write_json(path, clean(res), indent=None)


def _check_outputs(args: argparse.Namespace, section: str) -> None:
    """--json and --markdown checked before the experiment runs (not after it)."""
    if args.json:
        _files.check_output_file(args.json, "--json")
    if args.markdown:
        read_section_file(args.markdown, section)


def _add_outputs(p: argparse.ArgumentParser, section: str) -> None:
    add_threads(p)
    p.add_argument("--plot", metavar="PNG", default=None, help="draw the figure")
    p.add_argument("--json", metavar="FILE", default=None, help="also write every run as JSON")
    p.add_argument("--markdown", metavar="FILE", default=None,
                   help=f"write the tables into FILE's '{section}' section")


def _register_issue23(sub) -> None:
    g = sub.add_parser(
        "gradients", help="per-layer gradient norms at initialisation",
        description="At initialisation, on one batch of the Markov text: the norm of each "
                    "layer's parameter gradient (and of its FFN output weight, Xiong et al. "
                    "2020's Figure 3) and of the gradient reaching each layer's input, for "
                    "pre-norm, post-norm, no residual and no norm, with GPT-2's and Xavier's "
                    "initialisation, at several depths and seeds.")
    g.add_argument("--depths", default="6,12,24,48", help="comma-separated layer counts (6,12,24,48)")
    g.add_argument("--variants", default=",".join(gradients.VARIANTS),
                   help=f"comma-separated, of {', '.join(gradients.VARIANTS)}")
    g.add_argument("--inits", default=",".join(gradients.INITS),
                   help=f"comma-separated, of {', '.join(gradients.INITS)}")
    g.add_argument("--seeds", type=int, default=5, help="seeds per point (5)")
    g.add_argument("--width", type=int, default=64)
    g.add_argument("--batch", type=int, default=16)
    g.add_argument("--seq", type=int, default=32)
    _add_outputs(g, "gradients")
    g.set_defaults(func=run_gradients)
    for name, what in (("warmup", "pre-norm and post-norm, with and without warmup"),
                       ("activation", "GELU against ReLU (pre-norm, with warmup)")):
        w = sub.add_parser(
            name, help=f"final loss against peak learning rate: {what}",
            description=f"Final held-out loss against peak learning rate, {what}, at several "
                        "depths and seeds, AdamW without clipping, on a random order-2 Markov "
                        "text (8 tokens, 2 next tokens per pair; its entropy the floor). Every "
                        "run is reported: trained, stuck at the unigram loss, or diverged.")
        w.add_argument("--depths", default="6,24", help="comma-separated layer counts (6,24)")
        w.add_argument("--lrs", default="1e-3,2e-3,4e-3,8e-3,1.6e-2,3.2e-2",
                       help="comma-separated peak learning rates (1e-3 ... 3.2e-2)")
        w.add_argument("--seeds", type=int, default=3, help="seeds per point (3)")
        w.add_argument("--steps", type=int, default=300, help="steps per run (300)")
        w.add_argument("--warmup", type=int, default=60, help="warmup steps of the warmed-up runs (60)")
        if name == "warmup":
            w.add_argument("--clip", type=float, default=1.0,
                           help="the extra row's clipping norm (post-norm, deepest, no warmup; "
                                "0: no extra row)")
        w.add_argument("--width", type=int, default=32)
        w.add_argument("--batch", type=int, default=8)
        w.add_argument("--seq", type=int, default=16)
        w.add_argument("--from-json", metavar="FILE", default=None,
                       help="run nothing: print, draw and write the tables of the runs a "
                            "previous --json wrote (give the options it ran with)")
        w.add_argument("--jobs", type=int, default=1,
                       help="worker processes (1 thread each unless --threads; the figures "
                            "do not depend on it)")
        _add_outputs(w, name)
        w.set_defaults(func=run_sweep, experiment=name)


def _command(args: argparse.Namespace, names) -> str:
    parts = [f"blockc experiment {args.name}"]
    for n in names:
        parts.append(f"--{n.replace('_', '-')} {getattr(args, n)}")
    return " ".join(parts)


def run_gradients(args: argparse.Namespace) -> int:
    depths = _ints(args.depths, "depths")
    variants = _names(args.variants, "variants", tuple(gradients.VARIANTS))
    inits = _names(args.inits, "inits", gradients.INITS)
    require_positive(args, "seeds", "width", "batch", "seq")
    if args.width % 4:
        raise BlockcValueError(f"--width must be a multiple of the 4 heads, got {args.width}")
    plot = plot_path(args.plot) if args.plot else None
    _check_outputs(args, "gradients")
    apply_threads(args)
    cpu = cpu_name()
    print(f"gradients at initialisation: {args.seeds} seeds, width {args.width}, one batch of "
          f"{args.batch} x {args.seq} tokens; {cpu}", flush=True)
    t0 = time.perf_counter()
    res = gradients.gradients(depths, variants, inits, args.seeds, args.width, args.batch,
                              args.seq, report=lambda s: print(s, flush=True))
    res["seconds"] = time.perf_counter() - t0
    res["cpu"] = cpu
    for line in gradients.profile_table(res) + [""] + gradients.depth_table(res):
        print(line)
    print(f"{len(res['runs'])} profiles in {res['seconds']:.0f} s")
    if args.json:
        _json(args.json, res)
    if plot:
        gradients.plot_profiles(res, plot, cpu=cpu)
        print(f"wrote {plot}")
    if args.markdown:
        gradients.write_markdown(args.markdown, res, _command(
            args, ("depths", "variants", "inits", "seeds", "width", "batch", "seq")))
        print(f"wrote {args.markdown}")
    return 0


def run_sweep(args: argparse.Namespace) -> int:
    depths = _ints(args.depths, "depths")
    lrs = _floats(args.lrs, "lrs")
    require_positive(args, "seeds", "steps", "width", "batch", "seq", "jobs")
    if not 0 <= args.warmup <= args.steps:
        raise BlockcValueError(f"--warmup must lie in [0, --steps], got {args.warmup}")
    clip = getattr(args, "clip", 0.0)
    if clip < 0 or not math.isfinite(clip):
        raise BlockcValueError(f"--clip must be >= 0 (0: no clipped row), got {clip}")
    settings = warmup.Settings(width=args.width, batch=args.batch, seq=args.seq, steps=args.steps)
    if args.experiment == "warmup":
        if args.warmup < 1:
            raise BlockcValueError("--warmup must be >= 1: the sweep compares it with none")
        points = warmup.warmup_points(depths, lrs, args.seeds, args.warmup, clip or None)
        names = ("depths", "lrs", "seeds", "steps", "warmup", "clip", "width", "batch", "seq")
    else:
        points = warmup.activation_points(depths, lrs, args.seeds, args.warmup)
        names = ("depths", "lrs", "seeds", "steps", "warmup", "width", "batch", "seq")
    plot = plot_path(args.plot) if args.plot else None
    _check_outputs(args, args.experiment)
    if args.jobs == 1:
        apply_threads(args)
    cpu = cpu_name()
    print(f"{args.experiment}: {len(points)} runs of {args.steps} steps of {args.batch} x "
          f"{args.seq} tokens, width {args.width}, {args.jobs} process(es); {cpu}", flush=True)
    if args.from_json:
        res = warmup.from_json(read_json(args.from_json, "--from-json"))
        want = sorted(json.dumps(p, sort_keys=True) for p in points)
        got = sorted(json.dumps({k: r[k] for k in p}, sort_keys=True)
                     for p, r in zip(points, res["runs"]))
        if len(res["runs"]) != len(points) or want != got \
                or {k: res["settings"].get(k) for k in settings} != dict(settings):
            raise BlockcValueError(f"--from-json {args.from_json}: its runs are not the ones "
                                   "these options ask for")
        cpu = res.get("cpu", cpu)
    else:
        res = warmup.sweep(points, settings, jobs=args.jobs, threads=args.threads,
                           report=lambda s: print(s, flush=True))
    res["cpu"] = cpu
    print(f"final held-out loss (nats per token); floor {res['floor']:.3f}, bigram "
          f"{res['bigram']:.3f}, unigram {res['unigram']:.3f}, uniform {res['uniform']:.3f}")
    for line in warmup.sweep_table(res):
        print(line)
    c = warmup.status_counts(res)
    print(f"{len(res['runs'])} runs: {c['trained']} trained, {c['stuck']} stuck, "
          f"{c['diverged']} diverged; {res['seconds']:.0f} s")
    if args.json:
        _json(args.json, res)
    if plot:
        warmup.plot_sweep(res, plot, args.experiment, cpu=cpu)
        print(f"wrote {plot}")
    if args.markdown:
        warmup.write_markdown(args.markdown, args.experiment, res, _command(args, names))
        print(f"wrote {args.markdown}")
    return 0
