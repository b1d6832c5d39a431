"""The whole GPT of chapter 6 (GPT-2 architecture), running in C.

::

    cfg = blockc.GPTConfig(vocab=50257, context=1024, width=768, heads=12, layers=12)
    m = blockc.GPT.random(cfg, seed=0)        # N(0, 0.02) weights, zero biases, unit gains
    m = blockc.GPT.from_state_dict(sd, cfg)   # NumPy arrays or torch tensors
    logits = m(ids)                           # ids (B, T) ints -> (B, T, vocab) float32
    out = m.generate(ids, max_new_tokens=20)  # greedy; temperature/top_k/seed to sample

All parameters live in one contiguous float32 buffer whose layout (size and the
offset of every tensor) the C library computes; :meth:`GPT.state_dict` returns
NumPy views into it, keyed as the chapter's PyTorch ``GPT.state_dict()``.

Tied head and ``head.weight``: PyTorch's ``state_dict()`` of the tied chapter
model lists ``head.weight`` too (the same tensor as ``token.weight`` under a
second name). :meth:`GPT.from_state_dict` therefore accepts ``head.weight`` for
a tied config when it equals ``token.weight`` exactly (anything else is a
``ValueError``), and :meth:`GPT.state_dict` of a tied model lists only
``token.weight`` (pass ``keep_tied=True`` to also get ``head.weight``, a view of
the same memory, e.g. for ``torch``'s ``load_state_dict(strict=True)``).

Computation is float32 throughout; float64 parameters are converted to float32.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, fields
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

from ._args import as_choice, as_flag, as_int, as_real, as_size, check_eps, to_numpy
from ._native import check, cptr, ffi, fptr, lib, thread_buffer
from ._errors import BlockcTypeError, BlockcValueError

__all__ = ["GPTConfig", "GPT", "KVCache", "gpt_parameter_count", "gpt_parameter_formula",
           "GPT_PRESETS"]

# GPT-2 sizes (Radford et al., 2019): vocab 50,257, context 1,024.
GPT_PRESETS: Dict[str, Dict[str, int]] = {
    "gpt2": dict(width=768, heads=12, layers=12),
    "gpt2-medium": dict(width=1024, heads=16, layers=24),
    "gpt2-large": dict(width=1280, heads=20, layers=36),
    "gpt2-xl": dict(width=1600, heads=25, layers=48),
}


@dataclass(frozen=True)
class GPTConfig:
    """The chapter's GPT configuration (dropout is a training concern and absent).

    vocab V, context C (longest sequence, rows of the position table), width D,
    heads H (D % H == 0), layers L, LayerNorm eps, tie_weights (head = token.weight).
    """

    vocab: int = 50257
    context: int = 1024
    width: int = 768
    heads: int = 12
    layers: int = 12
    eps: float = 1e-5
    tie_weights: bool = True

    def __post_init__(self):
        for name in ("vocab", "context", "width", "heads", "layers"):
            object.__setattr__(self, name, as_size(getattr(self, name), f"GPTConfig.{name}"))
        if self.width % self.heads:
            raise BlockcValueError(f"GPTConfig: width {self.width} is not divisible by heads {self.heads}")
        object.__setattr__(self, "eps", check_eps(self.eps, "GPTConfig.eps"))
        object.__setattr__(self, "tie_weights", as_flag(self.tie_weights, "GPTConfig.tie_weights"))
        # the C struct, built once from the checked fields (the config is frozen)
        object.__setattr__(self, "_cs", ffi.new("bc_gpt_config *", dict(
            vocab=self.vocab, context=self.context, width=self.width, heads=self.heads,
            layers=self.layers, eps=self.eps, tie_weights=int(self.tie_weights))))
        st = lib.bc_gpt_config_check(self._cs)
        if st == lib.BC_EOVERFLOW:
            raise BlockcValueError(f"GPTConfig: a model of vocab={self.vocab}, context={self.context}, "
                                   f"width={self.width}, layers={self.layers} exceeds 2**40 parameters")
        check(st, "GPTConfig")

    def __reduce__(self):  # pickle / copy by the fields; the C struct is rebuilt
        return (type(self), tuple(getattr(self, f.name) for f in fields(self)))

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "GPTConfig":
        """A GPT-2 size by name: 'gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl'.

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
        kw = dict(vocab=50257, context=1024, **GPT_PRESETS[name])
        kw.update(overrides)
        return cls(**kw)

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def _c(self):
        """The ``bc_gpt_config *`` for the C library (built once)."""
        return self._cs


