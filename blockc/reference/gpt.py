"""The chapter-6 GPT forward in plain NumPy: the oracle the C GPT is tested against.

Written from the chapter's equations, not from the C code:

    x   = token[ids] + position[pos]
    x   = x + proj(attention(split(qkv(LN1(x)))))        for every block
    x   = x + down(gelu_tanh(up(LN2(x))))
    out = LN(x) @ head^T    (head = token when tied)

``cfg`` is anything with ``vocab, context, width, heads, layers, eps, tie_weights``
attributes (a ``blockc.GPTConfig`` works). ``sd`` maps the chapter's state-dict
names to arrays. Computation is in ``dtype`` (float64 by default: a tighter
reference than the float32 under test).
"""
from __future__ import annotations

from typing import Any, List, Mapping, Optional, Tuple

import numpy as np

__all__ = ["gpt_forward", "layer_norm", "gelu_tanh", "causal_self_attention"]


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """x (..., D): (x - mean) / sqrt(var + eps) * gamma + beta, var over D (not D-1)."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GPT-2's GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def causal_self_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int,
                          q_pos: np.ndarray, k_pos: np.ndarray) -> np.ndarray:
    """q (B,Tq,D), k and v (B,Tk,D), positions q_pos (Tq,), k_pos (Tk,) -> (B,Tq,D).

    Key j is visible to query i when k_pos[j] <= q_pos[i]; scores are q.k / sqrt(D/heads).
    """
    b, tq, d = q.shape
    tk = k.shape[1]
    dh = d // heads
    qh = q.reshape(b, tq, heads, dh).transpose(0, 2, 1, 3)  # (B,H,Tq,Dh)
    kh = k.reshape(b, tk, heads, dh).transpose(0, 2, 1, 3)
    vh = v.reshape(b, tk, heads, dh).transpose(0, 2, 1, 3)
    scores = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(dh)    # (B,H,Tq,Tk)
    mask = k_pos[None, :] > q_pos[:, None]                 # (Tq,Tk) True = hidden
    scores = np.where(mask, -np.inf, scores)
    scores = scores - scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p = p / p.sum(axis=-1, keepdims=True)
    y = p @ vh                                             # (B,H,Tq,Dh)
    return y.transpose(0, 2, 1, 3).reshape(b, tq, d)


def gpt_forward(sd: Mapping[str, Any], cfg: Any, ids: Any, return_hidden: bool = False,
                dtype=np.float64) -> Any:
    """ids (B,T) -> logits (B,T,V); with ``return_hidden`` also hidden (L,B,T,D),
    the residual stream after every block."""
    ids = np.asarray(ids)
    b, t = ids.shape
    if t > cfg.context:
        raise ValueError(f"Sequence exceeds the model's context of {cfg.context}")
    p = {k: np.asarray(v, dtype=dtype) for k, v in sd.items()}
    pos = np.arange(t)
    x = p["token.weight"][ids] + p["position.weight"][pos][None]
    hidden: List[np.ndarray] = []
    for i in range(cfg.layers):
        w = lambda name: p[f"blocks.{i}.{name}"]  # noqa: E731
        h = layer_norm(x, w("ln1.weight"), w("ln1.bias"), cfg.eps)
        qkv = h @ w("attn.qkv.weight").T + w("attn.qkv.bias")
        q, k, v = np.split(qkv, 3, axis=-1)
        y = causal_self_attention(q, k, v, cfg.heads, pos, pos)
        x = x + (y @ w("attn.proj.weight").T + w("attn.proj.bias"))
        h = layer_norm(x, w("ln2.weight"), w("ln2.bias"), cfg.eps)
        h = gelu_tanh(h @ w("up.weight").T + w("up.bias"))
        x = x + (h @ w("down.weight").T + w("down.bias"))
        hidden.append(x)
    head = p["token.weight"] if cfg.tie_weights else p["head.weight"]
    logits = layer_norm(x, p["norm.weight"], p["norm.bias"], cfg.eps) @ head.T
    if return_hidden:
        return logits, np.stack(hidden) if hidden else np.zeros((0, b, t, cfg.width), dtype)
    return logits
