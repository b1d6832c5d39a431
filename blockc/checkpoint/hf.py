"""Hugging Face checkpoint directories: configs, tensor names, loading and saving.

A directory as ``transformers`` writes it: ``config.json`` and ``model.safetensors``
(or shards ``model-0000X-of-0000N.safetensors`` listed by
``model.safetensors.index.json``). blockc reads it with its own reader
(:mod:`blockc.safetensors`) and never contacts the Hub, never unpickles
(``pytorch_model.bin`` is refused, with the conversion to do).

The families (config fields and tensor names per ``model_type``) are the records of
:mod:`blockc.checkpoint.families`; this module reads and writes the directories, through
the model core's interface (:mod:`blockc.model`), and gives :class:`blockc.GPT`
its ``from_pretrained`` and ``save_pretrained`` (:class:`PretrainedMixin`).
"""
from __future__ import annotations

import os
import re
from typing import Any, Callable, Dict, List, Optional, Type, TypeVar, Union

import numpy as np

from .. import _files
from ..io import safetensors as st
from .._args import as_choice
from .._errors import BlockcValueError
from .fused import fuse, join_rows, split_safetensors
from .gguf import is_gguf, load as load_gguf
from ..generation.config import TOKEN_ID_FIELDS, GenerationConfig, token_ids
from .families import (FAMILIES, Name, Wrapper, config_to_hf, family_of,  # noqa: F401 (re-exported)
                       family_of_config, read_config, text_config, wrapper_of)
from ..model import DTYPES, GPTConfig, Model, layout, same_bits

__all__ = ["LOAD_DTYPES", "config_from_hf", "config_to_hf", "load_dir", "save_dir", "read_config",
           "PretrainedMixin"]

#: what ``from_pretrained``'s dtype may be: a format, "integer" (GGUF files: each matrix
#: in the integer-product format of its file type, blockc.checkpoint.gguf.INTEGER) or
#: "exact" (GGUF files: each matrix in a format holding its very weights, float activations;
#: dtype=None takes each type's measured default, blockc.checkpoint.gguf.DEFAULT_FORMAT)
LOAD_DTYPES = DTYPES + ("integer", "exact")

M = TypeVar("M", bound=Model)


def config_from_hf(d: Any) -> GPTConfig:
    """A GPTConfig from a transformers config (a dict, or a directory / config.json path)."""
    return GPTConfig.from_hf(d)



SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
_SHARD = re.compile(r"^model-\d{5}-of-\d{5}\.safetensors$")


def _weight_files(path: str) -> List[str]:
    """The safetensors files of a directory (refusing pickles and empty directories).

    model.safetensors when there is one, else the shards its index lists: the order
    transformers reads them in (a single file saved over a sharded checkpoint wins)."""
    single = os.path.join(path, SINGLE)
    index = os.path.join(path, INDEX)
    if os.path.lexists(single):
        return [single]
    if os.path.lexists(index):
        idx = _files.read_json(index, "a shard index")  # regular, bounded, not too deep
        wm = idx.get("weight_map") if isinstance(idx, dict) else None
        if not isinstance(wm, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                               for k, v in wm.items()):
            raise BlockcValueError(f"{index}: weight_map must map tensor names to file names")
        files = []
        for name, fn in wm.items():
            if os.path.basename(fn) != fn or fn in ("", ".", ".."):
                raise BlockcValueError(f"{index}: tensor {name!r} maps to {fn!r}, not a file of "
                                       "this directory")
            if fn not in files:
                files.append(fn)
        missing = [fn for fn in files if not os.path.exists(os.path.join(path, fn))]
        if missing:
            raise BlockcValueError(f"{index}: lists {missing[0]!r}, which is not in {path}")
        return [os.path.join(path, fn) for fn in files]
    pickles = [f for f in os.listdir(path) if f.endswith(_files.PICKLE_SUFFIXES)]
    if pickles:
        raise BlockcValueError(
            f"{os.path.join(path, pickles[0])}: a pickle checkpoint; blockc never unpickles (a "
            "pickle can run any code when loaded). Convert it to safetensors once, where you trust "
            "it: transformers' AutoModelForCausalLM.from_pretrained(dir).save_pretrained(dir, "
            "safe_serialization=True)")
    raise BlockcValueError(f"{path}: no weights (no model.safetensors or "
                           "model.safetensors.index.json)")


def read_tensors(path: str) -> Dict[str, st.Tensor]:
    """Every tensor of a directory's safetensors files (a name in two files is refused)."""
    out: Dict[str, st.Tensor] = {}
    for fn in _weight_files(path):
        tensors, _ = st.read(fn)
        for name, t in tensors.items():
            if name in out:
                raise BlockcValueError(f"tensor {name!r} is in both {out[name].file} and {fn}")
            out[name] = t
    return out


