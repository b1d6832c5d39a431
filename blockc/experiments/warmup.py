"""``blockc experiment warmup`` and ``blockc experiment activation``: learning-rate sweeps.

Xiong et al. (2020, "On Layer Normalization in the Transformer Architecture",
ICML) measure post-norm's difficulty as a need: without a learning-rate warmup
it fails at peak learning rates pre-norm trains at. :func:`sweep` trains one
small model per point (variant, depth, peak learning rate, warmup, gradient
clipping, seed) on a random order-2 Markov text whose entropy is the floor no
model can beat, with AdamW and no clipping unless a point asks for it, and
records every run: its training curve, its final held-out loss and its status,

- ``"diverged"``: a training loss that is not finite (the run stops there) or a
  final held-out loss more than 0.1 nats above the uniform guess, log(vocab);
- ``"stuck"``: a final held-out loss not below the unigram loss (the model
  learned no more than the tokens' frequencies);
- ``"trained"``: anything else.

A diverged run stays in the results and the tables (as diverged); nothing is
dropped. The figures are the same bits at any thread count and any number of
worker processes (each run is seeded by its point alone).

``warmup_points`` is the warmup experiment's grid (pre-norm and post-norm, with
and without warmup, plus one row of post-norm without warmup with clipping);
``activation_points`` the GELU-against-ReLU rerun (pre-norm, with warmup).
"""
from __future__ import annotations

import functools
import math
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from ..train import fit as tr
from .._args import as_choice, as_int, as_real
from .. import runtime
from .._errors import BlockcValueError
from .._plot import pyplot, save_figure
from ..gpt import GPT, GPTConfig
from ..train import AdamW
from ._report import fmt, spread, write_section
from .trainability import markov_task, task_levels

__all__ = ["VARIANTS", "Settings", "task", "classify", "run_point", "sweep", "warmup_points",
           "activation_points", "sweep_table", "plot_sweep", "write_markdown", "STATUSES",
           "groups", "status_counts", "from_json"]

#: variant -> the GPTConfig options it changes from GPT-2's pre-norm block
VARIANTS: Dict[str, Dict[str, Any]] = {
    "pre-norm": {},
    "post-norm": {"placement": "post"},
    "relu": {"activation": "relu"},
}

STATUSES = ("trained", "stuck", "diverged")


class Settings(dict):
    """What every run of a sweep shares (a dict, so it crosses to worker processes).

    Keys: ``vocab``, ``choices`` (the Markov text: ``vocab`` tokens, each pair
    allowing ``choices`` next ones), ``width``, ``heads``, ``batch``, ``seq``,
    ``steps``, ``eval_windows`` (held-out windows of ``seq`` tokens).
    """

    DEFAULTS = dict(vocab=8, choices=2, width=32, heads=4, batch=8, seq=16, steps=300,
                    eval_windows=256)

    def __init__(self, **kw: Any):
        unknown = set(kw) - set(self.DEFAULTS)
        if unknown:
            raise BlockcValueError(f"Settings: unknown {', '.join(sorted(unknown))}")
        super().__init__({**self.DEFAULTS, **kw})
        for k in self.DEFAULTS:
            self[k] = as_int(self[k], k, 2 if k in ("vocab", "choices") else 1)
        if self["choices"] > self["vocab"]:
            raise BlockcValueError(f"choices must be <= vocab, got {self['choices']} > "
                                   f"{self['vocab']}")
        if self["width"] % self["heads"]:
            raise BlockcValueError(f"width must be a multiple of the {self['heads']} heads, "
                                   f"got {self['width']}")


@functools.lru_cache(maxsize=4)
def _task(vocab: int, choices: int, seq: int) -> Dict[str, Any]:
    tokens, floor = markov_task(vocab, choices, seed=0)
    train, held = tr.split(tokens, seq, 0.1)
    return {"train": train, "held": held, "floor": floor, **task_levels(train, held, vocab)}


def task(settings: Settings) -> Dict[str, Any]:
    """The sweep's text: ``train`` and ``held`` tokens, and the levels a loss is read
    against: ``floor`` (the chain's entropy), ``window_floor`` (the best mean loss
    over a window of ``seq`` tokens, whose first prediction sees one token and can
    do no better than the bigram), ``bigram``, ``unigram`` and ``uniform`` (log
    vocab), nats per token.

    Parameters
    ----------
    settings : Settings

    Returns
    -------
    dict
    """
    t = _task(settings["vocab"], settings["choices"], settings["seq"])
    seq = settings["seq"]
    # a window's first prediction sees one token: the best a model can do there is the bigram
    window = ((seq - 1) * t["floor"] + t["bigram"]) / seq
    return {**t, "window_floor": window, "uniform": math.log(settings["vocab"])}


