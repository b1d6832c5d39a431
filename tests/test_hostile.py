"""Hostile and odd input through the Python API (issue 6).

Every bad input is its own test and must raise ValueError or TypeError with a
message naming the argument and what was expected, before any C code runs;
every odd-but-valid input must give the NumPy oracle's answer and leave the
caller's arrays untouched.
"""
import numpy as np
import pytest

from helpers import rnd

import blockc
from blockc import ops
from blockc.reference import block as ref

TOL = dict(rtol=1e-4, atol=1e-5)
CFG = blockc.BlockConfig(d_model=8, n_heads=2, d_ff=12)


def weights(cfg=CFG, seed=3):
    """A plain dict of every weight the config accepts, biases and gains included."""
    W = dict(blockc.init_blocks(cfg, 1, seed=seed, rand="normal")[0])
    r = np.random.default_rng(seed)
    for k in list(W):  # non-trivial biases and gains, so a dropped one shows
        W[k] = (W[k] + r.standard_normal(W[k].shape).astype(np.float32) * 0.1).astype(np.float32)
    return W


def oracle(x, W, cfg=CFG):
    return ref.block_forward(np.asarray(x, np.float32).astype(np.float64), W, cfg)


# ---------------------------------------------------------------- bad configs

@pytest.mark.parametrize("kw, exc, match", [
    (dict(d_model=8, n_heads=3), ValueError, r"n_heads must divide d_model.*d_model=8, n_heads=3"),
    (dict(d_model=6, n_heads=4), ValueError, r"n_heads must divide d_model"),
    (dict(d_model=4, n_heads=8), ValueError, r"n_heads must divide d_model"),
    (dict(d_model=0), ValueError, r"d_model must be in \[1, 2\*\*40\], got 0"),
    (dict(d_model=-8), ValueError, r"d_model must be in \[1, 2\*\*40\], got -8"),
    (dict(n_heads=0), ValueError, r"n_heads must be in \[1, 2\*\*40\], got 0"),
    (dict(n_heads=-2), ValueError, r"n_heads must be in \[1, 2\*\*40\], got -2"),
    (dict(d_ff=0), ValueError, r"d_ff must be in \[1, 2\*\*40\], got 0"),
    (dict(d_ff=-1), ValueError, r"d_ff must be in \[1, 2\*\*40\], got -1"),
    (dict(d_model=2**31, n_heads=1), ValueError, r"exceed 2\*\*40"),
    (dict(d_model=8, n_heads=2, d_ff=2**40), ValueError, r"exceed 2\*\*40"),
    (dict(d_model=2**64, n_heads=1), ValueError, r"d_model must be in \[1, 2\*\*40\], got 18446744073709551616"),
    (dict(d_model=8.0), TypeError, r"d_model must be an integer, got float"),
    (dict(n_heads="2"), TypeError, r"n_heads must be an integer, got str"),
    (dict(d_ff=True), TypeError, r"d_ff must be an integer, got bool"),
    (dict(d_ff=2.5), TypeError, r"d_ff must be an integer, got float"),
    (dict(norm="batch"), ValueError, r"norm must be one of 'rms', 'layer', 'none'; got 'batch'"),
    (dict(norm=None), TypeError, r"norm must be a str, one of"),
    (dict(placement="middle"), ValueError, r"placement must be one of 'pre', 'post'"),
    (dict(activation="swish"), ValueError, r"activation must be one of .*'swiglu'; got 'swish'"),
    (dict(activation="silu"), ValueError, r"activation must be one of"),
    (dict(causal=1), TypeError, r"causal must be a bool, got int"),
    (dict(residual="yes"), TypeError, r"residual must be a bool, got str"),
    (dict(eps=-1e-5), ValueError, r"eps must be finite and >= 0"),
    (dict(eps=float("nan")), ValueError, r"eps must be finite and >= 0"),
    (dict(eps=float("inf")), ValueError, r"eps must be finite and >= 0"),
    (dict(eps=1e300), ValueError, r"eps must be finite and >= 0"),  # inf in float32
    (dict(eps="1e-5"), TypeError, r"eps must be a real number, got str"),
    (dict(epsilon=1e-5), TypeError, r"unexpected keyword argument 'epsilon'"),
    (dict(heads=2), TypeError, r"unexpected keyword argument 'heads'"),
], ids=lambda v: repr(v) if isinstance(v, dict) else "")
def test_bad_block_config(kw, exc, match):
    with pytest.raises(exc, match=match):
        blockc.BlockConfig(**kw)


def test_cfg_must_be_a_block_config():
    with pytest.raises(TypeError, match=r"cfg must be a blockc.BlockConfig, got dict"):
        blockc.block_forward(rnd(3, 8), weights(), dict(d_model=8, n_heads=2, d_ff=12))


@pytest.mark.parametrize("kw, exc, match", [
    (dict(rand="posix"), ValueError, r"rand must be one of 'msvc', 'glibc', 'normal'; got 'posix'"),
    (dict(seed=-1), ValueError, r"seed must be in \[0, 2\*\*32\)"),
    (dict(seed=2**32), ValueError, r"seed must be in \[0, 2\*\*32\)"),
    (dict(seed=1.5), TypeError, r"seed must be an integer, got float"),
], ids=["rand", "seed-neg", "seed-2^32", "seed-float"])
def test_bad_init_block(kw, exc, match):
    with pytest.raises(exc, match=match):
        blockc.init_block(CFG, **kw)


