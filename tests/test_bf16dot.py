"""bfloat16i: bfloat16's weights multiplied by bfloat16 dot products (x rounded to
bfloat16 once per product; vdpbf16ps where the CPU has AVX512_BF16).

The C kernels against the NumPy oracle (blockc.reference.bf16dot) bit for bit on
every instruction set and on the FMA copy that stands in for vdpbf16ps; subnormal
products and sums flushed as vdpbf16ps flushes them; the same bits for any number
of rows; the model's accuracy budget (mean KL from float32) beside bfloat16's; GGUF.
Threads, the KV cache and the weights against bfloat16's: test_intdot.py's ROUNDED."""
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import bits, mean_kl, rnd

import blockc
from blockc import GPT, GPTConfig, ops
from blockc.reference import bf16dot, quant

ISAS = ("generic", "avx2", "avx512")
RUNS = ISAS[: ISAS.index(blockc.best_isa()) + 1]


def _hard_x(n, c, seed):
    """Activations with the rounding's corner cases: bfloat16 ties (1 + 2^-8 rounds
    down to even, 1 + 3 * 2^-8 up), subnormals (stored as zeros), signed zeros, and
    values whose products with the weights fall below FLT_MIN."""
    x = rnd(n, c, seed=seed)
    if c >= 8:
        x[0, :4] = np.float32([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 1 - 2 ** -9])
        x[min(1, n - 1), 4] = np.float32(1e-39)
        x[min(1, n - 1), 5] = np.float32(-0.0)
        x[n - 1, 6:8] = np.float32([3e-38, -2e-37])
    return x


SHAPES = [(1, 1, 3), (1, 5, 3), (1, 64, 16), (2, 33, 17), (3, 96, 40), (4, 100, 65),
          (7, 300, 40), (1, 521, 33), (20, 257, 130), (130, 96, 31), (9, 1536, 70)]


@pytest.mark.parametrize("n,c,oc", SHAPES)
def test_the_product_is_the_oracle_bit_for_bit(isa, n, c, oc):
    x, w, b = _hard_x(n, c, seed=n + c), rnd(oc, c, seed=2) * np.float32(0.1), rnd(oc, seed=3)
    p = ops.pack(w, "bfloat16i")
    y = ops.linear(x, p, b)
    np.testing.assert_array_equal(bits(y), bits(bf16dot.linear_bfloat16i(x, w, b)))
    # decoding == prefill: a row alone gets the bits it gets among many
    for i in range(min(n, 5)):
        np.testing.assert_array_equal(bits(ops.linear(x[i:i + 1], p, b)), bits(y[i:i + 1]))
    # no bias: acc itself
    np.testing.assert_array_equal(bits(ops.linear(x, p)), bits(bf16dot.linear_bfloat16i(x, w)))


def test_x_rounds_to_infinity_past_bfloat16s_largest_and_keeps_nan_and_infinity(isa):
    """Each row of x holds one value at the edge of the range (in the vector part of
    the row and in its tail); w the identity, so output j is x's column j as
    rounded: past bfloat16's largest finite (0x7f7f) it is infinite, NaN stays NaN
    (a NaN whose high half alone would read as infinity too)."""
    big = np.uint32([0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF, 0x7F800000, 0x7FC00000, 0xFF7F8000,
                     0xFF800000, 0x00800000, 0x007FFFFF, 0x7F800001, 0xFFFFFFFF]).view(np.float32)
    c = 40
    x = np.tile(rnd(1, c, seed=11), (2 * big.size, 1))
    cols = [3 + i % 20 for i in range(big.size)] + [c - 1 - i % 8 for i in range(big.size)]
    for i, col in enumerate(cols):
        x[i, col] = big[i % big.size]
    with np.errstate(invalid="ignore", over="ignore"):
        y = ops.linear(x, ops.pack(np.eye(c, dtype=np.float32), "bfloat16i"))
        want = bf16dot.round_bf16(x)
    got = y[np.arange(len(cols)), cols]
    exp = want[np.arange(len(cols)), cols]
    assert np.isinf(exp).sum() == 10 and np.isnan(exp).sum() == 6  # the cases are there
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exp))
    ok = ~np.isnan(exp)
    np.testing.assert_array_equal(bits(got[ok]), bits(exp[ok]))