def classify(losses: Sequence[float], held_out: float, unigram: float, uniform: float) -> str:
    """A run's status (see the module's docstring).

    Parameters
    ----------
    losses : sequence of float
        The training losses of the steps run.
    held_out : float
        The final held-out loss (NaN when the run stopped early).
    unigram, uniform : float
        The unigram loss and log(vocab).

    Returns
    -------
    {"trained", "stuck", "diverged"}
    """
    if not all(math.isfinite(x) for x in losses) or not math.isfinite(held_out) \
            or held_out > uniform + 0.1:
        return "diverged"
    if held_out >= unigram - 0.01:
        return "stuck"
    return "trained"


def run_point(point: Dict[str, Any], settings: Settings) -> Dict[str, Any]:
    """Train one point of a sweep and evaluate it.

    Parameters
    ----------
    point : dict
        ``variant`` (a key of :data:`VARIANTS`), ``depth``, ``lr`` (the peak),
        ``warmup`` (linear warmup steps, 0 for none), ``clip`` (the global
        gradient norm to clip to, or None), ``seed`` (the weights and the batches).
    settings : Settings

    Returns
    -------
    dict
        The point, and ``losses`` (one per step run), ``held_out``, ``status``,
        ``steps_run``, ``seconds``.

    Raises
    ------
    ValueError
        An unknown variant, a non-positive learning rate, warmup or clip out of range.
    """
    variant = as_choice(point["variant"], "variant", tuple(VARIANTS))
    depth = as_int(point["depth"], "depth", 1)
    lr = as_real(point["lr"], "lr", 0.0)
    if not (lr > 0 and math.isfinite(lr)):
        raise BlockcValueError(f"lr must be a positive number, got {point['lr']}")
    warmup = as_int(point["warmup"], "warmup", 0, settings["steps"])
    clip = point.get("clip")
    if clip is not None and not (as_real(clip, "clip", 0.0) > 0):
        raise BlockcValueError(f"clip must be > 0 or None, got {clip}")
    seed = as_int(point["seed"], "seed", 0)
    t = task(settings)
    s = settings
    cfg = GPTConfig(vocab=s["vocab"], context=s["seq"], width=s["width"], heads=s["heads"],
                    layers=depth, **VARIANTS[variant])
    m = GPT.random(cfg, seed=seed)
    opt = AdamW(m, lr=lr, weight_decay=0.0)
    losses: List[float] = []
    t0 = time.perf_counter()
    for step in range(s["steps"]):
        x, y = tr.batch_at(t["train"], step, s["batch"], s["seq"], seed)
        opt.lr = tr.lr_at(step, lr, warmup, s["steps"], "constant")
        loss = m.train_step(x, y, opt, max_grad_norm=clip)
        losses.append(float(loss))
        if not math.isfinite(loss):
            break
    held = float("nan")
    if len(losses) == s["steps"] and math.isfinite(losses[-1]):
        held = float(tr.evaluate(m, t["held"], s["seq"], 64, max_windows=s["eval_windows"]))
    return {**point, "variant": variant, "depth": depth, "lr": lr, "warmup": warmup,
            "clip": clip, "seed": seed, "losses": [round(x, 5) for x in losses],
            "held_out": held, "steps_run": len(losses),
            "status": classify(losses, held, t["unigram"], t["uniform"]),
            "seconds": time.perf_counter() - t0}


def _worker_init(threads: Optional[int]) -> None:
    if threads is not None:
        runtime.set_num_threads(threads)


def _run(args):
    return run_point(*args)