def test_init_blocks_negative_count():
    with pytest.raises(ValueError, match=r"n must be in \[0, 2\*\*40\], got -1"):
        blockc.init_blocks(CFG, -1)


def test_init_blocks_absurd_count():
    with pytest.raises(ValueError, match=r"exceed 2\*\*40"):
        blockc.init_blocks(blockc.BlockConfig(d_model=1024, n_heads=8, d_ff=4096), 2**20)


# ---------------------------------------------------------------- bad x

@pytest.mark.parametrize("shape", [(8,), (), (1, 2, 3, 8), (2, 1, 1, 3, 8)], ids=str)
def test_x_wrong_ndim(shape):
    with pytest.raises(ValueError, match=r"x must have shape \(T, d_model\) or \(B, T, d_model\)"):
        blockc.block_forward(np.ones(shape, np.float32), weights(), CFG)


@pytest.mark.parametrize("shape", [(3, 7), (3, 9), (2, 3, 1), (3, 0), (8, 3)], ids=str)
def test_x_wrong_last_dimension(shape):
    with pytest.raises(ValueError, match=r"x must have shape \(T, 8\) or \(B, T, 8\).*got"):
        blockc.block_forward(np.ones(shape, np.float32), weights(), CFG)


@pytest.mark.parametrize("x", [
    np.arange(24).reshape(3, 8),
    np.ones((3, 8), bool),
    np.ones((3, 8), np.complex64),
    np.full((3, 8), None, object),
    np.full((3, 8), "1.0"),
    np.ones((3, 8), np.uint8),
    "abc",
    [[1.0] * 8, [1.0] * 7],
], ids=["int", "bool", "complex", "object", "str-array", "uint8", "str", "ragged"])
def test_x_non_float(x):
    with pytest.raises(TypeError, match=r"^x must (have a floating dtype|be an array of numbers)"):
        blockc.block_forward(x, weights(), CFG)


def test_x_none():
    with pytest.raises(TypeError, match=r"x must have a floating dtype"):
        blockc.block_forward(None, weights(), CFG)


# ---------------------------------------------------------------- bad weights

@pytest.mark.parametrize("key", ["attn.qkv.weight", "attn.proj.weight", "up.weight", "down.weight"])
def test_missing_weight(key):
    W = weights()
    del W[key]
    with pytest.raises(ValueError, match=rf"W is missing '{key}', expected shape"):
        blockc.block_forward(rnd(3, 8), W, CFG)


def test_missing_gate_with_swiglu():
    cfg = blockc.BlockConfig(d_model=8, n_heads=2, d_ff=12, activation="swiglu")
    W = weights(cfg)
    del W["gate.weight"]
    with pytest.raises(ValueError, match=r"W is missing 'gate.weight', expected shape \(d_ff, d_model\)"):
        blockc.block_forward(rnd(3, 8), W, cfg)


@pytest.mark.parametrize("key, match", [
    ("foo", r"unknown weight 'foo'"),
    ("attn.qkv.weights", r"unknown weight 'attn.qkv.weights'"),
    ("gate.weight", r"'gate.weight' is only used with activation='swiglu'"),
    ("ln1.bias", r"'ln1.bias' \(a LayerNorm shift\) is only used with norm='layer'"),
], ids=["foo", "typo", "gate-without-swiglu", "shift-with-rms"])
def test_extra_weight(key, match):
    W = weights()
    W[key] = np.ones((12, 8), np.float32)
    with pytest.raises(ValueError, match=match):
        blockc.block_forward(rnd(3, 8), W, CFG)


def test_norm_weight_with_norm_none():
    cfg = blockc.BlockConfig(d_model=8, n_heads=2, d_ff=12, norm="none")
    W = weights(cfg)
    W["ln1.weight"] = np.ones(8, np.float32)
    with pytest.raises(ValueError, match=r"'ln1.weight' is a norm parameter but norm='none'"):
        blockc.block_forward(rnd(3, 8), W, cfg)


def test_transposed_down_weight():
    W = weights()
    W["down.weight"] = np.ascontiguousarray(W["down.weight"].T)  # (F, D) instead of (D, F)
    with pytest.raises(ValueError, match=r"W\['down.weight'\] must have shape \(d_model, d_ff\) "
                                         r"= \(8, 12\), got \(12, 8\) \(transposed\?\)"):
        blockc.block_forward(rnd(3, 8), W, CFG)


@pytest.mark.parametrize("key, shape", [
    ("attn.qkv.weight", (8, 8)),       # Q only, not Q, K, V stacked
    ("attn.qkv.weight", (24,)),
    ("attn.proj.weight", (8, 9)),
    ("up.weight", (12, 8, 1)),
    ("attn.qkv.bias", (8,)),
    ("down.bias", (12,)),
    ("ln2.weight", (8, 1)),
    ("up.weight", ()),
], ids=str)
def test_misshaped_weight(key, shape):
    W = weights()
    W[key] = np.ones(shape, np.float32)
    with pytest.raises(ValueError, match=rf"W\['{key}'\] must have shape .*got {__import__('re').escape(str(shape))}"):
        blockc.block_forward(rnd(3, 8), W, CFG)


