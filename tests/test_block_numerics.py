"""The block, the ops and the GPT at the edges of float32 (issues 6 and 9): huge and tiny
magnitudes stay finite where the math is finite (max-subtracted softmax, eps in the norms),
all-zero rows go through the norms, RMSNorm normalises rows whose mean square overflows or
underflows float32, and NaN / infinity propagate instead of crashing or hanging."""
import faulthandler

import numpy as np
import pytest

from helpers import rnd

import blockc
from blockc import ops
from blockc.reference import block as ref


@pytest.fixture(autouse=True)
def no_hang():
    """A hang in C would stall the suite: dump the stacks and exit after 120 s."""
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


CONFIGS = [
    blockc.BlockConfig(d_model=8, n_heads=2, d_ff=16),
    blockc.BlockConfig(d_model=8, n_heads=2, d_ff=16, norm="layer", causal=True),
    blockc.BlockConfig(d_model=8, n_heads=4, d_ff=16, norm="layer", placement="post",
                       activation="swiglu"),
    blockc.BlockConfig(d_model=8, n_heads=1, d_ff=16, norm="none", activation="relu"),
]


IDS = ["pre-rms", "pre-layer-causal", "post-layer-swiglu", "none-relu"]


def normal_weights(cfg, seed=5):
    return blockc.init_blocks(cfg, 1, seed=seed, rand="normal")[0]


# ---- the block and the ops ---------------------------------------------------------------

@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
@pytest.mark.parametrize("scale", [1e4, 1e-30, 1e-38], ids=["1e4", "1e-30", "1e-38"])
def test_block_extreme_magnitudes_stay_finite(cfg, scale):
    W = normal_weights(cfg)
    x = rnd(2, 5, 8) * np.float32(scale)
    y = blockc.block_forward(x, W, cfg)
    assert np.isfinite(y).all()
    want = ref.block_forward(x.astype(np.float64), W, cfg)
    # relative to the output's own scale: float32 rounding of the tiny inputs is in the oracle too
    np.testing.assert_allclose(y, want, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("scale", [1e4, 1e-30])
def test_stack_of_16_blocks_stays_finite(scale):
    cfg = blockc.BlockConfig(d_model=16, n_heads=4, d_ff=32)
    Ws = blockc.init_blocks(cfg, 16, seed=1)
    y = blockc.stack_forward(rnd(3, 16) * np.float32(scale), Ws, cfg, return_hidden=True)
    assert np.isfinite(y).all()


def test_attention_huge_scores_use_a_max_subtracted_softmax():
    # scores of order 1e4..1e6: exp() would overflow without subtracting the max
    q, k, v = rnd(1, 2, 4, 8, seed=1) * 300, rnd(1, 2, 6, 8, seed=2) * 300, rnd(1, 2, 6, 8, seed=3)
    for causal in (False, True):
        y = ops.attention(q, k, v, causal=causal)
        assert np.isfinite(y).all()
        want = ref.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), causal)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_attention_tiny_scores_are_uniform():
    q, k = rnd(1, 1, 3, 4) * 1e-30, rnd(1, 1, 5, 4) * 1e-30
    v = rnd(1, 1, 5, 4)
    np.testing.assert_allclose(ops.attention(q, k, v)[0, 0], np.broadcast_to(v[0, 0].mean(0), (3, 4)),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_all_zero_row_through_the_norms(norm):
    x = rnd(3, 6)
    x[1] = 0.0
    y = getattr(ops, norm)(x)
    assert np.isfinite(y).all()
    np.testing.assert_array_equal(y[1], np.zeros(6, np.float32))
    y = getattr(ops, norm)(x, weight=rnd(6), **({"bias": np.full(6, 0.5, np.float32)}
                                                if norm == "layernorm" else {}))
    assert np.isfinite(y).all()


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_all_zero_input_through_a_block(norm):
    cfg = blockc.BlockConfig(d_model=8, n_heads=2, d_ff=16, norm=norm)
    W = normal_weights(cfg)
    y = blockc.block_forward(np.zeros((4, 8), np.float32), W, cfg)
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, ref.block_forward(np.zeros((4, 8)), W, cfg), atol=1e-6)


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_constant_huge_rows(norm):
    # rows of +-1e18: the squares (1e36) are near float32's limit but representable
    x = np.full((2, 4), 1e18, np.float32)
    x[1] = -3e18
    y = getattr(ops, norm)(x)
    want = getattr(ref, norm)(x.astype(np.float64))
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, want, atol=1e-5)


@pytest.mark.parametrize("fn", ["gelu_tanh", "gelu", "relu", "silu"])
def test_activations_nan_and_inf(fn):
    y = getattr(ops, fn)(np.array([np.nan, np.inf, 1e4, -1e4, 1e-30, 0.0], np.float32))
    assert np.isnan(y[0])
    assert y[1] == np.inf
    assert y[2] == np.float32(1e4)
    assert np.isfinite(y[2:]).all()
    assert abs(y[3]) < 1e-3 and abs(y[4]) <= 1e-30


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_nan_and_inf_propagate_causally_through_a_block(bad):
    # causal: positions before the bad one are untouched by it (bit for bit),
    # the bad position and everything after it see it (non-finite)
    cfg = blockc.BlockConfig(d_model=8, n_heads=2, d_ff=16, norm="layer", causal=True)
    W = normal_weights(cfg)
    x = rnd(2, 6, 8)
    clean = blockc.block_forward(x, W, cfg)
    x[1, 3, 2] = bad
    y = blockc.block_forward(x, W, cfg)
    np.testing.assert_array_equal(y[0], clean[0])
    np.testing.assert_array_equal(y[1, :3], clean[1, :3])
    assert (~np.isfinite(y[1, 3:])).any(axis=-1).all()


