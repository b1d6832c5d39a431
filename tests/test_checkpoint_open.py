"""blockc.checkpoint.open (issue 48): either kind of checkpoint read into one record, its
config, generation config, tensors by name, tokenizer and template, against the loaders'
own reading and the gguf package's."""
import os

import numpy as np
import pytest

import blockc
from blockc.checkpoint import Checkpoint, open as open_checkpoint

pytest.importorskip("tokenizers")
from chat_dirs import chat_model_dir  # noqa: E402


def test_a_directory_opens_as_the_loader_reads_it(tmp_path):
    m, tok = chat_model_dir(tmp_path)
    c = open_checkpoint(tmp_path)
    assert isinstance(c, Checkpoint) and c.kind == "directory"
    g = blockc.GPT.from_pretrained(tmp_path)
    assert c.config == g.config
    assert c.generation.eos_ids == g.generation_config.eos_ids
    assert c.chat_template is not None and "<|im_start|>" in c.chat_template
    assert list(c.tokenizer.encode("hello world")) == tok.encode("hello world").ids
    sd = m.state_dict()
    # the file's tensors by the file's names: the token embedding is the model's
    assert "transformer.wte.weight" in c.names()
    assert np.array_equal(c.tensor("transformer.wte.weight"), sd["token.weight"])
    with pytest.raises(ValueError, match="no tensor 'nope'"):
        c.tensor("nope")


def test_a_gguf_file_opens_with_its_dequantised_tensors(tmp_path):
    gguf = pytest.importorskip("gguf")
    import gguf_files
    path = tmp_path / "m.gguf"
    gguf_files.write_model(path, default_type="Q8_0")
    c = open_checkpoint(path)
    assert c.kind == "gguf"
    assert c.config == blockc.GPT.from_pretrained(path).config
    r = gguf.GGUFReader(str(path))
    t = next(t for t in r.tensors if t.name == "blk.0.ffn_down.weight")
    want = gguf.quants.dequantize(t.data, t.tensor_type).reshape(c.tensor(t.name).shape)
    assert np.array_equal(c.tensor(t.name), want)
    assert c.tokenizer is not None and c.tokenizer.vocab_size == c.config.vocab


def test_what_is_not_a_checkpoint_is_named(tmp_path):
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(ValueError, match="not a checkpoint directory or a GGUF file"):
        open_checkpoint(tmp_path / "x.txt")
    with pytest.raises(ValueError, match="config.json"):
        open_checkpoint(tmp_path)


def test_a_bfloat16_directorys_tensors_are_its_values_not_its_bits(tmp_path):
    m = blockc.GPT.random(blockc.GPTConfig(vocab=16, context=8, width=8, heads=2, layers=1),
                          seed=3).astype("bfloat16")
    m.save_pretrained(tmp_path)
    c = open_checkpoint(tmp_path)
    got = c.tensor("transformer.wte.weight")
    assert got.dtype == np.float32
    assert np.array_equal(got, m.state_dict()["token.weight"])
