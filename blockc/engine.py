"""The dynamic engine: the chapters' transformer block at any size, with every
variant they discuss, one C call per block (or per stack) from NumPy.

>>> cfg = BlockConfig()                        # the chapter-24 block: D=8, 2 heads, F=32
>>> Ws = init_blocks(cfg, 4, seed=42)          # 129_Stack's four blocks
>>> x = np.zeros((4, 8), np.float32) + 0.1
>>> ys = stack_forward(x, Ws, cfg, return_hidden=True)   # (5, 4, 8): input + 4 states

Semantics (``cfg.placement``):

- ``"pre"``: ``x = x + attn(norm1(x)); x = x + ffn(norm2(x))`` (chapter 24, GPT-2).
- ``"post"``: ``x = norm1(x + attn(x)); x = norm2(x + ffn(x))`` (the 2017 original).
- ``residual=False`` drops the ``x +`` (chapter 24, exercise 1).

``norm``: ``"rms"`` ``x / sqrt(mean(x**2) + eps) * gain``; ``"layer"``
``(x - mean) / sqrt(var + eps) * gain + shift`` with the variance over D (not
D-1); ``"none"`` (exercise 2). Attention scores are ``q.k / sqrt(Dh)``, ``causal``
masks the keys after each query (exercise 4), softmax, heads concatenated,
then ``attn.proj``. FFN: ``down(act(up(x)))`` with ``act`` GELU-tanh (the
listings, GPT-2), exact erf GELU (chapter 6, exercise 4), ReLU (exercise 3);
or ``"swiglu"``: ``down(silu(gate(x)) * up(x))``, the form LLaMA and DeepSeek use.
Exercise 6 writes its formula with a plain sigmoid gate,
``(W1 x * sigmoid(W3 x)) W2``: that is the older GLU (Dauphin et al., 2017);
SwiGLU swaps the sigmoid for ``silu(z) = z * sigmoid(z)``. Both cost the
same third matrix.

Weights are a mapping named like the chapter-6 ``GPTBlock`` state dict (so a
PyTorch block's ``state_dict()`` works unchanged; tensors are read with
``.detach().cpu().numpy()``, torch is never imported):

=====================  =========  ============================================
key                    shape      part
=====================  =========  ============================================
``attn.qkv.weight``    (3D, D)    Q, K, V stacked by rows; head h owns rows
                                  h*Dh..(h+1)*Dh of each (the book's
                                  ``W_Q[h][k][d]`` flattened is the Q part)
``attn.proj.weight``   (D, D)     output projection (the book's ``W_O``)
``up.weight``          (F, D)     ``W1``
``down.weight``        (D, F)     ``W2``
``gate.weight``        (F, D)     swiglu only (exercise 6's third matrix)
``<any above>.bias``   (rows,)    optional linear biases
``ln1.weight``         (D,)       optional gain of norm 1 (rms, layer)
``ln2.weight``         (D,)       optional gain of norm 2
``ln1.bias``           (D,)       optional shift of norm 1 (layer only)
``ln2.bias``           (D,)       optional shift of norm 2 (layer only)
=====================  =========  ============================================

An absent optional key means the part is absent (no bias, unit gain, zero
shift); the chapter-24 block has neither biases nor gains.

Inputs are computed in float32: float64 (and float16) inputs and weights are
rounded to float32 first; results are new float32 arrays and inputs are never
modified.

Speed: ``init_block`` returns a :class:`BlockWeights`, a dict that keeps the
validated C view of its arrays and reuses it on every call (until the dict
is modified); wrap any other mapping as ``BlockWeights(state_dict)`` to get the
same. Plain dicts are validated on every call. Scratch memory is a per-thread
workspace reused across calls, so a call allocates only its output.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, fields
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import numpy as np

from ._native import check, cptr, ffi, fptr, lib
from ._arrays import F32, as_f32, check_eps

__all__ = [
    "BlockConfig", "BlockWeights", "init_block", "init_blocks", "block_forward",
    "stack_forward", "count_parameters", "avg_norm", "NORMS", "PLACEMENTS", "ACTIVATIONS",
]

NORMS = ("rms", "layer", "none")
PLACEMENTS = ("pre", "post")
ACTIVATIONS = ("gelu_tanh", "gelu", "relu", "swiglu")
RANDS = ("msvc", "glibc", "normal")

_C_NORM = {"rms": lib.BC_NORM_RMS, "layer": lib.BC_NORM_LAYER, "none": lib.BC_NORM_NONE}
_C_PLACE = {"pre": lib.BC_PLACE_PRE, "post": lib.BC_PLACE_POST}
_C_ACT = {"gelu_tanh": lib.BC_ACT_GELU_TANH, "gelu": lib.BC_ACT_GELU,
          "relu": lib.BC_ACT_RELU, "swiglu": lib.BC_ACT_SWIGLU}
_MAX = int(lib.BC_MAX_ELEMENTS)
_EWORKSPACE = lib.BC_EWORKSPACE

# (state-dict key, bc_block_weights field)
_FIELDS = (
    ("attn.qkv.weight", "qkv_w"), ("attn.qkv.bias", "qkv_b"),
    ("attn.proj.weight", "proj_w"), ("attn.proj.bias", "proj_b"),
    ("up.weight", "up_w"), ("up.bias", "up_b"),
    ("gate.weight", "gate_w"), ("gate.bias", "gate_b"),
    ("down.weight", "down_w"), ("down.bias", "down_b"),
    ("ln1.weight", "ln1_w"), ("ln1.bias", "ln1_b"),
    ("ln2.weight", "ln2_w"), ("ln2.bias", "ln2_b"),
)


def _choice(value: Any, name: str, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")
    return value


def _size(value: Any, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    v = int(value)
    if v < 1:
        raise ValueError(f"{name} must be >= 1, got {v}")
    if v > _MAX:
        raise ValueError(f"{name} must be <= 2**40, got {v}")
    return v


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return bool(value)


@dataclass(frozen=True)
class BlockConfig:
    """Shape and options of one transformer block. The defaults are the
    chapter-24 block (128_Block): D=8, 2 heads, F=32, pre-norm RMSNorm,
    GELU-tanh, no mask, residuals on, eps 1e-5.

    Every field is validated on construction (ValueError/TypeError naming it).
    """
    d_model: int = 8
    n_heads: int = 2
    d_ff: int = 32
    norm: str = "rms"             # "rms" | "layer" | "none"
    placement: str = "pre"        # "pre" | "post"
    activation: str = "gelu_tanh"  # "gelu_tanh" | "gelu" | "relu" | "swiglu"
    causal: bool = False
    residual: bool = True
    eps: float = 1e-5
    # also set on construction, outside the dataclass fields: ``_c`` (the C
    # struct, built once) and ``_shapes`` (the weight shapes this config expects)

    def __post_init__(self):
        d = _size(self.d_model, "d_model")
        h = _size(self.n_heads, "n_heads")
        f = _size(self.d_ff, "d_ff")
        if d % h:
            raise ValueError(f"n_heads must divide d_model: d_model={d}, n_heads={h}")
        if 3 * d * d > _MAX or f * d > _MAX:
            raise ValueError(f"d_model={d}, d_ff={f}: a weight matrix would exceed 2**40 elements")
        _choice(self.norm, "norm", NORMS)
        _choice(self.placement, "placement", PLACEMENTS)
        _choice(self.activation, "activation", ACTIVATIONS)
        causal = _flag(self.causal, "causal")
        residual = _flag(self.residual, "residual")
        eps = check_eps(self.eps)
        for k, v in (("d_model", d), ("n_heads", h), ("d_ff", f), ("causal", causal),
                     ("residual", residual), ("eps", eps)):
            object.__setattr__(self, k, v)
        object.__setattr__(self, "_c", ffi.new("bc_block_config *", {
            "d_model": d, "n_heads": h, "d_ff": f, "norm": _C_NORM[self.norm],
            "placement": _C_PLACE[self.placement], "activation": _C_ACT[self.activation],
            "causal": int(causal), "residual": int(residual), "eps": eps}))
        object.__setattr__(self, "_shapes", _expected_shapes(self))

    def __reduce__(self):  # pickle / copy by the fields; the C struct is rebuilt
        return (type(self), tuple(getattr(self, f.name) for f in fields(self)))

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


def _expected_shapes(cfg: BlockConfig) -> Dict[str, tuple]:
    """key -> (shape, description, required) for the keys this config accepts."""
    d, f = cfg.d_model, cfg.d_ff
    s = {
        "attn.qkv.weight": ((3 * d, d), "(3*d_model, d_model)", True),
        "attn.qkv.bias": ((3 * d,), "(3*d_model,)", False),
        "attn.proj.weight": ((d, d), "(d_model, d_model)", True),
        "attn.proj.bias": ((d,), "(d_model,)", False),
        "up.weight": ((f, d), "(d_ff, d_model)", True),
        "up.bias": ((f,), "(d_ff,)", False),
        "down.weight": ((d, f), "(d_model, d_ff)", True),
        "down.bias": ((d,), "(d_model,)", False),
    }
    if cfg.activation == "swiglu":
        s["gate.weight"] = ((f, d), "(d_ff, d_model)", True)
        s["gate.bias"] = ((f,), "(d_ff,)", False)
    if cfg.norm != "none":
        for i in (1, 2):
            s[f"ln{i}.weight"] = ((d,), "(d_model,)", False)
    if cfg.norm == "layer":
        for i in (1, 2):
            s[f"ln{i}.bias"] = ((d,), "(d_model,)", False)
    return s


def _why_not(key: str, cfg: BlockConfig) -> str:
    if key.startswith("gate."):
        return f"{key!r} is only used with activation='swiglu' (activation={cfg.activation!r})"
    if key.startswith("ln") and key.endswith(".bias") and cfg.norm == "rms":
        return f"{key!r} (a LayerNorm shift) is only used with norm='layer' (norm='rms')"
    if key.startswith("ln"):
        return f"{key!r} is a norm parameter but norm='none'"
    return f"unknown weight {key!r}"


class _Prepared:
    """Validated float32 C-contiguous arrays and the C struct pointing into them."""
    __slots__ = ("cfg", "arrays", "c")

    def __init__(self, W: Mapping[str, Any], cfg: BlockConfig, name: str = "W"):
        if not isinstance(W, Mapping):
            raise TypeError(f"{name} must be a mapping of weight name -> array "
                            f"(a dict or a state_dict), got {type(W).__name__}")
        shapes = cfg._shapes
        for key in W:
            if key not in shapes:
                allowed = ", ".join(shapes)
                raise ValueError(f"{name}: {_why_not(key, cfg)}; accepted keys: {allowed}")
        arrays = {}
        c = ffi.new("bc_block_weights *")
        bufs = []
        for key, fld in _FIELDS:
            spec = shapes.get(key)
            if spec is None:
                continue
            shape, desc, required = spec
            if key not in W:
                if required:
                    raise ValueError(f"{name} is missing {key!r}, expected shape {desc} = {shape}")
                continue
            a = as_f32(W[key], f"{name}[{key!r}]")
            if a.shape != shape:
                hint = " (transposed?)" if a.shape == shape[::-1] and len(shape) == 2 else ""
                raise ValueError(f"{name}[{key!r}] must have shape {desc} = {shape}, "
                                 f"got {a.shape}{hint}")
            arrays[key] = a
            p = cptr(a)
            bufs.append(p)
            setattr(c, fld, p)
        self.cfg = cfg
        self.arrays = (arrays, bufs)  # keeps the buffers alive as long as c
        self.c = c


class BlockWeights(dict):
    """A dict of block weights that caches its validated C view per config.

    Values are stored as given; the cache is dropped whenever the dict is
    modified, so swapping an array is always seen. Changing an array's
    values in place is seen too when the array is float32 and C-contiguous
    (the C view points into it); other arrays are converted on validation,
    so reassign them (``W[k] = new``) after changing them.
    """
    __slots__ = ("_prep",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._prep = None

    def _dirty(self):
        self._prep = None

    def __setitem__(self, k, v):
        self._prep = None
        super().__setitem__(k, v)

    def __delitem__(self, k):
        self._prep = None
        super().__delitem__(k)

    def update(self, *a, **kw):
        self._prep = None
        super().update(*a, **kw)

    def pop(self, *a):
        self._prep = None
        return super().pop(*a)

    def popitem(self):
        self._prep = None
        return super().popitem()

    def clear(self):
        self._prep = None
        super().clear()

    def setdefault(self, *a):
        self._prep = None
        return super().setdefault(*a)

    def __ior__(self, other):
        self._prep = None
        return super().__ior__(other)

    def copy(self):
        return BlockWeights(self)

    def __reduce__(self):
        return (BlockWeights, (dict(self),))


def _prepare(W: Any, cfg: BlockConfig, name: str = "W") -> _Prepared:
    if type(W) is BlockWeights:
        p = W._prep
        if p is not None and (p.cfg is cfg or p.cfg == cfg):
            return p
        p = _Prepared(W, cfg, name)
        W._prep = p
        return p
    return _Prepared(W, cfg, name)


def _check_cfg(cfg: Any) -> BlockConfig:
    if type(cfg) is not BlockConfig:
        raise TypeError(f"cfg must be a blockc.BlockConfig, got {type(cfg).__name__}")
    return cfg


# ---- per-thread workspace -------------------------------------------------

_tls = threading.local()


def _workspace(cfg: BlockConfig, b: int, t: int):
    """(pointer, length) of this thread's scratch, grown when needed."""
    tls = _tls
    if getattr(tls, "cfg", None) is cfg and tls.b == b and tls.t == t:
        return tls.ptr, tls.n
    n = ffi.new("size_t *")
    check(lib.bc_block_workspace_size(n, cfg._c, b, t), "block workspace")
    need = n[0]
    buf = getattr(tls, "buf", None)
    if buf is None or buf.size < need:
        buf = np.empty(max(need, 1), F32)
        tls.buf, tls.ptr = buf, fptr(buf)
    # holding cfg keeps its id from being reused by another config
    tls.cfg, tls.b, tls.t, tls.n = cfg, b, t, buf.size
    return tls.ptr, tls.n


