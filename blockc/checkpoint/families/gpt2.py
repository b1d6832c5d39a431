"""GPT-2: the record of chapter 6's model (Hugging Face ``gpt2``, llama.cpp ``gpt2``)."""
from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Tuple

from ..._errors import BlockcValueError
from .record import (Family, GGUFMetadata, TensorName, bool_field, float_field, get_field,
                     gguf_base, gguf_sizes, int_field, refusal, str_field, want)

__all__ = ["GPT2"]

# ---- GPT-2 -------------------------------------------------------------------------------------

_GPT2_ACT = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
             "relu": "relu"}
_GPT2_REFUSE = {"scale_attn_by_inverse_layer_idx": (True, "scores scaled by 1 / layer index"),
                "reorder_and_upcast_attn": (True, "attention reordered and upcast"),
                "add_cross_attention": (True, "cross-attention layers"),
                "scale_attn_weights": (False, "unscaled attention scores")}


def _gpt2_from_hf(d: Mapping[str, Any]) -> Dict[str, Any]:
    for f, (bad, why) in _GPT2_REFUSE.items():
        if bool_field(d, f, not bad) == bad:
            raise refusal("GPT-2", f, bad, why)
    act = str_field(d, "activation_function", "gelu_new")
    if act not in _GPT2_ACT:
        raise refusal("GPT-2", "activation_function", act,
                      f"blockc runs {', '.join(sorted(_GPT2_ACT))}")
    width = int_field(d, "n_embd", ("hidden_size",), 768)
    inner = get_field(d, "n_inner")
    return dict(vocab=int_field(d, "vocab_size", default=50257),
                context=int_field(d, "n_positions", ("n_ctx", "max_position_embeddings"), 1024),
                width=width, heads=int_field(d, "n_head", ("num_attention_heads",), 12),
                layers=int_field(d, "n_layer", ("num_hidden_layers",), 12),
                eps=float_field(d, "layer_norm_epsilon", 1e-5),
                tie_weights=bool_field(d, "tie_word_embeddings", True),
                d_ff=None if inner is None else int_field(d, "n_inner"),
                activation=_GPT2_ACT[act])


def _gpt2_check(cfg: Any) -> None:
    want(cfg, "a GPT-2 checkpoint", norm="layer", placement="pre", positions="learned",
          residual=True, qkv_bias=True, out_bias=True, mlp_bias=True, kv_heads_=cfg.heads,
          head_dim_=cfg.width // cfg.heads, attn_softcap=None, logit_softcap=None, n_experts=0)
    if cfg.width % cfg.heads:
        raise BlockcValueError("GPTConfig: a GPT-2 checkpoint needs heads dividing width")
    if cfg.sliding_window is not None:
        raise BlockcValueError("GPTConfig.sliding_window: GPT-2 has no sliding window")
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
    out = gguf_sizes(md)
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
    return dict(gguf_base(cfg), **{"attention.layer_norm_epsilon": ("FLOAT32", cfg.eps)})


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



_GPT2_NAMES = dict(prefix="transformer.",
                   # the causal-mask buffers older GPT-2 checkpoints carry
                   ignore=re.compile(r"^(transformer\.)?h\.\d+\.attn\.(masked_)?bias$"))
GPT2 = Family(
    name="gpt2", model_types=("gpt2",), from_hf=_gpt2_from_hf, check=_gpt2_check,
    to_hf=_gpt2_to_hf, tensors=_gpt2_tensors, architectures=("gpt2",),
    from_gguf=_gpt2_from_gguf, to_gguf=_gpt2_to_gguf, **_GPT2_NAMES)

