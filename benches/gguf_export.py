"""Write a blockc GPT-2 model as a GGUF file llama.cpp runs: the same weights.

For the benches only (blockc itself never needs GGUF). float32, float16 and
bfloat16 files hold the model's float32 weights converted; a q8_0 file holds
blockc's own q8_0 blocks (the same int8 values and half scales, moved from
blockc's panels into llama.cpp's row-major blocks), so both engines compute
with identical weights. The vocabulary is synthetic (one token per id and a
single merge): enough for llama.cpp to load a GPT-2 and run token ids.

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
KINDS = ("f32", "f16", "bf16", "q8_0")


def gguf_name(name: str) -> str:
    if name.startswith("blocks."):
        _, i, rest = name.split(".", 2)
        return f"blk.{i}.{_BLOCK[rest]}"
    return _TOP[name]


def q8_rows(m: "blockc.GPT", name: str) -> np.ndarray:
    """Tensor ``name`` of a q8_0 model as llama.cpp's block_q8_0 rows: (rows, blocks * 34)
    uint8, each block an IEEE half scale then 32 int8."""
    t = m._layout[name]
    rows, cols = t.shape
    nb = (cols + 31) // 32
    raw = m.params[t.offset:t.offset + t.nbytes].reshape(-1, nb, 544)  # panels of 16 rows
    d = raw[:, :, :32].copy().view(np.uint16)                            # (P, nb, 16)
    q = raw[:, :, 32:].reshape(-1, nb, 32, 16)                           # (P, nb, 32 k, 16 rows)
    out = np.empty((raw.shape[0] * 16, nb, 34), np.uint8)
    out[:, :, :2] = d.transpose(0, 2, 1).reshape(-1, nb).copy().view(np.uint8).reshape(-1, nb, 2)
    out[:, :, 2:] = q.transpose(0, 3, 1, 2).reshape(-1, nb, 32)
    return out[:rows].reshape(rows, nb * 34)


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
    w.add_tokenizer_model("gpt2")
    tokens = [f"<t{i}>".encode() for i in range(cfg.vocab - 3)] + [b"a", b"b", b"ab"]
    w.add_token_list(tokens)
    w.add_token_types([1] * cfg.vocab)
    w.add_token_merges(["a b"])
    sd = m.state_dict()
    for name, a in sd.items():
        t = m._layout[name]
        if not t.packed or kind == "f32":
            w.add_tensor(gguf_name(name), np.ascontiguousarray(a, np.float32))
        elif kind == "f16":
            w.add_tensor(gguf_name(name), a.astype(np.float16))
        elif kind == "bf16":
            bits = gguf.quants.quantize(a, gguf.GGMLQuantizationType.BF16)
            w.add_tensor(gguf_name(name), bits, raw_shape=bits.shape,
                         raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            rows = q8_rows(m, name)
            w.add_tensor(gguf_name(name), rows, raw_shape=rows.shape,
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
