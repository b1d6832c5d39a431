"""Model families: one record per family, naming it on both checkpoint sides.

A :class:`Family` holds everything blockc knows of a family, written once: its Hugging
Face ``model_type`` values and how a ``config.json`` maps onto :class:`blockc.GPTConfig`
(refusing, by field and value, anything the engine would compute differently) and back;
its llama.cpp ``general.architecture`` names and how a GGUF file's metadata maps onto
GPTConfig and back; which configs it is (:attr:`Family.check`, what the savers pick a
family by); and one table of its tensors, each row blockc's name beside the Hugging Face
name and the GGUF name (:class:`TensorName`: GPT-2's ``Conv1D`` weights stored transposed,
``(in, out)``, so a square ``attn.c_proj`` cannot load the wrong way round; row slices of
a fused tensor, q, k and v of ``attn.qkv``; the heads of llama.cpp's q/k reordering).

Both loaders (:mod:`blockc.checkpoint.hf`, :mod:`blockc.checkpoint.gguf`) and both
savers read these records and nothing else about a family: no module outside this one
compares a family's name. A new family is one record here (and :data:`REGISTRY` lists
it); a new way of computing is a GPTConfig field and its C side.

The model core (:mod:`blockc.model`) imports nothing of this layer:
``GPTConfig.from_hf``/``to_hf`` call the converters this module registers with it
(:func:`blockc.model.config.register_hf_codec`) when :mod:`blockc.checkpoint` is
imported, as ``import blockc`` does.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Pattern, Tuple, Union

import numpy as np

from .._errors import BlockcTypeError, BlockcValueError
from .._files import read_config
from ..model.config import register_hf_codec

__all__ = ["Family", "TensorName", "GGUFMetadata", "REGISTRY", "FAMILIES", "GGUF_FAMILIES",
           "GGUF_REFUSE", "Name", "Spec", "family_of", "family_of_arch", "family_of_config",
           "config_to_hf", "hf_fields", "read_config"]

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
    such tensor (a model that has it is not saved as one)."""

    ours: str
    hf: str
    gguf: Optional[str]
    transposed: bool = False
    rows: Optional[Tuple[int, int]] = None
    permuted: Optional[int] = None


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
    prefix: str = ""
    ignore: Pattern[str] = re.compile(r"$^")

    def config(self, d: Mapping[str, Any]) -> Dict[str, Any]:
        """GPTConfig fields of a ``config.json`` dict (:attr:`from_hf`)."""
        return self.from_hf(d)

    def names(self, cfg: Any) -> List[Name]:
        """(Hugging Face name, blockc name, stored transposed, rows) of every tensor of
        ``cfg``; rows (start, stop): the checkpoint tensor is those rows of blockc's."""
        return [(t.hf, t.ours, t.transposed, t.rows) for t in self.tensors(cfg)]

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
            out.append((t.gguf, t.ours, t.rows, t.permuted))
        return out

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

def _get(d: Mapping[str, Any], key: str, default: Any = None, alias: Tuple[str, ...] = ()):
    for k in (key,) + alias:
        if k in d and d[k] is not None:
            return d[k]
    return default


def _refuse(model: str, field_: str, value: Any, why: str) -> BlockcValueError:
    return BlockcValueError(f"config.json: {model} {field_}={value!r}: {why}; blockc does not "
                            "compute that, so it refuses rather than load a model that computes "
                            "differently")


# Every field is read through one of these typed getters, so a value of the wrong type is
# refused by name ("yes" is not true, "abc" is not a number) instead of read as something
# else in silence or failing later with an error that names nothing.

def _int(d: Mapping[str, Any], key: str, alias: Tuple[str, ...] = (), default: Any = None) -> int:
    v = _get(d, key, default, alias)
    if type(v) is not int:
        raise BlockcValueError(f"config.json: {key} must be an integer, got {v!r}")
    return v


def _bool(d: Mapping[str, Any], key: str, default: bool) -> bool:
    v = _get(d, key, default)
    if not isinstance(v, bool):
        raise BlockcValueError(f"config.json: {key} must be true or false, got {v!r}")
    return v


