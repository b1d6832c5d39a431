"""The NumPy oracle of book mode (no C): chapter 24's listings in float32 NumPy.

Same generators (:class:`blockc.rng.CRand`), same initialisation order and the same
computations as :mod:`blockc.book`, with the same function names and shapes, so the
two can be swapped. Every sum runs in index order with a float32 rounding per
product and per addition, as the listings' loops do (RMSNorm sums the float32
squares in float64, as the listing does); only ``exp`` and ``tanh`` come from
NumPy rather than the C math library, so results agree with the C library to
float32 tolerance (usually bit for bit).
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np

from ..book.common import REAL_MODELS, book_array, check_keys, real_params_rows
from ..book.rng import CRand
from .._errors import BlockcValueError

__all__ = [
    "ffn_init", "ffn_forward", "ffn_params", "residual_add", "block_init", "block_forward",
    "stack_init", "stack_forward", "stack_norms", "avg_norm", "block_params", "real_params",
    "FFN_SHAPES", "BLOCK_SHAPES", "REAL_MODELS",
]

F32 = np.float32
FFN_D_MODEL, FFN_D_FF = 6, 12
RESIDUAL_DIM = 4
SEQ_LEN, D_MODEL, N_HEADS, D_FF, N_BLOCKS = 4, 8, 2, 32, 4
D_HEAD = D_MODEL // N_HEADS
INIT_SCALE = 0.1
RMS_EPS = F32(1e-5)

FFN_SHAPES: Dict[str, Tuple[int, ...]] = {
    "w1": (FFN_D_FF, FFN_D_MODEL), "b1": (FFN_D_FF,),
    "w2": (FFN_D_MODEL, FFN_D_FF), "b2": (FFN_D_MODEL,),
}
BLOCK_SHAPES: Dict[str, Tuple[int, ...]] = {
    "w_q": (N_HEADS, D_HEAD, D_MODEL), "w_k": (N_HEADS, D_HEAD, D_MODEL),
    "w_v": (N_HEADS, D_HEAD, D_MODEL), "w_o": (D_MODEL, D_MODEL),
    "w1": (D_FF, D_MODEL), "w2": (D_MODEL, D_FF),
}

def _weights(w: Mapping[str, object], name: str, shapes) -> Dict[str, np.ndarray]:
    check_keys(w, name, shapes)
    return {k: book_array(w[k], f"{name}[{k!r}]", s) for k, s in shapes.items()}


# --- kernels: float32, sums in index order ---------------------------------------
def _linear(x: np.ndarray, w: np.ndarray, b: np.ndarray = None) -> np.ndarray:
    """y (N, OUT) = x (N, IN) @ w (OUT, IN)^T + b (OUT); each sum starts at b (or 0)
    and adds x[:, i] * w[:, i] for i = 0, 1, ... with float32 rounding at each step."""
    n, out = x.shape[0], w.shape[0]
    s = np.zeros((n, out), F32) if b is None else np.tile(b, (n, 1))
    for i in range(w.shape[1]):
        s = s + x[:, i:i + 1] * w[None, :, i]
    return s


def _rmsnorm(x: np.ndarray) -> np.ndarray:
    """x (N, C) / sqrt(mean(x^2) + 1e-5) per row; float32 squares summed in float64."""
    ss = np.zeros(x.shape[0], np.float64)
    for i in range(x.shape[1]):
        ss = ss + (x[:, i] * x[:, i]).astype(np.float64)
    inv = F32(1) / np.sqrt((ss / x.shape[1]).astype(F32) + RMS_EPS)
    return x * inv[:, None]


def _softmax(s: np.ndarray) -> np.ndarray:
    """Row softmax of s (N, M): max-subtracted exp, divided by the sequential float32 sum."""
    e = np.exp(s - s.max(axis=1, keepdims=True))
    total = np.zeros(s.shape[0], F32)
    for j in range(s.shape[1]):
        total = total + e[:, j]
    return e / total[:, None]


def _gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh form, as the listings write it (float32 at each step)."""
    u = x + F32(0.044715) * x * x * x
    return F32(0.5) * x * (F32(1) + np.tanh(F32(0.7978846) * u))


