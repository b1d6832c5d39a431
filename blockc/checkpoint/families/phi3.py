"""Phi-3, Phi-3.5 and Phi-4-mini (transformers' ``model_type`` "phi3", llama.cpp's
``general.architecture`` "phi3"): Llama's computation with fused projections (issue 50).

- Tensors: q, k and v are one ``qkv_proj`` (rows q, k, v: blockc's ``attn.qkv`` as it
  is), gate and up one ``gate_up_proj`` (rows gate, then up: transformers'
  ``chunk(2)``, the first half SiLU-gated), split on load and fused again on save
  (:class:`~blockc.checkpoint.families.record.TensorName` ``part``); llama.cpp names them
  ``attn_qkv`` and ``ffn_up`` (gate and up fused the same way), in transformers' row order
  (it rotates phi3 NEOX-style: no q/k reordering).
- Rotary: ``partial_rotary_factor`` (Phi-4-mini's 0.75: ``rotary_dim``), and ``longrope``
  (``su``): the short factors for a sequence up to ``original_max_position_embeddings``,
  the long ones past it, cos and sin scaled by the attention factor
  (sqrt(1 + ln(max / original) / ln(original)) unless given). In a GGUF file:
  ``rope_factors_long.weight``, ``rope_factors_short.weight``,
  ``phi3.rope.scaling.original_context_length``, ``phi3.rope.scaling.attn_factor``,
  ``phi3.rope.dimension_count``. Which factors apply follows transformers: by the
  sequence's length (and ``generate`` runs a sequence whole again when it passes the
  original length, as transformers' Phi-3 generate does); llama.cpp picks them once, by
  the context size a run is created with.
- ``sliding_window`` on every layer (Phi-3-mini's 2047: a query sees itself and the
  2046 positions before it, as transformers' mask); llama.cpp's converter writes
  ``phi3.attention.sliding_window`` 0 for none.

A config is saved as Phi-3 when it rotates part of each head or uses longrope (what
Phi-3.5 and Phi-4-mini have and no Llama checkpoint does); a Phi-3-mini (plain rotary,
a window) is Llama's computation and saves as Mistral's.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Tuple

import numpy as np

from ..._errors import BlockcValueError
from .llama import (_LLAMA_NAMES, _llama_from_gguf, _llama_from_hf, _llama_to_hf, _no_biases,
                    _window_always)
from .record import GGUF_REFUSE, Family, GGUFMetadata, TensorName, gguf_base, want

__all__ = ["PHI3"]

_FACTORS = ("rope_factors_long.weight", "rope_factors_short.weight")


def _phi3_from_hf(d: Mapping[str, Any]) -> Dict[str, Any]:
    out = _llama_from_hf(d, model="Phi-3", window_of=_window_always, biases_of=_no_biases,
                         partial=True)
    kind = dict(out["rope_parameters"] or {}).get("rope_type", "default")
    if kind not in ("default", "longrope"):  # transformers' Phi3Config refuses the others
        raise BlockcValueError(f"config.json: Phi-3 rope_type {kind!r}: transformers' Phi-3 "
                               "computes default or longrope")
    return out


def _phi3_check(cfg: Any) -> None:
    if cfg.rotary_dim is None and cfg.rope_kind != "longrope":
        raise BlockcValueError("GPTConfig: a Phi-3 checkpoint is told by partial rotary "
                               "(rotary_dim) or longrope; this config has neither")
    want(cfg, "a Phi-3 checkpoint", norm="rms", placement="pre", positions="rope",
         activation="swiglu", residual=True, nope_layers=(), qk_norm="none", embed_scale=1.0,
         residual_scale=1.0, attn_scale=None, logit_scale=1.0, qkv_bias=False,
         out_bias=False, mlp_bias=False, sliding_layers=None, local_layers=(),
         rope_local_theta=None, n_experts=0, attn_softcap=None,
         logit_softcap=None)
    if cfg.rope_kind not in ("default", "longrope"):
        raise BlockcValueError(f"GPTConfig.rope_parameters: rope_type {cfg.rope_kind!r}: a "
                               "Phi-3 checkpoint has default or longrope")
    if cfg.head_dim_ * cfg.heads != cfg.width:
        raise BlockcValueError(f"GPTConfig.head_dim={cfg.head_dim_}: a Phi-3 checkpoint's "
                               f"heads are width / heads = {cfg.width / cfg.heads:g} wide")


def _phi3_to_hf(cfg: Any) -> Dict[str, Any]:
    params = dict(cfg.rope_parameters or ())
    out = _llama_to_hf(cfg, model_type="phi3", architecture="Phi3ForCausalLM",
                       extra=lambda c: {"sliding_window": c.sliding_window,
                                        "pad_token_id": None})
    out.pop("head_dim")  # transformers' Phi-3 derives it (width / heads)
    out["original_max_position_embeddings"] = params.get("original_max_position_embeddings",
                                                         cfg.context)
    return out


def _phi3_tensors(cfg: Any) -> List[TensorName]:
    T, f = TensorName, cfg.d_ff_
    out = [T("token.weight", "model.embed_tokens.weight", "token_embd.weight")]
    for i in range(cfg.layers):
        b, h, g = f"blocks.{i}.", f"model.layers.{i}.", f"blk.{i}."
        out += [T(b + "ln1.weight", h + "input_layernorm.weight", g + "attn_norm.weight"),
                T(b + "attn.qkv.weight", h + "self_attn.qkv_proj.weight", g + "attn_qkv.weight"),
                T(b + "attn.proj.weight", h + "self_attn.o_proj.weight", g + "attn_output.weight"),
                T(b + "ln2.weight", h + "post_attention_layernorm.weight", g + "ffn_norm.weight"),
                T(b + "gate.weight", h + "mlp.gate_up_proj.weight", g + "ffn_up.weight",
                  part=(0, f)),
                T(b + "up.weight", h + "mlp.gate_up_proj.weight", g + "ffn_up.weight",
                  part=(f, 2 * f)),
                T(b + "down.weight", h + "mlp.down_proj.weight", g + "ffn_down.weight")]
    out.append(T("norm.weight", "model.norm.weight", "output_norm.weight"))
    if not cfg.tie_weights:
        out.append(T("head.weight", "lm_head.weight", "output.weight"))
    return out


def _attn_factor(context: int, original: int) -> float:
    """longrope's default attention factor (transformers' and llama.cpp's converter's)."""
    scale = context / original
    return math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1.0 else 1.0


def _phi3_from_gguf(md: GGUFMetadata) -> Dict[str, Any]:
    for n in ("attn_q", "attn_k", "attn_v", "ffn_gate"):  # phi3 files fuse these
        if md.has(f"blk.0.{n}.weight"):
            raise md.fail(f"tensor 'blk.0.{n}.weight': a phi3 file fuses q/k/v (attn_qkv) "
                          "and gate/up (ffn_up)")
    md.shape("blk.0.attn_qkv.weight")  # refused by name when missing
    out = _llama_from_gguf(md, biases=(False, False), why="a phi3 file has no biases",
                           partial=True, scaling_keys=False)
    head_dim = out["width"] // out["heads"]
    rot = out.get("rotary_dim") or head_dim
    has = [md.has(n) for n in _FACTORS]
    if any(has) and not all(has):
        raise md.fail(f"tensor {_FACTORS[has.index(False)]!r} is missing beside "
                      f"{_FACTORS[has.index(True)]!r}")
    if not all(has):
        attn = md.real("rope.scaling.attn_factor", 1.0)
        if attn != 1.0:  # llama.cpp's converter writes it beside the factors only
            raise md.refuse(md.key("rope.scaling.attn_factor"), attn,
                            "cos and sin scaled without longrope's factors")
        return out
    long_, short = [], []
    for name, into in zip(_FACTORS, (long_, short)):
        if md.shape(name) != (rot // 2,):
            raise md.fail(f"tensor {name!r} has shape {md.shape(name)}, expected ({rot // 2},)")
        a = md.file.tensors[name].to_float32().astype(np.float64)
        if not np.all(np.isfinite(a)) or not np.all(a > 0):
            raise md.fail(f"tensor {name!r} must hold positive numbers")
        into.extend(float(x) for x in a)
    original = md.integer("rope.scaling.original_context_length")
    params: Dict[str, Any] = dict(rope_type="longrope", short_factor=tuple(short),
                                  long_factor=tuple(long_), max_position_embeddings=out["context"],
                                  original_max_position_embeddings=original)
    attn = md.real("rope.scaling.attn_factor", 1.0)
    # written as a float32 of the default: left to the default (the same value in double)
    if np.float32(attn) != np.float32(_attn_factor(out["context"], original)):
        params["attention_factor"] = attn
    return dict(out, rope_parameters=params)


def _phi3_to_gguf(cfg: Any) -> Dict[str, Tuple[str, Any]]:
    _phi3_check(cfg)
    p = dict(cfg.rope_parameters or ())
    md = dict(gguf_base(cfg), **{"attention.head_count_kv": ("UINT32", cfg.kv_heads_),
                                  "attention.layer_norm_rms_epsilon": ("FLOAT32", cfg.eps),
                                  "rope.freq_base": ("FLOAT32", cfg.rope_theta),
                                  "rope.dimension_count": ("UINT32", cfg.rotary_dim_),
                                  "attention.sliding_window": ("UINT32", cfg.sliding_window or 0),
                                  "rope.scaling.original_context_length":
                                      ("UINT32", p.get("original_max_position_embeddings",
                                                       cfg.context))})
    if cfg.rope_kind == "longrope":
        if p.get("max_position_embeddings", cfg.context) != cfg.context:
            raise BlockcValueError("GPTConfig.rope_parameters.max_position_embeddings: a phi3 "
                                   "GGUF file's longrope reads its context_length")
        md["rope.scaling.attn_factor"] = ("FLOAT32", cfg.rope_tables.attn)
    md["vocab_size"] = ("UINT32", cfg.vocab)
    return md


def _phi3_extra(cfg: Any) -> Dict[str, np.ndarray]:
    """rope_factors_long.weight and rope_factors_short.weight of a longrope config."""
    if cfg.rope_kind != "longrope":
        return {}
    p = dict(cfg.rope_parameters)
    return {n: np.asarray(p[k], np.float32) for n, k in zip(_FACTORS, ("long_factor",
                                                                       "short_factor"))}


PHI3 = Family(
    name="phi3", model_types=("phi3",), from_hf=_phi3_from_hf, check=_phi3_check,
    to_hf=_phi3_to_hf, tensors=_phi3_tensors, architectures=("phi3",),
    from_gguf=_phi3_from_gguf, to_gguf=_phi3_to_gguf, gguf_extra=_phi3_extra,
    gguf_refuse={k: v for k, v in GGUF_REFUSE.items() if k != "rope.scaling.attn_factor"},
    **_LLAMA_NAMES)
