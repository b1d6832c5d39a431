"""Llama, Qwen2 and Mistral: the records of the Llama-shaped decoders (RMSNorm, SwiGLU,
rotary positions, grouped K/V heads), sharing their readers and tensor table."""
from __future__ import annotations

import math
import re
from functools import partial
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..._errors import BlockcValueError
from .record import (GGUF_REFUSE, Family, GGUFMetadata, TensorName, bool_field, float_field,
                     get_field, gguf_base, gguf_heads, gguf_sizes, int_field, refusal, str_field,
                     want)
from .experts import EXPERT_KEYS, MIXTRAL_NAMES, expert_rows, experts_to_gguf, gguf_experts
from .rope_gguf import ROPE_SCALING_KEYS, gguf_scaling, gguf_scaling_keys

__all__ = ["LLAMA", "QWEN2", "QWEN3", "MISTRAL", "rope_fields", "rope_to_hf", "LLAMA_GGUF_REFUSE",
           "MOE_GGUF_REFUSE",
           "ROPE_FREQS_ARCHS"]

# ---- Llama, Qwen2, Mistral ----------------------------------------------------------------------

#: the rope parameters' keys blockc reads, by rope_type (any other key is refused by name)
_ROPE_KEYS = {
    "default": (), "linear": ("factor",), "dynamic": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor",
               "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings", "attention_factor", "beta_fast",
             "beta_slow", "mscale", "mscale_all_dim", "truncate"),
    "longrope": ("short_factor", "long_factor", "factor", "original_max_position_embeddings",
                 "attention_factor"),
}
#: the types that read the model's max_position_embeddings (kept beside their keys)
_ROPE_MAX = ("dynamic", "yarn", "longrope")


def rope_fields(model: str, d: Mapping[str, Any], head_dim: int) -> Dict[str, Any]:
    """rope_theta, rope_parameters and rotary_dim of a config.json, from transformers' two
    spellings (rope_parameters; or rope_theta, rope_scaling and partial_rotary_factor), as
    transformers standardises them (``original_max_position_embeddings`` at the top level
    wins, else defaults to ``max_position_embeddings``); a rope_type blockc does not
    compute, or a key it does not read, refused by name."""
    rp = d.get("rope_parameters")
    scaling = d.get("rope_scaling")
    for key, v in (("rope_parameters", rp), ("rope_scaling", scaling)):
        if v is not None and not isinstance(v, Mapping):
            raise BlockcValueError(f"config.json: {key} must be an object, got {v!r}")
    params = dict(scaling or rp or {})
    theta = params.pop("rope_theta", None)
    if theta is None:
        theta = (rp or {}).get("rope_theta", d.get("rope_theta", 10000.0))
    kind = params.pop("rope_type", params.pop("type", "default"))
    kind = {"su": "longrope"}.get(kind, kind)
    prf = params.pop("partial_rotary_factor", None)
    prf = float_field(d, "partial_rotary_factor", 1.0) if prf is None else prf
    if kind not in _ROPE_KEYS:
        raise refusal(model, "rope_parameters.rope_type", kind,
                      f"rotary angles scaled a way blockc does not compute (it computes "
                      f"{', '.join(_ROPE_KEYS)})")
    unknown = sorted(k for k, v in params.items() if k not in _ROPE_KEYS[kind] and v is not None)
    if unknown:
        raise refusal(model, f"rope_parameters.{unknown[0]}", params[unknown[0]],
                      f"a key rope_type {kind!r} does not read in blockc")
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
        raise BlockcValueError(f"config.json: rope_theta must be a positive number, got {theta!r}")
    if isinstance(prf, bool) or not isinstance(prf, (int, float)) or not 0 < prf <= 1:
        raise BlockcValueError(f"config.json: partial_rotary_factor must be in (0, 1], got {prf!r}")
    rot = int(head_dim * prf)
    out: Dict[str, Any] = {k: v for k, v in params.items() if v is not None}
    if kind in ("llama3", "yarn", "longrope"):
        top = d.get("original_max_position_embeddings")
        if top is not None:
            out["original_max_position_embeddings"] = top
        out.setdefault("original_max_position_embeddings",
                       int_field(d, "max_position_embeddings", default=2048))
    if kind in _ROPE_MAX:
        out["max_position_embeddings"] = int_field(d, "max_position_embeddings", default=2048)
    out["rope_type"] = kind
    return dict(rope_theta=float(theta), rope_parameters=None if kind == "default" else out,
                rotary_dim=None if rot == head_dim else rot)