@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
def test_nan_in_a_weight_does_not_crash(bad):
    cfg = blockc.BlockConfig(d_model=8, n_heads=2, d_ff=16)
    W = dict(normal_weights(cfg))
    W["up.weight"] = W["up.weight"].copy()
    W["up.weight"][0, 0] = bad
    y = blockc.block_forward(rnd(3, 8), W, cfg)
    assert y.shape == (3, 8) and not np.isfinite(y).all()


def test_nan_in_attention_scores_does_not_hang():
    q = rnd(1, 1, 4, 4)
    q[0, 0, 2, :] = np.nan
    k = rnd(1, 1, 4, 4)
    k[0, 0, 1, 0] = np.inf
    y = ops.attention(q, k, rnd(1, 1, 4, 4))
    assert y.shape == (1, 1, 4, 4) and np.isnan(y[0, 0, 2]).all()


# ---- RMSNorm across float32's range ------------------------------------------------------

@pytest.mark.parametrize("scale", [1e20, 1e30, 3e38, 1e-25])
def test_rmsnorm_of_huge_and_tiny_rows(scale):
    # mean(x^2) of rows near 1e20 overflows float32: RMSNorm used to return 0 (so
    # does PyTorch); every finite row now normalises, in ops and in the block
    rng = np.random.default_rng(0)
    x = (rng.uniform(-1, 1, (3, 48)) * scale).astype(np.float32)
    eps = 0.0 if scale < 1 else 1e-5
    y = ops.rmsnorm(x, eps=eps)
    rms = np.sqrt(np.mean(y.astype(np.float64) ** 2, axis=-1))
    np.testing.assert_allclose(rms, 1.0, rtol=1e-5)
    np.testing.assert_allclose(y, ref.rmsnorm(x.astype(np.float64), eps=eps), rtol=1e-5, atol=1e-6)
    # the block's norms: with zero weights attention and FFN add nothing, so the
    # post-norm block is norm2(norm1(x)) = rmsnorm(x) (y has RMS 1 already)
    cfg = blockc.BlockConfig(d_model=48, n_heads=4, d_ff=8, placement="post", eps=eps)
    Z = {k: np.zeros_like(v) for k, v in blockc.init_block(cfg).items()}
    np.testing.assert_allclose(blockc.block_forward(x, Z, cfg), y, rtol=1e-5, atol=1e-6)


def test_rmsnorm_bits_unchanged_in_range():
    # rows whose mean square is a normal float32 take the float32 path as before
    x = np.random.default_rng(1).standard_normal((64, 96)).astype(np.float32)
    y = ops.rmsnorm(x)
    ss = (x.astype(np.float64) ** 2).sum(axis=-1) / 96
    inv = np.float32(1) / np.sqrt(ss.astype(np.float32) + np.float32(1e-5))
    np.testing.assert_array_equal(y, x * inv[:, None])


# ---- the GPT -----------------------------------------------------------------------------

def _gpt(tie_weights=True):
    cfg = blockc.GPTConfig(vocab=17, context=6, width=8, heads=2, layers=2, tie_weights=tie_weights)
    return cfg, blockc.GPT.random(cfg, seed=2)


@pytest.mark.parametrize("scale", [1e4, 1e-30], ids=["1e4", "1e-30"])
def test_gpt_extreme_embeddings_stay_finite(scale):
    from blockc.reference import gpt_forward
    cfg, m = _gpt()
    sd = m.state_dict()
    sd["token.weight"][...] *= np.float32(scale)
    sd["position.weight"][...] *= np.float32(scale)
    m.load_state_dict(sd)
    ids = np.arange(12).reshape(2, 6) % 17
    y = m(ids)
    assert np.isfinite(y).all()
    want = gpt_forward(sd, cfg, ids)
    np.testing.assert_allclose(y, want, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
def test_gpt_bad_embedding_row_propagates_causally(bad):
    cfg, m = _gpt(tie_weights=False)  # untied: the head does not read token 4's row
    ids = np.array([[1, 2, 3, 4, 5, 6]])
    clean = m(ids)
    sd = m.state_dict()
    sd["token.weight"][4, 0] = bad   # only position 3 reads token 4
    m.load_state_dict(sd)
    y = m(ids)
    np.testing.assert_array_equal(y[0, :3], clean[0, :3])
    assert (~np.isfinite(y[0, 3:])).any(axis=-1).all()
    out = m.generate(ids[:, :4], max_new_tokens=2)  # argmax over NaN logits: no hang, valid ids
    assert out.shape == (1, 6) and ((0 <= out) & (out < 17)).all()
