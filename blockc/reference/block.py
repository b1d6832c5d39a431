"""The NumPy oracle of the general transformer block (no C).

Straight, vectorised NumPy in float64 by default (``dtype=np.float32`` to
compute in float32): the pieces, the block with every option the dynamic
engine has, the stack, and the chapter-24 / GPT-2 initialisations drawn with
the pure-Python generators. The C engine is tested against this.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping

import numpy as np

from ..book.rng import CRand

__all__ = [
    "linear", "rmsnorm", "layernorm", "attention", "softcap", "gelu_tanh", "gelu", "relu", "silu",
    "swiglu", "block_forward", "stack_forward", "init_blocks", "avg_norm",
]


def linear(x, w, b=None):
    """x (..., in) @ w (out, in).T + b (out,)."""
    y = x @ w.T
    return y if b is None else y + b


def rmsnorm(x, g=None, eps=1e-5):
    """x / sqrt(mean(x^2) + eps) * g over the last axis.

    The mean square is taken in float64 (as C does), so that rows beyond 1.8e19,
    whose squares overflow float32, normalise too."""
    x64 = x.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # eps 0 on a zero row: NaN, as C
        y = (x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + float(eps))).astype(x.dtype)
    return y if g is None else y * g


def layernorm(x, g=None, b=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * g + b over the last axis, var over D."""
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):  # eps 0 on a constant row: NaN, as C
        y = (x - mu) / np.sqrt(var + x.dtype.type(eps))
    if g is not None:
        y = y * g
    return y if b is None else y + b


def softcap(x, cap):
    """Soft-capping (Gemma 2): cap * tanh(x / cap); cap None: x as it is."""
    if cap is None:
        return x
    c = x.dtype.type(cap)
    return c * np.tanh(x / c)


def attention(q, k, v, causal=False, window=None, cap=None):
    """softmax(q k^T / sqrt(Dh)) v; q (..., Tq, Dh), k, v (..., Tk, Dh).
    causal: query i sees keys 0..i; window W (with causal): keys i-W+1..i only;
    cap: the scores soft-capped (:func:`softcap`) before the mask."""
    dh = q.shape[-1]
    s = softcap(q @ np.swapaxes(k, -1, -2) / q.dtype.type(math.sqrt(dh)), cap)
    if causal:
        tq, tk = s.shape[-2:]
        j, i = np.arange(tk)[None, :], np.arange(tq)[:, None]
        seen = j <= i
        if window is not None:
            seen = seen & (j > i - window)
        s = np.where(seen, s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(axis=-1, keepdims=True)
    return p @ v


def gelu_tanh(x):
    c = x.dtype.type(math.sqrt(2.0 / math.pi))
    return 0.5 * x * (1 + np.tanh(c * (x + x.dtype.type(0.044715) * x ** 3)))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    """Exact GELU, 0.5 x (1 + erf(x / sqrt 2)) (erf through math.erf)."""
    return (0.5 * x * (1 + _erf(x / math.sqrt(2.0)))).astype(x.dtype)


def relu(x):
    return np.maximum(x, 0)


def silu(x):
    with np.errstate(over="ignore"):  # exp(-x) = inf for very negative x: silu -> -0
        return x / (1 + np.exp(-x))


def swiglu(gate, up):
    return silu(gate) * up


_ACT = {"gelu_tanh": gelu_tanh, "gelu": gelu, "relu": relu}


def _norm(x, W, i, cfg):
    g, b = W.get(f"ln{i}.weight"), W.get(f"ln{i}.bias")
    if cfg.norm == "rms":
        return rmsnorm(x, g, cfg.eps)
    if cfg.norm == "layer":
        return layernorm(x, g, b, cfg.eps)
    return x


def _attn(x, W, cfg):
    *lead, t, d = x.shape
    h, dh = cfg.n_heads, d // cfg.n_heads
    qkv = linear(x, W["attn.qkv.weight"], W.get("attn.qkv.bias"))
    q, k, v = (np.swapaxes(a.reshape(*lead, t, h, dh), -2, -3) for a in np.split(qkv, 3, axis=-1))
    y = np.swapaxes(attention(q, k, v, cfg.causal), -2, -3).reshape(*lead, t, d)
    return linear(y, W["attn.proj.weight"], W.get("attn.proj.bias"))


def _ffn(x, W, cfg):
    up = linear(x, W["up.weight"], W.get("up.bias"))
    if cfg.activation == "swiglu":
        hid = swiglu(linear(x, W["gate.weight"], W.get("gate.bias")), up)
    else:
        hid = _ACT[cfg.activation](up)
    return linear(hid, W["down.weight"], W.get("down.bias"))


def block_forward(x, W: Mapping[str, Any], cfg, dtype=np.float64):
    """One block; x (..., T, D). cfg: anything with the BlockConfig fields."""
    x = np.asarray(x, dtype=dtype)
    W = {k: np.asarray(v, dtype=dtype) for k, v in W.items()}
    r = 1 if cfg.residual else 0
    if cfg.placement == "pre":
        x = r * x + _attn(_norm(x, W, 1, cfg), W, cfg)
        x = r * x + _ffn(_norm(x, W, 2, cfg), W, cfg)
    else:
        x = _norm(r * x + _attn(x, W, cfg), W, 1, cfg)
        x = _norm(r * x + _ffn(x, W, cfg), W, 2, cfg)
    return x.astype(dtype)


def stack_forward(x, Ws, cfg, dtype=np.float64) -> List[np.ndarray]:
    """The input and the state after every block."""
    xs = [np.asarray(x, dtype=dtype)]
    for W in Ws:
        xs.append(block_forward(xs[-1], W, cfg, dtype))
    return xs


def init_blocks(cfg, n: int, seed: int = 42, rand: str = "msvc") -> List[Dict[str, np.ndarray]]:
    """The chapter-24 draw with the pure-Python generator: for each block in
    turn, (randf()*2-1)*0.1 for W_Q, W_K, W_V (each (H, Dh, D), i.e. (D, D)),
    W_O (D, D), up (F, D), down (D, F), then gate (F, D) for swiglu; no biases,
    no gains."""
    g = CRand(seed, rand)
    d, f = cfg.d_model, cfg.d_ff
    out = []
    for _ in range(n):
        q, k, v, o = (g.uniform(d * d, 0.1).reshape(d, d) for _ in range(4))
        W = {"attn.qkv.weight": np.concatenate([q, k, v]), "attn.proj.weight": o,
             "up.weight": g.uniform(f * d, 0.1).reshape(f, d),
             "down.weight": g.uniform(d * f, 0.1).reshape(d, f)}
        if cfg.activation == "swiglu":
            W["gate.weight"] = g.uniform(f * d, 0.1).reshape(f, d)
        out.append(W)
    return out


def avg_norm(x) -> float:
    """129_Stack's figure: the mean over positions of each row's L2 norm,
    computed the listing's way in float32 (row sums of squares accumulated
    in order, sqrtf, the norms summed in order, divided by the count)."""
    x = np.asarray(x, dtype=np.float32)
    rows = x.reshape(-1, x.shape[-1])
    total = np.float32(0)
    for row in rows:
        s = np.float32(0)
        for v in row:
            s = np.float32(s + v * v)
        total = np.float32(total + np.sqrt(s))
    return float(total / np.float32(len(rows)))
