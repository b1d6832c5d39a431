"""Hugging Face checkpoint directories: configs, tensor names, loading and saving.

A directory as ``transformers`` writes it: ``config.json`` and ``model.safetensors``
(or shards ``model-0000X-of-0000N.safetensors`` listed by
``model.safetensors.index.json``). blockc reads it with its own zero-copy reader
(:mod:`blockc.safetensors`) and never contacts the Hub, never unpickles
(``pytorch_model.bin`` is refused, with the conversion to do).

Each family maps its config fields onto :class:`blockc.GPTConfig` and refuses,
by field and value, anything the engine would compute differently; and maps
its tensor names onto blockc's (GPT-2's ``Conv1D`` weights are stored
transposed, ``(in, out)``: they are transposed on the way in and out, so a
square ``attn.c_proj`` cannot load the wrong way round).
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from . import safetensors as st
from ._errors import BlockcTypeError, BlockcValueError

__all__ = ["config_from_hf", "config_to_hf", "load_dir", "save_dir", "read_config"]


class _Family:
    """One model family: its config mapping and its tensor names."""

    model_types: Tuple[str, ...] = ()

    def config(self, d: Mapping[str, Any]) -> Dict[str, Any]:  # -> GPTConfig fields
        raise NotImplementedError

    def to_hf(self, cfg) -> Dict[str, Any]:
        raise NotImplementedError

    def names(self, cfg) -> List[Tuple[str, str, bool]]:
        """(checkpoint name, blockc name, stored transposed) for every tensor of cfg."""
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
            if d.get(field, not bad) == bad:
                raise _refuse("GPT-2", field, bad, {
                    "scale_attn_by_inverse_layer_idx": "scores scaled by 1 / layer index",
                    "reorder_and_upcast_attn": "attention reordered and upcast",
                    "add_cross_attention": "cross-attention layers",
                    "scale_attn_weights": "unscaled attention scores"}[field])
        act = d.get("activation_function", "gelu_new")
        if act not in self.ACT:
            raise _refuse("GPT-2", "activation_function", act,
                          f"blockc runs {', '.join(sorted(self.ACT))}")
        width = _int(d, "n_embd", ("hidden_size",), 768)
        inner = _get(d, "n_inner")
        return dict(vocab=_int(d, "vocab_size", default=50257),
                    context=_int(d, "n_positions", ("n_ctx", "max_position_embeddings"), 1024),
                    width=width, heads=_int(d, "n_head", ("num_attention_heads",), 12),
                    layers=_int(d, "n_layer", ("num_hidden_layers",), 12),
                    eps=float(_get(d, "layer_norm_epsilon", 1e-5)),
                    tie_weights=bool(d.get("tie_word_embeddings", True)),
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
        out = [(p + "wte.weight", "token.weight", False),
               (p + "wpe.weight", "position.weight", False)]
        for i in range(cfg.layers):
            h, b = f"{p}h.{i}.", f"blocks.{i}."
            out += [(h + "ln_1.weight", b + "ln1.weight", False),
                    (h + "ln_1.bias", b + "ln1.bias", False),
                    (h + "attn.c_attn.weight", b + "attn.qkv.weight", True),
                    (h + "attn.c_attn.bias", b + "attn.qkv.bias", False),
                    (h + "attn.c_proj.weight", b + "attn.proj.weight", True),
                    (h + "attn.c_proj.bias", b + "attn.proj.bias", False),
                    (h + "ln_2.weight", b + "ln2.weight", False),
                    (h + "ln_2.bias", b + "ln2.bias", False),
                    (h + "mlp.c_fc.weight", b + "up.weight", True),
                    (h + "mlp.c_fc.bias", b + "up.bias", False),
                    (h + "mlp.c_proj.weight", b + "down.weight", True),
                    (h + "mlp.c_proj.bias", b + "down.bias", False)]
        out += [(p + "ln_f.weight", "norm.weight", False), (p + "ln_f.bias", "norm.bias", False)]
        if not cfg.tie_weights:
            out.append(("lm_head.weight", "head.weight", False))
        return out


FAMILIES: Dict[str, _Family] = {}
for _fam in (_GPT2(),):
    for _t in _fam.model_types:
        FAMILIES[_t] = _fam


def read_config(path: str) -> Dict[str, Any]:
    """config.json of a directory (or the file itself) as a dict."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except FileNotFoundError:
        raise BlockcValueError(f"{path}: no such file (a checkpoint directory has a config.json)") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise BlockcValueError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(d, dict):
        raise BlockcValueError(f"{path}: must hold a JSON object")
    return d


