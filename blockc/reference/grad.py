"""The NumPy oracle of the backward: gradients written from the forward's
equations by the chain rule (no C, no autograd), in float64 by default.

The pieces (each returns the input's gradient and the parameters'), the block
(:func:`block_backward`, every BlockConfig option) and the whole model
(:func:`gpt_grad`, every GPTConfig option: the mean cross-entropy of the next
token and the gradient of every state-dict entry, a tied head's added into
``token.weight``). The C backward is tested against these; these are tested
against finite differences of the forward oracles.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Tuple

import numpy as np

from . import block, gpt as gpt_ref

__all__ = ["linear_bwd", "rmsnorm_bwd", "layernorm_bwd", "act_bwd", "swiglu_bwd",
           "attention_bwd", "block_backward", "gpt_grad", "cross_entropy"]


def linear_bwd(dy, x, w):
    """y = x w^T + b: (dx, dw, db) given dy (..., OC), x (..., C), w (OC, C)."""
    dx = dy @ w
    x2, d2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
    return dx, d2.T @ x2, d2.sum(axis=0)


def rmsnorm_bwd(dy, x, g, eps):
    """y = x r g, r = 1 / sqrt(mean(x^2) + eps): (dx, dg)."""
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    xhat = x * r
    u = dy * g if g is not None else dy
    dx = r * (u - xhat * np.mean(u * xhat, axis=-1, keepdims=True))
    dg = (dy * xhat).reshape(-1, x.shape[-1]).sum(axis=0) if g is not None else None
    return dx, dg


def layernorm_bwd(dy, x, g, eps):
    """y = (x - mean) r g + b, r = 1 / sqrt(var + eps): (dx, dg, db)."""
    mu = np.mean(x, axis=-1, keepdims=True)
    r = 1.0 / np.sqrt(np.mean((x - mu) ** 2, axis=-1, keepdims=True) + eps)
    xhat = (x - mu) * r
    u = dy * g if g is not None else dy
    dx = r * (u - np.mean(u, axis=-1, keepdims=True)
              - xhat * np.mean(u * xhat, axis=-1, keepdims=True))
    flat = lambda a: a.reshape(-1, x.shape[-1]).sum(axis=0)  # noqa: E731
    return dx, (flat(dy * xhat) if g is not None else None), flat(dy)


_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_erf = np.vectorize(math.erf, otypes=[np.float64])


def act_bwd(dy, x, kind):
    """dy * act'(x) for gelu_tanh, gelu (exact) or relu."""
    if kind == "gelu_tanh":
        u = _SQRT_2_PI * (x + 0.044715 * x ** 3)
        t = np.tanh(u)
        du = _SQRT_2_PI * (1 + 3 * 0.044715 * x ** 2)
        return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du)
    if kind == "gelu":
        cdf = 0.5 * (1 + _erf(x / math.sqrt(2.0)))
        pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        return dy * (cdf + x * pdf)
    if kind == "relu":
        return dy * (x > 0)
    raise ValueError(kind)


def swiglu_bwd(dy, gate, up):
    """y = silu(gate) up: (dgate, dup)."""
    s = 1.0 / (1.0 + np.exp(-gate))
    return dy * up * s * (1 + gate * (1 - s)), dy * gate * s


def attention_bwd(dy, q, k, v, causal):
    """y = softmax(q k^T / sqrt(Dh)) v over the last two axes: (dq, dk, dv)."""
    dh = q.shape[-1]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(dh)
    if causal:
        tq, tk = s.shape[-2:]
        s = np.where(np.arange(tk)[None, :] <= np.arange(tq)[:, None], s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)
    dv = np.swapaxes(p, -1, -2) @ dy
    dp = dy @ np.swapaxes(v, -1, -2)
    ds = p * (dp - np.sum(dp * p, axis=-1, keepdims=True))
    dq = ds @ k / math.sqrt(dh)
    dk = np.swapaxes(ds, -1, -2) @ q / math.sqrt(dh)
    return dq, dk, dv


