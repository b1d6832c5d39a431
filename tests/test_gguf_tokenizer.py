"""Tokenizer.from_pretrained("model.gguf"): the tokenizer built from a GGUF file's metadata
encodes as transformers' GGUF tokenizer does on the same file (the peer), for both models a
file states (gpt2 byte-level BPE, llama SentencePiece BPE), on mixed scripts, emoji,
whitespace runs, digits and special tokens in the text."""
import numpy as np
import pytest

from blockc import BlockcValueError, Tokenizer
from blockc import gguf as bg
from support.gguf_files import TEXT, write_model

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

HARD = TEXT + ["  leading spaces", "trailing   ", "\n\n\nnewlines\r\n", "<s>special</s> inside",
               "<|endoftext|> and <|user|>x<|im_start|>y", "", " ", "12345678901234",
               "a\u00a0b\u3000c", "🙂" * 3, "x  y   z    w", "<unk>", "ÿ\x00\x7f\u200b"]


@pytest.fixture(scope="module", params=["llama", "gpt2", "qwen2"])
def model_file(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(request.param)
    write_model(d / "m.gguf", request.param)
    return d, "m.gguf", request.param


@pytest.mark.slow
def test_encodes_as_transformers_gguf_tokenizer(model_file):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    d, name, arch = model_file
    ours = Tokenizer.from_pretrained(d / name)
    peer = transformers.AutoTokenizer.from_pretrained(str(d), gguf_file=name)
    if arch == "llama":
        # transformers' GGUF loader gives a Llama file Metaspace (one ▁ before the whole
        # text); llama.cpp prefixes each piece of text between special tokens, as Llama 2's
        # tokenizer.json does (Prepend then Replace: "  hi" is "▁▁▁hi"): the peer is that
        from tokenizers import normalizers
        peer.backend_tokenizer.normalizer = normalizers.Sequence(
            [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        peer.backend_tokenizer.pre_tokenizer = None
    for text in HARD:
        for special in (False, True):
            got = ours.encode(text, add_special_tokens=special).tolist()
            assert got == peer.encode(text, add_special_tokens=special), (arch, text, special)
        ids = ours.encode(text, add_special_tokens=False)
        assert ours.decode(ids) == peer.decode(ids.tolist()), (arch, text)
    assert ours.vocab_size == len(peer.get_vocab())


def test_special_ids_flags_and_template(model_file):
    d, name, arch = model_file
    tok = Tokenizer.from_pretrained(d / name)
    f = bg.read(d / name)
    tokens = f.get("tokenizer.ggml.tokens")
    if arch == "llama":
        assert (tok.bos_token_id, tok.eos_token_id) == (1, 2) and tok.add_bos_token
        assert tok.encode("hi", add_special_tokens=True)[0] == 1
        assert tokens[tok.encode("a<0x0A>")[-1]] != "<0x0A>"  # byte tokens are not text
        assert tok.encode("\x01").tolist() == [tokens.index("▁"), 3 + 1] or \
            tokens[tok.encode("\x01")[-1]] == "<0x01>"  # an unseen byte falls back to its token
    else:
        e = tokens.index("<|endoftext|>")
        assert tok.eos_token_id == e and not tok.add_bos_token
        assert tok.encode("a<|endoftext|>b").tolist().count(e) == 1  # special: matched whole
        assert tokens.index("<|user|>") in tok.encode("x<|user|>y").tolist()
    try:
        import jinja2  # noqa: F401
    except ImportError:
        return
    assert tok.chat_template is not None
    assert tok.chat_template.source == f.get("tokenizer.chat_template")


def test_round_trip_text(model_file):
    d, name, arch = model_file
    tok = Tokenizer.from_pretrained(d / name)
    for text in TEXT:
        if arch == "llama" and text[0] == " ":  # SentencePiece's decoder strips one leading space
            continue
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_refuses_files_without_a_tokenizer_it_builds(tmp_path):
    p = tmp_path / "x.gguf"
    bg.write(p, {"general.architecture": "llama"}, [])
    with pytest.raises(BlockcValueError, match="no tokenizer"):
        Tokenizer.from_pretrained(p)
    bg.write(p, {"tokenizer.ggml.model": "t5", "tokenizer.ggml.tokens": ["a"]}, [])
    with pytest.raises(BlockcValueError, match="'t5'"):
        Tokenizer.from_pretrained(p)
    bg.write(p, {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b"],
                 "tokenizer.ggml.merges": ["a b c"]}, [])
    with pytest.raises(BlockcValueError, match="merges'\\]\\[0\\]|merges.*\\[0\\]"):
        Tokenizer.from_pretrained(p)
    bg.write(p, {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b"],
                 "tokenizer.ggml.merges": ["a b"]}, [])
    with pytest.raises(BlockcValueError, match="lacks 'ab'"):  # (tokenizers would abort)
        Tokenizer.from_pretrained(p)
    bg.write(p, {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "ab"],
                 "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.eos_token_id": 9}, [])
    with pytest.raises(BlockcValueError, match="eos_token_id"):
        Tokenizer.from_pretrained(p)
    bg.write(p, {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a", "b"]}, [])
    with pytest.raises(BlockcValueError, match="scores"):
        Tokenizer.from_pretrained(p)