def _float(d: Mapping[str, Any], key: str, default: float) -> float:
    v = _get(d, key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BlockcValueError(f"config.json: {key} must be a number, got {v!r}")
    return float(v)


def _str(d: Mapping[str, Any], key: str, default: str) -> str:
    v = _get(d, key, default)
    if not isinstance(v, str):
        raise BlockcValueError(f"config.json: {key} must be a string, got {v!r}")
    return v


def _want(cfg: Any, what: str, **want: Any) -> None:
    """Refuse a config whose fields differ from ``want`` (``what``: the checkpoint kind)."""
    for f, v in want.items():
        got = getattr(cfg, f)
        if got != v:
            raise BlockcValueError(f"GPTConfig.{f.rstrip('_')}={got!r}: {what} has "
                                   f"{f.rstrip('_')}={v!r}")


# ---- the shared GGUF metadata ------------------------------------------------------------------

def _gguf_sizes(md: GGUFMetadata) -> Dict[str, Any]:
    """The fields every GGUF family has, everything blockc computes differently refused:
    experts and per-dimension rope frequencies by tensor, a sliding window narrower than
    the context."""
    if md.has("rope_freqs.weight"):
        raise md.refuse("tensor 'rope_freqs.weight'", "present",
                        "rotary frequencies scaled per dimension (Llama 3.1's rope scaling)")
    if any(".ffn_gate_inp." in n or "_exps." in n for n in md.file.tensors):
        raise md.refuse("tensor 'ffn_gate_inp'", "present", "a mixture of experts")
    context = md.integer("context_length")
    width = md.integer("embedding_length")
    layers = md.integer("block_count")
    heads = md.integer("attention.head_count")
    d_ff = md.integer("feed_forward_length")
    window = md.get("attention.sliding_window")
    if window is not None and window < context:
        raise md.refuse(md.key("attention.sliding_window"), window,
                        f"a sliding window narrower than the context ({context})")
    vocab = md.shape("token_embd.weight")[0]
    return dict(vocab=vocab, context=context, width=width, heads=heads, layers=layers,
                tie_weights=md.tied, d_ff=d_ff)


def _gguf_base(cfg: Any) -> Dict[str, Tuple[str, Any]]:
    return {"context_length": ("UINT32", cfg.context), "embedding_length": ("UINT32", cfg.width),
            "block_count": ("UINT32", cfg.layers), "feed_forward_length": ("UINT32", cfg.d_ff_),
            "attention.head_count": ("UINT32", cfg.heads)}


# ---- GPT-2 -------------------------------------------------------------------------------------

_GPT2_ACT = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
             "relu": "relu"}
_GPT2_REFUSE = {"scale_attn_by_inverse_layer_idx": (True, "scores scaled by 1 / layer index"),
                "reorder_and_upcast_attn": (True, "attention reordered and upcast"),
                "add_cross_attention": (True, "cross-attention layers"),
                "scale_attn_weights": (False, "unscaled attention scores")}


def _gpt2_from_hf(d: Mapping[str, Any]) -> Dict[str, Any]:
    for f, (bad, why) in _GPT2_REFUSE.items():
        if _bool(d, f, not bad) == bad:
            raise _refuse("GPT-2", f, bad, why)
    act = _str(d, "activation_function", "gelu_new")
    if act not in _GPT2_ACT:
        raise _refuse("GPT-2", "activation_function", act,
                      f"blockc runs {', '.join(sorted(_GPT2_ACT))}")
    width = _int(d, "n_embd", ("hidden_size",), 768)
    inner = _get(d, "n_inner")
    return dict(vocab=_int(d, "vocab_size", default=50257),
                context=_int(d, "n_positions", ("n_ctx", "max_position_embeddings"), 1024),
                width=width, heads=_int(d, "n_head", ("num_attention_heads",), 12),
                layers=_int(d, "n_layer", ("num_hidden_layers",), 12),
                eps=_float(d, "layer_norm_epsilon", 1e-5),
                tie_weights=_bool(d, "tie_word_embeddings", True),
                d_ff=None if inner is None else _int(d, "n_inner"),
                activation=_GPT2_ACT[act])


