"""A block's weights: checked against a :class:`BlockConfig` per call or once
(:func:`prepare`, :class:`PreparedBlock`), and drawn (:func:`init_blocks`, the book's
``rand()`` or GPT-2's normal init). The keys and shapes are in :mod:`blockc.block.engine`'s
docstring."""
from __future__ import annotations

import types
from typing import Any, Dict, Iterator, List, Mapping, Union

import numpy as np

from .._native import check, cptr, ffi, fptr, lib
from .._args import MAX_ELEMENTS, as_choice, as_f32, as_int, as_seed
from .._errors import BlockcTypeError, BlockcValueError
from .config import BlockConfig, check_config

__all__ = ["PreparedBlock", "prepare", "weights_view", "init_block", "init_blocks",
           "iter_blocks", "RANDS"]

RANDS = ("msvc", "glibc", "normal")

_MAX = MAX_ELEMENTS


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
        check_config(cfg)
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
    shapes = cfg.weight_shapes
    for key in items:
        if key not in shapes:
            allowed = ", ".join(shapes)
            raise BlockcValueError(f"{name}: {_why_not(key, cfg)}; accepted keys: {allowed}")
    arrays: Dict[str, np.ndarray] = {}
    c = ffi.new("bc_block_weights *")
    bufs = []
    for key, fld, shape, desc, required in cfg.weight_plan:
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
    __slots__ = ("c_weights", "_bufs", "arrays")

    def __init__(self, c, bufs, arrays):
        self.c_weights, self._bufs, self.arrays = c, bufs, arrays


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


def weights_view(W: Any, cfg: "BlockConfig", name: str = "W") -> Union[PreparedBlock, "_View"]:
    """W's C view for cfg (``.c_weights``, ``.arrays``): W itself when it is a
    PreparedBlock (for this config), else a per-call view of the mapping (checked, not
    copied). The engine's internal interface."""
    if type(W) is PreparedBlock:
        if W._cfg is not cfg and W._cfg != cfg:
            raise BlockcValueError(f"{name} was prepared for {W._cfg!r}, not {cfg!r}")
        return W
    c, bufs, arrays = _weights_view(W, cfg, name, copy=False)
    return _View(c, bufs, arrays)


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
    check_config(cfg)
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

