"""Gemma 3 (text): the record of ``gemma3_text`` checkpoints (issue 50).

Gemma 3 is a Llama-shaped decoder with: Gemma's RMSNorm, ``x * (1 + w)`` (blockc folds
the 1 in on load, in float32 as transformers adds it, and takes it out on save: the
``hf_offset`` of each norm gain), norms before AND after each sublayer ("sandwich"),
RMSNorm of q and k per head, the GeGLU MLP (``gelu_pytorch_tanh``), the embedding
scaled by sqrt(width) rounded to float32, attention scaled by
``query_pre_attn_scalar ** -0.5``, and layers alternating sliding-window attention
(rotary base ``rope_local_base_freq``, unscaled) with global attention (``rope_theta``
and its scaling).

The sliding layers (``layer_types``) attend within ``sliding_window`` and keep a ring
cache of about that many positions (GPTConfig's ``sliding_window``/``sliding_layers``),
so a long context is exact past the window. llama.cpp's gemma3 GGUF files are not read or
written yet: its attention scale and sliding pattern are fixed by model size in
llama.cpp, not written in the file.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping

import numpy as np

from ..._errors import BlockcValueError
from .llama import rope_fields, rope_to_hf
from .record import (Family, TensorName, bool_field, float_field, get_field, int_field,
                     refusal, want)

__all__ = ["GEMMA3"]

_ACTS = ("gelu_pytorch_tanh", "gelu_tanh")


def _layer_types(d: Mapping[str, Any], layers: int) -> List[str]:
    types = get_field(d, "layer_types")
    if types is None:
        pattern = int_field(d, "sliding_window_pattern", default=6)
        return ["sliding_attention" if (i + 1) % pattern else "full_attention"
                for i in range(layers)]
    if (not isinstance(types, list) or len(types) != layers
            or not all(t in ("sliding_attention", "full_attention") for t in types)):
        raise BlockcValueError(f"config.json: layer_types must be {layers} of "
                               f"sliding_attention/full_attention, got {types!r}")
    return types


def _rope(d: Mapping[str, Any], head_dim: int) -> Dict[str, Any]:
    """The global layers' rotary (rope_fields of the full_attention parameters) and the
    sliding layers' base (their parameters must be the plain rotary)."""
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


def _from_hf(d: Mapping[str, Any]) -> Dict[str, Any]:
    act = get_field(d, "hidden_activation", None, alias=("hidden_act",)) or "gelu_pytorch_tanh"
    if act not in _ACTS:
        raise refusal("Gemma3", "hidden_activation", act, "blockc's GeGLU is tanh-GELU-gated")
    for f in ("final_logit_softcapping", "attn_logit_softcapping"):
        if get_field(d, f) is not None:
            raise refusal("Gemma3", f, d[f], "soft-capped logits")
    if bool_field(d, "use_bidirectional_attention", False):
        raise refusal("Gemma3", "use_bidirectional_attention", True, "attention that is not causal")
    width = int_field(d, "hidden_size", default=2304)
    heads = int_field(d, "num_attention_heads", default=8)
    kv = int_field(d, "num_key_value_heads", default=4)
    head_dim = int_field(d, "head_dim", default=256)
    layers = int_field(d, "num_hidden_layers", default=26)
    types = _layer_types(d, layers)
    local = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    rope = _rope(d, head_dim)
    context = int_field(d, "max_position_embeddings", default=131072)
    window = get_field(d, "sliding_window", 4096)
    if local and window is not None:
        if type(window) is not int or window < 1:
            raise BlockcValueError(f"config.json: sliding_window must be a positive integer, "
                                   f"got {window!r}")
    sliding = window if local and window is not None and window < context else None
    scalar = float_field(d, "query_pre_attn_scalar", 256)
    if not scalar > 0:
        raise BlockcValueError(f"config.json: query_pre_attn_scalar must be > 0, got {scalar!r}")
    bias = bool_field(d, "attention_bias", False)
    return dict(vocab=int_field(d, "vocab_size", default=262208), context=context, width=width,
                heads=heads, layers=layers, eps=float_field(d, "rms_norm_eps", 1e-6),
                tie_weights=bool_field(d, "tie_word_embeddings", True), norm="rms",
                placement="sandwich", activation="geglu",
                d_ff=int_field(d, "intermediate_size", default=9216), positions="rope",
                kv_heads=None if kv == heads else kv,
                head_dim=None if head_dim * heads == width else head_dim, residual=True,
                qkv_bias=bias, out_bias=bias, mlp_bias=False, qk_norm="head",
                embed_scale=float(np.float32(width ** 0.5)),
                attn_scale=None if scalar == head_dim else scalar ** -0.5,
                local_layers=local if rope["rope_local_theta"] else (),
                sliding_window=sliding,
                sliding_layers=None if sliding is None or len(local) == layers else
                tuple(i in local for i in range(layers)), **rope)