def _gpt2_check(cfg: Any) -> None:
    _want(cfg, "a GPT-2 checkpoint", norm="layer", placement="pre", positions="learned",
          residual=True, qkv_bias=True, out_bias=True, mlp_bias=True, kv_heads_=cfg.heads,
          head_dim_=cfg.width // cfg.heads)
    if cfg.width % cfg.heads:
        raise BlockcValueError("GPTConfig: a GPT-2 checkpoint needs heads dividing width")
    if cfg.activation not in ("gelu_tanh", "gelu", "relu"):
        raise BlockcValueError(f"GPTConfig.activation={cfg.activation!r}: GPT-2 has no such "
                               "activation_function")


def _gpt2_to_hf(cfg: Any) -> Dict[str, Any]:
    act = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}[cfg.activation]
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "vocab_size": cfg.vocab, "n_positions": cfg.context, "n_ctx": cfg.context,
            "n_embd": cfg.width, "n_layer": cfg.layers, "n_head": cfg.heads,
            "n_inner": None if cfg.d_ff is None else cfg.d_ff_, "activation_function": act,
            "layer_norm_epsilon": cfg.eps, "tie_word_embeddings": cfg.tie_weights,
            "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
            "attn_pdrop": 0.0}


def _gpt2_from_gguf(md: GGUFMetadata) -> Dict[str, Any]:
    out = _gguf_sizes(md)
    for n in ("attn_q", "attn_k", "attn_v", "ffn_gate"):
        if md.has(f"blk.0.{n}.weight"):
            raise md.fail(f"tensor 'blk.0.{n}.weight': a GPT-2 file has fused attn_qkv and no "
                          "gate")
    d_ff = out.pop("d_ff")
    return dict(out, eps=md.real("attention.layer_norm_epsilon", 1e-5),
                d_ff=None if d_ff == 4 * out["width"] else d_ff, activation="gelu_tanh")


def _gpt2_to_gguf(cfg: Any) -> Dict[str, Tuple[str, Any]]:
    if cfg.activation != "gelu_tanh":
        raise BlockcValueError(f"GPTConfig.activation={cfg.activation!r}: llama.cpp's gpt2 "
                               "runs GELU-tanh")
    return dict(_gguf_base(cfg), **{"attention.layer_norm_epsilon": ("FLOAT32", cfg.eps)})


# (blockc, transformers, llama.cpp, Conv1D: stored transposed) of a GPT-2 layer's tensors
_GPT2_LAYER = (("ln1", "ln_1", "attn_norm", False),
               ("attn.qkv", "attn.c_attn", "attn_qkv", True),
               ("attn.proj", "attn.c_proj", "attn_output", True),
               ("ln2", "ln_2", "ffn_norm", False),
               ("up", "mlp.c_fc", "ffn_up", True),
               ("down", "mlp.c_proj", "ffn_down", True))


def _gpt2_tensors(cfg: Any) -> List[TensorName]:
    p, T = "transformer.", TensorName
    out = [T("token.weight", p + "wte.weight", "token_embd.weight"),
           T("position.weight", p + "wpe.weight", "position_embd.weight")]
    for i in range(cfg.layers):
        b, h, g = f"blocks.{i}.", f"{p}h.{i}.", f"blk.{i}."
        for ours, hf, gg, transposed in _GPT2_LAYER:
            out += [T(b + ours + ".weight", h + hf + ".weight", g + gg + ".weight", transposed),
                    T(b + ours + ".bias", h + hf + ".bias", g + gg + ".bias")]
    out += [T("norm.weight", p + "ln_f.weight", "output_norm.weight"),
            T("norm.bias", p + "ln_f.bias", "output_norm.bias")]
    if not cfg.tie_weights:
        out.append(T("head.weight", "lm_head.weight", "output.weight"))
    return out


# ---- Llama, Qwen2, Mistral ----------------------------------------------------------------------

def _rope_theta(model: str, d: Mapping[str, Any]) -> float:
    """rope_theta from transformers' two spellings (rope_parameters, or rope_theta and
    rope_scaling), refusing every scaled variant: their angles differ."""
    rp = d.get("rope_parameters")
    scaling = d.get("rope_scaling")
    for key, v in (("rope_parameters", rp), ("rope_scaling", scaling)):
        if v is not None and not isinstance(v, Mapping):
            raise BlockcValueError(f"config.json: {key} must be an object, got {v!r}")
    if isinstance(rp, Mapping):
        kind = rp.get("rope_type", rp.get("type", "default"))
        if kind != "default":
            raise _refuse(model, "rope_parameters.rope_type", kind, "rotary angles scaled")
        theta = rp.get("rope_theta", d.get("rope_theta", 10000.0))
    else:
        theta = d.get("rope_theta", 10000.0)
    if isinstance(scaling, Mapping) and scaling.get("rope_type", scaling.get("type")) not in (
            None, "default"):
        raise _refuse(model, "rope_scaling", dict(scaling), "rotary angles scaled")
    prf = _float(d, "partial_rotary_factor", 1.0)
    if prf != 1.0:
        raise _refuse(model, "partial_rotary_factor", prf, "rotary embeddings on part of each head")
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
        raise BlockcValueError(f"config.json: rope_theta must be a positive number, got {theta!r}")
    return float(theta)


