"""Gemma, Gemma 2 and Gemma 3 (text): the records of ``gemma``, ``gemma2`` and
``gemma3_text`` checkpoints and of llama.cpp's ``gemma``, ``gemma2`` and ``gemma3`` GGUF
files (issue 50).

Gemma (the first: Gemma 2B/7B, CodeGemma) is a pre-norm Llama-shaped decoder with Gemma's
RMSNorm, the GeGLU MLP and the scaled embedding below, attention scaled by
``head_dim ** -0.5``, no sliding layers and no soft-caps (its ``hidden_act: "gelu"`` is
the tanh GELU, as transformers reads it).

Gemma 2 and 3 are Llama-shaped decoders with: Gemma's RMSNorm, ``x * (1 + w)`` (blockc folds the 1
in on load, in float32 as transformers adds it, and takes it out on save: the
``hf_offset`` of each norm gain; llama.cpp's converter stores the gains with the 1 already
added, so a GGUF file's are blockc's as they are), norms before AND after each sublayer
("sandwich"), the GeGLU MLP (``gelu_pytorch_tanh``), the embedding scaled by sqrt(width)
rounded to float32, attention scaled by ``query_pre_attn_scalar ** -0.5``, and layers
alternating sliding-window attention with global attention (``layer_types``; a sliding
layer keeps a ring cache of about its window, so a long context is exact past it).

Gemma 2 soft-caps the attention scores and the logits (``attn_logit_softcapping``,
``final_logit_softcapping``: ``c * tanh(x / c)``, GPTConfig's ``attn_softcap`` and
``logit_softcap``); Gemma 3 has RMSNorm of q and k per head, and its sliding layers turn
by their own rotary base (``rope_local_base_freq``, unscaled).

llama.cpp's files hold less than a ``config.json``: its ``gemma2`` slides every other layer
(from layer 0) and its ``gemma3`` five layers of every six, both by the layer's number; the
sliding layers of ``gemma3`` turn by base 10000; and the attention scale is fixed by the
model's size (``(width / heads) ** -0.5`` for the 27B shapes, 46 and 62 layers; else
``head_dim ** -0.5``). A file is read that way, and a config that differs is refused by
name rather than written as a file llama.cpp would compute differently.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..._errors import BlockcValueError
from .llama import rope_fields, rope_to_hf
from .record import (GGUF_REFUSE, Family, GGUFMetadata, TensorName, bool_field, float_field,
                     get_field, gguf_base, gguf_heads, gguf_sizes, int_field, refusal, want)

__all__ = ["GEMMA", "GEMMA2", "GEMMA3"]

_ACTS = ("gelu_pytorch_tanh", "gelu_tanh")
#: Gemma's: transformers reads its releases' legacy "gelu" as the tanh GELU
_ACTS1 = _ACTS + ("gelu",)
#: llama.cpp's sliding pattern by architecture: layer i slides when i % n < n - 1
_GGUF_PATTERN = {"gemma2": 2, "gemma3": 6}
#: the layer counts llama.cpp scales attention by (width / heads) ** -0.5 (the 27B models)
_GGUF_27B = {"gemma2": 46, "gemma3": 62}
#: llama.cpp's gemma3 sliding layers' rotary base
_GGUF_LOCAL_THETA = 10000.0


def _layer_types(d: Mapping[str, Any], layers: int, pattern: int) -> List[str]:
    types = get_field(d, "layer_types")
    if types is None:
        pattern = int_field(d, "sliding_window_pattern", default=pattern)
        return ["sliding_attention" if (i + 1) % pattern else "full_attention"
                for i in range(layers)]
    if (not isinstance(types, list) or len(types) != layers
            or not all(t in ("sliding_attention", "full_attention") for t in types)):
        raise BlockcValueError(f"config.json: layer_types must be {layers} of "
                               f"sliding_attention/full_attention, got {types!r}")
    return types


def _rope3(d: Mapping[str, Any], head_dim: int) -> Dict[str, Any]:
    """Gemma 3: the global layers' rotary (rope_fields of the full_attention parameters)
    and the sliding layers' base (their parameters must be the plain rotary)."""
    rp = d.get("rope_parameters")
    mp = int_field(d, "max_position_embeddings", default=131072)
    if isinstance(rp, Mapping) and ("full_attention" in rp or "sliding_attention" in rp):
        full = dict(rp.get("full_attention") or {})
        local = dict(rp.get("sliding_attention") or {})
        full.setdefault("rope_theta", d.get("rope_theta", 1_000_000.0))
        local.setdefault("rope_theta", d.get("rope_local_base_freq", 10_000.0))
    else:
        full = dict(d.get("rope_scaling") or rp or {})
        full.setdefault("rope_theta", d.get("rope_theta", 1_000_000.0))
        local = {"rope_type": "default", "rope_theta": d.get("rope_local_base_freq", 10_000.0)}
    kind = local.get("rope_type", local.get("type", "default"))
    if kind != "default":
        raise refusal("Gemma3", "rope_parameters.sliding_attention.rope_type", kind,
                      "the sliding layers' rotary scaled")
    theta = local.get("rope_theta")
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
        raise BlockcValueError(f"config.json: the sliding layers' rope_theta must be a positive "
                               f"number, got {theta!r}")
    out = rope_fields("Gemma3", {"rope_parameters": full, "max_position_embeddings": mp},
                      head_dim)
    return dict(out, rope_local_theta=float(theta))


