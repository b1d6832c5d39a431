"""``blockc experiment gradients``: the gradient of every layer at initialisation.

Xiong et al. (2020, "On Layer Normalization in the Transformer Architecture",
ICML; their Figure 3 and Theorem 1) describe post-norm's difficulty by the
gradients at initialisation: the gradient of the parameters near the output is
large for post-norm and the same at every layer for pre-norm (whose last-layer
gradient shrinks like 1 / sqrt(layers)). Chapter 6's residual claim (the
gradient of x + f(x) is 1 + f'(x), so the signal reaches the early layers) and
chapter 23's (post-norm loses its input sensitivity across depth) are
statements about the gradient that reaches each layer's input. Both are
measured here, on one batch of the trainability experiment's Markov text:

- the norm of each block's parameter gradient, and of its FFN output weight
  alone (``down.weight``: the paper's W^2, the matrix of its Figure 3),
- the norm of the gradient of the loss with respect to each block's input
  (:func:`input_gradients`),

for pre-norm, post-norm, no residual and no norm, at several depths and seeds,
with GPT-2's initialisation (every matrix N(0, 0.02): :meth:`blockc.GPT.random`)
and with the paper's (Xavier: :func:`initial_model`).
"""
from __future__ import annotations

import math
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt

from ..train import fit as tr
from .._args import as_choice, as_int, as_seed
from .._errors import BlockcValueError
from .._plot import pyplot, save_figure
from ..block.engine import BlockConfig, block_backward
from ..gpt import GPT, GPTConfig
from ..reference.grad import cross_entropy, layernorm_bwd, rmsnorm_bwd
from ._report import fmt, spread, write_section
from .trainability import TASK_VOCAB, markov_task

__all__ = ["VARIANTS", "INITS", "initial_model", "block_config", "input_gradients",
           "layer_profile", "gradients", "profile_depth", "profile_table", "depth_table", "plot_profiles",
           "write_markdown"]

#: variant -> the GPTConfig options it changes from GPT-2's pre-norm block
VARIANTS: Dict[str, Dict[str, Any]] = {
    "pre-norm": {},
    "post-norm": {"placement": "post"},
    "no-residual": {"residual": False},
    "no-norm": {"norm": "none"},
}

#: "gpt2": every matrix N(0, 0.02) (GPT.random); "xavier": the blocks' matrices
#: N(0, 2 / (fan_in + fan_out)) (Glorot and Bengio's variance; Q, K and V each a
#: D x D matrix), the embedding tables N(0, 0.02) as in "gpt2"
INITS = ("gpt2", "xavier")


def initial_model(cfg: GPTConfig, init: str = "gpt2", seed: int = 0) -> GPT:
    """A model at initialisation: GPT-2's or Xavier's.

    Parameters
    ----------
    cfg : GPTConfig
    init : {"gpt2", "xavier"}, optional
        ``"gpt2"`` is :meth:`GPT.random` (every matrix N(0, 0.02)); ``"xavier"``
        draws each block matrix from N(0, 2 / (fan_in + fan_out)), the query, key
        and value parts of ``attn.qkv.weight`` each as a (D, D) matrix, and keeps
        the embedding tables at N(0, 0.02). Biases 0, norm gains 1 in both.
    seed : int >= 0, optional

    Returns
    -------
    GPT

    Raises
    ------
    TypeError
        A non-str ``init`` or a non-integer ``seed``.
    ValueError
        An unknown ``init`` or a negative ``seed``.
    """
    init = as_choice(init, "init", INITS)
    seed = as_seed(seed)
    m = GPT.random(cfg, seed=seed)
    if init == "gpt2":
        return m
    rng = np.random.default_rng([seed, 1])
    sd = m.state_dict()
    new = {}
    for name, a in sd.items():
        if a.ndim != 2 or not name.startswith("blocks."):
            continue
        if name.endswith("attn.qkv.weight"):  # Q, K, V: three (D, D) matrices
            rows = a.shape[0] // 3
            std = math.sqrt(2.0 / (rows + a.shape[1]))
        else:
            std = math.sqrt(2.0 / (a.shape[0] + a.shape[1]))
        new[name] = rng.standard_normal(a.shape, dtype=np.float32) * np.float32(std)
    m.load_state_dict(new, strict=False)
    return m


