"""Write a blockc model (GPT-2 or Llama architecture) as a GGUF file llama.cpp runs:
the same weights.

For the benches only (blockc itself never needs GGUF). float32, float16 and
bfloat16 files hold the model's float32 weights converted; a q8_0 file holds
blockc's own q8_0 blocks (the same int8 values and half scales, moved from
blockc's panels into llama.cpp's row-major blocks), so both engines compute
with identical weights. The vocabulary is synthetic (one token per id and a
single merge): enough for llama.cpp to load the model and run token ids.

llama.cpp's Llama rotates the pairs (2i, 2i+1) of a head, transformers' and
blockc's the pairs (i, i + Dh/2): the rows of the q and k projections are
reordered within each head (row i -> 2i, row i + Dh/2 -> 2i + 1), which makes
the two rotations the same function of the weights (what llama.cpp's own
converter does for Hugging Face checkpoints).

Needs the ``gguf`` package (``pip install gguf``).
"""
from __future__ import annotations

import numpy as np

import blockc

# blockc state-dict names -> llama.cpp's GPT-2 names
_TOP = {"token.weight": "token_embd.weight", "position.weight": "position_embd.weight",
        "norm.weight": "output_norm.weight", "norm.bias": "output_norm.bias",
        "head.weight": "output.weight"}
_BLOCK = {"ln1.weight": "attn_norm.weight", "ln1.bias": "attn_norm.bias",
          "attn.qkv.weight": "attn_qkv.weight", "attn.qkv.bias": "attn_qkv.bias",
          "attn.proj.weight": "attn_output.weight", "attn.proj.bias": "attn_output.bias",
          "ln2.weight": "ffn_norm.weight", "ln2.bias": "ffn_norm.bias",
          "up.weight": "ffn_up.weight", "up.bias": "ffn_up.bias",
          "down.weight": "ffn_down.weight", "down.bias": "ffn_down.bias"}
_LLAMA_BLOCK = {"ln1.weight": "attn_norm.weight", "attn.proj.weight": "attn_output.weight",
                "ln2.weight": "ffn_norm.weight", "gate.weight": "ffn_gate.weight",
                "up.weight": "ffn_up.weight", "down.weight": "ffn_down.weight"}
KINDS = ("f32", "f16", "bf16", "q8_0")


def gguf_name(name: str) -> str:
    if name.startswith("blocks."):
        _, i, rest = name.split(".", 2)
        return f"blk.{i}.{_BLOCK[rest]}"
    return _TOP[name]


def q8_rows(m: "blockc.GPT", name: str) -> np.ndarray:
    """Tensor ``name`` of a q8_0 model as llama.cpp's block_q8_0 rows: (rows, blocks * 34)
    uint8, each block an IEEE half scale then 32 int8."""
    t = m.layout[name]
    rows, cols = t.shape
    nb = (cols + 31) // 32
    raw = m.params[t.offset:t.offset + t.nbytes].reshape(-1, nb, 544)  # panels of 16 rows
    d = raw[:, :, :32].copy().view(np.uint16)                            # (P, nb, 16)
    q = raw[:, :, 32:].reshape(-1, nb, 32, 16)                           # (P, nb, 32 k, 16 rows)
    out = np.empty((raw.shape[0] * 16, nb, 34), np.uint8)
    out[:, :, :2] = d.transpose(0, 2, 1).reshape(-1, nb).copy().view(np.uint8).reshape(-1, nb, 2)
    out[:, :, 2:] = q.transpose(0, 3, 1, 2).reshape(-1, nb, 32)
    return out[:rows].reshape(rows, nb * 34)


def _add(w, gguf, name: str, a: np.ndarray, kind: str, packed: bool, q8=None) -> None:
    """Tensor ``a`` (float32; q8: its q8_0 rows) as ``kind`` (vectors stay float32)."""
    if not packed or kind == "f32":
        w.add_tensor(name, np.ascontiguousarray(a, np.float32))
    elif kind == "f16":
        w.add_tensor(name, a.astype(np.float16))
    elif kind == "bf16":
        bits = gguf.quants.quantize(np.ascontiguousarray(a, np.float32), gguf.GGMLQuantizationType.BF16)
        w.add_tensor(name, bits, raw_shape=bits.shape, raw_dtype=gguf.GGMLQuantizationType.BF16)
    else:
        w.add_tensor(name, q8, raw_shape=q8.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)


