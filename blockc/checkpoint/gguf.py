"""Models in GGUF files: llama.cpp's ``llama`` (Llama, Mistral, SmolLM, TinyLlama), ``qwen2``,
``qwen3``, ``granite``, ``smollm3``, ``olmo2``, ``phi3`` (fused ``attn_qkv`` and ``ffn_up``,
longrope's ``rope_factors_long``/``_short``: :mod:`blockc.checkpoint.families.phi3`),
``qwen3moe`` and ``gpt2`` architectures, loaded and saved; mixtures of experts (Mixtral's
``llama`` files with ``llama.expert_count``, ``qwen3moe``) with their experts stacked in
llama.cpp's 3-D ``ffn_*_exps`` tensors (:mod:`blockc.checkpoint.families.experts`).

Loading maps the file's metadata (``{arch}.context_length``, ``embedding_length``,
``block_count``, ``feed_forward_length``, ``attention.head_count``,
``head_count_kv``, ``attention.layer_norm_rms_epsilon`` / ``layer_norm_epsilon``,
``rope.freq_base``, ``rope.dimension_count``, ``attention.key_length``) onto a
:class:`blockc.GPTConfig`, and llama.cpp's tensor names (``token_embd``,
``blk.N.attn_q`` ..., ``output_norm``, ``output``; tied when ``output`` is absent
or holds the embedding's very bytes) onto blockc's. What blockc would compute
differently is refused by name: another architecture, rotary scaling other than
linear, yarn (``rope.scaling.*``) and llama3 (``rope_freqs``), which the Llama-shaped
families read (:mod:`blockc.checkpoint.families.rope_gguf`), expert metadata llama.cpp
computes otherwise, partial rotary
dimensions, soft-capped or scaled logits (Granite's scales aside). ``attention.sliding_window`` narrower than the
context is every layer's window (GPTConfig.sliding_window), and written back so.

llama.cpp's converter reorders a Llama's q and k rows within each head (it rotates
the pairs (2i, 2i+1), transformers and blockc the pairs (i, i + Dh/2)); loading
undoes that exactly (a permutation of whole rows, so of whole quantisation blocks).
Qwen2 files are stored in transformers' order (llama.cpp rotates them NEOX-style)
and are not reordered.

Weights: each tensor is dequantised exactly (:mod:`blockc.reference.ggml`, bit for
bit what ggml and the gguf package compute). With ``dtype=None`` each matrix loads as its
file type's row of :data:`DEFAULT_FORMAT` says (chosen by benches/bench_formats.py: the
fastest choice whose KL from the float32 model is within llama.cpp's arithmetic's; a type
it does not list as with ``dtype="exact"``). With ``dtype="exact"`` each matrix is held
in the cheapest blockc format that holds its file type's weights exactly (:data:`EXACT`,
derived from the C formats' table: each format names the GGUF type whose blocks its panels
hold; Q8_0 -> q8_0, Q4_0 -> q4_0, Q4_K -> q4_k, F16 -> float16, ...). Such a matrix is
the file's very blocks moved into panels by the C library (:func:`blockc.ops.pack_ggml`;
Q4_0's and Q5_0's converted to Q8_0's for q8_0 first), no weight requantised; a fused
attn.qkv in a format all three of q, k and v fit, or, when their types share none but
float32 (Q4_K_M's Q4_K q and k, Q6_K v), each part in its own (``m.dtypes[name]`` a (q,
k, v) tuple: three packed matrices, the file's size): a file mixing types (Q4_K_M) is a model of
mixed formats (``m.dtype == "mixed"``, ``m.dtypes`` names each matrix's, ``m.gguf_types``
the file's), computing with exactly the weights llama.cpp computes with. ``dtype=``
makes every matrix that format (requantised, or its blocks moved when exact). An integer
format (``dtype="q8_0i"``, ...: the formats whose products are integer dot products,
8-bit activations as llama.cpp multiplies them) holds its type's very blocks too, and a
model in one saves as that type (``save_gguf(path, "Q8_0")``: the same blocks).
``dtype="integer"`` does that matrix by matrix (:data:`INTEGER`: each matrix in the
integer format of its file type, the others as with ``dtype="exact"``): how llama.cpp
multiplies a mixed file such as Q4_K_M. ``dtype="bfloat16i"`` holds a BF16 file's
weights (subnormals as zeros) for bfloat16 dot products, and saves as BF16.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from .._errors import BlockcValueError
from .families import (GGUF_FAMILIES, GGUFMetadata, Spec,  # noqa: F401 (Spec re-exported)
                       family_of_arch, family_of_config)
from ..generation.config import GenerationConfig
from ..model import QKV, GPTConfig, layout
from .._enums import FORMATS
from ..block.ops import pack, pack_ggml, round_ggml16, unpack_ggml
from ..reference import ggml
from ..text.tokenizer import Tokenizer
from ..io import gguf as fmt
from .fused import fuse_gguf, split_gguf
from .gguf_mixes import FILE_TYPE, GGUF_DTYPES, MIXES, recipe  # noqa: F401 (re-exported)
from .gguf_tensors import (fail, file_blocks, file_floats, fill_blocks, fill_part,  # noqa: F401
                           holds, permute, piecewise, unpermute)  # (holds, permute, unpermute re-exported)
from ..text.gguf import metadata_of, placeholder

__all__ = ["load", "save", "save_streaming", "config_from_gguf", "ARCHITECTURES", "GGUF_DTYPES",
           "recipe", "MIXES", "OWN_RULE", "quantise", "DEFAULT_FORMAT", "default_formats",
           "GGUFMixin", "is_gguf", "INTEGER"]

#: llama.cpp's general.architecture names blockc reads (the families' GGUF side:
#: :mod:`blockc.checkpoint.families`)
ARCHITECTURES = tuple(GGUF_FAMILIES)


def _tensor(f: fmt.GGUFFile, name: str) -> fmt.GGUFTensor:
    t = f.tensors.get(name)
    if t is None:
        raise fail(f.path, f"tensor {name!r} is missing")
    return t


def config_from_gguf(f: fmt.GGUFFile) -> Dict[str, Any]:
    """The :class:`blockc.GPTConfig` fields of a parsed GGUF file's model, everything blockc
    would compute differently refused by name (its family's record reads the metadata).

    Parameters
    ----------
    f : GGUFFile

    Returns
    -------
    dict

    Raises
    ------
    ValueError
        An architecture blockc does not run (:data:`ARCHITECTURES`), or a feature blockc
        does not compute (named), or metadata missing or of the wrong type (named).
    """
    fam = family_of_arch(f.get("general.architecture"), f.path)
    return fam.read_gguf(GGUFMetadata(f, tied=_tensor_output(f) is None))


def _tensor_output(f: fmt.GGUFFile) -> Optional[fmt.GGUFTensor]:
    """output.weight, unless absent or the embedding's very bytes (llama.cpp's GPT-2 files
    carry the tied head twice)."""
    out = f.tensors.get("output.weight")
    emb = f.tensors.get("token_embd.weight")
    if out is not None and emb is not None and out.type == emb.type and out.shape == emb.shape \
            and np.array_equal(out.data, emb.data):
        return None
    return out


def names(arch: str, cfg) -> List[Spec]:
    """(llama.cpp name, blockc name, rows of the blockc tensor it fills or None, heads of
    the q/k reordering to undo or None) for every tensor of a model of ``cfg`` in a file
    of architecture ``arch`` (its family's table)."""
    return family_of_arch(arch, "GGUF").gguf_names(cfg)


def _special_ids(f: fmt.GGUFFile, vocab: int) -> Dict[str, int]:
    """bos/eos/pad ids of the file's tokenizer metadata that can be tokens: an int below
    both the tokenizer's and the model's vocabulary (others are left out)."""
    out = {}
    n = min(len(f.get("tokenizer.ggml.tokens") or ()) or vocab, vocab)
    for ours, theirs in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                         ("pad_token_id", "padding_token_id")):
        v = f.get(f"tokenizer.ggml.{theirs}")
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n:
            out[ours] = int(v)
    return out