# ---- one layer, from its forward ---------------------------------------------------

def _norm_fwd(x, p, name, kind, eps):
    if kind == "rms":
        return block.rmsnorm(x, p.get(name + ".weight"), eps)
    if kind == "layer":
        return block.layernorm(x, p.get(name + ".weight"), p.get(name + ".bias"), eps)
    return x


def _norm_bwd(dy, x, p, name, kind, eps, grads):
    if kind == "rms":
        dx, dg = rmsnorm_bwd(dy, x, p.get(name + ".weight"), eps)
        if dg is not None:
            grads[name + ".weight"] = grads.get(name + ".weight", 0) + dg
        return dx
    if kind == "layer":
        dx, dg, db = layernorm_bwd(dy, x, p.get(name + ".weight"), eps)
        if dg is not None:
            grads[name + ".weight"] = grads.get(name + ".weight", 0) + dg
        if name + ".bias" in p:
            grads[name + ".bias"] = grads.get(name + ".bias", 0) + db
        return dx
    return dy


def _lin_bwd(dy, x, p, name, grads):
    dx, dw, db = linear_bwd(dy, x, p[name + ".weight"])
    grads[name + ".weight"] = grads.get(name + ".weight", 0) + dw
    if name + ".bias" in p:
        grads[name + ".bias"] = grads.get(name + ".bias", 0) + db
    return dx


