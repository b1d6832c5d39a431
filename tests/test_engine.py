"""The dynamic engine against the chapters' figures, the NumPy oracle and the
chapter exercises (as options)."""
import dataclasses
import itertools
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from helpers import close

import blockc
from blockc import BlockConfig, block_forward, count_parameters, init_block, init_blocks, stack_forward
from blockc.block.engine import PreparedBlock, avg_norm, prepare
from blockc.reference import block as ref
from blockc.experiments.depth import BOOK_INPUT as X_BOOK

BOOK = BlockConfig()
COMBOS = list(itertools.product(("rms", "layer", "none"), ("pre", "post"),
                                ("gelu_tanh", "gelu", "relu", "swiglu"), (False, True), (False, True)))


def random_weights(cfg, rng, scale=0.4, extras=True):
    """Every required part, and with extras each optional part at random."""
    d, f = cfg.d_model, cfg.d_ff
    shapes = {"attn.qkv.weight": (3 * d, d), "attn.proj.weight": (d, d),
              "up.weight": (f, d), "down.weight": (d, f)}
    opt = {"attn.qkv.bias": (3 * d,), "attn.proj.bias": (d,), "up.bias": (f,), "down.bias": (d,)}
    if cfg.activation == "swiglu":
        shapes["gate.weight"] = (f, d)
        opt["gate.bias"] = (f,)
    if cfg.norm != "none":
        opt.update({"ln1.weight": (d,), "ln2.weight": (d,)})
    if cfg.norm == "layer":
        opt.update({"ln1.bias": (d,), "ln2.bias": (d,)})
    W = {k: (rng.standard_normal(s) * scale).astype(np.float32) for k, s in shapes.items()}
    if extras:
        for k, s in opt.items():
            if rng.random() < 0.6:
                W[k] = (rng.standard_normal(s) * (1.0 if k.startswith("ln") else scale)).astype(np.float32)
    return W


# ---- the chapter's figures ---------------------------------------------------------

@pytest.mark.parametrize("rand, norms", [
    ("msvc", ["1.3809", "1.3990", "1.4163", "1.4205", "1.4256"]),    # Figure 24-5
    ("glibc", ["1.3809", "1.3935", "1.4311", "1.4277", "1.4008"]),   # the same listing on glibc
])
def test_stack_reproduces_129_stack_norms(rand, norms):
    hs = stack_forward(X_BOOK, init_blocks(BOOK, 4, 42, rand), BOOK, return_hidden=True)
    assert hs.shape == (5, 4, 8)
    np.testing.assert_array_equal(hs[0], X_BOOK)
    assert ["%.4f" % avg_norm(h) for h in hs] == norms
    # the listing's norm: float32 in order, as the oracle's loop computes it
    assert [avg_norm(h) for h in hs] == [ref.avg_norm(h) for h in hs]
    np.testing.assert_array_equal(stack_forward(X_BOOK, init_blocks(BOOK, 4, 42, rand), BOOK), hs[-1])


def test_block_reproduces_128_block_output_row_the():
    # Figure 24-4: "The" enters as [+1.00, +0.20, -0.30, +0.50, ...] and leaves as
    # [+0.97, +0.16, -0.29, +0.54, ...]; every component moves only in the 2nd decimal
    y = block_forward(X_BOOK, init_block(BOOK, 42, "msvc"), BOOK)
    assert ["%+.2f" % v for v in y[0, :4]] == ["+0.97", "+0.16", "-0.29", "+0.54"]
    assert np.abs(y - X_BOOK).max() < 0.06


def test_block_matches_oracle_on_book_input():
    for rand in ("msvc", "glibc"):
        W = init_block(BOOK, 42, rand)
        close(block_forward(X_BOOK, W, BOOK), ref.block_forward(X_BOOK, W, BOOK))