@pytest.mark.parametrize("dtype", [np.int32, np.bool_, np.complex128, object], ids=str)
def test_weight_non_float(dtype):
    W = weights()
    W["up.weight"] = np.ones((12, 8), dtype)
    with pytest.raises(TypeError, match=r"W\['up.weight'\] must have a floating dtype"):
        blockc.block_forward(rnd(3, 8), W, CFG)


@pytest.mark.parametrize("W", [[1, 2], "weights", None, 3.0], ids=["list", "str", "None", "float"])
def test_weights_not_a_mapping(W):
    with pytest.raises(TypeError, match=r"W must be a mapping of weight name -> array"):
        blockc.block_forward(rnd(3, 8), W, CFG)


def test_stack_weights_must_be_a_sequence():
    with pytest.raises(TypeError, match=r"Ws must be a sequence of weight mappings"):
        blockc.stack_forward(rnd(3, 8), weights(), CFG)


def test_stack_one_bad_block_is_named():
    Ws = [weights(seed=1), weights(seed=2)]
    Ws[1]["up.weight"] = np.ones((8, 12), np.float32)
    with pytest.raises(ValueError, match=r"Ws\[1\]\['up.weight'\] must have shape"):
        blockc.stack_forward(rnd(3, 8), Ws, CFG)


def test_return_hidden_must_be_bool():
    with pytest.raises(TypeError, match=r"return_hidden must be a bool"):
        blockc.stack_forward(rnd(3, 8), [weights()], CFG, return_hidden="yes")


# ---------------------------------------------------------------- odd but valid

def _check_block(x, W=None, cfg=CFG):
    W = weights(cfg) if W is None else W
    before = np.array(x, copy=True)
    y = blockc.block_forward(x, W, cfg)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.flags.c_contiguous
    assert y.shape == np.shape(x)
    assert y is not x and not np.shares_memory(y, x)
    np.testing.assert_array_equal(x, before)  # the input is never modified
    np.testing.assert_allclose(y, oracle(x, W, cfg), **TOL)
    return y


def test_non_contiguous_x():
    big = rnd(2, 5, 16)
    x = big[:, ::2, ::2]
    assert not x.flags.c_contiguous
    _check_block(x)


def test_fortran_order_x():
    x = np.asfortranarray(rnd(5, 8))
    assert x.flags.f_contiguous and not x.flags.c_contiguous
    _check_block(x)


def test_read_only_x_is_left_unmodified():
    x = rnd(2, 4, 8)
    x.flags.writeable = False
    y = _check_block(x)
    assert not x.flags.writeable and y.flags.writeable


def test_float64_x_is_computed_in_float32():
    x64 = rnd(4, 8).astype(np.float64) + 1e-9  # the 1e-9 is lost in float32
    y = _check_block(x64)
    np.testing.assert_array_equal(y, blockc.block_forward(x64.astype(np.float32), weights(), CFG))


def test_float16_x():
    _check_block(rnd(3, 8).astype(np.float16))


def test_nested_list_x():
    _check_block(rnd(3, 8).tolist())


def test_odd_weights_are_accepted():
    W = weights()
    W["attn.qkv.weight"] = np.asfortranarray(W["attn.qkv.weight"])
    W["up.weight"] = W["up.weight"].astype(np.float64)
    big = np.zeros((8, 24), np.float32)
    big[:, ::2] = W["down.weight"]
    W["down.weight"] = big[:, ::2]                     # non-contiguous
    W["attn.proj.weight"].flags.writeable = False      # read-only
    kept = {k: np.array(v, copy=True) for k, v in W.items()}
    _check_block(rnd(2, 3, 8), W)
    for k in W:
        np.testing.assert_array_equal(W[k], kept[k])


def test_t1():
    _check_block(rnd(1, 8))


def test_b1():
    y = _check_block(rnd(1, 5, 8))
    np.testing.assert_array_equal(y[0], blockc.block_forward(rnd(1, 5, 8)[0], weights(), CFG))


@pytest.mark.parametrize("shape", [(0, 8), (0, 0, 8), (3, 0, 8), (0, 4, 8)], ids=str)
def test_empty_sequence_gives_an_empty_result(shape):
    # by design: an empty batch or sequence is an empty result of the same shape
    y = blockc.block_forward(np.zeros(shape, np.float32), weights(), CFG)
    assert y.shape == shape and y.dtype == np.float32


def test_empty_stack_returns_the_input_as_float32():
    x = rnd(3, 8).astype(np.float64)
    y = blockc.stack_forward(x, [], CFG)
    np.testing.assert_array_equal(y, x.astype(np.float32))
    assert y.dtype == np.float32 and not np.shares_memory(y, x)


def test_one_head_and_dh_1_and_dff_1():
    for cfg in (blockc.BlockConfig(d_model=5, n_heads=1, d_ff=1),
                blockc.BlockConfig(d_model=4, n_heads=4, d_ff=1, norm="layer", activation="swiglu")):
        _check_block(rnd(2, 3, cfg.d_model), cfg=cfg)


# ---------------------------------------------------------------- ops

