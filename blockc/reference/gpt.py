"""The chapter-6 GPT forward in plain NumPy: the oracle the C GPT is tested against.

Written from the chapter's equations, not from the C code:

    x   = token[ids] + position[pos]
    x   = x + proj(attention(split(qkv(LN1(x)))))        for every block
    x   = x + down(gelu_tanh(up(LN2(x))))
    out = LN(x) @ head^T    (head = token when tied)

Each block is the block oracle (``blockc.reference.block``) in GPT-2's configuration:
pre-norm LayerNorm, causal attention, GELU-tanh, every bias present.

``cfg`` is anything with ``vocab, context, width, heads, layers, eps, tie_weights``
attributes (a ``blockc.GPTConfig`` works). ``sd`` maps the chapter's state-dict
names to arrays. Computation is in ``dtype`` (float64 by default: a tighter
reference than the float32 under test).
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, List, Mapping

import numpy as np

from . import block
from .._errors import BlockcValueError

__all__ = ["gpt_forward"]


def _block_cfg(cfg: Any) -> SimpleNamespace:
    """The GPT-2 block in the block oracle's terms: pre-norm LayerNorm, causal, GELU-tanh."""
    return SimpleNamespace(n_heads=cfg.heads, norm="layer", placement="pre", activation="gelu_tanh",
                           causal=True, residual=True, eps=cfg.eps)


def gpt_forward(sd: Mapping[str, Any], cfg: Any, ids: Any, return_hidden: bool = False,
                dtype=np.float64) -> Any:
    """ids (B,T) -> logits (B,T,V); with ``return_hidden`` also hidden (L,B,T,D),
    the residual stream after every block."""
    ids = np.asarray(ids)
    b, t = ids.shape
    if t > cfg.context:
        raise BlockcValueError(f"Sequence exceeds the model's context of {cfg.context}")
    p = {k: np.asarray(v, dtype=dtype) for k, v in sd.items()}
    x = p["token.weight"][ids] + p["position.weight"][np.arange(t)][None]
    bcfg = _block_cfg(cfg)
    hidden: List[np.ndarray] = []
    for i in range(cfg.layers):
        prefix = f"blocks.{i}."
        w = {k[len(prefix):]: v for k, v in p.items() if k.startswith(prefix)}
        x = block.block_forward(x, w, bcfg, dtype)
        hidden.append(x)
    head = p["token.weight"] if cfg.tie_weights else p["head.weight"]
    logits = block.layernorm(x, p["norm.weight"], p["norm.bias"], cfg.eps) @ head.T
    if return_hidden:
        return logits, np.stack(hidden) if hidden else np.zeros((0, b, t, cfg.width), dtype)
    return logits
