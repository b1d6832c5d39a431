"""The whole decoder-only model in C: chapter 6's GPT-2, and every variant of chapter
24's block as a whole model (Llama's RMSNorm, RoPE, SwiGLU, grouped K/V heads).

::

    cfg = blockc.GPTConfig(vocab=50257, context=1024, width=768, heads=12, layers=12)
    m = blockc.GPT.random(cfg, seed=0)        # N(0, 0.02) weights, zero biases, unit gains
    m = blockc.GPT.from_state_dict(sd, cfg)   # NumPy arrays or torch tensors
    logits = m(ids)                           # ids (B, T) ints -> (B, T, vocab) float32
    out = m.generate(ids, max_new_tokens=20)  # greedy; temperature/top_k/seed to sample
    q = m.astype("q8_0")                      # 8-bit weights ("bfloat16", "float32" too)

All parameters live in one buffer whose layout (the byte offset, storage and
shape of every tensor) the C library computes, in the chapter's PyTorch
``GPT.state_dict()`` order and names. The weight matrices are stored packed
for the kernels (panels of 16 rows, in the model's :attr:`GPT.dtype`:
float32, bfloat16 or llama.cpp's q8_0); vectors (biases, norm gains) and the
position table are float32. :meth:`GPT.state_dict` gives the vectors and the
position table as views of the buffer and the matrices unpacked, as float32
copies (a quantised model's dequantised weights: exactly what it computes
with); :meth:`GPT.load_state_dict` writes weights back.

Tied head and ``head.weight``: PyTorch's ``state_dict()`` of the tied chapter
model lists ``head.weight`` too (the same tensor as ``token.weight`` under a
second name). :meth:`GPT.from_state_dict` therefore accepts ``head.weight`` for
a tied config when it equals ``token.weight`` exactly (anything else is a
``ValueError``), and :meth:`GPT.state_dict` of a tied model lists only
``token.weight`` (pass ``keep_tied=True`` to also get ``head.weight``, e.g. for
``torch``'s ``load_state_dict(strict=True)``).

Computation is float32 throughout (lower-precision weights are converted to
float32 in registers); float64 parameters are converted to float32.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, fields
from typing import (Any, Callable, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence,
                    Tuple, Union)

import numpy as np
import numpy.typing as npt

from ._args import as_choice, as_flag, as_int, as_real, as_size, check_eps, to_numpy
from ._native import check, cptr, ffi, fptr, lib, thread_buffer
from ._errors import BlockcTypeError, BlockcValueError
from .generation import SamplingOptions, next_tokens

__all__ = ["GPTConfig", "GPT", "KVCache", "gpt_parameter_count", "gpt_parameter_formula",
           "GPT_PRESETS", "DTYPES"]

_LLAMA = dict(norm="rms", activation="swiglu", positions="rope", tie_weights=False,
              qkv_bias=False, out_bias=False, mlp_bias=False)
# GPT-2 sizes (Radford et al., 2019): vocab 50,257, context 1,024; and the shapes of
# three modern decoders, as their published config.json files give them (LLaMA-7B:
# Touvron et al., 2023; Llama 3 8B; Qwen2 0.5B): for parameter counts and benches
GPT_PRESETS: Dict[str, Dict[str, Any]] = {
    "gpt2": dict(vocab=50257, context=1024, width=768, heads=12, layers=12),
    "gpt2-medium": dict(vocab=50257, context=1024, width=1024, heads=16, layers=24),
    "gpt2-large": dict(vocab=50257, context=1024, width=1280, heads=20, layers=36),
    "gpt2-xl": dict(vocab=50257, context=1024, width=1600, heads=25, layers=48),
    "llama-7b": dict(vocab=32000, context=2048, width=4096, heads=32, layers=32, d_ff=11008,
                     eps=1e-6, **_LLAMA),
    "llama3-8b": dict(vocab=128256, context=8192, width=4096, heads=32, layers=32, kv_heads=8,
                      d_ff=14336, rope_theta=500000.0, **_LLAMA),
    "qwen2-0.5b": dict(vocab=151936, context=32768, width=896, heads=14, layers=24, kv_heads=2,
                       d_ff=4864, eps=1e-6, rope_theta=1000000.0,
                       **dict(_LLAMA, tie_weights=True, qkv_bias=True)),
}


NORMS = ("layer", "rms", "none")
PLACEMENTS = ("pre", "post")
ACTIVATIONS = ("gelu_tanh", "gelu", "relu", "swiglu")
POSITIONS = ("learned", "rope")
DTYPES = ("float32", "bfloat16", "q8_0")

_C_NORM = {"layer": lib.BC_NORM_LAYER, "rms": lib.BC_NORM_RMS, "none": lib.BC_NORM_NONE}
_C_PLACE = {"pre": lib.BC_PLACE_PRE, "post": lib.BC_PLACE_POST}
_C_ACT = {"gelu_tanh": lib.BC_ACT_GELU_TANH, "gelu": lib.BC_ACT_GELU, "relu": lib.BC_ACT_RELU,
          "swiglu": lib.BC_ACT_SWIGLU}
_C_POS = {"learned": lib.BC_POS_LEARNED, "rope": lib.BC_POS_ROPE}
_C_DTYPE = {"float32": lib.BC_DTYPE_F32, "bfloat16": lib.BC_DTYPE_BF16, "q8_0": lib.BC_DTYPE_Q8_0}


@dataclass(frozen=True)
class GPTConfig:
    """The model's architecture (dropout is a training concern and absent).

    The defaults beyond the sizes are chapter 6's GPT-2: LayerNorm before each
    sublayer, learned positions, GELU-tanh, an MLP of 4 * width, as many K/V
    heads as query heads, every bias, a tied head.

    Parameters
    ----------
    vocab, context, width, heads, layers : int >= 1
        V, C (the longest sequence, rows of a learned position table), D, H, L.
    eps : float >= 0
        The norms' epsilon.
    tie_weights : bool
        The head is ``token.weight``.
    norm : {"layer", "rms", "none"}
        LayerNorm (gain and shift), RMSNorm (gain) or none (chapter 24, exercise 2).
    placement : {"pre", "post"}
        Norm before each sublayer (GPT-2, Llama) or after each sum (2017); a
        post-norm model has no final norm.
    activation : {"gelu_tanh", "gelu", "relu", "swiglu"}
        The MLP: ``down(act(up(x)))``, or ``down(silu(gate(x)) * up(x))``.
    d_ff : int >= 1 or None
        The MLP's width F (None: 4 * width).
    positions : {"learned", "rope"}
        A learned position table, or rotary embeddings on q and k (Hugging
        Face's rotate-half layout) with base ``rope_theta``.
    rope_theta : float > 0
    kv_heads : int >= 1 or None
        Key/value heads KV, dividing ``heads`` (grouped-query attention; 1 is
        multi-query); None: ``heads``.
    head_dim : int >= 1 or None
        Dh (None: width / heads). The attention output is H * Dh wide.
    residual : bool
        Add each sublayer's input back (chapter 24, exercise 1 turns it off).
    qkv_bias, out_bias, mlp_bias : bool
        Biases on the q/k/v projection, the output projection, the MLP.
    """

    vocab: int = 50257
    context: int = 1024
    width: int = 768
    heads: int = 12
    layers: int = 12
    eps: float = 1e-5
    tie_weights: bool = True
    norm: str = "layer"
    placement: str = "pre"
    activation: str = "gelu_tanh"
    d_ff: Optional[int] = None
    positions: str = "learned"
    rope_theta: float = 10000.0
    kv_heads: Optional[int] = None
    head_dim: Optional[int] = None
    residual: bool = True
    qkv_bias: bool = True
    out_bias: bool = True
    mlp_bias: bool = True

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen)
        for name in ("vocab", "context", "width", "heads", "layers"):
            set_(name, as_size(getattr(self, name), f"GPTConfig.{name}"))
        for name in ("d_ff", "kv_heads", "head_dim"):
            if getattr(self, name) is not None:
                set_(name, as_size(getattr(self, name), f"GPTConfig.{name}"))
        set_("eps", check_eps(self.eps, "GPTConfig.eps"))
        for name in ("tie_weights", "residual", "qkv_bias", "out_bias", "mlp_bias"):
            set_(name, as_flag(getattr(self, name), f"GPTConfig.{name}"))
        for name, allowed in (("norm", NORMS), ("placement", PLACEMENTS),
                              ("activation", ACTIVATIONS), ("positions", POSITIONS)):
            as_choice(getattr(self, name), f"GPTConfig.{name}", allowed)
        theta = as_real(self.rope_theta, "GPTConfig.rope_theta", 0.0)
        if not 0.0 < theta <= float(np.finfo(np.float32).max):
            raise BlockcValueError(f"GPTConfig.rope_theta must be > 0 in float32, got {self.rope_theta!r}")
        set_("rope_theta", theta)
        if self.head_dim is None and self.width % self.heads:
            raise BlockcValueError(f"GPTConfig: width {self.width} is not divisible by heads {self.heads}")
        kv = self.heads if self.kv_heads is None else self.kv_heads
        if kv > self.heads or self.heads % kv:
            raise BlockcValueError(f"GPTConfig.kv_heads must divide heads={self.heads}, got {kv}")
        if self.positions == "rope" and self.head_dim_ % 2:
            raise BlockcValueError(f"GPTConfig: rotary embeddings need an even head_dim, got {self.head_dim_}")
        # the C structs, one per storage dtype, built once from the checked fields
        set_("_cs", {})
        st = lib.bc_gpt_config_check(self._c())
        if st == lib.BC_EOVERFLOW:
            raise BlockcValueError(f"GPTConfig: a model of vocab={self.vocab}, context={self.context}, "
                                   f"width={self.width}, layers={self.layers} exceeds 2**40 parameters")
        check(st, "GPTConfig")

    def __reduce__(self):  # pickle / copy by the fields; the C structs are rebuilt
        return (type(self), tuple(getattr(self, f.name) for f in fields(self)))

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "GPTConfig":
        """A model shape by name: GPT-2's 'gpt2', 'gpt2-medium', 'gpt2-large',
        'gpt2-xl'; the modern decoders 'llama-7b', 'llama3-8b', 'qwen2-0.5b' (their
        published shapes, for counts and benches: blockc has none of their weights).

        Parameters
        ----------
        name : str
            The preset.
        **overrides
            Fields to change (``layers=2``, ``tie_weights=False``, ...).

        Returns
        -------
        GPTConfig

        Raises
        ------
        TypeError
            A name that is not a str, or an override that is not a field.
        ValueError
            An unknown preset, or an override the config refuses.

        Examples
        --------
        >>> GPTConfig.preset("gpt2", layers=2).layers
        2
        """
        as_choice(name, "preset", sorted(GPT_PRESETS))
        unknown = sorted(set(overrides) - {f.name for f in fields(cls)})
        if unknown:
            raise BlockcTypeError(f"GPTConfig has no field {unknown[0]!r}")
        kw = dict(GPT_PRESETS[name])
        kw.update(overrides)
        return cls(**kw)

    @classmethod
    def from_block(cls, block: Any, vocab: int, context: int, layers: int = 1,
                   positions: str = "rope", rope_theta: float = 10000.0,
                   kv_heads: Optional[int] = None, bias: bool = False,
                   tie_weights: bool = True) -> "GPTConfig":
        """A decoder-only stack of the book's block: ``layers`` copies of the block
        ``block`` describes, a token embedding before them and a head after.

        Chapter 24's block (RMSNorm, no biases, GELU-tanh or exercise 6's gated
        MLP) becomes a whole model: the causal mask is what makes the stack a
        decoder (every GPT layer applies it, whatever ``block.causal`` says), and
        the positions come from rotary embeddings (or a learned table).

        Parameters
        ----------
        block : blockc.BlockConfig
            d_model, n_heads, d_ff, norm, placement, activation, residual, eps.
        vocab, context : int >= 1
        layers : int >= 1, optional
        positions : {"rope", "learned"}, optional
        rope_theta : float > 0, optional
        kv_heads : int, optional
            K/V heads (None: as many as query heads).
        bias : bool, optional
            Biases on every projection (the book's block has none).
        tie_weights : bool, optional

        Returns
        -------
        GPTConfig

        Raises
        ------
        TypeError
            ``block`` is not a BlockConfig.
        ValueError
            A size or option the config refuses (named).

        Examples
        --------
        >>> from blockc import BlockConfig
        >>> cfg = GPTConfig.from_block(BlockConfig(), vocab=16, context=8, layers=2)
        >>> (cfg.width, cfg.heads, cfg.d_ff, cfg.norm, cfg.positions)
        (8, 2, 32, 'rms', 'rope')
        """
        from .engine import BlockConfig
        if type(block) is not BlockConfig:
            raise BlockcTypeError(f"block must be a blockc.BlockConfig, got {type(block).__name__}")
        bias = as_flag(bias, "bias")
        return cls(vocab=vocab, context=context, width=block.d_model, heads=block.n_heads,
                   layers=layers, eps=block.eps, tie_weights=tie_weights, norm=block.norm,
                   placement=block.placement, activation=block.activation, d_ff=block.d_ff,
                   positions=positions, rope_theta=rope_theta, kv_heads=kv_heads,
                   residual=block.residual, qkv_bias=bias, out_bias=bias, mlp_bias=bias)

    @classmethod
    def from_hf(cls, config: Union[Mapping[str, Any], str, "os.PathLike[str]"]) -> "GPTConfig":
        """The config of a Hugging Face model: its ``config.json`` (a dict, the file or
        its directory).

        Parameters
        ----------
        config : mapping or path

        Returns
        -------
        GPTConfig

        Raises
        ------
        ValueError
            A model_type blockc does not run, or a field whose value would compute
            differently (named, with the value): never loaded silently.

        Examples
        --------
        >>> GPTConfig.from_hf({"model_type": "gpt2", "n_layer": 2}).layers
        2
        """
        from . import hf
        return hf.config_from_hf(config)

    def to_hf(self) -> Dict[str, Any]:
        """This config as a Hugging Face ``config.json`` dict.

        Returns
        -------
        dict

        Raises
        ------
        ValueError
            An architecture no Hugging Face family blockc writes has.

        Examples
        --------
        >>> GPTConfig.preset("gpt2", layers=2).to_hf()["n_layer"]
        2
        """
        from . import hf
        return hf.config_to_hf(self)

    @property
    def head_dim_(self) -> int:
        """Dh, resolved (``head_dim`` or width / heads)."""
        return self.head_dim if self.head_dim is not None else self.width // self.heads

    @property
    def kv_heads_(self) -> int:
        """KV, resolved (``kv_heads`` or heads)."""
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def d_ff_(self) -> int:
        """F, resolved (``d_ff`` or 4 * width)."""
        return self.d_ff if self.d_ff is not None else 4 * self.width

    def _c(self, dtype: str = "float32"):
        """The ``bc_gpt_config *`` for the C library, for weights stored as ``dtype``."""
        c = self._cs.get(dtype)
        if c is None:
            c = ffi.new("bc_gpt_config *", dict(
                vocab=self.vocab, context=self.context, width=self.width, heads=self.heads,
                layers=self.layers, kv_heads=self.kv_heads_, head_dim=self.head_dim_,
                d_ff=self.d_ff_, norm=_C_NORM[self.norm], placement=_C_PLACE[self.placement],
                activation=_C_ACT[self.activation], positions=_C_POS[self.positions],
                rope_theta=self.rope_theta, residual=int(self.residual),
                qkv_bias=int(self.qkv_bias), out_bias=int(self.out_bias),
                mlp_bias=int(self.mlp_bias), eps=self.eps, tie_weights=int(self.tie_weights),
                dtype=_C_DTYPE[dtype]))
            self._cs[dtype] = c
        return c


def _as_config(cfg: Any) -> GPTConfig:
    if type(cfg) is not GPTConfig:
        raise BlockcTypeError(f"cfg must be a blockc.GPTConfig, got {type(cfg).__name__}")
    return cfg


def gpt_parameter_count(cfg: GPTConfig) -> int:
    """Parameters of an actual model built in C: the elements of its layout.

    Parameters
    ----------
    cfg : GPTConfig

    Returns
    -------
    int
        The count, a tied head counted once.

    Raises
    ------
    TypeError
        A non-GPTConfig ``cfg``.

    Examples
    --------
    >>> gpt_parameter_count(GPTConfig.preset("gpt2"))
    124439808
    """
    n = ffi.new("size_t *")
    check(lib.bc_gpt_param_count(n, _as_config(cfg)._c()), "gpt_parameter_count")
    return int(n[0])


def gpt_parameter_formula(cfg: GPTConfig) -> int:
    """The closed form of the parameter count.

    For chapter 6's GPT-2 it is N = VD + CD + L(12D^2 + 13D) + 2D (+ VD untied);
    in general VD (+ CD, learned positions) + L * (per block) + the final norm
    (+ VD untied), a block being D(H + 2KV)Dh + DHDh (q/k/v and output) +
    (2 or 3)DF (the MLP, 3 with a gate) + the biases and norm parameters it has.

    Parameters
    ----------
    cfg : GPTConfig

    Returns
    -------
    int

    Raises
    ------
    TypeError
        A non-GPTConfig ``cfg``.

    Examples
    --------
    >>> gpt_parameter_formula(GPTConfig.preset("gpt2-medium"))
    354823168
    """
    cfg = _as_config(cfg)
    v, c, d, f = cfg.vocab, cfg.context, cfg.width, cfg.d_ff_
    qkv, att = (cfg.heads + 2 * cfg.kv_heads_) * cfg.head_dim_, cfg.heads * cfg.head_dim_
    gated = cfg.activation == "swiglu"
    per_norm = {"layer": 2 * d, "rms": d, "none": 0}[cfg.norm]
    block = d * qkv + d * att + (3 if gated else 2) * d * f + 2 * per_norm
    block += cfg.qkv_bias * qkv + cfg.out_bias * d + cfg.mlp_bias * ((2 if gated else 1) * f + d)
    n = v * d + (c * d if cfg.positions == "learned" else 0) + cfg.layers * block
    n += per_norm if cfg.placement == "pre" else 0
    return n if cfg.tie_weights else n + v * d


class _Tensor(NamedTuple):
    """Where a tensor of the layout lives: byte offset and size, storage, shape."""
    offset: int
    nbytes: int
    dtype: int      # BC_DTYPE_* of its storage
    packed: bool    # a packed matrix (else float32, row-major)
    shape: Tuple[int, ...]


def _layout(cfg: GPTConfig, dtype: str = "float32") -> Dict[str, _Tensor]:
    """name -> _Tensor for every tensor of the buffer, from C, in order."""
    c = cfg._c(dtype)
    count = ffi.new("size_t *")
    check(lib.bc_gpt_tensor_count(count, c), "layout")
    name = ffi.new("char[]", lib.BC_GPT_NAME_MAX)
    off, nb, ndim, shape = (ffi.new("size_t *"), ffi.new("size_t *"), ffi.new("size_t *"),
                            ffi.new("size_t[2]"))
    dt, packed = ffi.new("int *"), ffi.new("int *")
    out: Dict[str, _Tensor] = {}
    for i in range(int(count[0])):
        check(lib.bc_gpt_tensor_info(name, lib.BC_GPT_NAME_MAX, off, nb, dt, packed, ndim, shape,
                                     c, i), "layout")
        shp = (int(shape[0]), int(shape[1])) if ndim[0] == 2 else (int(shape[0]),)
        out[ffi.string(name).decode()] = _Tensor(int(off[0]), int(nb[0]), int(dt[0]),
                                                 bool(packed[0]), shp)
    return out


def _to_numpy(name: str, value: Any) -> np.ndarray:
    """A state-dict entry (NumPy array-like or torch tensor) as a NumPy array of reals."""
    a = to_numpy(value, f"state dict entry {name!r}")
    if a.dtype.kind not in "fiu":
        raise BlockcValueError(f"state dict entry {name!r} must hold real numbers, got dtype {a.dtype}")
    return a


def _check_ids(ids: Any, cfg: GPTConfig, start: int) -> np.ndarray:
    """ids as a new C-contiguous int32 or int64 (B, T) array (the two types C reads;
    int32 stays int32), validated against the model. Always a copy: the ids are
    small, and the copy is what was checked, whatever another thread does to the
    caller's array meanwhile."""
    a = np.array(to_numpy(ids, "ids"), copy=True)  # checked below, then used: this copy
    if a.dtype.kind not in "iu" or a.dtype == np.bool_:
        raise BlockcTypeError(f"ids must be integers, got dtype {a.dtype}")
    if a.ndim != 2:
        raise BlockcValueError(f"ids must have shape (B, T), got shape {a.shape}")
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise BlockcValueError(f"ids must have B >= 1 and T >= 1, got shape {a.shape}")
    if a.size:
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi >= cfg.vocab:
            raise BlockcValueError(f"ids must lie in [0, {cfg.vocab}), got values in [{lo}, {hi}]")
    if start + a.shape[1] > cfg.context:
        raise BlockcValueError(f"Sequence exceeds the model's context of {cfg.context} "
                               f"(positions {start}..{start + a.shape[1] - 1})")
    return np.ascontiguousarray(a, dtype=np.int32 if a.dtype == np.int32 else np.int64)


class KVCache:
    """Keys and values of every layer for ``batch`` sequences of up to ``capacity`` tokens.

    Made by :meth:`GPT.new_cache`; ``m(ids, cache=cache)`` appends to it. A cache
    belongs to the model that made it (another model, even of the same config,
    refuses it, and so does every model a cache constructed directly) and its state
    cannot be replaced from Python: ``k`` and ``v`` (layers, batch, capacity,
    kv_heads * head_dim; the keys after the rotary embedding) are read-only copies,
    ``length`` (positions filled), ``lengths`` (per sequence: generation with
    prompts of different lengths fills them unevenly), ``batch`` and ``capacity``
    read-only properties; :meth:`reset` empties it. Calls that share one cache take
    turns (a lock), so two threads appending to it never write the same positions.
    """
    __slots__ = ("_cfg", "_owner", "_k", "_v", "_batch", "_capacity", "_lengths", "_lock",
                 "_row_floats")

    def __init__(self, cfg: GPTConfig, batch: int, capacity: int, _owner: object = None):
        cfg = _as_config(cfg)
        batch = as_size(batch, "batch")
        capacity = as_size(capacity, "capacity")
        if capacity > cfg.context:
            raise BlockcValueError("Requested cache exceeds the context limit "
                                   f"({capacity} > {cfg.context})")
        n = ffi.new("size_t *")
        check(lib.bc_gpt_cache_size(n, cfg._c(), batch, capacity), "new_cache")
        # the C layout: (batch, layers, kv heads, R, head dim), R = capacity rounded up
        # to whole tiles of 64 positions; keys transposed tile by tile (bc_gpt.h)
        rows = int(n[0]) // (cfg.layers * batch * cfg.kv_heads_ * cfg.head_dim_)
        shape = (batch, cfg.layers, cfg.kv_heads_, rows, cfg.head_dim_)
        self._cfg, self._owner = cfg, _owner
        self._k = np.zeros(shape, dtype=np.float32)
        self._v = np.zeros(shape, dtype=np.float32)
        self._row_floats = int(n[0]) // batch
        self._batch, self._capacity = batch, capacity
        self._lengths = np.zeros(batch, dtype=np.uintp)  # size_t, written by C under the lock
        self._lock = threading.Lock()

    @property
    def k(self) -> np.ndarray:
        """The keys (layers, batch, capacity, kv_heads * head_dim) after the rotary
        embedding: a read-only copy (the cache keeps them transposed in tiles)."""
        B, L, G, R, dh = self._k.shape
        tiles = self._k.reshape(B, L, G, R // 64, dh, 64).transpose(0, 1, 2, 3, 5, 4)
        return _logical(tiles.reshape(B, L, G, R, dh), self._capacity)

    @property
    def v(self) -> np.ndarray:
        """The values (layers, batch, capacity, kv_heads * head_dim): a read-only copy."""
        return _logical(self._v, self._capacity)

    @property
    def batch(self) -> int:
        return self._batch

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def length(self) -> int:
        """Positions filled (the largest over the sequences, when they differ)."""
        return int(self._lengths.max())

    @property
    def lengths(self) -> Tuple[int, ...]:
        """Positions filled, per sequence."""
        return tuple(int(n) for n in self._lengths)

    @property
    def cfg(self) -> GPTConfig:
        return self._cfg

    def reset(self) -> None:
        """Forget every stored position (length 0).

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> c = m.new_cache(1, 8); _ = m(np.array([[1, 2]]), cache=c); c.length
        2
        >>> c.reset(); c.length
        0
        """
        with self._lock:
            self._lengths[:] = 0

    def truncate(self, seq: int, n: int) -> None:
        """Forget sequence ``seq``'s positions from ``n`` on: it continues at position ``n``.

        Parameters
        ----------
        seq : int in [0, batch)
        n : int in [0, lengths[seq]]

        Raises
        ------
        TypeError
            Indices that are not integers.
        ValueError
            ``seq`` outside the batch, or ``n`` past the sequence's length.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> c = m.new_cache(2, 8); _ = m(np.array([[1, 2, 3], [4, 5, 6]]), cache=c)
        >>> c.truncate(1, 1); c.lengths
        (3, 1)
        """
        seq = as_int(seq, "seq", 0, self._batch - 1)
        n = as_int(n, "n", 0)
        with self._lock:
            if n > int(self._lengths[seq]):
                raise BlockcValueError(f"n must be at most sequence {seq}'s length "
                                       f"{int(self._lengths[seq])}, got {n}")
            check(lib.bc_gpt_cache_truncate(self._c(), self._cfg._c(), seq, n), "truncate")

    def copy_prefix(self, dst: int, src: int, n: int) -> None:
        """Copy sequence ``src``'s first ``n`` positions into sequence ``dst``, whose
        length becomes ``n``: ``dst`` then continues with the bits ``src`` would
        (a conversation's next turn reuses its earlier keys and values instead of
        recomputing them).

        Parameters
        ----------
        dst, src : int in [0, batch)
        n : int in [0, lengths[src]]

        Raises
        ------
        TypeError
            Indices that are not integers.
        ValueError
            An index outside the batch, or ``n`` past ``src``'s length.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> c = m.new_cache(2, 8); _ = m(np.array([[1, 2, 3], [4, 5, 6]]), cache=c)
        >>> c.copy_prefix(1, 0, 2); c.lengths
        (3, 2)
        """
        dst = as_int(dst, "dst", 0, self._batch - 1)
        src = as_int(src, "src", 0, self._batch - 1)
        n = as_int(n, "n", 0)
        with self._lock:
            if n > int(self._lengths[src]):
                raise BlockcValueError(f"n must be at most sequence {src}'s length "
                                       f"{int(self._lengths[src])}, got {n}")
            check(lib.bc_gpt_cache_copy(self._c(), self._cfg._c(), dst, src, n), "copy_prefix")

    def view(self, start: int, stop: int) -> "KVCache":
        """Sequences ``start`` .. ``stop - 1`` as a cache of their own, sharing this
        one's memory, lengths and lock: a model run on the view reads and appends to
        those sequences alone (a server decodes its active slots without touching
        the rest).

        Parameters
        ----------
        start : int in [0, batch)
        stop : int in (start, batch]

        Returns
        -------
        KVCache

        Raises
        ------
        TypeError
            Indices that are not integers.
        ValueError
            An empty or out-of-range span.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> c = m.new_cache(3, 8); _ = m(np.array([[1], [2]]), cache=c.view(1, 3)); c.lengths
        (0, 1, 1)
        """
        start = as_int(start, "start", 0, self._batch - 1)
        stop = as_int(stop, "stop", start + 1, self._batch)
        out = object.__new__(KVCache)
        out._cfg, out._owner, out._lock = self._cfg, self._owner, self._lock
        out._k, out._v = self._k[start:stop], self._v[start:stop]
        out._lengths = self._lengths[start:stop]
        out._row_floats, out._batch, out._capacity = self._row_floats, stop - start, self._capacity
        return out

    def _c(self, row: Optional[int] = None):
        """The C struct over the whole cache, or over sequence ``row`` alone (batch 1)."""
        lengths = ffi.from_buffer("size_t[]", self._lengths)
        if row is None:
            return ffi.new("bc_gpt_cache *", dict(k=fptr(self._k), v=fptr(self._v), batch=self._batch,
                                                  capacity=self._capacity, lengths=lengths))
        off = row * self._row_floats
        return ffi.new("bc_gpt_cache *", dict(k=fptr(self._k) + off, v=fptr(self._v) + off,
                                              batch=1, capacity=self._capacity,
                                              lengths=lengths + row))

    def __repr__(self):
        return f"KVCache(batch={self._batch}, capacity={self._capacity}, length={self.length})"


def _logical(a: np.ndarray, capacity: int) -> np.ndarray:
    """(batch, layers, kv heads, R, head dim) -> a read-only (layers, batch, capacity,
    kv heads * head dim) copy."""
    B, L, G, R, dh = a.shape
    out = np.ascontiguousarray(a[:, :, :, :capacity].transpose(1, 0, 3, 2, 4)).reshape(
        L, B, capacity, G * dh)
    out.setflags(write=False)
    return out


class GPT:
    """The model, its parameters in one buffer (matrices packed in :attr:`dtype`), computed in C."""

    def __init__(self, cfg: GPTConfig, params: Optional[npt.ArrayLike] = None,
                 dtype: str = "float32"):
        """A model of config ``cfg`` storing its matrices as ``dtype``, on ``params``: the raw
        parameter buffer (1-D uint8 of :attr:`nbytes`, as :attr:`params` returns; adopted
        without a copy when it is one), or all zeros when None."""
        self._cfg = _as_config(cfg)
        self._dtype = as_choice(dtype, "dtype", DTYPES)
        self._c = self._cfg._c(self._dtype)
        self._layout = _layout(self._cfg, self._dtype)
        n = ffi.new("size_t *")
        check(lib.bc_gpt_param_bytes(n, self._c), "GPT")
        nbytes = int(n[0])
        if params is None:
            params = np.zeros(nbytes, dtype=np.uint8)
        else:
            params = to_numpy(params, "params")
            if params.dtype != np.uint8 or params.shape != (nbytes,):
                raise BlockcValueError(f"params must be a uint8 array of shape ({nbytes},), "
                                       f"got {params.dtype} {params.shape}")
            if not params.flags.c_contiguous or params.ctypes.data % 64:
                params = _aligned_copy(params)
        self._params = params
        self._cptr = ffi.from_buffer("char[]", params, False)  # made once: params is never replaced
        self._tls = threading.local()  # each thread's workspace
        self._special_ids: Dict[str, Any] = {}  # config.json's bos/eos/pad ids, when loaded

    # ---- construction -------------------------------------------------------

    @classmethod
    def random(cls, cfg: GPTConfig, seed: Optional[int] = 0, dtype: str = "float32") -> "GPT":
        """GPT-2 initialisation: weights N(0, 0.02), biases 0, norm gains 1, shifts 0.

        Parameters
        ----------
        cfg : GPTConfig
        seed : int >= 0 or None, optional
            Seed of ``numpy.random.default_rng``, drawn from tensor by tensor in
            state-dict order (None: fresh entropy).
        dtype : {"float32", "bfloat16", "q8_0"}, optional
            How the matrices are stored (the same float32 draws, then rounded
            or quantised).

        Returns
        -------
        GPT

        Raises
        ------
        TypeError
            A non-GPTConfig ``cfg`` or a non-integer seed.
        ValueError
            A negative seed or an unknown dtype.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m(np.array([[1, 2, 3]])).shape
        (1, 3, 16)
        """
        seed = None if seed is None else as_int(seed, "seed", 0)
        m = cls(cfg, dtype=dtype)
        rng = np.random.default_rng(seed)
        for name, t in m._layout.items():
            if len(t.shape) == 2:  # Linear and Embedding weights
                m._write(name, rng.standard_normal(t.shape, dtype=np.float32) * np.float32(0.02))
            elif name.endswith(".weight"):  # the 1-D weights are norm gains
                m._vector(name)[:] = 1.0
            # biases stay zero
        return m

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, Any], cfg: GPTConfig,
                        dtype: str = "float32") -> "GPT":
        """Load a state dict keyed as the chapter's PyTorch ``GPT.state_dict()``.

        Parameters
        ----------
        sd : mapping of str to array_like
            NumPy arrays, array-likes or torch tensors (any real dtype, bfloat16
            included; converted to float32, then stored as ``dtype``). Each entry is
            read once.
        cfg : GPTConfig
            Every key and shape is checked against it. For a tied config,
            ``head.weight`` may be present (PyTorch lists it) and must equal
            ``token.weight`` bit for bit.
        dtype : {"float32", "bfloat16", "q8_0"}, optional
            How the matrices are stored.

        Returns
        -------
        GPT
            A new model owning a copy of the weights.

        Raises
        ------
        TypeError
            ``sd`` is not a mapping or ``cfg`` not a GPTConfig.
        ValueError
            A missing, unexpected or mis-shaped tensor (named), or a tied head
            that differs from the token embedding.

        Examples
        --------
        >>> cfg = GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1)
        >>> m = GPT.random(cfg, seed=1)
        >>> m2 = GPT.from_state_dict(m.state_dict(), cfg)
        >>> bool((m2.params == m.params).all())
        True
        """
        cfg = _as_config(cfg)
        m = cls(cfg, dtype=dtype)
        m._load(sd, strict=True)
        return m

    def load_state_dict(self, sd: Mapping[str, Any], strict: bool = True) -> None:
        """Write weights into this model (the matrices packed again in :attr:`dtype`).

        Parameters
        ----------
        sd : mapping of str to array_like
            As :meth:`from_state_dict`, keyed like :meth:`state_dict`.
        strict : bool, optional
            Every tensor must be present (the default); False writes the ones given.

        Raises
        ------
        TypeError, ValueError
            As :meth:`from_state_dict`; with ``strict``, a missing tensor.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> sd = m.state_dict(); sd["blocks.0.up.weight"][:] = 0
        >>> m.load_state_dict(sd); float(abs(m.state_dict()["blocks.0.up.weight"]).max())
        0.0
        """
        self._load(sd, as_flag(strict, "strict"))

    def _load(self, sd: Mapping[str, Any], strict: bool) -> None:
        if not isinstance(sd, Mapping):
            raise BlockcTypeError(f"state dict must be a mapping, got {type(sd).__name__}")
        sd = dict(sd)  # each entry read once: what is checked is what is loaded
        cfg, expected = self._cfg, self._layout
        keys = set(sd.keys())
        tied_head = cfg.tie_weights and "head.weight" in keys
        missing = [k for k in expected if k not in keys]
        unexpected = sorted(str(k) for k in keys
                            if k not in expected and not (tied_head and k == "head.weight"))
        if missing and strict:
            raise BlockcValueError(f"state dict is missing {missing}")
        if unexpected:
            raise BlockcValueError(f"state dict has unexpected keys {unexpected}")
        arrays = {}
        for name, t in expected.items():
            if name not in sd:
                continue
            a = _to_numpy(name, sd[name])
            if a.shape != t.shape:
                raise BlockcValueError(f"state dict entry {name!r} has shape {a.shape}, expected {t.shape}")
            arrays[name] = a
        if tied_head:
            head = _to_numpy("head.weight", sd["head.weight"])
            shape = expected["token.weight"].shape
            if head.shape != shape:
                raise BlockcValueError(f"state dict entry 'head.weight' has shape {head.shape}, "
                                       f"expected {shape}")
            token = arrays["token.weight"] if "token.weight" in arrays else self._read("token.weight")
            if not _same_bits(head, token):
                raise BlockcValueError("state dict entry 'head.weight' differs from 'token.weight' "
                                       "but the config ties them (tie_weights=True)")
        for name, a in arrays.items():
            self._write(name, a)

    def astype(self, dtype: str) -> "GPT":
        """This model with its matrices stored as ``dtype``: a new model.

        Parameters
        ----------
        dtype : {"float32", "bfloat16", "q8_0"}
            From float32 the weights are rounded (bfloat16) or quantised (q8_0,
            llama.cpp's rule); from a lower precision they are the weights this
            model computes with, exactly, stored anew.

        Returns
        -------
        GPT

        Raises
        ------
        ValueError
            An unknown dtype.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=32, heads=2, layers=1))
        >>> m.astype("q8_0").dtype, m.astype("q8_0").nbytes < m.nbytes
        ('q8_0', True)
        """
        dtype = as_choice(dtype, "dtype", DTYPES)
        m = GPT(self._cfg, dtype=dtype)
        m._special_ids = dict(getattr(self, "_special_ids", {}))
        for name in self._layout:
            m._write(name, self._read(name))
        return m

    @classmethod
    def from_pretrained(cls, path: Union[str, "os.PathLike[str]"], dtype: Optional[str] = None
                        ) -> "GPT":
        """Load a Hugging Face checkpoint directory (as ``transformers`` writes it).

        ``config.json`` and ``model.safetensors``, or shards listed by
        ``model.safetensors.index.json``; names with or without the
        ``transformer.`` prefix; float32, float16 or bfloat16 tensors (read zero-copy
        from a memory map, no torch needed). The Hub is never contacted and pickle
        checkpoints (``pytorch_model.bin``) are refused.

        Parameters
        ----------
        path : str or os.PathLike
            The directory.
        dtype : {"float32", "bfloat16", "q8_0"}, optional
            How blockc stores the matrices; None: bfloat16 for a bfloat16 checkpoint,
            else float32.

        Returns
        -------
        GPT

        Raises
        ------
        ValueError
            A config field blockc does not compute (named, with its value), a file or
            tensor that is missing, malformed or mis-shaped (named, with the file).
        OSError
            A file that cannot be read.

        Examples
        --------
        >>> import tempfile
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> with tempfile.TemporaryDirectory() as d:
        ...     m.save_pretrained(d)
        ...     m2 = GPT.from_pretrained(d)
        >>> bool((m2.params == m.params).all())
        True
        """
        from . import hf
        if dtype is not None:
            as_choice(dtype, "dtype", DTYPES)
        return hf.load_dir(path, dtype)

    def save_pretrained(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Write this model as a Hugging Face checkpoint directory.

        ``config.json`` and ``model.safetensors`` that ``transformers`` loads
        (``GPT2LMHeadModel.from_pretrained(path)`` for GPT-2's architecture):
        float32 weights, a bfloat16 model's matrices as bfloat16, a q8_0 model's
        dequantised weights as float32.

        Parameters
        ----------
        path : str or os.PathLike
            The directory (made if missing; the two files are replaced).

        Raises
        ------
        ValueError
            An architecture no checkpoint format blockc writes has.
        OSError
            The directory cannot be written.

        Examples
        --------
        >>> import os, tempfile
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> with tempfile.TemporaryDirectory() as d:
        ...     m.save_pretrained(d)
        ...     sorted(os.listdir(d))
        ['config.json', 'model.safetensors']
        """
        from . import hf
        hf.save_dir(self, os.fspath(path))

    # ---- tensors in the buffer ----------------------------------------------

    def _vector(self, name: str) -> np.ndarray:
        """A float32 (unpacked) tensor of the buffer, as a writable view."""
        t = self._layout[name]
        return self._params[t.offset:t.offset + t.nbytes].view(np.float32).reshape(t.shape)

    def _read(self, name: str) -> np.ndarray:
        """Tensor ``name`` as float32: a view for vectors and the position table, an
        unpacked copy for the matrices."""
        t = self._layout[name]
        if not t.packed:
            return self._vector(name)
        out = np.empty(t.shape, np.float32)
        check(lib.bc_unpack(fptr(out), self._cptr + t.offset, t.nbytes, t.dtype, t.shape[0],
                            t.shape[1]), f"state dict entry {name!r}")
        return out

    def _write(self, name: str, a: np.ndarray, transposed: bool = False) -> None:
        """Store the float32-convertible array ``a`` as tensor ``name``: of the tensor's
        shape, or (transposed) of its transpose, as GPT-2's Conv1D stores weights (a
        packed matrix is packed from it directly, without a transposed copy)."""
        t = self._layout[name]
        if not (type(a) is np.ndarray and a.dtype == np.float32 and a.flags.c_contiguous
                and a.flags.aligned):
            a = np.ascontiguousarray(a, dtype=np.float32)
        if not t.packed:
            self._vector(name)[...] = a.T if transposed else a
            return
        rows, cols = t.shape
        rs, cs = (1, rows) if transposed else (cols, 1)
        st = lib.bc_pack_strided(self._cptr + t.offset, t.nbytes, cptr(a), rs, cs, t.dtype, rows, cols)
        if st == lib.BC_EVALUE:
            raise BlockcValueError(f"state dict entry {name!r}: q8_0 needs finite weights of "
                                   "magnitude <= 65504 * 127")
        check(st, f"state dict entry {name!r}")

    # ---- access -------------------------------------------------------------

    @property
    def config(self) -> GPTConfig:
        return self._cfg

    @property
    def dtype(self) -> str:
        """How the matrices are stored: "float32", "bfloat16" or "q8_0"."""
        return self._dtype

    @property
    def params(self) -> np.ndarray:
        """The whole parameter buffer: 1-D uint8, writable, shared with the model (the
        layout is the C library's: the packed matrices and the float32 vectors)."""
        return self._params

    @property
    def nbytes(self) -> int:
        """Bytes of the parameter buffer."""
        return int(self._params.size)

    def num_parameters(self) -> int:
        """The model's parameter count: a tied head counted once.

        Returns
        -------
        int

        Examples
        --------
        >>> GPT(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1)).num_parameters()
        1080
        """
        return gpt_parameter_count(self._cfg)

    def state_dict(self, keep_tied: bool = False) -> Dict[str, np.ndarray]:
        """The parameters, in the chapter's order and names, as float32 arrays.

        Vectors (biases, norm gains and shifts) and the position table are
        writable views of the parameter buffer; the matrices, stored packed, are
        unpacked into new arrays (a quantised model's dequantised weights, exactly
        the ones it computes with): change them with :meth:`load_state_dict`.

        Parameters
        ----------
        keep_tied : bool, optional
            A tied model lists ``token.weight`` only, unless this adds ``head.weight``
            (the same array), as PyTorch's ``state_dict()`` does.

        Returns
        -------
        dict of str to numpy.ndarray

        Raises
        ------
        TypeError
            A non-bool ``keep_tied``.

        Examples
        --------
        >>> m = GPT(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> list(m.state_dict())[:3]
        ['token.weight', 'position.weight', 'blocks.0.ln1.weight']
        """
        keep_tied = as_flag(keep_tied, "keep_tied")
        out = {name: self._read(name) for name in self._layout}
        if keep_tied and self._cfg.tie_weights:
            out["head.weight"] = out["token.weight"]
        return out

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        """An empty KV cache, owned by this model.

        Parameters
        ----------
        batch : int >= 1
            Sequences.
        capacity : int in [1, context]
            Positions each sequence can hold.

        Returns
        -------
        KVCache

        Raises
        ------
        TypeError
            Sizes that are not integers.
        ValueError
            Sizes below 1, or a capacity past the context.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m.new_cache(2, 8)
        KVCache(batch=2, capacity=8, length=0)
        """
        return KVCache(self._cfg, batch, capacity, _owner=self)

    # ---- forward ------------------------------------------------------------

    def _forward(self, ids: Any, cache: Optional[KVCache], last_only: bool,
                 want_hidden: bool, want_logits: bool = True, row: Optional[int] = None):
        """(logits, hidden); with a cache, under its lock (one call at a time per cache:
        the lengths C reads are the ones checked here, and it advances them). ``row``:
        run on that sequence of the cache alone (ids of batch 1)."""
        if cache is None:
            return self._run(ids, None, 0, last_only, want_hidden, want_logits, None)
        self._own(cache)
        with cache._lock:
            lengths = cache._lengths if row is None else cache._lengths[row:row + 1]
            return self._run(ids, cache, int(lengths.max()), last_only, want_hidden,
                             want_logits, row)

    def _own(self, cache: Any) -> None:
        if not isinstance(cache, KVCache):
            raise BlockcTypeError(f"cache must be a blockc.KVCache, got {type(cache).__name__}")
        if cache._owner is not self:
            raise BlockcValueError("cache belongs to another model: make it with this "
                                   "model's new_cache()")

    def _run(self, ids: Any, cache: Optional[KVCache], start: int, last_only: bool,
             want_hidden: bool, want_logits: bool, row: Optional[int]):
        cfg = self._cfg
        a = _check_ids(ids, cfg, start)
        b, t = a.shape
        c_cache = ffi.NULL
        if cache is not None:
            rows = cache._batch if row is None else 1
            if rows != b:
                raise BlockcValueError(f"ids have batch {b} but the cache holds {rows} rows")
            if start + t > cache._capacity:
                raise BlockcValueError(f"Sequence exceeds the cache's capacity of {cache._capacity} "
                                       f"(length {start} + {t} tokens)")
            c_cache = cache._c(row)
        n = ffi.new("size_t *")
        check(lib.bc_gpt_workspace_size(n, self._c, b, t, c_cache), "GPT forward")
        work, buf = thread_buffer(self._tls, int(n[0]))
        logits = None
        if want_logits:
            logits = np.empty((b, 1 if last_only else t, cfg.vocab), dtype=np.float32)
        hidden = np.empty((cfg.layers, b, t, cfg.width), dtype=np.float32) if want_hidden else None
        wide = a.dtype == np.int64
        ids_ptr = ffi.from_buffer("int64_t[]" if wide else "int32_t[]", a, require_writable=False)
        check(lib.bc_gpt_forward(fptr(logits) if logits is not None else ffi.NULL,
                                 fptr(hidden) if hidden is not None else ffi.NULL,
                                 c_cache, self._cptr, self._c, ids_ptr,
                                 lib.BC_IDS_INT64 if wide else lib.BC_IDS_INT32, b, t,
                                 int(last_only), work, buf.size),
              "GPT forward")
        return logits, hidden

    def hidden_states(self, ids: npt.ArrayLike) -> np.ndarray:
        """The residual stream after every block, without the head.

        Parameters
        ----------
        ids : array_like of int, shape (B, T)

        Returns
        -------
        numpy.ndarray
            (layers, B, T, width) float32.

        Raises
        ------
        TypeError
            Ids that are not integers.
        ValueError
            Ids out of range or a sequence past the context.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=3))
        >>> m.hidden_states(np.array([[1, 2]])).shape
        (3, 1, 2, 8)
        """
        return self._forward(ids, None, False, True, want_logits=False)[1]

    def __call__(self, ids: Any, cache: Optional[KVCache] = None, return_hidden: bool = False,
                 *, last_only: bool = False) -> Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]:
        """The logits of every position (or of the last).

        Parameters
        ----------
        ids : array_like of int, shape (B, T)
            Token ids in [0, vocab) (copied, then checked).
        cache : KVCache, optional
            This model's cache: positions continue after ``cache.length`` and the
            new keys and values are appended. Without one, positions are 0..T-1.
        return_hidden : bool, optional
            Also return the residual stream after every block.
        last_only : bool, optional
            Only the last position's logits, (B, 1, vocab): a prompt's prefill, without
            the head's work and memory for the other positions (the same bits as the
            last row of the whole).

        Returns
        -------
        logits : numpy.ndarray
            (B, T, vocab) float32; (B, 1, vocab) with ``last_only``.
        hidden : numpy.ndarray
            (layers, B, T, width) float32, with ``return_hidden`` only.

        Raises
        ------
        TypeError
            Ids that are not integers, a non-bool flag, a cache of another type.
        ValueError
            Ids out of range, a sequence past the context or the cache's capacity,
            a cache of another model.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m(np.array([[1, 2, 3]])).shape
        (1, 3, 16)
        """
        return_hidden = as_flag(return_hidden, "return_hidden")
        logits, hidden = self._forward(ids, cache, as_flag(last_only, "last_only"), return_hidden)
        return (logits, hidden) if return_hidden else logits

    forward = __call__

    # ---- training -----------------------------------------------------------

    def loss(self, ids: npt.ArrayLike, targets: npt.ArrayLike, ignore_index: int = -100) -> float:
        """The mean next-token cross-entropy of the logits of ``ids`` against ``targets``.

        The head and the loss run a block of rows at a time: the (B, T, vocab)
        logits are never held.

        Parameters
        ----------
        ids : array_like of int, shape (B, T)
        targets : array_like of int, shape (B, T)
            The token each position should predict (usually ``ids`` shifted by
            one), in [0, vocab), or ``ignore_index`` for a position that does not
            count (PyTorch's convention, -100 by default).
        ignore_index : int, optional

        Returns
        -------
        float
            The mean over the positions that count (NaN when none does).

        Raises
        ------
        TypeError
            Ids or targets that are not integers.
        ValueError
            Values out of range, shapes that differ, a sequence past the context,
            weights that are not float32.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> loss = m.loss([[1, 2, 3]], [[2, 3, -100]])      # two positions count
        >>> bool(abs(loss - np.log(16)) < 0.1)               # random init: about log(vocab)
        True
        """
        from . import train
        return train.loss(self, ids, targets, ignore_index)

    def grad(self, ids: npt.ArrayLike, targets: npt.ArrayLike, ignore_index: int = -100
             ) -> Tuple[float, Dict[str, np.ndarray]]:
        """The loss (see :meth:`loss`) and its gradient with respect to every parameter.

        Parameters
        ----------
        ids, targets : array_like of int, shape (B, T)
        ignore_index : int, optional

        Returns
        -------
        loss : float
        grads : dict of str to numpy.ndarray
            New float32 arrays keyed and shaped like :meth:`state_dict` (a tied
            head's gradient is part of ``token.weight``'s).

        Raises
        ------
        TypeError, ValueError
            As :meth:`loss`.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> loss, grads = m.grad([[1, 2, 3]], [[2, 3, 4]])
        >>> grads["blocks.0.up.weight"].shape
        (32, 8)
        """
        from . import train
        return train.grad(self, ids, targets, ignore_index)

    def train_step(self, ids: npt.ArrayLike, targets: npt.ArrayLike, opt: Any,
                   ignore_index: int = -100, max_grad_norm: Optional[float] = None) -> float:
        """One training step: the loss and its gradient, then ``opt``'s update, in C
        with one workspace (kept for the next step of the same shape).

        Parameters
        ----------
        ids, targets : array_like of int, shape (B, T)
        opt : blockc.AdamW
            This model's optimizer.
        ignore_index : int, optional
        max_grad_norm : float > 0, optional
            Clip the gradient to this global L2 norm first.

        Returns
        -------
        float
            The loss before the update.

        Raises
        ------
        TypeError, ValueError
            As :meth:`loss`; an optimizer of another model.

        Examples
        --------
        >>> from blockc import AdamW
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> opt = AdamW(m, lr=1e-2)
        >>> losses = [m.train_step([[1, 2, 3, 4]], [[2, 3, 4, 5]], opt) for _ in range(30)]
        >>> bool(losses[-1] < losses[0])
        True
        """
        from . import train
        return train.train_step(self, ids, targets, opt, ignore_index, max_grad_norm)

    # ---- generation ---------------------------------------------------------

    def generate(self, ids: Any, max_new_tokens: int, temperature: float = 0.0,
                 top_k: Optional[int] = None, seed: Optional[int] = None,
                 use_cache: bool = True, *, top_p: Optional[float] = None,
                 min_p: Optional[float] = None, repetition_penalty: Optional[float] = None,
                 eos_token_id: Union[int, Sequence[int], None] = None,
                 pad_token_id: Optional[int] = None, stop: Optional[Sequence[str]] = None,
                 tokenizer: Any = None,
                 streamer: Optional[Callable[[np.ndarray], None]] = None
                 ) -> Union[np.ndarray, List[np.ndarray]]:
        """Extend the prompts by up to ``max_new_tokens`` tokens each.

        Parameters
        ----------
        ids : array_like of int, shape (B, T), or a sequence of 1-D prompts
            The prompts. A list of 1-D prompts of different lengths is a ragged
            batch, returned as a list: every prompt gets exactly the tokens it would
            get alone (each row's
            logits are the bits it gets alone; the decoding steps still run the rows
            together through one KV cache, each at its own position).
        max_new_tokens : int >= 0
        temperature : float >= 0, optional
            0 (the default) takes the argmax (first maximum on ties); otherwise a
            sample from softmax(logits / temperature). However small a positive
            temperature is, it gives the greedy limit, never NaN probabilities.
        top_k : int >= 1, optional
            Sample among the logits >= the ``top_k``-th largest.
        seed : int >= 0, optional
            Seed of ``numpy.random.default_rng``: reproducible samples, whatever the
            thread count. Every row draws from its own generator seeded with it, so
            a row's samples are the ones it gets alone (identical prompts in one
            batch then sample alike: give them different seeds in separate calls).
        use_cache : bool, optional
            Run the prompt once and feed each new token alone through a KV cache
            (the default); False recomputes the whole sequence for every token
            (same tokens, slower).
        top_p : float in (0, 1], optional
            Sample among the fewest most likely tokens whose probabilities sum past
            ``top_p`` (nucleus sampling).
        min_p : float in [0, 1], optional
            Sample among the tokens at least ``min_p`` times as likely as the most
            likely one.
        repetition_penalty : float > 0, optional
            Divide the positive logits (multiply the negative ones) of every token
            already in the row, prompt included (1: none).
        eos_token_id : int or sequence of int, optional
            Stop a row when it emits one (kept in the output); the batch stops when
            every row has. Later positions of a finished row hold ``pad_token_id``.
        pad_token_id : int, optional
            Filler after a row's end (default: the first eos_token_id).
        stop : sequence of str, optional
            Stop a row when its generated text contains one of these (needs
            ``tokenizer``; the token completing it is kept).
        tokenizer : blockc.text.Tokenizer, optional
            For ``stop``.
        streamer : callable, optional
            Called with each step's new tokens, an int64 array (B,), as they are made.

        The options apply in Hugging Face's order (:mod:`blockc.generation`):
        repetition penalty, temperature, top-k, top-p, min-p.

        Returns
        -------
        numpy.ndarray or list of numpy.ndarray
            (B, T + n) int64: the prompt, then the new tokens (n = max_new_tokens, or
            fewer when every row stopped); for a ragged batch, a list of 1-D arrays,
            each its prompt and its own tokens up to its end.

        Raises
        ------
        TypeError, ValueError
            As :meth:`__call__`; a prompt that with max_new_tokens - 1 would pass the
            context; an option out of range; ``stop`` without a tokenizer.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m.generate(np.array([[1, 2]]), 3).shape
        (1, 5)
        >>> [len(r) for r in m.generate([[1, 2, 3], [4]], 2)]
        [5, 3]
        """
        run = self._generation(ids, max_new_tokens, temperature, top_k, seed, use_cache, top_p,
                               min_p, repetition_penalty, eos_token_id, pad_token_id, stop,
                               tokenizer)
        rows, steps = run.rows, []
        for toks in run:
            steps.append(toks)
            if streamer is not None:
                streamer(toks.copy())
        new = np.stack(steps, axis=1) if steps else np.zeros((len(rows), 0), np.int64)
        if not run.ragged:
            return np.concatenate([np.stack(rows), new], axis=1)
        return [np.concatenate([r, new[i, :run.ends[i]]]) for i, r in enumerate(rows)]

    def stream(self, ids: Any, max_new_tokens: int, **options: Any) -> Iterator[int]:
        """The new tokens of one prompt, yielded one by one as they are made.

        Parameters
        ----------
        ids : array_like of int, shape (T,) or (1, T)
        max_new_tokens : int >= 0
        **options
            As :meth:`generate` (temperature, top_k, top_p, min_p,
            repetition_penalty, eos_token_id, stop, tokenizer, seed, use_cache).

        Yields
        ------
        int
            Each new token; after an end token or a stop string, nothing more.

        Raises
        ------
        TypeError, ValueError
            As :meth:`generate`, or ids of more than one row.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> list(m.stream([1, 2], 3)) == list(m.generate(np.array([[1, 2]]), 3)[0, 2:])
        True
        """
        a = to_numpy(ids, "ids")
        if a.ndim == 2 and a.shape[0] != 1:
            raise BlockcValueError(f"stream takes one prompt, got ids of shape {a.shape}")
        known = {"temperature", "top_k", "seed", "use_cache", "top_p", "min_p",
                 "repetition_penalty", "eos_token_id", "pad_token_id", "stop", "tokenizer"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise BlockcTypeError(f"stream() got an unexpected option {unknown[0]!r}")
        o = dict(temperature=0.0, top_k=None, seed=None, use_cache=True, top_p=None, min_p=None,
                 repetition_penalty=None, eos_token_id=None, pad_token_id=None, stop=None,
                 tokenizer=None)
        o.update(options)
        for toks in self._generation(a.reshape(1, -1), max_new_tokens, **o):
            yield int(toks[0])  # a finished row ends the iteration

    def _generation(self, ids, max_new_tokens, temperature=0.0, top_k=None, seed=None,
                    use_cache=True, top_p=None, min_p=None, repetition_penalty=None,
                    eos_token_id=None, pad_token_id=None, stop=None, tokenizer=None):
        """A _Generation: every argument checked, before any work."""
        cfg = self._cfg
        # a sequence of 1-D prompts of different lengths is a ragged batch
        ragged = (isinstance(ids, (list, tuple)) and len(ids) > 0
                  and all(np.ndim(r) == 1 for r in ids) and len({len(r) for r in ids}) > 1)
        if ragged:
            rows = [_check_ids(np.asarray(r)[None], cfg, 0)[0].astype(np.int64) for r in ids]
        else:
            a = _check_ids(ids, cfg, 0)
            rows = [r.astype(np.int64) for r in a]
        n = as_int(max_new_tokens, "max_new_tokens", 0)
        opts = SamplingOptions(temperature, top_k, top_p, min_p, repetition_penalty, cfg.vocab)
        if seed is not None:
            seed = as_int(seed, "seed", 0)
        use_cache = as_flag(use_cache, "use_cache")
        if eos_token_id is None:
            eos = ()
        elif isinstance(eos_token_id, (list, tuple)):
            eos = tuple(as_int(e, "eos_token_id", 0, cfg.vocab - 1) for e in eos_token_id)
        else:
            eos = (as_int(eos_token_id, "eos_token_id", 0, cfg.vocab - 1),)
        pad = eos[0] if pad_token_id is None and eos else pad_token_id
        pad = 0 if pad is None else as_int(pad, "pad_token_id", 0, cfg.vocab - 1)
        if stop is not None:
            if isinstance(stop, str) or not all(isinstance(x, str) and x for x in stop):
                raise BlockcTypeError("stop must be a sequence of non-empty str")
            if tokenizer is None:
                raise BlockcValueError("stop strings need a tokenizer (to read the text)")
            stop = tuple(stop)
        longest = max(len(r) for r in rows)
        if n and longest + n - 1 > cfg.context:
            raise BlockcValueError(f"Sequence exceeds the model's context of {cfg.context} "
                                   f"({longest} prompt + {n} new tokens)")
        # every row its own generator: with a seed, a row draws what it draws alone
        rngs = [np.random.default_rng(seed) for _ in rows]
        return _Generation(self, rows, ragged, n, opts, rngs, use_cache, eos, pad, stop, tokenizer)

    def __repr__(self):
        c = self._cfg
        return (f"GPT(vocab={c.vocab}, context={c.context}, width={c.width}, heads={c.heads}, "
                f"layers={c.layers}, tie_weights={c.tie_weights}, dtype={self._dtype!r}, "
                f"parameters={self.num_parameters():,})")


class _Generation:
    """The steps of one generation: iterating yields each step's new tokens (B,);
    ``ends[i]`` counts row i's tokens (its end included), ``done[i]`` tells it ended."""

    def __init__(self, m, rows, ragged, n, opts, rngs, use_cache, eos, pad, stop, tokenizer):
        self.m, self.rows, self.ragged, self.n, self.opts, self.rngs = m, rows, ragged, n, opts, rngs
        self.use_cache, self.eos, self.pad, self.stop, self.tok = use_cache, eos, pad, stop, tokenizer
        self.ends = [0] * len(rows)
        self.done = [False] * len(rows)

    def _logits(self, seqs, cache, first):
        """The last position's logits (B, V) of every row: the whole prompts the first
        time (one by one when their lengths differ), then the last tokens."""
        m, b = self.m, len(seqs)
        if not self.use_cache:
            return np.concatenate([m._forward(s[None], None, True, False)[0][:, 0] for s in seqs])
        if first:
            if len({len(s) for s in seqs}) == 1:
                return m._forward(np.stack(seqs), cache, True, False)[0][:, 0]
            return np.concatenate([m._forward(s[None], cache, True, False, row=i)[0][:, 0]
                                   for i, s in enumerate(seqs)])
        return m._forward(np.array([[s[-1]] for s in seqs]), cache, True, False)[0][:, 0]

    def __iter__(self) -> Iterator[np.ndarray]:
        m, b = self.m, len(self.rows)
        if self.n == 0:
            return
        seqs = [r.copy() for r in self.rows]
        cache = None
        if self.use_cache:
            cache = m.new_cache(b, max(len(r) for r in self.rows) + self.n - 1)
        texts = [""] * b
        for step in range(self.n):
            logits = self._logits(seqs, cache, step == 0)
            toks = next_tokens(logits, self.opts, self.rngs,
                               seqs if self.opts.repetition_penalty else None)
            for i in range(b):
                if self.done[i]:
                    toks[i] = self.pad
                    continue
                self.ends[i] += 1
                if int(toks[i]) in self.eos:
                    self.done[i] = True
                elif self.stop is not None:
                    new = seqs[i][len(self.rows[i]):]
                    texts[i] = self.tok.decode(np.append(new, toks[i]))
                    if any(x in texts[i] for x in self.stop):
                        self.done[i] = True
            seqs = [np.append(s, t) for s, t in zip(seqs, toks)]
            yield toks
            if all(self.done):
                return


def _aligned_copy(a: np.ndarray) -> np.ndarray:
    """A 64-byte aligned, C-contiguous copy of the 1-D uint8 array a."""
    raw = np.empty(a.size + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    out = raw[start:start + a.size]
    out[...] = a
    return out


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """The two tensors hold the same float32 values bit for bit (NaN equals itself)."""
    a32 = np.ascontiguousarray(a, dtype=np.float32)
    b32 = np.ascontiguousarray(b, dtype=np.float32)
    return a32.shape == b32.shape and np.array_equal(a32.view(np.uint32), b32.view(np.uint32))