@pytest.mark.parametrize("call, exc, match", [
    (lambda: ops.linear(rnd(3, 7), rnd(5, 6)), ValueError, r"x must have shape \(\.\.\., 6\) to match w"),
    (lambda: ops.linear(rnd(3, 6), rnd(6)), ValueError, r"w must have shape \(out, in\)"),
    (lambda: ops.linear(rnd(3, 6), rnd(5, 6), rnd(6)), ValueError, r"b must have shape \(5,\)"),
    (lambda: ops.linear(rnd(3, 6), np.ones((5, 6), int)), TypeError, r"w must have a floating dtype"),
    (lambda: ops.rmsnorm(rnd(3, 6), rnd(5)), ValueError, r"weight must have shape \(6,\)"),
    (lambda: ops.rmsnorm(rnd(3, 0)), ValueError, r"x must have shape \(\.\.\., D\) with D >= 1"),
    (lambda: ops.rmsnorm(rnd(3, 6), eps=-1.0), ValueError, r"eps must be finite and >= 0"),
    (lambda: ops.layernorm(rnd(3, 6), None, rnd(7)), ValueError, r"bias must have shape \(6,\)"),
    (lambda: ops.layernorm(np.ones((3, 6), complex)), TypeError, r"x must have a floating dtype"),
    (lambda: ops.attention(rnd(1, 2, 3, 4), rnd(1, 2, 3, 5), rnd(1, 2, 3, 5)), ValueError,
     r"k must have shape .* to match q"),
    (lambda: ops.attention(rnd(1, 2, 3, 4), rnd(1, 2, 3, 4), rnd(1, 2, 2, 4)), ValueError,
     r"v must have the shape of k"),
    (lambda: ops.attention(rnd(1, 2, 3, 4), rnd(1, 3, 3, 4), rnd(1, 3, 3, 4)), ValueError,
     r"k must have shape"),
    (lambda: ops.attention(rnd(1, 2, 3, 4), rnd(1, 2, 0, 4), rnd(1, 2, 0, 4)), ValueError,
     r"at least one key"),
    (lambda: ops.attention(rnd(4), rnd(4), rnd(4)), ValueError, r"q must have shape \(B, H, Tq, Dh\)"),
    (lambda: ops.attention(rnd(1, 1, 2, 2), rnd(1, 1, 2, 2), rnd(1, 1, 2, 2), causal="no"),
     TypeError, r"causal must be a bool"),
    (lambda: ops.gelu(np.ones(3, bool)), TypeError, r"x must have a floating dtype"),
    (lambda: ops.silu("x"), TypeError, r"x must have a floating dtype"),
    (lambda: ops.residual_add(rnd(3, 4), rnd(4, 3)), ValueError, r"must have the shape of"),
    (lambda: ops.swiglu(rnd(3, 4), rnd(3, 5)), ValueError, r"must have the shape of"),
], ids=["linear-in", "linear-w-ndim", "linear-b", "linear-int-w", "rms-gain", "rms-empty-D",
        "rms-eps", "ln-bias", "ln-complex", "attn-dh", "attn-v", "attn-heads", "attn-no-keys",
        "attn-ndim", "attn-causal", "gelu-bool", "silu-str", "add-shape", "swiglu-shape"])
def test_bad_ops_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_ops_odd_inputs_match_oracle():
    x = np.asfortranarray(rnd(5, 6))
    w = rnd(12, 4)[::2, :].T.copy().T  # (6, 4).T -> non-contiguous view
    w = rnd(4, 12)[:, ::2]
    x.flags.writeable = False
    keep = x.copy()
    np.testing.assert_allclose(ops.linear(x, w), x.astype(np.float64) @ w.T.astype(np.float64), **TOL)
    np.testing.assert_allclose(ops.rmsnorm(x[:, ::-1]), ref.rmsnorm(x[:, ::-1].astype(np.float64)), **TOL)
    np.testing.assert_allclose(ops.layernorm(x.astype(np.float64)), ref.layernorm(x.astype(np.float64)), **TOL)
    np.testing.assert_array_equal(x, keep)


# ================================================================ the GPT

from blockc.reference import gpt_forward  # noqa: E402

GCFG = blockc.GPTConfig(vocab=13, context=8, width=8, heads=2, layers=2)


def gpt_model(cfg=GCFG, seed=0):
    m = blockc.GPT.random(cfg, seed=seed)
    r = np.random.default_rng(seed + 1)
    for a in m.state_dict().values():  # non-trivial biases and gains
        if a.ndim == 1:
            a += r.standard_normal(a.shape).astype(np.float32) * 0.1
    return m


def gpt_sd(cfg=GCFG):
    return {k: v.copy() for k, v in gpt_model(cfg).state_dict().items()}