def _forget_workspace() -> None:
    """Make the next call re-query the size (the kernels' scratch needs may change,
    e.g. with the thread count)."""
    _tls.cfg = None


def _input(x: Any, cfg: BlockConfig):
    """x as float32 (B,T,D)-compatible C array plus (B, T)."""
    x = as_f32(x, "x")
    shape = x.shape
    if len(shape) == 3:
        b, t, d = shape
    elif len(shape) == 2:
        (t, d), b = shape, 1
    else:
        raise ValueError(f"x must have shape (T, d_model) or (B, T, d_model) with "
                         f"d_model={cfg.d_model}, got {shape}")
    if d != cfg.d_model:
        raise ValueError(f"x must have shape (T, {cfg.d_model}) or (B, T, {cfg.d_model}) "
                         f"(last axis d_model={cfg.d_model}), got {shape}")
    return x, b, t


# ---- forward ----------------------------------------------------------------

def block_forward(x: Any, W: Mapping[str, Any], cfg: BlockConfig) -> np.ndarray:
    """One transformer block.

    x (T, D) or (B, T, D) -> a new float32 array of the same shape.
    W: the block's weights (see the module docstring), cfg: its BlockConfig."""
    # the lean path: a BlockWeights already prepared for this config, a float32
    # C-contiguous x; everything else falls through to the full checks
    if type(cfg) is not BlockConfig:
        _check_cfg(cfg)
    p = W._prep if type(W) is BlockWeights else None
    if p is None or p.cfg is not cfg:
        p = _prepare(W, cfg)
    if not (type(x) is np.ndarray and x.dtype is F32 and x.flags.c_contiguous):
        x = as_f32(x, "x")
    shape = x.shape
    if len(shape) == 3 and shape[2] == cfg.d_model:
        b, t = shape[0], shape[1]
    elif len(shape) == 2 and shape[1] == cfg.d_model:
        b, t = 1, shape[0]
    else:
        x, b, t = _input(x, cfg)  # raises the shape error
    y = np.empty(shape, F32)
    if b and t:
        work, n = _workspace(cfg, b, t)
        st = lib.bc_block_forward(fptr(y), cptr(x), cfg._c, p.c, b, t, work, n)
        if st == _EWORKSPACE:
            _forget_workspace()
            work, n = _workspace(cfg, b, t)
            st = lib.bc_block_forward(fptr(y), cptr(x), cfg._c, p.c, b, t, work, n)
        if st:
            check(st, "block_forward")
    return y