def _layer_types(d: Mapping[str, Any]) -> List[str]:
    types = _get(d, "layer_types", [])
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise BlockcValueError(f"config.json: layer_types must be a list of strings, got {types!r}")
    return types


# How each family reads its sliding window (None: full attention). A window as wide as the
# context is full attention: exact. A narrower one differs beyond it; the model is then
# capped at the window, where it is exact.

def _no_window(d: Mapping[str, Any]) -> Any:
    _layer_types(d)
    return None


def _window_always(d: Mapping[str, Any]) -> Any:  # Mistral: sliding_window, when set
    return d.get("sliding_window")


def _window_when_used(d: Mapping[str, Any]) -> Any:  # Qwen2: only when use_sliding_window says
    types = _layer_types(d)
    if _bool(d, "use_sliding_window", False) or "sliding_attention" in types:
        return d.get("sliding_window")
    return None


# How each family reads its biases: (q/k/v, output, MLP)

def _biases_by_flags(d: Mapping[str, Any]) -> Tuple[bool, bool, bool]:
    attn = _bool(d, "attention_bias", False)
    return attn, attn, _bool(d, "mlp_bias", False)


def _biases_qkv_only(d: Mapping[str, Any]) -> Tuple[bool, bool, bool]:
    return True, False, False


def _no_biases(d: Mapping[str, Any]) -> Tuple[bool, bool, bool]:
    # transformers' Mistral has no biases, whatever attention_bias or mlp_bias say
    return False, False, False


def _llama_from_hf(d: Mapping[str, Any], *, model: str,
                   window_of: Callable[[Mapping[str, Any]], Any],
                   biases_of: Callable[[Mapping[str, Any]], Tuple[bool, bool, bool]],
                   ) -> Dict[str, Any]:
    """A Llama-shaped config.json (RMSNorm, rotary positions, SwiGLU, grouped K/V heads);
    ``model`` names the family in refusals."""
    act = _str(d, "hidden_act", "silu")
    if act != "silu":
        raise _refuse(model, "hidden_act", act, "blockc's gated MLP is SiLU-gated (SwiGLU)")
    for f in ("num_local_experts", "num_experts", "n_routed_experts"):
        if _int(d, f, default=0):
            raise _refuse(model, f, d[f], "a mixture of experts")
    width = _int(d, "hidden_size", default=4096)
    heads = _int(d, "num_attention_heads", default=32)
    kv = _get(d, "num_key_value_heads", heads)
    if type(kv) is not int:
        raise BlockcValueError(f"config.json: num_key_value_heads must be an integer, got {kv!r}")
    context = _int(d, "max_position_embeddings", default=2048)
    window = window_of(d)
    if window is not None:
        if type(window) is not int or window < 1:
            raise BlockcValueError(f"config.json: sliding_window must be a positive integer, "
                                   f"got {window!r}")
        context = min(context, window)
    qkv_b, out_b, mlp_b = biases_of(d)
    head_dim = _get(d, "head_dim")
    if head_dim is not None and type(head_dim) is not int:
        raise BlockcValueError(f"config.json: head_dim must be an integer, got {head_dim!r}")
    if kv == heads:  # the defaults as None, so equal configs compare equal
        kv = None
    if head_dim is not None and heads and width % heads == 0 and head_dim == width // heads:
        head_dim = None
    return dict(vocab=_int(d, "vocab_size", default=32000), context=context, width=width,
                heads=heads, layers=_int(d, "num_hidden_layers", default=32),
                eps=_float(d, "rms_norm_eps", 1e-6),
                tie_weights=_bool(d, "tie_word_embeddings", False), norm="rms",
                placement="pre", activation="swiglu",
                d_ff=_int(d, "intermediate_size", default=11008), positions="rope",
                rope_theta=_rope_theta(model, d), kv_heads=kv, head_dim=head_dim,
                residual=True, qkv_bias=qkv_b, out_bias=out_b, mlp_bias=mlp_b)