def rope_to_hf(cfg: Any) -> Dict[str, Any]:
    """The config.json keys of a GPTConfig's rotary embeddings (both spellings)."""
    params = dict(cfg.rope_parameters or ())
    longest = params.pop("max_position_embeddings", None)
    if "factors" in params:
        raise BlockcValueError("GPTConfig.rope_parameters: rotary factors read from a GGUF file "
                               "(rope_freqs.weight) have no Hugging Face rope_type")
    params = {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()}
    params.setdefault("rope_type", "default")
    out: Dict[str, Any] = {"rope_theta": cfg.rope_theta,
                           "rope_parameters": dict(params, rope_theta=cfg.rope_theta)}
    if params["rope_type"] != "default":
        out["rope_scaling"] = params
    if longest is not None:  # what the type reads (dynamic's context is factor times it)
        out["max_position_embeddings"] = longest
    if cfg.rotary_dim is not None:
        out["partial_rotary_factor"] = cfg.rotary_dim / cfg.head_dim_
        out["rope_parameters"]["partial_rotary_factor"] = out["partial_rotary_factor"]
    return out


def _layer_types(d: Mapping[str, Any]) -> List[str]:
    types = get_field(d, "layer_types", [])
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise BlockcValueError(f"config.json: layer_types must be a list of strings, got {types!r}")
    return types


# How each family reads its sliding window: (W, the sliding layers' flags or None for
# every layer), or (None, None) for full attention. transformers' mask: position q sees
# keys q-W+1..q (masking_utils.sliding_window_overlay), blockc's GPTConfig.sliding_window.

def _no_window(d: Mapping[str, Any]) -> Tuple[Any, Any]:
    _layer_types(d)
    return None, None


def _window_always(d: Mapping[str, Any]) -> Tuple[Any, Any]:  # Mistral: every layer, when set
    return d.get("sliding_window"), None


def _window_when_used(d: Mapping[str, Any]) -> Tuple[Any, Any]:
    """Qwen2: with use_sliding_window, the layers layer_types names sliding_attention
    (without layer_types, the layers from max_window_layers on), as transformers' config."""
    types = _layer_types(d)
    if not bool_field(d, "use_sliding_window", False) or d.get("sliding_window") is None:
        return None, None
    layers = int_field(d, "num_hidden_layers", default=32)
    if types:
        if len(types) != layers:
            raise BlockcValueError(f"config.json: layer_types has {len(types)} entries for "
                                   f"{layers} layers")
        flags = tuple(t == "sliding_attention" for t in types)
    else:
        first = int_field(d, "max_window_layers", default=28)
        flags = tuple(i >= first for i in range(layers))
    if not any(flags):
        return None, None
    return d["sliding_window"], None if all(flags) else flags


# How each family reads its biases: (q/k/v, output, MLP)

def _biases_by_flags(d: Mapping[str, Any]) -> Tuple[bool, bool, bool]:
    attn = bool_field(d, "attention_bias", False)
    return attn, attn, bool_field(d, "mlp_bias", False)


def _biases_qkv_only(d: Mapping[str, Any]) -> Tuple[bool, bool, bool]:
    return True, False, False


def _no_biases(d: Mapping[str, Any]) -> Tuple[bool, bool, bool]:
    # transformers' Mistral has no biases, whatever attention_bias or mlp_bias say
    return False, False, False