def _stack_call(y, hidden, x, cfg, ws, n, b, t) -> None:
    hp = ffi.NULL if hidden is None else fptr(hidden)
    for attempt in (0, 1):
        work, wn = _workspace(cfg, b, t)
        st = lib.bc_stack_forward(fptr(y), hp, cptr(x), cfg._c, ws, n, b, t, work, wn)
        if st != _EWORKSPACE:
            break
        _forget_workspace()
    check(st, "stack_forward")


def stack_forward(x: Any, Ws: Sequence[Mapping[str, Any]], cfg: BlockConfig,
                  return_hidden: bool = False) -> np.ndarray:
    """The blocks ``Ws`` applied in order, in one C call.

    x (T, D) or (B, T, D) -> the final state, same shape; with
    ``return_hidden=True``, an array (n+1, *x.shape): the input (as float32)
    followed by the state after every block (chapter 6, exercise 2)."""
    _check_cfg(cfg)
    _flag(return_hidden, "return_hidden")
    if isinstance(Ws, Mapping) or not isinstance(Ws, Iterable):
        raise TypeError("Ws must be a sequence of weight mappings, one per block")
    preps = [_prepare(W, cfg, f"Ws[{i}]") for i, W in enumerate(Ws)]
    x, b, t = _input(x, cfg)
    n = len(preps)
    if return_hidden:
        hid = np.empty((n + 1,) + x.shape, F32)
        hid[0] = x
        if n and b and t:
            ws = ffi.new("bc_block_weights[]", n)
            for i, p in enumerate(preps):
                ws[i] = p.c[0]
            y = np.empty(x.shape, F32)
            _stack_call(y, hid[1:], x, cfg, ws, n, b, t)
        return hid
    y = np.array(x, dtype=F32, copy=True) if n == 0 else np.empty(x.shape, F32)
    if n and b and t:
        ws = ffi.new("bc_block_weights[]", n)
        for i, p in enumerate(preps):
            ws[i] = p.c[0]
        _stack_call(y, None, x, cfg, ws, n, b, t)
    return y