@pytest.mark.parametrize("activation", ["gelu_tanh", "swiglu"])
@pytest.mark.parametrize("rand", ["msvc", "glibc"])
def test_c_draw_equals_python_generator_draw(rand, activation):
    cfg = BlockConfig(activation=activation)
    got, want = init_blocks(cfg, 3, 7, rand), ref.init_blocks(cfg, 3, 7, rand)
    for g, w in zip(got, want):
        assert sorted(g) == sorted(w)
        for k in w:
            np.testing.assert_array_equal(g[k], w[k])


def test_init_block_is_the_first_of_init_blocks_and_draws_in_sequence():
    W1 = init_block(BOOK, 42)
    Ws = init_blocks(BOOK, 2, 42)
    for k in W1:
        np.testing.assert_array_equal(W1[k], Ws[0][k])
    assert not np.array_equal(Ws[0]["up.weight"], Ws[1]["up.weight"])
    # the listing's order: W_Q, W_K, W_V, W_O, W1, W2; its first draws are W_Q[0][0][:]
    first = blockc.CRand(42, "msvc").uniform(8, 0.1)
    np.testing.assert_array_equal(W1["attn.qkv.weight"][0], first)
    assert set(W1) == {"attn.qkv.weight", "attn.proj.weight", "up.weight", "down.weight"}
    assert all(v.dtype == np.float32 for v in W1.values())


def test_swiglu_draw_keeps_up_and_down_of_the_gelu_block():
    g, s = init_block(BOOK), init_block(BlockConfig(activation="swiglu"))
    for k in ("attn.qkv.weight", "attn.proj.weight", "up.weight", "down.weight"):
        np.testing.assert_array_equal(g[k], s[k])
    assert s["gate.weight"].shape == (32, 8)


def test_normal_init_is_gpt2_style():
    cfg = BlockConfig(d_model=64, n_heads=4, d_ff=256, norm="layer")
    W = init_block(cfg, seed=3, rand="normal")
    assert abs(float(W["up.weight"].std()) - 0.02) < 0.002
    assert abs(float(W["attn.qkv.weight"].mean())) < 0.002
    for k in ("attn.qkv.bias", "attn.proj.bias", "up.bias", "down.bias", "ln1.bias", "ln2.bias"):
        assert not W[k].any()
    np.testing.assert_array_equal(W["ln1.weight"], np.ones(64, np.float32))
    first = np.random.default_rng(3).normal(0.0, 0.02, (3 * 64, 64)).astype(np.float32)
    np.testing.assert_array_equal(W["attn.qkv.weight"], first)
    assert "ln1.weight" not in init_block(BlockConfig(norm="none"), rand="normal")
    assert "ln1.bias" not in init_block(BlockConfig(norm="rms"), rand="normal")


# ---- C against the oracle ----------------------------------------------------------

@pytest.mark.parametrize("norm, placement, activation, causal, residual", COMBOS)
def test_every_option_combination_matches_oracle(norm, placement, activation, causal, residual):
    cfg = BlockConfig(d_model=12, n_heads=3, d_ff=20, norm=norm, placement=placement,
                      activation=activation, causal=causal, residual=residual, eps=1e-4)
    rng = np.random.default_rng(COMBOS.index((norm, placement, activation, causal, residual)))
    Ws = [random_weights(cfg, rng) for _ in range(3)]
    x = rng.standard_normal((2, 5, 12)).astype(np.float32)
    close(block_forward(x, Ws[0], cfg), ref.block_forward(x, Ws[0], cfg), 5e-5)
    check_stack(x, Ws, cfg)