def _llama_from_hf(d: Mapping[str, Any], *, model: str,
                   window_of: Callable[[Mapping[str, Any]], Any],
                   biases_of: Callable[[Mapping[str, Any]], Tuple[bool, bool, bool]],
                   partial: bool = False) -> Dict[str, Any]:
    """A Llama-shaped config.json (RMSNorm, rotary positions, SwiGLU, grouped K/V heads);
    ``model`` names the family in refusals; ``partial``: the family rotates part of each
    head (``partial_rotary_factor``: Phi-4-mini's), else that is refused."""
    act = str_field(d, "hidden_act", "silu")
    if act != "silu":
        raise refusal(model, "hidden_act", act, "blockc's gated MLP is SiLU-gated (SwiGLU)")
    for f in ("num_local_experts", "num_experts", "n_routed_experts"):
        if int_field(d, f, default=0):
            raise refusal(model, f, d[f], "a mixture of experts")
    width = int_field(d, "hidden_size", default=4096)
    heads = int_field(d, "num_attention_heads", default=32)
    kv = get_field(d, "num_key_value_heads", heads)
    if type(kv) is not int:
        raise BlockcValueError(f"config.json: num_key_value_heads must be an integer, got {kv!r}")
    context = int_field(d, "max_position_embeddings", default=2048)
    hd = get_field(d, "head_dim")
    rope = rope_fields(model, d, hd if type(hd) is int else width // heads)
    if rope["rotary_dim"] is not None and not partial:  # of these, only Phi-3's do
        raise refusal(model, "partial_rotary_factor", get_field(d, "partial_rotary_factor"),
                      "rotary embeddings on part of each head")
    if rope["rope_parameters"] and rope["rope_parameters"]["rope_type"] == "dynamic":
        # dynamic NTK is for running past max_position_embeddings: up to factor times it
        context = int(context * rope["rope_parameters"]["factor"])
    window, sliding = window_of(d)
    if window is not None:
        if type(window) is not int or window < 1:
            raise BlockcValueError(f"config.json: sliding_window must be a positive integer, "
                                   f"got {window!r}")
        if window >= context:  # a window as wide as the context changes nothing
            window, sliding = None, None
    qkv_b, out_b, mlp_b = biases_of(d)
    head_dim = get_field(d, "head_dim")
    if head_dim is not None and type(head_dim) is not int:
        raise BlockcValueError(f"config.json: head_dim must be an integer, got {head_dim!r}")
    if kv == heads:  # the defaults as None, so equal configs compare equal
        kv = None
    if head_dim is not None and heads and width % heads == 0 and head_dim == width // heads:
        head_dim = None
    return dict(vocab=int_field(d, "vocab_size", default=32000), context=context, width=width,
                heads=heads, layers=int_field(d, "num_hidden_layers", default=32),
                eps=float_field(d, "rms_norm_eps", 1e-6),
                tie_weights=bool_field(d, "tie_word_embeddings", False), norm="rms",
                placement="pre", activation="swiglu",
                d_ff=int_field(d, "intermediate_size", default=11008), positions="rope",
                **rope, kv_heads=kv, head_dim=head_dim,
                residual=True, qkv_bias=qkv_b, out_bias=out_b, mlp_bias=mlp_b,
                sliding_window=window, sliding_layers=sliding)


def _llama_shape(cfg: Any, what: str, qk_norm: str = "none", n_experts: int = 0) -> None:
    want(cfg, what, norm="rms", placement="pre", positions="rope", activation="swiglu",
         residual=True, rotary_dim=None, nope_layers=(), qk_norm=qk_norm, embed_scale=1.0,
         residual_scale=1.0, attn_scale=None, logit_scale=1.0, n_experts=n_experts,
         attn_softcap=None, logit_softcap=None)


def _llama_check(cfg: Any) -> None:
    _llama_shape(cfg, "a Llama checkpoint")
    if cfg.qkv_bias != cfg.out_bias:
        raise BlockcValueError(f"GPTConfig: biases qkv={cfg.qkv_bias}, out={cfg.out_bias}: "
                               "Llama has them on all attention projections or none")
    if cfg.sliding_window is not None:  # written as Mistral's (Llama with a window)
        if cfg.sliding_layers is not None:
            raise BlockcValueError("GPTConfig.sliding_layers: Mistral's window is on every layer")
        if cfg.qkv_bias or cfg.mlp_bias:
            raise BlockcValueError("GPTConfig: a sliding window with biases: Mistral has none")


def _llama_or_mistral_to_hf(cfg: Any) -> Dict[str, Any]:
    """Llama's config.json, or Mistral's for a config with a sliding window."""
    if cfg.sliding_window is None:
        return _llama_to_hf(cfg, model_type="llama", architecture="LlamaForCausalLM",
                            extra=lambda c: {"attention_bias": c.qkv_bias, "mlp_bias": c.mlp_bias})
    return _llama_to_hf(cfg, model_type="mistral", architecture="MistralForCausalLM",
                        extra=lambda c: {"sliding_window": c.sliding_window})


def _qwen2_window_hf(cfg: Any) -> Dict[str, Any]:
    """Qwen2's window fields: use_sliding_window, sliding_window, layer_types."""
    if cfg.sliding_window is None:
        return {"use_sliding_window": False, "sliding_window": None}
    flags = cfg.sliding_layers or (True,) * cfg.layers
    first = next(i for i, f in enumerate(flags + (True,)) if f)
    return {"use_sliding_window": True, "sliding_window": cfg.sliding_window,
            "max_window_layers": first,
            "layer_types": ["sliding_attention" if f else "full_attention" for f in flags]}


def _qwen3_check(cfg: Any) -> None:
    _llama_shape(cfg, "a Qwen3 checkpoint", qk_norm="head")
    if cfg.qkv_bias != cfg.out_bias or cfg.mlp_bias:
        raise BlockcValueError(f"GPTConfig: biases qkv={cfg.qkv_bias}, out={cfg.out_bias}, "
                               f"mlp={cfg.mlp_bias}: Qwen3 has them on all attention "
                               "projections or none, and none on the MLP")
    if cfg.rope_kind not in ("default", "linear", "dynamic", "yarn", "longrope", "llama3"):
        raise BlockcValueError(f"GPTConfig.rope_parameters: rope_type {cfg.rope_kind!r} has no "
                               "Qwen3 spelling")


def _qwen3_from_hf(d: Mapping[str, Any]) -> Dict[str, Any]:
    out = _llama_from_hf(d, model="Qwen3", window_of=_window_when_used,
                         biases_of=lambda d: (bool_field(d, "attention_bias", False),) * 2 + (False,))
    return dict(out, qk_norm="head")


def _qwen3_from_gguf(md: GGUFMetadata) -> Dict[str, Any]:
    out = _llama_from_gguf(md, biases=None,
                           why="a qwen3 file has biases on all of q/k/v/output or on none")
    for part in ("q", "k"):
        md.shape(f"blk.0.attn_{part}_norm.weight")  # refused by name when missing
    return dict(out, qk_norm="head")


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
            **rope_to_hf(cfg), "attention_dropout": 0.0, **extra(cfg)}