class _Layer:
    """One layer's forward (with everything its backward needs) and backward, for
    a config with heads, kv_heads, head_dim, norm, placement, activation, causal,
    residual, eps; angles: the rotary angles (T, Dh/2) or None."""

    def __init__(self, cfg, heads, kv, dh, causal, angles):
        self.cfg, self.h, self.kv, self.dh, self.causal, self.angles = cfg, heads, kv, dh, causal, angles

    def _attn_fwd(self, a, p, c):
        *lead, t, _ = a.shape
        h, kv, dh = self.h, self.kv, self.dh
        qkv = block.linear(a, p["attn.qkv.weight"], p.get("attn.qkv.bias"))
        q, k, v = np.split(qkv, [h * dh, (h + kv) * dh], axis=-1)
        q = np.swapaxes(q.reshape(*lead, t, h, dh), -2, -3)
        k = np.swapaxes(k.reshape(*lead, t, kv, dh), -2, -3)
        v = np.swapaxes(v.reshape(*lead, t, kv, dh), -2, -3)
        if self.angles is not None:
            q, k = gpt_ref.rope(q, self.angles), gpt_ref.rope(k, self.angles)
        kr, vr = np.repeat(k, h // kv, axis=-3), np.repeat(v, h // kv, axis=-3)
        o = block.attention(q, kr, vr, self.causal)
        att = np.swapaxes(o, -2, -3).reshape(*lead, t, h * dh)
        c.update(a=a, q=q, kr=kr, vr=vr, att=att)
        return block.linear(att, p["attn.proj.weight"], p.get("attn.proj.bias"))

    def _attn_bwd(self, dout, p, c, grads):
        *lead, t, _ = dout.shape
        h, kv, dh = self.h, self.kv, self.dh
        datt = _lin_bwd(dout, c["att"], p, "attn.proj", grads)
        do = np.swapaxes(datt.reshape(*lead, t, h, dh), -2, -3)
        dq, dkr, dvr = attention_bwd(do, c["q"], c["kr"], c["vr"], self.causal)
        g = h // kv
        dk = dkr.reshape(*dkr.shape[:-3], kv, g, t, dh).sum(axis=-3)
        dv = dvr.reshape(*dvr.shape[:-3], kv, g, t, dh).sum(axis=-3)
        if self.angles is not None:  # the rotation's transpose: by -angle
            dq, dk = gpt_ref.rope(dq, -self.angles), gpt_ref.rope(dk, -self.angles)
        dqkv = np.concatenate([np.swapaxes(a, -2, -3).reshape(*lead, t, -1) for a in (dq, dk, dv)],
                              axis=-1)
        return _lin_bwd(dqkv, c["a"], p, "attn.qkv", grads)

    def _ffn_fwd(self, a, p, c):
        up = block.linear(a, p["up.weight"], p.get("up.bias"))
        act = self.cfg.activation
        if act == "swiglu":
            gate = block.linear(a, p["gate.weight"], p.get("gate.bias"))
            hid = block.swiglu(gate, up)
            c["gate"] = gate
        else:
            hid = {"gelu_tanh": block.gelu_tanh, "gelu": block.gelu, "relu": block.relu}[act](up)
        c.update(fa=a, up=up, hid=hid)
        return block.linear(hid, p["down.weight"], p.get("down.bias"))

    def _ffn_bwd(self, dout, p, c, grads):
        dhid = _lin_bwd(dout, c["hid"], p, "down", grads)
        if self.cfg.activation == "swiglu":
            dgate, dup = swiglu_bwd(dhid, c["gate"], c["up"])
            da = _lin_bwd(dgate, c["fa"], p, "gate", grads)
        else:
            dup, da = act_bwd(dhid, c["up"], self.cfg.activation), 0
        return da + _lin_bwd(dup, c["fa"], p, "up", grads)

    def forward(self, x, p):
        cfg, c = self.cfg, {"x": x}
        r = 1.0 if cfg.residual else 0.0
        if cfg.placement == "pre":
            a1 = _norm_fwd(x, p, "ln1", cfg.norm, cfg.eps)
            x1 = r * x + self._attn_fwd(a1, p, c)
            a2 = _norm_fwd(x1, p, "ln2", cfg.norm, cfg.eps)
            y = r * x1 + self._ffn_fwd(a2, p, c)
            c.update(x1=x1)
        else:
            s1 = r * x + self._attn_fwd(x, p, c)
            x1 = _norm_fwd(s1, p, "ln1", cfg.norm, cfg.eps)
            s2 = r * x1 + self._ffn_fwd(x1, p, c)
            y = _norm_fwd(s2, p, "ln2", cfg.norm, cfg.eps)
            c.update(s1=s1, s2=s2)
        return y, c

    def backward(self, dy, p, c, grads):
        cfg = self.cfg
        r = 1.0 if cfg.residual else 0.0
        if cfg.placement == "pre":
            dx1 = r * dy + _norm_bwd(self._ffn_bwd(dy, p, c, grads), c["x1"], p, "ln2", cfg.norm,
                                     cfg.eps, grads)
            return r * dx1 + _norm_bwd(self._attn_bwd(dx1, p, c, grads), c["x"], p, "ln1",
                                       cfg.norm, cfg.eps, grads)
        ds2 = _norm_bwd(dy, c["s2"], p, "ln2", cfg.norm, cfg.eps, grads)
        dx1 = r * ds2 + self._ffn_bwd(ds2, p, c, grads)
        ds1 = _norm_bwd(dx1, c["s1"], p, "ln1", cfg.norm, cfg.eps, grads)
        return r * ds1 + self._attn_bwd(ds1, p, c, grads)


def block_backward(x, W: Mapping[str, Any], cfg, dy, dtype=np.float64
                   ) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    """The gradients of :func:`blockc.reference.block.block_forward`: (dx, dW)."""
    x = np.asarray(x, dtype)
    p = {k: np.asarray(v, dtype) for k, v in W.items()}
    layer = _Layer(cfg, cfg.n_heads, cfg.n_heads, cfg.d_model // cfg.n_heads, cfg.causal, None)
    _, c = layer.forward(x, p)
    grads: Dict[str, np.ndarray] = {}
    dx = layer.backward(np.asarray(dy, dtype), p, c, grads)
    return dx, {k: np.asarray(grads.get(k, np.zeros_like(v)), dtype) for k, v in p.items()}


def cross_entropy(logits, targets, ignore_index=-100):
    """(mean loss, dlogits) over the targets that are not ignore_index."""
    z = logits - logits.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=-1, keepdims=True))
    logp = z - lse
    keep = targets != ignore_index
    n = int(keep.sum())
    safe = np.where(keep, targets, 0)
    nll = -np.take_along_axis(logp, safe[..., None], axis=-1)[..., 0]
    loss = float(nll[keep].sum() / n) if n else float("nan")
    d = np.exp(logp)
    np.put_along_axis(d, safe[..., None], np.take_along_axis(d, safe[..., None], -1) - 1, -1)
    d = np.where(keep[..., None], d, 0.0) / max(n, 1)
    return loss, d


