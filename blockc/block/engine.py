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

Speed: a plain mapping is validated on every call (its entries are read
once, and the call uses what it checked). :func:`prepare` validates once and
returns a :class:`PreparedBlock`, an immutable copy of the weights with its C
view built, which ``block_forward`` and ``stack_forward`` accept in place of
the mapping: the toy block then costs a few microseconds a call. Scratch
memory is a per-thread workspace reused across calls, so a call allocates only
its output.
"""
from __future__ import annotations

import threading
import types
from dataclasses import dataclass, fields
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Sequence, Tuple, Union

import numpy.typing as npt

import numpy as np

from .._native import check, cptr, ffi, fptr, lib, output_empty, thread_buffer
from .._args import (F32, MAX_ELEMENTS, as_choice, as_f32, as_flag, as_int, as_seed, as_size,
                    check_eps)
from .._enums import ACTIVATIONS, C_ACT, C_NORM, C_PLACE, NORMS, PLACEMENTS
from .._errors import BlockcTypeError, BlockcValueError

__all__ = [
    "BlockConfig", "PreparedBlock", "prepare", "init_block", "init_blocks", "iter_blocks",
    "block_forward",
    "stack_forward", "block_backward", "stack_backward", "count_parameters", "avg_norm", "NORMS", "PLACEMENTS", "ACTIVATIONS",
]

RANDS = ("msvc", "glibc", "normal")

_MAX = MAX_ELEMENTS
assert _MAX == int(lib.BC_MAX_ELEMENTS)

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
        d = as_size(self.d_model, "d_model")
        h = as_size(self.n_heads, "n_heads")
        f = as_size(self.d_ff, "d_ff")
        if d % h:
            raise BlockcValueError(f"n_heads must divide d_model: d_model={d}, n_heads={h}")
        if 3 * d * d > _MAX or f * d > _MAX:
            raise BlockcValueError(f"d_model={d}, d_ff={f}: a weight matrix would exceed 2**40 elements")
        as_choice(self.norm, "norm", NORMS)
        as_choice(self.placement, "placement", PLACEMENTS)
        as_choice(self.activation, "activation", ACTIVATIONS)
        causal = as_flag(self.causal, "causal")
        residual = as_flag(self.residual, "residual")
        eps = check_eps(self.eps)
        for k, v in (("d_model", d), ("n_heads", h), ("d_ff", f), ("causal", causal),
                     ("residual", residual), ("eps", eps)):
            object.__setattr__(self, k, v)
        object.__setattr__(self, "_c", ffi.new("bc_block_config *", {
            "d_model": d, "n_heads": h, "d_ff": f, "norm": C_NORM[self.norm],
            "placement": C_PLACE[self.placement], "activation": C_ACT[self.activation],
            "causal": int(causal), "residual": int(residual), "eps": eps}))
        object.__setattr__(self, "_shapes", _expected_shapes(self))
        # (key, C field, shape, description, required) in C-field order, for the checks
        object.__setattr__(self, "_plan", tuple((key, fld) + self._shapes[key]
                                                for key, fld in _FIELDS if key in self._shapes))

    def __reduce__(self):  # pickle / copy by the fields; the C struct is rebuilt
        return (type(self), tuple(getattr(self, f.name) for f in fields(self)))

    @property
    def c_config(self) -> Any:
        """The ``bc_block_config *`` the C library reads, built once (the engine's
        internal interface, with :attr:`PreparedBlock.c_weights` and :func:`workspace`)."""
        return self._c

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


class PreparedBlock(Mapping):
    """One block's weights, validated for one :class:`BlockConfig` and frozen.

    Made by :func:`prepare`. The arrays are float32 copies, read-only, so
    nothing the caller does to the mapping or its arrays afterwards reaches
    this object: prepare again to use new weights. ``block_forward`` and
    ``stack_forward`` accept it in place of the mapping and skip every check
    but the config's. It is itself a read-only mapping of its arrays.
    """
    __slots__ = ("_cfg", "_arrays", "_c")

    def __init__(self, W: Mapping[str, Any], cfg: "BlockConfig", name: str = "W",
                 copy: bool = True):
        _check_cfg(cfg)
        c, bufs, arrays = _weights_view(W, cfg, name, copy)
        object.__setattr__(self, "_cfg", cfg)
        object.__setattr__(self, "_arrays", (types.MappingProxyType(arrays), bufs))
        object.__setattr__(self, "_c", c)

    @property
    def c_weights(self) -> Any:
        """The ``bc_block_weights *`` over the frozen arrays, for the ``lib.bc_block_*``
        entry points."""
        return self._c

    @property
    def cfg(self) -> "BlockConfig":
        """The config the weights were checked against."""
        return self._cfg

    @property
    def arrays(self) -> Mapping[str, np.ndarray]:
        """The weights (a read-only mapping of read-only float32 arrays)."""
        return self._arrays[0]

    def __getitem__(self, key: str) -> np.ndarray:
        return self._arrays[0][key]

    def __iter__(self):
        return iter(self._arrays[0])

    def __len__(self) -> int:
        return len(self._arrays[0])

    def __setattr__(self, name, value):
        raise AttributeError("PreparedBlock is immutable: prepare() new weights instead")

    def __reduce__(self):  # pickle / copy: prepared again from its arrays
        return (prepare, ({k: np.array(v) for k, v in self.arrays.items()}, self._cfg))

    def __repr__(self) -> str:
        return f"PreparedBlock({sorted(self.arrays)}, {self._cfg!r})"


_ABSENT = object()


def _weights_view(W: Any, cfg: "BlockConfig", name: str, copy: bool):
    """(C struct, its buffers, the arrays): W checked against cfg, each entry read
    once (the checks and the call use the same arrays); copies frozen when copy."""
    if type(W) is not dict and not isinstance(W, Mapping):
        raise BlockcTypeError(f"{name} must be a mapping of weight name -> array "
                              f"(a dict or a state_dict), got {type(W).__name__}")
    items = dict(W)
    shapes = cfg._shapes
    for key in items:
        if key not in shapes:
            allowed = ", ".join(shapes)
            raise BlockcValueError(f"{name}: {_why_not(key, cfg)}; accepted keys: {allowed}")
    arrays: Dict[str, np.ndarray] = {}
    c = ffi.new("bc_block_weights *")
    bufs = []
    for key, fld, shape, desc, required in cfg._plan:
        a = items.get(key, _ABSENT)
        if a is _ABSENT:
            if required:
                raise BlockcValueError(f"{name} is missing {key!r}, expected shape {desc} = {shape}")
            continue
        a = as_f32(a, f"{name}[{key!r}]")
        if a.shape != shape:
            hint = " (transposed?)" if a.shape == shape[::-1] and len(shape) == 2 else ""
            raise BlockcValueError(f"{name}[{key!r}] must have shape {desc} = {shape}, "
                                   f"got {a.shape}{hint}")
        if copy:
            a = a.copy()
            a.setflags(write=False)
        arrays[key] = a
        p = cptr(a)
        bufs.append(p)
        setattr(c, fld, p)
    return c, bufs, arrays


class _View:
    """A per-call C view of a plain mapping (what block_forward needs of a PreparedBlock)."""
    __slots__ = ("_c", "_bufs", "arrays")

    def __init__(self, c, bufs, arrays):
        self._c, self._bufs, self.arrays = c, bufs, arrays


def prepare(W: Mapping[str, Any], cfg: "BlockConfig") -> PreparedBlock:
    """Validate a block's weights once, for repeated calls.

    Parameters
    ----------
    W : mapping of str to array_like
        The block's weights, keyed as in the module docstring (a PyTorch
        ``GPTBlock.state_dict()`` works as is).
    cfg : BlockConfig
        The block's configuration.

    Returns
    -------
    PreparedBlock
        Immutable float32 copies of the weights with their C view built.

    Raises
    ------
    TypeError
        ``W`` is not a mapping, ``cfg`` not a BlockConfig, an array not floating.
    ValueError
        A key is unknown for ``cfg``, a required key is missing, a shape is wrong.

    Examples
    --------
    >>> cfg = BlockConfig()
    >>> P = prepare(init_block(cfg), cfg)
    >>> block_forward(np.zeros((4, 8), np.float32), P, cfg).shape
    (4, 8)
    """
    return PreparedBlock(W, cfg, "W")


def _prepare(W: Any, cfg: "BlockConfig", name: str = "W") -> Union[PreparedBlock, _View]:
    """W's C view for cfg: W itself when it is a PreparedBlock (for this config), else
    a per-call view of the mapping (checked, not copied)."""
    if type(W) is PreparedBlock:
        if W._cfg is not cfg and W._cfg != cfg:
            raise BlockcValueError(f"{name} was prepared for {W._cfg!r}, not {cfg!r}")
        return W
    c, bufs, arrays = _weights_view(W, cfg, name, copy=False)
    return _View(c, bufs, arrays)


def _check_cfg(cfg: Any) -> "BlockConfig":
    if type(cfg) is not BlockConfig:
        raise BlockcTypeError(f"cfg must be a blockc.BlockConfig, got {type(cfg).__name__}")
    return cfg


# ---- per-thread workspace -------------------------------------------------

_tls = threading.local()


def workspace(cfg: BlockConfig, b: int, t: int):
    """(pointer, length) of this thread's scratch, grown when needed."""
    tls = _tls
    if getattr(tls, "cfg", None) is cfg and tls.b == b and tls.t == t:
        return tls.ptr, tls.n
    n = ffi.new("size_t *")
    check(lib.bc_block_workspace_size(n, cfg._c, b, t), "block workspace")
    ptr, buf = thread_buffer(tls, int(n[0]))
    # holding cfg keeps its id from being reused by another config
    tls.cfg, tls.b, tls.t, tls.n = cfg, b, t, buf.size
    return ptr, buf.size


