"""The layout of a model's parameter buffer: where each tensor lives (byte offset, size,
storage, shape), each matrix's weight format, the C config struct that describes it, and
the validation of token ids against a config.

The C library computes the layout (``bc_gpt_layout``); this module asks it and names the
result. :class:`blockc.model.Model` owns a buffer laid out so.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple, Union

import numpy as np

from .._args import as_choice, to_numpy
from .._errors import BlockcTypeError, BlockcValueError
from .._native import check, ffi, lib
from .._enums import MAX_COLS, WHOLE_BLOCKS
from .config import C_DTYPE, DTYPES, GPTConfig

__all__ = ["Tensor", "MIXED", "Format", "matrix_slots", "formats", "c_struct", "layout",
           "check_ids", "QKV"]

class Part(NamedTuple):
    """Rows [row0, row1) of a split matrix, packed on their own (bc_gpt.h)."""
    row0: int
    row1: int
    offset: int
    nbytes: int
    dtype: int      # BC_DTYPE_* of these rows


class Tensor(NamedTuple):
    """Where a tensor of the layout lives: byte offset and size, storage, shape, and for
    an attn.qkv.weight whose q, k and v rows have different formats (``parts``: the q, k
    and v rows, each packed in its own; ``dtype`` then the q rows') its parts."""
    offset: int
    nbytes: int
    dtype: int      # BC_DTYPE_* of its storage
    packed: bool    # a packed matrix (else float32, row-major)
    shape: Tuple[int, ...]
    parts: Tuple[Part, ...] = ()

    def pieces(self) -> Tuple[Part, ...]:
        """Its parts, or (a matrix of one format) itself as one part."""
        return self.parts or (Part(0, self.shape[0], self.offset, self.nbytes, self.dtype),)


#: a matrix's format: one of DTYPES, or for attn.qkv.weight a (q, k, v) tuple of them
#: (its q, k and v rows each in its own: a GGUF file whose attn_v's type is not attn_q's)
Format = Union[str, Tuple[str, str, str]]

#: the suffix of the matrices whose rows may be split by format (q, k, v)
QKV = "attn.qkv.weight"


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
            if cfg.n_experts and k >= 2:  # every expert's matrix of a kind: the kind's slot
                out.update((f"blocks.{i}.experts.{e}.{kind}", 2 + i * lib.BC_GPT_NMAT + k)
                           for e in range(cfg.n_experts))
            elif kind != "gate.weight" or cfg.activation in ("swiglu", "geglu"):
                out[f"blocks.{i}.{kind}"] = 2 + i * lib.BC_GPT_NMAT + k
    if not cfg.tie_weights:
        out["head.weight"] = 1
    return out


def _one_format(name: str, d: Any) -> Format:
    """``d`` checked as the format of matrix ``name``: a name of DTYPES, or for an
    attn.qkv.weight a (q, k, v) sequence of three (one name when they agree)."""
    if isinstance(d, (tuple, list)):
        if not name.endswith(QKV):
            raise BlockcValueError(f"dtypes[{name!r}]: only an attn.qkv.weight takes a (q, k, v) "
                                   f"tuple of formats, got {d!r}")
        if len(d) != 3:
            raise BlockcValueError(f"dtypes[{name!r}] must be a format or a (q, k, v) tuple of "
                                   f"three, got {len(d)} entries")
        q, k, v = (as_choice(x, f"dtypes[{name!r}]", DTYPES) for x in d)
        return q if q == k == v else (q, k, v)
    return as_choice(d, f"dtypes[{name!r}]", DTYPES)


def each_format(fm: Format) -> Tuple[str, ...]:
    """The formats of a matrix's rows: ``fm`` itself, or a split one's three."""
    return fm if isinstance(fm, tuple) else (fm,)


def formats(cfg: GPTConfig, dtype: str = "float32",
            dtypes: Optional[Mapping[str, Any]] = None) -> Dict[str, Format]:
    """Every matrix's format: ``dtypes[name]`` where given, else ``dtype`` (checked:
    unknown names and formats refused by name). An attn.qkv.weight's may be a (q, k, v)
    tuple of three formats: its q, k and v rows each in its own."""
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
        out[name] = _one_format(name, d)
    _check_experts(slots, out)
    _check_columns(cfg, out)
    return out


def _check_experts(slots: Mapping[str, int], fmts: Mapping[str, Format]) -> None:
    """The experts of a kind in a layer share one format (one entry of
    ``bc_gpt_config.dtypes``): refused by name when they differ."""
    seen: Dict[int, str] = {}
    for name, slot in slots.items():
        first = seen.setdefault(slot, name)
        if fmts[first] != fmts[name]:
            raise BlockcValueError(f"dtypes: the experts of a layer store each matrix kind in "
                                   f"one format: {first!r} is {fmts[first]}, {name!r} "
                                   f"{fmts[name]}")


def _check_columns(cfg: GPTConfig, fmts: Mapping[str, Format]) -> None:
    """A matrix in a format of whole blocks (q4_k, q6_k: super-blocks of 256 columns) whose
    rows are not (llama.cpp stores such a matrix in another type), or in a format of bounded
    columns (q8_0i, q4_0i) with more, refused by name."""
    if not any(d in WHOLE_BLOCKS or d in MAX_COLS for fm in fmts.values()
               for d in each_format(fm)):
        return
    shapes = layout(cfg)  # float32: every shape packs
    for name, d in ((n, d) for n, fm in fmts.items() for d in each_format(fm)):
        whole, most, cols = WHOLE_BLOCKS.get(d), MAX_COLS.get(d), shapes[name].shape[1]
        if whole and cols % whole:
            raise BlockcValueError(
                f"{d} needs matrices of whole blocks of {whole} columns: {name!r} "
                f"{shapes[name].shape} has {cols} (llama.cpp stores such a matrix in "
                "another type)")
        if most and cols > most:
            raise BlockcValueError(f"{d} holds matrices of at most {most} columns: {name!r} "
                                   f"{shapes[name].shape} has {cols}")


def c_struct(cfg: GPTConfig, fmts: Mapping[str, Format]) -> Tuple[Any, Any]:
    """The ``bc_gpt_config *`` of a model of ``cfg`` with matrix formats ``fmts`` (as
    :func:`formats` returns), and the ``int[]`` its ``dtypes`` points to (None when
    every matrix shares one format: the config's own struct of that dtype). Keep both
    alive together."""
    uniform = set(fmts.values())  # a split qkv's tuple is never a lone format
    if len(uniform) == 1:
        return cfg.c_struct(uniform.pop()), None
    if cfg.layers > lib.BC_GPT_FMT_LAYERS:
        raise BlockcValueError(f"a model of {cfg.layers} layers stores its matrices in one "
                               f"format (per-matrix formats: {lib.BC_GPT_FMT_LAYERS} layers "
                               "at most)")
    slots = matrix_slots(cfg)
    arr = ffi.new("int[]", 2 + lib.BC_GPT_NMAT * cfg.layers)  # unused entries (tied head,
    # gate) float32: 0
    for name, d in fmts.items():
        q, k, v = each_format(d) * 3 if isinstance(d, str) else d
        arr[slots[name]] = C_DTYPE[q]
        if name.endswith(QKV):  # its k and v rows' entries (bc_gpt.h)
            at = slots[name] - lib.BC_GPT_MAT_QKV
            arr[at + lib.BC_GPT_MAT_QKV_K] = C_DTYPE[k]
            arr[at + lib.BC_GPT_MAT_QKV_V] = C_DTYPE[v]
    c = ffi.new("bc_gpt_config *")
    c[0] = cfg.c_struct()[0]
    c.dtype = C_DTYPE["float32"]
    c.dtypes = arr
    return c, arr


def _parts(cfg: GPTConfig, t: Tensor, fm: Tuple[str, str, str]) -> Tuple[Part, ...]:
    """The q, k and v rows of a split attn.qkv.weight ``t`` (formats ``fm``): packed one
    after another from its offset (bc_gpt.h), their sizes the C library's."""
    kw = (cfg.kv_heads or cfg.heads) * (cfg.head_dim or cfg.width // cfg.heads)
    rows = (t.shape[0] - 2 * kw, kw, kw)
    out, at, r0 = [], t.offset, 0
    nb = ffi.new("size_t *")
    for d, n in zip(fm, rows):
        check(lib.bc_pack_size(nb, C_DTYPE[d], n, t.shape[1]), "layout")
        out.append(Part(r0, r0 + n, at, int(nb[0]), C_DTYPE[d]))
        at, r0 = at + int(nb[0]), r0 + n
    if at != t.offset + t.nbytes:  # C's sum: the same sizes
        raise BlockcValueError("layout: a split attn.qkv.weight's parts do not tile it")
    return tuple(out)


def layout(cfg: GPTConfig, dtype: str = "float32",
           dtypes: Optional[Mapping[str, Any]] = None) -> Dict[str, Tensor]:
    """name -> Tensor for every tensor of the buffer, from C, in state-dict order (the
    matrices in ``dtype``, or ``dtypes[name]`` where given)."""
    fmts = formats(cfg, dtype, dtypes)
    c, _keep = c_struct(cfg, fmts)
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
        key = ffi.string(name).decode()
        out[key] = Tensor(int(off[0]), int(nb[0]), int(dt[0]), bool(packed[0]), shp)
        fm = fmts.get(key)
        if isinstance(fm, tuple):
            out[key] = out[key]._replace(parts=_parts(cfg, out[key], fm))
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