def gguf_rope(md: GGUFMetadata, rot: int, context: int, *,
              scaling_keys: bool = True) -> Dict[str, Any]:
    """rope_parameters of a file's ``rope_freqs.weight`` (llama.cpp's per-frequency
    divisors: how its converter writes Llama 3.1's scaling) or of its ``rope.scaling.*``
    keys (linear, yarn: :func:`blockc.checkpoint.families.rope_gguf.gguf_scaling`; not
    read when ``scaling_keys`` is False, for a family that reads them itself), None
    without either."""
    scaling = gguf_scaling(md, context) if scaling_keys else None
    if scaling is not None and md.has("rope_freqs.weight"):
        raise md.refuse(md.key("rope.scaling.type"), md.get("rope.scaling.type"),
                        "rotary scaling on top of rope_freqs.weight")
    if not md.has("rope_freqs.weight"):
        return dict(rope_parameters=scaling)
    if md.shape("rope_freqs.weight") != (rot // 2,):
        raise md.fail(f"tensor 'rope_freqs.weight' has shape {md.shape('rope_freqs.weight')}, "
                      f"expected ({rot // 2},)")
    f = md.file.tensors["rope_freqs.weight"].to_float32().astype(np.float64)
    if not np.all(np.isfinite(f)) or not np.all(f > 0):
        raise md.fail("tensor 'rope_freqs.weight' must hold positive numbers")
    return dict(rope_parameters={"rope_type": "factors", "factors": tuple(float(x) for x in f)})


def gguf_rope_freqs(cfg: Any) -> Dict[str, np.ndarray]:
    """``rope_freqs.weight`` of a config whose rotary frequencies a GGUF file holds as
    divisors: llama3's as llama.cpp's converter computes them (in double, from the same
    parameters), or the factors a GGUF file gave."""
    p = dict(cfg.rope_parameters or ())
    kind = p.get("rope_type", "default")
    if kind == "factors":
        return {"rope_freqs.weight": np.asarray(p["factors"], np.float32)}
    if kind != "llama3":
        return {}
    rot = cfg.rotary_dim_
    inv = 1.0 / (cfg.rope_theta ** (np.arange(0, rot, 2, dtype=np.float32) / np.float32(rot)))
    factor, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
    old = p["original_max_position_embeddings"]
    out = []
    for f in inv.astype(np.float32):
        wavelen = 2 * math.pi / float(f)
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return {"rope_freqs.weight": np.asarray(out, np.float32)}


#: the architectures whose files carry llama3's scaling as rope_freqs.weight (llama.cpp's
#: converter writes it for LlamaModel's descendants whose tensor lists have it)
ROPE_FREQS_ARCHS = ("llama", "smollm3")


def gguf_rope_check(cfg: Any, arch: str) -> None:
    """Refuse (by field) rotary scaling a GGUF file of ``arch`` does not hold here: linear
    and yarn as ``rope.scaling.*`` keys in any, llama3 as ``rope_freqs.weight`` in
    :data:`ROPE_FREQS_ARCHS`' files; dynamic and longrope in none."""
    kind = cfg.rope_kind
    if kind in ("default", "linear", "yarn") or (kind in ("llama3", "factors")
                                                 and arch in ROPE_FREQS_ARCHS):
        return
    raise BlockcValueError(f"GPTConfig.rope_parameters: rope_type {kind!r} is not written to "
                           f"a {arch} GGUF file by blockc")


#: GGUF_REFUSE less the rope.scaling keys, which the Llama-shaped families read
#: (:func:`gguf_rope`)
LLAMA_GGUF_REFUSE = {k: v for k, v in GGUF_REFUSE.items() if k not in ROPE_SCALING_KEYS}
#: LLAMA_GGUF_REFUSE less the expert counts: the files with experts read (Mixtral's llama,
#: qwen3moe: :mod:`blockc.checkpoint.families.experts`)
MOE_GGUF_REFUSE = {k: v for k, v in LLAMA_GGUF_REFUSE.items() if k not in EXPERT_KEYS}


def _llama_from_gguf(md: GGUFMetadata, *, biases: Optional[Tuple[bool, bool]],
                     why: str, partial: bool = False, scaling_keys: bool = True,
                     experts: bool = False) -> Dict[str, Any]:
    """A Llama-shaped GGUF file; ``biases`` (q/k/v, output) the ones the family has (None:
    on all of q/k/v/output or on none), ``why`` saying so when the file differs;
    ``partial``: ``rope.dimension_count`` may be part of a head (else refused);
    ``scaling_keys``: ``rope.scaling.*`` read here as linear/yarn (False: the caller's
    to read, phi3's longrope); ``experts``: a
    file declaring ``expert_count`` is a mixture of experts (:func:`gguf_experts`)."""
    out = gguf_sizes(md, rope_freqs=md.arch in ROPE_FREQS_ARCHS, experts=experts)
    if experts and md.get("expert_count") is not None:
        out.update(gguf_experts(md))
    width, heads = out["width"], out["heads"]
    kv, head_dim, rot = gguf_heads(md, width, heads, partial)
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
                qkv_bias=qkv_bias, out_bias=out_bias, mlp_bias=False,
                **gguf_rope(md, rot, out["context"], scaling_keys=scaling_keys),
                **({"rotary_dim": rot} if rot != head_dim else {}))


