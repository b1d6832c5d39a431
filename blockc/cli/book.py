"""``blockc listing`` and ``blockc figures``: book mode on the command line.

The C library computes (:mod:`blockc.book`); :mod:`blockc.listings` formats.
"""
from __future__ import annotations

import argparse

from .._args import as_seed
from ..book.listings import figures, format_figures, listing_name, render
from ..book.rng import GENERATORS
from ._options import write


def _seed(text: str) -> int:
    try:
        seed = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: not an integer") from None
    try:
        return as_seed(seed)  # the argument layer's range and message
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _name(text: str) -> str:
    try:
        return listing_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _listing(args) -> int:
    write(render(args.name, seed=args.seed, rand=args.rand))  # `| head`: stops quietly
    return 0


def _figures(args) -> int:
    figs = figures(args.rand)
    write(format_figures(figs, args.rand))
    return 1 if any(f.agree is False for f in figs) else 0


def register(sub) -> None:
    p = sub.add_parser(
        "listing", help="print what a chapter-24 listing prints (126_Ffn ... 130_Real_Params)",
        description="Print, byte for byte, what the listing's program prints when compiled "
                    "with the chosen C runtime's rand() and run with srand(SEED).")
    p.add_argument("name", metavar="NAME", type=_name,
                   help="126_Ffn, 127_Residual, 128_Block, 129_Stack, 130_Real_Params, or 126..130")
    p.add_argument("--seed", type=_seed, default=42, help="srand() seed in [0, 2**32) (default 42)")
    p.add_argument("--rand", choices=GENERATORS, default="msvc",
                   help="whose rand(): msvc (the book's figures, default) or glibc (Linux)")
    p.set_defaults(func=_listing)

    p = sub.add_parser(
        "figures", help="the chapter's headline figures beside the book's values",
        description="Compute the chapter's headline figures (seed 42) and print each beside "
                    "the value the book prints; exit status 1 if any disagree.")
    p.add_argument("--rand", choices=GENERATORS, default="msvc",
                   help="msvc: compare with the book; glibc: with the figures the listings "
                        "print when built with gcc on Linux")
    p.set_defaults(func=_figures)