def sweep(points: Sequence[Dict[str, Any]], settings: Settings, jobs: int = 1,
          threads: Optional[int] = None, report: Callable[[str], None] = print
          ) -> Dict[str, Any]:
    """Run every point (in ``jobs`` worker processes when > 1) and collect the results.

    Parameters
    ----------
    points : sequence of dict
        As :func:`run_point` takes them.
    settings : Settings
    jobs : int >= 1, optional
        Worker processes (each with ``threads`` threads, 1 by default when
        ``jobs`` > 1). The results do not depend on it.
    threads : int >= 1, optional
        Threads per process (this process's when ``jobs`` is 1; unchanged when None).
    report : callable, optional
        Called with one line per finished run.

    Returns
    -------
    dict
        ``settings``, the task's levels (``floor``, ``bigram``, ``unigram``,
        ``uniform``) and ``runs``: one result per point, in the points' order.

    Raises
    ------
    ValueError
        A point :func:`run_point` refuses (before any run starts), jobs < 1.
    """
    jobs = as_int(jobs, "jobs", 1)
    if threads is not None:
        threads = as_int(threads, "threads", 1)
    for p in points:  # refuse a bad point before hours of work
        as_choice(p["variant"], "variant", tuple(VARIANTS))
        as_int(p["depth"], "depth", 1)
        as_int(p["warmup"], "warmup", 0, settings["steps"])
        if not (as_real(p["lr"], "lr", 0.0) > 0):
            raise BlockcValueError(f"lr must be > 0, got {p['lr']}")
    t = task(settings)
    runs: List[Dict[str, Any]] = []
    t0 = time.perf_counter()

    def done(r: Dict[str, Any]) -> None:
        runs.append(r)
        report(f"  [{len(runs):>3}/{len(points)}] {r['variant']:<9} {r['depth']:>3} layers  "
               f"lr {r['lr']:<8.3g} warmup {r['warmup']:>3}  clip {r['clip'] or '-':<4} "
               f"seed {r['seed']}: held-out {fmt(r['held_out'])} {r['status']:<8} "
               f"({r['seconds']:.1f} s; {time.perf_counter() - t0:.0f} s in all)")

    if jobs == 1:
        _worker_init(threads)
        for p in points:
            done(run_point(p, settings))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_worker_init,
                                 initargs=(1 if threads is None else threads,)) as ex:
            for r in ex.map(_run, [(p, settings) for p in points]):
                done(r)
    return {"settings": dict(settings), "floor": t["floor"], "window_floor": t["window_floor"],
            "bigram": t["bigram"],
            "unigram": t["unigram"], "uniform": t["uniform"], "runs": runs,
            "seconds": time.perf_counter() - t0}


def from_json(obj: Dict[str, Any]) -> Dict[str, Any]:
    """A :func:`sweep` result read back from the JSON ``blockc experiment ... --json`` wrote
    (null figures, a run that stopped, back to NaN), checked for what the tables need.

    Parameters
    ----------
    obj : dict
        The parsed JSON.

    Returns
    -------
    dict

    Raises
    ------
    ValueError
        Not a sweep's result: no settings or runs, a run without its point or figures.
    """
    if not isinstance(obj, dict) or not isinstance(obj.get("runs"), list) \
            or not isinstance(obj.get("settings"), dict):
        raise BlockcValueError("not a sweep's JSON: no 'settings' and 'runs'")
    need = ("variant", "depth", "lr", "warmup", "clip", "seed", "losses", "held_out",
            "status", "steps_run")
    nan = float("nan")
    runs = []
    for i, r in enumerate(obj["runs"]):
        if not isinstance(r, dict) or any(k not in r for k in need) \
                or r["status"] not in STATUSES or not isinstance(r["losses"], list):
            raise BlockcValueError(f"not a sweep's JSON: run {i} lacks its point or figures")
        runs.append({**r, "held_out": nan if r["held_out"] is None else float(r["held_out"]),
                     "losses": [nan if x is None else float(x) for x in r["losses"]]})
    levels = {}
    for k in ("floor", "window_floor", "bigram", "unigram", "uniform", "seconds"):
        if not isinstance(obj.get(k), (int, float)):
            raise BlockcValueError(f"not a sweep's JSON: no {k!r}")
        levels[k] = float(obj[k])
    return {**obj, **levels, "runs": runs}


def warmup_points(depths: Sequence[int], lrs: Sequence[float], seeds: int, warmup: int,
                  clip: Optional[float] = 1.0) -> List[Dict[str, Any]]:
    """The warmup experiment's grid: pre-norm and post-norm at every depth and peak
    learning rate, without warmup and with ``warmup`` steps of it, no clipping,
    ``seeds`` seeds each; and, when ``clip`` is given, one extra row: post-norm at
    the deepest depth without warmup, clipped to ``clip``.

    Parameters
    ----------
    depths : sequence of int
    lrs : sequence of float
    seeds : int >= 1
    warmup : int >= 1
    clip : float > 0 or None, optional

    Returns
    -------
    list of dict
    """
    pts = [{"variant": v, "depth": d, "lr": lr, "warmup": w, "clip": None, "seed": s}
           for d in depths for v in ("pre-norm", "post-norm") for w in (0, warmup)
           for lr in lrs for s in range(seeds)]
    if clip is not None:
        pts += [{"variant": "post-norm", "depth": max(depths), "lr": lr, "warmup": 0,
                 "clip": clip, "seed": s} for lr in lrs for s in range(seeds)]
    return pts


