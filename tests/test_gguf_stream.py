"""save_streaming: a GGUF file written tensor by tensor (the 8B shapes of benches/bench_sizes.py)
has the very bytes save_gguf writes for the same weights, and the gguf package reads it."""
import os

import numpy as np
import pytest

from blockc import GPT, GPTConfig
from blockc.checkpoint import gguf as gm

gguf = pytest.importorskip("gguf")


def _llama(tied: bool) -> GPTConfig:
    # width 256: whole K-blocks, so Q4_K_M's Q4_K/Q6_K mix is written (not the fallbacks)
    return GPTConfig(vocab=300, context=64, width=256, heads=4, kv_heads=2, layers=3, d_ff=512,
                     eps=1e-5, tie_weights=tied, norm="rms", activation="swiglu",
                     positions="rope", rope_theta=500000.0, qkv_bias=False, out_bias=False,
                     mlp_bias=False)


@pytest.mark.parametrize("dtype,tied", [("F32", True), ("Q8_0", False), ("Q4_0", True),
                                        ("Q4_K_M", True), ("Q4_K_M", False)])
def test_streamed_file_is_save_gguf_bytes(tmp_path, dtype, tied):
    cfg = _llama(tied)
    m = GPT.random(cfg, seed=3)
    a, b = os.path.join(tmp_path, "a.gguf"), os.path.join(tmp_path, "b.gguf")
    m.save_gguf(a, dtype)
    asked = []

    def weight(name):
        asked.append(name)
        return m.read_tensor(name)
    gm.save_streaming(b, cfg, dtype, weight)
    assert open(a, "rb").read() == open(b, "rb").read()
    # each tensor asked for once (a fused q/k/v matrix kept for its three parts, not re-made)
    assert sorted(asked) == sorted(set(asked)) == sorted(m.layout)
    r = gguf.GGUFReader(b)
    emb = next(t for t in r.tensors if t.name == "token_embd.weight")
    assert emb.tensor_type.name == {"F32": "F32", "Q8_0": "Q8_0", "Q4_0": "Q4_0",
                                    "Q4_K_M": "Q6_K" if tied else "Q4_K"}[dtype]
    if dtype == "F32":  # the gguf package reads the weights given
        want = m.read_tensor("token.weight")
        np.testing.assert_array_equal(np.asarray(emb.data).reshape(want.shape), want)


def test_streamed_writes_no_file_on_a_bad_dtype(tmp_path):
    p = os.path.join(tmp_path, "x.gguf")
    with pytest.raises(ValueError, match="dtype"):
        gm.save_streaming(p, _llama(True), "Q9_9", lambda n: None)
    assert not os.path.exists(p)


def test_streamed_refuses_a_wrong_size_and_leaves_no_file(tmp_path):
    p = os.path.join(tmp_path, "x.gguf")
    cfg = _llama(True)
    m = GPT.random(cfg, seed=0)
    with pytest.raises(ValueError):
        gm.save_streaming(p, cfg, "F32", lambda n: m.read_tensor(n)[:1])
    assert not os.path.exists(p)
    assert os.listdir(tmp_path) == []