def _input(x: Any, cfg: BlockConfig):
    """x as float32 (B,T,D)-compatible C array plus (B, T)."""
    x = as_f32(x, "x")
    shape = x.shape
    if len(shape) == 3:
        b, t, d = shape
    elif len(shape) == 2:
        (t, d), b = shape, 1
    else:
        raise BlockcValueError(f"x must have shape (T, d_model) or (B, T, d_model) with "
                               f"d_model={cfg.d_model}, got {shape}")
    if d != cfg.d_model:
        raise BlockcValueError(f"x must have shape (T, {cfg.d_model}) or (B, T, {cfg.d_model}) "
                               f"(last axis d_model={cfg.d_model}), got {shape}")
    return x, b, t


# ---- forward ----------------------------------------------------------------

def block_forward(x: npt.ArrayLike, W: Union[Mapping[str, Any], PreparedBlock],
                  cfg: BlockConfig) -> np.ndarray:
    """One transformer block.

    Parameters
    ----------
    x : array_like, shape (T, D) or (B, T, D)
        The input, floating (computed in float32).
    W : mapping of str to array_like, or PreparedBlock
        The block's weights (see the module docstring), or :func:`prepare`'s result.
    cfg : BlockConfig
        The block's shape and options.

    Returns
    -------
    numpy.ndarray
        A new float32 array shaped like ``x``.

    Raises
    ------
    TypeError
        A wrong type: ``cfg``, ``W`` or a floating array expected.
    ValueError
        A wrong shape or key, or weights prepared for another config.

    Examples
    --------
    >>> cfg = BlockConfig()
    >>> y = block_forward(np.full((4, 8), 0.1, np.float32), init_block(cfg), cfg)
    >>> y.shape, y.dtype
    ((4, 8), dtype('float32'))
    """
    # the lean path: prepared weights, a float32 C-contiguous x
    if type(cfg) is not BlockConfig:
        _check_cfg(cfg)
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
    y = output_empty(shape)
    if b and t:
        work, n = workspace(cfg, b, t)
        st = lib.bc_block_forward(fptr(y), cptr(x), cfg._c, p._c, b, t, work, n)
        if st:
            check(st, "block_forward")
    return y