def _attention(x: np.ndarray, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """Unmasked multi-head self-attention of x (T, C); heads concatenated, then W_O."""
    scale = F32(1) / np.sqrt(F32(D_HEAD))
    heads = []
    for h in range(N_HEADS):
        q, k, v = (_linear(x, w[name][h]) for name in ("w_q", "w_k", "w_v"))
        scores = np.zeros((x.shape[0], x.shape[0]), F32)
        for d in range(D_HEAD):
            scores = scores + q[:, d, None] * k[None, :, d]
        p = _softmax(scores * scale)
        out = np.zeros((x.shape[0], D_HEAD), F32)
        for j in range(x.shape[0]):
            out = out + p[:, j, None] * v[None, j, :]
        heads.append(out)
    return _linear(np.concatenate(heads, axis=1), w["w_o"])


def _block(x: np.ndarray, w: Mapping[str, np.ndarray]) -> np.ndarray:
    x = x + _attention(_rmsnorm(x), w)
    return x + _linear(_gelu(_linear(_rmsnorm(x), w["w1"])), w["w2"])


def _split(flat: np.ndarray, shapes) -> Dict[str, np.ndarray]:
    out, at = {}, 0
    for k, s in shapes.items():
        n = int(np.prod(s))
        out[k] = flat[at:at + n].reshape(s).copy()
        at += n
    return out


# --- the listings' functions -------------------------------------------------------
def ffn_init(seed: int = 42, rand: str = "msvc") -> Dict[str, np.ndarray]:
    """126_Ffn's init: W1 drawn row by row (b1 zero), then W2 (b2 zero)."""
    g = CRand(seed, rand)
    w1 = g.uniform(FFN_D_FF * FFN_D_MODEL, INIT_SCALE).reshape(FFN_D_FF, FFN_D_MODEL)
    w2 = g.uniform(FFN_D_MODEL * FFN_D_FF, INIT_SCALE).reshape(FFN_D_MODEL, FFN_D_FF)
    return {"w1": w1, "b1": np.zeros(FFN_D_FF, F32), "w2": w2, "b2": np.zeros(FFN_D_MODEL, F32)}


def ffn_forward(x, weights) -> np.ndarray:
    """126_Ffn's forward: x (6,) -> (6,)."""
    w = _weights(weights, "weights", FFN_SHAPES)
    x = book_array(x, "x", (FFN_D_MODEL,))[None, :]
    return _linear(_gelu(_linear(x, w["w1"], w["b1"])), w["w2"], w["b2"])[0]


def ffn_params(d_model: int = FFN_D_MODEL, d_ff: int = FFN_D_FF) -> int:
    return 2 * d_model * d_ff + d_ff + d_model


def residual_add(x, sublayer) -> np.ndarray:
    """127_Residual: x (4,) + sublayer (4,)."""
    return book_array(x, "x", (RESIDUAL_DIM,)) + book_array(sublayer, "sublayer", (RESIDUAL_DIM,))


def block_init(seed: int = 42, rand: str = "msvc") -> Dict[str, np.ndarray]:
    """128_Block's init: 768 draws in the struct's memory order."""
    n = sum(int(np.prod(s)) for s in BLOCK_SHAPES.values())
    return _split(CRand(seed, rand).uniform(n, INIT_SCALE), BLOCK_SHAPES)


def block_forward(x, weights) -> np.ndarray:
    """128_Block: one pre-norm block, x (4, 8) -> (4, 8)."""
    return _block(book_array(x, "x", (SEQ_LEN, D_MODEL)), _weights(weights, "weights", BLOCK_SHAPES))


def stack_init(seed: int = 42, rand: str = "msvc") -> List[Dict[str, np.ndarray]]:
    """129_Stack's init: 4 blocks drawn one after the other after one srand."""
    n = sum(int(np.prod(s)) for s in BLOCK_SHAPES.values())
    flat = CRand(seed, rand).uniform(N_BLOCKS * n, INIT_SCALE)
    return [_split(flat[i * n:(i + 1) * n], BLOCK_SHAPES) for i in range(N_BLOCKS)]


def avg_norm(x) -> np.float32:
    """129_Stack's measure: mean over rows of the row L2 norms of x (4, 8), in float32."""
    x = book_array(x, "x", (SEQ_LEN, D_MODEL))
    total = F32(0)
    for row in x:
        ss = F32(0)
        for v in row:
            ss = F32(ss + v * v)
        total = F32(total + np.sqrt(ss))
    return F32(total / F32(SEQ_LEN))


def stack_forward(x, blocks: Sequence[Mapping[str, object]]) -> Tuple[np.ndarray, np.ndarray]:
    """129_Stack: returns (final x (4, 8), average norms (5,))."""
    x = book_array(x, "x", (SEQ_LEN, D_MODEL))
    if len(blocks) != N_BLOCKS:
        raise BlockcValueError(f"blocks must be a sequence of {N_BLOCKS} weight dicts")
    norms = [avg_norm(x)]
    for i, w in enumerate(blocks):
        x = _block(x, _weights(w, f"blocks[{i}]", BLOCK_SHAPES))
        norms.append(avg_norm(x))
    return x, np.array(norms, F32)


def stack_norms(x, blocks: Sequence[Mapping[str, object]]) -> np.ndarray:
    """129_Stack: the average norms (5,) only."""
    return stack_forward(x, blocks)[1]


def block_params(d_model: int = D_MODEL, d_ff: int = D_FF, n_layers: int = 1) -> Dict[str, int]:
    """attn 4 d^2, ffn 2 d d_ff, norms 2 d, per_block, all_blocks (Python ints)."""
    attn, ffn, norms = 4 * d_model * d_model, 2 * d_model * d_ff, 2 * d_model
    per = attn + ffn + norms
    return {"attn": attn, "ffn": ffn, "norms": norms, "per_block": per,
            "all_blocks": per * n_layers}


def real_params() -> List[Dict[str, object]]:
    """130_Real_Params' table, as :func:`blockc.book.real_params` returns it."""
    return real_params_rows(block_params)
