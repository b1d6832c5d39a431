"""Hugging Face model families: how a checkpoint's ``config.json`` maps onto
:class:`blockc.GPTConfig` and its tensor names onto blockc's.

One :class:`_Family` subclass per family (GPT-2; Llama, Mistral and Qwen2), entered in
:data:`FAMILIES` by its ``model_type`` values. A family maps its config fields onto
GPTConfig's and refuses, by field and value, anything the engine would compute
differently; writes a GPTConfig back as its ``config.json``; and lists its
checkpoint tensor names beside blockc's (GPT-2's ``Conv1D`` weights are stored
transposed, ``(in, out)``: they are transposed on the way in and out, so a square
``attn.c_proj`` cannot load the wrong way round).

This module depends on nothing of the model: the model core
(:mod:`blockc.model`) reads configs through it and :mod:`blockc.hf` loads and
saves checkpoint directories with it. A new family is one class here.
"""
from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .. import _files
from .._errors import BlockcValueError

__all__ = ["FAMILIES", "Name", "family_of", "config_to_hf", "read_config"]

Name = Tuple[str, str, bool, Optional[Tuple[int, int]]]


class _Family:
    """One model family: its config mapping and its tensor names."""

    model_types: Tuple[str, ...] = ()

    def config(self, d: Mapping[str, Any]) -> Dict[str, Any]:  # -> GPTConfig fields
        raise NotImplementedError

    def to_hf(self, cfg) -> Dict[str, Any]:
        raise NotImplementedError

    def names(self, cfg) -> List["Name"]:
        """(checkpoint name, blockc name, stored transposed, rows) for every tensor of
        cfg; rows (start, stop): the checkpoint tensor is those rows of blockc's (the
        fused q/k/v projection of separate q, k and v tensors), None: all of it."""
        raise NotImplementedError

    prefix = ""                 # the name prefix the checkpoints may carry
    ignore = re.compile(r"$^")  # names a checkpoint may carry that hold no parameter


def _get(d: Mapping[str, Any], key: str, default: Any = None, alias: Tuple[str, ...] = ()):
    for k in (key,) + alias:
        if k in d and d[k] is not None:
            return d[k]
    return default


def _refuse(model: str, field: str, value: Any, why: str) -> "BlockcValueError":
    return BlockcValueError(f"config.json: {model} {field}={value!r}: {why}; blockc does not "
                            "compute that, so it refuses rather than load a model that computes "
                            "differently")


def _int(d: Mapping[str, Any], key: str, alias: Tuple[str, ...] = (), default: Any = None) -> int:
    v = _get(d, key, default, alias)
    if type(v) is not int:
        raise BlockcValueError(f"config.json: {key} must be an integer, got {v!r}")
    return v


# Every field is read through one of these typed getters, so a value of the wrong type is
# refused by name ("yes" is not true, "abc" is not a number) instead of read as something
# else in silence or failing later with an error that names nothing.

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