# ---- initialisation -----------------------------------------------------------

def _seed(seed: Any) -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer, got {type(seed).__name__}")
    if not 0 <= int(seed) < 2 ** 32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    return int(seed)


def init_blocks(cfg: BlockConfig, n: int, seed: int = 42, rand: str = "msvc") -> List[BlockWeights]:
    """n blocks of weights drawn in sequence from one generator.

    ``rand="msvc"`` (the book's figures) or ``"glibc"``: the chapter-24 draw,
    ``srand(seed)`` once, then for each block in turn ``(randf()*2-1)*0.1``
    for every weight in the listing's order: W_Q, W_K, W_V (each (H, Dh, D)
    = rows of (D, D)), W_O (D, D), W1 = up (F, D), W2 = down (D, F), and for
    swiglu the gate (F, D) last (exercise 6's third matrix appended to the
    listing's struct, so up and down are the same draws as the GELU block's).
    No biases and no gains, as in the listings.

    ``rand="normal"``: the GPT-2 way (chapter 6): every weight matrix from
    N(0, 0.02) drawn from ``numpy.random.default_rng(seed)`` in the same
    order (qkv, proj, up, down, gate), every linear bias zero, norm gains one
    and LayerNorm shifts zero (for the norms the config has).
    """
    _check_cfg(cfg)
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be an integer, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    seed = _seed(seed)
    _choice(rand, "rand", RANDS)
    d, f = cfg.d_model, cfg.d_ff
    swiglu = cfg.activation == "swiglu"
    per = 4 * d * d + 2 * f * d + (f * d if swiglu else 0)
    if n * per > _MAX:
        raise ValueError(f"n={n} blocks of {per} weights exceed 2**40 elements")
    out: List[BlockWeights] = []
    if rand == "normal":
        g = np.random.default_rng(seed)
        draw = lambda *shape: g.normal(0.0, 0.02, size=shape).astype(np.float32)
        for _ in range(n):
            W = BlockWeights()
            W["attn.qkv.weight"] = draw(3 * d, d)
            W["attn.proj.weight"] = draw(d, d)
            W["up.weight"] = draw(f, d)
            W["down.weight"] = draw(d, f)
            if swiglu:
                W["gate.weight"] = draw(f, d)
            for key in ("attn.qkv", "attn.proj", "up", "down") + (("gate",) if swiglu else ()):
                W[key + ".bias"] = np.zeros(W[key + ".weight"].shape[0], np.float32)
            if cfg.norm != "none":
                for i in (1, 2):
                    W[f"ln{i}.weight"] = np.ones(d, np.float32)
            if cfg.norm == "layer":
                for i in (1, 2):
                    W[f"ln{i}.bias"] = np.zeros(d, np.float32)
            out.append(W)
        return out
    g = ffi.new("bc_rng *")
    check(lib.bc_rng_init(g, lib.BC_RAND_MSVC if rand == "msvc" else lib.BC_RAND_GLIBC, seed),
          "init_blocks")
    for _ in range(n):
        flat = np.empty(per, np.float32)
        check(lib.bc_rng_uniform(fptr(flat), g, per, 0.1), "init_blocks")
        dd, fd = d * d, f * d
        W = BlockWeights()
        W["attn.qkv.weight"] = flat[:3 * dd].reshape(3 * d, d)
        W["attn.proj.weight"] = flat[3 * dd:4 * dd].reshape(d, d)
        W["up.weight"] = flat[4 * dd:4 * dd + fd].reshape(f, d)
        W["down.weight"] = flat[4 * dd + fd:4 * dd + 2 * fd].reshape(d, f)
        if swiglu:
            W["gate.weight"] = flat[4 * dd + 2 * fd:].reshape(f, d)
        out.append(W)
    return out