def block_config(cfg: GPTConfig) -> BlockConfig:
    """The :class:`blockc.BlockConfig` of one of ``cfg``'s blocks (causal).

    Parameters
    ----------
    cfg : GPTConfig
        A model whose blocks the engine computes: learned positions, as many
        K/V heads as query heads, head_dim = width / heads.

    Returns
    -------
    BlockConfig

    Raises
    ------
    ValueError
        Rotary positions, grouped K/V heads or a head_dim other than width / heads.
    """
    if cfg.positions != "learned" or cfg.kv_heads_ != cfg.heads or cfg.head_dim_ * cfg.heads != cfg.width:
        raise BlockcValueError("input_gradients needs learned positions, kv_heads = heads and "
                               f"head_dim = width / heads; got positions={cfg.positions!r}, "
                               f"kv_heads={cfg.kv_heads_}, head_dim={cfg.head_dim_}")
    return BlockConfig(d_model=cfg.width, n_heads=cfg.heads, d_ff=cfg.d_ff_, norm=cfg.norm,
                       placement=cfg.placement, activation=cfg.activation, causal=True,
                       residual=cfg.residual, eps=cfg.eps)


def _norm_fwd(x: np.ndarray, g: np.ndarray, b: Optional[np.ndarray], kind: str, eps: float
              ) -> np.ndarray:
    if kind == "rms":
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps) * g
    return y + b if b is not None else y


def input_gradients(m: GPT, ids: npt.ArrayLike, targets: npt.ArrayLike
                    ) -> Tuple[float, np.ndarray]:
    """The gradient of ``m.loss(ids, targets)`` with respect to every block's input.

    The residual stream entering each block comes from :meth:`GPT.hidden_states`
    (the embeddings for the first); the gradient at the last block's output
    from the final norm, the head and the cross-entropy (in float64, with
    :mod:`blockc.reference.grad`'s pieces); then one :func:`blockc.block_backward`
    per block, from the last to the first, carries it down.

    Parameters
    ----------
    m : GPT
        A float32 model whose blocks :func:`block_config` accepts.
    ids, targets : array_like of int, shape (B, T)
        As :meth:`GPT.loss` (no ignored targets).

    Returns
    -------
    loss : float
        The mean cross-entropy (computed in float64 from the float32 states).
    grads : numpy.ndarray
        (layers + 1, B, T, width) float32: ``grads[l]`` is dL/d(input of block
        l), ``grads[layers]`` dL/d(output of the last block).

    Raises
    ------
    TypeError, ValueError
        As :meth:`GPT.loss`; a model :func:`block_config` refuses; a model whose
        weights are not float32.
    """
    cfg = m.config
    bcfg = block_config(cfg)
    if m.dtype != "float32":
        raise BlockcValueError(f"input_gradients needs a float32 model, got {m.dtype}")
    ids = np.asarray(ids)
    targets = np.asarray(targets)
    if ids.ndim != 2 or targets.shape != ids.shape:
        raise BlockcValueError(f"ids and targets must be (B, T) of one shape, got {ids.shape} "
                               f"and {targets.shape}")
    hs = m.hidden_states(ids)  # (L, B, T, D), validates ids
    if targets.min(initial=0) < 0 or targets.max(initial=0) >= cfg.vocab:
        raise BlockcValueError(f"targets must lie in [0, {cfg.vocab})")
    sd = m.state_dict()
    t = ids.shape[1]
    h0 = (sd["token.weight"][ids] + sd["position.weight"][:t][None]).astype(np.float32)
    top = hs[-1].astype(np.float64)
    has_norm = cfg.placement == "pre" and cfg.norm != "none"
    if has_norm:
        g = sd["norm.weight"].astype(np.float64)
        b = sd["norm.bias"].astype(np.float64) if "norm.bias" in sd else None
        xf = _norm_fwd(top, g, b, cfg.norm, cfg.eps)
    else:
        xf = top
    head = (sd["token.weight"] if cfg.tie_weights else sd["head.weight"]).astype(np.float64)
    loss, dlog = cross_entropy(xf @ head.T, targets)
    dxf = dlog @ head
    if has_norm:
        bwd = layernorm_bwd if cfg.norm == "layer" else rmsnorm_bwd
        dtop = bwd(dxf, top, g, cfg.eps)[0]
    else:
        dtop = dxf
    out = np.empty((cfg.layers + 1,) + h0.shape, np.float32)
    out[cfg.layers] = dtop
    for layer in reversed(range(cfg.layers)):
        x = h0 if layer == 0 else hs[layer - 1]
        pre = f"blocks.{layer}."
        W = {k[len(pre):]: v for k, v in sd.items() if k.startswith(pre)}
        out[layer] = block_backward(x, W, bcfg, out[layer + 1])[0]
    return float(loss), out


