"""Granite and SmolLM3: Llama-shaped decoders with one change each (issue 50), on Llama's
readers and tensor table (llama.cpp's converters write both as Llama, q and k rows
reordered).

- Granite: the embedding, each sublayer's residual branch, the attention scores and the
  logits scaled (``embedding_multiplier``, ``residual_multiplier``,
  ``attention_multiplier``, the logits divided by ``logits_scaling``); GGUF keys
  ``granite.embedding_scale``, ``.residual_scale``, ``.attention.scale``, ``.logit_scale``.
- SmolLM3: some layers without rotary embeddings (``no_rope_layers[i] == 0``, by default
  every ``no_rope_layer_interval``-th); llama.cpp's smollm3 files hold no such key: it
  skips rotary on every 4th layer, so a file is read so and only such a model written.
- OLMo2: no norm before the sublayers; a norm on each sublayer's output inside the
  residual (``x + norm(sublayer(x))``: placement "output"), and RMSNorm of q and k over
  the whole projection (gains of H Dh and KV Dh); llama.cpp's olmo2 files keep q and k in
  transformers' order (NEOX rotation) and name the norms post_attention_norm,
  post_ffw_norm, attn_q_norm, attn_k_norm.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Dict, List, Mapping, Tuple

from ..._errors import BlockcValueError
from .llama import (_LLAMA_NAMES, LLAMA_GGUF_REFUSE, _biases_by_flags, _llama_from_gguf,
                    _llama_from_hf, _llama_tensors, _llama_to_gguf, _llama_to_hf, _no_window,
                    _window_when_used, gguf_rope_freqs)
from .record import (Family, GGUFMetadata, TensorName, float_field, get_field,
                     int_field, want)

__all__ = ["GRANITE", "SMOLLM3", "OLMO2"]


def _shape(cfg: Any, what: str, **more: Any) -> None:
    base = dict(norm="rms", placement="pre", positions="rope", activation="swiglu",
                residual=True, rotary_dim=None, qk_norm="none", embed_scale=1.0,
                residual_scale=1.0, attn_scale=None, logit_scale=1.0, nope_layers=(),
                n_experts=0, attn_softcap=None, logit_softcap=None)
    base.update(more)
    want(cfg, what, **base)
    if cfg.qkv_bias != cfg.out_bias:
        raise BlockcValueError(f"GPTConfig: biases qkv={cfg.qkv_bias}, out={cfg.out_bias}: "
                               f"{what} has them on all attention projections or none")


# ---- Granite --------------------------------------------------------------------------------

_GRANITE_KEYS = (("embedding_multiplier", "embed_scale", "embedding_scale"),
                 ("residual_multiplier", "residual_scale", "residual_scale"),
                 ("attention_multiplier", "attn_scale", "attention.scale"),
                 ("logits_scaling", "logit_scale", "logit_scale"))


def _granite_from_hf(d: Mapping[str, Any]) -> Dict[str, Any]:
    out = _llama_from_hf(d, model="Granite", window_of=_no_window, biases_of=_biases_by_flags)
    for hf, ours, _ in _GRANITE_KEYS:
        v = float_field(d, hf, 1.0)
        if not v > 0:
            raise BlockcValueError(f"config.json: {hf} must be > 0, got {v!r}")
        out[ours] = v
    return out


def _granite_check(cfg: Any) -> None:
    if cfg.attn_scale is None:  # what tells a Granite config from a Llama one
        raise BlockcValueError("GPTConfig.attn_scale=None: a Granite checkpoint has its "
                               "attention_multiplier")
    _shape(cfg, "a Granite checkpoint", embed_scale=cfg.embed_scale,
           residual_scale=cfg.residual_scale, attn_scale=cfg.attn_scale,
           logit_scale=cfg.logit_scale)


def _granite_to_hf(cfg: Any) -> Dict[str, Any]:
    return _llama_to_hf(cfg, model_type="granite", architecture="GraniteForCausalLM",
                        extra=lambda c: {"attention_bias": c.qkv_bias, "mlp_bias": c.mlp_bias,
                                         **{hf: getattr(c, ours) for hf, ours, _ in _GRANITE_KEYS}})


def _granite_from_gguf(md: GGUFMetadata) -> Dict[str, Any]:
    out = _llama_from_gguf(md, biases=None,
                           why="a granite file has biases on all of q/k/v/output or on none")
    for _, ours, key in _GRANITE_KEYS:
        v = md.real(key, 0.0)
        if v:  # llama.cpp writes each only when set; absent: the neutral value
            out[ours] = v
    return out


def _granite_to_gguf(cfg: Any) -> Dict[str, Tuple[str, Any]]:
    md = _llama_to_gguf(cfg, arch="granite")
    for _, ours, key in _GRANITE_KEYS:
        md[key] = ("FLOAT32", getattr(cfg, ours))
    return md


GRANITE = Family(
    name="granite", model_types=("granite",), from_hf=_granite_from_hf, check=_granite_check,
    to_hf=_granite_to_hf, tensors=partial(_llama_tensors, permuted=True),
    architectures=("granite",), from_gguf=_granite_from_gguf, to_gguf=_granite_to_gguf,
    gguf_refuse={k: v for k, v in LLAMA_GGUF_REFUSE.items()
                 if k not in {key for _, _, key in _GRANITE_KEYS}}, **_LLAMA_NAMES)


# ---- SmolLM3 --------------------------------------------------------------------------------

#: llama.cpp's smollm3: rotary skipped on every 4th layer (layer i with (i + 1) % 4 == 0)
_GGUF_NOPE_STEP = 4


def _every(step: int, layers: int) -> Tuple[int, ...]:
    return tuple(i for i in range(layers) if (i + 1) % step == 0)


def _smollm3_from_hf(d: Mapping[str, Any]) -> Dict[str, Any]:
    out = _llama_from_hf(d, model="SmolLM3", window_of=_window_when_used,
                         biases_of=_biases_by_flags)
    layers = out["layers"]
    flags = get_field(d, "no_rope_layers")
    if flags is None:
        step = int_field(d, "no_rope_layer_interval", default=4)
        if step < 1:
            raise BlockcValueError(f"config.json: no_rope_layer_interval must be >= 1, got {step}")
        nope = _every(step, layers)
    else:
        if (not isinstance(flags, list) or len(flags) != layers
                or not all(type(f) is int and f in (0, 1) for f in flags)):
            raise BlockcValueError(f"config.json: no_rope_layers must be {layers} flags 0/1, "
                                   f"got {flags!r}")
        nope = tuple(i for i, f in enumerate(flags) if not f)
    return dict(out, nope_layers=nope)


def _smollm3_check(cfg: Any) -> None:
    if not cfg.nope_layers:
        raise BlockcValueError("GPTConfig.nope_layers=(): a SmolLM3 checkpoint has layers "
                               "without rotary embeddings")
    _shape(cfg, "a SmolLM3 checkpoint", nope_layers=cfg.nope_layers)


def _smollm3_to_hf(cfg: Any) -> Dict[str, Any]:
    flags: List[int] = [int(i not in cfg.nope_layers) for i in range(cfg.layers)]
    return _llama_to_hf(cfg, model_type="smollm3", architecture="SmolLM3ForCausalLM",
                        extra=lambda c: {"attention_bias": c.qkv_bias, "mlp_bias": c.mlp_bias,
                                         "no_rope_layers": flags, "use_sliding_window": False,
                                         "pad_token_id": None,
                                         "sliding_window": None})


def _smollm3_from_gguf(md: GGUFMetadata) -> Dict[str, Any]:
    out = _llama_from_gguf(md, biases=None,
                           why="a smollm3 file has biases on all of q/k/v/output or on none")
    return dict(out, nope_layers=_every(_GGUF_NOPE_STEP, out["layers"]))


def _smollm3_to_gguf(cfg: Any) -> Dict[str, Tuple[str, Any]]:
    if cfg.nope_layers != _every(_GGUF_NOPE_STEP, cfg.layers):
        raise BlockcValueError(f"GPTConfig.nope_layers={cfg.nope_layers}: a smollm3 GGUF file "
                               f"skips rotary on every {_GGUF_NOPE_STEP}th layer only")
    return _llama_to_gguf(cfg, arch="smollm3")


SMOLLM3 = Family(
    name="smollm3", model_types=("smollm3",), from_hf=_smollm3_from_hf, check=_smollm3_check,
    to_hf=_smollm3_to_hf, tensors=partial(_llama_tensors, permuted=True),
    architectures=("smollm3",), from_gguf=_smollm3_from_gguf, to_gguf=_smollm3_to_gguf,
    gguf_extra=gguf_rope_freqs, gguf_refuse=LLAMA_GGUF_REFUSE, **_LLAMA_NAMES)


# ---- OLMo2 ----------------------------------------------------------------------------------

def _olmo2_from_hf(d: Mapping[str, Any]) -> Dict[str, Any]:
    out = _llama_from_hf(d, model="OLMo2", window_of=_no_window,
                         biases_of=lambda d: (bool(get_field(d, "attention_bias", False)),) * 2
                         + (False,))
    return dict(out, placement="output", qk_norm="all")


def _olmo2_check(cfg: Any) -> None:
    _shape(cfg, "an OLMo2 checkpoint", placement="output", qk_norm="all", mlp_bias=False)


def _olmo2_tensors(cfg: Any) -> List[TensorName]:
    """Llama's table, its two norms the sublayers' output norms."""
    out = []
    for t in _llama_tensors(cfg, permuted=False):
        if t.ours.endswith(".ln1.weight"):
            t = t._replace(hf=t.hf.replace("input_layernorm", "post_attention_layernorm"),
                           gguf=t.gguf.replace("attn_norm", "post_attention_norm"))
        elif t.ours.endswith(".ln2.weight"):
            t = t._replace(hf=t.hf.replace("post_attention_layernorm", "post_feedforward_layernorm"),
                           gguf=t.gguf.replace("ffn_norm", "post_ffw_norm"))
        out.append(t)
    return out


def _olmo2_from_gguf(md: GGUFMetadata) -> Dict[str, Any]:
    for name in ("attn_q_norm", "post_attention_norm", "post_ffw_norm"):
        md.shape(f"blk.0.{name}.weight")  # refused by name when missing
    out = _llama_from_gguf(md, biases=None,
                           why="an olmo2 file has biases on all of q/k/v/output or on none")
    return dict(out, placement="output", qk_norm="all")


OLMO2 = Family(
    name="olmo2", model_types=("olmo2",), from_hf=_olmo2_from_hf, check=_olmo2_check,
    to_hf=partial(_llama_to_hf, model_type="olmo2", architecture="Olmo2ForCausalLM",
                  extra=lambda c: {"attention_bias": c.qkv_bias, "pad_token_id": None}),
    tensors=_olmo2_tensors, architectures=("olmo2",), from_gguf=_olmo2_from_gguf,
    to_gguf=partial(_llama_to_gguf, arch="olmo2"), gguf_refuse=LLAMA_GGUF_REFUSE, **_LLAMA_NAMES)