def check_stack(x, Ws, cfg, tol=5e-5):
    """Every block of the C stack against the oracle on the same input, and the
    whole stack against the oracle's. Without norms the activations grow (and
    cancel) freely, so float32 rounding relative to the result grows too: those
    get a 4x looser bound, and the end-to-end comparison a looser one still."""
    if cfg.norm == "none":
        tol = 4 * tol
    hs = stack_forward(x, Ws, cfg, return_hidden=True)
    assert hs.shape == (len(Ws) + 1,) + np.shape(x)
    np.testing.assert_array_equal(hs[0], x)
    for i, W in enumerate(Ws):
        close(hs[i + 1], ref.block_forward(hs[i], W, cfg), tol)
    close(hs[-1], ref.stack_forward(x, Ws, cfg)[-1], 2e-3)
    np.testing.assert_array_equal(stack_forward(x, Ws, cfg), hs[-1])


@st.composite
def cases(draw):
    n_heads = draw(st.integers(1, 3))
    d_head = draw(st.integers(1, 4))
    cfg = BlockConfig(d_model=n_heads * d_head, n_heads=n_heads, d_ff=draw(st.integers(1, 9)),
                      norm=draw(st.sampled_from(("rms", "layer", "none"))),
                      placement=draw(st.sampled_from(("pre", "post"))),
                      activation=draw(st.sampled_from(("gelu_tanh", "gelu", "relu", "swiglu"))),
                      causal=draw(st.booleans()), residual=draw(st.booleans()),
                      eps=draw(st.sampled_from((1e-5, 1e-3, 0.5))))
    shape = (draw(st.integers(1, 6)), cfg.d_model)
    if draw(st.booleans()):
        shape = (draw(st.integers(1, 3)),) + shape
    return cfg, shape, draw(st.integers(0, 2**32 - 1)), draw(st.integers(1, 3))


@settings(max_examples=80, deadline=None, derandomize=True)
@given(cases())
def test_property_c_equals_oracle(case):
    cfg, shape, seed, n_blocks = case
    rng = np.random.default_rng(seed)
    Ws = [random_weights(cfg, rng) for _ in range(n_blocks)]
    x = rng.standard_normal(shape).astype(np.float32)
    y = block_forward(x, Ws[0], cfg)
    assert y.shape == x.shape and y.dtype == np.float32
    # layer norm of width 1 or 2 amplifies rounding: compare those in float32 terms
    tol = 2e-4 if cfg.d_model <= 2 or cfg.norm == "none" else 5e-5
    close(y, ref.block_forward(x, Ws[0], cfg), tol)
    np.testing.assert_array_equal(stack_forward(x, Ws, cfg, return_hidden=True)[1], y)
    check_stack(x, Ws, cfg, tol if cfg.d_model <= 2 else 5e-5)


def test_batch_is_independent_sequences():
    cfg = BlockConfig(d_model=16, n_heads=4, d_ff=24, causal=True)
    W = init_block(cfg, 5)
    x = np.random.default_rng(0).standard_normal((3, 7, 16)).astype(np.float32)
    y = block_forward(x, W, cfg)
    for b in range(3):
        np.testing.assert_array_equal(block_forward(x[b], W, cfg), y[b])


def test_single_position_single_head_width_one():
    cfg = BlockConfig(d_model=1, n_heads=1, d_ff=1, norm="layer")
    W = init_block(cfg, 1, "normal")
    x = np.array([[0.25]], np.float32)
    close(block_forward(x, W, cfg), ref.block_forward(x, W, cfg))


# ---- the exercises, as options --------------------------------------------------------

def test_ex1_no_residual_loses_the_input():
    cfg = BlockConfig(residual=False)
    hs = stack_forward(X_BOOK, init_blocks(cfg, 4), cfg, return_hidden=True)
    for got, want in zip(hs, ref.stack_forward(X_BOOK, init_blocks(cfg, 4), cfg)):
        close(got, want)
    # with residuals the block is near identity; without, the output is the tiny sublayer sum
    assert avg_norm(hs[1]) < 0.1 * avg_norm(hs[0])
    assert np.abs(hs[1] - X_BOOK).max() > 0.9