def _vocab(w, vocab: int) -> None:
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"<t{i}>".encode() for i in range(vocab - 3)] + [b"a", b"b", b"ab"])
    w.add_token_types([1] * vocab)
    w.add_token_merges(["a b"])


def pair_rows(n_heads: int, d_head: int) -> np.ndarray:
    """The row order taking a projection from rotate-half pairs to adjacent pairs."""
    half = d_head // 2
    per_head = np.stack([np.arange(half), np.arange(half) + half], axis=1).reshape(-1)
    return (np.arange(n_heads)[:, None] * d_head + per_head[None]).reshape(-1)


def write_llama(m: "blockc.GPT", path: str, kind: str) -> None:
    """Write ``m`` (a Llama-architecture blockc model: RMSNorm, SwiGLU, RoPE, no biases;
    q8_0 for kind "q8_0") as ``kind``."""
    import gguf

    cfg = m.config
    if (cfg.norm, cfg.activation, cfg.positions, cfg.qkv_bias, cfg.out_bias, cfg.mlp_bias) != (
            "rms", "swiglu", "rope", False, False, False):
        raise ValueError("write_llama takes a Llama-architecture model")
    if kind == "q8_0" and m.dtype != "q8_0":
        raise ValueError("a q8_0 file is written from a q8_0 model (its own blocks)")
    h, kv, dh = cfg.heads, cfg.kv_heads_, cfg.head_dim_
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(cfg.context)
    w.add_embedding_length(cfg.width)
    w.add_feed_forward_length(cfg.d_ff_)
    w.add_block_count(cfg.layers)
    w.add_head_count(h)
    w.add_head_count_kv(kv)
    w.add_key_length(dh)
    w.add_value_length(dh)
    w.add_rope_dimension_count(dh)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.eps)
    w.add_file_type({"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}[kind])
    _vocab(w, cfg.vocab)
    sd = m.state_dict()
    q8 = (lambda n: q8_rows(m, n)) if kind == "q8_0" else (lambda n: None)
    top = {"token.weight": "token_embd.weight", "norm.weight": "output_norm.weight",
           "head.weight": "output.weight"}
    for name, a in sd.items():
        packed = m.layout[name].packed
        if not name.startswith("blocks."):
            _add(w, gguf, top[name], a, kind, packed, q8(name) if packed else None)
            continue
        _, i, rest = name.split(".", 2)
        if rest == "attn.qkv.weight":  # split, and q, k paired as llama.cpp rotates them
            rows = q8(name)
            cuts = [(0, h * dh, h, "attn_q"), (h * dh, (h + kv) * dh, kv, "attn_k"),
                    ((h + kv) * dh, (h + 2 * kv) * dh, None, "attn_v")]
            for lo, hi, heads, part in cuts:
                order = lo + (pair_rows(heads, dh) if heads else np.arange(hi - lo))
                _add(w, gguf, f"blk.{i}.{part}.weight", a[order], kind, True,
                     None if rows is None else np.ascontiguousarray(rows[order]))
            continue
        _add(w, gguf, f"blk.{i}.{_LLAMA_BLOCK[rest]}", a, kind, packed,
             q8(name) if packed else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_gpt2(m: "blockc.GPT", path: str, kind: str) -> None:
    """Write ``m`` (a GPT-2-architecture blockc model; q8_0 for kind "q8_0") as ``kind``."""
    import gguf

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    if kind == "q8_0" and m.dtype != "q8_0":
        raise ValueError("a q8_0 file is written from a q8_0 model (its own blocks)")
    cfg = m.config
    w = gguf.GGUFWriter(path, "gpt2")
    w.add_context_length(cfg.context)
    w.add_embedding_length(cfg.width)
    w.add_feed_forward_length(cfg.d_ff_)
    w.add_block_count(cfg.layers)
    w.add_head_count(cfg.heads)
    w.add_layer_norm_eps(cfg.eps)
    w.add_file_type({"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}[kind])
    _vocab(w, cfg.vocab)
    sd = m.state_dict()
    for name, a in sd.items():
        packed = m.layout[name].packed
        _add(w, gguf, gguf_name(name), a, kind, packed,
             q8_rows(m, name) if packed and kind == "q8_0" else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