def _cap(d: Mapping[str, Any], key: str) -> Optional[float]:
    """A soft-cap of config.json: None, or a number > 0."""
    v = get_field(d, key)
    if v is None:
        return None
    v = float_field(d, key, 0.0)
    if not v > 0:
        raise BlockcValueError(f"config.json: {key} must be > 0 or null, got {d[key]!r}")
    return v


def _window_fields(layers: int, context: int, sliding: Tuple[int, ...],
                   window: Any, where: str) -> Dict[str, Any]:
    """sliding_window and sliding_layers of the sliding layers ``sliding`` of window
    ``window`` (a window as wide as the context changes nothing)."""
    if sliding and window is not None and (type(window) is not int or window < 1):
        raise BlockcValueError(f"{where}: sliding_window must be a positive integer, "
                               f"got {window!r}")
    w = window if sliding and window is not None and window < context else None
    return dict(sliding_window=w,
                sliding_layers=None if w is None or len(sliding) == layers else
                tuple(i in sliding for i in range(layers)))


def _from_hf(d: Mapping[str, Any], *, model: str) -> Dict[str, Any]:
    gemma3, gemma1 = model == "Gemma3", model == "Gemma"
    act = get_field(d, "hidden_activation", None, alias=("hidden_act",)) or "gelu_pytorch_tanh"
    if act not in (_ACTS1 if gemma1 else _ACTS):
        raise refusal(model, "hidden_activation", act, "blockc's GeGLU is tanh-GELU-gated")
    if bool_field(d, "use_bidirectional_attention", False):
        raise refusal(model, "use_bidirectional_attention", True, "attention that is not causal")
    width = int_field(d, "hidden_size", default=2304)
    heads = int_field(d, "num_attention_heads", default=8)
    kv = int_field(d, "num_key_value_heads", default=4)
    head_dim = int_field(d, "head_dim", default=256)
    layers = int_field(d, "num_hidden_layers", default=26)
    types = [] if gemma1 else _layer_types(d, layers, 6 if gemma3 else 2)
    local = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    if gemma3:
        rope = _rope3(d, head_dim)
        rope["local_layers"] = local if rope["rope_local_theta"] else ()
    else:
        rope = rope_fields(model, d, head_dim)
        if rope["rotary_dim"] is not None:
            raise refusal(model, "partial_rotary_factor", get_field(d, "partial_rotary_factor"),
                          "rotary embeddings on part of each head")
    context = int_field(d, "max_position_embeddings", default=131072 if gemma3 else 8192)
    scalar = head_dim if gemma1 else float_field(d, "query_pre_attn_scalar", 256)
    if not scalar > 0:
        raise BlockcValueError(f"config.json: query_pre_attn_scalar must be > 0, got {scalar!r}")
    bias = bool_field(d, "attention_bias", False)
    return dict(vocab=int_field(d, "vocab_size", default=262208 if gemma3 else 256000),
                context=context, width=width, heads=heads, layers=layers,
                eps=float_field(d, "rms_norm_eps", 1e-6),
                tie_weights=bool_field(d, "tie_word_embeddings", True), norm="rms",
                placement="pre" if gemma1 else "sandwich", activation="geglu",
                d_ff=int_field(d, "intermediate_size", default=9216), positions="rope",
                kv_heads=None if kv == heads else kv,
                head_dim=None if head_dim * heads == width else head_dim, residual=True,
                qkv_bias=bias, out_bias=bias, mlp_bias=False,
                qk_norm="head" if gemma3 else "none",
                embed_scale=float(np.float32(width ** 0.5)),
                attn_scale=None if scalar == head_dim else scalar ** -0.5,
                attn_softcap=None if gemma1 else _cap(d, "attn_logit_softcapping"),
                logit_softcap=None if gemma1 else _cap(d, "final_logit_softcapping"),
                **_window_fields(layers, context, local, get_field(d, "sliding_window", 4096),
                                 "config.json"), **rope)


