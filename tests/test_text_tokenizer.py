"""blockc.Tokenizer's failures and special tokens (issue 19): a tokenizer.json that makes
the tokenizers package panic is a BlockcValueError naming the file (one line on the command
line), ids out of range and non-UTF-8 text are refused by name, a failed TextStream.push
leaves the stream working, and special tokens are added as transformers adds them."""
import base64
import json

import numpy as np
import pytest

import blockc
from blockc._errors import BlockcValueError


def _bpe_json():
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.train_from_iterator(["hello world, the block"] * 20, tokenizers.trainers.BpeTrainer(
        vocab_size=280, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()))
    return json.loads(tok.to_str())


def test_a_tokenizer_that_panics_is_a_value_error_naming_the_file(tmp_path):
    d = _bpe_json()
    d["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": "AAAA"}  # panics on load
    (tmp_path / "tokenizer.json").write_text(json.dumps(d))
    with pytest.raises(BlockcValueError, match="tokenizer.json.*panicked"):
        blockc.Tokenizer.from_pretrained(tmp_path)
    # one that loads and panics when it encodes
    bad = base64.b64encode(b"\x10\x00\x00\x00" + b"\x01" * 20).decode()
    d["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": bad}
    (tmp_path / "tokenizer.json").write_text(json.dumps(d))
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    with pytest.raises(BlockcValueError, match="encode: the tokenizers package panicked"):
        tok.encode("hello")


def test_the_command_line_reports_a_tokenizer_panic_in_one_line(tmp_path, capsys):
    from blockc.cli import main
    d = _bpe_json()
    bad = base64.b64encode(b"\x10\x00\x00\x00" + b"\x01" * 20).decode()
    d["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": bad}
    (tmp_path / "tokenizer.json").write_text(json.dumps(d))
    blockc.GPT.random(blockc.GPTConfig(vocab=280, context=16, width=16, heads=2,
                                       layers=1)).save_pretrained(tmp_path)
    assert main(["generate", "--temperature", "0", "--model", str(tmp_path), "--prompt", "hello"]) == 2
    err = capsys.readouterr().err
    assert "panicked" in err and err.count("\n") == 1


def test_decode_of_ids_out_of_range_and_a_failed_push_that_leaves_the_stream_working(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps(_bpe_json()))
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    for bad in (-1, 2 ** 32, 2 ** 63 - 1):
        with pytest.raises(BlockcValueError, match=r"ids must lie in \[0, 2\*\*32\)"):
            tok.decode([1, bad])
    ids = tok.encode("hello world")
    s = blockc.TextStream(tok)
    first = s.push(int(ids[0]))
    for bad in (-1, 2 ** 32):
        with pytest.raises(BlockcValueError, match="token must lie"):
            s.push(bad)
    rest = [s.push(int(i)) for i in ids[1:]] + [s.flush()]
    assert first + "".join(rest) == "hello world"


def test_wordpiece_without_unk_and_non_utf8_text_are_named(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    wp = tokenizers.Tokenizer(tokenizers.models.WordPiece({"a": 0, "b": 1}, unk_token="[UNK]"))
    wp.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    wp.save(str(tmp_path / "tokenizer.json"))
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    assert list(tok.encode("a b")) == [0, 1]
    with pytest.raises(BlockcValueError, match="encode: the tokenizers package failed.*UNK"):
        tok.encode("zzz")
    # a command line's non-UTF-8 bytes arrive as lone surrogates (surrogateescape)
    with pytest.raises(BlockcValueError, match="not valid Unicode at character 2"):
        tok.encode("a " + b"\xff".decode("utf-8", "surrogateescape"))


def test_encode_adds_the_special_tokens_as_transformers_does(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    d = _bpe_json()
    t = tokenizers.Tokenizer.from_str(json.dumps(d))
    t.add_special_tokens(["<s>"])
    bos = t.token_to_id("<s>")
    t.post_processor = tokenizers.processors.TemplateProcessing(single="<s> $A",
                                                                special_tokens=[("<s>", bos)])
    t.save(str(tmp_path / "tokenizer.json"))
    tok = blockc.Tokenizer.from_pretrained(tmp_path)
    assert tok.encode("hello")[0] == bos
    assert tok.encode("hello", add_special_tokens=False)[0] != bos
    transformers = pytest.importorskip("transformers")
    ht = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    assert list(tok.encode("hello world")) == ht("hello world")["input_ids"]


def test_generate_prompt_adds_bos_as_transformers_does(tmp_path, capsys):
    from blockc.cli import main
    tokenizers = pytest.importorskip("tokenizers")
    t = tokenizers.Tokenizer.from_str(json.dumps(_bpe_json()))
    t.add_special_tokens(["<s>"])
    bos = t.token_to_id("<s>")
    t.post_processor = tokenizers.processors.TemplateProcessing(single="<s> $A",
                                                                special_tokens=[("<s>", bos)])
    d = tmp_path / "ck"
    d.mkdir()
    t.save(str(d / "tokenizer.json"))
    m = blockc.GPT.random(blockc.GPTConfig(vocab=t.get_vocab_size(), context=32, width=16,
                                           heads=2, layers=1), seed=4)
    m.save_pretrained(d)
    tok = blockc.Tokenizer.from_pretrained(d)
    for flag, ids in (([], [bos] + t.encode("hello", add_special_tokens=False).ids),
                      (["--no-special-tokens"], t.encode("hello", add_special_tokens=False).ids)):
        want = tok.decode(m.generate(np.array([ids]), 6)[0][len(ids):])
        assert main(["generate", "--temperature", "0", "--model", str(d), "--prompt", "hello", "--max-new-tokens", "6",
                     "--no-eos", "--no-echo"] + flag) == 0
        assert capsys.readouterr().out == want + "\n"
