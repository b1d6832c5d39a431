"""The GGUF types blockc holds in their own blocks beyond Q8_0/Q4_0/Q5_0/Q4_K/Q6_K (issue 51):
random blocks (every bit pattern of the quants, scales drawn as halves) dequantise in
blockc's panels (unpack, and the kernels' own readers through products with the identity,
on every instruction set) bit for bit as the `gguf` package's ``gguf.quants.dequantize``;
products with float activations are the float64 product of those weights within float32
rounding; the same bits at 1 and 2 threads and for a row alone."""
import numpy as np
import pytest

import blockc
from blockc import ops
from blockc.block.packed import PackedWeight
from blockc.gguf import TYPES

gguf = pytest.importorskip("gguf")
gq = pytest.importorskip("gguf.quants")

#: format -> its GGUF type, and the byte offsets of the half scales in a block
NEW = {"q4_1": ("Q4_1", (0, 2)), "q5_1": ("Q5_1", (0, 2)), "q5_k": ("Q5_K", (0, 2)),
       "iq4_nl": ("IQ4_NL", (0,)), "iq4_xs": ("IQ4_XS", (0,)), "q2_k": ("Q2_K", (80, 82)),
       "q3_k": ("Q3_K", (108,))}


def _random_blocks(typ: str, rows: int, cols: int, halves, seed: int) -> np.ndarray:
    """rows of random blocks of ``typ``: every byte random, the half scales at byte offsets
    ``halves`` replaced by finite halves of mixed magnitudes (subnormal to ~1e3)."""
    _, bs, bb = next(v for v in TYPES.values() if v[0] == typ)
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 256, (rows * cols // bs, bb), dtype=np.uint8)
    for o in halves:
        h = (rng.standard_normal(b.shape[0]) * 10.0 ** rng.integers(-7, 3, b.shape[0]))
        b[:, o:o + 2] = h.astype(np.float16).reshape(-1, 1).view(np.uint8)
    return b.reshape(rows, -1)


@pytest.mark.parametrize("dtype", list(NEW))
def test_random_blocks_dequantise_as_the_gguf_package(isa, dtype):
    typ, halves = NEW[dtype]
    rows, cols = 37, 512
    blocks = _random_blocks(typ, rows, cols, halves, seed=len(dtype) + rows)
    p = PackedWeight(ops.pack_ggml(blocks, dtype, (rows, cols)), (rows, cols), dtype)
    want = np.asarray(gq.dequantize(blocks, getattr(gguf.GGMLQuantizationType, typ)), np.float32)
    assert want.shape == (rows, cols)
    np.testing.assert_array_equal(p.unpack().view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(ops.unpack_ggml(p), blocks)
    # the kernels' readers: x the identity gives back w^T (a -0.0 weight as +0: the sum
    # starts at +0), on decoding's path and the GEMM's
    eye = np.eye(cols, dtype=np.float32)
    np.testing.assert_array_equal(ops.linear(eye, p), want.T)
    for i in (0, 15, 16, 31, 32, 100, 255, 256, 511):
        np.testing.assert_array_equal(ops.linear(eye[i:i + 1], p), want.T[i:i + 1])


@pytest.mark.parametrize("dtype", list(NEW))
def test_products_and_thread_invariance(dtype):
    typ, halves = NEW[dtype]
    rows, cols = 70, 768
    blocks = _random_blocks(typ, rows, cols, halves, seed=3)
    p = PackedWeight(ops.pack_ggml(blocks, dtype, (rows, cols)), (rows, cols), dtype)
    w = p.unpack().astype(np.float64)
    x = np.random.default_rng(4).standard_normal((9, cols)).astype(np.float32)
    b = np.random.default_rng(5).standard_normal(rows).astype(np.float32)
    n0 = blockc.get_num_threads()
    try:
        blockc.set_num_threads(1)
        y = ops.linear(x, p, b)
        want = x.astype(np.float64) @ w.T + b
        scale = np.abs(x).astype(np.float64) @ np.abs(w).T + np.abs(b)
        assert np.all(np.abs(y - want) <= 1e-5 * scale + 1e-30)
        blockc.set_num_threads(2)
        np.testing.assert_array_equal(ops.linear(x, p, b), y)
        for i in range(x.shape[0]):  # a row alone (decoding) gets its bits among many
            np.testing.assert_array_equal(ops.linear(x[i:i + 1], p, b), y[i:i + 1])
    finally:
        blockc.set_num_threads(n0)


@pytest.mark.parametrize("dtype", ["q4_1", "q5_1"])
def test_c_quantiser_writes_the_gguf_package_blocks(dtype):
    """Q4_1 and Q5_1, which the gguf package quantises: blockc's C quantiser (ops.pack)
    writes its very blocks (near-ties of the rounding, a constant block, tiny scales)."""
    typ = NEW[dtype][0]
    rng = np.random.default_rng(8)
    w = (rng.standard_normal((33, 256)) * 0.2).astype(np.float32)
    w[0, :32] = np.arange(32) - 15.5
    w[1, :32] = 0.25
    w[2, :32] *= np.float32(1e-6)
    w[3, :32] = np.arange(32, dtype=np.float32) * np.float32(1 / 31)
    got = ops.unpack_ggml(ops.pack(w, dtype))
    want = np.asarray(gq.quantize(w, getattr(gguf.GGMLQuantizationType, typ))).view(np.uint8)
    np.testing.assert_array_equal(got, want.reshape(got.shape))


@pytest.mark.parametrize("typ", ["Q2_K", "Q3_K"])
def test_oracle_dequantises_as_the_gguf_package(typ):
    """blockc.reference.ggml's Q2_K and Q3_K (written from the block layouts) against
    gguf.quants.dequantize on random blocks, bit for bit."""
    from blockc.reference import ggml
    halves = {"Q2_K": (80, 82), "Q3_K": (108,)}[typ]
    blocks = _random_blocks(typ, 64, 1024, halves, seed=11)
    want = np.asarray(gq.dequantize(blocks, getattr(gguf.GGMLQuantizationType, typ)), np.float32)
    got = ggml.dequantise(blocks, typ)
    np.testing.assert_array_equal(got.view(np.uint32), want.reshape(got.shape).view(np.uint32))


@pytest.mark.parametrize("dtype", ["q2_k", "q3_k"])
def test_c_quantiser_is_its_numpy_oracle(dtype):
    """q2_k's and q3_k's C quantiser (blockc's simple rule, not llama.cpp's search) against
    its NumPy oracle (blockc.reference.quant), bit for bit, on every thread count: random
    rows, an all-zero sub-block, a constant one, tiny and negative-only ones."""
    from blockc.reference import quant
    rng = np.random.default_rng(12)
    w = (rng.standard_normal((21, 512)) * 0.3).astype(np.float32)
    w[0, :16] = 0.0
    w[1, :16] = 0.25
    w[2, :16] *= np.float32(1e-6)
    w[3, :256] = -np.abs(w[3, :256])
    w[4, :32] = np.arange(32, dtype=np.float32) - 15.5
    n0 = blockc.get_num_threads()
    try:
        for n in (1, 2):
            blockc.set_num_threads(n)
            got = ops.pack(w, dtype).unpack()
            want = getattr(quant, dtype)(w)
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    finally:
        blockc.set_num_threads(n0)
    assert np.abs(got - w).max() < np.abs(w).max()  # a quantisation, not garbage