def load(path: str, dtype: Optional[str], cls: Any,
         progress: Optional[Callable[[int, int], Any]] = None) -> Any:
    """A model (of class ``cls``, a blockc GPT) from a GGUF file (see
    :meth:`blockc.GPT.from_pretrained`; ``progress(done, total)`` after each tensor)."""
    path = os.fspath(path)
    f = fmt.read(path)
    arch = f.get("general.architecture")
    cfg = GPTConfig(**config_from_gguf(f))
    fam = family_of_arch(arch, path)
    f.tensors = split_gguf(f.tensors, fam.gguf_parts(cfg), path, fam.gguf_stacks(cfg))
    spec = names(arch, cfg)
    wanted = {n for n, _, _, _ in spec} | set(family_of_arch(arch, path).gguf_extras(cfg))
    tied_dup = cfg.tie_weights and "output.weight" in f.tensors
    extra = [n for n in f.tensors if n not in wanted and not (tied_dup and n == "output.weight")]
    if extra:
        raise fail(path, f"tensor {extra[0]!r} is not part of a {arch} model of this file's "
                          "metadata")
    for n, _, _, _ in spec:
        t = _tensor(f, n)
        if t.type not in ggml.DEQUANTISE:
            raise fail(path, f"tensor {n!r} has type {t.type}, which blockc does not read (it "
                              f"reads {', '.join(ggml.DEQUANTISE)})")
    lay = layout(cfg)  # shapes, and which tensors are packed matrices
    # the file's types of each blockc matrix (q, k and v are one matrix: three types)
    parts: Dict[str, List[str]] = {}
    for n, ours, _, _ in spec:
        if lay[ours].packed:
            parts.setdefault(ours, []).append(f.tensors[n].type)
    if dtype is None:  # each matrix by its file type's measured default
        cands = {ours: _split(ours, types, default_formats) for ours, types in parts.items()}
    elif dtype == "exact":
        cands = {ours: _split(ours, types, exact_formats) for ours, types in parts.items()}
    elif dtype == "integer":
        cands = {ours: _split(ours, types, integer_formats) for ours, types in parts.items()}
    else:
        cands = {ours: [dtype] for ours in parts}
    # the matrices whose formats must hold the file's very weights (a named format may not)
    check = {ours for ours, types in parts.items()
             if dtype in ("exact", "integer") or (dtype is None and _default_of(types)
                                                  in ("exact", "integer"))}
    while True:
        chosen = {ours: c[0] for ours, c in cands.items()}
        m = _fill(cls(cfg, dtypes=chosen), f, spec, check_exact=check, progress=progress)
        if not isinstance(m, set):
            break
        # matrices a format's packing stores differently: the next format (float32 last,
        # which is never checked, so this ends)
        for ours in m:
            cands[ours].pop(0)
    m.special_ids = _special_ids(f, cfg.vocab)
    # what generate, chat and serve stop at (a GGUF file has no generation_config.json):
    # its end of text and its end of turn
    m.generation_config = GenerationConfig.from_gguf(f.metadata, cfg.vocab)
    m.gguf_types = {n: f.tensors[n].type for n, _, _, _ in spec}  # what the file held
    m.gguf_tokenizer = {k: v for k, v in f.fields.items() if k.startswith("tokenizer.")}
    return m


