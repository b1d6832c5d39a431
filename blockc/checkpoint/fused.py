"""Checkpoint tensors that hold several of blockc's, as row ranges (Phi-3's ``gate_up_proj``
and llama.cpp's fused ``ffn_up``: gate rows, then up rows): split into their parts where a
loader reads a checkpoint, fused again where a saver writes one.

A family's table names each part :func:`blockc.checkpoint.families.record.part_name` of
the fused tensor (``"...gate_up_proj.weight[0:48]"``) and
:meth:`~blockc.checkpoint.families.Family.hf_parts` /
:meth:`~blockc.checkpoint.families.Family.gguf_parts` list them; the loaders see one
tensor per part (:func:`split_safetensors`, :func:`split_gguf`: views of the checkpoint's
rows, whole rows so whole quantisation blocks), the savers join the parts' rows
(:func:`fuse`).
"""
from __future__ import annotations

from typing import Any, Callable, Collection, Dict, List, Mapping, Sequence, Tuple, TypeVar

import numpy as np

from .._errors import BlockcValueError
from ..io import gguf as gguf_io
from ..io import safetensors as st
from .families.record import Parts

__all__ = ["split_safetensors", "split_gguf", "fuse", "join_rows", "fuse_gguf"]

T = TypeVar("T")


def _split(tensors: Mapping[str, T], parts: Parts, path: str,
           view: Callable[[T, str, int, int], T]) -> Dict[str, T]:
    if not parts:
        return dict(tensors)
    for name in parts:
        if name not in tensors:
            raise BlockcValueError(f"{path}: tensor {name!r} is missing")
    out: Dict[str, T] = {}
    for name, t in tensors.items():
        ps = parts.get(name)
        if ps is None:
            out[name] = t
            continue
        shape = tuple(t.shape)  # type: ignore[attr-defined]
        if len(shape) != 2 or shape[0] != ps[-1][2]:
            raise BlockcValueError(f"{path}: tensor {name!r} has shape {shape}, expected "
                                   f"({ps[-1][2]}, ...) rows for its {len(ps)} parts")
        for part, a, b in ps:
            out[part] = view(t, part, a, b)
    return out


def split_safetensors(tensors: Mapping[str, st.Tensor], parts: Parts,
                      path: str) -> Dict[str, st.Tensor]:
    """``tensors`` with each fused one (``parts``) replaced by its parts (row views, read
    when asked for; ``path`` names the checkpoint in a refusal)."""
    def view(t: st.Tensor, name: str, a: int, b: int) -> st.Tensor:
        return st.Tensor(name, t.dtype, (b - a,) + tuple(t.shape[1:]), t.data[a:b], t.file)
    return _split(tensors, parts, path, view)


def split_gguf(tensors: Mapping[str, gguf_io.GGUFTensor], parts: Parts, path: str,
               stacks: Collection[str] = ()) -> Dict[str, gguf_io.GGUFTensor]:
    """``tensors`` of a GGUF file with each fused one (``parts``) replaced by its parts:
    their rows' blocks as they are (a quantised type's rows are whole blocks). A tensor
    named in ``stacks`` holds its parts along a first axis of their own (llama.cpp's
    ``ffn_*_exps``: (experts, rows, cols), expert e the rows of part e): it must have
    exactly that shape (else refused by name), and is read as the (experts * rows, cols)
    matrix of the same bytes. A part of a tensor read from a file reads only its own
    bytes (inside the tensor's, which the file's reader checked)."""
    flat: Dict[str, gguf_io.GGUFTensor] = dict(tensors)
    for name in stacks:
        t, ps = tensors.get(name), parts.get(name)
        if t is None or not ps:
            continue  # missing: _split refuses it by name
        rows = ps[0][2] - ps[0][1]
        want = (len(ps), rows)
        if len(t.shape) != 3 or tuple(t.shape[:2]) != want or any(
                (a, b) != (i * rows, (i + 1) * rows) for i, (_, a, b) in enumerate(ps)):
            raise BlockcValueError(f"{path}: tensor {name!r} has shape {tuple(t.shape)}, "
                                   f"expected ({want[0]}, {want[1]}, ...): one matrix of "
                                   f"{rows} rows per expert")
        shape = (len(ps) * rows, t.shape[2])
        data = None if t.source is not None else t.data.reshape(shape[0], -1)
        flat[name] = gguf_io.GGUFTensor(name, t.type, shape, t.offset, t.nbytes, data, t.file,
                                        t.source)

    def view(t: gguf_io.GGUFTensor, name: str, a: int, b: int) -> gguf_io.GGUFTensor:
        rb = t.nbytes // max(1, t.shape[0])
        shape = (b - a,) + tuple(t.shape[1:])
        if t.source is not None:  # read when asked for: these rows' bytes only
            reader, at = t.source
            return gguf_io.GGUFTensor(name, t.type, shape, t.offset + a * rb, (b - a) * rb,
                                      None, t.file, (reader, at + a * rb))
        data = t.data[a:b]
        return gguf_io.GGUFTensor(name, t.type, shape, t.offset + a * rb, data.nbytes, data,
                                  t.file)
    return _split(flat, parts, path, view)