def _tiny(seed):
    """x and w whose products and partial sums lie around FLT_MIN (2^-126), a tenth of
    x subnormal: where flushing decides the bits."""
    rng = np.random.default_rng(seed)
    n, c, oc = 5, 77, 35
    x = (rng.standard_normal((n, c)) * 2.0 ** rng.integers(-70, -55, (n, c))).astype(np.float32)
    w = (rng.standard_normal((oc, c)) * 2.0 ** rng.integers(-70, -60, (oc, c))).astype(np.float32)
    x[rng.random((n, c)) < 0.1] = np.float32(1e-39)
    return x, w


def test_subnormal_products_and_sums_are_flushed_as_vdpbf16ps_flushes_them(isa):
    for seed in range(4):
        x, w = _tiny(seed)
        want = bf16dot.linear_bfloat16i(x, w)
        assert 0 < np.count_nonzero(want) < want.size or seed  # some flushed, most not
        np.testing.assert_array_equal(bits(ops.linear(x, ops.pack(w, "bfloat16i"))), bits(want))
    # the oracle flushes: without it the same chain keeps a subnormal
    assert bf16dot.ftz(np.float32(1e-39)) == 0 and bf16dot.ftz(np.float32(-1e-39)).tobytes() \
        == np.float32(-0.0).tobytes()


def test_every_instruction_set_and_the_fma_copy_give_the_same_bits(tmp_path):
    """Each instruction set in turn, and AVX-512's FMA copy (what a CPU without
    AVX512_BF16 runs; BLOCKC_AVX512BF16=0 asks for it) in a subprocess, on hard and
    on tiny values, decoding and GEMM."""
    x, w = rnd(37, 700, seed=8), rnd(90, 700, seed=9)
    tx, tw = _tiny(9)
    p, tp = ops.pack(w, "bfloat16i"), ops.pack(tw, "bfloat16i")
    before = blockc.get_isa()
    try:
        got = {}
        for isa in RUNS:
            blockc.set_isa(isa)
            got[isa] = np.concatenate([ops.linear(x, p).ravel(), ops.linear(x[:2], p).ravel(),
                                       ops.linear(tx, tp).ravel()])
    finally:
        blockc.set_isa(before)
    assert "generic" in got
    for isa, y in got.items():
        np.testing.assert_array_equal(bits(y), bits(got["generic"]), err_msg=isa)
    if "avx512" not in RUNS:
        return
    for name, a in (("x", x), ("w", w), ("tx", tx), ("tw", tw)):
        np.save(tmp_path / f"{name}.npy", a)
    code = ("import numpy as np; from blockc import ops\n"
            f"L = lambda n: np.load({str(tmp_path)!r} + '/' + n + '.npy')\n"
            "p, tp = ops.pack(L('w'), 'bfloat16i'), ops.pack(L('tw'), 'bfloat16i')\n"
            "y = np.concatenate([ops.linear(L('x'), p).ravel(), ops.linear(L('x')[:2], p).ravel(),"
            " ops.linear(L('tx'), tp).ravel()])\n"
            f"np.save({str(tmp_path / 'y.npy')!r}, y)")
    env = dict(os.environ, BLOCKC_ISA="avx512", BLOCKC_AVX512BF16="0")
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    np.testing.assert_array_equal(bits(np.load(tmp_path / "y.npy")), bits(got["generic"]))


def test_the_weights_are_bfloat16s_and_the_error_is_the_activations():
    w, x = rnd(64, 512, seed=4) * np.float32(0.05), rnd(8, 512, seed=5)
    w[0, 0] = np.float32(1e-39)  # a subnormal weight is stored as zero
    p = ops.pack(w, "bfloat16i")
    want = quant.bfloat16(w)
    want[0, 0] = 0.0
    np.testing.assert_array_equal(bits(p.unpack()), bits(want))
    exact = x.astype(np.float64) @ want.T.astype(np.float64)
    rel = np.sqrt(np.mean((ops.linear(x, p) - exact) ** 2) / np.mean(exact ** 2))
    assert 3e-4 < rel < 3e-3, rel          # x rounded to 8 bits of significand: about 1e-3
    rel16 = np.sqrt(np.mean((ops.linear(x, ops.pack(w, "bfloat16")) - exact) ** 2)
                    / np.mean(exact ** 2))
    assert rel16 < 1e-6, rel16