def init_block(cfg: BlockConfig, seed: int = 42, rand: str = "msvc") -> BlockWeights:
    """One block's weights: ``init_blocks(cfg, 1, seed, rand)[0]`` (128_Block's draw)."""
    return init_blocks(cfg, 1, seed, rand)[0]


# ---- accounting -----------------------------------------------------------------

def count_parameters(cfg: BlockConfig, bias: bool = False, n_blocks: int = 1) -> int:
    """Parameters of ``n_blocks`` blocks.

    Per block: attention ``4*D**2`` (Q, K, V, O); FFN ``2*D*F`` (up, down),
    plus ``D*F`` for the swiglu gate (exercise 6); norms ``D`` per norm for
    rms (the gain), ``2*D`` for layer (gain and shift), 0 for none (the
    listings count the two RMSNorm gains although they don't store them);
    with ``bias=True`` the linear biases ``3D + D + F + D`` (+ ``F`` for the
    gate).

    - 128_Block (the defaults): 4*8**2 + 2*8*32 + 2*8 = 256 + 512 + 16 = 784.
    - Exercise 5, six blocks with D=256, 4 heads, F=1024: per block
      4*256**2 + 2*256*1024 + 2*256 = 262144 + 524288 + 512 = 786944, times 6
      = 4,721,664. (An LSTM with hidden and input size 256 has
      4*(256*(256+256) + 256) = 525,312: one block is 1.5 of those.)
    - Exercise 6, SwiGLU at the same sizes: + 256*1024 = 262144 per block,
      1,049,088 per block and 6,294,528 for six; models using it shrink F to
      about 2/3 of 4D to keep the count level.
    - Chapter 6, GPT-2 block (layer norm, biases, F=4D): 12*D**2 + 13*D.
    """
    _check_cfg(cfg)
    _flag(bias, "bias")
    if isinstance(n_blocks, (bool, np.bool_)) or not isinstance(n_blocks, (int, np.integer)) \
            or n_blocks < 0:
        raise ValueError(f"n_blocks must be an integer >= 0, got {n_blocks!r}")
    d, f = cfg.d_model, cfg.d_ff
    swiglu = cfg.activation == "swiglu"
    per = 4 * d * d + 2 * d * f + (d * f if swiglu else 0)
    per += {"rms": 2 * d, "layer": 4 * d, "none": 0}[cfg.norm]
    if bias:
        per += 3 * d + d + f + d + (f if swiglu else 0)
    return per * int(n_blocks)


def avg_norm(x: Any) -> float:
    """129_Stack's figure: the mean over positions of each position's L2 norm,
    computed the listing's way in float32 (squares summed in order, ``sqrtf``,
    the norms summed in order and divided by the number of positions).
    x (..., D); every leading position counts."""
    x = as_f32(x, "x")
    if x.ndim < 1 or x.size == 0:
        raise ValueError(f"x must have shape (..., D) with at least one position, got {x.shape}")
    rows = x.reshape(-1, x.shape[-1])
    ss = np.cumsum(rows * rows, axis=1, dtype=np.float32)[:, -1]  # cumsum: sequential float adds
    total = np.cumsum(np.sqrt(ss), dtype=np.float32)[-1]
    return float(total / np.float32(rows.shape[0]))