def stack_forward(x: npt.ArrayLike, Ws: Sequence[Union[Mapping[str, Any], PreparedBlock]],
                  cfg: BlockConfig, return_hidden: bool = False) -> np.ndarray:
    """The blocks ``Ws`` applied in order, in one C call.

    Parameters
    ----------
    x : array_like, shape (T, D) or (B, T, D)
        The input.
    Ws : sequence of mappings or PreparedBlocks
        One block's weights per entry.
    cfg : BlockConfig
        The configuration every block shares.
    return_hidden : bool, optional
        Also return the input and every block's output (chapter 6, exercise 2).

    Returns
    -------
    numpy.ndarray
        The final state, shaped like ``x``; with ``return_hidden``, an array
        ``(len(Ws) + 1, *x.shape)``: the input (as float32), then the state after
        every block.

    Raises
    ------
    TypeError, ValueError
        As :func:`block_forward`, naming ``Ws[i]``.

    Examples
    --------
    >>> cfg = BlockConfig()
    >>> hs = stack_forward(np.full((4, 8), 0.1, np.float32), init_blocks(cfg, 4), cfg,
    ...                    return_hidden=True)
    >>> hs.shape
    (5, 4, 8)
    """
    _check_cfg(cfg)
    as_flag(return_hidden, "return_hidden")
    if isinstance(Ws, Mapping) or not isinstance(Ws, Iterable):
        raise BlockcTypeError("Ws must be a sequence of weight mappings, one per block")
    preps = [_prepare(W, cfg, f"Ws[{i}]") for i, W in enumerate(Ws)]
    x, b, t = _input(x, cfg)
    n = len(preps)
    if return_hidden:
        out = output_empty((n + 1,) + x.shape)
        out[0] = x
        y, hidden = output_empty(x.shape), out[1:]
    else:
        out = y = np.array(x, dtype=F32, copy=True) if n == 0 else output_empty(x.shape)
        hidden = None
    if n and b and t:
        ws = ffi.new("bc_block_weights[]", n)
        for i, p in enumerate(preps):
            ws[i] = p._c[0]
        work, wn = workspace(cfg, b, t)
        check(lib.bc_stack_forward(fptr(y), ffi.NULL if hidden is None else fptr(hidden),
                                   cptr(x), cfg._c, ws, n, b, t, work, wn), "stack_forward")
    return out


