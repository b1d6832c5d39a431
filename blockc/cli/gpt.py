"""``blockc gpt``: a decoder's parameter breakdown and residual-stream norms.

    blockc gpt --params [--preset gpt2|gpt2-medium|...|llama-7b|llama3-8b|qwen2-0.5b]
                        [--untied] [--norm ...] [--activation ...] [--d-ff F] [--kv-heads KV] ...
    blockc gpt --norms [--preset ...] [--layers L] [--seq T] [--seed S] [--plot norms.png]
"""
from __future__ import annotations

import argparse

from .._errors import BlockcValueError
from ..experiments.depth import residual_norms
from ..model import (GPT_PRESETS, GPTConfig, block_parameter_parts, gpt2_shaped,
                     gpt_parameter_count, gpt_parameter_formula, parameter_breakdown)
from ._options import add_shape_options, overrides, plot_path, pyplot, save_figure

_NAMES = {"gpt2": "GPT-2 small", "gpt2-medium": "GPT-2 medium",
          "gpt2-large": "GPT-2 large", "gpt2-xl": "GPT-2 XL", "llama-7b": "LLaMA-7B",
          "llama3-8b": "Llama 3 8B", "qwen2-0.5b": "Qwen2 0.5B"}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "gpt", help="a whole decoder (GPT-2, Llama-shaped): parameter count, residual-stream norms",
        description="The decoder in C. --params: the parameter breakdown from the formula "
                    "(GPT-2: N = VD + CD + L(12D^2 + 13D) + 2D) beside the size of the parameter "
                    "buffer C lays out for the model, and 130_Real_Params' per-block count "
                    "beside the block's own. --norms: the residual stream's norm after every "
                    "block of a randomly initialised model on a random input.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--params", action="store_true", help="print the parameter breakdown")
    what.add_argument("--norms", action="store_true",
                      help="print each block's residual-stream norm for a random input")
    p.add_argument("--preset", choices=list(GPT_PRESETS), default="gpt2",
                   help="the model's shape (default gpt2)")
    add_shape_options(p)
    p.add_argument("--seq", type=int, default=32, help="--norms: tokens in the random input (32)")
    p.add_argument("--seed", type=int, default=0, help="--norms: weights and input seed (0)")
    p.add_argument("--plot", metavar="PNG", default=None,
                   help="--norms: also draw the norms into this PNG (needs matplotlib)")
    p.set_defaults(func=run)


def _config(args) -> GPTConfig:
    return GPTConfig.preset(args.preset, **overrides(args))


def _params(args) -> int:
    cfg = _config(args)
    label = _NAMES[args.preset] if not overrides(args) else "custom"
    kv = f" KV={cfg.kv_heads_}" if cfg.kv_heads_ != cfg.heads else ""
    arch = ("" if gpt2_shaped(cfg) else
            f" F={cfg.d_ff_}{kv} Dh={cfg.head_dim_}; {cfg.norm} norm, {cfg.activation}, "
            f"{cfg.positions} positions;")
    print(f"{label} ({args.preset}): V={cfg.vocab:,} C={cfg.context:,} D={cfg.width} "
          f"L={cfg.layers} H={cfg.heads}{arch} {'tied' if cfg.tie_weights else 'untied'} head")
    for part, term, n in parameter_breakdown(cfg):
        print(f"  {part:<30} {term:<18} {n:>15,}")
    formula = gpt_parameter_formula(cfg)
    model = gpt_parameter_count(cfg)
    emb = cfg.vocab * cfg.width * (1 if cfg.tie_weights else 2)
    emb += cfg.context * cfg.width if cfg.positions == "learned" else 0
    print(f"  {'total, formula':<30} {'N':<18} {formula:>15,}")
    print(f"  {'total, model built in C':<30} {'buffer size':<18} {model:>15,}  "
          f"{'(match)' if model == formula else '(MISMATCH)'}")
    print(f"  embeddings{'' if cfg.tie_weights else ' and head'} are {100.0 * emb / model:.1f}% "
          "of the model")
    d, f = cfg.width, cfg.d_ff_
    book = 4 * d * d + 2 * d * f + 2 * d
    per_block = sum(n for _, _, n in block_parameter_parts(cfg))
    print(f"  130_Real_Params counts a block as 4D^2 + 2DF + 2D = {book:,}; this block has "
          f"{per_block:,} ({per_block - book:+,})")
    if per_block != book:
        why = []
        if cfg.activation == "swiglu":
            why.append(f"the gated MLP's third matrix +DF = {d * f:+,}")
        qkvo = d * (cfg.heads + 2 * cfg.kv_heads_) * cfg.head_dim_ + cfg.heads * cfg.head_dim_ * d
        if qkvo != 4 * d * d:
            why.append(f"attention {qkvo:,} instead of 4D^2 ({qkvo - 4 * d * d:+,}: "
                       "grouped K/V heads or a head size other than D/H)")
        rest = per_block - qkvo - (3 if cfg.activation == "swiglu" else 2) * d * f - 2 * d
        if rest:
            why.append(f"norm shifts and biases {rest:+,}")
        print("  (" + "; ".join(why) + ")")
    return 0 if model == formula else 1


def _norms(args) -> int:
    cfg = _config(args)
    if args.seq < 1 or args.seq > cfg.context:
        raise BlockcValueError(f"--seq must be in [1, {cfg.context}], got {args.seq}")
    if args.seed < 0:
        raise BlockcValueError(f"--seed must be >= 0, got {args.seed}")
    plt = path = None
    if args.plot:  # checked before any work
        path = plot_path(args.plot)
        plt = pyplot()
    norms = residual_norms(cfg, args.seq, args.seed)
    print(f"residual-stream norm (mean over {args.seq} tokens), random {args.preset}-shaped model "
          f"D={cfg.width} L={cfg.layers}, seed {args.seed}")
    print(f"  {'after':<10} {'norm':>10} {'x embed':>9} {'norm^2 gain':>12}")
    for i, n in enumerate(norms):
        gain = "" if i == 0 else f"{n * n - norms[i - 1] ** 2:12.2f}"
        print(f"  {'embedding' if i == 0 else f'block {i}':<10} {n:>10.4f} {n / norms[0]:>9.2f} "
              f"{gain:>12}")
    print("  (a steady norm^2 gain per block is growth like sqrt(depth): each block adds a "
          "roughly independent update to the stream)")
    if plt is not None:
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(range(len(norms)), norms, marker="o")
        ax.set_xlabel("block (0 = embedding)")
        ax.set_ylabel("mean residual-stream norm")
        ax.set_title(f"Residual stream norm by depth (random {args.preset}, D={cfg.width})")
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        save_figure(fig, path, dpi=120)
        plt.close(fig)
        print(f"wrote {path}")
    return 0


def run(args: argparse.Namespace) -> int:
    return _params(args) if args.params else _norms(args)