def test_ex2_no_norm_matches_oracle_and_differs_from_rms():
    cfg = BlockConfig(norm="none")
    Ws = init_blocks(cfg, 4)
    hs = stack_forward(X_BOOK, Ws, cfg, return_hidden=True)
    for got, want in zip(hs, ref.stack_forward(X_BOOK, Ws, cfg)):
        close(got, want)
    assert not np.allclose(hs[-1], stack_forward(X_BOOK, Ws, BOOK), atol=1e-3)


def test_ex3_relu_changes_the_output_a_little():
    cfg = BlockConfig(activation="relu")
    W = init_block(cfg)
    y = block_forward(X_BOOK, W, cfg)
    close(y, ref.block_forward(X_BOOK, W, cfg))
    d = np.abs(y - block_forward(X_BOOK, W, BOOK)).max()
    assert 1e-4 < d < 0.1


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_ex4_causal_mask_hides_the_future(placement):
    cfg = BlockConfig(causal=True, placement=placement)
    W = init_block(cfg)
    x2 = X_BOOK.copy()
    x2[3] += 1.0
    y1, y2 = block_forward(X_BOOK, W, cfg), block_forward(x2, W, cfg)
    np.testing.assert_array_equal(y1[:3], y2[:3])      # earlier positions never see position 3
    assert not np.array_equal(y1[3], y2[3])
    full = dataclasses.replace(cfg, causal=False)
    assert not np.array_equal(block_forward(X_BOOK, W, full)[0], block_forward(x2, W, full)[0])
    close(y1, ref.block_forward(X_BOOK, W, cfg))


def test_ex5_parameter_count_of_six_blocks():
    cfg = BlockConfig(d_model=256, n_heads=4, d_ff=1024)
    # per block 4*256^2 + 2*256*1024 + 2*256 = 262144 + 524288 + 512 = 786944; x 6
    assert count_parameters(cfg) == 786944
    assert count_parameters(cfg, n_blocks=6) == 6 * (4 * 256**2 + 2 * 256 * 1024 + 2 * 256) == 4721664
    # the weights the chapter-24 draw creates are those minus the two gains it never stores
    Ws = init_blocks(cfg, 6)
    assert sum(a.size for W in Ws for a in W.values()) == 4721664 - 6 * 2 * 256
    # with every bias and gain (the GPT-2 draw creates them all) the count is the arrays' size
    for c in (cfg, dataclasses.replace(cfg, norm="layer"), dataclasses.replace(cfg, activation="swiglu")):
        Ws = init_blocks(c, 2, rand="normal")
        assert sum(a.size for W in Ws for a in W.values()) == count_parameters(c, bias=True, n_blocks=2)


def test_ex6_swiglu_costs_a_third_matrix():
    cfg = BlockConfig(d_model=256, n_heads=4, d_ff=1024, activation="swiglu")
    assert count_parameters(cfg) == 786944 + 256 * 1024 == 1049088
    assert count_parameters(cfg, n_blocks=6) == 6294528
    assert count_parameters(BlockConfig(activation="swiglu")) == 784 + 8 * 32
    # and the forward is down(silu(gate(x)) * up(x)), checked piece by piece with blockc.ops
    W = init_block(BlockConfig(activation="swiglu", norm="none", residual=False))
    x = X_BOOK
    q, k, v = np.split(blockc.ops.linear(x, W["attn.qkv.weight"]), 3, axis=-1)
    heads = lambda a: a.reshape(4, 2, 4).transpose(1, 0, 2)
    a = blockc.ops.attention(heads(q), heads(k), heads(v)).transpose(1, 0, 2).reshape(4, 8)
    a = blockc.ops.linear(a, W["attn.proj.weight"])
    hid = blockc.ops.swiglu(blockc.ops.linear(a, W["gate.weight"]), blockc.ops.linear(a, W["up.weight"]))
    want = blockc.ops.linear(hid, W["down.weight"])
    got = block_forward(x, W, BlockConfig(activation="swiglu", norm="none", residual=False))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_gpt2_block_count_is_12d2_plus_13d():
    for d in (8, 768):
        cfg = BlockConfig(d_model=d, n_heads=2, d_ff=4 * d, norm="layer")
        assert count_parameters(cfg, bias=True) == 12 * d * d + 13 * d
    assert count_parameters(BOOK) == 784          # 128_Block: 256 + 512 + 16