def family_of(d: Mapping[str, Any]) -> _Family:
    mt = d.get("model_type")
    fam = FAMILIES.get(mt)
    if fam is None:
        raise BlockcValueError(f"config.json: model_type {mt!r} is not one blockc runs "
                               f"({', '.join(sorted(FAMILIES))})")
    return fam


def config_from_hf(d: Any):
    """A GPTConfig from a transformers config (a dict, or a directory / config.json path)."""
    from .gpt import GPTConfig
    if isinstance(d, (str, os.PathLike)):
        d = read_config(d)
    if not isinstance(d, Mapping):
        raise BlockcTypeError(f"config must be a mapping or a path, got {type(d).__name__}")
    return GPTConfig(**family_of(d).config(d))


def config_to_hf(cfg) -> Dict[str, Any]:
    """The transformers config dict of a GPTConfig (the family its architecture is)."""
    last = None
    for fam in dict.fromkeys(FAMILIES.values()):
        try:
            return fam.to_hf(cfg)
        except BlockcValueError as e:
            last = e
    raise last


def _weight_files(path: str) -> List[str]:
    """The safetensors files of a directory (refusing pickles and empty directories)."""
    single = os.path.join(path, "model.safetensors")
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        try:
            with open(index, encoding="utf-8") as f:
                idx = json.load(f)
        except (UnicodeDecodeError, ValueError) as e:
            raise BlockcValueError(f"{index}: not valid JSON: {e}") from None
        wm = idx.get("weight_map") if isinstance(idx, dict) else None
        if not isinstance(wm, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                               for k, v in wm.items()):
            raise BlockcValueError(f"{index}: weight_map must map tensor names to file names")
        files = []
        for name, fn in wm.items():
            if os.path.basename(fn) != fn or fn in ("", ".", ".."):
                raise BlockcValueError(f"{index}: tensor {name!r} maps to {fn!r}, not a file of "
                                       "this directory")
            if fn not in files:
                files.append(fn)
        missing = [fn for fn in files if not os.path.exists(os.path.join(path, fn))]
        if missing:
            raise BlockcValueError(f"{index}: lists {missing[0]!r}, which is not in {path}")
        return [os.path.join(path, fn) for fn in files]
    if os.path.exists(single):
        return [single]
    pickles = [f for f in os.listdir(path) if f.endswith((".bin", ".pt", ".pth", ".ckpt"))]
    if pickles:
        raise BlockcValueError(
            f"{os.path.join(path, pickles[0])}: a pickle checkpoint; blockc never unpickles (a "
            "pickle can run any code when loaded). Convert it to safetensors once, where you trust "
            "it: transformers' AutoModelForCausalLM.from_pretrained(dir).save_pretrained(dir, "
            "safe_serialization=True)")
    raise BlockcValueError(f"{path}: no weights (no model.safetensors or "
                           "model.safetensors.index.json)")


def read_tensors(path: str) -> Dict[str, st.Tensor]:
    """Every tensor of a directory's safetensors files (a name in two files is refused)."""
    out: Dict[str, st.Tensor] = {}
    for fn in _weight_files(path):
        tensors, _ = st.read(fn)
        for name, t in tensors.items():
            if name in out:
                raise BlockcValueError(f"tensor {name!r} is in both {out[name].file} and {fn}")
            out[name] = t
    return out