def _finite(t: st.Tensor, name: str) -> np.ndarray:
    """Tensor ``name`` as float32, refused (naming its file and the first bad element)
    when it holds NaN or infinity: such a model computes no number, and would fail only
    at some request's token, far from the cause."""
    a = t.to_float32()
    if not np.isfinite(np.sum(a, dtype=np.float64)):  # one pass; NaN and inf carry through
        bad = np.argwhere(~np.isfinite(a))
        if bad.size:
            at = tuple(int(i) for i in bad[0])
            raise BlockcValueError(f"{t.file}: tensor {name!r} holds {a[at]} at {list(at)} "
                                   f"({len(bad)} elements that are not finite): its weights "
                                   "are not numbers")
    return a


def _language_model(tensors: Dict[str, st.Tensor], wrap: Wrapper) -> Dict[str, st.Tensor]:
    """A wrapper checkpoint's language model tensors, their prefix taken off (a tensor of no
    part the wrapper names is refused)."""
    out = {}
    for n, t in tensors.items():
        if n.startswith(wrap.prefix):
            out[n[len(wrap.prefix):]] = t
        elif not wrap.others.match(n):
            raise BlockcValueError(f"{t.file}: tensor {n!r} is neither the language model's "
                                   f"({wrap.prefix}...) nor one of the parts blockc does not "
                                   "load")
    return out