def _zero_branches(W):
    W = dict(W)
    W["attn.proj.weight"] = np.zeros_like(W["attn.proj.weight"])
    W["down.weight"] = np.zeros_like(W["down.weight"])
    return W


def test_ch6_ex3_zeroed_branches_identity_only_for_pre_norm():
    for norm in ("rms", "layer"):
        pre = BlockConfig(norm=norm)
        post = dataclasses.replace(pre, placement="post")
        W = _zero_branches(init_block(pre))
        np.testing.assert_array_equal(block_forward(X_BOOK, W, pre), X_BOOK)
        y = block_forward(X_BOOK, W, post)
        assert np.abs(y - X_BOOK).max() > 0.1           # post-norm renormalises the stream
        want = ref.rmsnorm(ref.rmsnorm(X_BOOK.astype(np.float64))) if norm == "rms" else \
            ref.layernorm(ref.layernorm(X_BOOK.astype(np.float64)))
        close(y, want)


def test_ch6_ex4_exact_gelu_block():
    cfg = BlockConfig(activation="gelu", norm="layer")
    W = init_block(cfg, rand="normal")
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32) * 3
    y = block_forward(x, W, cfg)
    close(y, ref.block_forward(x, W, cfg))
    assert np.abs(y - block_forward(x, W, dataclasses.replace(cfg, activation="gelu_tanh"))).max() < 1e-3


# ---- the Python API's contract -----------------------------------------------------------

def test_inputs_never_modified_and_every_layout_works():
    cfg = BlockConfig(d_model=8, n_heads=2, d_ff=12, norm="layer")
    W = init_block(cfg, rand="normal")
    x = np.random.default_rng(2).standard_normal((2, 5, 8)).astype(np.float32)
    want = block_forward(x, W, cfg)
    ro = x.copy()
    ro.flags.writeable = False
    strided = np.zeros((2, 5, 16), np.float32)
    strided[:, :, ::2] = x
    variants = [np.asfortranarray(x), ro, strided[:, :, ::2], x.astype(np.float64), x.tolist()]
    for v in variants:
        before = np.array(v, copy=True)
        got = block_forward(v, W, cfg)
        np.testing.assert_array_equal(np.asarray(v), before)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        assert got.dtype == np.float32 and got.shape == x.shape
    # weights: read-only, Fortran-order and float64 weights work and are left alone
    W2 = {k: np.asfortranarray(v.astype(np.float64)) for k, v in W.items()}
    snap = {k: v.copy() for k, v in W2.items()}
    np.testing.assert_allclose(block_forward(x, W2, cfg), want, rtol=1e-6, atol=1e-6)
    for k in W2:
        np.testing.assert_array_equal(W2[k], snap[k])
    y = block_forward(x, W, cfg)
    assert y is not x and not np.shares_memory(y, x)


def test_plain_dict_sees_every_change():
    W = init_block(BOOK)
    y1 = block_forward(X_BOOK, W, BOOK)
    W["up.weight"] = W["up.weight"] * 2          # a new array
    y2 = block_forward(X_BOOK, W, BOOK)
    assert not np.array_equal(y1, y2)
    np.testing.assert_allclose(y2, ref.block_forward(X_BOOK, W, BOOK), rtol=1e-5, atol=1e-6)
    W["down.weight"][:] = 0                      # in place
    y3 = block_forward(X_BOOK, W, BOOK)
    np.testing.assert_allclose(y3, ref.block_forward(X_BOOK, W, BOOK), rtol=1e-5, atol=1e-6)