# ---- backward -------------------------------------------------------------------

def stack_backward(x: npt.ArrayLike, Ws: Sequence[Union[Mapping[str, Any], PreparedBlock]],
                   cfg: BlockConfig, dy: npt.ArrayLike
                   ) -> Tuple[np.ndarray, List[Dict[str, np.ndarray]]]:
    """The gradients of :func:`stack_forward` ``(x, Ws, cfg)``, given ``dy``.

    For a loss L of the stack's output y with dL/dy = ``dy``: dL/dx and, for every
    block, dL/dW. One C call runs the forward again keeping what the backward
    needs, then the backward (attention's probabilities recomputed tile by tile
    from each query's log-sum-exp, never a (T, T) matrix).

    Parameters
    ----------
    x : array_like, shape (T, D) or (B, T, D)
    Ws : sequence of mappings or PreparedBlocks
    cfg : BlockConfig
    dy : array_like, shaped like ``x``

    Returns
    -------
    dx : numpy.ndarray
        Shaped like ``x``, float32.
    dWs : list of dict of str to numpy.ndarray
        For every block, its weights' gradients keyed like its weights.

    Raises
    ------
    TypeError, ValueError
        As :func:`stack_forward`; ``dy`` not shaped like ``x``.

    Examples
    --------
    >>> cfg = BlockConfig(causal=True)
    >>> x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    >>> dx, dWs = stack_backward(x, init_blocks(cfg, 2), cfg, np.ones((4, 8), np.float32))
    >>> dx.shape, sorted(dWs[0])
    ((4, 8), ['attn.proj.weight', 'attn.qkv.weight', 'down.weight', 'up.weight'])
    """
    _check_cfg(cfg)
    if isinstance(Ws, Mapping) or not isinstance(Ws, Iterable):
        raise BlockcTypeError("Ws must be a sequence of weight mappings, one per block")
    preps = [_prepare(W, cfg, f"Ws[{i}]") for i, W in enumerate(Ws)]
    x, b, t = _input(x, cfg)
    dy = as_f32(dy, "dy")
    if dy.shape != x.shape:
        raise BlockcValueError(f"dy must have the shape of x {x.shape}, got {dy.shape}")
    n = len(preps)
    grads = [{k: np.zeros(a.shape, F32) for k, a in p.arrays.items()} for p in preps]
    if n == 0:
        return np.array(dy, dtype=F32, copy=True), grads
    dx = output_empty(x.shape)
    if not (b and t):
        dx[...] = 0.0
        return dx, grads
    ws = ffi.new("bc_block_weights[]", n)
    gs = ffi.new("bc_block_grads[]", n)
    keep = []
    for i, p in enumerate(preps):
        ws[i] = p._c[0]
        for key, fld in _FIELDS:
            if key in grads[i]:
                ptr = fptr(grads[i][key])
                keep.append(ptr)
                setattr(gs[i], fld, ptr)
    nw = ffi.new("size_t *")
    check(lib.bc_stack_backward_workspace_size(nw, cfg._c, n, b, t), "stack_backward")
    work = np.empty(int(nw[0]) + 16, F32)
    check(lib.bc_stack_backward(fptr(dx), gs, cptr(dy), cptr(x), cfg._c, ws, n, b, t,
                                fptr(work), work.size), "stack_backward")
    return dx, grads