@pytest.mark.parametrize("kw, exc, match", [
    (dict(width=8, heads=3), ValueError, r"width 8 is not divisible by heads 3"),
    (dict(width=4, heads=8), ValueError, r"width 4 is not divisible by heads 8"),
    (dict(vocab=0), ValueError, r"GPTConfig.vocab must be in \[1, 2\*\*40\], got 0"),
    (dict(context=-1), ValueError, r"GPTConfig.context must be in \[1, 2\*\*40\], got -1"),
    (dict(layers=0), ValueError, r"GPTConfig.layers must be in \[1, 2\*\*40\], got 0"),
    (dict(heads=-2), ValueError, r"GPTConfig.heads must be in \[1, 2\*\*40\], got -2"),
    (dict(vocab=2**31, width=768, heads=12), ValueError, r"GPTConfig: a model of .* exceeds 2\*\*40 parameters"),
    (dict(context=2**31, width=1024, heads=16), ValueError, r"GPTConfig: a model of .* exceeds 2\*\*40 parameters"),
    (dict(layers=2**31, width=768, heads=12), ValueError, r"GPTConfig: a model of .* exceeds 2\*\*40 parameters"),
    (dict(width=2**31, heads=1), ValueError, r"GPTConfig: a model of .* exceeds 2\*\*40 parameters"),
    (dict(vocab=13.0), TypeError, r"GPTConfig.vocab must be an integer, got float"),
    (dict(layers="2"), TypeError, r"GPTConfig.layers must be an integer, got str"),
    (dict(heads=True), TypeError, r"GPTConfig.heads must be an integer, got bool"),
    (dict(eps=-1e-5), ValueError, r"GPTConfig.eps must be finite and >= 0"),
    (dict(eps=float("inf")), ValueError, r"GPTConfig.eps must be finite and >= 0"),
    # the engine's eps rule (BlockConfig), named GPTConfig.eps
    (dict(eps="abc"), TypeError, r"GPTConfig.eps must be a real number, got str"),
    (dict(eps=None), TypeError, r"GPTConfig.eps must be a real number, got NoneType"),
    (dict(eps=True), TypeError, r"GPTConfig.eps must be a real number, got bool"),
    (dict(eps=1e39), ValueError, r"GPTConfig.eps must be finite and >= 0"),
    (dict(n_layer=2), TypeError, r"unexpected keyword argument 'n_layer'"),
    (dict(dropout=0.1), TypeError, r"unexpected keyword argument 'dropout'"),
    (dict(eps=float("nan")), ValueError, r"GPTConfig.eps must be finite and >= 0"),
    (dict(vocab=2**40, context=1, width=2**20, heads=1, layers=1), ValueError,
     r"GPTConfig: a model of .* exceeds 2\*\*40 parameters"),
], ids=lambda v: repr(v) if isinstance(v, dict) else "")
def test_bad_gpt_config(kw, exc, match):
    base = dict(vocab=13, context=8, width=8, heads=2, layers=2)
    base.update(kw)
    with pytest.raises(exc, match=match):
        blockc.GPTConfig(**base)


@pytest.mark.parametrize("name, exc, match", [
    ("gpt3", ValueError, r"^preset must be one of 'gpt2', 'gpt2-large', 'gpt2-medium', 'gpt2-xl', 'llama-7b', 'llama3-8b', 'qwen2-0.5b'; got 'gpt3'$"),
    (None, TypeError, r"^preset must be a str"),
])
def test_bad_preset(name, exc, match):
    with pytest.raises(exc, match=match):
        blockc.GPTConfig.preset(name)


def test_gpt_cfg_must_be_a_gpt_config():
    with pytest.raises(TypeError, match=r"cfg must be a blockc.GPTConfig, got BlockConfig"):
        blockc.GPT.random(CFG)


@pytest.mark.parametrize("ids, match", [
    ([[0, 1, 13]], r"ids must lie in \[0, 13\), got values in \[0, 13\]"),
    ([[0, -1]], r"ids must lie in \[0, 13\), got values in \[-1, 0\]"),
    (np.array([[2**62]], np.int64), r"ids must lie in \[0, 13\)"),
    (np.array([[-2**63]], np.int64), r"ids must lie in \[0, 13\)"),
    (np.array([[2**64 - 1]], np.uint64), r"ids must lie in \[0, 13\)"),
    (np.array([[70000]], np.int32), r"ids must lie in \[0, 13\)"),
    ([[0.0, 1.0]], r"ids must be integers, got dtype float64"),
    (np.array([[1.5]], np.float32), r"ids must be integers, got dtype float32"),
    (np.array([[1 + 0j]]), r"ids must be integers, got dtype complex128"),
    (np.array([[1, None]], object), r"ids must be integers, got dtype object"),
    (np.array([[True]]), r"ids must be integers, got dtype bool"),
    ("hello", r"ids must be integers, got dtype <U5"),
    ([3, 4], r"ids must have shape \(B, T\), got shape \(2,\)"),
    (5, r"ids must have shape \(B, T\), got shape \(\)"),
    (np.zeros((1, 2, 3), np.int64), r"ids must have shape \(B, T\)"),
    (np.zeros((0, 3), np.int64), r"ids must have B >= 1 and T >= 1"),
    (np.zeros((2, 0), np.int64), r"ids must have B >= 1 and T >= 1"),
    (np.zeros((1, 9), np.int64), r"Sequence exceeds the model's context of 8"),
    (np.array([[2**63]], np.uint64), r"ids must lie in \[0, 13\)"),
    ([[[1, 2]]], r"ids must have shape \(B, T\), got shape \(1, 1, 2\)"),
], ids=["vocab", "negative", "2^62", "int64-min", "uint64-max", "int32-big", "float-list",
        "float32", "complex", "object", "bool", "str", "1-D", "scalar", "3-D", "B=0", "T=0",
        "past-context", "uint64-2^63", "nested-3-D"])