class _GPT2(_Family):
    model_types = ("gpt2",)
    prefix = "transformer."
    # the causal-mask buffers older GPT-2 checkpoints carry
    ignore = re.compile(r"^(transformer\.)?h\.\d+\.attn\.(masked_)?bias$")
    ACT = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}

    def config(self, d):
        for field, bad in (("scale_attn_by_inverse_layer_idx", True),
                           ("reorder_and_upcast_attn", True), ("add_cross_attention", True),
                           ("scale_attn_weights", False)):
            if _bool(d, field, not bad) == bad:
                raise _refuse("GPT-2", field, bad, {
                    "scale_attn_by_inverse_layer_idx": "scores scaled by 1 / layer index",
                    "reorder_and_upcast_attn": "attention reordered and upcast",
                    "add_cross_attention": "cross-attention layers",
                    "scale_attn_weights": "unscaled attention scores"}[field])
        act = _str(d, "activation_function", "gelu_new")
        if act not in self.ACT:
            raise _refuse("GPT-2", "activation_function", act,
                          f"blockc runs {', '.join(sorted(self.ACT))}")
        width = _int(d, "n_embd", ("hidden_size",), 768)
        inner = _get(d, "n_inner")
        return dict(vocab=_int(d, "vocab_size", default=50257),
                    context=_int(d, "n_positions", ("n_ctx", "max_position_embeddings"), 1024),
                    width=width, heads=_int(d, "n_head", ("num_attention_heads",), 12),
                    layers=_int(d, "n_layer", ("num_hidden_layers",), 12),
                    eps=_float(d, "layer_norm_epsilon", 1e-5),
                    tie_weights=_bool(d, "tie_word_embeddings", True),
                    d_ff=None if inner is None else _int(d, "n_inner"),
                    activation=self.ACT[act])

    def to_hf(self, cfg):
        gpt2 = dict(norm="layer", placement="pre", positions="learned", residual=True,
                    qkv_bias=True, out_bias=True, mlp_bias=True, kv_heads=cfg.heads,
                    head_dim=cfg.width // cfg.heads)
        for field, want in gpt2.items():
            got = getattr(cfg, field) if field not in ("kv_heads", "head_dim") else \
                getattr(cfg, field + "_")
            if got != want:
                raise BlockcValueError(f"GPTConfig.{field}={got!r}: a GPT-2 checkpoint has "
                                       f"{field}={want!r}")
        if cfg.width % cfg.heads:
            raise BlockcValueError("GPTConfig: a GPT-2 checkpoint needs heads dividing width")
        act = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}.get(cfg.activation)
        if act is None:
            raise BlockcValueError(f"GPTConfig.activation={cfg.activation!r}: GPT-2 has no such "
                                   "activation_function")
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
                "vocab_size": cfg.vocab, "n_positions": cfg.context, "n_ctx": cfg.context,
                "n_embd": cfg.width, "n_layer": cfg.layers, "n_head": cfg.heads,
                "n_inner": None if cfg.d_ff is None else cfg.d_ff_, "activation_function": act,
                "layer_norm_epsilon": cfg.eps, "tie_word_embeddings": cfg.tie_weights,
                "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
                "reorder_and_upcast_attn": False, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                "attn_pdrop": 0.0}

    def names(self, cfg):
        p = self.prefix
        out = [(p + "wte.weight", "token.weight", False, None),
               (p + "wpe.weight", "position.weight", False, None)]
        for i in range(cfg.layers):
            h, b = f"{p}h.{i}.", f"blocks.{i}."
            out += [(h + "ln_1.weight", b + "ln1.weight", False, None),
                    (h + "ln_1.bias", b + "ln1.bias", False, None),
                    (h + "attn.c_attn.weight", b + "attn.qkv.weight", True, None),
                    (h + "attn.c_attn.bias", b + "attn.qkv.bias", False, None),
                    (h + "attn.c_proj.weight", b + "attn.proj.weight", True, None),
                    (h + "attn.c_proj.bias", b + "attn.proj.bias", False, None),
                    (h + "ln_2.weight", b + "ln2.weight", False, None),
                    (h + "ln_2.bias", b + "ln2.bias", False, None),
                    (h + "mlp.c_fc.weight", b + "up.weight", True, None),
                    (h + "mlp.c_fc.bias", b + "up.bias", False, None),
                    (h + "mlp.c_proj.weight", b + "down.weight", True, None),
                    (h + "mlp.c_proj.bias", b + "down.bias", False, None)]
        out += [(p + "ln_f.weight", "norm.weight", False, None), (p + "ln_f.bias", "norm.bias", False, None)]
        if not cfg.tie_weights:
            out.append(("lm_head.weight", "head.weight", False, None))
        return out



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