def fuse(entries: Sequence[Tuple[str, T]], parts: Parts,
         join: Callable[[str, List[T]], T]) -> List[Tuple[str, T]]:
    """``entries`` (name, payload), in order, with each fused tensor's parts replaced by
    ``join(fused name, their payloads in row order)`` where its first part was."""
    if not parts:
        return list(entries)
    owner = {p: (name, i) for name, ps in parts.items() for i, (p, _, _) in enumerate(ps)}
    got: Dict[str, Dict[int, T]] = {}
    out: List[Tuple[str, Any]] = []
    for name, payload in entries:
        o = owner.get(name)
        if o is None:
            out.append((name, payload))
            continue
        fused, i = o
        if fused not in got:
            got[fused] = {}
            out.append((fused, None))  # its place: the first part's
        got[fused][i] = payload
    for k, (name, payload) in enumerate(out):
        if name in got:
            have = got[name]
            if len(have) != len(parts[name]):  # pragma: no cover (the tables list every part)
                raise BlockcValueError(f"tensor {name!r}: {len(have)} of its "
                                       f"{len(parts[name])} parts")
            out[k] = (name, join(name, [have[i] for i in range(len(have))]))
    return out


def join_rows(name: str, arrays: List[np.ndarray]) -> np.ndarray:
    """The rows of ``arrays`` one after another (a fused tensor of its parts)."""
    return np.ascontiguousarray(np.concatenate(arrays, axis=0))


#: a GGUF tensor to write: (name, ggml type, shape, its blocks or a callable giving them)
Entry = Tuple[str, str, Tuple[int, ...], Any]


def fuse_gguf(tensors: Sequence[Entry], parts: Parts, stacks: Collection[str] = ()) -> List[Entry]:
    """The tensors of a GGUF file to write, each fused one's parts (phi3's ffn_up) joined
    row after row (whole rows of blocks, of one type: the first part's); one named in
    ``stacks`` (llama.cpp's ``ffn_*_exps``) of shape (parts, rows, cols): the same bytes."""
    def join(name: str, ps: List[Tuple[str, Tuple[int, ...], Any]]) -> Any:
        rows = sum(p[1][0] for p in ps)
        if any(callable(p[2]) for p in ps):
            data: Any = lambda: join_rows(name, [p[2]() for p in ps])  # noqa: E731
        else:
            data = join_rows(name, [p[2] for p in ps])
        if name in stacks:
            return (ps[0][0], (len(ps),) + tuple(ps[0][1]), data)
        return (ps[0][0], (rows,) + tuple(ps[0][1][1:]), data)
    entries = [(n, (t, shape, d)) for n, t, shape, d in tensors]
    return [(n, t, shape, d) for n, (t, shape, d) in fuse(entries, parts, join)]
