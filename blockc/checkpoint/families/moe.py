"""Mixtures of experts (issue 50): Mixtral and Qwen3-MoE, Llama-shaped decoders whose
every layer's MLP is ``n_experts`` SwiGLU experts and a router (GPTConfig's
``n_experts``, ``experts_used``, ``router_norm``).

- Mixtral (``model_type`` "mixtral"): Mistral's attention (no biases, a window on every
  layer when ``sliding_window`` is set), ``num_local_experts`` experts of width
  ``intermediate_size``, ``num_experts_per_tok`` of them per token, their softmax
  probabilities renormalised over the chosen (transformers' ``MixtralTopKRouter``).
  Tensors ``block_sparse_moe.gate`` (the router) and ``block_sparse_moe.experts.e.w1``
  (gate), ``.w3`` (up), ``.w2`` (down).
- Qwen3-MoE ("qwen3_moe"): Qwen3's attention (q/k norms per head), ``num_experts``
  (stored as ``num_local_experts`` by transformers 5) experts of width
  ``moe_intermediate_size``, renormalised only with ``norm_topk_prob``; every layer
  sparse (``decoder_sparse_step`` 1, no ``mlp_only_layers``: anything else refused by
  name). Tensors ``mlp.gate`` and ``mlp.experts.e.{gate,up,down}_proj``.

transformers 5 writes the experts one tensor each (the names above) and reads them
fused; a checkpoint holding them fused (``experts.gate_up_proj``) is not read here yet.
GGUF files: Mixtral's are llama files with ``llama.expert_count`` (Llama's record reads
them), Qwen3-MoE's ``qwen3moe`` ones; the router ``ffn_gate_inp`` and the stacked experts
``ffn_*_exps`` (:mod:`blockc.checkpoint.families.experts`). llama.cpp renormalises the
chosen experts' weights in both, so a Qwen3-MoE without ``norm_topk_prob`` has no GGUF
file and is refused by name on save.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Dict, List, Mapping, Tuple

from ..._errors import BlockcValueError
from .experts import MIXTRAL_NAMES, QWEN3_MOE_NAMES, expert_rows
from .llama import (_LLAMA_NAMES, MOE_GGUF_REFUSE, _llama_from_gguf, _llama_from_hf,
                    _llama_shape, _llama_tensors, _llama_to_gguf, _llama_to_hf, _no_biases,
                    _window_always, _window_when_used)
from .record import (Family, GGUFMetadata, TensorName, bool_field, get_field, int_field,
                     refusal)

__all__ = ["MIXTRAL", "QWEN3_MOE"]

_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


def _experts_of(d: Mapping[str, Any], model: str, n_default: int,
                k_default: int) -> Dict[str, Any]:
    """n_experts and experts_used of a config.json (the expert count under either name;
    absent, transformers' defaults for the family)."""
    n = 0
    for f in ("num_local_experts", "num_experts"):
        v = int_field(d, f, default=0)
        if v and n and v != n:
            raise BlockcValueError(f"config.json: num_local_experts and num_experts differ "
                                   f"({n}, {v})")
        n = v or n
    if not any(f in d for f in ("num_local_experts", "num_experts")):
        n = n_default
    if n < 2:
        raise refusal(model, "num_local_experts", n, "fewer than two experts")
    k = int_field(d, "num_experts_per_tok", default=k_default)
    if not 1 <= k <= n:
        raise BlockcValueError(f"config.json: num_experts_per_tok must lie in [1, {n}], got {k}")
    return dict(n_experts=n, experts_used=k)


def _dense(d: Mapping[str, Any]) -> Dict[str, Any]:
    """d without its expert counts: what Llama's reader takes (it refuses experts)."""
    return {k: v for k, v in d.items() if k not in _EXPERT_KEYS}


def _mixtral_from_hf(d: Mapping[str, Any]) -> Dict[str, Any]:
    out = _llama_from_hf(_dense(d), model="Mixtral", window_of=_window_always,
                         biases_of=_no_biases)
    return dict(out, **_experts_of(d, "Mixtral", 8, 2), router_norm=True)


def _qwen3_moe_from_hf(d: Mapping[str, Any]) -> Dict[str, Any]:
    step = int_field(d, "decoder_sparse_step", default=1)
    if step != 1:
        raise refusal("Qwen3-MoE", "decoder_sparse_step", step, "dense MLP layers between "
                      "the sparse ones")
    dense = get_field(d, "mlp_only_layers", [])
    if dense:
        raise refusal("Qwen3-MoE", "mlp_only_layers", dense, "dense MLP layers")
    out = _llama_from_hf(_dense(d), model="Qwen3-MoE", window_of=_window_when_used,
                         biases_of=lambda d: (bool_field(d, "attention_bias", False),) * 2
                         + (False,))
    return dict(out, **_experts_of(d, "Qwen3-MoE", 128, 8), qk_norm="head",
                d_ff=int_field(d, "moe_intermediate_size", default=768),
                router_norm=bool_field(d, "norm_topk_prob", False))


def _moe_shape(cfg: Any, what: str, qk_norm: str) -> None:
    _llama_shape(cfg, what, qk_norm=qk_norm, n_experts=cfg.n_experts)
    if not cfg.n_experts:
        raise BlockcValueError(f"GPTConfig.n_experts=0: {what} is a mixture of experts")
    if cfg.mlp_bias:
        raise BlockcValueError(f"GPTConfig.mlp_bias=True: {what} has no MLP biases")


def _mixtral_check(cfg: Any) -> None:
    _moe_shape(cfg, "a Mixtral checkpoint", "none")
    if not cfg.router_norm:
        raise BlockcValueError("GPTConfig.router_norm=False: Mixtral renormalises its "
                               "experts' weights")
    if cfg.qkv_bias or cfg.out_bias:
        raise BlockcValueError("GPTConfig: attention biases: Mixtral has none")
    if cfg.sliding_layers is not None:
        raise BlockcValueError("GPTConfig.sliding_layers: Mixtral's window is on every layer")


def _qwen3_moe_check(cfg: Any) -> None:
    _moe_shape(cfg, "a Qwen3-MoE checkpoint", "head")
    if cfg.qkv_bias != cfg.out_bias:
        raise BlockcValueError(f"GPTConfig: biases qkv={cfg.qkv_bias}, out={cfg.out_bias}: "
                               "Qwen3-MoE has them on all attention projections or none")
    if cfg.sliding_window is not None:
        raise BlockcValueError("GPTConfig.sliding_window: blockc writes Qwen3-MoE without one")


def _mixtral_hf_extra(cfg: Any) -> Dict[str, Any]:
    return {"num_local_experts": cfg.n_experts, "num_experts_per_tok": cfg.experts_used,
            "sliding_window": cfg.sliding_window, "router_jitter_noise": 0.0}


def _qwen3_moe_hf_extra(cfg: Any) -> Dict[str, Any]:
    return {"num_experts": cfg.n_experts, "num_experts_per_tok": cfg.experts_used,
            "moe_intermediate_size": cfg.d_ff_, "norm_topk_prob": cfg.router_norm,
            "decoder_sparse_step": 1, "mlp_only_layers": [], "attention_bias": cfg.qkv_bias,
            "use_sliding_window": False, "sliding_window": None}


def _moe_tensors(cfg: Any, *, permuted: bool, names: Mapping[str, Any]) -> List[TensorName]:
    """Llama's table with each layer's gate/up/down rows replaced by the router's and
    every expert's (:func:`~blockc.checkpoint.families.experts.expert_rows`)."""
    return expert_rows(_llama_tensors(cfg, permuted=permuted), cfg, **names)


def _qwen3_moe_from_gguf(md: GGUFMetadata) -> Dict[str, Any]:
    md.integer("expert_count")  # refused by name when missing
    out = _llama_from_gguf(md, biases=None, experts=True,
                           why="a qwen3moe file has biases on all of q/k/v/output or on none")
    for part in ("q", "k"):
        md.shape(f"blk.0.attn_{part}_norm.weight")  # refused by name when missing
    return dict(out, qk_norm="head", d_ff=md.integer("expert_feed_forward_length"))


def _qwen3_moe_to_gguf(cfg: Any) -> Dict[str, Tuple[str, Any]]:
    return dict(_llama_to_gguf(cfg, arch="qwen3moe"),
                expert_feed_forward_length=("UINT32", cfg.d_ff_))


# Mixtral's GGUF files are llama files (Llama's record reads them: its table names a
# config with experts Mixtral's way), written as such
MIXTRAL = Family(
    name="mixtral", model_types=("mixtral",), from_hf=_mixtral_from_hf, check=_mixtral_check,
    to_hf=partial(_llama_to_hf, model_type="mixtral", architecture="MixtralForCausalLM",
                  extra=_mixtral_hf_extra),
    tensors=partial(_moe_tensors, permuted=True, names=MIXTRAL_NAMES), gguf_as="llama",
    **_LLAMA_NAMES)

QWEN3_MOE = Family(
    name="qwen3_moe", model_types=("qwen3_moe",), from_hf=_qwen3_moe_from_hf,
    check=_qwen3_moe_check,
    to_hf=partial(_llama_to_hf, model_type="qwen3_moe", architecture="Qwen3MoeForCausalLM",
                  extra=_qwen3_moe_hf_extra),
    tensors=partial(_moe_tensors, permuted=False, names=QWEN3_MOE_NAMES),
    architectures=("qwen3moe",), from_gguf=_qwen3_moe_from_gguf, to_gguf=_qwen3_moe_to_gguf,
    gguf_refuse=MOE_GGUF_REFUSE, **_LLAMA_NAMES)
