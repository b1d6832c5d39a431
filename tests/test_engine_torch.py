"""PyTorch parity: the chapter-6 block in torch (tests/support/torch_ref.py), fed the
same state dict, gives what blockc.block_forward gives; likewise post-norm, the
chapter-24 RMS/no-bias block and every other BlockConfig variant."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import blockc  # noqa: E402
from blockc import BlockConfig, block_forward, stack_forward  # noqa: E402
from torch_ref import Block  # noqa: E402


def _randomise(block, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            # a norm gain near 1 keeps the test about the same numbers a checkpoint has
        for m in block.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.add_(1.0)


def _run(block, x):
    with torch.no_grad():
        return block(torch.from_numpy(np.array(x))).numpy()


@pytest.mark.parametrize("placement", ["pre", "post"])
@pytest.mark.parametrize("activation", ["gelu_tanh", "gelu"])
def test_gpt_block_parity(placement, activation):
    torch.manual_seed(0)
    block = Block(32, 4, placement=placement, activation=activation)
    _randomise(block, 1)
    cfg = BlockConfig(d_model=32, n_heads=4, d_ff=128, norm="layer", placement=placement,
                      activation=activation, causal=True)
    x = np.random.default_rng(2).standard_normal((3, 7, 32)).astype(np.float32)
    sd = block.state_dict()                       # torch tensors, unchanged
    assert set(sd) == {"ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "attn.qkv.weight",
                       "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias", "up.weight",
                       "up.bias", "down.weight", "down.bias"}
    want = _run(block, x)
    np.testing.assert_allclose(block_forward(x, sd, cfg), want, rtol=1e-4, atol=1e-4)
    # the same weights as NumPy arrays, and a (T, D) input
    npsd = {k: v.numpy() for k, v in sd.items()}
    np.testing.assert_allclose(block_forward(x[1], npsd, cfg), want[1], rtol=1e-4, atol=1e-4)


def test_book_block_parity_rms_no_bias_no_mask():
    block = Block(8, 2, norm="rms", bias=False, gains=False, causal=False)
    W = blockc.init_block(BlockConfig(), 42, "msvc")
    with torch.no_grad():
        for k, v in block.state_dict().items():
            v.copy_(torch.from_numpy(W[k]))
    x = blockc.book.BLOCK_INPUT[None]
    assert set(block.state_dict()) == set(W)
    np.testing.assert_allclose(block_forward(x, W, BlockConfig()), _run(block, x), rtol=1e-5, atol=1e-6)


def test_gpt2_stack_parity_with_normal_init():
    cfg = BlockConfig(d_model=24, n_heads=3, d_ff=96, norm="layer", causal=True)
    Ws = blockc.init_blocks(cfg, 3, seed=5, rand="normal")
    blocks = [Block(24, 3) for _ in Ws]
    for b, W in zip(blocks, Ws):
        b.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in W.items()})
    x = np.random.default_rng(3).standard_normal((2, 6, 24)).astype(np.float32)
    want = x
    for b in blocks:
        want = _run(b, want)
    np.testing.assert_allclose(stack_forward(x, Ws, cfg), want, rtol=1e-4, atol=1e-5)


def test_ops_attention_matches_torch_sdpa():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g) for _ in range(3))
    for causal in (False, True):
        want = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).numpy()
        np.testing.assert_allclose(blockc.ops.attention(q, k, v, causal=causal), want,
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("norm", ["rms", "layer", "none"])
@pytest.mark.parametrize("activation", ["relu", "swiglu"])
@pytest.mark.parametrize("residual", [True, False])
def test_every_variant_matches_torch(norm, activation, residual):
    cfg = BlockConfig(d_model=16, n_heads=2, d_ff=24, norm=norm, activation=activation,
                      residual=residual, causal=True)
    W = blockc.init_block(cfg, 7, "normal")
    x = np.random.default_rng(8).standard_normal((2, 5, 16)).astype(np.float32)
    np.testing.assert_allclose(block_forward(x, W, cfg), _run(Block.like(cfg, W), x),
                               rtol=1e-4, atol=1e-5)
