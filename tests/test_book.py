"""Book mode: the C library, the NumPy oracle and the book's printed figures agree; bad
input is refused by name and odd input keeps the bits (issue 6)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from blockc import book, listings
from blockc import reference
from blockc._native import ffi, lib
from blockc.book.rng import CRand

ref = reference.book
SEEDS = [0, 1, 42, 2**31 + 5, 2**32 - 1]
RANDS = ["msvc", "glibc"]
TOL = dict(rtol=1e-5, atol=1e-6)  # exp/tanh: NumPy's vs the C math library's, a few ulp


def flat(weights, shapes):
    return np.concatenate([np.asarray(weights[k]).ravel() for k in shapes])


# --- the figures the book prints (MSVC rand(), seed 42) -------------------------------
@pytest.mark.parametrize("backend", [book, ref], ids=["C", "oracle"])
def test_ffn_figures(backend):
    out = backend.ffn_forward(book.FFN_INPUT, backend.ffn_init(42, "msvc"))
    assert ", ".join("%+.3f" % v for v in out) == "+0.000, +0.006, -0.006, +0.004, -0.007, -0.002"
    out = backend.ffn_forward(book.FFN_INPUT, backend.ffn_init(42, "glibc"))
    assert ", ".join("%+.3f" % v for v in out) == "+0.004, -0.005, +0.009, -0.006, -0.005, +0.004"
    assert backend.ffn_params(6, 12) == 162


@pytest.mark.parametrize("backend", [book, ref], ids=["C", "oracle"])
def test_block_figures(backend):
    y = backend.block_forward(book.BLOCK_INPUT, backend.block_init(42, "msvc"))
    assert ",".join("%+.2f" % v for v in y[0]) == "+0.97,+0.16,-0.29,+0.54,-0.09,+0.81,+0.31,-0.17"
    assert backend.block_params(8, 32, 1) == {
        "attn": 256, "ffn": 512, "norms": 16, "per_block": 784, "all_blocks": 784}


@pytest.mark.parametrize("backend", [book, ref], ids=["C", "oracle"])
@pytest.mark.parametrize("rand, want", [
    ("msvc", "1.3809 1.3990 1.4163 1.4205 1.4256"),
    ("glibc", "1.3809 1.3935 1.4311 1.4277 1.4008"),
])
def test_stack_figures(backend, rand, want):
    _, norms = backend.stack_forward(book.BLOCK_INPUT, backend.stack_init(42, rand))
    assert " ".join("%.4f" % v for v in norms) == want
    np.testing.assert_array_equal(backend.stack_norms(book.BLOCK_INPUT, backend.stack_init(42, rand)),
                                  norms)


@pytest.mark.parametrize("backend", [book, ref], ids=["C", "oracle"])
def test_real_params_figures(backend):
    rows = {r["name"]: r for r in backend.real_params()}
    assert round(rows["GPT-2 Small"]["per_block"] / 1e6, 1) == 7.1
    assert round(rows["GPT-2 Small"]["all_blocks"] / 1e6, 1) == 85.0
    assert round(rows["GPT-2 Large"]["all_blocks"] / 1e6, 1) == 707.9
    assert round(rows["LLaMA-7B"]["all_blocks"] / 1e9, 1) == 5.0
    assert round(rows["DeepSeek-V3"]["per_block"] / 1e6, 1) == 469.8
    assert round(rows["DeepSeek-V3"]["all_blocks"] / 1e9, 1) == 28.7
    # GPT-2 Small: blocks plus the 50257 x 768 embedding table close to 124M within 0.5%
    assert abs(rows["GPT-2 Small"]["all_blocks"] + 50257 * 768 - 124e6) / 124e6 < 0.005


def test_residual_figure():
    out = book.residual_add(book.RESIDUAL_INPUT, book.RESIDUAL_SUBLAYER)
    assert ", ".join("%.1f" % v for v in out) == "1.1, 1.8, 3.3, 3.9"
    np.testing.assert_array_equal(out, ref.residual_add(book.RESIDUAL_INPUT, book.RESIDUAL_SUBLAYER))


@pytest.mark.parametrize("rand", RANDS)
@pytest.mark.parametrize("backend", [None, ref], ids=["C", "oracle"])
def test_figures_table_agrees(rand, backend):
    figs = listings.figures(rand, backend=backend)
    assert len(figs) == len(listings.BOOK_FIGURES)
    assert all(f.agree is not False for f in figs), [f for f in figs if f.agree is False]
    assert sum(f.agree is True for f in figs) >= 11
    assert "12 of 12 figures agree" in listings.format_figures(listings.figures("msvc"), "msvc")


# --- C library against the oracle, all seeds, both generators ------------------------
@pytest.mark.parametrize("rand", RANDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_init_is_the_listing_draw_order(rand, seed):
    # 128/129: sizeof(Block)/sizeof(float) draws in memory order, blocks one after the other
    draws = CRand(seed, rand).uniform(4 * 768, 0.1)
    blocks = book.stack_init(seed, rand)
    np.testing.assert_array_equal(np.concatenate([flat(b, book.BLOCK_SHAPES) for b in blocks]), draws)
    np.testing.assert_array_equal(flat(book.block_init(seed, rand), book.BLOCK_SHAPES), draws[:768])
    for b, r in zip(blocks, ref.stack_init(seed, rand)):
        np.testing.assert_array_equal(flat(b, book.BLOCK_SHAPES), flat(r, book.BLOCK_SHAPES))
    # 126: b1 = 0 and row i of W1 drawn, row by row; then W2 and b2 the same way
    f = book.ffn_init(seed, rand)
    d = CRand(seed, rand).uniform(144, 0.1)
    np.testing.assert_array_equal(f["w1"], d[:72].reshape(12, 6))
    np.testing.assert_array_equal(f["w2"], d[72:].reshape(6, 12))
    assert not f["b1"].any() and not f["b2"].any()
    assert f["b1"].shape == (12,) and f["b2"].shape == (6,)


@pytest.mark.parametrize("rand", RANDS)
@pytest.mark.parametrize("seed", SEEDS)
def test_forward_matches_oracle(rand, seed):
    f = book.ffn_init(seed, rand)
    np.testing.assert_allclose(book.ffn_forward(book.FFN_INPUT, f),
                               ref.ffn_forward(book.FFN_INPUT, f), **TOL)
    w = book.block_init(seed, rand)
    np.testing.assert_allclose(book.block_forward(book.BLOCK_INPUT, w),
                               ref.block_forward(book.BLOCK_INPUT, w), **TOL)
    blocks = book.stack_init(seed, rand)
    y, n = book.stack_forward(book.BLOCK_INPUT, blocks)
    ry, rn = ref.stack_forward(book.BLOCK_INPUT, blocks)
    np.testing.assert_allclose(y, ry, **TOL)
    np.testing.assert_allclose(n, rn, **TOL)
    assert book.avg_norm(y) == pytest.approx(float(ref.avg_norm(y)), rel=1e-6)
    assert n[-1] == book.avg_norm(y)


finite = st.floats(-4, 4, width=32)


@settings(max_examples=30, deadline=None)
@given(x=arrays(np.float32, (4, 8), elements=finite), seed=st.integers(0, 2**32 - 1),
       scale=st.sampled_from([0.1, 1.0, 3.0]))
def test_block_forward_random_inputs(x, seed, scale):
    # weights of any scale, not only the listing's 0.1
    w = {k: v * np.float32(scale) for k, v in book.block_init(seed, "glibc").items()}
    np.testing.assert_allclose(book.block_forward(x, w), ref.block_forward(x, w), rtol=1e-4, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(x=arrays(np.float32, (6,), elements=finite), seed=st.integers(0, 2**32 - 1))
def test_ffn_forward_random_inputs(x, seed):
    w = book.ffn_init(seed, "msvc")
    w["b1"] = np.linspace(-1, 1, 12, dtype=np.float32)
    w["b2"] = np.linspace(1, -1, 6, dtype=np.float32)
    np.testing.assert_allclose(book.ffn_forward(x, w), ref.ffn_forward(x, w), rtol=1e-5, atol=1e-6)


def test_block_is_near_identity_and_residual_matters():
    # the book: an untrained block moves every component only in the second decimal place
    y = book.block_forward(book.BLOCK_INPUT, book.block_init())
    assert np.abs(y - book.BLOCK_INPUT).max() < 0.1
    zero = {k: np.zeros(s, np.float32) for k, s in book.BLOCK_SHAPES.items()}
    np.testing.assert_array_equal(book.block_forward(book.BLOCK_INPUT, zero), book.BLOCK_INPUT)


def test_float64_input_is_computed_in_float32_and_inputs_are_not_modified():
    w = book.block_init()
    x64 = book.BLOCK_INPUT.astype(np.float64)
    before = {k: v.copy() for k, v in w.items()}
    y = book.block_forward(x64, w)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, book.block_forward(book.BLOCK_INPUT, w))
    np.testing.assert_array_equal(x64, book.BLOCK_INPUT.astype(np.float64))
    for k in w:
        np.testing.assert_array_equal(w[k], before[k])
    # a list of lists works too
    np.testing.assert_array_equal(book.residual_add([1.0, 2.0, 3.0, 4.0], [0.5, 0.5, 0.5, 0.5]),
                                  np.array([1.5, 2.5, 3.5, 4.5], np.float32))


# --- shapes, names and the C entry points' contract -----------------------------------
@pytest.mark.parametrize("backend", [book, ref], ids=["C", "oracle"])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, bool, complex])
def test_non_float_dtypes_are_type_errors_like_ops(backend, dtype):
    # the rule and the message of blockc.ops (and the engine and GPT): floating dtypes only
    x = np.ones(4, dtype)
    with pytest.raises(TypeError, match=r"^x must have a floating dtype \(float16/32/64\), got "):
        backend.residual_add(x, np.zeros(4))
    with pytest.raises(TypeError, match=r"^sublayer must have a floating dtype"):
        backend.residual_add(np.zeros(4), x)
    w = dict(book.ffn_init(), b2=np.ones(6, dtype))
    with pytest.raises(TypeError, match=r"^weights\['b2'\] must have a floating dtype"):
        backend.ffn_forward(book.FFN_INPUT, w)
    with pytest.raises(TypeError, match=r"^x must have a floating dtype"):
        backend.avg_norm(np.ones((4, 8), dtype))


def test_wrong_shapes_are_clear_errors():
    w = book.block_init()
    with pytest.raises(ValueError, match=r"x must have shape \(4, 8\).*got \(4, 9\)"):
        book.block_forward(np.zeros((4, 9)), w)
    bad = dict(w, w_q=np.zeros((2, 4, 9)))
    with pytest.raises(ValueError, match=r"weights\['w_q'\] must have shape \(2, 4, 8\)"):
        book.block_forward(book.BLOCK_INPUT, bad)
    with pytest.raises(ValueError, match=r"missing \['w2'\]"):
        book.block_forward(book.BLOCK_INPUT, {k: v for k, v in w.items() if k != "w2"})
    with pytest.raises(ValueError, match=r"unknown \['gamma'\]"):
        book.block_forward(book.BLOCK_INPUT, dict(w, gamma=np.ones(8)))
    with pytest.raises(ValueError, match=r"x must have shape \(6,\)"):
        book.ffn_forward(np.zeros(8), book.ffn_init())
    with pytest.raises(ValueError, match=r"sublayer must have shape \(4,\)"):
        book.residual_add(np.zeros(4), np.zeros(5))
    with pytest.raises(ValueError, match=r"blocks must be a sequence of 4"):
        book.stack_forward(book.BLOCK_INPUT, book.stack_init()[:3])
    with pytest.raises(ValueError, match=r"blocks\[2\]\['w1'\] must have shape \(32, 8\)"):
        blocks = book.stack_init()
        blocks[2] = dict(blocks[2], w1=np.zeros((8, 32)))
        book.stack_forward(book.BLOCK_INPUT, blocks)
    with pytest.raises(TypeError, match="x must have a floating dtype"):
        book.ffn_forward(np.array(["a"] * 6), book.ffn_init())
    with pytest.raises(ValueError, match="rand must be one of"):
        book.block_init(1, "posix")
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*32\)"):
        book.ffn_init(2**32)
    with pytest.raises(ValueError, match="overflow|too large"):
        book.block_params(2**40, 2**40, 1)
    with pytest.raises(ValueError, match=r"d_model must be in \[1, 2\*\*63 - 1\]"):
        book.block_params(0, 32, 1)


def test_struct_sizes_are_the_listings():
    assert ffi.sizeof("bc_book_block") // 4 == 768  # sizeof(Block)/sizeof(float)
    assert ffi.sizeof("bc_book_block") // 4 + 16 == book.block_params()["per_block"]
    assert ffi.sizeof("bc_book_ffn") // 4 == book.ffn_params() == 162


def _c_block(seed=42):
    g = ffi.new("bc_rng *")
    lib.bc_rng_init(g, lib.BC_RAND_MSVC, seed)
    b = ffi.new("bc_book_block *")
    assert lib.bc_book_block_init(b, g) == lib.BC_OK
    return b


def test_c_block_forward_in_place():
    b = _c_block()
    x = book.BLOCK_INPUT.copy()
    p = ffi.from_buffer("float[]", x)
    assert lib.bc_book_block_forward(p, b, p) == lib.BC_OK
    np.testing.assert_array_equal(x, book.block_forward(book.BLOCK_INPUT, book.block_init()))
    blocks = ffi.new("bc_book_block[4]")
    g = ffi.new("bc_rng *")
    lib.bc_rng_init(g, lib.BC_RAND_MSVC, 42)
    assert lib.bc_book_stack_init(blocks, g) == lib.BC_OK
    x = book.BLOCK_INPUT.copy()
    p = ffi.from_buffer("float[]", x)
    assert lib.bc_book_stack_forward(p, ffi.NULL, blocks, p) == lib.BC_OK  # norms optional
    np.testing.assert_array_equal(x, book.stack_forward(book.BLOCK_INPUT, book.stack_init())[0])


def test_c_ffn_forward_in_place():
    g = ffi.new("bc_rng *")
    lib.bc_rng_init(g, lib.BC_RAND_GLIBC, 3)
    f = ffi.new("bc_book_ffn *")
    assert lib.bc_book_ffn_init(f, g) == lib.BC_OK
    f.b1 = list(np.linspace(-0.5, 0.5, 12))
    x = book.FFN_INPUT.copy()
    p = ffi.from_buffer("float[]", x)
    assert lib.bc_book_ffn_forward(p, f, p) == lib.BC_OK
    w = {k: np.frombuffer(ffi.buffer(getattr(f, k)), np.float32).reshape(s)
         for k, s in book.FFN_SHAPES.items()}
    np.testing.assert_array_equal(x, book.ffn_forward(book.FFN_INPUT, w))
    np.testing.assert_allclose(x, ref.ffn_forward(book.FFN_INPUT, w), **TOL)


def test_c_null_and_bad_generator_write_nothing():
    b = _c_block()
    x = ffi.new("float[32]")
    y = ffi.new("float[32]", [7.0] * 32)
    N = ffi.NULL
    assert lib.bc_book_block_forward(N, b, x) == lib.BC_ENULL
    assert lib.bc_book_block_forward(y, N, x) == lib.BC_ENULL
    assert lib.bc_book_block_forward(y, b, N) == lib.BC_ENULL
    assert lib.bc_book_stack_forward(y, N, N, x) == lib.BC_ENULL
    assert lib.bc_book_ffn_forward(y, N, x) == lib.BC_ENULL
    assert lib.bc_book_residual_add(y, x, N) == lib.BC_ENULL
    assert lib.bc_book_avg_norm(N, x) == lib.BC_ENULL
    assert lib.bc_book_block_params(N, 8, 32, 1) == lib.BC_ENULL
    assert lib.bc_book_ffn_params(N, 6, 12) == lib.BC_ENULL
    assert lib.bc_book_block_init(b, N) == lib.BC_ENULL
    assert list(y) == [7.0] * 32
    g = ffi.new("bc_rng *")
    lib.bc_rng_init(g, lib.BC_RAND_MSVC, 1)
    g.kind = 9  # a corrupt generator: nothing drawn, nothing written
    before = bytes(ffi.buffer(b))
    assert lib.bc_book_block_init(b, g) == lib.BC_EOPTION
    assert bytes(ffi.buffer(b)) == before
    f = ffi.new("bc_book_ffn *", {"b1": [5.0] * 12})
    assert lib.bc_book_ffn_init(f, g) == lib.BC_EOPTION
    assert list(f.b1) == [5.0] * 12
    p = ffi.new("bc_book_params *")
    assert lib.bc_book_block_params(p, -1, 32, 1) == lib.BC_ESIZE
    assert lib.bc_book_block_params(p, 2**62, 1, 1) == lib.BC_EOVERFLOW
    assert lib.bc_book_block_params(p, 7168, 18432, 2**40) == lib.BC_EOVERFLOW
    assert p.per_block == 0
    n = ffi.new("int64_t *")
    assert lib.bc_book_ffn_params(n, 2**62, 2) == lib.BC_EOVERFLOW


# ---- hostile and odd input (issue 6) -----------------------------------------------------

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