def _llama_shape(cfg: Any, what: str) -> None:
    _want(cfg, what, norm="rms", placement="pre", positions="rope", activation="swiglu",
          residual=True)


def _llama_check(cfg: Any) -> None:
    _llama_shape(cfg, "a Llama checkpoint")
    if cfg.qkv_bias != cfg.out_bias:
        raise BlockcValueError(f"GPTConfig: biases qkv={cfg.qkv_bias}, out={cfg.out_bias}: "
                               "Llama has them on all attention projections or none")


def _qwen2_check(cfg: Any) -> None:
    _llama_shape(cfg, "a Qwen2 checkpoint")
    if (cfg.qkv_bias, cfg.out_bias, cfg.mlp_bias) != (True, False, False):
        raise BlockcValueError(f"GPTConfig: biases qkv={cfg.qkv_bias}, out={cfg.out_bias}, "
                               f"mlp={cfg.mlp_bias}: Qwen2 has them on q/k/v only")


def _llama_to_hf(cfg: Any, *, model_type: str, architecture: str,
                 extra: Callable[[Any], Dict[str, Any]]) -> Dict[str, Any]:
    return {"architectures": [architecture], "model_type": model_type, "vocab_size": cfg.vocab,
            "hidden_size": cfg.width, "intermediate_size": cfg.d_ff_,
            "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
            "num_key_value_heads": cfg.kv_heads_, "head_dim": cfg.head_dim_,
            "hidden_act": "silu", "max_position_embeddings": cfg.context,
            "rms_norm_eps": cfg.eps, "tie_word_embeddings": cfg.tie_weights,
            "rope_theta": cfg.rope_theta,
            "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
            "attention_dropout": 0.0, **extra(cfg)}