def activation_points(depths: Sequence[int], lrs: Sequence[float], seeds: int, warmup: int
                      ) -> List[Dict[str, Any]]:
    """The GELU-against-ReLU grid: pre-norm with GPT-2's GELU and with ReLU at every
    depth and peak learning rate, ``warmup`` steps of warmup, no clipping.

    Parameters
    ----------
    depths : sequence of int
    lrs : sequence of float
    seeds : int >= 1
    warmup : int >= 0

    Returns
    -------
    list of dict
    """
    return [{"variant": v, "depth": d, "lr": lr, "warmup": warmup, "clip": None, "seed": s}
            for d in depths for v in ("pre-norm", "relu") for lr in lrs for s in range(seeds)]


def _row_key(r: Dict[str, Any]):
    return (r["depth"], r["variant"], r["warmup"], r["clip"])


def _row_name(key) -> str:
    depth, variant, warmup, clip = key
    name = {"pre-norm": "pre-norm (GELU)", "relu": "pre-norm, ReLU"}.get(variant, variant)
    parts = [f"{warmup} steps' warmup" if warmup else "no warmup"]
    if clip is not None:
        parts.append(f"clipped to {clip:g}")
    return f"{name}, {', '.join(parts)}"


def groups(res: Dict[str, Any]) -> Dict[Any, Dict[float, List[Dict[str, Any]]]]:
    """The runs grouped by row (depth, variant, warmup, clip), then by peak learning rate."""
    out: Dict[Any, Dict[float, List[Dict[str, Any]]]] = {}
    for r in res["runs"]:
        out.setdefault(_row_key(r), {}).setdefault(r["lr"], []).append(r)
    return out


def _cell(rs: List[Dict[str, Any]]) -> str:
    ok = [r["held_out"] for r in rs if r["status"] != "diverged"]
    div = sum(r["status"] == "diverged" for r in rs)
    if not ok:
        return f"diverged {div}/{len(rs)}"
    s = spread(ok)
    text = f"{fmt(s['median'])} ({fmt(s['min'])}-{fmt(s['max'])})" if len(ok) > 1 \
        else fmt(s["median"])
    return text + (f", {div}/{len(rs)} diverged" if div else "")


def sweep_table(res: Dict[str, Any]) -> List[str]:
    """The Markdown table: a row per (depth, variant, warmup, clip), a column per peak
    learning rate; each cell the median final held-out loss over the seeds that did
    not diverge, (smallest-largest), and how many diverged.

    Parameters
    ----------
    res : dict
        :func:`sweep`'s result.

    Returns
    -------
    list of str
    """
    g = groups(res)
    lrs = sorted({r["lr"] for r in res["runs"]})
    lines = ["| layers | run | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " |",
             "|---:|---|" + "---:|" * len(lrs)]
    for key, by_lr in g.items():
        lines.append(f"| {key[0]} | {_row_name(key)} | "
                     + " | ".join(_cell(by_lr[lr]) if lr in by_lr else "" for lr in lrs) + " |")
    return lines


def status_counts(res: Dict[str, Any]) -> Dict[str, int]:
    """How many runs ended in each status."""
    return {s: sum(r["status"] == s for r in res["runs"]) for s in STATUSES}


def _example_pair(res: Dict[str, Any]):
    """A failed run (diverged, else stuck) at the deepest depth and the smallest learning
    rate any run failed at, and the best healthy run of the same depth, lr and seed."""
    bad = [r for r in res["runs"] if r["status"] != "trained"]
    if not bad:
        return None, None
    rank = {"diverged": 0, "stuck": 1}
    bad.sort(key=lambda r: (rank[r["status"]], -r["depth"], r["clip"] is not None, r["lr"],
                            r["seed"]))
    b = bad[0]
    same = [r for r in res["runs"] if r["status"] == "trained" and r["depth"] == b["depth"]
            and r["lr"] == b["lr"] and r["seed"] == b["seed"]]
    if not same:
        same = [r for r in res["runs"] if r["status"] == "trained" and r["depth"] == b["depth"]]
    same.sort(key=lambda r: r["held_out"])
    return b, (same[0] if same else None)


