"""The layout of a model's parameter buffer: where each tensor lives (byte offset, size,
storage, shape), each matrix's weight format, the C config struct that describes it, and
the validation of token ids against a config.

The C library computes the layout (``bc_gpt_layout``); this module asks it and names the
result. :class:`blockc.model.Model` owns a buffer laid out so.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

import numpy as np

from .._args import as_choice, to_numpy
from .._errors import BlockcTypeError, BlockcValueError
from .._native import check, ffi, lib
from .._enums import MAX_COLS, WHOLE_BLOCKS
from .config import C_DTYPE, DTYPES, GPTConfig

__all__ = ["Tensor", "MIXED", "matrix_slots", "formats", "c_struct", "layout", "check_ids"]

class Tensor(NamedTuple):
    """Where a tensor of the layout lives: byte offset and size, storage, shape."""
    offset: int
    nbytes: int
    dtype: int      # BC_DTYPE_* of its storage
    packed: bool    # a packed matrix (else float32, row-major)
    shape: Tuple[int, ...]


#: the name a model whose matrices do not all share one format gives as its dtype
MIXED = "mixed"

_DTYPE_NAME = {v: k for k, v in C_DTYPE.items()}
_KINDS = (("attn.qkv.weight", 0), ("attn.proj.weight", 1), ("up.weight", 2), ("gate.weight", 3),
          ("down.weight", 4))


def matrix_slots(cfg: GPTConfig) -> Dict[str, int]:
    """name -> entry of ``bc_gpt_config.dtypes`` (bc_gpt.h's ``BC_GPT_FMT_*``) of every
    matrix a model of ``cfg`` has, in state-dict order."""
    out = {"token.weight": 0}
    for i in range(cfg.layers):
        for kind, k in _KINDS:
            if kind != "gate.weight" or cfg.activation in ("swiglu", "geglu"):
                out[f"blocks.{i}.{kind}"] = 2 + i * 5 + k
    if not cfg.tie_weights:
        out["head.weight"] = 1
    return out


def formats(cfg: GPTConfig, dtype: str = "float32",
            dtypes: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """Every matrix's format: ``dtypes[name]`` where given, else ``dtype`` (checked:
    unknown names and formats refused by name)."""
    dtype = as_choice(dtype, "dtype", DTYPES)
    slots = matrix_slots(cfg)
    out = dict.fromkeys(slots, dtype)
    if dtypes is None:
        _check_columns(cfg, out)
        return out
    if not isinstance(dtypes, Mapping):
        raise BlockcTypeError(f"dtypes must be a mapping of matrix names to formats, got "
                              f"{type(dtypes).__name__}")
    for name, d in dict(dtypes).items():  # read once
        if name not in slots:
            raise BlockcValueError(f"dtypes: {name!r} is not a matrix of this model (its "
                                   f"matrices: {', '.join(list(slots)[:4])}, ...)")
        out[name] = as_choice(d, f"dtypes[{name!r}]", DTYPES)
    _check_columns(cfg, out)
    return out


def _check_columns(cfg: GPTConfig, fmts: Mapping[str, str]) -> None:
    """A matrix in a format of whole blocks (q4_k, q6_k: super-blocks of 256 columns) whose
    rows are not (llama.cpp stores such a matrix in another type), or in a format of bounded
    columns (q8_0i, q4_0i) with more, refused by name."""
    if not any(d in WHOLE_BLOCKS or d in MAX_COLS for d in fmts.values()):
        return
    shapes = layout(cfg)  # float32: every shape packs
    for name, d in fmts.items():
        whole, most, cols = WHOLE_BLOCKS.get(d), MAX_COLS.get(d), shapes[name].shape[1]
        if whole and cols % whole:
            raise BlockcValueError(
                f"{d} needs matrices of whole blocks of {whole} columns: {name!r} "
                f"{shapes[name].shape} has {cols} (llama.cpp stores such a matrix in "
                "another type)")
        if most and cols > most:
            raise BlockcValueError(f"{d} holds matrices of at most {most} columns: {name!r} "
                                   f"{shapes[name].shape} has {cols}")


def c_struct(cfg: GPTConfig, fmts: Mapping[str, str]) -> Tuple[Any, Any]:
    """The ``bc_gpt_config *`` of a model of ``cfg`` with matrix formats ``fmts`` (as
    :func:`formats` returns), and the ``int[]`` its ``dtypes`` points to (None when
    every matrix shares one format: the config's own struct of that dtype). Keep both
    alive together."""
    uniform = set(fmts.values())
    if len(uniform) == 1:
        return cfg.c_struct(uniform.pop()), None
    if cfg.layers > lib.BC_GPT_FMT_LAYERS:
        raise BlockcValueError(f"a model of {cfg.layers} layers stores its matrices in one "
                               f"format (per-matrix formats: {lib.BC_GPT_FMT_LAYERS} layers "
                               "at most)")
    slots = matrix_slots(cfg)
    arr = ffi.new("int[]", 2 + 5 * cfg.layers)  # unused entries (tied head, gate) float32: 0
    for name, d in fmts.items():
        arr[slots[name]] = C_DTYPE[d]
    c = ffi.new("bc_gpt_config *")
    c[0] = cfg.c_struct()[0]
    c.dtype = C_DTYPE["float32"]
    c.dtypes = arr
    return c, arr


def layout(cfg: GPTConfig, dtype: str = "float32",
           dtypes: Optional[Mapping[str, str]] = None) -> Dict[str, Tensor]:
    """name -> Tensor for every tensor of the buffer, from C, in state-dict order (the
    matrices in ``dtype``, or ``dtypes[name]`` where given)."""
    c, _keep = c_struct(cfg, formats(cfg, dtype, dtypes))
    count = ffi.new("size_t *")
    check(lib.bc_gpt_tensor_count(count, c), "layout")
    name = ffi.new("char[]", lib.BC_GPT_NAME_MAX)
    off, nb, ndim, shape = (ffi.new("size_t *"), ffi.new("size_t *"), ffi.new("size_t *"),
                            ffi.new("size_t[2]"))
    dt, packed = ffi.new("int *"), ffi.new("int *")
    out: Dict[str, Tensor] = {}
    for i in range(int(count[0])):
        check(lib.bc_gpt_tensor_info(name, lib.BC_GPT_NAME_MAX, off, nb, dt, packed, ndim, shape,
                                     c, i), "layout")
        shp = (int(shape[0]), int(shape[1])) if ndim[0] == 2 else (int(shape[0]),)
        out[ffi.string(name).decode()] = Tensor(int(off[0]), int(nb[0]), int(dt[0]),
                                                 bool(packed[0]), shp)
    return out

def check_ids(ids: Any, cfg: GPTConfig, start: int = 0) -> np.ndarray:
    """ids as a new C-contiguous int32 or int64 (B, T) array (the two types C reads;
    int32 stays int32), validated against the model. Always a copy: the ids are
    small, and the copy is what was checked, whatever another thread does to the
    caller's array meanwhile."""
    a = np.array(to_numpy(ids, "ids"), copy=True)  # checked below, then used: this copy
    if a.size == 0:  # an empty list is float64 to NumPy: its emptiness is the problem
        raise BlockcValueError(f"ids must have B >= 1 and T >= 1 (a prompt needs at least one "
                               f"token), got shape {a.shape}")
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