def load_dir(path: str, dtype: Optional[str] = None, cls: Type[M] = Model,  # type: ignore[assignment]
             progress: Optional[Callable[[int, int], Any]] = None) -> M:
    """A model of class ``cls`` from a checkpoint directory (see
    :meth:`blockc.GPT.from_pretrained`, which passes ``cls=GPT``; ``progress(done,
    total)`` is called after each tensor is written)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise BlockcValueError(f"{path}: not a directory (a checkpoint is a directory with "
                               "config.json and model.safetensors)")
    d = read_config(path)
    wrap = wrapper_of(d)
    try:
        d = text_config(d)
        fam = family_of(d)
        cfg = GPTConfig(**fam.config(d))
    except BlockcValueError as e:  # "config.json: field ..." names the file it came from
        msg = str(e)
        if msg.startswith("config.json: "):
            msg = os.path.join(path, "config.json") + ": " + msg[len("config.json: "):]
        raise BlockcValueError(msg) from None
    tensors = read_tensors(path)
    if wrap is not None:  # the language model's tensors; the other parts' are not loaded
        tensors = _language_model(tensors, wrap)
    prefix = fam.prefix
    has_prefix = any(n.startswith(prefix) for n in tensors) if prefix else False
    spec = fam.names(cfg)
    if prefix and not has_prefix:
        spec = [(n[len(prefix):] if n.startswith(prefix) else n, b, t, r) for n, b, t, r in spec]
    parts = fam.hf_parts(cfg)
    if prefix and not has_prefix:
        strip = lambda n: n[len(prefix):] if n.startswith(prefix) else n  # noqa: E731
        parts = {strip(k): tuple((strip(p), a, b) for p, a, b in v) for k, v in parts.items()}
    tensors = split_safetensors(tensors, parts, path)  # a fused tensor's parts, one each
    wanted = {n for n, _, _, _ in spec}
    head = "lm_head.weight"
    tied_head = cfg.tie_weights and head in tensors
    of = {p: k for k, v in parts.items() for p, _, _ in v}  # a part: its fused tensor's name
    missing = list(dict.fromkeys(of.get(n, n) for n, _, _, _ in spec if n not in tensors))
    if missing:
        raise BlockcValueError(f"{path}: tensor {missing[0]!r} is missing"
                               + (f" ({len(missing)} missing)" if len(missing) > 1 else ""))
    extra = sorted(n for n in tensors if n not in wanted and not fam.ignore.match(n)
                   and not (tied_head and n == head))
    if extra:
        raise BlockcValueError(f"{tensors[extra[0]].file}: tensor {extra[0]!r} is not part of a "
                               f"{fam.model_types[0]} model of this config.json")
    f32 = layout(cfg)
    # every tensor's shape against the config before anything is allocated: a config.json
    # that lies (vocab_size 2**33 beside a 64-row embedding) is refused by the tensor it
    # contradicts, not reported as a terabyte the allocator could not find
    for name, ours, transposed, rows in spec:
        t = tensors[name]
        want = f32[ours].shape
        if rows is not None:
            want = (rows[1] - rows[0],) + tuple(want[1:])
        shape = want[::-1] if transposed else want
        if t.shape != shape:
            raise BlockcValueError(f"{t.file}: tensor {name!r} has shape {t.shape}, expected "
                                   f"{shape} for this config.json")
    if dtype is None:  # bfloat16 when every matrix blockc packs is (embeddings may be wider)
        mats = [tensors[n] for n, b, _, _ in spec if f32[b].packed]
        dtype = "bfloat16" if mats and all(t.dtype == "BF16" for t in mats) else "float32"
    m = cls(cfg, dtype=dtype)
    tensor_layout = m.layout
    offsets = fam.hf_offsets(cfg)  # Gemma's 1 + w, in float32 as transformers adds it
    parts: Dict[str, np.ndarray] = {}  # blockc tensors assembled from row slices
    for i, (name, ours, transposed, rows) in enumerate(spec):
        if progress is not None and i:
            progress(i, len(spec))
        t = tensors[name]
        if rows is None:
            # aligned (a copy when a file's offsets left it misaligned)
            a = np.require(_finite(t, name), requirements="A")
            if ours in offsets:
                a = (np.float32(offsets[ours]) + a.astype(np.float32)).astype(np.float32)
            m.write_tensor(ours, a, transposed=transposed)
            continue
        whole = parts.get(ours)
        if whole is None:
            whole = parts[ours] = np.empty(tensor_layout[ours].shape, np.float32)
        whole[rows[0]:rows[1]] = _finite(t, name)
        if rows[1] == tensor_layout[ours].shape[0]:  # the last slice: the tensor is whole
            m.write_tensor(ours, parts.pop(ours))
    if progress is not None:
        progress(len(spec), len(spec))
    m.special_ids = special_ids(d)
    m.generation_config = GenerationConfig.from_pretrained(path, config=d, vocab=cfg.vocab)
    if tied_head:
        t = tensors[head]
        emb = [n for n, b, _, _ in spec if b == "token.weight"][0]
        if t.shape != tensor_layout["token.weight"].shape or not same_bits(
                t.to_float32(), tensors[emb].to_float32()):
            raise BlockcValueError(f"{t.file}: tensor {head!r} differs from the token embedding, "
                                   "but config.json ties them (tie_word_embeddings)")
    return m


#: config.json's token ids: kept from a loaded directory (m.special_ids), written back on save
SPECIAL_IDS = TOKEN_ID_FIELDS
special_ids = token_ids


def save_dir(m: Model, path: str) -> None:
    """Write m as a transformers checkpoint directory (see :meth:`blockc.GPT.save_pretrained`)."""
    cfg = m.config
    fam = family_of_config(cfg)
    d = fam.to_hf(cfg)
    os.makedirs(path, exist_ok=True)
    # a bfloat16 model's matrices as BF16 (its vectors stay float32, as it holds them);
    # a q8_0 (or mixed) model's dequantised weights as float32: exactly its weights
    bf16 = m.dtype == "bfloat16"
    d["torch_dtype"] = "bfloat16" if bf16 else "float32"
    d.update(m.special_ids)  # the end-of-text id etc. of the loaded directory
    tensors, bf16_names = {}, []
    whole: Dict[str, np.ndarray] = {}
    offsets = fam.hf_offsets(cfg)
    for name, ours, transposed, rows in fam.names(cfg):
        if rows is None:
            a = m.read_tensor(ours)
            if ours in offsets:  # the fold taken out (exact unless 1 + w rounded)
                a = (a - np.float32(offsets[ours])).astype(np.float32)
        else:  # a row slice of a fused tensor, read once
            if ours not in whole:
                whole[ours] = m.read_tensor(ours)
            a = whole[ours][rows[0]:rows[1]]
        if transposed:
            a = np.ascontiguousarray(a.T)
        if bf16 and m.layout[ours].packed:  # exact: the matrices hold bfloat16 values
            a = (np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)
            bf16_names.append(name)
        tensors[name] = a
    # each file replaced whole (a unique temporary name, then a rename); the weights first,
    # so a config.json never describes weights that are not there yet
    parts = fam.hf_parts(cfg)
    if parts:  # the parts of a fused tensor joined (Phi-3's gate_up_proj)
        tensors = dict(fuse(list(tensors.items()), parts, join_rows))
        bf16_names = [n for n in tensors if n in bf16_names or (
            n in parts and parts[n][0][0] in bf16_names)]
    st.write(os.path.join(path, SINGLE), tensors, {"format": "pt"}, bf16=tuple(bf16_names))
    _files.write_json(os.path.join(path, "config.json"), d)
    # what generate stops at and samples with, as transformers keeps it beside config.json
    gen = getattr(m, "generation_config", None)  # a GPT's (GenerationMixin); a bare core has none
    if gen is not None:
        _files.write_json(os.path.join(path, "generation_config.json"), gen.to_hf_dict())
    _remove_shards(path)


def _remove_shards(path: str) -> None:
    """The shards and index of a sharded checkpoint that model.safetensors now replaces
    (left behind, a reader preferring the index would load the old weights): the index
    first, then the files it listed and any named like transformers' shards."""
    index = os.path.join(path, INDEX)
    listed: List[str] = []
    if os.path.lexists(index):
        try:
            idx = _files.read_json(index, "a shard index")
            wm = idx.get("weight_map", {}) if isinstance(idx, dict) else {}
            listed = [fn for fn in wm.values() if isinstance(fn, str)] if isinstance(wm, dict) else []
        except (ValueError, OSError):
            pass
        os.remove(index)
    for fn in set(listed) | {f for f in os.listdir(path) if _SHARD.match(f)}:
        p = os.path.join(path, fn)
        if (os.path.basename(fn) == fn and fn != SINGLE and fn.endswith(".safetensors")
                and os.path.lexists(p) and not os.path.isdir(p)):
            os.remove(p)