def _norm(a: np.ndarray) -> float:
    return float(np.sqrt(np.sum(np.square(a, dtype=np.float64))))


def layer_profile(m: GPT, ids: npt.ArrayLike, targets: npt.ArrayLike) -> Dict[str, Any]:
    """Per-layer gradient norms of ``m`` on one batch.

    Parameters
    ----------
    m : GPT
    ids, targets : array_like of int, shape (B, T)

    Returns
    -------
    dict
        ``loss`` (from :meth:`GPT.grad`); ``block``, ``down`` (lists of layers
        floats: the L2 norm of each block's whole parameter gradient, and of its
        ``down.weight``'s); ``input`` (layers + 1 floats: the norm of
        :func:`input_gradients`' entries, the last at the stack's output).

    Raises
    ------
    TypeError, ValueError
        As :func:`input_gradients`.
    """
    loss, grads = m.grad(ids, targets)
    _, dh = input_gradients(m, ids, targets)
    L = m.config.layers
    block = []
    for layer in range(L):
        pre = f"blocks.{layer}."
        block.append(math.sqrt(math.fsum(_norm(v) ** 2 for k, v in grads.items()
                                         if k.startswith(pre))))
    return {"loss": float(loss), "block": block,
            "down": [_norm(grads[f"blocks.{layer}.down.weight"]) for layer in range(L)],
            "input": [_norm(dh[layer]) for layer in range(L + 1)]}


def gradients(depths: Sequence[int], variants: Sequence[str] = tuple(VARIANTS),
              inits: Sequence[str] = INITS, seeds: int = 5, width: int = 64, batch: int = 16,
              seq: int = 32, report: Callable[[str], None] = print) -> Dict[str, Any]:
    """The experiment: :func:`layer_profile` for every (init, variant, depth, seed).

    Seed s draws the weights (:func:`initial_model`) and the batch (step 0 of
    the Markov text with seed s); the text is the trainability experiment's
    (seed 0).

    Parameters
    ----------
    depths : sequence of int >= 1
    variants : sequence of str, optional
        Keys of :data:`VARIANTS`.
    inits : sequence of str, optional
        Of :data:`INITS`.
    seeds : int >= 1, optional
    width : int >= 4, a multiple of 4 (the 4 heads), optional
    batch, seq : int >= 1, optional
    report : callable, optional
        Called with a line of progress per (init, variant, depth).

    Returns
    -------
    dict
        The settings and ``runs``: one dict per point (init, variant, depth,
        seed and :func:`layer_profile`'s figures).

    Raises
    ------
    TypeError, ValueError
        An unknown variant or init, a size out of range.
    """
    depths = [as_int(d, "depths", 1) for d in depths]
    for v in variants:
        as_choice(v, "variants", tuple(VARIANTS))
    for i in inits:
        as_choice(i, "inits", INITS)
    seeds = as_int(seeds, "seeds", 1)
    width = as_int(width, "width", 4)
    if width % 4:
        raise BlockcValueError(f"width must be a multiple of the 4 heads, got {width}")
    batch, seq = as_int(batch, "batch", 1), as_int(seq, "seq", 1)
    tokens, _ = markov_task(TASK_VOCAB, seed=0)
    runs = []
    for init in inits:
        for name in variants:
            for depth in depths:
                cfg = GPTConfig(vocab=TASK_VOCAB, context=seq, width=width, heads=4,
                                layers=depth, **VARIANTS[name])
                t0 = time.perf_counter()
                for seed in range(seeds):
                    m = initial_model(cfg, init, seed)
                    ids, tg = tr.batch_at(tokens, 0, batch, seq, seed)
                    runs.append({"init": init, "variant": name, "depth": depth, "seed": seed,
                                 **layer_profile(m, ids, tg)})
                last = [r for r in runs[-seeds:]]
                down = spread(r["down"][-1] / r["down"][0] for r in last)
                inp = spread(r["input"][0] / r["input"][-1] for r in last)
                report(f"  {init:<6} {name:<12} {depth:>3} layers: down.weight gradient "
                       f"last/first {down['median']:.3g}, input gradient first/top "
                       f"{inp['median']:.3g} ({time.perf_counter() - t0:.1f} s)")
    return {"depths": depths, "variants": list(variants), "inits": list(inits),
            "seeds": seeds, "width": width, "batch": batch, "seq": seq, "runs": runs}


