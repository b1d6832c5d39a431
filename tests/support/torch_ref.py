"""The one PyTorch reference of the chapters' block and GPT, written for blockc's
tests and benches from the chapters' descriptions (chapter 6's module names:
``ln1``, ``attn.qkv``, ``attn.proj``, ``ln2``, ``up``, ``down``, ``gate``;
``token``, ``position``, ``blocks.i``, ``norm``, ``head``), so a state dict
moves between the two unchanged. The parity tests compare blockc with it; the
benches time it as the PyTorch eager peer.

Import it only where torch is installed (the tests ``importorskip("torch")`` first).
"""
from __future__ import annotations

import numpy as np
import torch

nn = torch.nn
F = torch.nn.functional

__all__ = ["attend", "Attention", "Block", "GPT"]


def attend(q, k, v, q_pos0=0, causal=True):
    """Scaled dot-product attention, q (B,H,T,Dh), k and v (B,H,Tk,Dh); query i sits at
    position q_pos0 + i and key j at j; with ``causal`` a query sees keys up to its own."""
    t, tk = q.shape[2], k.shape[2]
    if not causal or (t == 1 and q_pos0 + 1 >= tk):
        return F.scaled_dot_product_attention(q, k, v)
    if q_pos0 == 0 and t == tk:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    seen = torch.arange(tk)[None, :] <= (q_pos0 + torch.arange(t))[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=seen)


class Attention(nn.Module):
    def __init__(self, width, heads, bias=True, causal=True):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(width, 3 * width, bias=bias)
        self.proj = nn.Linear(width, width, bias=bias)

    def forward(self, x, cache=None, layer=0, start=0):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(x).chunk(3, dim=-1))
        if cache is not None:  # (k, v), each (L, B, H, capacity, Dh)
            cache[0][layer][:, :, start:start + t] = k
            cache[1][layer][:, :, start:start + t] = v
            k, v = cache[0][layer][:, :, :start + t], cache[1][layer][:, :, :start + t]
        y = attend(q, k, v, start, self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


def _norm(kind, width, eps, gains):
    if kind == "layer":
        return nn.LayerNorm(width, eps=eps, elementwise_affine=gains)
    if kind == "rms":
        return nn.RMSNorm(width, eps=eps, elementwise_affine=gains)
    return nn.Identity()


class Block(nn.Module):
    """Every variant of :class:`blockc.BlockConfig`: norm layer/rms/none, placement
    pre/post, activation gelu_tanh/gelu/relu/swiglu, causal, residual; with biases on
    every linear (``bias``) and norm gains and shifts (``gains``) or without."""

    def __init__(self, width, heads, d_ff=None, norm="layer", placement="pre",
                 activation="gelu_tanh", causal=True, residual=True, bias=True, gains=True,
                 eps=1e-5):
        super().__init__()
        d_ff = 4 * width if d_ff is None else d_ff
        # registered in blockc's state-dict order
        self.ln1 = _norm(norm, width, eps, gains)
        self.attn = Attention(width, heads, bias, causal)
        self.ln2 = _norm(norm, width, eps, gains)
        self.up = nn.Linear(width, d_ff, bias=bias)
        if activation == "swiglu":
            self.gate = nn.Linear(width, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, width, bias=bias)
        self.placement, self.activation, self.residual = placement, activation, residual

    @classmethod
    def like(cls, cfg, W):
        """The block of ``cfg`` (a blockc.BlockConfig) loaded with weights ``W`` (blockc's
        keys; biases and gains present or absent as in ``W``)."""
        m = cls(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.norm, cfg.placement, cfg.activation,
                cfg.causal, cfg.residual, bias="attn.qkv.bias" in W, gains="ln1.weight" in W,
                eps=cfg.eps)
        m.load_state_dict({k: torch.from_numpy(np.array(v, np.float32)) for k, v in W.items()},
                          strict=True)
        return m.eval()

    def mlp(self, x):
        if self.activation == "swiglu":
            return self.down(F.silu(self.gate(x)) * self.up(x))
        h = self.up(x)
        if self.activation == "relu":
            h = F.relu(h)
        else:
            h = F.gelu(h, approximate="tanh" if self.activation == "gelu_tanh" else "none")
        return self.down(h)

    def forward(self, x, cache=None, layer=0, start=0):
        r = (lambda a, b: a + b) if self.residual else (lambda a, b: b)
        if self.placement == "pre":
            x = r(x, self.attn(self.ln1(x), cache, layer, start))
            return r(x, self.mlp(self.ln2(x)))
        x = self.ln1(r(x, self.attn(x, cache, layer, start)))
        return self.ln2(r(x, self.mlp(x)))


class GPT(nn.Module):
    """Chapter 6's GPT: embeddings, pre-norm GPT-2 blocks, final LayerNorm, head (tied
    or not), with a KV cache for generation."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.token = nn.Embedding(cfg.vocab, cfg.width)
        self.position = nn.Embedding(cfg.context, cfg.width)
        self.blocks = nn.ModuleList(Block(cfg.width, cfg.heads, eps=cfg.eps)
                                    for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.width, eps=cfg.eps)
        self.head = nn.Linear(cfg.width, cfg.vocab, bias=False)
        if cfg.tie_weights:
            self.head.weight = self.token.weight

    @classmethod
    def like(cls, cfg, state_dict):
        """The model of ``cfg`` loaded (strictly) from a blockc state dict (keep_tied=True)."""
        m = cls(cfg)
        m.load_state_dict({k: torch.from_numpy(np.array(v, np.float32))
                           for k, v in state_dict.items()}, strict=True)
        return m.eval()

    def forward(self, ids, cache=None, start=0, last_only=False):
        t = ids.shape[1]
        if start + t > self.cfg.context:
            raise ValueError("Sequence exceeds the model's context")
        x = self.token(ids) + self.position(torch.arange(start, start + t))
        for i, block in enumerate(self.blocks):
            x = block(x, cache, i, start)
        if last_only:
            x = x[:, -1:]
        return self.head(self.norm(x))

    def new_cache(self, batch, capacity):
        c = self.cfg
        shape = (c.layers, batch, c.heads, capacity, c.width // c.heads)
        dt = self.token.weight.dtype
        return torch.zeros(shape, dtype=dt), torch.zeros(shape, dtype=dt)

    @torch.no_grad()
    def generate(self, ids, n):
        """Greedy decoding through the KV cache: the prompt once, then a token a step."""
        ids = torch.as_tensor(ids)
        cache = self.new_cache(ids.shape[0], ids.shape[1] + n - 1)
        out, feed, start = [ids], ids, 0
        for _ in range(n):
            nxt = self(feed, cache, start, last_only=True)[:, -1].argmax(-1, keepdim=True)
            start += feed.shape[1]
            out.append(nxt)
            feed = nxt
        return torch.cat(out, dim=1)

    @torch.no_grad()
    def generate_uncached(self, ids, n):
        """Greedy decoding by recomputing the whole sequence at every step."""
        out = torch.as_tensor(ids)
        for _ in range(n):
            out = torch.cat([out, self(out)[:, -1].argmax(-1, keepdim=True)], dim=1)
        return out