class _Llama(_Family):
    """Llama, Mistral and Qwen2: RMSNorm, rotary positions, SwiGLU, grouped K/V heads;
    separate q/k/v tensors (blockc fuses them: rows q, then k, then v)."""
    model_types = ("llama", "mistral", "qwen2")
    prefix = "model."
    # the inverse-frequency buffers older checkpoints carry
    ignore = re.compile(r"^(model\.)?layers\.\d+\.self_attn\.rotary_emb\.inv_freq$")
    NAME = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2"}

    def config(self, d):
        mt = d.get("model_type")
        model = self.NAME[mt]
        act = _str(d, "hidden_act", "silu")
        if act != "silu":
            raise _refuse(model, "hidden_act", act, "blockc's gated MLP is SiLU-gated (SwiGLU)")
        for field in ("num_local_experts", "num_experts", "n_routed_experts"):
            if _int(d, field, default=0):
                raise _refuse(model, field, d[field], "a mixture of experts")
        width = _int(d, "hidden_size", default=4096)
        heads = _int(d, "num_attention_heads", default=32)
        kv = _get(d, "num_key_value_heads", heads)
        if type(kv) is not int:
            raise BlockcValueError(f"config.json: num_key_value_heads must be an integer, got {kv!r}")
        context = _int(d, "max_position_embeddings", default=2048)
        # a sliding window as wide as the context is full attention: exact. A narrower
        # one differs beyond it; the model is then capped at the window, where it is exact
        window = None
        if mt == "mistral":
            window = d.get("sliding_window")
        else:
            types = _get(d, "layer_types", [])
            if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
                raise BlockcValueError(f"config.json: layer_types must be a list of strings, "
                                       f"got {types!r}")
            if mt == "qwen2" and (_bool(d, "use_sliding_window", False)
                                  or "sliding_attention" in types):
                window = d.get("sliding_window")
        if window is not None:
            if type(window) is not int or window < 1:
                raise BlockcValueError(f"config.json: sliding_window must be a positive integer, "
                                       f"got {window!r}")
            context = min(context, window)
        if mt == "qwen2":
            qkv_b, out_b, mlp_b = True, False, False
        else:
            qkv_b = out_b = _bool(d, "attention_bias", False)
            mlp_b = _bool(d, "mlp_bias", False)
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

    def to_hf(self, cfg):
        want = dict(norm="rms", placement="pre", positions="rope", activation="swiglu",
                    residual=True)
        for field, v in want.items():
            if getattr(cfg, field) != v:
                raise BlockcValueError(f"GPTConfig.{field}={getattr(cfg, field)!r}: a Llama or "
                                       f"Qwen2 checkpoint has {field}={v!r}")
        if (cfg.qkv_bias, cfg.out_bias, cfg.mlp_bias) == (True, False, False):
            mt, extra = "qwen2", {"use_sliding_window": False, "sliding_window": None}
        elif cfg.qkv_bias == cfg.out_bias:
            mt, extra = "llama", {"attention_bias": cfg.qkv_bias, "mlp_bias": cfg.mlp_bias}
        else:
            raise BlockcValueError(
                f"GPTConfig: biases qkv={cfg.qkv_bias}, out={cfg.out_bias}, mlp={cfg.mlp_bias}: "
                "Llama has them on all attention projections or none, Qwen2 on q/k/v only")
        arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}[mt]
        return {"architectures": [arch], "model_type": mt, "vocab_size": cfg.vocab,
                "hidden_size": cfg.width, "intermediate_size": cfg.d_ff_,
                "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
                "num_key_value_heads": cfg.kv_heads_, "head_dim": cfg.head_dim_,
                "hidden_act": "silu", "max_position_embeddings": cfg.context,
                "rms_norm_eps": cfg.eps, "tie_word_embeddings": cfg.tie_weights,
                "rope_theta": cfg.rope_theta,
                "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
                "attention_dropout": 0.0, **extra}

    def names(self, cfg):
        p = self.prefix
        q, kv = cfg.heads * cfg.head_dim_, cfg.kv_heads_ * cfg.head_dim_
        out: List[Name] = [(p + "embed_tokens.weight", "token.weight", False, None)]
        for i in range(cfg.layers):
            h, b = f"{p}layers.{i}.", f"blocks.{i}."
            out.append((h + "input_layernorm.weight", b + "ln1.weight", False, None))
            for part, rows in (("q", (0, q)), ("k", (q, q + kv)), ("v", (q + kv, q + 2 * kv))):
                out.append((h + f"self_attn.{part}_proj.weight", b + "attn.qkv.weight", False, rows))
                if cfg.qkv_bias:
                    out.append((h + f"self_attn.{part}_proj.bias", b + "attn.qkv.bias", False, rows))
            out.append((h + "self_attn.o_proj.weight", b + "attn.proj.weight", False, None))
            if cfg.out_bias:
                out.append((h + "self_attn.o_proj.bias", b + "attn.proj.bias", False, None))
            out.append((h + "post_attention_layernorm.weight", b + "ln2.weight", False, None))
            for part, ours in (("gate", "gate"), ("up", "up"), ("down", "down")):
                out.append((h + f"mlp.{part}_proj.weight", b + ours + ".weight", False, None))
                if cfg.mlp_bias:
                    out.append((h + f"mlp.{part}_proj.bias", b + ours + ".bias", False, None))
        out.append((p + "norm.weight", "norm.weight", False, None))
        if not cfg.tie_weights:
            out.append(("lm_head.weight", "head.weight", False, None))
        return out


FAMILIES: Dict[str, _Family] = {}
for _fam in (_GPT2(), _Llama()):
    for _t in _fam.model_types:
        FAMILIES[_t] = _fam


def read_config(path: str) -> Dict[str, Any]:
    """config.json of a directory (or the file itself) as a dict."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:  # a regular file, bounded in size and depth (a FIFO or /dev/zero is refused)
        d = _files.read_json(path, "a config.json")
    except FileNotFoundError:
        raise BlockcValueError(f"{path}: no such file (a checkpoint directory has a config.json)") from None
    if not isinstance(d, dict):
        raise BlockcValueError(f"{path}: must hold a JSON object")
    return d


def family_of(d: Mapping[str, Any]) -> _Family:
    mt = d.get("model_type")
    if not isinstance(mt, str):
        raise BlockcValueError(f"config.json: model_type must be a string, one of "
                               f"{', '.join(sorted(FAMILIES))}; got {mt!r}")
    fam = FAMILIES.get(mt)
    if fam is None:
        raise BlockcValueError(f"config.json: model_type {mt!r} is not one blockc runs "
                               f"({', '.join(sorted(FAMILIES))})")
    return fam



def config_to_hf(cfg) -> Dict[str, Any]:
    """The transformers config dict of a GPTConfig (the family its architecture is)."""
    why = []
    for fam in dict.fromkeys(FAMILIES.values()):
        try:
            return fam.to_hf(cfg)
        except BlockcValueError as e:
            why.append(f"not {'/'.join(fam.model_types)}: {e}")
    raise BlockcValueError("no checkpoint family blockc writes has this architecture (" +
                           "; ".join(why) + ")")

