"""Hostile and odd input to the dynamic block and the ops (issue 6): BlockConfig,
init_block(s), block_forward, stack_forward and blockc.ops.

Every bad input is its own test and must raise ValueError or TypeError with a message
naming the argument and what was expected, before any C code runs; every odd-but-valid
input must give the NumPy oracle's answer and leave the caller's arrays untouched. The
property test at the end draws random configs, shapes, dtypes and weight mutations, each
predicted valid (must equal the oracle) or invalid (must be refused); nothing may crash.
"""
import numpy as np
import pytest
from hypothesis import event, given, settings, strategies as st

from helpers import PROPERTY_SETTINGS, pick, rnd

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


# ---- bad configs -------------------------------------------------------------------------

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


# ---- bad x -------------------------------------------------------------------------------

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


# ---- bad weights -------------------------------------------------------------------------

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


# ---- odd but valid -----------------------------------------------------------------------

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


# ---- ops ---------------------------------------------------------------------------------

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


# ---- random configs, shapes, dtypes and weights (property test) --------------------------

FLOATS = ("float32", "float64", "float16")


NON_FLOATS = ("int32", "int64", "bool", "complex64", "object", "str")


MUTATIONS = ("none", "drop", "extra", "transpose", "int-dtype", "float64", "fortran", "strided",
             "bias", "reshape")


def _array(shape, dtype, rng):
    a = rng.standard_normal(shape)
    if dtype == "str":
        return a.astype(str)
    if dtype == "object":
        return a.astype(object)
    if dtype == "bool":
        return a > 0
    if dtype.startswith("int"):
        return np.round(a * 3).astype(dtype)
    return a.astype(dtype)


BLOCK_FIELDS = ("d_model", "n_heads", "d_ff", "norm", "placement", "activation", "causal", "eps")


@st.composite
def block_cases(draw):
    broken = draw(st.sampled_from((None,) * len(BLOCK_FIELDS) + BLOCK_FIELDS))
    d = pick(draw, broken, "d_model", st.integers(1, 12), st.integers(-1, 0))
    divisors = [k for k in range(1, d + 1) if d % k == 0] if d >= 1 else [1]
    non_divisors = [k for k in range(2, 8) if d >= 1 and d % k] or [0]
    h = pick(draw, broken, "n_heads", st.sampled_from(divisors), st.sampled_from(non_divisors + [0, -1]))
    f = pick(draw, broken, "d_ff", st.integers(1, 12), st.integers(-1, 0))
    norm = pick(draw, broken, "norm", st.sampled_from(blockc.engine.NORMS), st.just("batch"))
    placement = pick(draw, broken, "placement", st.sampled_from(blockc.engine.PLACEMENTS), st.just("mid"))
    act = pick(draw, broken, "activation", st.sampled_from(blockc.engine.ACTIVATIONS), st.just("silu"))
    causal = pick(draw, broken, "causal", st.booleans(), st.just(1))
    residual = draw(st.booleans())
    eps = pick(draw, broken, "eps", st.sampled_from([1e-5, 0.1, 0.0]),
                st.sampled_from([-1.0, float("nan")]))
    ndim = draw(st.sampled_from([2, 3, 2, 3, 1, 4]))
    lead = draw(st.lists(st.sampled_from([0, 1, 1, 2, 3, 4, 5]), min_size=ndim - 1, max_size=ndim - 1))
    last = draw(st.sampled_from(["d", "d", "d", "other"]))
    dtype = draw(st.sampled_from(FLOATS * 4 + NON_FLOATS))
    mutation = draw(st.sampled_from(("none",) * 6 + MUTATIONS))
    seed = draw(st.integers(0, 2**16))
    return dict(cfg=dict(d_model=d, n_heads=h, d_ff=f, norm=norm, placement=placement,
                         activation=act, causal=causal, residual=residual, eps=eps),
                lead=lead, last=last, dtype=dtype, mutation=mutation, seed=seed)


def _cfg_valid(c):
    d, h, f = c["d_model"], c["n_heads"], c["d_ff"]
    return (d >= 1 and h >= 1 and f >= 1 and d % h == 0 and c["norm"] in blockc.engine.NORMS
            and c["placement"] in blockc.engine.PLACEMENTS and c["activation"] in blockc.engine.ACTIVATIONS
            and isinstance(c["causal"], bool) and c["eps"] >= 0)


def _mutate(W, mutation, rng):
    """Returns (weights, still valid?)."""
    W = dict(W)
    keys = sorted(W)
    key = keys[rng.integers(len(keys))]
    a = W[key]
    if mutation == "drop":
        del W[key]      # every key init_blocks draws for the chapter-24 way is required
        return W, False
    if mutation == "extra":
        W["attn.out.weight"] = a
        return W, False
    if mutation == "transpose":
        W[key] = a.T.copy()
        return W, a.ndim < 2 or a.shape[0] == a.shape[1]
    if mutation == "int-dtype":
        W[key] = np.round(a * 10).astype(np.int32)
        return W, False
    if mutation == "float64":
        W[key] = a.astype(np.float64)
    elif mutation == "fortran":
        W[key] = np.asfortranarray(a)
    elif mutation == "strided":
        W[key] = np.repeat(a, 2, axis=-1)[..., ::2]
    elif mutation == "bias":       # an optional part, correctly shaped
        W["down.bias"] = rng.standard_normal(W["down.weight"].shape[0]).astype(np.float32)
    elif mutation == "reshape":
        W[key] = a.reshape(-1)
        return W, a.ndim == 1
    return W, True


@settings(max_examples=600, **PROPERTY_SETTINGS)
@given(block_cases())
def test_block_forward_never_crashes(case):
    rng = np.random.default_rng(case["seed"])
    c = case["cfg"]
    try:
        cfg = blockc.BlockConfig(**c)
    except (ValueError, TypeError):
        assert not _cfg_valid(c)
        event("bad config refused")
        return
    assert _cfg_valid(c)
    W, w_ok = _mutate(blockc.init_block(cfg, seed=case["seed"]), case["mutation"], rng)
    d = cfg.d_model
    shape = tuple(case["lead"]) + ((d if case["last"] == "d" else d + 1),)
    x = _array(shape, case["dtype"], rng)
    valid = w_ok and len(shape) in (2, 3) and case["last"] == "d" and case["dtype"] in FLOATS
    try:
        y = blockc.block_forward(x, W, cfg)
    except (ValueError, TypeError):
        assert not valid, "a valid input was refused"
        event("bad input refused")
        return
    assert valid, "an invalid input went through"
    event("valid: checked against the oracle" if y.size else "valid: empty")
    assert y.shape == x.shape and y.dtype == np.float32
    if y.size == 0:  # an empty batch or sequence: an empty result, by design
        return
    with np.errstate(all="ignore"):
        want = ref.block_forward(x.astype(np.float32).astype(np.float64), W, cfg)
    np.testing.assert_allclose(y, want, rtol=2e-4, atol=2e-5)
