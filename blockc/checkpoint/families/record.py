"""The family record (:class:`Family`), its tensor table's row (:class:`TensorName`), the
typed reader of a GGUF file's metadata (:class:`GGUFMetadata`), and the typed readers of a
``config.json`` that every family's record uses."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Pattern, Tuple

import numpy as np

from ..._errors import BlockcValueError

__all__ = ["Family", "TensorName", "GGUFMetadata", "GGUF_REFUSE", "Name", "Spec", "Parts",
           "part_name", "get_field",
           "refusal", "int_field", "bool_field", "float_field", "str_field", "want", "gguf_sizes",
           "gguf_heads", "gguf_base"]

#: A Hugging Face tensor: (checkpoint name, blockc name, stored transposed, rows)
Name = Tuple[str, str, bool, Optional[Tuple[int, int]]]
#: A GGUF tensor: (llama.cpp name, blockc name, rows, heads of the q/k reordering to undo)
Spec = Tuple[str, str, Optional[Tuple[int, int]], Optional[int]]



class TensorName(NamedTuple):
    """One tensor of a family's table: blockc's name and its names in both checkpoints.

    ``rows`` (start, stop): the checkpoint tensor is those rows of blockc's (q, k and v
    of the fused ``attn.qkv``), None: all of it. ``transposed``: the Hugging Face tensor
    is stored ``(in, out)``. ``permuted``: the GGUF tensor's rows are llama.cpp's q/k
    reordering over that many heads. ``gguf`` None: a GGUF file of the family has no
    such tensor (a model that has it is not saved as one). ``hf_offset``: blockc's tensor
    is the Hugging Face one plus this, in float32 (Gemma's norm gains, ``1 + w``, folded
    in on load as transformers computes them and taken out on save). ``part`` (start,
    stop): the other way round, blockc's tensor is those rows of the checkpoint tensor
    (Phi-3's gate and up, the halves of ``gate_up_proj`` and of llama.cpp's ``ffn_up``):
    the tables name it :func:`part_name` of the checkpoint tensor, which the loaders split
    into its parts (:meth:`Family.hf_parts`) and the savers fuse again. ``stack`` (start,
    stop), the GGUF side only: blockc's tensor is one matrix of a GGUF tensor that stacks
    them along an axis of their own (llama.cpp's ``ffn_*_exps``, (experts, rows, cols):
    expert e rows e * rows to (e + 1) * rows of the merged (experts * rows, cols) matrix),
    a part as ``part`` is (:meth:`Family.gguf_stacks` names those tensors)."""

    ours: str
    hf: str
    gguf: Optional[str]
    transposed: bool = False
    rows: Optional[Tuple[int, int]] = None
    permuted: Optional[int] = None
    hf_offset: float = 0.0
    part: Optional[Tuple[int, int]] = None
    stack: Optional[Tuple[int, int]] = None


def part_name(name: str, part: Tuple[int, int]) -> str:
    """The name a family's tables give rows ``part`` (start, stop) of checkpoint tensor
    ``name`` (``"...gate_up_proj.weight[0:48]"``)."""
    return f"{name}[{part[0]}:{part[1]}]"


#: A fused checkpoint tensor's parts: {its name: ((part name, start, stop), ...)}, in row order
Parts = Dict[str, Tuple[Tuple[str, int, int], ...]]


def _parts(pairs: List[Tuple[str, Tuple[int, int]]]) -> Parts:
    out: Dict[str, List[Tuple[str, int, int]]] = {}
    for name, part in pairs:
        out.setdefault(name, []).append((part_name(name, part), part[0], part[1]))
    return {k: tuple(sorted(v, key=lambda p: p[1])) for k, v in out.items()}


# ---- GGUF metadata, as the families read it ----------------------------------------------------

_INTS = ("UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64")


class GGUFMetadata:
    """A parsed GGUF file's metadata and tensor names as a family reads them: keys under
    its architecture (``md.integer("block_count")`` reads ``{arch}.block_count``), typed,
    every refusal naming the file.

    Parameters
    ----------
    f : blockc.gguf.GGUFFile
        The file (``fields``, ``tensors``, ``path``, ``get``).
    tied : bool
        The head is the token embedding (the file has no ``output`` tensor, or one of
        the embedding's very bytes): the loader decides it from the tensors' bytes.
    """

    def __init__(self, f: Any, tied: bool) -> None:
        self.file = f
        self.path: str = f.path
        self.arch: str = f.get("general.architecture")
        self.tied = bool(tied)

    def key(self, suffix: str) -> str:
        """The full key of ``suffix`` under the file's architecture."""
        return f"{self.arch}.{suffix}"

    def get(self, suffix: str, default: Any = None) -> Any:
        """The value of ``{arch}.suffix`` (``default`` when absent)."""
        v = self.file.get(self.key(suffix))
        return default if v is None else v

    def integer(self, suffix: str, default: Optional[int] = None) -> int:
        """``{arch}.suffix`` as an integer in [1, 2**31] (``default`` when absent; missing
        and no default: refused)."""
        key = self.key(suffix)
        v = self.file.fields.get(key)
        if v is None:
            if default is None:
                raise self.fail(f"metadata key {key!r} is missing")
            return default
        if v.type not in _INTS or not 1 <= v.value <= 2 ** 31:
            raise self.fail(f"metadata key {key!r} must be a positive integer, got {v.type} "
                            f"{v.value!r}")
        return int(v.value)

    def real(self, suffix: str, default: float) -> float:
        """``{arch}.suffix`` as a finite number >= 0 (a FLOAT32 as its shortest decimal:
        1e-05, not 9.99999974e-06)."""
        key = self.key(suffix)
        v = self.file.fields.get(key)
        if v is None:
            return default
        if v.type not in ("FLOAT32", "FLOAT64") or not np.isfinite(v.value) or v.value < 0:
            raise self.fail(f"metadata key {key!r} must be a finite number >= 0, got {v.type} "
                            f"{v.value!r}")
        if v.type == "FLOAT32":
            return float(str(np.float32(v.value)))
        return float(v.value)

    def has(self, tensor: str) -> bool:
        """Whether the file has the tensor ``tensor``."""
        return tensor in self.file.tensors

    def shape(self, tensor: str) -> Tuple[int, ...]:
        """The shape of the tensor ``tensor`` (refused when missing)."""
        t = self.file.tensors.get(tensor)
        if t is None:
            raise self.fail(f"tensor {tensor!r} is missing")
        return tuple(t.shape)

    def fail(self, msg: str) -> BlockcValueError:
        return BlockcValueError(f"{self.path}: {msg}")

    def refuse(self, what: str, value: Any, why: str) -> BlockcValueError:
        return self.fail(f"{what}={value!r}: {why}; blockc does not compute that, so it refuses "
                         "rather than load a model that computes differently")


#: GGUF metadata (under the architecture) that changes what a model computes: the neutral
#: value, and what another value would compute; refused when present and not neutral
GGUF_REFUSE: Dict[str, Tuple[Any, str]] = {
    "rope.scaling.type": ("none", "rotary angles scaled"),
    "rope.scaling.factor": (1.0, "rotary angles scaled"),
    "rope.scaling.attn_factor": (1.0, "attention scaled for rotary scaling"),
    "expert_count": (0, "a mixture of experts"),
    "expert_used_count": (0, "a mixture of experts"),
    "attn_logit_softcapping": (0.0, "soft-capped attention logits"),
    "final_logit_softcapping": (0.0, "soft-capped output logits"),
    "logit_scale": (1.0, "scaled output logits"),
    "attention.clamp_kqv": (0.0, "clamped q/k/v"),
    "embedding_scale": (1.0, "a scaled embedding"),
    "residual_scale": (1.0, "scaled residuals"),
    "attention.scale": (0.0, "a non-default attention scale"),
}


# ---- the record --------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)  # a record is itself: compared and hashed by identity
class Family:
    """One model family, on both checkpoint sides.

    Attributes
    ----------
    name : str
        blockc's name for it (error messages, the tests).
    model_types : tuple of str
        Hugging Face ``model_type`` values it reads (the first is the one it writes).
    from_hf : callable
        ``config.json`` dict -> GPTConfig fields, refusing by field and value what blockc
        computes differently.
    check : callable or None
        ``check(cfg)`` raises a ValueError naming why a GPTConfig is not of this family;
        None: no config is saved as this family (Mistral's are saved as Llama's).
    to_hf : callable or None
        GPTConfig (passing ``check``) -> ``config.json`` dict.
    tensors : callable
        GPTConfig -> its :class:`TensorName` rows, in the order the savers write them.
    architectures : tuple of str
        llama.cpp ``general.architecture`` names it reads (the first is the one it writes).
    from_gguf : callable or None
        :class:`GGUFMetadata` -> GPTConfig fields (refusing by key and value).
    to_gguf : callable or None
        GPTConfig (passing ``check``) -> ``{key under the architecture: (GGUF value type,
        value)}``, refusing (by field) a config a GGUF file of the family cannot hold.
    gguf_refuse : mapping
        Its :data:`GGUF_REFUSE` (keys, neutral values and what another value computes).
    gguf_extra : callable or None
        GPTConfig -> ``{GGUF tensor name: float32 array}``: tensors a GGUF file of the
        config carries that are no parameter of it (Llama 3.1's ``rope_freqs.weight``).
    gguf_as : str or None
        The llama.cpp architecture a config of this family is written as when the family
        reads none of its own (Mixtral: a ``llama`` file, which Llama's record reads).
    prefix : str
        The name prefix its Hugging Face checkpoints may carry (or not).
    ignore : compiled regex
        Hugging Face names that hold no parameter (buffers older checkpoints carry).
    """

    name: str
    model_types: Tuple[str, ...]
    from_hf: Callable[[Mapping[str, Any]], Dict[str, Any]]
    check: Optional[Callable[[Any], None]]
    to_hf: Optional[Callable[[Any], Dict[str, Any]]]
    tensors: Callable[[Any], List[TensorName]]
    architectures: Tuple[str, ...] = ()
    from_gguf: Optional[Callable[[GGUFMetadata], Dict[str, Any]]] = None
    to_gguf: Optional[Callable[[Any], Dict[str, Tuple[str, Any]]]] = None
    gguf_refuse: Mapping[str, Tuple[Any, str]] = field(default_factory=lambda: dict(GGUF_REFUSE))
    gguf_extra: Optional[Callable[[Any], Dict[str, np.ndarray]]] = None
    gguf_as: Optional[str] = None
    prefix: str = ""
    ignore: Pattern[str] = re.compile(r"$^")

    def config(self, d: Mapping[str, Any]) -> Dict[str, Any]:
        """GPTConfig fields of a ``config.json`` dict (:attr:`from_hf`)."""
        return self.from_hf(d)

    def names(self, cfg: Any) -> List[Name]:
        """(Hugging Face name, blockc name, stored transposed, rows) of every tensor of
        ``cfg``; rows (start, stop): the checkpoint tensor is those rows of blockc's."""
        return [(t.hf if t.part is None else part_name(t.hf, t.part), t.ours, t.transposed,
                 t.rows) for t in self.tensors(cfg)]

    def hf_parts(self, cfg: Any) -> Parts:
        """The Hugging Face tensors of ``cfg`` that hold several of blockc's (``part``)."""
        return _parts([(t.hf, t.part) for t in self.tensors(cfg) if t.part is not None])

    def gguf_parts(self, cfg: Any) -> Parts:
        """The GGUF tensors of ``cfg`` that hold several of blockc's (``part``)."""
        return _parts([(t.gguf, t.stack or t.part) for t in self.tensors(cfg)
                       if (t.stack or t.part) is not None and t.gguf is not None])

    def gguf_stacks(self, cfg: Any) -> Tuple[str, ...]:
        """The GGUF tensors of ``cfg`` whose parts stack along an axis of their own."""
        return tuple(dict.fromkeys(t.gguf for t in self.tensors(cfg)
                                   if t.stack is not None and t.gguf is not None))

    def hf_offsets(self, cfg: Any) -> Dict[str, float]:
        """blockc name -> the offset folded into it on load from Hugging Face (nonzero only)."""
        return {t.ours: t.hf_offset for t in self.tensors(cfg) if t.hf_offset}

    def gguf_names(self, cfg: Any) -> List[Spec]:
        """(llama.cpp name, blockc name, rows, heads of the q/k reordering or None) of
        every tensor of ``cfg``; a tensor a GGUF file of the family cannot hold is
        refused by name."""
        out = []
        for t in self.tensors(cfg):
            if t.gguf is None:
                arch = (self.architectures or (self.name,))[0]
                raise BlockcValueError(f"GPTConfig: a {arch} GGUF file has no tensor for "
                                       f"{t.ours!r}")
            part = t.stack or t.part
            out.append((t.gguf if part is None else part_name(t.gguf, part), t.ours, t.rows,
                        t.permuted))
        return out

    def gguf_extras(self, cfg: Any) -> Dict[str, np.ndarray]:
        """The tensors a GGUF file of ``cfg`` carries beside its parameters (:attr:`gguf_extra`)."""
        return self.gguf_extra(cfg) if self.gguf_extra is not None else {}

    def read_gguf(self, md: GGUFMetadata) -> Dict[str, Any]:
        """GPTConfig fields of a GGUF file of this family: :attr:`gguf_refuse` first,
        then :attr:`from_gguf`."""
        for suffix, (neutral, why) in self.gguf_refuse.items():
            v = md.get(suffix)
            # "linear" scaling by a factor of 1 is no scaling
            if v is not None and v != neutral and not (
                    suffix == "rope.scaling.type" and v == "linear"
                    and md.get("rope.scaling.factor", 1.0) == 1.0):
                raise md.refuse(md.key(suffix), v, why)
        if self.from_gguf is None:
            raise md.fail(f"blockc does not read {self.name} GGUF files")
        return self.from_gguf(md)


# ---- config.json, typed ------------------------------------------------------------------------

def get_field(d: Mapping[str, Any], key: str, default: Any = None, alias: Tuple[str, ...] = ()):
    for k in (key,) + alias:
        if k in d and d[k] is not None:
            return d[k]
    return default


def refusal(model: str, field_: str, value: Any, why: str) -> BlockcValueError:
    return BlockcValueError(f"config.json: {model} {field_}={value!r}: {why}; blockc does not "
                            "compute that, so it refuses rather than load a model that computes "
                            "differently")


# Every field is read through one of these typed getters, so a value of the wrong type is
# refused by name ("yes" is not true, "abc" is not a number) instead of read as something
# else in silence or failing later with an error that names nothing.

def int_field(d: Mapping[str, Any], key: str, alias: Tuple[str, ...] = (), default: Any = None) -> int:
    v = get_field(d, key, default, alias)
    if type(v) is not int:
        raise BlockcValueError(f"config.json: {key} must be an integer, got {v!r}")
    return v


def bool_field(d: Mapping[str, Any], key: str, default: bool) -> bool:
    v = get_field(d, key, default)
    if not isinstance(v, bool):
        raise BlockcValueError(f"config.json: {key} must be true or false, got {v!r}")
    return v


def float_field(d: Mapping[str, Any], key: str, default: float) -> float:
    v = get_field(d, key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BlockcValueError(f"config.json: {key} must be a number, got {v!r}")
    return float(v)


def str_field(d: Mapping[str, Any], key: str, default: str) -> str:
    v = get_field(d, key, default)
    if not isinstance(v, str):
        raise BlockcValueError(f"config.json: {key} must be a string, got {v!r}")
    return v


def want(cfg: Any, what: str, **want: Any) -> None:
    """Refuse a config whose fields differ from ``want`` (``what``: the checkpoint kind)."""
    for f, v in want.items():
        got = getattr(cfg, f)
        if got != v:
            raise BlockcValueError(f"GPTConfig.{f.rstrip('_')}={got!r}: {what} has "
                                   f"{f.rstrip('_')}={v!r}")


# ---- the shared GGUF metadata ------------------------------------------------------------------

def gguf_heads(md: GGUFMetadata, width: int, heads: int,
               partial: bool = False) -> Tuple[int, int, int]:
    """(K/V heads, head size, rotated dimensions) of a GGUF file's attention, checked:
    value heads as wide as key heads, K/V heads dividing the heads, and the whole head
    rotated (or, with ``partial``, an even part of it); else refused by key."""
    kv = md.integer("attention.head_count_kv", heads)
    head_dim = md.integer("attention.key_length", width // heads if width % heads == 0 else 0)
    vdim = md.integer("attention.value_length", head_dim)
    if vdim != head_dim:
        raise md.refuse(md.key("attention.value_length"), vdim,
                        f"value heads of another width than the key heads ({head_dim})")
    rot = md.integer("rope.dimension_count", head_dim)
    if rot != head_dim and not (partial and rot <= head_dim and rot % 2 == 0):
        raise md.refuse(md.key("rope.dimension_count"), rot,
                        f"rotary embeddings on part of each head of {head_dim}")
    if heads % kv:
        raise md.fail(f"{md.key('attention.head_count_kv')}={kv} does not divide "
                      f"head_count={heads}")
    return kv, head_dim, rot


def gguf_sizes(md: GGUFMetadata, rope_freqs: bool = False,
               experts: bool = False) -> Dict[str, Any]:
    """The fields every GGUF family has, everything blockc computes differently refused:
    experts (unless ``experts``: the family reads them, and the file declares
    ``expert_count``) and (unless ``rope_freqs``: the family reads them) per-dimension rope
    frequencies by tensor; a sliding window narrower than the context is every layer's
    window."""
    if md.has("rope_freqs.weight") and not rope_freqs:
        raise md.refuse("tensor 'rope_freqs.weight'", "present",
                        "rotary frequencies scaled per dimension (Llama 3.1's rope scaling)")
    if (not experts or md.get("expert_count") is None) and any(
            ".ffn_gate_inp." in n or "_exps." in n for n in md.file.tensors):
        raise md.refuse("tensor 'ffn_gate_inp'", "present", "a mixture of experts")
    context = md.integer("context_length")
    width = md.integer("embedding_length")
    layers = md.integer("block_count")
    heads = md.integer("attention.head_count")
    d_ff = md.integer("feed_forward_length")
    window = md.get("attention.sliding_window")  # on every layer (llama.cpp's llama, qwen2)
    if window is not None and (type(window) is not int or window < 0):
        raise md.fail(f"{md.key('attention.sliding_window')} must be a positive integer, "
                      f"got {window!r}")
    if window == 0:  # llama.cpp's none (its phi3 converter writes 0 for no window)
        window = None
    vocab = md.shape("token_embd.weight")[0]
    return dict(vocab=vocab, context=context, width=width, heads=heads, layers=layers,
                tie_weights=md.tied, d_ff=d_ff,
                sliding_window=window if window is not None and window < context else None)


def gguf_base(cfg: Any) -> Dict[str, Tuple[str, Any]]:
    return {"context_length": ("UINT32", cfg.context), "embedding_length": ("UINT32", cfg.width),
            "block_count": ("UINT32", cfg.layers), "feed_forward_length": ("UINT32", cfg.d_ff_),
            "attention.head_count": ("UINT32", cfg.heads)}