def _split(ours: str, types: List[str], choices: Callable[[List[str]], List[Any]]) -> List[Any]:
    """The formats matrix ``ours`` of ggml ``types`` is tried in: ``choices(types)``, led,
    for an attn.qkv.weight whose q, k and v types have no format in common but float32
    (Q4_K_M's Q4_K q and k, Q6_K v), by the (q, k, v) tuple of each part's first choice:
    each part's rows in their own format (bc_gpt.h), the matrix at its file's size."""
    out = choices(types)
    if ours.endswith(QKV) and len(types) == 3 and out[0] == "float32":
        own = tuple(choices([t])[0] for t in types)
        if own[0] != own[1] or own[0] != own[2]:
            return [own] + out
    return out


def _cost(dtype: str) -> float:
    """Bytes a weight of ``dtype`` takes (its panels' block bytes over its block)."""
    return FORMATS[dtype].block_bytes / FORMATS[dtype].block


#: the formats cheapest first (bytes per weight; ties in the table's order)
_BY_COST = sorted(FORMATS, key=_cost)

#: GGUF type -> the blockc formats that hold its weights exactly, cheapest first: the
#: formats of the C table (not the integer ones) that hold its blocks (:func:`holds`: Q8_0
#: -> q8_0; Q4_0 -> q4_0, q8_0; Q5_0 -> q5_0, q8_0; Q4_K -> q4_k; Q6_K -> q6_k; F16 ->
#: float16; BF16 -> bfloat16; F32 -> float32). float32 holds every type's dequantised
#: weights too (:func:`exact_formats`).
EXACT: Dict[str, Tuple[str, ...]] = {
    name: held for name, held in ((name, tuple(d for d in _BY_COST if not FORMATS[d].integer
                                               and holds(d, name)))
                                  for name, _, _ in fmt.TYPES.values()) if held}


