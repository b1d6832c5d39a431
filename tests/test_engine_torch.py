"""PyTorch parity: the chapter-6 GPTBlock written in torch, fed the same state
dict, gives what blockc.block_forward gives; likewise post-norm and the
chapter-24 RMS/no-bias block."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import blockc  # noqa: E402
from blockc import BlockConfig, block_forward, stack_forward  # noqa: E402


def split_heads(t, heads):            # (B, T, D) -> (B, H, T, Dh)
    b, n, d = t.shape
    return t.view(b, n, heads, d // heads).transpose(1, 2)


def merge_heads(t):                   # (B, H, T, Dh) -> (B, T, D)
    b, h, n, dh = t.shape
    return t.transpose(1, 2).reshape(b, n, h * dh)


def causal_attention(q, k, v, positions, key_positions=None):
    """Chapter 6's masked attention: a query sees keys at positions <= its own."""
    key_positions = positions if key_positions is None else key_positions
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = key_positions[None, :] > positions[:, None]
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class GPTAttention(nn.Module):
    def __init__(self, width, heads, bias=True, causal=True):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(width, 3 * width, bias=bias)
        self.proj = nn.Linear(width, width, bias=bias)

    def forward(self, x, positions):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (split_heads(t, self.heads) for t in (q, k, v))
        if self.causal:
            y = causal_attention(q, k, v, positions)
        else:
            y = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v
        return self.proj(merge_heads(y))


class GPTBlock(nn.Module):
    """Chapter 6's block; placement="post" is its exercise 3, norm="rms" with no
    bias, no gain and no mask is chapter 24's 128_Block."""

    def __init__(self, width, heads, eps=1e-5, placement="pre", norm="layer", bias=True,
                 causal=True, approximate="tanh"):
        super().__init__()
        if norm == "layer":
            self.ln1, self.ln2 = nn.LayerNorm(width, eps=eps), nn.LayerNorm(width, eps=eps)
        else:
            self.ln1 = nn.RMSNorm(width, eps=eps, elementwise_affine=False)
            self.ln2 = nn.RMSNorm(width, eps=eps, elementwise_affine=False)
        self.attn = GPTAttention(width, heads, bias, causal)
        self.up = nn.Linear(width, 4 * width, bias=bias)
        self.down = nn.Linear(4 * width, width, bias=bias)
        self.placement, self.approximate = placement, approximate

    def mlp(self, x):
        return self.down(nn.functional.gelu(self.up(x), approximate=self.approximate))

    def forward(self, x, positions):
        if self.placement == "pre":
            x = x + self.attn(self.ln1(x), positions)
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x, positions))
        return self.ln2(x + self.mlp(x))


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
        return block(torch.from_numpy(x), torch.arange(x.shape[1])).numpy()


@pytest.mark.parametrize("placement", ["pre", "post"])
@pytest.mark.parametrize("approximate, activation", [("tanh", "gelu_tanh"), ("none", "gelu")])
def test_gpt_block_parity(placement, approximate, activation):
    torch.manual_seed(0)
    block = GPTBlock(32, 4, placement=placement, approximate=approximate)
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
    block = GPTBlock(8, 2, norm="rms", bias=False, causal=False)
    W = blockc.init_block(BlockConfig(), 42, "msvc")
    with torch.no_grad():
        for k, v in block.state_dict().items():
            v.copy_(torch.from_numpy(W[k]))
    x = blockc._cli_depth.BOOK_INPUT[None]
    assert set(block.state_dict()) == set(W)
    np.testing.assert_allclose(block_forward(x, W, BlockConfig()), _run(block, x), rtol=1e-5, atol=1e-6)


def test_gpt2_stack_parity_with_normal_init():
    cfg = BlockConfig(d_model=24, n_heads=3, d_ff=96, norm="layer", causal=True)
    Ws = blockc.init_blocks(cfg, 3, seed=5, rand="normal")
    blocks = [GPTBlock(24, 3) for _ in Ws]
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