def test_bad_ids(ids, match):
    # a wrong dtype is a wrong type (TypeError); a wrong shape or value a ValueError
    exc = TypeError if "must be integers" in match else ValueError
    with pytest.raises(exc, match=match):
        gpt_model()(ids)


def test_ids_past_the_context_through_the_cache():
    m = gpt_model()
    cache = m.new_cache(1, 8)
    m(np.zeros((1, 6), np.int64), cache=cache)
    with pytest.raises(ValueError, match=r"Sequence exceeds the model's context of 8 \(positions 6\.\.8\)"):
        m(np.zeros((1, 3), np.int64), cache=cache)
    assert cache.length == 6


@pytest.mark.parametrize("attr", ["k", "v", "capacity", "batch", "length", "cfg"])
def test_cache_state_cannot_be_replaced(attr):
    # C writes layers*batch*capacity*width floats through k and v, and stores at
    # length..length+T: none of these can be swapped from Python
    m = gpt_model()
    cache = m.new_cache(1, 8)
    with pytest.raises(AttributeError):
        setattr(cache, attr, getattr(cache, attr))
    with pytest.raises(AttributeError):
        cache.extra = 1  # slots: no new attributes either
    m(np.zeros((1, 2), np.int64), cache=cache)
    assert cache.length == 2


def test_cache_arrays_are_read_only_views():
    m = gpt_model()
    cache = m.new_cache(1, 8)
    m(np.ones((1, 3), np.int64), cache=cache)
    assert not cache.k.flags.writeable and not cache.v.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        cache.k[0, 0, 0, 0] = 1.0
    assert np.abs(cache.k[:, :, :3]).sum() > 0 and not cache.k[:, :, 3:].any()


def test_cache_belongs_to_the_model_that_made_it():
    # a cache filled by one model and continued by another of the same config would
    # attend to the first model's keys: refused, naming the cause
    cfg = gpt_model().config
    a, b = blockc.GPT.random(cfg, seed=1), blockc.GPT.random(cfg, seed=2)
    cache = a.new_cache(1, 8)
    a(np.zeros((1, 2), np.int64), cache=cache)
    with pytest.raises(ValueError, match="cache belongs to another model"):
        b(np.zeros((1, 1), np.int64), cache=cache)
    with pytest.raises(ValueError, match="cache belongs to another model"):
        b(np.zeros((1, 1), np.int64), cache=blockc.KVCache(cfg, 1, 8))
    assert cache.length == 2


def test_cache_of_another_type():
    with pytest.raises(TypeError, match=r"cache must be a blockc.KVCache, got dict"):
        gpt_model()(np.zeros((1, 2), np.int64), cache={"k": None})


@pytest.mark.parametrize("key", ["token.weight", "position.weight", "blocks.1.attn.qkv.bias",
                                 "blocks.0.down.weight", "norm.bias"])
def test_state_dict_missing_tensor(key):
    sd = gpt_sd()
    del sd[key]
    with pytest.raises(ValueError, match=rf"state dict is missing \['{key}'\]"):
        blockc.GPT.from_state_dict(sd, GCFG)


@pytest.mark.parametrize("key, shape", [
    ("blocks.0.down.weight", (32, 8)),          # transposed: (4D, D) instead of (D, 4D)
    ("blocks.1.attn.qkv.weight", (8, 24)),
    ("token.weight", (12, 8)),
    ("position.weight", (9, 8)),
    ("blocks.0.ln1.weight", (8, 1)),
    ("norm.bias", ()),
], ids=str)
def test_state_dict_misshaped_tensor(key, shape):
    sd = gpt_sd()
    sd[key] = np.zeros(shape, np.float32)
    with pytest.raises(ValueError, match=rf"state dict entry '{key}' has shape "
                                         rf"{__import__('re').escape(str(shape))}, expected"):
        blockc.GPT.from_state_dict(sd, GCFG)


def test_state_dict_extra_tensor():
    sd = gpt_sd()
    sd["blocks.2.ln1.weight"] = np.ones(8, np.float32)
    with pytest.raises(ValueError, match=r"state dict has unexpected keys \['blocks.2.ln1.weight'\]"):
        blockc.GPT.from_state_dict(sd, GCFG)


@pytest.mark.parametrize("value", [np.ones((8,), complex), np.array(["x"] * 8), np.full(8, None)],
                         ids=["complex", "str", "object"])
def test_state_dict_non_real_tensor(value):
    sd = gpt_sd()
    sd["norm.weight"] = value
    with pytest.raises(ValueError, match=r"state dict entry 'norm.weight' must hold real numbers"):
        blockc.GPT.from_state_dict(sd, GCFG)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(max_new_tokens=-1), ValueError, r"max_new_tokens must be >= 0, got -1"),
    (dict(max_new_tokens=2.0), TypeError, r"max_new_tokens must be an integer"),
    (dict(max_new_tokens=2**31), ValueError, r"Sequence exceeds the model's context of 8"),
    (dict(max_new_tokens=7), ValueError, r"Sequence exceeds the model's context of 8"),
    (dict(max_new_tokens=2, temperature=-1.0), ValueError, r"temperature must be finite and >= 0"),
    (dict(max_new_tokens=2, temperature=float("nan")), ValueError, r"temperature must be finite"),
    (dict(max_new_tokens=2, temperature=1.0, top_k=0), ValueError, r"top_k must be >= 1, got 0"),
    (dict(max_new_tokens=2, temperature=1.0, top_k=2.5), TypeError, r"top_k must be an integer, got float"),
    (dict(max_new_tokens=2, beam=4), TypeError, r"unexpected keyword argument 'beam'"),
], ids=["neg", "float", "2^31", "past-context", "temp-neg", "temp-nan", "topk-0", "topk-float",
        "unknown"])
