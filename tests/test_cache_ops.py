"""KVCache.truncate, copy_prefix and view (the operations prefix reuse and a batching
server need): a copied or truncated sequence continues with the bits it gets computed
whole; a view runs those sequences alone; misuse refused with the cache unchanged."""
import numpy as np
import pytest

import blockc
from blockc import GPT, GPTConfig
from helpers import bits

CONFIGS = {
    "gpt2": GPTConfig(vocab=50, context=160, width=32, heads=4, layers=2),
    "llama": GPTConfig(vocab=50, context=160, width=32, heads=4, layers=2, kv_heads=2,
                       norm="rms", activation="swiglu", positions="rope", d_ff=48,
                       qkv_bias=False, out_bias=False, mlp_bias=False, tie_weights=False),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("dtype", ["float32", "q8_0"])
def test_a_copied_prefix_continues_with_the_bits_of_the_whole(name, dtype):
    m = GPT.random(CONFIGS[name], seed=3, dtype=dtype)
    ids = np.random.default_rng(0).integers(0, 50, size=(1, 140))
    want = m(ids, last_only=True)[:, -1]  # no cache at all
    c = m.new_cache(3, 150)
    m(ids[:, :130], cache=c.view(0, 1))
    for n in (0, 1, 63, 64, 65, 127, 130):  # inside, at and across the 64-position tiles
        c.copy_prefix(2, 0, n)
        assert c.lengths == (130, 0, n)
        got = m(ids[:, n:], cache=c.view(2, 3), last_only=True)[:, -1]
        assert np.array_equal(bits(got), bits(want)), n
    c.truncate(0, 70)
    got = m(ids[:, 70:], cache=c.view(0, 1), last_only=True)[:, -1]
    assert np.array_equal(bits(got), bits(want))
    assert c.lengths == (140, 0, 140)


def test_a_view_decodes_its_rows_as_the_whole_cache_does():
    m = GPT.random(CONFIGS["llama"], seed=1)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, 50, size=n) for n in (5, 9, 3, 7)]
    whole, part = m.new_cache(4, 40), m.new_cache(4, 40)
    for i, p in enumerate(prompts):
        m(p[None], cache=whole.view(i, i + 1))
        m(p[None], cache=part.view(i, i + 1))
    step = rng.integers(0, 50, size=(4, 1))
    a = m(step, cache=whole)
    b = m(step[1:3], cache=part.view(1, 3))
    assert np.array_equal(bits(a[1:3]), bits(b))
    assert part.lengths == (5, 10, 4, 7) and whole.lengths == (6, 10, 4, 8)
    assert part.view(1, 3).lengths == (10, 4)


def test_refusals_leave_the_cache_as_it_was():
    m = GPT.random(CONFIGS["gpt2"], seed=0)
    c = m.new_cache(2, 16)
    m(np.array([[1, 2, 3]]), cache=c.view(0, 1))
    k = c.k
    with pytest.raises(ValueError, match="n must be at most"):
        c.copy_prefix(1, 0, 4)
    with pytest.raises(ValueError, match="n must be at most"):
        c.truncate(1, 1)
    with pytest.raises(ValueError, match="dst"):
        c.copy_prefix(2, 0, 1)
    with pytest.raises(ValueError, match="src"):
        c.copy_prefix(0, -1, 1)
    with pytest.raises(TypeError, match="n"):
        c.truncate(0, 1.5)
    with pytest.raises(ValueError, match="stop"):
        c.view(1, 1)
    with pytest.raises(ValueError, match="start"):
        c.view(2, 3)
    assert c.lengths == (3, 0) and np.array_equal(c.k, k)
    other = GPT.random(CONFIGS["gpt2"], seed=0)
    with pytest.raises(ValueError, match="another model"):
        other(np.array([[1]]), cache=c.view(0, 1))
    assert isinstance(c.view(0, 2), blockc.KVCache)