def exact_formats(types: List[str]) -> List[str]:
    """The blockc formats that hold exactly the weights of a matrix whose parts (q, k, v
    of a fused attn.qkv) have the ggml ``types``, cheapest first: those every part's
    :data:`EXACT` entry lists, then float32 (the dequantised weights)."""
    out = [c for c in EXACT.get(types[0], ())
           if c != "float32" and all(c in EXACT.get(t, ()) for t in types[1:])]
    return out + ["float32"]


#: GGUF type -> the blockc format that multiplies its very blocks by integer dot products
#: (8-bit activations), which ``dtype="integer"`` takes for a matrix of that type: the
#: integer format of the C table whose own type it is
INTEGER: Dict[str, str] = {fmt.TYPES[f.ggml_type][0]: name for name, f in FORMATS.items()
                           if f.integer and f.ggml_type >= 0}


def integer_formats(types: List[str]) -> List[str]:
    """:func:`exact_formats` led by the cheapest integer format that holds the blocks of
    every part's ggml ``types`` (:func:`holds`: a type's own :data:`INTEGER` format;
    q8_0i for parts of Q8_0, Q4_0 and Q5_0 mixed), when there is one."""
    lead = [d for d in _BY_COST if FORMATS[d].integer and all(holds(d, t) for t in types)]
    return lead[:1] + exact_formats(types)


#: GGUF type -> what a matrix of that type loads as by default (``dtype=None``), chosen by
#: measurement (benches/bench_formats.py, its table in docs/results/sizes.md): the fastest
#: choice whose mean KL from the float32 model is within llama.cpp's arithmetic's on the same file.
#: "exact": the format holding the file's very weights, float activations
#: (:func:`exact_formats`, ``dtype="exact"``); "integer": its very blocks by integer dot
#: products on 8-bit activations (:func:`integer_formats`: llama.cpp's arithmetic, so its KL
#: is the budget); a format's name: requantised to it. A type not listed: "exact".
#: Every quantised type loads as "integer": on AMD Zen 4 (family 25 model 17, 1 thread; the
#: bench's 4-layer model of width 512, every type and mix it writes) its decoding is 1.9-5.1x
#: the exact path's with AVX-512 and 1.7-3.7x with AVX2 forced, and at real sizes
#: (benches/bench_sizes.py, Llama-3.2-1B and Qwen2.5-0.5B shapes, docs/results/sizes.md)
#: decoding 1.0-2.6x and prompts 1.9-2.7x the exact path's. (An Intel Xeon family 6 model 207
#: measured the integer path slower than the exact one when decoding, faster on prompts; not
#: explained, and not the CPUs blockc targets.)
#: ``dtype="exact"`` keeps the file's weights and float activations.
DEFAULT_FORMAT: Dict[str, str] = dict.fromkeys(INTEGER, "integer")


def _default_of(types: List[str]) -> str:
    """The :data:`DEFAULT_FORMAT` of a matrix whose parts have the ggml ``types``: their
    common one ("exact" when they differ)."""
    picks = {DEFAULT_FORMAT.get(t, "exact") for t in types}
    return picks.pop() if len(picks) == 1 else "exact"


def default_formats(types: List[str]) -> List[str]:
    """The formats a matrix of ggml ``types`` is tried in by default (``dtype=None``): its
    :data:`DEFAULT_FORMAT`'s, then the exact ones (:func:`exact_formats`)."""
    pick = _default_of(types)
    if pick == "integer":
        return integer_formats(types)
    if pick == "exact":
        return exact_formats(types)
    return [pick] + exact_formats(types)


def native_format(types: List[str]) -> str:
    """The cheapest of :func:`exact_formats` (loading checks a format packed from floats
    tensor by tensor and takes the next when it would store other weights)."""
    return exact_formats(types)[0]