def _check(cfg: Any, *, model: str) -> None:
    what = f"a {model} checkpoint"
    want(cfg, what, norm="rms", placement="pre" if model == "Gemma" else "sandwich",
         activation="geglu", positions="rope", residual=True, rotary_dim=None, nope_layers=(),
         residual_scale=1.0, logit_scale=1.0, mlp_bias=False,
         embed_scale=float(np.float32(cfg.width ** 0.5)), n_experts=0)
    if model == "Gemma":
        want(cfg, what, qk_norm="none", rope_local_theta=None, local_layers=(),
             sliding_window=None, attn_softcap=None, logit_softcap=None, attn_scale=None)
    elif model == "Gemma 3":
        want(cfg, what, qk_norm="head")
    else:
        want(cfg, what, qk_norm="none", rope_local_theta=None, local_layers=())
    if cfg.qkv_bias != cfg.out_bias:
        raise BlockcValueError(f"GPTConfig: biases qkv={cfg.qkv_bias}, out={cfg.out_bias}: "
                               f"{model} has them on all attention projections or none")


def _types(cfg: Any) -> List[str]:
    """layer_types: the sliding layers (a window narrower than the context), or the
    local-rotary ones, or (neither) transformers' default pattern."""
    slides = [cfg.layer_window(i) is not None or i in cfg.local_layers for i in range(cfg.layers)]
    if not any(slides):
        pattern = 6 if cfg.qk_norm == "head" else 2
        slides = [bool((i + 1) % pattern) for i in range(cfg.layers)]
    return ["sliding_attention" if s else "full_attention" for s in slides]


def _to_hf1(cfg: Any) -> Dict[str, Any]:
    return dict({"architectures": ["GemmaForCausalLM"], "model_type": "gemma",
                 "vocab_size": cfg.vocab, "hidden_size": cfg.width,
                 "intermediate_size": cfg.d_ff_, "num_hidden_layers": cfg.layers,
                 "num_attention_heads": cfg.heads, "num_key_value_heads": cfg.kv_heads_,
                 "head_dim": cfg.head_dim_, "hidden_act": "gelu_pytorch_tanh",
                 "max_position_embeddings": cfg.context, "rms_norm_eps": cfg.eps,
                 "tie_word_embeddings": cfg.tie_weights, "attention_bias": cfg.qkv_bias,
                 "attention_dropout": 0.0}, **rope_to_hf(cfg))


def _to_hf(cfg: Any) -> Dict[str, Any]:
    gemma3 = cfg.qk_norm == "head"
    # transformers holds query_pre_attn_scalar as an integer
    scalar = cfg.head_dim_ if cfg.attn_scale is None else int(round(cfg.attn_scale ** -2))
    out = {"architectures": ["Gemma3ForCausalLM" if gemma3 else "Gemma2ForCausalLM"],
           "model_type": "gemma3_text" if gemma3 else "gemma2",
           "vocab_size": cfg.vocab, "hidden_size": cfg.width, "intermediate_size": cfg.d_ff_,
           "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
           "num_key_value_heads": cfg.kv_heads_, "head_dim": cfg.head_dim_,
           "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": cfg.context,
           "rms_norm_eps": cfg.eps, "tie_word_embeddings": cfg.tie_weights,
           "layer_types": _types(cfg), "sliding_window": cfg.sliding_window or cfg.context,
           "query_pre_attn_scalar": scalar,
           "attention_bias": cfg.qkv_bias, "attention_dropout": 0.0,
           "final_logit_softcapping": cfg.logit_softcap,
           "attn_logit_softcapping": cfg.attn_softcap}
    rope = rope_to_hf(cfg)
    if not gemma3:
        return dict(out, **rope)
    local = cfg.rope_local_theta if cfg.rope_local_theta is not None else 10_000.0
    return dict(out, rope_parameters={
        "full_attention": rope["rope_parameters"],
        "sliding_attention": {"rope_type": "default", "rope_theta": local}})


