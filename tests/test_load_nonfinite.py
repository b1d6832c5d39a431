"""A checkpoint whose weights hold NaN or infinity is refused at load, naming the file,
the tensor and an element (issue 49, class 7): such a model computes no number, and would
otherwise fail only at some request's token, far from the cause."""
import numpy as np
import pytest

import blockc

TINY = blockc.GPTConfig(vocab=40, context=16, width=16, heads=2, layers=1)


def _poisoned(bad, name="blocks.0.attn.qkv.weight", at=(3, 5)):
    m = blockc.GPT.random(TINY, seed=0)
    sd = m.state_dict()
    sd[name] = sd[name].copy()
    sd[name][at] = bad
    m.load_state_dict(sd)
    return m


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_directory_whose_weights_are_not_finite_is_refused(tmp_path, bad):
    _poisoned(bad).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor .* holds .* not finite"):
        blockc.GPT.from_pretrained(tmp_path)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_gguf_file_whose_float_weights_are_not_finite_is_refused(tmp_path, bad):
    pytest.importorskip("gguf")
    path = tmp_path / "m.gguf"
    _poisoned(bad).save_gguf(path)
    with pytest.raises(ValueError, match="not finite"):
        blockc.GPT.from_pretrained(path)


def test_finite_weights_load_as_before(tmp_path):
    m = blockc.GPT.random(TINY, seed=0)
    m.save_pretrained(tmp_path)
    m2 = blockc.GPT.from_pretrained(tmp_path)
    ids = np.array([[1, 2, 3]])
    np.testing.assert_array_equal(m(ids), m2(ids))