def _as_config(cfg: Any) -> GPTConfig:
    if type(cfg) is not GPTConfig:
        raise BlockcTypeError(f"cfg must be a blockc.GPTConfig, got {type(cfg).__name__}")
    return cfg


def gpt_parameter_count(cfg: GPTConfig) -> int:
    """Parameters of an actual model built in C: the size of its parameter buffer.

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
    """The chapter's closed form N = VD + CD + L(12D^2 + 13D) + 2D (+ VD untied).

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
    v, c, d, layers = cfg.vocab, cfg.context, cfg.width, cfg.layers
    n = v * d + c * d + layers * (12 * d * d + 13 * d) + 2 * d
    return n if cfg.tie_weights else n + v * d


def _layout(cfg: GPTConfig) -> Dict[str, Tuple[int, Tuple[int, ...]]]:
    """name -> (offset, shape) for every tensor of the buffer, from C, in order."""
    c = cfg._c()
    count = ffi.new("size_t *")
    check(lib.bc_gpt_tensor_count(count, c), "layout")
    name = ffi.new("char[]", lib.BC_GPT_NAME_MAX)
    off, ndim, shape = ffi.new("size_t *"), ffi.new("size_t *"), ffi.new("size_t[2]")
    out: Dict[str, Tuple[int, Tuple[int, ...]]] = {}
    for i in range(int(count[0])):
        check(lib.bc_gpt_tensor_info(name, lib.BC_GPT_NAME_MAX, off, ndim, shape, c, i), "layout")
        shp = (int(shape[0]), int(shape[1])) if ndim[0] == 2 else (int(shape[0]),)
        out[ffi.string(name).decode()] = (int(off[0]), shp)
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
    refuses it, and so does every model a cache constructed directly) and its state cannot be replaced from Python: ``k`` and ``v``
    (layers, batch, capacity, width) are read-only views, ``length`` (positions
    filled), ``batch`` and ``capacity`` read-only properties; :meth:`reset`
    empties it. Calls that share one cache take turns (a lock), so two threads
    appending to it never write the same positions.
    """
    __slots__ = ("_cfg", "_owner", "_k", "_v", "_batch", "_capacity", "_length", "_lock")

    def __init__(self, cfg: GPTConfig, batch: int, capacity: int, _owner: object = None):
        cfg = _as_config(cfg)
        batch = as_size(batch, "batch")
        capacity = as_size(capacity, "capacity")
        if capacity > cfg.context:
            raise BlockcValueError("Requested cache exceeds the context limit "
                                   f"({capacity} > {cfg.context})")
        n = ffi.new("size_t *")
        check(lib.bc_gpt_cache_size(n, cfg._c(), batch, capacity), "new_cache")
        shape = (cfg.layers, batch, capacity, cfg.width)
        self._cfg, self._owner = cfg, _owner
        self._k = np.zeros(shape, dtype=np.float32)
        self._v = np.zeros(shape, dtype=np.float32)
        self._batch, self._capacity, self._length = batch, capacity, 0
        self._lock = threading.Lock()

    @property
    def k(self) -> np.ndarray:
        """The keys (layers, batch, capacity, width), a read-only view."""
        return _readonly(self._k)

    @property
    def v(self) -> np.ndarray:
        """The values (layers, batch, capacity, width), a read-only view."""
        return _readonly(self._v)

    @property
    def batch(self) -> int:
        return self._batch

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def length(self) -> int:
        """Positions filled (the same for every row)."""
        return self._length

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
            self._length = 0

    def __repr__(self):
        return f"KVCache(batch={self._batch}, capacity={self._capacity}, length={self._length})"


def _readonly(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.setflags(write=False)
    return v


class GPT:
    """The chapter's GPT, its parameters in one contiguous float32 buffer, computed in C."""

    def __init__(self, cfg: GPTConfig, params: Optional[npt.ArrayLike] = None):
        """A model of config ``cfg`` on ``params`` (1-D float32 buffer, adopted without copy
        when it is already C-contiguous float32 of the right size); zeros when None."""
        self._cfg = _as_config(cfg)
        self._layout = _layout(self._cfg)
        n = gpt_parameter_count(self._cfg)
        if params is None:
            params = np.zeros(n, dtype=np.float32)
        else:
            params = np.ascontiguousarray(to_numpy(params, "params"), dtype=np.float32)
            if params.shape != (n,):
                raise BlockcValueError(f"params must have shape ({n},), got {params.shape}")
        self._params = params
        self._cptr = cptr(params)     # the C view, made once (params is never replaced)
        self._tls = threading.local()  # each thread's workspace

    # ---- construction -------------------------------------------------------

    @classmethod
    def random(cls, cfg: GPTConfig, seed: Optional[int] = 0) -> "GPT":
        """GPT-2 initialisation: weights N(0, 0.02), biases 0, LayerNorm gains 1, shifts 0.

        Parameters
        ----------
        cfg : GPTConfig
        seed : int >= 0 or None, optional
            Seed of ``numpy.random.default_rng``, drawn from tensor by tensor in
            state-dict order (None: fresh entropy).

        Returns
        -------
        GPT

        Raises
        ------
        TypeError
            A non-GPTConfig ``cfg`` or a non-integer seed.
        ValueError
            A negative seed.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m(np.array([[1, 2, 3]])).shape
        (1, 3, 16)
        """
        seed = None if seed is None else as_int(seed, "seed", 0)
        m = cls(cfg)
        rng = np.random.default_rng(seed)
        for name, (off, shape) in m._layout.items():
            view = m._params[off:off + int(np.prod(shape))]
            if name.endswith(".weight") and len(shape) == 2:  # Linear and Embedding weights
                view[:] = rng.standard_normal(view.size, dtype=np.float32) * np.float32(0.02)
            elif name.endswith(".weight"):  # the 1-D weights are LayerNorm gains
                view[:] = 1.0
            # biases stay zero
        return m

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, Any], cfg: GPTConfig) -> "GPT":
        """Load a state dict keyed as the chapter's PyTorch ``GPT.state_dict()``.

        Parameters
        ----------
        sd : mapping of str to array_like
            NumPy arrays, array-likes or torch tensors (any real dtype, bfloat16
            included; stored as float32). Each entry is read once.
        cfg : GPTConfig
            Every key and shape is checked against it. For a tied config,
            ``head.weight`` may be present (PyTorch lists it) and must equal
            ``token.weight`` bit for bit.

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
        if not isinstance(sd, Mapping):
            raise BlockcTypeError(f"state dict must be a mapping, got {type(sd).__name__}")
        sd = dict(sd)  # each entry read once: what is checked is what is loaded
        m = cls(cfg)
        expected = m._layout
        keys = set(sd.keys())
        missing = [k for k in expected if k not in keys]
        tied_head = cfg.tie_weights and "head.weight" in keys
        unexpected = sorted(str(k) for k in keys
                            if k not in expected and not (tied_head and k == "head.weight"))
        if missing:
            raise BlockcValueError(f"state dict is missing {missing}")
        if unexpected:
            raise BlockcValueError(f"state dict has unexpected keys {unexpected}")
        arrays = {}
        for name, (off, shape) in expected.items():
            a = _to_numpy(name, sd[name])
            if a.shape != shape:
                raise BlockcValueError(f"state dict entry {name!r} has shape {a.shape}, expected {shape}")
            arrays[name] = a
        if tied_head:
            head = _to_numpy("head.weight", sd["head.weight"])
            if head.shape != expected["token.weight"][1]:
                raise BlockcValueError(f"state dict entry 'head.weight' has shape {head.shape}, "
                                       f"expected {expected['token.weight'][1]}")
            if not _same_bits(head, arrays["token.weight"]):
                raise BlockcValueError("state dict entry 'head.weight' differs from 'token.weight' "
                                       "but the config ties them (tie_weights=True)")
        for name, (off, shape) in expected.items():
            m._params[off:off + arrays[name].size] = arrays[name].reshape(-1)
        return m

    # ---- access -------------------------------------------------------------

    @property
    def config(self) -> GPTConfig:
        return self._cfg

    @property
    def params(self) -> np.ndarray:
        """The whole parameter buffer (1-D float32, writable, shared with the model)."""
        return self._params

    def num_parameters(self) -> int:
        """Size of the parameter buffer: a tied head counted once.

        Returns
        -------
        int

        Examples
        --------
        >>> GPT(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1)).num_parameters()
        1080
        """
        return int(self._params.size)

    def state_dict(self, keep_tied: bool = False) -> Dict[str, np.ndarray]:
        """Writable NumPy views into the parameter buffer, in the chapter's order and names.

        Parameters
        ----------
        keep_tied : bool, optional
            A tied model lists ``token.weight`` only, unless this adds ``head.weight``
            (a view of the same memory), as PyTorch's ``state_dict()`` does.

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
        out = {name: self._params[off:off + int(np.prod(shape))].reshape(shape)
               for name, (off, shape) in self._layout.items()}
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
                 want_hidden: bool, want_logits: bool = True):
        if cache is None:
            return self._run(ids, None, 0, last_only, want_hidden, want_logits)[:2]
        if not isinstance(cache, KVCache):
            raise BlockcTypeError(f"cache must be a blockc.KVCache, got {type(cache).__name__}")
        if cache._owner is not self:
            raise BlockcValueError("cache belongs to another model: make it with this "
                                   "model's new_cache()")
        with cache._lock:  # one call at a time per cache; the length read once, here
            start = cache._length
            out = self._run(ids, cache, start, last_only, want_hidden, want_logits)
            cache._length = out[2]
        return out[0], out[1]

    def _run(self, ids: Any, cache: Optional[KVCache], start: int, last_only: bool,
             want_hidden: bool, want_logits: bool):
        cfg = self._cfg
        a = _check_ids(ids, cfg, start)
        b, t = a.shape
        c_cache = ffi.NULL
        if cache is not None:
            if cache._batch != b:
                raise BlockcValueError(f"ids have batch {b} but the cache holds {cache._batch} rows")
            if start + t > cache._capacity:
                raise BlockcValueError(f"Sequence exceeds the cache's capacity of {cache._capacity} "
                                       f"(length {start} + {t} tokens)")
            c_cache = ffi.new("bc_gpt_cache *", dict(
                k=fptr(cache._k), v=fptr(cache._v), batch=cache._batch,
                capacity=cache._capacity, length=start))
        n = ffi.new("size_t *")
        check(lib.bc_gpt_workspace_size(n, cfg._c(), b, t, c_cache), "GPT forward")
        work, buf = thread_buffer(self._tls, int(n[0]))
        logits = None
        if want_logits:
            logits = np.empty((b, 1 if last_only else t, cfg.vocab), dtype=np.float32)
        hidden = np.empty((cfg.layers, b, t, cfg.width), dtype=np.float32) if want_hidden else None
        wide = a.dtype == np.int64
        ids_ptr = ffi.from_buffer("int64_t[]" if wide else "int32_t[]", a, require_writable=False)
        check(lib.bc_gpt_forward(fptr(logits) if logits is not None else ffi.NULL,
                                 fptr(hidden) if hidden is not None else ffi.NULL,
                                 c_cache, self._cptr, cfg._c(), ids_ptr,
                                 lib.BC_IDS_INT64 if wide else lib.BC_IDS_INT32, b, t,
                                 int(last_only), work, buf.size),
              "GPT forward")
        return logits, hidden, start + t

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

    def __call__(self, ids: Any, cache: Optional[KVCache] = None, return_hidden: bool = False
                 ) -> Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]:
        """The logits of every position.

        Parameters
        ----------
        ids : array_like of int, shape (B, T)
            Token ids in [0, vocab) (copied, then checked).
        cache : KVCache, optional
            This model's cache: positions continue after ``cache.length`` and the
            new keys and values are appended. Without one, positions are 0..T-1.
        return_hidden : bool, optional
            Also return the residual stream after every block.

        Returns
        -------
        logits : numpy.ndarray
            (B, T, vocab) float32.
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
        logits, hidden = self._forward(ids, cache, False, return_hidden)
        return (logits, hidden) if return_hidden else logits

    forward = __call__

    # ---- generation ---------------------------------------------------------

    def generate(self, ids: Any, max_new_tokens: int, temperature: float = 0.0,
                 top_k: Optional[int] = None, seed: Optional[int] = None,
                 use_cache: bool = True) -> np.ndarray:
        """Extend ids (B, T) by ``max_new_tokens`` tokens.

        Parameters
        ----------
        ids : array_like of int, shape (B, T)
            The prompt.
        max_new_tokens : int >= 0
        temperature : float >= 0, optional
            0 (the default) takes the argmax (first maximum on ties); otherwise a
            sample from softmax(logits / temperature). However small a positive
            temperature is, it gives the greedy limit, never NaN probabilities.
        top_k : int >= 1, optional
            Sample among the ``top_k`` largest logits only.
        seed : int >= 0, optional
            Seed of ``numpy.random.default_rng`` (reproducible samples).
        use_cache : bool, optional
            Run the prompt once and feed each new token alone through a KV cache
            (the default); False recomputes the whole sequence for every token
            (same tokens, slower).

        Returns
        -------
        numpy.ndarray
            (B, T + max_new_tokens) int64: the prompt, then the new tokens.

        Raises
        ------
        TypeError, ValueError
            As :meth:`__call__`; T + max_new_tokens - 1 past the context.

        Examples
        --------
        >>> m = GPT.random(GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1))
        >>> m.generate(np.array([[1, 2]]), 3).shape
        (1, 5)
        """
        cfg = self._cfg
        a = _check_ids(ids, cfg, 0)
        max_new_tokens = as_int(max_new_tokens, "max_new_tokens", 0)
        temperature = as_real(temperature, "temperature", 0.0)
        if top_k is not None:
            top_k = min(as_int(top_k, "top_k", 1), cfg.vocab)
        if seed is not None:
            seed = as_int(seed, "seed", 0)
        use_cache = as_flag(use_cache, "use_cache")
        b, t = a.shape
        if max_new_tokens == 0:
            return a.astype(np.int64)  # a new array
        if t + max_new_tokens - 1 > cfg.context:
            raise BlockcValueError(f"Sequence exceeds the model's context of {cfg.context} "
                                   f"({t} prompt + {max_new_tokens} new tokens)")
        rng = np.random.default_rng(seed)
        out = np.empty((b, t + max_new_tokens), dtype=np.int64)
        out[:, :t] = a
        cache = self.new_cache(b, t + max_new_tokens - 1) if use_cache else None
        feed = a
        for i in range(max_new_tokens):
            if use_cache:
                logits, _ = self._forward(feed, cache, True, False)
            else:
                logits, _ = self._forward(out[:, :t + i], None, True, False)
            nxt = self._pick(logits[:, 0, :], temperature, top_k, rng)
            out[:, t + i] = nxt
            feed = nxt[:, None]
        return out

    @staticmethod
    def _pick(logits: np.ndarray, temperature: float, top_k: Optional[int],
              rng: np.random.Generator) -> np.ndarray:
        """Next token per row of logits (B, V): argmax, or a temperature/top-k sample."""
        if temperature == 0.0:
            return np.argmax(logits, axis=-1).astype(np.int64)
        if not np.isfinite(logits).all():
            raise BlockcValueError("cannot sample: the logits hold inf or NaN (the model's "
                                   "weights do?); temperature=0 takes the argmax")
        z = logits.astype(np.float64)
        if top_k is not None and top_k < z.shape[-1]:
            kth = np.partition(z, -top_k, axis=-1)[:, -top_k][:, None]
            z = np.where(z < kth, -np.inf, z)
        # shifted first, so z <= 0 and the largest is exactly 0: dividing by any
        # positive temperature, however small, gives no NaN (the ties of the
        # maximum keep probability, the rest go to 0: the greedy limit)
        with np.errstate(over="ignore"):
            z = (z - z.max(axis=-1, keepdims=True)) / temperature
        p = np.exp(z)
        p /= p.sum(axis=-1, keepdims=True)
        u = rng.random(z.shape[0])
        cdf = np.cumsum(p, axis=-1)
        idx = (cdf <= u[:, None] * cdf[:, -1:]).sum(axis=-1)  # first cdf > u: never a p=0 token
        return np.minimum(idx, z.shape[-1] - 1).astype(np.int64)

    def __repr__(self):
        c = self._cfg
        return (f"GPT(vocab={c.vocab}, context={c.context}, width={c.width}, heads={c.heads}, "
                f"layers={c.layers}, tie_weights={c.tie_weights}, "
                f"parameters={self.num_parameters():,})")


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """The two tensors hold the same float32 values bit for bit (NaN equals itself)."""
    a32 = np.ascontiguousarray(a, dtype=np.float32)
    b32 = np.ascontiguousarray(b, dtype=np.float32)
    return a32.shape == b32.shape and np.array_equal(a32.view(np.uint32), b32.view(np.uint32))