def _select(res: Dict[str, Any], init: str, variant: str, depth: int) -> List[Dict[str, Any]]:
    return [r for r in res["runs"]
            if r["init"] == init and r["variant"] == variant and r["depth"] == depth]


def _range(values: Sequence[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    bad = len(values) - len(finite)
    if not finite:
        return f"overflow ({bad}/{len(values)})"
    s = spread(finite)
    text = f"{_g(s['median'])} ({_g(s['min'])}-{_g(s['max'])})"
    return text + (f", overflow {bad}/{len(values)}" if bad else "")


def _g(x: float) -> str:
    if x != x or math.isinf(x):
        return fmt(x)
    return f"{x:.3g}"


def profile_depth(res: Dict[str, Any]) -> int:
    """The depth the profile table and plot show by default: 24 when the result has it
    (the issue's and Xiong et al.'s scale), else the deepest."""
    return 24 if 24 in res["depths"] else max(res["depths"])


def profile_table(res: Dict[str, Any], depth: Optional[int] = None) -> List[str]:
    """The Markdown table of the profile at ``depth`` (default: :func:`profile_depth`).

    Each cell is the median over the seeds with (smallest-largest) (a profile
    that overflowed float32 counted apart): the
    ``down.weight`` gradient norm at the first, middle and last layer and the
    ratio last / first; the gradient norm at the first layer's input (the
    embeddings) and at the second's, each over the gradient at the stack's output
    ("top").

    Parameters
    ----------
    res : dict
        :func:`gradients`' result.
    depth : int, optional

    Returns
    -------
    list of str

    Raises
    ------
    ValueError
        A depth the result does not have.
    """
    depth = profile_depth(res) if depth is None else depth
    if depth not in res["depths"]:
        raise BlockcValueError(f"depth {depth} is not among the result's {res['depths']}")
    mid = depth // 2
    second = min(1, depth - 1)
    lines = [f"| init | variant | down.weight grad, layer 1 | layer {mid + 1} | layer {depth} "
             f"| last / first | input grad: layer 1 / top | layer {second + 1} / top |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for init in res["inits"]:
        for v in res["variants"]:
            rs = _select(res, init, v, depth)
            lines.append(f"| {init} | {v} | {_range([r['down'][0] for r in rs])} "
                         f"| {_range([r['down'][mid] for r in rs])} "
                         f"| {_range([r['down'][-1] for r in rs])} "
                         f"| {_range([r['down'][-1] / r['down'][0] for r in rs])} "
                         f"| {_range([r['input'][0] / r['input'][-1] for r in rs])} "
                         f"| {_range([r['input'][second] / r['input'][-1] for r in rs])} |")
    return lines


def depth_table(res: Dict[str, Any]) -> List[str]:
    """The Markdown table of the last block's ``down.weight`` gradient norm against depth
    (median over the seeds), one row per (init, variant), and its ratio from the
    shallowest depth to the deepest next to sqrt(deepest / shallowest), the ratio
    Xiong et al.'s 1 / sqrt(layers) predicts for pre-norm.

    Parameters
    ----------
    res : dict
        :func:`gradients`' result.

    Returns
    -------
    list of str
    """
    ds = res["depths"]
    lines = ["| init | variant | " + " | ".join(f"{d} layers" for d in ds)
             + f" | {ds[0]} / {ds[-1]} layers |",
             "|---|---|" + "---:|" * (len(ds) + 1)]
    for init in res["inits"]:
        for v in res["variants"]:
            med = [spread(x for x in (r["down"][-1] for r in _select(res, init, v, d))
                          if math.isfinite(x))["median"] for d in ds]
            lines.append(f"| {init} | {v} | " + " | ".join(_g(x) for x in med)
                         + f" | {_g(med[0] / med[-1])} |")
    return lines


def plot_profiles(res: Dict[str, Any], path: str, depth: Optional[int] = None,
                  cpu: str = "") -> None:
    """Draw gradient norm against layer index per variant (the shape of Xiong et al.'s
    Figure 3): the ``down.weight`` gradient (top row) and the gradient reaching each
    block's input (bottom row), one column per init; the median over the seeds, the
    band their smallest to largest.

    Parameters
    ----------
    res : dict
        :func:`gradients`' result.
    path : str
        The PNG to write.
    depth : int, optional
        The depth drawn (default: :func:`profile_depth`).
    cpu : str, optional
        Named in the title.

    Raises
    ------
    ValueError
        Without matplotlib, or a depth the result does not have.
    """
    plt = pyplot()
    depth = profile_depth(res) if depth is None else depth
    if depth not in res["depths"]:
        raise BlockcValueError(f"depth {depth} is not among the result's {res['depths']}")
    inits = res["inits"]
    fig, axes = plt.subplots(2, len(inits), figsize=(5.2 * len(inits), 7.2), squeeze=False)
    for col, init in enumerate(inits):
        for row, key in enumerate(("down", "input")):
            ax = axes[row][col]
            for i, v in enumerate(res["variants"]):
                rs = _select(res, init, v, depth)
                a = np.array([r[key] for r in rs], np.float64)
                a[~np.isfinite(a)] = np.nan  # an overflowed profile is left out
                x = np.arange(1, a.shape[1] + 1)
                with np.errstate(invalid="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    med = np.nanmedian(a, axis=0)
                    lo, hi = np.nanmin(a, axis=0), np.nanmax(a, axis=0)
                line, = ax.plot(x, med, lw=1.4, ls=("-", "--", "-.", ":")[i % 4], label=v)
                ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, lw=0)
            ax.set_yscale("log")
            ax.grid(alpha=0.3, which="both")
            ax.set_xlabel("layer" if key == "down" else
                          f"layer whose input it is ({depth + 1}: the stack's output)")
            ax.set_ylabel("|dL/dW| of the FFN output weight" if key == "down"
                          else "|dL/dx| at the layer's input")
            ax.set_title(f"{init} init, {depth} layers")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(f"gradient norms at initialisation, width {res['width']}, "
                 f"{res['seeds']} seeds (median, band: min-max)" + (f"; {cpu}" if cpu else ""),
                 fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def write_markdown(path: str, res: Dict[str, Any], command: str) -> None:
    """Write the result's tables into ``path``'s ``gradients`` section.

    Parameters
    ----------
    path : str
    res : dict
        :func:`gradients`' result.
    command : str
        The command line that produced it, quoted above the tables.

    Raises
    ------
    OSError
        The file cannot be written.
    """
    depth = profile_depth(res)
    body = [f"`{command}` (gradient norms of the mean loss on one batch of "
            f"{res['batch']} x {res['seq']} tokens at initialisation; median over "
            f"{res['seeds']} seeds, (smallest-largest)). At {depth} layers:", ""]
    body += profile_table(res, depth)
    body += ["", "The last block's `down.weight` gradient against depth (median over the seeds):",
             ""]
    body += depth_table(res)
    if len(res["depths"]) > 1:
        d0, d1 = res["depths"][0], res["depths"][-1]
        body += ["", f"(Xiong et al.'s 1/sqrt(layers) for pre-norm predicts {d0} / {d1} = "
                     f"{math.sqrt(d1 / d0):.3g}; for post-norm, 1.)"]
    write_section(path, "gradients", body)