def _check(cfg: Any) -> None:
    want(cfg, "a Gemma 3 checkpoint", norm="rms", placement="sandwich", activation="geglu",
         positions="rope", residual=True, qk_norm="head", rotary_dim=None, nope_layers=(),
         residual_scale=1.0, logit_scale=1.0, mlp_bias=False,
         embed_scale=float(np.float32(cfg.width ** 0.5)))
    if cfg.qkv_bias != cfg.out_bias:
        raise BlockcValueError(f"GPTConfig: biases qkv={cfg.qkv_bias}, out={cfg.out_bias}: "
                               "Gemma 3 has them on all attention projections or none")


def _to_hf(cfg: Any) -> Dict[str, Any]:
    rope = rope_to_hf(cfg)
    local = cfg.rope_local_theta if cfg.rope_local_theta is not None else 10_000.0
    types = ["sliding_attention" if cfg.layer_window(i) is not None or i in cfg.local_layers
             else "full_attention" for i in range(cfg.layers)]
    # transformers holds query_pre_attn_scalar as an integer
    scalar = cfg.head_dim_ if cfg.attn_scale is None else int(round(cfg.attn_scale ** -2))
    return {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "vocab_size": cfg.vocab, "hidden_size": cfg.width, "intermediate_size": cfg.d_ff_,
            "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
            "num_key_value_heads": cfg.kv_heads_, "head_dim": cfg.head_dim_,
            "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": cfg.context,
            "rms_norm_eps": cfg.eps, "tie_word_embeddings": cfg.tie_weights,
            "rope_parameters": {"full_attention": rope["rope_parameters"],
                                "sliding_attention": {"rope_type": "default", "rope_theta": local}},
            "layer_types": types, "sliding_window": cfg.sliding_window or cfg.context,
            "query_pre_attn_scalar": scalar,
            "attention_bias": cfg.qkv_bias, "attention_dropout": 0.0,
            "final_logit_softcapping": None, "attn_logit_softcapping": None}


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
        out += [norm("attn.q_norm.weight", "self_attn.q_norm.weight", "attn_q_norm.weight"),
                norm("attn.k_norm.weight", "self_attn.k_norm.weight", "attn_k_norm.weight"),
                T(b + "attn.proj.weight", h + "self_attn.o_proj.weight", g + "attn_output.weight")]
        if cfg.out_bias:
            out.append(T(b + "attn.proj.bias", h + "self_attn.o_proj.bias", g + "attn_output.bias"))
        out += [norm("ln1_post.weight", "post_attention_layernorm.weight",
                     "post_attention_norm.weight"),
                norm("ln2.weight", "pre_feedforward_layernorm.weight", "ffn_norm.weight")]
        out += [T(b + part + ".weight", h + f"mlp.{part}_proj.weight", g + f"ffn_{part}.weight")
                for part in ("gate", "up", "down")]
        out.append(norm("ln2_post.weight", "post_feedforward_layernorm.weight",
                        "post_ffw_norm.weight"))
    out.append(T("norm.weight", p + "norm.weight", "output_norm.weight", hf_offset=1.0))
    if not cfg.tie_weights:
        out.append(T("head.weight", "lm_head.weight", "output.weight"))
    return out


GEMMA3 = Family(name="gemma3", model_types=("gemma3_text",), from_hf=_from_hf, check=_check,
                to_hf=_to_hf, tensors=_tensors, prefix="model.")