def _fill(m: Any, f: fmt.GGUFFile, spec: List[Spec], check_exact: Any,
          progress: Optional[Callable[[int, int], Any]] = None) -> Any:
    """Write every tensor of ``f`` into ``m``: a matrix whose format :func:`holds` every
    part's blocks as those blocks (moved into panels by the C library: exact, and no float
    copy), any other tensor dequantised and packed. Of the matrices named in
    ``check_exact`` (a set of blockc names), the set of those packed from floats that do
    not read back as the file's dequantised weights bit for bit, when there are any (else
    ``m``)."""
    lay = m.layout
    fmts = m.dtypes
    params = m.params
    types: Dict[str, List[str]] = {}
    for name, ours, _, _ in spec:
        types.setdefault(ours, []).append(f.tensors[name].type)
    parts: Dict[str, np.ndarray] = {}
    split: Dict[str, Dict[str, Any]] = {}  # split matrices' parts as they arrive
    inexact = set()
    for i, (name, ours, rows, heads) in enumerate(spec):
        if progress is not None and i:
            progress(i, len(spec))
        t = f.tensors[name]
        want = lay[ours].shape if rows is None else (rows[1] - rows[0],) + tuple(lay[ours].shape[1:])
        if t.shape != tuple(want):
            raise fail(f.path, f"tensor {name!r} has shape {t.shape}, expected {tuple(want)} for "
                                "this file's metadata")
        fm = fmts.get(ours)
        if isinstance(fm, tuple):  # q, k and v rows each in its own format
            fill_part(m, f, name, ours, rows, heads, split.setdefault(ours, {}))
            if ours in split and split[ours].get("inexact"):
                inexact.add(ours)
            continue
        raw = fm is not None and all(holds(fm, ty) for ty in types[ours])
        if raw and rows is None and heads is None and piecewise(f, name, fm):
            tl = lay[ours]  # read piece by piece, packed straight into the model's buffer
            fill_blocks(f, name, fm, params[tl.offset:tl.offset + tl.nbytes])
            continue
        # w: (rows, row bytes) of the format's own type's blocks, or the floats
        w = file_blocks(f, name, fm) if raw else file_floats(f, name)
        if heads is not None:
            w = unpermute(w, heads)  # whole rows: whole blocks
        if rows is not None:
            whole = parts.get(ours)
            if whole is None:
                shape = (lay[ours].shape[0],) + tuple(w.shape[1:])
                whole = parts[ours] = np.empty(shape, np.uint8 if raw else np.float32)
            whole[rows[0]:rows[1]] = w
            if rows[1] != lay[ours].shape[0]:
                continue
            w = parts.pop(ours)
        if raw:
            tl = lay[ours]
            # packed straight into the model's buffer (no temporary, no second copy)
            pack_ggml(np.ascontiguousarray(w), fm, tl.shape,
                      out=params[tl.offset:tl.offset + tl.nbytes])
            continue
        m.write_tensor(ours, np.ascontiguousarray(w))
        if ours in check_exact and lay[ours].packed and fm != "float32":
            if not np.array_equal(m.read_tensor(ours).view(np.uint32), w.view(np.uint32)):
                inexact.add(ours)
    if progress is not None and not inexact:
        progress(len(spec), len(spec))
    return inexact or m


# ---- saving -------------------------------------------------------------------------------------

#: GGUF type -> the format whose C quantiser (bc_pack, on every thread) writes that type's
#: blocks: the plain (not integer) formats of the C table whose blocks are a quantised type's.
#: Those the oracle quantises too (:data:`blockc.reference.ggml.QUANTISE`: Q8_0, Q4_0,
#: Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) write its very bytes (llama.cpp's reference
#: quantisers; tests/test_formats_table.py checks type by type, corner cases included: Q4_K
#: and Q5_K since issue 51, the oracle's zero dmin now llama.cpp's +0); the others (IQ4_NL,
#: IQ4_XS, Q2_K, Q3_K: :data:`OWN_RULE`) have blockc's own rule alone.
_C_QUANTISED: Dict[str, str] = {
    fmt.TYPES[f.ggml_type][0]: name for name, f in FORMATS.items()
    if f.ggml_type >= 0 and not f.integer and f.block > 1}

#: the types save writes by blockc's own quantising rule (bc_engine.h: the nearest levels
#: against simple scales) rather than llama.cpp's search: valid blocks any reader
#: dequantises, with more error than llama.cpp's (docs/guide.md, "GGUF files")
OWN_RULE = tuple(t for t in _C_QUANTISED if t not in ggml.QUANTISE)


def quantise(w: np.ndarray, typ: str) -> np.ndarray:
    """The (rows, row bytes) blocks of ggml type ``typ`` of the float32 matrix ``w``: by the
    C quantiser where it has the type (:data:`_C_QUANTISED`: the same bytes as the oracle's,
    on every thread), else, and for weights the C format refuses (beyond what its half
    scales hold), by :func:`blockc.reference.ggml.quantise` (a type of :data:`OWN_RULE`
    has no oracle: such weights are refused, naming the bound). F16 and BF16 are rounded
    in C on every thread (:func:`blockc.block.packed.round_ggml16`: the oracle's bits)."""
    if typ in ("F16", "BF16") and w.size:  # rounded in C, the oracle's very bits
        return round_ggml16(w, typ)
    fm = _C_QUANTISED.get(typ)
    if fm is not None and w.ndim == 2 and w.shape[1] % FORMATS[fm].block == 0:
        try:
            return unpack_ggml(pack(w, fm))
        except BlockcValueError:
            if typ in OWN_RULE:
                raise
    return ggml.quantise(w, typ)