def block_backward(x: npt.ArrayLike, W: Union[Mapping[str, Any], PreparedBlock],
                   cfg: BlockConfig, dy: npt.ArrayLike
                   ) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    """The gradients of :func:`block_forward` ``(x, W, cfg)`` given ``dy`` = dL/dy.

    Parameters
    ----------
    x : array_like, shape (T, D) or (B, T, D)
    W : mapping of str to array_like, or PreparedBlock
    cfg : BlockConfig
    dy : array_like, shaped like ``x``

    Returns
    -------
    dx : numpy.ndarray
        dL/dx, shaped like ``x``.
    dW : dict of str to numpy.ndarray
        dL/dW, keyed and shaped like ``W``.

    Raises
    ------
    TypeError, ValueError
        As :func:`block_forward`; ``dy`` not shaped like ``x``.

    Examples
    --------
    >>> cfg = BlockConfig()
    >>> x = np.full((4, 8), 0.1, np.float32)
    >>> dx, dW = block_backward(x, init_block(cfg), cfg, np.ones((4, 8), np.float32))
    >>> dW["up.weight"].shape
    (32, 8)
    """
    dx, dWs = stack_backward(x, [W], cfg, dy)
    return dx, dWs[0]


# ---- initialisation -----------------------------------------------------------

def init_blocks(cfg: BlockConfig, n: int, seed: int = 42,
                rand: str = "msvc") -> List[Dict[str, np.ndarray]]:
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

    Parameters
    ----------
    cfg : BlockConfig
    n : int >= 0
        Number of blocks.
    seed : int in [0, 2**32)
    rand : {"msvc", "glibc", "normal"}

    Returns
    -------
    list of dict
        One weight dict per block (see :func:`iter_blocks` to draw them one at a time).

    Raises
    ------
    TypeError
        A non-BlockConfig ``cfg``, or ``n`` or ``seed`` not integers.
    ValueError
        ``n`` or ``seed`` out of range, an unknown ``rand``, or more than 2**40 weights.

    Examples
    --------
    >>> Ws = init_blocks(BlockConfig(), 4, seed=42)   # 129_Stack's four blocks
    >>> len(Ws), Ws[0]["attn.qkv.weight"].shape
    (4, (24, 8))
    """
    return list(iter_blocks(cfg, n, seed, rand))


def iter_blocks(cfg: BlockConfig, n: int, seed: int = 42,
                rand: str = "msvc") -> Iterator[Dict[str, np.ndarray]]:
    """The blocks of :func:`init_blocks`, drawn one at a time (the same draws):
    a deep stack can be streamed (draw, apply, drop) in the memory of one block.

    Parameters
    ----------
    cfg, n, seed, rand
        As :func:`init_blocks`; checked when this is called, before the first draw.

    Yields
    ------
    dict of str to numpy.ndarray
        One block's weights.

    Examples
    --------
    >>> cfg = BlockConfig()
    >>> x = np.full((4, 8), 0.1, np.float32)
    >>> for W in iter_blocks(cfg, 3):
    ...     x = block_forward(x, W, cfg)
    >>> bool(np.array_equal(x, stack_forward(np.full((4, 8), 0.1, np.float32), init_blocks(cfg, 3), cfg)))
    True
    """
    _check_cfg(cfg)
    n = as_int(n, "n", 0, _MAX)
    seed = as_seed(seed)
    as_choice(rand, "rand", RANDS)
    d, f = cfg.d_model, cfg.d_ff
    swiglu = cfg.activation == "swiglu"
    per = 4 * d * d + 2 * f * d + (f * d if swiglu else 0)
    if n * per > _MAX:
        raise BlockcValueError(f"n={n} blocks of {per} weights exceed 2**40 elements")
    if rand == "normal":
        return _normal_blocks(cfg, n, seed)
    g = ffi.new("bc_rng *")
    check(lib.bc_rng_init(g, lib.BC_RAND_MSVC if rand == "msvc" else lib.BC_RAND_GLIBC, seed),
          "init_blocks")
    return _uniform_blocks(cfg, n, g, per)


def _normal_blocks(cfg: BlockConfig, n: int, seed: int) -> Iterator[Dict[str, np.ndarray]]:
    d, f = cfg.d_model, cfg.d_ff
    swiglu = cfg.activation == "swiglu"
    g = np.random.default_rng(seed)
    draw = lambda *shape: g.normal(0.0, 0.02, size=shape).astype(np.float32)
    for _ in range(n):
        W: Dict[str, np.ndarray] = {}
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
        yield W


def _uniform_blocks(cfg: BlockConfig, n: int, g, per: int) -> Iterator[Dict[str, np.ndarray]]:
    d, f = cfg.d_model, cfg.d_ff
    dd, fd = d * d, f * d
    for _ in range(n):
        flat = np.empty(per, np.float32)
        check(lib.bc_rng_uniform(fptr(flat), g, per, 0.1), "init_blocks")
        W = {"attn.qkv.weight": flat[:3 * dd].reshape(3 * d, d),
             "attn.proj.weight": flat[3 * dd:4 * dd].reshape(d, d),
             "up.weight": flat[4 * dd:4 * dd + fd].reshape(f, d),
             "down.weight": flat[4 * dd + fd:4 * dd + 2 * fd].reshape(d, f)}
        if cfg.activation == "swiglu":
            W["gate.weight"] = flat[4 * dd + 2 * fd:].reshape(f, d)
        yield W


def init_block(cfg: BlockConfig, seed: int = 42, rand: str = "msvc") -> Dict[str, np.ndarray]:
    """One block's weights: ``init_blocks(cfg, 1, seed, rand)[0]`` (128_Block's draw).

    Parameters
    ----------
    cfg : BlockConfig
    seed : int in [0, 2**32), optional
    rand : {"msvc", "glibc", "normal"}, optional

    Returns
    -------
    dict of str to numpy.ndarray

    Raises
    ------
    TypeError
        A non-BlockConfig ``cfg``, or a seed that is not an integer.
    ValueError
        A seed outside [0, 2**32) or an unknown ``rand``.

    Examples
    --------
    >>> W = init_block(BlockConfig(), seed=42)
    >>> sorted(W)
    ['attn.proj.weight', 'attn.qkv.weight', 'down.weight', 'up.weight']
    """
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

    Parameters
    ----------
    cfg : BlockConfig
    bias : bool, optional
        Count the linear biases too.
    n_blocks : int >= 0, optional

    Returns
    -------
    int

    Raises
    ------
    TypeError
        A non-BlockConfig ``cfg``, a non-bool ``bias``, a non-integer ``n_blocks``.
    ValueError
        ``n_blocks`` below 0.

    Examples
    --------
    >>> count_parameters(BlockConfig())
    784
    >>> count_parameters(BlockConfig(d_model=256, n_heads=4, d_ff=1024), n_blocks=6)
    4721664
    """
    _check_cfg(cfg)
    as_flag(bias, "bias")
    n_blocks = as_int(n_blocks, "n_blocks", 0, _MAX)
    d, f = cfg.d_model, cfg.d_ff
    swiglu = cfg.activation == "swiglu"
    per = 4 * d * d + 2 * d * f + (d * f if swiglu else 0)
    per += {"rms": 2 * d, "layer": 4 * d, "none": 0}[cfg.norm]
    if bias:
        per += 3 * d + d + f + d + (f if swiglu else 0)
    return per * n_blocks


def avg_norm(x: Any) -> float:
    """129_Stack's figure: the mean over positions of each position's L2 norm,
    computed the listing's way in float32 (squares summed in order, ``sqrtf``,
    the norms summed in order and divided by the number of positions).
    x (..., D); every leading position counts."""
    x = as_f32(x, "x")
    if x.ndim < 1 or x.size == 0:
        raise BlockcValueError(f"x must have shape (..., D) with at least one position, got {x.shape}")
    rows = x.reshape(-1, x.shape[-1])
    ss = np.cumsum(rows * rows, axis=1, dtype=np.float32)[:, -1]  # cumsum: sequential float adds
    total = np.cumsum(np.sqrt(ss), dtype=np.float32)[-1]
    return float(total / np.float32(rows.shape[0]))
