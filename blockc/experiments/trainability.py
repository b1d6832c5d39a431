"""The trainability experiment: chapters 6 and 24's claims about training, put to a test.

The same small task (text from a random order-2 Markov chain, whose exact entropy
is the floor no model can beat) trained at several depths for pre-norm,
post-norm, no residual, no norm, and ReLU instead of GELU. ``blockc experiment
trainability`` runs it and prints :func:`results_table`; :func:`write_section`
puts the table into a Markdown file.
"""
from __future__ import annotations

import math
import os
import time
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np


from ..train import fit as tr
from .._plot import pyplot, save_figure
from ..gpt import GPT, GPTConfig
from ..train import AdamW
from ._report import read_section_file, write_section as write_report_section

__all__ = ["TASK_VOCAB", "VARIANTS", "markov_task", "task_levels", "trainability",
           "results_table", "plot_runs", "write_section"]

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
    return {"floor": floor, **task_levels(train, held),
            "steps": steps, "lr": lr, "width": width, "batch": batch, "seq": seq, "runs": runs}


def task_levels(train: np.ndarray, held: np.ndarray, vocab: int = TASK_VOCAB
                ) -> Dict[str, float]:
    """The held-out losses of the two counting models a trained model is read against:
    ``unigram`` (the training tokens' frequencies) and ``bigram`` (the next token's
    frequencies after each token), both add-one smoothed, in nats per token.

    Parameters
    ----------
    train, held : numpy.ndarray of int
        Tokens in [0, vocab).
    vocab : int, optional

    Returns
    -------
    dict
        ``{"unigram": float, "bigram": float}``.
    """
    p = np.bincount(train, minlength=vocab) + 1.0
    p /= p.sum()
    c = np.ones((vocab, vocab))
    np.add.at(c, (train[:-1], train[1:]), 1.0)
    q = c / c.sum(axis=1, keepdims=True)
    return {"unigram": float(-np.log(p[held]).mean()),
            "bigram": float(-np.log(q[held[:-1], held[1:]]).mean())}


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


def plot_runs(res: Dict[str, Any], path: str) -> None:
    """Draw loss against step, one panel per depth, one curve per variant (matplotlib)."""
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
    save_figure(fig, path, dpi=120)
    plt.close(fig)



def read_markdown(path: str) -> str:
    """The Markdown file the 'trainability' section goes into, its markers checked (see
    :func:`blockc.experiments._report.read_section_file`)."""
    return read_section_file(path, "trainability")


def write_section(path: str, res: Dict[str, Any], command: str) -> None:
    """Write the results table, headed by ``command`` (the command line that made it),
    into ``path``'s 'trainability' section (appended when it has none), atomically."""
    body = [f"`{command}` "
            f"(held-out loss after {res['steps']} steps, nats per token; the floor is "
            f"{res['floor']:.3f}, a bigram model {res['bigram']:.3f}, unigram {res['unigram']:.3f}):",
            ""] + results_table(res)
    write_report_section(path, "trainability", body)