def gpt_grad(sd: Mapping[str, Any], cfg: Any, ids, targets, ignore_index: int = -100,
             dtype=np.float64) -> Tuple[float, Dict[str, np.ndarray]]:
    """The mean next-token cross-entropy of :func:`blockc.reference.gpt_forward` and
    the gradient of every state-dict entry (keep_tied=False names)."""
    ids = np.asarray(ids)
    b, t = ids.shape
    p = {k: np.asarray(v, dtype) for k, v in sd.items()}
    g = lambda name, default=None: getattr(cfg, name, default) if getattr(cfg, name, default) is not None else default  # noqa: E731
    heads, kv = cfg.heads, g("kv_heads", cfg.heads)
    dh = g("head_dim", cfg.width // cfg.heads)
    norm, place = g("norm", "layer"), g("placement", "pre")
    angles = None
    x = p["token.weight"][ids]
    if g("positions", "learned") == "rope":
        angles = gpt_ref.rope_angles(np.arange(t), dh, g("rope_theta", 10000.0)).astype(dtype)
    else:
        x = x + p["position.weight"][np.arange(t)][None]
    lcfg = type("C", (), dict(norm=norm, placement=place, activation=g("activation", "gelu_tanh"),
                              residual=g("residual", True), eps=cfg.eps))
    layer = _Layer(lcfg, heads, kv, dh, True, angles)
    caches = []
    for i in range(cfg.layers):
        pre = f"blocks.{i}."
        pl = {k[len(pre):]: v for k, v in p.items() if k.startswith(pre)}
        x, c = layer.forward(x, pl)
        caches.append((pl, c))
    xl = x
    has_norm = place == "pre" and norm != "none"
    xf = _norm_fwd(xl, {"n.weight": p.get("norm.weight"), "n.bias": p.get("norm.bias")}, "n",
                   norm, cfg.eps) if has_norm else xl
    head = p["token.weight"] if cfg.tie_weights else p["head.weight"]
    logits = xf @ head.T
    loss, dlog = cross_entropy(logits, np.asarray(targets), ignore_index)
    grads: Dict[str, Any] = {k: np.zeros_like(v) for k, v in p.items()}
    dxf = dlog @ head
    dhead = dlog.reshape(-1, logits.shape[-1]).T @ xf.reshape(-1, xf.shape[-1])
    grads["token.weight" if cfg.tie_weights else "head.weight"] += dhead
    if has_norm:
        nb: Dict[str, Any] = {}
        dx = _norm_bwd(dxf, xl, {"n.weight": p.get("norm.weight"), **(
            {"n.bias": p["norm.bias"]} if "norm.bias" in p else {})}, "n", norm, cfg.eps, nb)
        grads["norm.weight"] += nb["n.weight"]
        if "norm.bias" in p:
            grads["norm.bias"] += nb["n.bias"]
    else:
        dx = dxf
    for i in reversed(range(cfg.layers)):
        pl, c = caches[i]
        lg: Dict[str, Any] = {}
        dx = layer.backward(dx, pl, c, lg)
        for k, v in lg.items():
            grads[f"blocks.{i}.{k}"] += v
    np.add.at(grads["token.weight"], ids.reshape(-1), dx.reshape(-1, dx.shape[-1]))
    if "position.weight" in p:
        grads["position.weight"][:t] += dx.sum(axis=0)
    return loss, grads