def _tensors(cfg: Any) -> List[TensorName]:
    T, p = TensorName, "model."
    q, kv = cfg.heads * cfg.head_dim_, cfg.kv_heads_ * cfg.head_dim_
    out = [T("token.weight", p + "embed_tokens.weight", "token_embd.weight")]
    for i in range(cfg.layers):
        b, h, g = f"blocks.{i}.", f"{p}layers.{i}.", f"blk.{i}."

        def norm(ours: str, hf: str, gg: str) -> TensorName:
            return T(b + ours, h + hf, g + gg, hf_offset=1.0)

        out.append(norm("ln1.weight", "input_layernorm.weight", "attn_norm.weight"))
        for kind in ("weight", "bias") if cfg.qkv_bias else ("weight",):
            out += [T(b + "attn.qkv." + kind, h + f"self_attn.{part}_proj.{kind}",
                      g + f"attn_{part}.{kind}", rows=rows)
                    for part, rows in (("q", (0, q)), ("k", (q, q + kv)),
                                       ("v", (q + kv, q + 2 * kv)))]
        if cfg.qk_norm == "head":
            out += [norm("attn.q_norm.weight", "self_attn.q_norm.weight", "attn_q_norm.weight"),
                    norm("attn.k_norm.weight", "self_attn.k_norm.weight", "attn_k_norm.weight")]
        out.append(T(b + "attn.proj.weight", h + "self_attn.o_proj.weight",
                     g + "attn_output.weight"))
        if cfg.out_bias:
            out.append(T(b + "attn.proj.bias", h + "self_attn.o_proj.bias", g + "attn_output.bias"))
        if cfg.placement == "pre":  # Gemma's: Llama's names
            out.append(norm("ln2.weight", "post_attention_layernorm.weight", "ffn_norm.weight"))
        else:
            out += [norm("ln1_post.weight", "post_attention_layernorm.weight",
                         "post_attention_norm.weight"),
                    norm("ln2.weight", "pre_feedforward_layernorm.weight", "ffn_norm.weight")]
        out += [T(b + part + ".weight", h + f"mlp.{part}_proj.weight", g + f"ffn_{part}.weight")
                for part in ("gate", "up", "down")]
        if cfg.placement != "pre":
            out.append(norm("ln2_post.weight", "post_feedforward_layernorm.weight",
                            "post_ffw_norm.weight"))
    out.append(T("norm.weight", p + "norm.weight", "output_norm.weight", hf_offset=1.0))
    if not cfg.tie_weights:
        out.append(T("head.weight", "lm_head.weight", "output.weight"))
    return out


# ---- llama.cpp's gemma2 and gemma3 files -------------------------------------------------------