def test_bad_generate_arguments(kw, exc, match):
    with pytest.raises(exc, match=match):
        gpt_model().generate(np.zeros((1, 3), np.int64), **kw)


@pytest.mark.parametrize("args, exc, match", [
    ((0, 4), ValueError, r"batch must be in \[1, 2\*\*40\], got 0"),
    ((1, 0), ValueError, r"capacity must be in \[1, 2\*\*40\], got 0"),
    ((1, 9), ValueError, r"Requested cache exceeds the context limit \(9 > 8\)"),
    ((1, 2**31), ValueError, r"Requested cache exceeds the context limit"),
    ((1.0, 4), TypeError, r"batch must be an integer"),
], ids=["batch-0", "capacity-0", "capacity>context", "capacity-2^31", "batch-float"])
def test_bad_new_cache(args, exc, match):
    with pytest.raises(exc, match=match):
        gpt_model().new_cache(*args)


def test_gpt_odd_but_valid_inputs_match_the_oracle():
    m = gpt_model()
    sd = {k: v.copy() for k, v in m.state_dict().items()}
    ids = (np.arange(24).reshape(2, 12) % 13)[:, ::2]        # non-contiguous
    want = gpt_forward(sd, GCFG, np.ascontiguousarray(ids))
    assert not ids.flags.c_contiguous
    ids.flags.writeable = False
    np.testing.assert_allclose(m(ids), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m(np.asfortranarray(ids).astype(np.int16)), want, rtol=1e-4, atol=1e-5)
    odd = {}
    for i, (k, v) in enumerate(sd.items()):  # float64, Fortran, non-contiguous, read-only
        v = [v.astype(np.float64), np.asfortranarray(v), np.repeat(v, 2, axis=-1)[..., ::2], v.copy()][i % 4]
        v.flags.writeable = False
        odd[k] = v
    kept = {k: v.copy() for k, v in odd.items()}
    m2 = blockc.GPT.from_state_dict(odd, GCFG)
    np.testing.assert_allclose(m2(ids), want, rtol=1e-4, atol=1e-5)
    for k in odd:
        np.testing.assert_array_equal(odd[k], kept[k])


def test_gpt_b1_t1_and_full_context():
    m = gpt_model()
    sd = m.state_dict()
    for ids in (np.array([[5]]), np.arange(8)[None] % 13, np.zeros((3, 1), np.int64)):
        y = m(ids)
        assert y.shape == ids.shape + (13,) and y.dtype == np.float32
        np.testing.assert_allclose(y, gpt_forward(sd, GCFG, ids), rtol=1e-4, atol=1e-5)
    out = m.generate(np.array([[1, 2]]), max_new_tokens=6)      # fills the context exactly
    assert out.shape == (1, 8)
    np.testing.assert_array_equal(out, m.generate(np.array([[1, 2]]), max_new_tokens=6, use_cache=False))
    np.testing.assert_array_equal(m.generate(np.array([[1, 2]]), max_new_tokens=0), [[1, 2]])


# ================================================================ the runtime knobs

@pytest.mark.parametrize("n, exc, match", [
    (-1, ValueError, r"n must be in \[0, 4096\], got -1"),
    (4097, ValueError, r"n must be in \[0, 4096\]"),
    (2**31, ValueError, r"n must be in \[0, 4096\]"),
    (2.0, TypeError, r"n must be an integer, got float"),
    (True, TypeError, r"n must be an integer, got bool"),
    ("4", TypeError, r"n must be an integer, got str"),
], ids=["neg", "4097", "2^31", "float", "bool", "str"])
def test_bad_thread_count(n, exc, match):
    before = blockc.get_num_threads()
    with pytest.raises(exc, match=match):
        blockc.set_num_threads(n)
    assert blockc.get_num_threads() == before


@pytest.mark.parametrize("name, exc, match", [
    ("sse", ValueError, r"^name must be one of 'generic', 'avx2', 'avx512', 'auto'; got 'sse'$"),
    ("AVX2", ValueError, r"^name must be one of 'generic', 'avx2', 'avx512', 'auto'; got 'AVX2'$"),
    ("", ValueError, r"^name must be one of 'generic', 'avx2', 'avx512', 'auto'; got ''$"),
    (None, TypeError, r"^name must be a str, one of 'generic', 'avx2', 'avx512', 'auto'; got NoneType$"),
    (1, TypeError, r"^name must be a str, one of 'generic', 'avx2', 'avx512', 'auto'; got int$"),
], ids=repr)
def test_bad_isa_name(name, exc, match):
    before = blockc.get_isa()
    with pytest.raises(exc, match=match):
        blockc.set_isa(name)
    assert blockc.get_isa() == before


