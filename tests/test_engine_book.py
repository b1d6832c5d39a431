"""Book mode (fixed sizes, the listings' exact operation order) and the dynamic
engine agree on the book's inputs: same draws, same block, same stack norms."""
import numpy as np
import pytest

from blockc import BlockConfig, block_forward, book, init_block, init_blocks, stack_forward
from blockc.block.engine import avg_norm

CFG = BlockConfig()


def as_state_dict(w):
    """128_Block's struct (w_q, w_k, w_v (H, Dh, D), w_o, w1, w2) as GPTBlock names."""
    qkv = np.concatenate([w[k].reshape(8, 8) for k in ("w_q", "w_k", "w_v")])
    return {"attn.qkv.weight": qkv, "attn.proj.weight": w["w_o"], "up.weight": w["w1"],
            "down.weight": w["w2"]}


@pytest.mark.parametrize("rand", ["msvc", "glibc"])
@pytest.mark.parametrize("seed", [42, 1, 2024])
def test_same_draw_same_block(rand, seed):
    W = init_block(CFG, seed, rand)
    Wb = as_state_dict(book.block_init(seed, rand))
    for k in W:
        np.testing.assert_array_equal(W[k], Wb[k])
    y = block_forward(book.BLOCK_INPUT, W, CFG)
    np.testing.assert_allclose(y, book.block_forward(book.BLOCK_INPUT, book.block_init(seed, rand)),
                               rtol=0, atol=2e-6)


@pytest.mark.parametrize("rand", ["msvc", "glibc"])
@pytest.mark.parametrize("seed", [42, 7])
def test_same_stack_norms(rand, seed):
    blocks = book.stack_init(seed, rand)
    Ws = init_blocks(CFG, 4, seed, rand)
    for W, w in zip(Ws, blocks):
        for k, v in as_state_dict(w).items():
            np.testing.assert_array_equal(W[k], v)
    yb, norms = book.stack_forward(book.BLOCK_INPUT, blocks)
    hs = stack_forward(book.BLOCK_INPUT, Ws, CFG, return_hidden=True)
    np.testing.assert_allclose(hs[-1], yb, rtol=0, atol=5e-6)
    assert ["%.4f" % avg_norm(h) for h in hs] == ["%.4f" % n for n in norms]
    assert avg_norm(book.BLOCK_INPUT) == float(book.avg_norm(book.BLOCK_INPUT))