class PretrainedMixin:
    """``from_pretrained`` and ``save_pretrained`` for a :class:`blockc.model.Model`
    (Hugging Face's ``PreTrainedModel`` role): mixed into :class:`blockc.GPT`."""

    @classmethod
    def from_pretrained(cls: Type[M], path: Union[str, "os.PathLike[str]"],
                        dtype: Optional[str] = None, *,
                        progress: Optional[Callable[[int, int], Any]] = None) -> M:
        """Load a Hugging Face checkpoint directory (as ``transformers`` writes it), or a
        GGUF file (llama.cpp's; see :mod:`blockc.checkpoint.gguf`).

        ``config.json`` and ``model.safetensors``, or shards listed by
        ``model.safetensors.index.json``; names with or without the
        ``transformer.`` prefix; float32, float16 or bfloat16 tensors (read a tensor
        at a time with blockc's own reader, no torch needed; a file truncated while it is
        read is an error, never a crash). The Hub is never contacted and pickle
        checkpoints (``pytorch_model.bin``) are refused.

        Parameters
        ----------
        path : str or os.PathLike
            The directory, or a ``.gguf`` file (llama, qwen2 or gpt2 architecture; F32,
            F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K tensors, mixed).
        dtype : str, optional
            How blockc stores the matrices (a format of :data:`blockc.DTYPES`,
            ``"integer"`` or ``"exact"``); None: bfloat16 for a bfloat16 checkpoint,
            else float32. For a GGUF file, None: each matrix as its file type's row of
            :data:`blockc.checkpoint.gguf.DEFAULT_FORMAT` says, the fastest choice within
            llama.cpp's accuracy as benches/bench_formats.py measured it ("exact" for a
            type it does not list). ``"exact"`` (GGUF files only): each matrix in the
            native format of its file type (BF16 bfloat16, F16 float16, Q8_0 q8_0, Q4_0
            q4_0, Q5_0 q5_0, Q4_K q4_k, Q6_K q6_k;
            :data:`blockc.checkpoint.gguf.EXACT`), any other type float32 (the dequantised
            weights, exactly), float activations; a file mixing types gives ``dtype ==
            "mixed"`` and ``m.dtypes`` naming each matrix's format. A format makes every
            matrix that. ``"integer"`` (GGUF files only): each matrix in the format that
            multiplies its file type's very blocks by integer dot products, 8-bit
            activations as llama.cpp's (Q8_0 q8_0i, Q4_0 q4_0i, ...: the integer format of
            the C table that holds the type's blocks,
            :data:`blockc.checkpoint.gguf.INTEGER`), the others as with ``"exact"``.
        progress : callable, optional
            Called as ``progress(done, total)`` while the tensors are read and
            converted (``done`` of ``total`` tensors; ``done == total`` once, at the end):
            what a progress bar draws (``blockc chat`` and ``generate`` draw one).

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
        if dtype is not None:
            as_choice(dtype, "dtype", LOAD_DTYPES)
        if is_gguf(path):  # a GGUF file (blockc.checkpoint.gguf)
            return load_gguf(path, dtype, cls, progress)
        if dtype in ("integer", "exact"):
            raise BlockcValueError(f"dtype {dtype!r} takes a GGUF file's blocks as they are; "
                                   f"{os.fspath(path)!r} is not a GGUF file (pick a format by "
                                   "name, e.g. 'q8_0i')")
        return load_dir(path, dtype, cls, progress)

    def save_pretrained(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Write this model as a Hugging Face checkpoint directory.

        ``config.json``, ``generation_config.json`` (:attr:`generation_config`'s ids and
        sampling options) and ``model.safetensors`` that ``transformers`` loads
        (``GPT2LMHeadModel.from_pretrained(path)`` for GPT-2's architecture):
        float32 weights, a bfloat16 model's matrices as bfloat16, a q8_0 model's
        dequantised weights as float32.

        Parameters
        ----------
        path : str or os.PathLike
            The directory (made if missing; the files are replaced, each whole, by
            rename; the index and shards of a sharded checkpoint there are removed).

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
        ['config.json', 'generation_config.json', 'model.safetensors']
        """
        save_dir(self, os.fspath(path))

