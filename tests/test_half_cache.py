"""A float16 KV cache (GPT.new_cache(dtype="float16"), generate(cache_dtype=...)): the
NumPy oracle that rounds every key and value as the cache keeps them; the stored halves
against the float cache's values rounded by NumPy (round to nearest even, saturating);
the same bits however a sequence is split into calls, on every instruction set and
thread count; prefix copies; refusals naming the argument."""
import numpy as np
import pytest

import blockc
from blockc import GPT, GPTConfig
from blockc.generation import GenerationConfig
from blockc.reference.gpt import gpt_forward
from helpers import bits, in_calls

CONFIGS = {
    "gpt2": GPTConfig(vocab=50, context=160, width=32, heads=4, layers=2),
    "llama": GPTConfig(vocab=50, context=160, width=32, heads=4, layers=2, kv_heads=2,
                       norm="rms", activation="swiglu", positions="rope", d_ff=48,
                       qkv_bias=False, out_bias=False, mlp_bias=False, tie_weights=False),
    # head sizes of whole vectors on every instruction set (16: one AVX-512 vector, 64:
    # four): decoding reads the halves in place there, and widens them for the sizes above
    "dh16": GPTConfig(vocab=50, context=160, width=64, heads=4, layers=2, kv_heads=2,
                      norm="rms", activation="swiglu", positions="rope", d_ff=96,
                      qkv_bias=False, out_bias=False, mlp_bias=False),
    "dh64": GPTConfig(vocab=50, context=160, width=128, heads=2, layers=2, d_ff=256),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_half_cache_is_the_oracle_that_rounds_keys_and_values(name):
    cfg = CONFIGS[name]
    m = GPT.random(cfg, seed=5)
    ids = np.random.default_rng(2).integers(0, 50, size=(1, 150))
    got = in_calls(m, ids, [70] + [1] * 80, m.new_cache(1, 150, dtype="float16"))
    sd = m.state_dict()
    rounded = gpt_forward(sd, cfg, ids, kv_dtype=np.float16)
    exact = gpt_forward(sd, cfg, ids)
    # the oracle rounds float64 keys, blockc float32 ones: a key within float32 noise of a
    # half's rounding midpoint may round the other way (a few in 10^4), hence the max's margin
    assert np.abs(got - rounded).max() < 1e-5
    # the rounding is what moved the logits: without it they would sit near `exact`
    near, far = np.abs(got - rounded).mean(), np.abs(got - exact).mean()
    assert far > 10 * near, (near, far)
    # and a float cache keeps the exact ones
    f32 = in_calls(m, ids, [70] + [1] * 80, m.new_cache(1, 150))
    assert np.abs(f32 - exact).max() < 2e-5


def test_the_cache_keeps_each_value_rounded_to_nearest_even_saturating():
    cfg = CONFIGS["gpt2"]
    m = GPT.random(cfg, seed=1)
    w, b = m.read_tensor("blocks.0.attn.qkv.weight"), m.read_tensor("blocks.0.attn.qkv.bias")
    d = cfg.width
    special = np.array([1e5, -1e5, 65519.0, 65520.0, -65520.0, 3e-6, -1e-8, 2.0 ** -24,
                        1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 0.1, -7.25], np.float32)
    w, b = w.copy(), b.copy()
    for part in (1, 2):  # keys, values: their first columns are the bias alone
        cols = slice(part * d, part * d + len(special))
        w[cols] = 0.0
        b[cols] = special
    m.write_tensor("blocks.0.attn.qkv.weight", w)
    m.write_tensor("blocks.0.attn.qkv.bias", b)
    ids = np.random.default_rng(0).integers(0, 50, size=(2, 70))
    c32, c16 = m.new_cache(2, 70), m.new_cache(2, 70, dtype="float16")
    m(ids, cache=c32)
    logits = m(ids, cache=c16)
    assert np.isfinite(logits).all()  # 65520 and 1e5 would be infinite halves, unsaturated
    assert c16.k.dtype == np.float32 and c16.dtype == "float16"
    for got, full in ((c16.k[0], c32.k[0]), (c16.v[0], c32.v[0])):  # layer 0: the same inputs
        top = np.float32(65504.0)
        want = np.clip(full, -top, top).astype(np.float16).astype(np.float32)
        assert np.array_equal(bits(got), bits(want))
    stored = c16.k[0, 0, 0, :len(special)]
    assert stored[0] == 65504 and stored[1] == -65504 and stored[3] == 65504
    assert stored[6] == 0 and stored[7] == 2.0 ** -24  # -1e-8 rounds to (negative) zero
    assert stored[8] == 1.0 and stored[9] == 1.0 + 4 * 2.0 ** -11  # ties to even


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_same_bits_however_the_tokens_are_split(name, isa):
    m = GPT.random(CONFIGS[name], seed=2, dtype="q8_0" if name == "llama" else "float32")
    ids = np.random.default_rng(3).integers(0, 50, size=(1, 140))
    whole = in_calls(m, ids, [140], m.new_cache(1, 140, dtype="float16"))
    for sizes in ([1] * 140, [63, 1, 1, 64, 11], [64, 64, 12], [3, 125, 12]):
        got = in_calls(m, ids, sizes, m.new_cache(1, 140, dtype="float16"))
        assert np.array_equal(bits(got), bits(whole)), sizes


def test_the_same_bits_on_any_thread_count():
    m = GPT.random(CONFIGS["llama"], seed=4)
    ids = np.random.default_rng(4).integers(0, 50, size=(3, 100))
    before = blockc.get_num_threads()
    try:
        outs = []
        for n in (1, 2, 3):
            blockc.set_num_threads(n)
            c = m.new_cache(3, 110, dtype="float16")
            outs.append(np.concatenate([m(ids[:, :90], cache=c)]
                                       + [m(ids[:, t:t + 1], cache=c) for t in range(90, 100)],
                                       axis=1))
    finally:
        blockc.set_num_threads(before)
    for o in outs[1:]:
        assert np.array_equal(bits(o), bits(outs[0]))


def test_ragged_rows_generate_their_solo_tokens():
    m = GPT.random(CONFIGS["llama"], seed=6)
    rng = np.random.default_rng(6)
    prompts = [rng.integers(0, 50, size=n) for n in (7, 70, 2)]
    together = m.generate(prompts, 20, cache_dtype="float16")
    for p, row in zip(prompts, together):
        alone = m.generate(p[None], 20, cache_dtype="float16")[0]
        assert np.array_equal(row, alone)
    # the option rides a generation config too
    g = GenerationConfig(cache_dtype="float16")
    assert np.array_equal(m.generate(prompts[1][None], 20, generation_config=g)[0], together[1])


def test_a_copied_prefix_continues_with_the_bits_of_the_whole():
    m = GPT.random(CONFIGS["gpt2"], seed=3)
    ids = np.random.default_rng(0).integers(0, 50, size=(1, 140))
    want = m(ids, cache=m.new_cache(1, 140, dtype="float16"), last_only=True)[:, -1]
    c = m.new_cache(3, 150, dtype="float16")
    m(ids[:, :130], cache=c.view(0, 1))
    for n in (0, 1, 63, 64, 65, 127, 130):
        c.copy_prefix(2, 0, n)
        got = m(ids[:, n:], cache=c.view(2, 3), last_only=True)[:, -1]
        assert np.array_equal(bits(got), bits(want)), n
    c.truncate(0, 70)
    got = m(ids[:, 70:], cache=c.view(0, 1), last_only=True)[:, -1]
    assert np.array_equal(bits(got), bits(want))


def test_a_half_cache_takes_half_the_memory():
    m = GPT.random(CONFIGS["llama"], seed=0)
    c32, c16 = m.new_cache(2, 100), m.new_cache(2, 100, dtype="float16")
    assert c16.k.shape == c32.k.shape == (2, 2, 100, 2 * 8)
    # (batch, layers, K/V heads, 128 rows: whole tiles of 64, head size) x2 for k and v
    assert c32.nbytes == 2 * 2 * 2 * 2 * 128 * 8 * 4 == 2 * c16.nbytes
    assert repr(c16) == "KVCache(batch=2, capacity=100, length=0, dtype='float16')"


def test_refusals_name_the_argument():
    m = GPT.random(CONFIGS["gpt2"], seed=0)
    with pytest.raises(ValueError, match="dtype"):
        m.new_cache(1, 8, dtype="bfloat16")
    with pytest.raises(TypeError, match="dtype"):
        m.new_cache(1, 8, dtype=np.float16)
    with pytest.raises(ValueError, match="cache_dtype"):
        GenerationConfig(cache_dtype="int8")
    with pytest.raises(ValueError, match="cache_dtype"):
        m.generate(np.array([[1, 2]]), 2, cache_dtype="float64")
    from blockc.cli import main
    with pytest.raises(SystemExit):
        main(["generate", "--model", "x", "--cache-dtype", "bfloat16", "--prompt", "a"])