def test_prepared_block_is_a_frozen_copy():
    W = init_block(BOOK)
    P = prepare(W, BOOK)
    assert isinstance(P, PreparedBlock) and P.cfg is BOOK
    y = block_forward(X_BOOK, P, BOOK)
    np.testing.assert_array_equal(y, block_forward(X_BOOK, W, BOOK))
    # nothing done to the dict or its arrays afterwards reaches the prepared block
    W["up.weight"] = W["up.weight"] * 2
    W["down.weight"][:] = 0
    np.testing.assert_array_equal(block_forward(X_BOOK, P, BOOK), y)
    with pytest.raises(ValueError, match="read-only"):
        P.arrays["up.weight"][0, 0] = 1.0
    with pytest.raises(TypeError):
        P.arrays["up.weight"] = np.zeros((32, 8), np.float32)
    with pytest.raises(AttributeError, match="immutable"):
        P._c = None
    with pytest.raises(ValueError, match=r"W was prepared for BlockConfig\(d_model=8.*activation='relu'"):
        block_forward(X_BOOK, P, BlockConfig(activation="relu"))
    # stack_forward takes prepared blocks too, and they pickle by their arrays
    import pickle
    Ws = init_blocks(BOOK, 4)
    Ps = [pickle.loads(pickle.dumps(prepare(w, BOOK))) for w in Ws]
    np.testing.assert_array_equal(stack_forward(X_BOOK, Ps, BOOK), stack_forward(X_BOOK, Ws, BOOK))