def load_dir(path: str, dtype: Optional[str] = None):
    """A GPT from a checkpoint directory (see :meth:`blockc.GPT.from_pretrained`)."""
    from .gpt import GPT, GPTConfig, _layout as gpt_layout
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise BlockcValueError(f"{path}: not a directory (a checkpoint is a directory with "
                               "config.json and model.safetensors)")
    d = read_config(path)
    fam = family_of(d)
    cfg = GPTConfig(**fam.config(d))
    tensors = read_tensors(path)
    prefix = fam.prefix
    has_prefix = any(n.startswith(prefix) for n in tensors) if prefix else False
    spec = fam.names(cfg)
    if prefix and not has_prefix:
        spec = [(n[len(prefix):] if n.startswith(prefix) else n, b, t) for n, b, t in spec]
    wanted = {n for n, _, _ in spec}
    head = "lm_head.weight"
    tied_head = cfg.tie_weights and head in tensors
    missing = [n for n in wanted if n not in tensors]
    if missing:
        raise BlockcValueError(f"{path}: tensor {missing[0]!r} is missing"
                               + (f" ({len(missing)} missing)" if len(missing) > 1 else ""))
    extra = sorted(n for n in tensors if n not in wanted and not fam.ignore.match(n)
                   and not (tied_head and n == head))
    if extra:
        raise BlockcValueError(f"{tensors[extra[0]].file}: tensor {extra[0]!r} is not part of a "
                               f"{fam.model_types[0]} model of this config.json")
    layout = gpt_layout(cfg) if dtype is None else None
    if dtype is None:  # bfloat16 when every matrix blockc packs is (embeddings may be wider)
        mats = [tensors[n] for n, b, _ in spec if layout[b].packed]
        dtype = "bfloat16" if mats and all(t.dtype == "BF16" for t in mats) else "float32"
    m = GPT(cfg, dtype=dtype)
    layout = m._layout
    for name, ours, transposed in spec:
        t = tensors[name]
        want = layout[ours].shape
        shape = want[::-1] if transposed else want
        if t.shape != shape:
            raise BlockcValueError(f"{t.file}: tensor {name!r} has shape {t.shape}, expected "
                                   f"{shape} for this config.json")
        m._write(ours, _aligned(t.to_float32()), transposed=transposed)
    if tied_head:
        t = tensors[head]
        if t.shape != layout["token.weight"].shape or not np.array_equal(
                t.to_float32().view(np.uint32),
                tensors[[n for n, b, _ in spec if b == "token.weight"][0]].to_float32().view(np.uint32)):
            raise BlockcValueError(f"{t.file}: tensor {head!r} differs from the token embedding, "
                                   "but config.json ties them (tie_word_embeddings)")
    return m


def _aligned(a: np.ndarray) -> np.ndarray:
    """a, or an aligned copy when a file's offsets left it misaligned."""
    return a if a.flags.aligned else np.array(a)


def save_dir(m, path: str) -> None:
    """Write m as a transformers checkpoint directory (see :meth:`blockc.GPT.save_pretrained`)."""
    cfg = m.config
    d = config_to_hf(cfg)
    fam = family_of(d)
    os.makedirs(path, exist_ok=True)
    # a bfloat16 model's matrices as BF16 (its vectors stay float32, as it holds them);
    # a q8_0 model's dequantised weights as float32
    bf16 = m.dtype == "bfloat16"
    d["torch_dtype"] = "bfloat16" if bf16 else "float32"
    tensors, bf16_names = {}, []
    for name, ours, transposed in fam.names(cfg):
        a = m._read(ours)
        if transposed:
            a = np.ascontiguousarray(a.T)
        if bf16 and m._layout[ours].packed:  # exact: the matrices hold bfloat16 values
            a = (np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)
            bf16_names.append(name)
        tensors[name] = a
    st.write(os.path.join(path, "model.safetensors"), tensors, {"format": "pt"},
             bf16=tuple(bf16_names))
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(d, f, indent=2)
        f.write("\n")