def _gqa(cfg: GPTConfig) -> int:
    """Query heads per key/value head (llama.cpp's n_gqa)."""
    return cfg.heads // (cfg.kv_heads or cfg.heads)


def _metadata(m: Any, arch: str, dtype: str, extra: Mapping[str, Any]) -> Dict[str, Any]:
    V = fmt.Value
    cfg = m.config
    md: Dict[str, Any] = {"general.architecture": V("STRING", arch),
                          "general.name": V("STRING", str(extra.get("general.name", "blockc"))),
                          "general.file_type": V("UINT32", FILE_TYPE.get(dtype, 0)),
                          "general.quantization_version": V("UINT32", 2)}
    for suffix, (typ, value) in family_of_arch(arch, "GGUF").to_gguf(cfg).items():
        md[f"{arch}.{suffix}"] = V(typ, value)
    for k, v in extra.items():
        if k.startswith("tokenizer."):
            md[k] = v
    return md


def is_gguf(path: Any) -> bool:
    """Whether ``path`` names a GGUF file (a regular file ending in .gguf, or starting with
    the bytes 'GGUF')."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    p = os.fspath(path)
    if not os.path.isfile(p):
        return False
    if p.endswith(".gguf"):
        return True
    try:
        with open(p, "rb") as fh:
            return fh.read(4) == fmt.MAGIC
    except OSError:
        return False


class GGUFMixin:
    """``save_gguf`` for a :class:`blockc.model.Model` (mixed into :class:`blockc.GPT`);
    ``from_pretrained`` reads GGUF files through :func:`load`."""

    def save_gguf(self, path: "str | os.PathLike[str]", dtype: str = "F32",
                  tokenizer: Optional[Any] = None) -> None:
        """Write this model as a GGUF file llama.cpp loads and runs with the same weights.

        llama.cpp's names and conventions (a Llama's q/k rows reordered for its rotary
        pairing, GPT-2's head written out, the metadata its loader reads). Matrices
        are stored as ``dtype``, quantised by the C library's quantisers on every
        thread: llama.cpp's reference ones for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K
        and Q6_K (the bytes of :mod:`blockc.reference.ggml`'s and of llama.cpp's),
        blockc's own rule for IQ4_NL, IQ4_XS, Q2_K and Q3_K (:data:`OWN_RULE`); vectors
        (norms, biases) as F32. The model's own weights are what is quantised; a matrix
        in a format that holds the type's blocks (a q8_0 or q8_0i model's saved as Q8_0,
        a q4_k's as Q4_K, ...) is its blocks as they are (a file loaded and saved again
        has the same bytes).

        Parameters
        ----------
        path : str or os.PathLike
            The file (written atomically: whole or not at all).
        dtype : str, optional
            A ggml type (``"F32"``, ``"F16"``, ``"BF16"``, ``"Q8_0"``, ``"Q4_0"``,
            ``"Q4_1"``, ``"Q5_0"``, ``"Q5_1"``, ``"Q3_K"``, ``"Q4_K"``, ``"Q5_K"``,
            ``"Q6_K"``) or a llama.cpp mix (``"Q2_K"``, ``"Q3_K_S"``, ``"Q3_K_M"``,
            ``"Q3_K_L"``, ``"Q4_K_S"``, ``"Q4_K_M"``, ``"Q5_K_S"``, ``"Q5_K_M"``,
            ``"IQ4_NL"``, ``"IQ4_XS"``: Q6_K for the output, attn_v, ffn_down and
            attn_output of some layers a type up, :func:`recipe`); lower case too.
            K-quants of rows that are not whole blocks of 256 fall back as llama.cpp's
            do (Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, Q2_K and Q3_K to Q4_0, IQ4_XS
            to IQ4_NL).
        tokenizer : blockc.Tokenizer or str or os.PathLike, optional
            The tokenizer to store in the file (a Tokenizer, a checkpoint directory or
            a GGUF file); None: the one of the GGUF file this model was loaded from,
            else a placeholder vocabulary (a token ``<tN>`` per id) so that llama.cpp,
            which needs one, loads the file and runs token ids.

        Raises
        ------
        ValueError
            An unknown dtype, an architecture llama.cpp does not run.
        OSError
            The file cannot be written.

        Examples
        --------
        >>> import tempfile, os
        >>> m = GPT.random(GPTConfig(vocab=64, context=16, width=32, heads=2, layers=1))
        >>> with tempfile.TemporaryDirectory() as d:
        ...     m.save_gguf(os.path.join(d, "m.gguf"), dtype="Q8_0")
        ...     GPT.from_pretrained(os.path.join(d, "m.gguf")).dtype
        'q8_0'
        """
        if isinstance(tokenizer, (str, os.PathLike)) and not (
                os.path.isfile(tokenizer) and os.fspath(tokenizer).endswith(".gguf")):
            tokenizer = Tokenizer.from_pretrained(tokenizer)  # a directory's tokenizer.json
        meta = metadata_of(tokenizer, self) or placeholder(self.config.vocab)
        save(self, os.fspath(path), dtype, meta)


def arch_of(cfg) -> str:
    """llama.cpp's architecture name for a config (refusing what none of them is): its
    family's (:func:`blockc.checkpoint.families.family_of_config`), or the one it is
    written as (``gguf_as``: Mixtral's llama)."""
    fam = family_of_config(cfg)
    arch = fam.architectures[0] if fam.architectures else fam.gguf_as
    if arch is None or family_of_arch(arch, "GGUF").to_gguf is None:
        raise BlockcValueError(f"GPTConfig: llama.cpp has no architecture of the {fam.name} "
                               "family")
    fam = family_of_arch(arch, "GGUF")
    fam.to_gguf(cfg)  # refuses, before any work, a config the file cannot hold
    fam.gguf_names(cfg)  # (and a tensor it has no name for)
    return arch


def save(m: Any, path: str, dtype: str, tokenizer: Optional[Mapping[str, Any]] = None) -> None:
    """Write ``m`` as a GGUF file llama.cpp loads (see :meth:`blockc.GPT.save_gguf`)."""
    if not isinstance(dtype, str) or dtype.upper() not in GGUF_DTYPES:
        raise BlockcValueError(f"dtype must be one of {', '.join(GGUF_DTYPES)} (or lower case), "
                               f"got {dtype!r}")
    dtype = dtype.upper()
    cfg = m.config
    arch = arch_of(cfg)
    spec = names(arch, cfg)
    lay = m.layout
    fmts = m.dtypes
    tensors = []
    whole: Dict[str, np.ndarray] = {}
    for name, ours, rows, heads in spec:
        tl = lay[ours]
        # the matrices blockc packs take dtype; the rest (norms, biases, GPT-2's position
        # table, which blockc keeps float32) stay F32
        t = recipe(dtype, name, cfg.layers, tl.shape[-1], cfg.tie_weights, _gqa(cfg)) \
            if tl.packed else "F32"
        # a matrix already in the type: its blocks as they are (exact, no requantising)
        fm = fmts.get(ours, "")
        part = next((p for p in tl.parts if rows is not None and (p.row0, p.row1) == tuple(rows)),
                    None)
        if part is not None:  # a split matrix's q, k or v rows, in their own format
            fm = fm[tl.parts.index(part)]
            own = FORMATS[fm].ggml_type
            raw = own >= 0 and fmt.TYPES[own][0] == t
            w = (unpack_ggml(m.params[part.offset:part.offset + part.nbytes], fm,
                             (part.row1 - part.row0, tl.shape[1]))
                 if raw else m.read_tensor(ours)[part.row0:part.row1])
            if heads is not None:
                w = permute(w, heads)  # whole rows: whole blocks
            w = np.ascontiguousarray(w) if raw else np.ascontiguousarray(w, dtype=np.float32)
            tensors.append((name, t, (w.shape[0], tl.shape[1]), w if raw else quantise(w, t)))
            continue
        if isinstance(fm, tuple):  # a split matrix saved whole (GPT-2's attn_qkv): floats
            fm = ""
        own = FORMATS[fm].ggml_type if fm else -1
        raw = tl.packed and own >= 0 and fmt.TYPES[own][0] == t
        if ours not in whole:
            whole[ours] = (unpack_ggml(m.params[tl.offset:tl.offset + tl.nbytes], fm, tl.shape)
                           if raw else m.read_tensor(ours))
        w = whole[ours] if rows is None else whole[ours][rows[0]:rows[1]]
        if rows is None or rows[1] == tl.shape[0]:
            whole.pop(ours)
        if heads is not None:
            w = permute(w, heads)  # whole rows: whole blocks
        if raw:
            shape = tuple(w.shape[:1]) + tuple(tl.shape[1:])
            tensors.append((name, t, shape, np.ascontiguousarray(w)))
            continue
        w = np.ascontiguousarray(w, dtype=np.float32)
        tensors.append((name, t, w.shape, quantise(w, t)))
    tensors = fuse_gguf(tensors, family_of_arch(arch, "GGUF").gguf_parts(cfg),
                        family_of_arch(arch, "GGUF").gguf_stacks(cfg))
    for name, a in family_of_arch(arch, "GGUF").gguf_extras(cfg).items():
        a = np.ascontiguousarray(a, dtype=np.float32)
        tensors.append((name, "F32", a.shape, quantise(a, "F32")))
    extra = dict(tokenizer or {})
    ids = getattr(m, "special_ids", {}) or {}
    for ours, theirs in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                         ("pad_token_id", "padding_token_id")):
        v = ids.get(ours)
        if isinstance(v, list):
            v = v[0] if v else None
        if isinstance(v, int) and f"tokenizer.ggml.{theirs}" not in extra:
            extra[f"tokenizer.ggml.{theirs}"] = fmt.Value("UINT32", v)
    fmt.write(path, _metadata(m, arch, dtype, extra), tensors)