def test_threads_share_nothing_mutable():
    cfgs = [BlockConfig(d_model=16, n_heads=4, d_ff=32, causal=c) for c in (False, True)]
    Ws = [init_block(c, 3) for c in cfgs]
    xs = [np.random.default_rng(i).standard_normal((2, 9, 16)).astype(np.float32) for i in range(2)]
    want = [block_forward(xs[i], Ws[i], cfgs[i]) for i in range(2)]
    bad = []

    def work(i):
        for _ in range(200):
            if not np.array_equal(block_forward(xs[i], Ws[i], cfgs[i]), want[i]):
                bad.append(i)

    ts = [threading.Thread(target=work, args=(i % 2,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad


def test_config_is_a_plain_value():
    import copy
    import pickle
    cfg = BlockConfig(d_model=12, n_heads=3, norm="layer", causal=True)
    for c in (pickle.loads(pickle.dumps(cfg)), copy.deepcopy(cfg), copy.copy(cfg)):
        assert c == cfg and hash(c) == hash(cfg) and c is not cfg
        W = init_block(c)
        np.testing.assert_array_equal(block_forward(np.ones((2, 12), np.float32), W, c),
                                      block_forward(np.ones((2, 12), np.float32), W, cfg))
    assert dataclasses.asdict(cfg) == dict(d_model=12, n_heads=3, d_ff=32, norm="layer",
                                           placement="pre", activation="gelu_tanh", causal=True,
                                           residual=True, eps=1e-5)
    assert dataclasses.replace(cfg, norm="rms").norm == "rms"
    with pytest.raises(ValueError, match="norm"):
        dataclasses.replace(cfg, norm="rsm")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d_model = 16
    assert "BlockConfig(d_model=12, n_heads=3, d_ff=32" in repr(cfg)


def test_empty_batch_and_empty_stack():
    x = np.zeros((0, 4, 8), np.float32)
    assert block_forward(x, init_block(BOOK), BOOK).shape == (0, 4, 8)
    np.testing.assert_array_equal(stack_forward(X_BOOK, [], BOOK), X_BOOK)
    assert stack_forward(X_BOOK, [], BOOK, return_hidden=True).shape == (1, 4, 8)


# ---- bad input ------------------------------------------------------------------------

# bad configs: tests/test_block_inputs.py (test_bad_block_config)


def test_bad_weights_name_the_key_and_shape():
    W = dict(init_block(BOOK))
    cases = [
        ({k: v for k, v in W.items() if k != "up.weight"}, r"missing 'up.weight', expected shape \(d_ff, d_model\) = \(32, 8\)"),
        ({**W, "down.weight": W["down.weight"].T}, r"'down.weight'\] must have shape \(d_model, d_ff\) = \(8, 32\), got \(32, 8\) \(transposed\?\)"),
        ({**W, "attn.qkv.weight": W["attn.qkv.weight"][:16]}, r"'attn.qkv.weight'\] must have shape \(3\*d_model, d_model\) = \(24, 8\)"),
        ({**W, "attn.qkv.bias": np.zeros(8, np.float32)}, r"'attn.qkv.bias'\] must have shape \(3\*d_model,\) = \(24,\)"),
        ({**W, "ln1.weight": np.ones((1, 8), np.float32)}, r"'ln1.weight'\] must have shape"),
        ({**W, "mlp.fc.weight": W["up.weight"]}, r"unknown weight 'mlp.fc.weight'; accepted keys"),
        ({**W, "gate.weight": W["up.weight"]}, r"'gate.weight' is only used with activation='swiglu'"),
        ({**W, "ln1.bias": np.zeros(8, np.float32)}, r"'ln1.bias' .* only used with norm='layer'"),
    ]
    for bad, match in cases:
        with pytest.raises(ValueError, match=match):
            block_forward(X_BOOK, bad, BOOK)
    with pytest.raises(ValueError, match="norm='none'"):
        block_forward(X_BOOK, {**W, "ln2.weight": np.ones(8, np.float32)}, BlockConfig(norm="none"))
    with pytest.raises(ValueError, match=r"missing 'gate.weight'"):
        block_forward(X_BOOK, W, BlockConfig(activation="swiglu"))
    with pytest.raises(TypeError, match=r"W\['up.weight'\] must have a floating dtype"):
        block_forward(X_BOOK, {**W, "up.weight": W["up.weight"].astype(np.int32)}, BOOK)
    with pytest.raises(TypeError, match="mapping"):
        block_forward(X_BOOK, list(W.values()), BOOK)
    with pytest.raises(ValueError, match=r"Ws\[1\] is missing 'down.weight'"):
        stack_forward(X_BOOK, [W, {k: v for k, v in W.items() if k != "down.weight"}], BOOK)


@pytest.mark.parametrize("bad", [np.ones((4, 8), int), np.ones((4, 8), bool), np.ones((4, 8), complex),
                                 np.full((4, 8), "a"), np.full((4, 8), None, dtype=object)])
def test_non_float_inputs_are_type_errors(bad):
    with pytest.raises(TypeError, match="x must have a floating dtype|x must be an array"):
        block_forward(bad, init_block(BOOK), BOOK)


def test_bad_shapes_and_arguments():
    W = init_block(BOOK)
    for shape in [(8,), (4, 7), (2, 4, 9), (1, 2, 4, 8)]:
        with pytest.raises(ValueError, match=r"x must have shape \(T, d_model\) or \(B, T, d_model\)|x must have shape \(T, 8\)"):
            block_forward(np.zeros(shape, np.float32), W, BOOK)
    with pytest.raises(TypeError, match="cfg must be a blockc.BlockConfig"):
        block_forward(X_BOOK, W, {"d_model": 8})
    with pytest.raises(TypeError, match="return_hidden"):
        stack_forward(X_BOOK, [W], BOOK, return_hidden="yes")
    with pytest.raises(TypeError, match="Ws must be a sequence"):
        stack_forward(X_BOOK, W, BOOK)
    with pytest.raises(ValueError, match="rand must be one of"):
        init_blocks(BOOK, 2, rand="mt19937")
    with pytest.raises(ValueError, match="seed"):
        init_blocks(BOOK, 2, seed=-1)
    with pytest.raises(TypeError, match="seed"):
        init_block(BOOK, seed=1.5)
    with pytest.raises(ValueError, match=r"n must be in \[0, 2\*\*40\], got -1"):
        init_blocks(BOOK, -1)
    with pytest.raises(ValueError, match="exceed"):
        init_blocks(BlockConfig(d_model=4096, n_heads=32, d_ff=16384), 10**6)
    with pytest.raises(TypeError, match="bias"):
        count_parameters(BOOK, bias="yes")


def test_c_block_entry_points_validate_and_write_nothing():
    from blockc._native import ffi, lib
    cfg = ffi.new("bc_block_config *", {"d_model": 8, "n_heads": 2, "d_ff": 32, "eps": 1e-5,
                                          "residual": 1})
    W = init_block(BOOK)
    keep = {k: ffi.from_buffer("float[]", v) for k, v in W.items()}
    w = ffi.new("bc_block_weights *", {"qkv_w": keep["attn.qkv.weight"], "proj_w": keep["attn.proj.weight"],
                                        "up_w": keep["up.weight"], "down_w": keep["down.weight"]})
    n = ffi.new("size_t *")
    assert lib.bc_block_workspace_size(n, cfg, 1, 4) == lib.BC_OK
    work = ffi.new("float[]", n[0])
    x = ffi.from_buffer("float[]", X_BOOK.copy())
    y = ffi.new("float[]", 32)

    def call(c=cfg, ww=w, b=1, t=4, wk=work, wl=n[0], out=y):
        return lib.bc_block_forward(out, x, c, ww, b, t, wk, wl)

    assert call(c=ffi.NULL) == lib.BC_ENULL
    assert call(ww=ffi.NULL) == lib.BC_ENULL
    assert call(wk=ffi.NULL) == lib.BC_ENULL
    assert call(t=0) == lib.BC_ESIZE
    assert call(wl=n[0] - 1) == lib.BC_EWORKSPACE
    assert call(b=2**62) == lib.BC_EOVERFLOW
    assert call(out=x + 1) == lib.BC_EALIAS
    assert call(wk=x) == lib.BC_EALIAS
    for field, value, status in [("n_heads", 3, lib.BC_EHEADS), ("d_ff", 0, lib.BC_ESIZE),
                                 ("norm", 7, lib.BC_EOPTION), ("placement", -1, lib.BC_EOPTION),
                                 ("activation", lib.BC_ACT_SILU, lib.BC_EOPTION),
                                 ("eps", float("nan"), lib.BC_EOPTION), ("d_model", 2**40, lib.BC_EOVERFLOW)]:
        bad = ffi.new("bc_block_config *", cfg[0])
        setattr(bad, field, value)
        assert call(c=bad) == status, field
        assert lib.bc_block_workspace_size(n, bad, 1, 4) == status, field
    w.up_w = ffi.NULL
    assert call() == lib.BC_ENULL
    w.up_w = y                                  # a weight inside the output
    assert call() == lib.BC_EALIAS
    assert list(y) == [0.0] * 32                # nothing written on any error
    w.up_w = keep["up.weight"]
    hid = ffi.new("float[]", 32)
    assert lib.bc_stack_forward(y, hid, x, cfg, w, 0, 1, 4, work, n[0]) == lib.BC_ESIZE
    assert lib.bc_stack_forward(y, y, x, cfg, w, 1, 1, 4, work, n[0]) == lib.BC_EALIAS
    assert lib.bc_stack_forward(y, work, x, cfg, w, 1, 1, 4, work, n[0]) == lib.BC_EALIAS
    assert list(y) == [0.0] * 32 and list(hid) == [0.0] * 32
    assert lib.bc_stack_forward(y, hid, x, cfg, w, 1, 1, 4, work, n[0]) == lib.BC_OK
    want = block_forward(X_BOOK, W, BOOK).ravel().tolist()
    assert list(y) == want and list(hid) == want
    assert lib.bc_block_forward(x, x, cfg, w, 1, 4, work, n[0]) == lib.BC_OK   # in place
    assert list(x) == want