def _llama_to_gguf(cfg: Any, *, arch: str) -> Dict[str, Tuple[str, Any]]:
    gguf_rope_check(cfg, arch)
    md = dict(gguf_base(cfg), **{"attention.head_count_kv": ("UINT32", cfg.kv_heads_),
                                  "attention.layer_norm_rms_epsilon": ("FLOAT32", cfg.eps),
                                  "rope.freq_base": ("FLOAT32", cfg.rope_theta),
                                  "rope.dimension_count": ("UINT32", cfg.head_dim_)},
              **gguf_scaling_keys(cfg, arch))
    if cfg.head_dim_ * cfg.heads != cfg.width:
        md["attention.key_length"] = ("UINT32", cfg.head_dim_)
        md["attention.value_length"] = ("UINT32", cfg.head_dim_)
    md["vocab_size"] = ("UINT32", cfg.vocab)
    if cfg.n_experts:
        md.update(experts_to_gguf(cfg, arch))
    if cfg.sliding_window is not None:  # llama.cpp's key: one window for every layer
        if cfg.sliding_layers is not None and not all(cfg.sliding_layers):
            raise BlockcValueError("GGUF: llama.cpp's attention.sliding_window is on every "
                                   "layer; this config slides on some layers only")
        md["attention.sliding_window"] = ("UINT32", cfg.sliding_window)
    return md


def _llama_tensors(cfg: Any, *, permuted: bool) -> List[TensorName]:
    """:func:`_llama_rows`, with the q/k norms of a config that has them (Qwen3's: one
    gain of Dh per projection, the same for every head)."""
    out = _llama_rows(cfg, permuted=permuted)
    if cfg.qk_norm == "none":
        return out
    at = [i for i, t in enumerate(out) if t.ours.endswith("attn.proj.weight")]
    for i in reversed(at):
        b, h, g = (out[i].ours[:-len("attn.proj.weight")], out[i].hf[:-len("o_proj.weight")],
                   out[i].gguf[:-len("attn_output.weight")])
        out[i:i] = [TensorName(b + f"attn.{p}_norm.weight", h + f"{p}_norm.weight",
                               g + f"attn_{p}_norm.weight") for p in ("q", "k")]
    return out