def test_a_non_finite_activation_makes_its_rows_outputs_non_finite():
    w = rnd(20, 64, seed=6)
    p = ops.pack(w, "bfloat16i")
    x = rnd(3, 64, seed=7)
    x[1, 40] = np.inf
    x[2, 3] = np.nan
    y = ops.linear(x, p)
    assert np.isfinite(y[0]).all() and not np.isfinite(y[1]).any() and np.isnan(y[2]).all()
    np.testing.assert_array_equal(bits(y[0]), bits(bf16dot.linear_bfloat16i(x[:1], w)[0]))


def test_pack_refuses_more_columns_than_a_rounded_row_holds():
    with pytest.raises(ValueError, match="bfloat16i holds at most 65536 columns"):
        ops.pack(np.zeros((1, 65537), np.float32), "bfloat16i")
    assert ops.pack(np.zeros((1, 65536), np.float32), "bfloat16i").unpack().shape == (1, 65536)


def test_the_oracle_flushes_and_rounds_as_documented():
    one = np.float32(1.0)
    # ties to even (1 + 3 * 2^-8 lies halfway between 1 + 2^-7, odd, and 1 + 2^-6), then
    # subnormals flushed to a zero of their sign
    got = bf16dot.round_bf16(np.float32([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1e-39, -1e-39]))
    np.testing.assert_array_equal(bits(got), bits(np.float32([1.0, 1 + 2 ** -6, 0.0, -0.0])))
    # one pair: the odd column first: (0 + 2^-9 * 1) + 1 * 1 = 1 + 2^-9 ... rounded once each
    y = bf16dot.linear_bfloat16i(np.float32([[1.0, 2 ** -9]]), np.float32([[1.0, 1.0]]))
    assert y[0, 0] == one + np.float32(2 ** -9)


# ---- the model (its prompt, cache, rows, threads and weights: test_intdot.py's ROUNDED) --

LLAMA = GPTConfig(vocab=300, context=64, width=96, heads=3, layers=2, kv_heads=1, d_ff=160,
                  tie_weights=True, norm="rms", activation="swiglu", positions="rope",
                  qkv_bias=False, out_bias=False, mlp_bias=False)


def test_accuracy_budget_mean_kl_from_float32():
    """test_intdot's model (a small Llama, weights of std 0.1), 3 x 48 tokens: mean KL
    from float32 measured bfloat16 2.5e-5, bfloat16i 4.3e-5, q8_0 2.6e-4. Budget:
    bfloat16i more than bfloat16 (the rounded activations cost), at most 3x bfloat16's
    and half q8_0's."""
    base = GPT.random(LLAMA, seed=11)
    sd = {k: (v * np.float32(5.0) if v.ndim == 2 else v) for k, v in base.state_dict().items()}
    m = GPT.from_state_dict(sd, LLAMA)
    ids = np.random.default_rng(12).integers(0, LLAMA.vocab, size=(3, 48))
    ref = m(ids)
    kl = {dt: mean_kl(ref, m.astype(dt)(ids)) for dt in ("bfloat16", "bfloat16i", "q8_0")}
    assert kl["bfloat16"] < kl["bfloat16i"] <= 3 * kl["bfloat16"], kl
    assert kl["bfloat16i"] <= 0.5 * kl["q8_0"], kl


def test_gguf_bf16_files_load_as_bfloat16i_with_their_very_weights(tmp_path):
    m = GPT.random(LLAMA, seed=5, dtype="bfloat16i")
    path = os.fspath(tmp_path / "m.gguf")
    m.save_gguf(path, "BF16")
    back = GPT.from_pretrained(path, dtype="bfloat16i")
    assert back.dtype == "bfloat16i"
    np.testing.assert_array_equal(back.params, m.params)
    plain = GPT.from_pretrained(path)  # a BF16 file is bfloat16 unless asked
    assert plain.dtype == "bfloat16"
    np.testing.assert_array_equal(plain.astype("bfloat16i").params, m.params)
    ids = np.array([[1, 2, 3, 4]])
    np.testing.assert_array_equal(bits(back(ids)), bits(m(ids)))