def test_block_result_is_the_same_at_any_thread_count():
    x, W = rnd(2, 33, 8), weights()
    before = blockc.get_num_threads()
    try:
        outs = []
        for n in (1, 2, 3, 7):
            blockc.set_num_threads(n)
            outs.append(blockc.block_forward(x, W, CFG))
    finally:
        blockc.set_num_threads(0)
    for y in outs[1:]:
        np.testing.assert_array_equal(y, outs[0])
    assert blockc.get_num_threads() == before


# ================================================================ book mode

from blockc import book  # noqa: E402


@pytest.mark.parametrize("x, exc, match", [
    (np.ones((4, 8), int), TypeError, r"x must have a floating dtype \(float16/32/64\), got int64"),
    (np.ones((4, 8), bool), TypeError, r"x must have a floating dtype \(float16/32/64\), got bool"),
    (np.ones((4, 8), complex), TypeError, r"x must have a floating dtype \(float16/32/64\), got complex128"),
    (np.full((4, 8), "a"), TypeError, r"x must have a floating dtype \(float16/32/64\), got <U1"),
    (np.full((4, 8), None), TypeError, r"x must have a floating dtype \(float16/32/64\), got object"),
    (np.ones((4, 7)), ValueError, r"x must have shape \(4, 8\) \(the book's size\), got \(4, 7\)"),
    (np.ones((8, 4)), ValueError, r"x must have shape \(4, 8\) \(the book's size\), got \(8, 4\)"),
    (np.ones((1, 4, 8)), ValueError, r"x must have shape \(4, 8\)"),
], ids=["int", "bool", "complex", "str", "object", "last-dim", "transposed", "ndim"])
def test_bad_book_input(x, exc, match):
    with pytest.raises(exc, match=match):
        book.block_forward(x, book.block_init())


def test_book_weights_missing_and_transposed():
    W = book.block_init()
    del W["w_q"]
    with pytest.raises(ValueError, match=r"weights must have exactly the keys .*; missing \['w_q'\]"):
        book.block_forward(np.ones((4, 8)), W)
    F = book.ffn_init()
    F["w1"] = F["w1"].T
    with pytest.raises(ValueError, match=r"weights\['w1'\] must have shape \(12, 6\) \(the book's size\), got \(6, 12\)"):
        book.ffn_forward(np.ones(6), F)


def test_book_stack_needs_four_blocks():
    with pytest.raises(ValueError, match=r"blocks must be a sequence of 4 weight dicts \(the book's stack\), got 3"):
        book.stack_forward(np.ones((4, 8)), book.stack_init()[:3])


@pytest.mark.parametrize("args, match", [
    ((-1,), r"d_model must be in \[1, 2\*\*63 - 1\], got -1"),
    ((0, 32, 1), r"d_model must be in \[1, 2\*\*63 - 1\], got 0"),
    ((2**62, 2**62, 2), r"a size is too large"),
], ids=["neg", "zero", "overflow"])
def test_bad_book_params(args, match):
    with pytest.raises(ValueError, match=match):
        book.block_params(*args)


def test_book_odd_inputs_keep_the_bits():
    W = book.block_init()
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    want = book.block_forward(x, W)
    xf = np.asfortranarray(x)
    xf.flags.writeable = False
    np.testing.assert_array_equal(book.block_forward(xf, W), want)
    np.testing.assert_array_equal(book.block_forward(np.repeat(x, 2, axis=1)[:, ::2], W), want)
    np.testing.assert_array_equal(x, xf)


# ================================================================ the command line

@pytest.mark.parametrize("argv, match", [
    (["depth", "--blocks", "-1"], r"blockc depth: error: argument --blocks: expected an integer in \[1, 100000\], got -1"),
    (["depth", "--blocks", "x"], r"blockc depth: error: argument --blocks: expected a positive integer, got 'x'"),
    (["depth", "--norm", "batch"], r"blockc depth: error: argument --norm: invalid choice: 'batch'"),
    (["depth", "--d-model", "8", "--heads", "3"], r"blockc depth: error: n_heads must divide d_model"),
    (["gpt", "--preset", "gpt9"], r"blockc gpt: error: argument --preset: invalid choice: 'gpt9'"),
    (["gpt", "--params", "--layers", "-2"], r"blockc gpt: error: GPTConfig.layers must be in \[1, 2\*\*40\], got -2"),
    (["figures", "--rand", "posix"], r"blockc figures: error: argument --rand: invalid choice: 'posix'"),
    (["nosuch"], r"blockc: error: argument COMMAND: invalid choice: 'nosuch'"),
], ids=["blocks-neg", "blocks-str", "norm", "heads", "preset", "layers", "rand", "command"])
def test_bad_command_line(argv, match, capsys):
    from blockc.cli import main
    with _exit_or_status() as st:
        status = main(argv)
        st.status = status
    err = capsys.readouterr().err
    assert st.status == 2, err
    assert __import__("re").search(match, err), err
    assert err.count("\n") == 1  # one clear line, no traceback, no usage dump


class _exit_or_status:
    """argparse errors exit(2); errors found after parsing return 2: accept both."""
    status = None

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        if typ is SystemExit:
            self.status = exc.code
            return True
        return False