def _llama_from_gguf(md: GGUFMetadata, *, biases: Optional[Tuple[bool, bool]],
                     why: str) -> Dict[str, Any]:
    """A Llama-shaped GGUF file; ``biases`` (q/k/v, output) the ones the family has (None:
    on all of q/k/v/output or on none), ``why`` saying so when the file differs."""
    out = _gguf_sizes(md)
    width, heads = out["width"], out["heads"]
    kv = md.integer("attention.head_count_kv", heads)
    head_dim = md.integer("attention.key_length", width // heads if width % heads == 0 else 0)
    vdim = md.integer("attention.value_length", head_dim)
    if vdim != head_dim:
        raise md.refuse(md.key("attention.value_length"), vdim,
                        f"value heads of another width than the key heads ({head_dim})")
    rot = md.integer("rope.dimension_count", head_dim)
    if rot != head_dim:
        raise md.refuse(md.key("rope.dimension_count"), rot,
                        f"rotary embeddings on part of each head of {head_dim}")
    if heads % kv:
        raise md.fail(f"{md.key('attention.head_count_kv')}={kv} does not divide "
                      f"head_count={heads}")
    qkv_bias = md.has("blk.0.attn_q.bias")
    out_bias = md.has("blk.0.attn_output.bias")
    if (qkv_bias, out_bias) != (biases or (qkv_bias, qkv_bias)):
        raise md.fail(why)
    if md.has("blk.0.ffn_up.bias") or md.has("blk.0.attn_norm.bias"):
        raise md.refuse("tensor 'blk.0.ffn_up.bias'", "present", "MLP or norm biases")
    return dict(out, eps=md.real("attention.layer_norm_rms_epsilon", 1e-5), norm="rms",
                placement="pre", activation="swiglu", positions="rope",
                rope_theta=md.real("rope.freq_base", 10000.0),
                kv_heads=None if kv == heads else kv,
                head_dim=None if head_dim * heads == width else head_dim, residual=True,
                qkv_bias=qkv_bias, out_bias=out_bias, mlp_bias=False)


def _llama_to_gguf(cfg: Any) -> Dict[str, Tuple[str, Any]]:
    md = dict(_gguf_base(cfg), **{"attention.head_count_kv": ("UINT32", cfg.kv_heads_),
                                  "attention.layer_norm_rms_epsilon": ("FLOAT32", cfg.eps),
                                  "rope.freq_base": ("FLOAT32", cfg.rope_theta),
                                  "rope.dimension_count": ("UINT32", cfg.head_dim_)})
    if cfg.head_dim_ * cfg.heads != cfg.width:
        md["attention.key_length"] = ("UINT32", cfg.head_dim_)
        md["attention.value_length"] = ("UINT32", cfg.head_dim_)
    md["vocab_size"] = ("UINT32", cfg.vocab)
    return md


def _llama_tensors(cfg: Any, *, permuted: bool) -> List[TensorName]:
    """Separate q/k/v tensors (blockc fuses them: rows q, then k, then v); ``permuted``:
    llama.cpp's converter reorders a Llama's q and k rows within each head (it rotates
    the pairs (2i, 2i+1), transformers and blockc the pairs (i, i + Dh/2))."""
    p, T = "model.", TensorName
    q, kv = cfg.heads * cfg.head_dim_, cfg.kv_heads_ * cfg.head_dim_
    parts = (("q", (0, q), cfg.heads if permuted else None),
             ("k", (q, q + kv), cfg.kv_heads_ if permuted else None),
             ("v", (q + kv, q + 2 * kv), None))
    out = [T("token.weight", p + "embed_tokens.weight", "token_embd.weight")]
    for i in range(cfg.layers):
        b, h, g = f"blocks.{i}.", f"{p}layers.{i}.", f"blk.{i}."
        out.append(T(b + "ln1.weight", h + "input_layernorm.weight", g + "attn_norm.weight"))
        for kind in ("weight", "bias") if cfg.qkv_bias else ("weight",):
            out += [T(b + "attn.qkv." + kind, h + f"self_attn.{part}_proj.{kind}",
                      g + f"attn_{part}.{kind}", rows=rows, permuted=heads)
                    for part, rows, heads in parts]
        out.append(T(b + "attn.proj.weight", h + "self_attn.o_proj.weight",
                     g + "attn_output.weight"))
        if cfg.out_bias:
            out.append(T(b + "attn.proj.bias", h + "self_attn.o_proj.bias", g + "attn_output.bias"))
        out.append(T(b + "ln2.weight", h + "post_attention_layernorm.weight",
                     g + "ffn_norm.weight"))
        for part in ("gate", "up", "down"):
            out.append(T(b + part + ".weight", h + f"mlp.{part}_proj.weight",
                         g + f"ffn_{part}.weight"))
            if cfg.mlp_bias:  # llama.cpp's files of these families have no MLP biases
                out.append(T(b + part + ".bias", h + f"mlp.{part}_proj.bias", None))
    out.append(T("norm.weight", p + "norm.weight", "output_norm.weight"))
    if not cfg.tie_weights:
        out.append(T("head.weight", "lm_head.weight", "output.weight"))
    return out


_GPT2_NAMES = dict(prefix="transformer.",
                   # the causal-mask buffers older GPT-2 checkpoints carry
                   ignore=re.compile(r"^(transformer\.)?h\.\d+\.attn\.(masked_)?bias$"))
_LLAMA_NAMES = dict(prefix="model.",
                    # the inverse-frequency buffers older checkpoints carry
                    ignore=re.compile(r"^(model\.)?layers\.\d+\.self_attn\.rotary_emb\.inv_freq$"))

GPT2 = Family(
    name="gpt2", model_types=("gpt2",), from_hf=_gpt2_from_hf, check=_gpt2_check,
    to_hf=_gpt2_to_hf, tensors=_gpt2_tensors, architectures=("gpt2",),
    from_gguf=_gpt2_from_gguf, to_gguf=_gpt2_to_gguf, **_GPT2_NAMES)

LLAMA = Family(
    name="llama", model_types=("llama",),
    from_hf=partial(_llama_from_hf, model="Llama", window_of=_no_window,
                    biases_of=_biases_by_flags),
    check=_llama_check,
    to_hf=partial(_llama_to_hf, model_type="llama", architecture="LlamaForCausalLM",
                  extra=lambda cfg: {"attention_bias": cfg.qkv_bias, "mlp_bias": cfg.mlp_bias}),
    tensors=partial(_llama_tensors, permuted=True), architectures=("llama",),
    from_gguf=partial(_llama_from_gguf, biases=None,
                      why="a llama file has biases on all of q/k/v/output or on none"),
    to_gguf=_llama_to_gguf, **_LLAMA_NAMES)

QWEN2 = Family(
    name="qwen2", model_types=("qwen2",),
    from_hf=partial(_llama_from_hf, model="Qwen2", window_of=_window_when_used,
                    biases_of=_biases_qkv_only),
    check=_qwen2_check,
    to_hf=partial(_llama_to_hf, model_type="qwen2", architecture="Qwen2ForCausalLM",
                  extra=lambda cfg: {"use_sliding_window": False, "sliding_window": None}),
    # llama.cpp rotates Qwen2 NEOX-style: its q and k rows stay in transformers' order
    tensors=partial(_llama_tensors, permuted=False), architectures=("qwen2",),
    from_gguf=partial(_llama_from_gguf, biases=(True, False),
                      why="a qwen2 file has attn_q/k/v biases and no attn_output bias"),
    to_gguf=_llama_to_gguf, **_LLAMA_NAMES)

# Mistral is Llama with a sliding window; a config of it saves as Llama's (check None), and
# llama.cpp's files of it are llama files
MISTRAL = Family(
    name="mistral", model_types=("mistral",),
    from_hf=partial(_llama_from_hf, model="Mistral", window_of=_window_always,
                    biases_of=_no_biases),
    check=None, to_hf=None, tensors=partial(_llama_tensors, permuted=True), **_LLAMA_NAMES)

#: Every family, in the order the savers try them
REGISTRY: Tuple[Family, ...] = (GPT2, LLAMA, QWEN2, MISTRAL)


def _index(key: Callable[[Family], Tuple[str, ...]]) -> Dict[str, Family]:
    out: Dict[str, Family] = {}
    for fam in REGISTRY:
        for k in key(fam):
            if k in out:
                raise RuntimeError(f"{k!r} names two families")  # pragma: no cover
            out[k] = fam
    return out


#: Hugging Face model_type -> its family
FAMILIES: Dict[str, Family] = _index(lambda fam: fam.model_types)
#: llama.cpp general.architecture -> its family
GGUF_FAMILIES: Dict[str, Family] = _index(lambda fam: fam.architectures)


def family_of(d: Mapping[str, Any]) -> Family:
    """The family of a ``config.json`` dict (by its ``model_type``)."""
    mt = d.get("model_type")
    if not isinstance(mt, str):
        raise BlockcValueError(f"config.json: model_type must be a string, one of "
                               f"{', '.join(sorted(FAMILIES))}; got {mt!r}")
    fam = FAMILIES.get(mt)
    if fam is None:
        raise BlockcValueError(f"config.json: model_type {mt!r} is not one blockc runs "
                               f"({', '.join(sorted(FAMILIES))})")
    return fam


def family_of_arch(arch: Any, path: str) -> Family:
    """The family of a GGUF file's ``general.architecture`` (``path`` names the file)."""
    fam = GGUF_FAMILIES.get(arch) if isinstance(arch, str) else None
    if fam is None:
        raise BlockcValueError(f"{path}: general.architecture {arch!r} is not one blockc runs "
                               f"({', '.join(GGUF_FAMILIES)})")
    return fam


def family_of_config(cfg: Any) -> Family:
    """The family a GPTConfig is saved as: the first of :data:`REGISTRY` whose ``check``
    passes (refusing, with every family's reason, a config of none)."""
    why = []
    for fam in REGISTRY:
        if fam.check is None:
            continue
        try:
            fam.check(cfg)
            return fam
        except BlockcValueError as e:
            why.append(f"not {fam.name}: {e}")
    raise BlockcValueError("no checkpoint family blockc writes has this architecture (" +
                           "; ".join(why) + ")")


def config_to_hf(cfg: Any) -> Dict[str, Any]:
    """The transformers config dict of a GPTConfig (the family its architecture is)."""
    fam = family_of_config(cfg)
    assert fam.to_hf is not None  # a family that checks configs writes them
    return fam.to_hf(cfg)


def hf_fields(config: Union[Mapping[str, Any], str, "os.PathLike[str]"]) -> Dict[str, Any]:
    """The GPTConfig fields of a Hugging Face config (a dict, or a ``config.json`` file or
    its directory): what :meth:`blockc.GPTConfig.from_hf` builds its config from."""
    if isinstance(config, (str, os.PathLike)):
        config = read_config(config)
    if not isinstance(config, Mapping):
        raise BlockcTypeError(f"config must be a mapping or a path, got {type(config).__name__}")
    return family_of(config).config(config)


register_hf_codec(hf_fields, config_to_hf)
