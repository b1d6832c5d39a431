"""The option helpers the commands share, written once: ``--threads``, positive
integers, output paths, the architecture options, and writing to stdout."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict

from .. import runtime
from .._errors import BlockcValueError
from .._plot import plot_path, pyplot, save_figure
from ..model import ACTIVATIONS, CACHE_DTYPES, NORMS, PLACEMENTS, POSITIONS

__all__ = ["add_threads", "apply_threads", "positive_int", "require_positive", "plot_path",
           "pyplot", "save_figure", "write", "add_shape_options", "overrides", "add_sampling_options",
           "sampling_options", "add_cache_dtype"]


def add_threads(p: argparse.ArgumentParser) -> None:
    """``--threads N``: the C library's thread count for this run (:func:`apply_threads`)."""
    p.add_argument("--threads", type=int, default=None)


def apply_threads(args: argparse.Namespace) -> None:
    """Set the thread count ``--threads`` asked for (checked by the runtime)."""
    if args.threads is not None:
        runtime.set_num_threads(args.threads)


def add_cache_dtype(p: argparse.ArgumentParser) -> None:
    """``--cache-dtype``: what the KV cache keeps keys and values as (float32; float16
    halves its memory and what each decoding step reads from it)."""
    p.add_argument("--cache-dtype", choices=tuple(CACHE_DTYPES), default="float32",
                   help="the KV cache's element type (float32; float16: half the memory)")


SAMPLING = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "seed")


def add_sampling_options(p: argparse.ArgumentParser) -> None:
    """The sampling options of the commands that generate (``--temperature``, ``--top-k``,
    ``--top-p``, ``--min-p``, ``--repetition-penalty``, ``--seed``) and their
    ``--cache-dtype``, checked by the generation config they become
    (:func:`sampling_options`)."""
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the default)")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--min-p", type=float, default=None)
    p.add_argument("--repetition-penalty", type=float, default=None)
    p.add_argument("--seed", type=int, default=None)
    add_cache_dtype(p)


def sampling_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The keyword options of ``GPT.generate``/``stream`` that
    :func:`add_sampling_options` read (the sampling ones and ``cache_dtype``)."""
    return dict({name: getattr(args, name) for name in SAMPLING}, cache_dtype=args.cache_dtype)


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer in [1, 100000] (a usage error otherwise)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if not 1 <= v <= 100000:
        raise argparse.ArgumentTypeError(f"expected an integer in [1, 100000], got {v}")
    return v


def require_positive(args: argparse.Namespace, *names: str) -> None:
    """A ValueError naming the first of the options ``names`` that is given and < 1."""
    for n in names:
        v = getattr(args, n)
        if v is not None and v < 1:
            raise BlockcValueError(f"--{n.replace('_', '-')} must be >= 1, got {v}")


def write(text: str) -> bool:
    """Write ``text`` to stdout now; False when the reader has gone (``blockc ... |
    head``): stdout is then pointed at the null device, so nothing more fails."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
        return True
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return False


_SHAPE = ("vocab", "context", "width", "heads", "layers", "kv_heads", "head_dim", "d_ff")
_CHOICES = {"norm": NORMS, "placement": PLACEMENTS, "activation": ACTIVATIONS,
            "positions": POSITIONS}


def add_shape_options(p: argparse.ArgumentParser, what: str = "the preset's") -> None:
    """The architecture options (--width ... --untied) that override a preset;
    :func:`overrides` reads them back."""
    for name in _SHAPE:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, default=None,
                       help=f"override {what} {name}")
    for name, choices in _CHOICES.items():
        p.add_argument(f"--{name}", choices=choices, default=None,
                       help=f"override {what} {name}")
    p.add_argument("--bias", choices=("all", "none", "qkv"), default=None,
                   help="biases on every projection, none, or on q/k/v only (Qwen2)")
    p.add_argument("--untied", action="store_true", help="a separate head instead of the tied one")


def overrides(args: argparse.Namespace) -> Dict[str, Any]:
    """The GPTConfig fields the architecture options set."""
    over = {k: getattr(args, k) for k in _SHAPE + tuple(_CHOICES) if getattr(args, k) is not None}
    if args.untied:
        over["tie_weights"] = False
    if args.bias is not None:
        over.update(qkv_bias=args.bias != "none", out_bias=args.bias == "all",
                    mlp_bias=args.bias == "all")
    return over
