"""The tokenizers of the new families (issue 50), from both their tokenizer.json and the
GGUF metadata llama.cpp's converter writes for them, encode as the Hugging Face tokenizer
built from tokenizer.json does (the peer: the ``tokenizers`` library itself):

- Llama 3: byte-level BPE split by Llama 3's pattern (GGUF ``tokenizer.ggml.model`` "gpt2",
  ``pre`` "llama-bpe");
- Qwen2/3: byte-level BPE split by Qwen2's pattern (digits one by one) after NFC
  (``pre`` "qwen2");
- Gemma: SentencePiece-style BPE with byte fallback, spaces as ▁ with no prefix space
  (``model`` "llama", ``add_space_prefix`` false, as the converter writes for Gemma), its
  merges in the order of its tokens.

Each tokenizer is trained here on a few lines (nothing downloaded); the GGUF metadata is
written with the gguf package's writer, llama.cpp's converter's keys."""
import json

import pytest

from blockc import Tokenizer
from blockc.text.gguf import PRE_TOKENIZER_SPLITS

tokenizers = pytest.importorskip("tokenizers")
gguf = pytest.importorskip("gguf")

LINES = ["The quick brown fox jumps over the lazy dog 1234567 times.",
         "naïve café, Ünïcödé: 日本語のテキスト and emoji 🙂🚀",
         "def f(x):\n    return x  *  2\n\n\tindented\r\n",
         "Numbers: 3.14159, 2718281828, 1,000,000 and 007.",
         "she's, they're, we've, I'm, you'll, he'd — it's done."] * 4

STRINGS = ["Hello world", "  two leading spaces", "trailing   ", "\n\nnewlines\n\r\n",
           "digits 1234567890 and 12 3", "naïve café Ünïcödé", "e\u0301 decomposed",
           "日本語 テキスト", "🙂🚀 emoji", "x  y   z    w", "tab\tand\u00a0nbsp", "",
           "it's they'RE", "ÿ\x00\x7f\u200b", "The quick brown fox"]


def _bytelevel(pattern, specials, nfc=False):
    from tokenizers import Regex, Tokenizer as HF, decoders, models, normalizers, pre_tokenizers, trainers
    tk = HF(models.BPE())
    if nfc:
        tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=600, special_tokens=specials, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(LINES, tr)
    return tk


def _gemma():
    from tokenizers import AddedToken, Tokenizer as HF, decoders, models, normalizers, pre_tokenizers, trainers
    tk = HF(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tk.normalizer = normalizers.Replace(" ", "▁")
    tk.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                    decoders.Fuse()])
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    alphabet = sorted({c for line in LINES for c in line.replace(" ", "▁")})
    tr = trainers.BpeTrainer(vocab_size=700, special_tokens=specials + [
        f"<0x{b:02X}>" for b in range(256)], initial_alphabet=alphabet, show_progress=False)
    tk.train_from_iterator(LINES, tr)
    tk.add_special_tokens([AddedToken("<start_of_turn>", normalized=False, special=True)])
    return tk


def _vocab(tk):
    v = tk.get_vocab(with_added_tokens=True)
    tokens = [None] * len(v)
    for t, i in v.items():
        tokens[i] = t
    return tokens


def _write(path, arch, tk, model, pre=None, gemma=False):
    """The tokenizer metadata llama.cpp's converter writes for ``tk`` (gguf-py's keys)."""
    tokens = _vocab(tk)
    special = {a.content for a in tk.get_added_tokens_decoder().values() if a.special}
    w = gguf.GGUFWriter(str(path), arch)
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    if model == "gpt2":
        merges = json.loads(tk.to_str())["model"]["merges"]
        w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
        w.add_token_types([3 if t in special else 1 for t in tokens])
    else:  # a SentencePiece vocabulary: scores (the pieces' order), types, no merges
        w.add_token_scores([0.0 if t in special or t.startswith("<0x") else -float(i)
                            for i, t in enumerate(tokens)])
        w.add_token_types([2 if t == "<unk>" else 3 if t in special else 6 if len(t) == 6
                           and t.startswith("<0x") else 1 for t in tokens])
        w.add_bos_token_id(tokens.index("<bos>"))
        w.add_eos_token_id(tokens.index("<eos>"))
        w.add_unk_token_id(tokens.index("<unk>"))
        w.add_pad_token_id(tokens.index("<pad>"))
        w.add_add_bos_token(False)
    if gemma:
        w.add_add_space_prefix(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


FAMILIES = {
    "llama3": ("llama", "gpt2", "llama-bpe", PRE_TOKENIZER_SPLITS["llama-bpe"], False),
    "qwen2": ("qwen2", "gpt2", "qwen2", PRE_TOKENIZER_SPLITS["qwen2"], True),
    "qwen3": ("qwen3", "gpt2", "qwen2", PRE_TOKENIZER_SPLITS["qwen2"], True),
    "gemma": ("gemma2", "llama", None, None, False),
    "gemma3": ("gemma3", "llama", None, None, False),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    name = request.param
    arch, model, pre, pattern, nfc = FAMILIES[name]
    d = tmp_path_factory.mktemp(name)
    if model == "gpt2":
        specials = ["<|begin_of_text|>", "<|eot_id|>"] if name == "llama3" else [
            "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        tk = _bytelevel(pattern, specials, nfc)
    else:
        tk = _gemma()
    tk.save(str(d / "tokenizer.json"))
    _write(d / "m.gguf", arch, tk, model, pre, gemma=model == "llama")
    return name, tk, d


def test_tokenizer_json_and_gguf_metadata_encode_as_the_hf_tokenizer(family):
    name, peer, d = family
    from_json = Tokenizer.from_pretrained(d)
    from_gguf = Tokenizer.from_pretrained(d / "m.gguf")
    specials = [a.content for a in peer.get_added_tokens_decoder().values() if a.special]
    for text in STRINGS + [f"a{specials[-1]}b {specials[0]}"]:
        want = peer.encode(text, add_special_tokens=False).ids
        assert from_json.encode(text, add_special_tokens=False).tolist() == want, (name, text)
        assert from_gguf.encode(text, add_special_tokens=False).tolist() == want, (name, text)
        assert from_gguf.decode(want) == peer.decode(want, skip_special_tokens=False), (name, text)
    assert from_gguf.vocab_size == peer.get_vocab_size(with_added_tokens=True)