def plot_sweep(res: Dict[str, Any], path: str, title: str = "", cpu: str = "") -> None:
    """Final held-out loss against peak learning rate, one panel per depth (the median
    over the seeds, the band their smallest to largest; a cross at the top for each
    diverged run), and the loss curves of a failed and a healthy run.

    Parameters
    ----------
    res : dict
        :func:`sweep`'s result.
    path : str
        The PNG to write.
    title, cpu : str, optional
        Put in the figure's title.

    Raises
    ------
    ValueError
        Without matplotlib.
    """
    plt = pyplot()
    g = groups(res)
    depths = sorted({k[0] for k in g})
    bad, good = _example_pair(res)
    n = len(depths) + (bad is not None)
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n, 4.0), squeeze=False)
    top = res["uniform"] + 0.15
    styles = ["-", "--", ":", "-."]
    for ax, depth in zip(axes[0], depths):
        for i, (key, by_lr) in enumerate((k, v) for k, v in g.items() if k[0] == depth):
            lrs = sorted(by_lr)
            med, lo, hi = [], [], []
            for lr in lrs:
                ok = [r["held_out"] for r in by_lr[lr] if r["status"] != "diverged"]
                s = spread(ok)
                med.append(s["median"])
                lo.append(s["min"])
                hi.append(s["max"])
            line, = ax.plot(lrs, med, marker="o", ms=3, lw=1.3, ls=styles[i % len(styles)],
                            label=_row_name(key))
            ax.fill_between(lrs, lo, hi, color=line.get_color(), alpha=0.18, lw=0)
            for lr in lrs:
                k = sum(r["status"] == "diverged" for r in by_lr[lr])
                if k:
                    ax.plot([lr], [top], marker="x", color=line.get_color(), ms=4 + 2 * k)
        for level, name in ((res["window_floor"], "floor"), (res["bigram"], "bigram"),
                            (res["unigram"], "unigram")):
            ax.axhline(level, color="grey", lw=0.7, ls="--")
            ax.text(min(r["lr"] for r in res["runs"]), level, name, fontsize=7, va="bottom",
                    color="grey")
        ax.set_xscale("log")
        ax.set_ylim(res["window_floor"] - 0.1, top + 0.1)
        ax.set_xlabel("peak learning rate (AdamW)")
        ax.set_ylabel("final held-out loss (nats per token)")
        ax.set_title(f"{depth} layers", fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="upper left")
    if bad is not None:
        ax = axes[0][-1]
        for r, name in ((bad, bad["status"]), (good, "trained")):
            if r is None:
                continue
            y = np.asarray(r["losses"], np.float64)
            ax.plot(np.arange(1, len(y) + 1), np.minimum(y, 2 * top), lw=0.9,
                    label=f"{name}: {_row_name(_row_key(r))}, lr {r['lr']:g}, seed {r['seed']}")
        ax.axhline(res["window_floor"], color="grey", lw=0.7, ls="--")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss")
        ax.set_title(f"{bad['depth']} layers: a failed and a healthy run", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    s = res["settings"]
    fig.suptitle((title + ": " if title else "")
                 + f"width {s['width']}, {s['steps']} steps of {s['batch']} x {s['seq']} tokens,"
                 f" median and min-max over seeds" + (f"; {cpu}" if cpu else ""), fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def write_markdown(path: str, name: str, res: Dict[str, Any], command: str) -> None:
    """Write the sweep's table into ``path``'s section ``name``.

    Parameters
    ----------
    path : str
    name : str
        The section (``warmup``, ``activation``).
    res : dict
        :func:`sweep`'s result.
    command : str
        The command line, quoted above the table.

    Raises
    ------
    OSError
        The file cannot be written.
    """
    s = res["settings"]
    c = status_counts(res)
    seeds = len({r["seed"] for r in res["runs"]})
    body = [f"`{command}` (final held-out loss, nats per token: the median over {seeds} seeds "
            f"of the runs that did not diverge, (smallest-largest); width {s['width']}, "
            f"{s['steps']} steps of {s['batch']} x {s['seq']} tokens, AdamW without weight decay; "
            f"the floor is {res['window_floor']:.3f} (the chain's entropy {res['floor']:.3f} at "
            f"every position but a window's first), a bigram model {res['bigram']:.3f}, unigram "
            f"{res['unigram']:.3f}, uniform {res['uniform']:.3f}):", ""]
    body += sweep_table(res)
    body += ["", f"{len(res['runs'])} runs: {c['trained']} trained, {c['stuck']} stuck at the "
                 f"unigram loss, {c['diverged']} diverged; {res['seconds']:.0f} s."]
    write_section(path, name, body)