def _gguf_scale(arch: str, layers: int, width: int, heads: int) -> Optional[float]:
    """The attention scale llama.cpp gives a file of ``arch`` (None: head_dim ** -0.5)."""
    if layers != _GGUF_27B.get(arch):
        return None
    return float(width // heads) ** -0.5


def _gguf_sliding(arch: str, layers: int) -> Tuple[int, ...]:
    if arch not in _GGUF_PATTERN:  # gemma: none
        return ()
    n = _GGUF_PATTERN[arch]
    return tuple(i for i in range(layers) if i % n < n - 1)


def _from_gguf(md: GGUFMetadata) -> Dict[str, Any]:
    arch = md.arch
    gemma3 = arch == "gemma3"
    out = gguf_sizes(md)
    width, heads, layers, context = out["width"], out["heads"], out["layers"], out["context"]
    kv, head_dim, rot = gguf_heads(md, width, heads)
    for t in ("attn_q.bias", "attn_output.bias", "ffn_up.bias", "attn_norm.bias"):
        if md.has(f"blk.0.{t}"):
            raise md.refuse(f"tensor 'blk.0.{t}'", "present", f"a {arch} file has no biases")
    if gemma3:
        for part in ("q", "k"):
            md.shape(f"blk.0.attn_{part}_norm.weight")  # refused by name when missing
        window = md.integer("attention.sliding_window")
    elif arch == "gemma":
        window = None
    else:
        window = md.integer("attention.sliding_window", 4096)
    sliding = _gguf_sliding(arch, layers)
    fields = dict(out, eps=md.real("attention.layer_norm_rms_epsilon", 1e-6), norm="rms",
                  placement="sandwich", activation="geglu", positions="rope",
                  kv_heads=None if kv == heads else kv,
                  head_dim=None if head_dim * heads == width else head_dim, residual=True,
                  qkv_bias=False, out_bias=False, mlp_bias=False,
                  embed_scale=float(np.float32(width ** 0.5)),
                  attn_scale=_gguf_scale(arch, layers, width, heads),
                  rope_theta=md.real("rope.freq_base", 10000.0),
                  **_window_fields(layers, context, sliding, window, md.path))
    if arch == "gemma":
        return dict(fields, placement="pre", qk_norm="none")
    if not gemma3:  # llama.cpp's defaults when the keys are missing: 50 and 30
        caps = {}
        for key, default in (("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0)):
            caps[key] = md.real(key, default)
            if not caps[key] > 0:
                raise md.refuse(md.key(key), caps[key], "llama.cpp's gemma2 divides by it")
        return dict(fields, qk_norm="none", attn_softcap=caps["attn_logit_softcapping"],
                    logit_softcap=caps["final_logit_softcapping"])
    kind = md.get("rope.scaling.type", "none")
    factor = md.real("rope.scaling.factor", 1.0)
    if kind not in ("none", "linear"):
        raise md.refuse(md.key("rope.scaling.type"), kind,
                        "rotary scaling other than linear on a gemma3 file")
    if kind == "linear" and factor != 1.0:
        if not factor > 0:
            raise md.fail(f"{md.key('rope.scaling.factor')} must be > 0, got {factor!r}")
        fields["rope_parameters"] = {"rope_type": "linear", "factor": factor}
    return dict(fields, qk_norm="head", rope_local_theta=_GGUF_LOCAL_THETA, local_layers=sliding)


def _to_gguf(cfg: Any, *, arch: str) -> Dict[str, Tuple[str, Any]]:
    """The metadata of a file llama.cpp computes as blockc does; anything it would compute
    differently refused by field."""
    gemma3 = arch == "gemma3"
    sliding = _gguf_sliding(arch, cfg.layers)
    flags = [cfg.layer_window(i) is not None for i in range(cfg.layers)]
    if cfg.sliding_window is not None and flags != [i in sliding for i in range(cfg.layers)]:
        raise BlockcValueError(f"GPTConfig.sliding_layers: llama.cpp's {arch} slides layers "
                               f"{list(sliding)} by number; this config slides "
                               f"{[i for i, f in enumerate(flags) if f]}")
    if cfg.attn_scale != _gguf_scale(arch, cfg.layers, cfg.width, cfg.heads):
        raise BlockcValueError(f"GPTConfig.attn_scale={cfg.attn_scale!r}: llama.cpp's {arch} "
                               "fixes the attention scale by the model's size")
    if cfg.qkv_bias or cfg.out_bias:
        raise BlockcValueError(f"GPTConfig.qkv_bias: llama.cpp's {arch} has no biases")
    md = dict(gguf_base(cfg), **{"attention.head_count_kv": ("UINT32", cfg.kv_heads_),
                                  "attention.layer_norm_rms_epsilon": ("FLOAT32", cfg.eps),
                                  "attention.key_length": ("UINT32", cfg.head_dim_),
                                  "attention.value_length": ("UINT32", cfg.head_dim_),
                                  "rope.freq_base": ("FLOAT32", cfg.rope_theta),
                                  "attention.sliding_window":
                                      ("UINT32", cfg.sliding_window or cfg.context)})
    if arch == "gemma":  # no window, no caps (check: Gemma's config has none)
        del md["attention.sliding_window"]
        if not cfg.tie_weights:
            raise BlockcValueError("GPTConfig.tie_weights=False: llama.cpp's gemma has no "
                                   "output matrix (it multiplies by the token embedding)")
        if cfg.rope_kind != "default":
            raise BlockcValueError(f"GPTConfig.rope_parameters: rope_type {cfg.rope_kind!r} is "
                                   "not written to a gemma GGUF file by blockc")
        return md
    if not gemma3:
        if cfg.rope_kind != "default":
            raise BlockcValueError(f"GPTConfig.rope_parameters: rope_type {cfg.rope_kind!r} is "
                                   "not written to a gemma2 GGUF file by blockc")
        for name, key in (("attn_softcap", "attn_logit_softcapping"),
                          ("logit_softcap", "final_logit_softcapping")):
            if getattr(cfg, name) is None:
                raise BlockcValueError(f"GPTConfig.{name}=None: llama.cpp's gemma2 always "
                                       "soft-caps (50 and 30 when its file has no value)")
            md[key] = ("FLOAT32", getattr(cfg, name))
        return md
    for name in ("attn_softcap", "logit_softcap"):
        if getattr(cfg, name) is not None:
            raise BlockcValueError(f"GPTConfig.{name}: blockc writes no soft-capping to a "
                                   "gemma3 GGUF file")
    if cfg.rope_local_theta not in (None, _GGUF_LOCAL_THETA):
        raise BlockcValueError(f"GPTConfig.rope_local_theta={cfg.rope_local_theta!r}: llama.cpp's "
                               f"gemma3 sliding layers turn by base {_GGUF_LOCAL_THETA:g}")
    if cfg.rope_local_theta is not None and cfg.local_layers != sliding:
        raise BlockcValueError(f"GPTConfig.local_layers: llama.cpp's gemma3 turns layers "
                               f"{list(sliding)} by the local base")
    if cfg.rope_kind == "linear":
        md["rope.scaling.type"] = ("STRING", "linear")
        md["rope.scaling.factor"] = ("FLOAT32", dict(cfg.rope_parameters)["factor"])
    elif cfg.rope_kind != "default":
        raise BlockcValueError(f"GPTConfig.rope_parameters: rope_type {cfg.rope_kind!r} is not "
                               "written to a gemma3 GGUF file by blockc")
    return md


#: what a gemma2 file reads itself (its soft-caps); gemma3's (its linear rotary scaling)
_REFUSE2 = {k: v for k, v in GGUF_REFUSE.items()
            if k not in ("attn_logit_softcapping", "final_logit_softcapping")}
_REFUSE3 = {k: v for k, v in GGUF_REFUSE.items()
            if k not in ("rope.scaling.type", "rope.scaling.factor")}

#: what a gemma file reads itself: nothing beyond Llama's
GEMMA = Family(name="gemma", model_types=("gemma",), from_hf=partial(_from_hf, model="Gemma"),
               check=partial(_check, model="Gemma"), to_hf=_to_hf1, tensors=_tensors,
               architectures=("gemma",), from_gguf=_from_gguf,
               to_gguf=partial(_to_gguf, arch="gemma"), prefix="model.")

GEMMA2 = Family(name="gemma2", model_types=("gemma2",), from_hf=partial(_from_hf, model="Gemma2"),
                check=partial(_check, model="Gemma 2"), to_hf=_to_hf, tensors=_tensors,
                architectures=("gemma2",), from_gguf=_from_gguf,
                to_gguf=partial(_to_gguf, arch="gemma2"), gguf_refuse=_REFUSE2, prefix="model.")

GEMMA3 = Family(name="gemma3", model_types=("gemma3_text",),
                from_hf=partial(_from_hf, model="Gemma3"), check=partial(_check, model="Gemma 3"),
                to_hf=_to_hf, tensors=_tensors, architectures=("gemma3",), from_gguf=_from_gguf,
                to_gguf=partial(_to_gguf, arch="gemma3"), gguf_refuse=_REFUSE3, prefix="model.")