def save_streaming(path: str, cfg: GPTConfig, dtype: str,
                   weight: Callable[[str], np.ndarray],
                   tokenizer: Optional[Mapping[str, Any]] = None,
                   quantiser: Callable[[np.ndarray, str], np.ndarray] = quantise) -> None:
    """Write a GGUF file of a model of ``cfg`` tensor by tensor, never holding the model.

    ``weight(name)`` gives blockc's float32 tensor ``name`` (the names and shapes of
    :func:`blockc.model.layout` of ``cfg``); each is asked for when the file reaches it,
    quantised and written (a fused matrix kept until its last part is written), so a
    model larger than memory (an 8B one in float32) is written in the memory of its
    largest tensor. The bytes are those :func:`save` writes for a float32 model of these
    weights (and no special token ids). ``quantiser(w, type)`` gives a float32 matrix's
    blocks of a ggml type (:func:`quantise`, what :func:`save` uses, unless given).

    Raises
    ------
    ValueError
        An unknown dtype, an architecture llama.cpp does not run.
    """
    if not isinstance(dtype, str) or dtype.upper() not in GGUF_DTYPES:
        raise BlockcValueError(f"dtype must be one of {', '.join(GGUF_DTYPES)} (or lower case), "
                               f"got {dtype!r}")
    dtype = dtype.upper()
    arch = arch_of(cfg)
    lay = layout(cfg)
    whole: Dict[str, np.ndarray] = {}

    def later(ours: str, rows: Optional[Tuple[int, int]], heads: Optional[int],
              t: str) -> Callable[[], np.ndarray]:
        def make() -> np.ndarray:
            if ours not in whole:
                whole[ours] = np.asarray(weight(ours), dtype=np.float32).reshape(lay[ours].shape)
            w = whole[ours] if rows is None else whole[ours][rows[0]:rows[1]]
            if rows is None or rows[1] == lay[ours].shape[0]:
                whole.pop(ours)
            if heads is not None:
                w = permute(w, heads)
            return quantiser(np.ascontiguousarray(w, dtype=np.float32), t)
        return make

    tensors = []
    for name, ours, rows, heads in names(arch, cfg):
        tl = lay[ours]
        t = recipe(dtype, name, cfg.layers, tl.shape[-1], cfg.tie_weights, _gqa(cfg)) \
            if tl.packed else "F32"
        shape = ((rows[1] - rows[0]) if rows is not None else tl.shape[0],) + tuple(tl.shape[1:])
        tensors.append((name, t, shape, later(ours, rows, heads, t)))
    tensors = fuse_gguf(tensors, family_of_arch(arch, "GGUF").gguf_parts(cfg),
                        family_of_arch(arch, "GGUF").gguf_stacks(cfg))
    holder = type("_Config", (), {"config": cfg})()  # what _metadata reads of a model
    fmt.write(path, _metadata(holder, arch, dtype, dict(tokenizer or placeholder(cfg.vocab))),
              tensors)