def _llama_rows(cfg: Any, *, permuted: bool) -> List[TensorName]:
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


def _llama_table(cfg: Any) -> List[TensorName]:
    """Llama's tensors; with experts (a llama GGUF file of Mixtral), Mixtral's."""
    out = _llama_tensors(cfg, permuted=True)
    return expert_rows(out, cfg, **MIXTRAL_NAMES) if cfg.n_experts else out


_GPT2_NAMES = dict(prefix="transformer.",
                   # the causal-mask buffers older GPT-2 checkpoints carry
                   ignore=re.compile(r"^(transformer\.)?h\.\d+\.attn\.(masked_)?bias$"))

_LLAMA_NAMES = dict(prefix="model.",
                    # the inverse-frequency buffers older checkpoints carry
                    ignore=re.compile(r"^(model\.)?layers\.\d+\.self_attn\.rotary_emb\.inv_freq$"))

LLAMA = Family(
    name="llama", model_types=("llama",),
    from_hf=partial(_llama_from_hf, model="Llama", window_of=_no_window,
                    biases_of=_biases_by_flags),
    check=_llama_check,
    to_hf=_llama_or_mistral_to_hf,
    tensors=_llama_table, architectures=("llama",),
    from_gguf=partial(_llama_from_gguf, biases=None, experts=True,
                      why="a llama file has biases on all of q/k/v/output or on none"),
    to_gguf=partial(_llama_to_gguf, arch="llama"), gguf_extra=gguf_rope_freqs,
    gguf_refuse=MOE_GGUF_REFUSE, **_LLAMA_NAMES)

QWEN2 = Family(
    name="qwen2", model_types=("qwen2",),
    from_hf=partial(_llama_from_hf, model="Qwen2", window_of=_window_when_used,
                    biases_of=_biases_qkv_only),
    check=_qwen2_check,
    to_hf=partial(_llama_to_hf, model_type="qwen2", architecture="Qwen2ForCausalLM",
                  extra=_qwen2_window_hf),
    # llama.cpp rotates Qwen2 NEOX-style: its q and k rows stay in transformers' order
    tensors=partial(_llama_tensors, permuted=False), architectures=("qwen2",),
    from_gguf=partial(_llama_from_gguf, biases=(True, False),
                      why="a qwen2 file has attn_q/k/v biases and no attn_output bias"),
    to_gguf=partial(_llama_to_gguf, arch="qwen2"), gguf_refuse=LLAMA_GGUF_REFUSE, **_LLAMA_NAMES)

# Qwen3: Qwen2's shape with RMSNorm on q and k per head before rotary, head_dim its own
# (not width / heads), and no q/k/v biases by default; llama.cpp rotates it NEOX-style
# (its q and k rows in transformers' order) and names the norms attn_q_norm/attn_k_norm
QWEN3 = Family(
    name="qwen3", model_types=("qwen3",), from_hf=_qwen3_from_hf, check=_qwen3_check,
    to_hf=partial(_llama_to_hf, model_type="qwen3", architecture="Qwen3ForCausalLM",
                  extra=lambda cfg: {"attention_bias": cfg.qkv_bias, "use_sliding_window": False,
                                     "sliding_window": None}),
    tensors=partial(_llama_tensors, permuted=False), architectures=("qwen3",),
    from_gguf=_qwen3_from_gguf, to_gguf=partial(_llama_to_gguf, arch="qwen3"),
    gguf_refuse=LLAMA_GGUF_REFUSE, **_LLAMA_NAMES)

# Mistral is Llama with a sliding window; a config of it saves through Llama's record (check
# None; Llama's writes Mistral's config.json for a window), and llama.cpp's files of it are
# llama files (with llama.attention.sliding_window)
MISTRAL = Family(
    name="mistral", model_types=("mistral",),
    from_hf=partial(_llama_from_hf, model="Mistral", window_of=_window_always,
                    biases_of=_no_biases),
    check=None, to_hf=None, tensors=partial(_llama_tensors, permuted=True), **_LLAMA_NAMES)

