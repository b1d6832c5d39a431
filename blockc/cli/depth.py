"""``blockc depth``: chapter 24's stacking experiment (129_Stack) at any depth.

Stacks N random blocks (the chapter-24 draw: one generator, uniform +-0.1, no
biases or gains) on the 128_Block input ("The cat sat down", 4 x 8) when
d_model is 8, or on a seeded random input otherwise, and prints the average
norm (the mean over positions of each position's L2 norm) after each block.
The blocks are streamed (drawn, applied, dropped), so any depth runs in the
memory of one block. ``--plot FILE`` also runs the other placement and draws
pre- and post-norm curves in one figure (needs matplotlib:
``pip install 'blockc[plot]'``).
"""
from __future__ import annotations

import argparse

from .._progress import Progress
from ..block.engine import ACTIVATIONS, NORMS, PLACEMENTS, BlockConfig
from ..experiments.depth import depth_input, depth_norms
from ._options import plot_path, positive_int, pyplot, save_figure


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "depth", help="stack N random blocks and print the average norm after each",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blocks", type=positive_int, default=32, help="number of blocks (default 32)")
    p.add_argument("--d-model", type=positive_int, default=8, help="width D (default 8)")
    p.add_argument("--heads", type=positive_int, default=2, help="attention heads (default 2)")
    p.add_argument("--d-ff", type=positive_int, default=None, help="FFN width (default 4*D)")
    p.add_argument("--seq-len", type=positive_int, default=4, help="positions (default 4)")
    p.add_argument("--norm", choices=NORMS, default="rms")
    p.add_argument("--placement", choices=PLACEMENTS, default="pre")
    p.add_argument("--activation", choices=ACTIVATIONS, default="gelu_tanh")
    p.add_argument("--causal", action="store_true", help="mask keys after each query")
    p.add_argument("--no-residual", action="store_true", help="drop the residual additions")
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=42, help="srand seed (default 42)")
    p.add_argument("--rand", choices=("msvc", "glibc", "normal"), default="msvc",
                   help="weight draw: the book's msvc rand() (default), glibc, or GPT-2 normal")
    p.add_argument("--plot", metavar="FILE", help="draw pre- and post-norm curves to FILE")
    p.set_defaults(func=run)


def _cfg(args, placement: str) -> BlockConfig:
    return BlockConfig(d_model=args.d_model, n_heads=args.heads,
                       d_ff=args.d_ff if args.d_ff is not None else 4 * args.d_model,
                       norm=args.norm, placement=placement, activation=args.activation,
                       causal=args.causal, residual=not args.no_residual, eps=args.eps)


def run(args) -> int:
    cfg = _cfg(args, args.placement)
    plt = path = None
    if args.plot:  # checked before any work
        path = plot_path(args.plot)
        plt = pyplot()
    x = depth_input(cfg.d_model, args.seq_len, args.seed)
    placements = [args.placement] + (["post" if args.placement == "pre" else "pre"] if plt else [])
    curves = {}
    with Progress(args.blocks * len(placements), "blocks") as progress:
        for placement in placements:
            curves[placement] = depth_norms(_cfg(args, placement), args.blocks, args.seed,
                                            args.rand, x, progress=progress)
    src = "128_Block input" if cfg.d_model == 8 and args.seq_len == 4 else \
        f"random input {args.seq_len}x{cfg.d_model}"
    print(f"Stacking {args.blocks} transformer blocks (d_model={cfg.d_model}, heads={cfg.n_heads}, "
          f"d_ff={cfg.d_ff}, norm={cfg.norm}, {cfg.activation}, "
          f"{'causal' if cfg.causal else 'bidirectional'}, "
          f"{'residual' if cfg.residual else 'no residual'}; seed {args.seed}, {args.rand}; {src}):\n")
    names = list(curves)
    print("  " + " " * 16 + "".join(f"{n + '-norm':>12}" for n in names))
    for i in range(args.blocks + 1):
        label = "input" if i == 0 else f"after block {i}"
        print(f"  {label:<16}" + "".join(f"{curves[n][i]:12.4f}" for n in names))
    if plt is not None:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for n in ("pre", "post"):
            ax.plot(range(args.blocks + 1), curves[n], marker="o", ms=3, label=f"{n}-norm")
        ax.set_xlabel("blocks")
        ax.set_ylabel("average norm over positions")
        ax.set_title(f"{args.blocks} random blocks, d_model={cfg.d_model}, norm={cfg.norm}, "
                     f"{cfg.activation}")
        ax.legend()
        fig.tight_layout()
        save_figure(fig, path)
        plt.close(fig)
        print(f"\nwrote {path}")
    return 0
