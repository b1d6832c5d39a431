"""``blockc gpt``: the chapter-6 GPT's parameter breakdown and residual-stream norms.

    blockc gpt --params [--preset gpt2|gpt2-medium|gpt2-large|gpt2-xl] [--untied]
    blockc gpt --norms [--preset ...] [--layers L] [--seq T] [--seed S] [--plot norms.png]
"""
from __future__ import annotations

import argparse
from typing import List, Tuple

import numpy as np

from ._plot import plot_path, pyplot
from .gpt import GPT_PRESETS, GPT, GPTConfig, gpt_parameter_count, gpt_parameter_formula
from ._errors import BlockcValueError

_NAMES = {"gpt2": "GPT-2 small", "gpt2-medium": "GPT-2 medium",
          "gpt2-large": "GPT-2 large", "gpt2-xl": "GPT-2 XL"}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "gpt", help="the chapter-6 GPT: parameter count, residual-stream norms",
        description="The chapter-6 GPT in C. --params: the parameter breakdown from the "
                    "formula N = VD + CD + L(12D^2 + 13D) + 2D beside the size of the parameter "
                    "buffer C lays out for the model. --norms: the residual stream's norm after "
                    "every block of a randomly initialised model on a random input.")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--params", action="store_true", help="print the parameter breakdown")
    what.add_argument("--norms", action="store_true",
                      help="print each block's residual-stream norm for a random input")
    p.add_argument("--preset", choices=sorted(GPT_PRESETS), default="gpt2",
                   help="GPT-2 size (default gpt2)")
    for name in ("vocab", "context", "width", "heads", "layers"):
        p.add_argument(f"--{name}", type=int, default=None, help=f"override the preset's {name}")
    p.add_argument("--untied", action="store_true", help="a separate head instead of the tied one")
    p.add_argument("--seq", type=int, default=32, help="--norms: tokens in the random input (32)")
    p.add_argument("--seed", type=int, default=0, help="--norms: weights and input seed (0)")
    p.add_argument("--plot", metavar="PNG", default=None,
                   help="--norms: also draw the norms into this PNG (needs matplotlib)")
    p.set_defaults(func=run)


def _config(args) -> GPTConfig:
    over = {k: getattr(args, k) for k in ("vocab", "context", "width", "heads", "layers")
            if getattr(args, k) is not None}
    return GPTConfig.preset(args.preset, tie_weights=not args.untied, **over)


def breakdown(cfg: GPTConfig) -> List[Tuple[str, str, int]]:
    """(part, formula term, count) rows of the chapter's parameter formula."""
    v, c, d, n_layers = cfg.vocab, cfg.context, cfg.width, cfg.layers
    per_block = 12 * d * d + 13 * d
    rows = [("token embedding", "V*D", v * d),
            ("position embedding", "C*D", c * d),
            ("per block", "12D^2 + 13D", per_block),
            ("blocks", "L*(12D^2 + 13D)", n_layers * per_block),
            ("final norm", "2D", 2 * d)]
    rows.append(("head (tied: token embedding)", "0", 0) if cfg.tie_weights
                else ("head", "V*D", v * d))
    return rows


def _params(args) -> int:
    cfg = _config(args)
    label = _NAMES[args.preset] if not any(getattr(args, k) is not None for k in
                                           ("vocab", "context", "width", "heads", "layers")) \
        else "custom"
    print(f"{label} ({args.preset}): V={cfg.vocab:,} C={cfg.context:,} D={cfg.width} "
          f"L={cfg.layers} H={cfg.heads}, {'tied' if cfg.tie_weights else 'untied'} head")
    for part, term, n in breakdown(cfg):
        print(f"  {part:<30} {term:<18} {n:>15,}")
    formula = gpt_parameter_formula(cfg)
    model = gpt_parameter_count(cfg)
    emb = cfg.vocab * cfg.width + cfg.context * cfg.width
    print(f"  {'total, formula':<30} {'N':<18} {formula:>15,}")
    print(f"  {'total, model built in C':<30} {'buffer size':<18} {model:>15,}  "
          f"{'(match)' if model == formula else '(MISMATCH)'}")
    print(f"  embeddings are {100.0 * emb / model:.1f}% of the model")
    return 0 if model == formula else 1


def residual_norms(cfg: GPTConfig, seq: int, seed: int) -> np.ndarray:
    """Mean L2 norm over tokens of the residual stream: after the embedding (entry 0),
    then after every block (entries 1..L), for a random model on a random input."""
    m = GPT.random(cfg, seed=seed)
    ids = np.random.default_rng(seed + 1).integers(0, cfg.vocab, size=(1, seq))
    hidden = m.hidden_states(ids)
    sd = m.state_dict()
    x0 = sd["token.weight"][ids[0]] + sd["position.weight"][:seq]
    norms = [np.linalg.norm(x0, axis=-1).mean()]
    norms += [np.linalg.norm(h[0], axis=-1).mean() for h in hidden]
    return np.array(norms)


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
        fig.savefig(path, dpi=120)
        plt.close(fig)
        print(f"wrote {path}")
    return 0


def run(args: argparse.Namespace) -> int:
    return _params(args) if args.params else _norms(args)
