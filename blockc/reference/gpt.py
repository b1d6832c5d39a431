"""The whole decoder's forward in plain NumPy: the oracle the C GPT is tested against.

Written from the definitions, not from the C code. For GPT-2 (chapter 6):

    x   = token[ids] + position[pos]
    x   = x + proj(attention(split(qkv(LN1(x)))))        for every block
    x   = x + down(gelu_tanh(up(LN2(x))))
    out = LN(x) @ head^T    (head = token when tied)

and every other point of :class:`blockc.GPTConfig`: RMSNorm or no norm, post-norm
placement (no final norm), the SwiGLU MLP ``down(silu(gate(x)) * up(x))``, any
MLP width, rotary positions instead of a table, grouped K/V heads, a head size
other than width / heads, biases per projection, no residual, a mixture of experts
(``n_experts``: a router and SwiGLU experts in place of the MLP), sliding-window
attention (``sliding_window`` W on the ``sliding_layers``: query i sees keys
i-W+1..i), and Gemma 2's soft-capping (``attn_softcap`` c: each scaled score s
becomes c * tanh(s / c) before the mask; ``logit_softcap`` the same on the logits).

Rotary embeddings are Hugging Face's "rotate half" layout: a head's vector x of
Dh entries is read as the pairs (x[i], x[i + Dh/2]), and pair i at position p
turns by the angle p * theta^(-2i/Dh):

    x[i]        <- x[i] cos a - x[i + Dh/2] sin a
    x[i + Dh/2] <- x[i + Dh/2] cos a + x[i] sin a

with the inverse frequency and the angle rounded to float32 as transformers
computes them (the rotation itself in ``dtype``). Grouped K/V heads: query
head h attends with K/V head h // (H / KV), as transformers' ``repeat_kv``
lays them out; the fused q/k/v projection's rows are the H query heads, then
the KV key heads, then the KV value heads, Dh rows each.

``cfg`` is anything with GPTConfig's fields (a ``blockc.GPTConfig`` works;
``kv_heads``, ``head_dim`` and ``d_ff`` may be None). ``sd`` maps blockc's
state-dict names to arrays. Computation is in ``dtype`` (float64 by default: a
tighter reference than the float32 under test).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping

import numpy as np

from . import block, quant
from .._errors import BlockcValueError

__all__ = ["gpt_forward", "rope", "rope_angles", "rope_angles_of"]

_ACT = {"gelu_tanh": block.gelu_tanh, "gelu": block.gelu, "relu": block.relu}


def _get(cfg: Any, name: str, default: Any) -> Any:
    v = getattr(cfg, name, default)
    return default if v is None else v


def rope_angles(pos: np.ndarray, d_head: int, theta: float) -> np.ndarray:
    """(T, Dh/2) angles: float32(pos * float32(theta ** (-2i / Dh)))."""
    i = np.arange(0, d_head, 2, dtype=np.float32)
    inv = (np.float32(1.0) / (np.float32(theta) ** (i / np.float32(d_head)))).astype(np.float32)
    return (np.asarray(pos, np.float32)[:, None] * inv[None, :]).astype(np.float32)


def rope_angles_of(cfg: Any, pos: np.ndarray, length: int):
    """(angles (T, R/2), attention factor) of a sequence of ``length`` positions whose
    positions ``pos`` turn, by the config's rope parameters (the scaled variants'
    frequencies as ``cfg.rope_tables`` gives them, checked against transformers' own in
    the tests; the length-dependent choice made here: longrope's long factors past the
    original length, dynamic NTK's base, in float32 as torch)."""
    f32 = np.float32
    theta = _get(cfg, "rope_theta", 10000.0)
    dh = _get(cfg, "head_dim", cfg.width // cfg.heads)
    rot = _get(cfg, "rotary_dim", dh)
    t = getattr(cfg, "rope_tables", None)
    default = (f32(1.0) / np.power(f32(theta), np.arange(0, rot, 2).astype(f32) / f32(rot)))
    if t is None:
        return (np.asarray(pos, f32)[:, None] * default[None, :]).astype(f32), 1.0
    inv = t.inv if t.inv is not None else default
    if t.original and length > t.original:
        if t.inv_long is not None:
            inv = t.inv_long
        elif t.dynamic:
            r = f32(t.dynamic) * f32(length) / f32(t.original) - f32(t.dynamic - 1.0)
            base = f32(theta) * np.power(r, f32(rot / (rot - 2)))
            inv = (f32(1.0) / np.power(f32(base), np.arange(0, rot, 2).astype(f32) / f32(rot)))
    ang = (np.asarray(pos, f32)[:, None] * inv.astype(f32)[None, :]).astype(f32)
    return ang, t.attn


def rope(x: np.ndarray, angles: np.ndarray, attn: float = 1.0) -> np.ndarray:
    """x (..., T, Dh) rotated pairwise (i, i + R/2) within its first R dimensions by
    angles (T, R/2), cos and sin multiplied by ``attn`` in float32; the rest as it is."""
    half = angles.shape[-1]
    c = np.cos(angles.astype(np.float64))
    s = np.sin(angles.astype(np.float64))
    if attn != 1.0:  # transformers' cos * attention_scaling, in float32
        c = c.astype(np.float32) * np.float32(attn)
        s = s.astype(np.float32) * np.float32(attn)
    c, s = c.astype(x.dtype), s.astype(x.dtype)
    a, b, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
    return np.concatenate([a * c - b * s, b * c + a * s, rest], axis=-1)


def _norm(x, p: Dict[str, np.ndarray], name: str, kind: str, eps: float):
    if kind == "rms":
        return block.rmsnorm(x, p[name + ".weight"], eps)
    if kind == "layer":
        return block.layernorm(x, p[name + ".weight"], p[name + ".bias"], eps)
    return x


#: what a quantised KV cache keeps each row of a head's keys and values as
_CACHE_QUANT = {"q8_0": quant.q8_0, "q4_0": quant.q4_0}


def _cache_round(a: np.ndarray, kv_dtype: Any) -> np.ndarray:
    """a as a KV cache of kv_dtype keeps it: saturated at that type's largest
    finite value (NaN stays NaN), rounded to nearest, read back in a's type; or
    ("q8_0", "q4_0") each row of a's last axis (one position of one head) quantised in
    blocks of 32 by :mod:`blockc.reference.quant`'s rule, as float32, read back."""
    if kv_dtype is None:
        return a
    if isinstance(kv_dtype, str) and kv_dtype in _CACHE_QUANT:
        rows = np.asarray(a, np.float32).reshape(-1, a.shape[-1])
        return _CACHE_QUANT[kv_dtype](rows).reshape(a.shape).astype(a.dtype)
    top = np.finfo(kv_dtype).max
    return np.clip(a, -top, top).astype(kv_dtype).astype(a.dtype)


def _window(cfg: Any, layer: int) -> Any:
    """Layer ``layer``'s sliding window W (None: every earlier position): the config's
    ``sliding_window`` on the layers ``sliding_layers`` flags (None: every layer)."""
    w = getattr(cfg, "sliding_window", None)
    flags = getattr(cfg, "sliding_layers", None)
    return None if w is None or (flags is not None and not flags[layer]) else int(w)


def _attention(x, p, pre: str, cfg: Any, angles, kv_dtype: Any = None, window: Any = None):
    *lead, t, _ = x.shape
    h, kv = cfg.heads, _get(cfg, "kv_heads", cfg.heads)
    dh = _get(cfg, "head_dim", cfg.width // cfg.heads)
    qkv = block.linear(x, p[pre + "attn.qkv.weight"], p.get(pre + "attn.qkv.bias"))
    q, k, v = np.split(qkv, [h * dh, (h + kv) * dh], axis=-1)
    q = np.swapaxes(q.reshape(*lead, t, h, dh), -2, -3)    # (..., H, T, Dh)
    k = np.swapaxes(k.reshape(*lead, t, kv, dh), -2, -3)   # (..., KV, T, Dh)
    v = np.swapaxes(v.reshape(*lead, t, kv, dh), -2, -3)
    qk_norm = _get(cfg, "qk_norm", "none")
    if qk_norm == "head":
        q = block.rmsnorm(q, p[pre + "attn.q_norm.weight"], cfg.eps)
        k = block.rmsnorm(k, p[pre + "attn.k_norm.weight"], cfg.eps)
    elif qk_norm == "all":  # over the whole projection: back to (..., T, H Dh) and out
        q = np.swapaxes(block.rmsnorm(np.swapaxes(q, -2, -3).reshape(*lead, t, h * dh),
                                      p[pre + "attn.q_norm.weight"], cfg.eps)
                        .reshape(*lead, t, h, dh), -2, -3)
        k = np.swapaxes(block.rmsnorm(np.swapaxes(k, -2, -3).reshape(*lead, t, kv * dh),
                                      p[pre + "attn.k_norm.weight"], cfg.eps)
                        .reshape(*lead, t, kv, dh), -2, -3)
    if angles is not None:
        q, k = rope(q, *angles), rope(k, *angles)
    scale = _get(cfg, "attn_scale", None)
    if scale is not None:
        q = q * (scale * np.sqrt(dh))
    k, v = _cache_round(k, kv_dtype), _cache_round(v, kv_dtype)
    k, v = np.repeat(k, h // kv, axis=-3), np.repeat(v, h // kv, axis=-3)
    y = np.swapaxes(block.attention(q, k, v, causal=True, window=window,
                                    cap=_get(cfg, "attn_softcap", None)), -2, -3)
    y = y.reshape(*lead, t, h * dh)
    return block.linear(y, p[pre + "attn.proj.weight"], p.get(pre + "attn.proj.bias"))


def _experts(x, p, pre: str, cfg: Any):
    """A mixture of experts: each token's router softmax over all E (float32, as
    transformers), its K most probable experts (the lower index first on a tie), each
    expert's SwiGLU output weighted by its probability (renormalised over the K with
    ``router_norm``), summed."""
    e, k = cfg.n_experts, cfg.experts_used
    logits = block.linear(x, p[pre + "router.weight"]).astype(np.float32)
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    prob = z / z.sum(axis=-1, keepdims=True)
    order = np.argsort(-prob, axis=-1, kind="stable")[..., :k]  # (..., K)
    w = np.take_along_axis(prob, order, axis=-1).astype(np.float64)
    if _get(cfg, "router_norm", False):
        w = w / w.sum(axis=-1, keepdims=True)
    out = np.zeros_like(x)
    for i in range(e):
        q = pre + f"experts.{i}."
        y = block.linear(block.swiglu(block.linear(x, p[q + "gate.weight"]),
                                      block.linear(x, p[q + "up.weight"])), p[q + "down.weight"])
        out = out + (w * (order == i)).sum(axis=-1, keepdims=True).astype(x.dtype) * y
    return out


def _mlp(x, p, pre: str, cfg: Any):
    if _get(cfg, "n_experts", 0):
        return _experts(x, p, pre, cfg)
    up = block.linear(x, p[pre + "up.weight"], p.get(pre + "up.bias"))
    act = _get(cfg, "activation", "gelu_tanh")
    if act == "swiglu":
        hid = block.swiglu(block.linear(x, p[pre + "gate.weight"], p.get(pre + "gate.bias")), up)
    elif act == "geglu":
        hid = block.gelu_tanh(block.linear(x, p[pre + "gate.weight"], p.get(pre + "gate.bias"))) * up
    else:
        hid = _ACT[act](up)
    return block.linear(hid, p[pre + "down.weight"], p.get(pre + "down.bias"))


def gpt_forward(sd: Mapping[str, Any], cfg: Any, ids: Any, return_hidden: bool = False,
                dtype=np.float64, kv_dtype: Any = None) -> Any:
    """ids (B,T) -> logits (B,T,V); with ``return_hidden`` also hidden (L,B,T,D),
    the residual stream after every block. kv_dtype (e.g. np.float16, or "q8_0" or
    "q4_0"): attention reads every key and value as a KV cache of that type keeps it."""
    ids = np.asarray(ids)
    b, t = ids.shape
    if t > cfg.context:
        raise BlockcValueError(f"Sequence exceeds the model's context of {cfg.context}")
    p = {k: np.asarray(v, dtype=dtype) for k, v in sd.items()}
    norm, place = _get(cfg, "norm", "layer"), _get(cfg, "placement", "pre")
    eps, res = cfg.eps, 1 if _get(cfg, "residual", True) else 0
    x = p["token.weight"][ids]
    angles = None
    if _get(cfg, "positions", "learned") == "rope":
        angles = rope_angles_of(cfg, np.arange(t), t)
    else:
        x = x + p["position.weight"][np.arange(t)][None]
    x = x * _get(cfg, "embed_scale", 1.0)
    rs = _get(cfg, "residual_scale", 1.0)
    nope = set(_get(cfg, "nope_layers", ()))
    local = set(_get(cfg, "local_layers", ()))
    local_angles = None
    if local and angles is not None:  # plain rotary of the local base over the whole head
        dh = _get(cfg, "head_dim", cfg.width // cfg.heads)
        local_angles = (rope_angles(np.arange(t), dh, cfg.rope_local_theta), 1.0)
    hidden: List[np.ndarray] = []
    for i in range(cfg.layers):
        pre = f"blocks.{i}."
        win = _window(cfg, i)
        ang = None if i in nope else local_angles if i in local else angles
        if place == "sandwich":
            a = _attention(_norm(x, p, pre + "ln1", norm, eps), p, pre, cfg, ang, kv_dtype, win)
            x = res * x + rs * _norm(a, p, pre + "ln1_post", norm, eps)
            m = _mlp(_norm(x, p, pre + "ln2", norm, eps), p, pre, cfg)
            x = res * x + rs * _norm(m, p, pre + "ln2_post", norm, eps)
        elif place == "output":
            a = _attention(x, p, pre, cfg, ang, kv_dtype, win)
            x = res * x + rs * _norm(a, p, pre + "ln1", norm, eps)
            x = res * x + rs * _norm(_mlp(x, p, pre, cfg), p, pre + "ln2", norm, eps)
        elif place == "pre":
            x = res * x + rs * _attention(_norm(x, p, pre + "ln1", norm, eps), p, pre, cfg, ang,
                                           kv_dtype, win)
            x = res * x + rs * _mlp(_norm(x, p, pre + "ln2", norm, eps), p, pre, cfg)
        else:
            x = _norm(res * x + _attention(x, p, pre, cfg, ang, kv_dtype, win), p, pre + "ln1",
                      norm, eps)
            x = _norm(res * x + _mlp(x, p, pre, cfg), p, pre + "ln2", norm, eps)
        hidden.append(x)
    if place != "post":
        x = _norm(x, p, "norm", norm, eps)
    head = p["token.weight"] if cfg.tie_weights else p["head.weight"]
    logits = block.softcap(x @ head.T / _get(cfg, "logit_scale", 1.0),
                           _get(cfg, "logit_softcap", None))
    if return_hidden:
        return logits, np.stack(hidden) if hidden else np.zeros((0, b, t, cfg.width), dtype)
    return logits
