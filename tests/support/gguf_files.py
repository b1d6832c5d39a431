"""GGUF files for the tests, written by the gguf package (llama.cpp's writer): random-weight
Llama / Qwen2 / GPT-2 models in llama.cpp's tensor names and conventions, with tokenizers
trained here on a few lines. Nothing is downloaded."""
from __future__ import annotations

import functools
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

import blockc.ops
from blockc.reference import ggml

TEXT = [
    "The quick brown fox jumps over the lazy dog. 1234567 + 89 = 1234656",
    "naïve café, déjà vu — Grüße aus Köln! Ελληνικά κείμενα, русский текст.",
    "日本語のテキストと中文文本。한국어 텍스트도 있어요. 🙂🚀🎉 emoji 👩‍👩‍👧",
    "    indented   code\n\tdef f(x):\n\t\treturn x ** 2  # square\n\n\n",
    "Hello world! hello WORLD? It's, we're, they've: I'm done. 3.14159 2718281828",
]


@functools.lru_cache(maxsize=None)
def bpe_vocab(kind: str, size: int = 400) -> Tuple[Tuple[str, ...], Tuple[str, ...], Tuple[int, ...], Tuple[float, ...]]:
    """(tokens, merges, token types, scores) of a tokenizer trained on TEXT: ``gpt2`` a
    byte-level BPE with <|endoftext|> (CONTROL) and <|user|> (USER_DEFINED); ``llama`` a
    SentencePiece-style vocabulary (<unk> <s> </s>, the 256 byte tokens, then ▁-pieces
    ranked by score, no merges)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    if kind == "gpt2":
        tk = Tokenizer(models.BPE())
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tr = trainers.BpeTrainer(vocab_size=size, special_tokens=["<|endoftext|>"],
                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                 show_progress=False)
        tk.train_from_iterator(TEXT * 3, tr)
        import json
        model = json.loads(tk.to_str())["model"]
        vocab = model["vocab"]
        tokens = [None] * len(vocab)
        for t, i in vocab.items():
            tokens[i] = t
        tokens.append("<|user|>")
        merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
        types = [3 if t == "<|endoftext|>" else 4 if t == "<|user|>" else 1 for t in tokens]
        return tuple(tokens), tuple(merges), tuple(types), tuple([0.0] * len(tokens))
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    tr = trainers.BpeTrainer(vocab_size=size, show_progress=False)
    tk.train_from_iterator(TEXT * 3, tr)
    learned = sorted(tk.get_vocab().items(), key=lambda kv: kv[1])
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    for t, _ in learned:
        if t not in tokens:
            tokens.append(t)
            types.append(1)
    tokens.append("<|im_start|>")
    types.append(4)
    scores = [0.0] * 259 + [-float(i) for i in range(len(tokens) - 259)]
    return tuple(tokens), (), tuple(types), tuple(scores)


def permute_qk(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's reordering of a Llama q/k projection (rows of each head: the
    halves interleaved), from transformers' order."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_weights(arch: str, vocab: int, width: int, layers: int, heads: int, kv_heads: int,
               d_ff: int, context: int, tied: bool, seed: int = 0) -> Dict[str, np.ndarray]:
    """Random weights in transformers' names and layouts (Linear (out, in); GPT-2's Conv1D
    (in, out))."""
    rng = np.random.default_rng(seed)
    hd = width // heads

    def r(*shape, s=0.08):
        return (rng.standard_normal(shape) * s).astype(np.float32)
    sd: Dict[str, np.ndarray] = {}
    if arch == "gpt2":
        sd["transformer.wte.weight"] = r(vocab, width, s=0.3)
        sd["transformer.wpe.weight"] = r(context, width, s=0.1)
        for i in range(layers):
            p = f"transformer.h.{i}."
            sd[p + "ln_1.weight"] = 1 + r(width, s=0.1)
            sd[p + "ln_1.bias"] = r(width, s=0.1)
            sd[p + "attn.c_attn.weight"] = r(width, 3 * width)
            sd[p + "attn.c_attn.bias"] = r(3 * width, s=0.1)
            sd[p + "attn.c_proj.weight"] = r(width, width)
            sd[p + "attn.c_proj.bias"] = r(width, s=0.1)
            sd[p + "ln_2.weight"] = 1 + r(width, s=0.1)
            sd[p + "ln_2.bias"] = r(width, s=0.1)
            sd[p + "mlp.c_fc.weight"] = r(width, d_ff)
            sd[p + "mlp.c_fc.bias"] = r(d_ff, s=0.1)
            sd[p + "mlp.c_proj.weight"] = r(d_ff, width)
            sd[p + "mlp.c_proj.bias"] = r(width, s=0.1)
        sd["transformer.ln_f.weight"] = 1 + r(width, s=0.1)
        sd["transformer.ln_f.bias"] = r(width, s=0.1)
        if not tied:
            sd["lm_head.weight"] = r(vocab, width, s=0.3)
        return sd
    sd["model.embed_tokens.weight"] = r(vocab, width, s=0.3)
    for i in range(layers):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = 1 + r(width, s=0.1)
        sd[p + "self_attn.q_proj.weight"] = r(heads * hd, width)
        sd[p + "self_attn.k_proj.weight"] = r(kv_heads * hd, width)
        sd[p + "self_attn.v_proj.weight"] = r(kv_heads * hd, width)
        if arch == "qwen2":
            sd[p + "self_attn.q_proj.bias"] = r(heads * hd, s=0.1)
            sd[p + "self_attn.k_proj.bias"] = r(kv_heads * hd, s=0.1)
            sd[p + "self_attn.v_proj.bias"] = r(kv_heads * hd, s=0.1)
        sd[p + "self_attn.o_proj.weight"] = r(width, heads * hd)
        sd[p + "post_attention_layernorm.weight"] = 1 + r(width, s=0.1)
        sd[p + "mlp.gate_proj.weight"] = r(d_ff, width)
        sd[p + "mlp.up_proj.weight"] = r(d_ff, width)
        sd[p + "mlp.down_proj.weight"] = r(width, d_ff)
    sd["model.norm.weight"] = 1 + r(width, s=0.1)
    if not tied:
        sd["lm_head.weight"] = r(vocab, width, s=0.3)
    return sd


def to_llamacpp(arch: str, sd: Dict[str, np.ndarray], heads: int, kv_heads: int) -> Dict[str, np.ndarray]:
    """transformers' tensors in llama.cpp's names and layouts (what its converter writes)."""
    out: Dict[str, np.ndarray] = {}
    for name, w in sd.items():
        n = name
        if arch == "gpt2":
            n = n.replace("transformer.", "")
            n = (n.replace("wte.", "token_embd.").replace("wpe.", "position_embd.")
                 .replace("ln_f.", "output_norm.").replace("lm_head.", "output."))
            for a, b in (("ln_1", "attn_norm"), ("attn.c_attn", "attn_qkv"),
                         ("attn.c_proj", "attn_output"), ("ln_2", "ffn_norm"),
                         ("mlp.c_fc", "ffn_up"), ("mlp.c_proj", "ffn_down")):
                n = n.replace(a, b)
            n = n.replace("h.", "blk.", 1) if n.startswith("h.") else n
            if w.ndim == 2 and n.startswith("blk."):
                w = np.ascontiguousarray(w.T)  # Conv1D (in, out) -> (out, in)
        else:
            n = (n.replace("model.embed_tokens.", "token_embd.").replace("model.norm.", "output_norm.")
                 .replace("lm_head.", "output.").replace("model.layers.", "blk."))
            for a, b in (("input_layernorm", "attn_norm"), ("self_attn.q_proj", "attn_q"),
                         ("self_attn.k_proj", "attn_k"), ("self_attn.v_proj", "attn_v"),
                         ("self_attn.o_proj", "attn_output"), ("post_attention_layernorm", "ffn_norm"),
                         ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"),
                         ("mlp.down_proj", "ffn_down")):
                n = n.replace(a, b)
            if arch == "llama" and ".attn_q." in n:
                w = permute_qk(w, heads)
            elif arch == "llama" and ".attn_k." in n:
                w = permute_qk(w, kv_heads)
        out[n] = w
    return out


def write_model(path, arch: str = "llama", *, width: int = 64, layers: int = 2, heads: int = 4,
                kv_heads: Optional[int] = None, d_ff: int = 96, context: int = 64,
                tied: bool = False, types: Optional[Dict[str, str]] = None,
                default_type: str = "F32", tokenizer: Optional[str] = None, seed: int = 0,
                extra: Optional[dict] = None, eps: float = 1e-5, theta: float = 10000.0,
                drop: Sequence[str] = ()) -> Dict[str, np.ndarray]:
    """A model GGUF as llama.cpp's converter writes it; returns transformers' state dict.

    types: llama.cpp tensor name (or a suffix like "ffn_down.weight") -> ggml type; the
    matrices default to default_type, vectors are F32."""
    import gguf
    kv_heads = heads if kv_heads is None else kv_heads
    tokenizer = tokenizer or ("gpt2" if arch in ("gpt2", "qwen2") else "llama")
    tokens, merges, ttypes, scores = bpe_vocab(tokenizer)
    vocab = len(tokens)
    sd = hf_weights(arch, vocab, width, layers, heads, kv_heads, d_ff, context, tied, seed)
    cpp = to_llamacpp(arch, sd, heads, kv_heads)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("blockc-test")
    w.add_context_length(context)
    w.add_embedding_length(width)
    w.add_block_count(layers)
    w.add_feed_forward_length(d_ff)
    w.add_head_count(heads)
    if arch == "gpt2":
        w.add_layer_norm_eps(eps)
    else:
        w.add_head_count_kv(kv_heads)
        w.add_layer_norm_rms_eps(eps)
        w.add_rope_freq_base(theta)
        w.add_rope_dimension_count(width // heads)
    w.add_file_type(1 if default_type == "F16" else 0)
    w.add_tokenizer_model(tokenizer)
    w.add_tokenizer_pre({"gpt2": "qwen2" if arch == "qwen2" else "gpt-2", "llama": "default"}[tokenizer])
    w.add_token_list(list(tokens))
    w.add_token_types(list(ttypes))
    if tokenizer == "llama":
        w.add_token_scores(list(scores))
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
    else:
        w.add_token_merges(list(merges))
        w.add_bos_token_id(tokens.index("<|endoftext|>"))
        w.add_eos_token_id(tokens.index("<|endoftext|>"))
        w.add_add_bos_token(False)
    w.add_chat_template("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}")
    for k, v in (extra or {}).items():
        if isinstance(v, bool):
            w.add_bool(k, v)
        elif isinstance(v, int):
            w.add_uint32(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        else:
            w.add_string(k, v)
    types = types or {}
    for name, a in cpp.items():
        if name in drop:
            continue
        t = "F32"
        if a.ndim == 2:
            t = default_type
            for key, v in types.items():
                if name == key or name.endswith(key):
                    t = v
        if t == "F32":
            w.add_tensor(name, a)
        elif t == "F16":
            w.add_tensor(name, a.astype(np.float16))
        else:  # (IQ4_NL, IQ4_XS, Q2_K, Q3_K: the oracle has no quantiser; blockc's C rule's)
            b = ggml.quantise(a, t) if t in ggml.QUANTISE else \
                blockc.ops.unpack_ggml(blockc.ops.pack(a, t.lower()))
            w.add_tensor(name, b, raw_shape=b.shape, raw_dtype=gguf.GGMLQuantizationType[t])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sd


def native(types):
    """The format blockc holds a matrix of these file types in (independently of
    blockc.checkpoint.gguf's table): the type's own format, Q4_0/Q5_0/Q8_0 parts as q8_0 (the
    same weights, exactly), a fused q/k/v of other mixed types each part in its own (a
    (q, k, v) tuple), anything else float32."""
    own = {"F32": "float32", "BF16": "bfloat16", "Q8_0": "q8_0", "Q4_0": "q4_0", "F16": "float16",
           "Q5_0": "q5_0", "Q4_K": "q4_k", "Q6_K": "q6_k", "Q4_1": "q4_1", "Q5_1": "q5_1",
           "Q5_K": "q5_k", "IQ4_NL": "iq4_nl", "IQ4_XS": "iq4_xs", "Q2_K": "q2_k",
           "Q3_K": "q3_k"}
    import blockc.ops
    have = set(blockc.ops.DTYPES)
    if len(set(types)) == 1 and own.get(types[0]) in have:
        return own[types[0]]
    if set(types) <= {"Q4_0", "Q5_0", "Q8_0"}:
        return "q8_0"
    if len(types) == 3 and all(own.get(t) in have for t in types):
        # q, k and v of types with no common format (Q4_K_M's Q6_K attn_v): each its own
        return tuple(own[t] for t in types)
    return "float32"


def assert_dequantised(m, path, arch: str) -> None:
    """Every tensor of blockc model ``m`` equals, bit for bit, the gguf package's
    dequantisation of the file at ``path``'s tensor (a Llama's q/k rows put back in
    transformers' order): the peer check of every GGUF load."""
    import gguf
    from gguf import quants
    from blockc.checkpoint import gguf as gm
    peer = gguf.GGUFReader(str(path))
    deq = {t.name: np.asarray(quants.dequantize(t.data, t.tensor_type), np.float32)
           for t in peer.tensors}
    for theirs, ours, rows, heads in gm.names(arch, m.config):
        w = deq[theirs]
        if heads is not None:
            w = gm.unpermute(w, heads)
        got = m.read_tensor(ours)
        if rows is not None:
            got = got[rows[0]:rows[1]]
        assert np.array_equal(got.view(np.uint32), w.reshape(got.shape).view(np.uint32)), theirs
