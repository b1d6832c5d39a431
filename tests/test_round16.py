"""float32 rounded to GGUF's F16 and BF16 by the C library (bc_ggml_from_f32, issue 51):
NumPy's astype(float16) bits and the oracle's bfloat16 bits, on every instruction set and
thread count, the special values included (ties, subnormals, overflow, NaN payloads)."""
import numpy as np
import pytest

import blockc
from blockc import BlockcTypeError, BlockcValueError
from blockc.block.packed import round_ggml16
from blockc.checkpoint import gguf as cg
from blockc.reference import ggml


def _edges() -> np.ndarray:
    """Every half as a float32, each half-way point between two neighbours (the ties),
    one float32 step either side of both, and float32's own specials."""
    h = np.arange(0x10000, dtype=np.uint32).astype(np.uint16).view(np.float16)
    f = h.astype(np.float32)
    f = f[np.isfinite(f)]
    f = np.unique(f)
    mid = ((f[:-1].astype(np.float64) + f[1:]) / 2).astype(np.float32)  # exact: ties
    u = np.concatenate([f, mid]).view(np.uint32)
    near = np.concatenate([u, u + 1, u - 1, u + 0x1000, u - 0x1000])
    specials = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7F800001, 0xFF800001,
                         0x7F802000, 0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0xFFFFFFFF,
                         0x7F801FFF, 0x7FBFFFFF, 0x00000001, 0x807FFFFF, 0x477FF000,
                         0x477FEFFF, 0x477FFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x33000000,
                         0x33000001, 0xB3000000, 0x387FFFFF, 0x38800000, 0x3F7FFFFF],
                        np.uint32)
    return np.concatenate([near, specials]).astype(np.uint32).view(np.float32)


def _random(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    scaled = (rng.standard_normal(n) * 10.0 ** rng.integers(-9, 6, n)).astype(np.float32)
    return np.concatenate([bits, scaled])


def _numpy_f16(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype("<f2").view(np.uint8)


@pytest.mark.parametrize("typ", ["F16", "BF16"])
def test_the_bits_of_numpy_and_the_oracle_on_every_isa_and_thread_count(typ, isa, threads):
    """Edge cases (every half, every tie, a step either side, NaN payloads, overflow,
    subnormals) and random bits and scales, in lengths that leave vector tails and span
    several units of the pool: the very bytes of NumPy's astype(float16) (F16) and of the
    oracle's bfloat16 (BF16), on 1 and 2 threads."""
    x = np.concatenate([_edges(), _random(70_001, 5)])
    want = _numpy_f16(x) if typ == "F16" else ggml.quantise(x, "BF16").reshape(-1)
    for n in (1, 2):
        threads(n)
        for m in (x.size, 1, 15, 17, 33):  # (the tails of 16 and 8 lanes)
            got = round_ggml16(x[:m], typ)
            assert got.shape == (2 * m,)
            assert np.array_equal(got, want[:2 * m]), (isa, n, m)


def test_shapes_and_refusals():
    x = np.arange(12, dtype=np.float64).reshape(3, 4) / 3  # (converted to float32)
    got = round_ggml16(x, "F16")
    assert got.shape == (3, 8) and got.dtype == np.uint8
    assert np.array_equal(got.view("<f2"), x.astype(np.float32).astype(np.float16))
    ro = np.ones(40, np.float32)
    ro.flags.writeable = False  # read-only input is fine
    assert np.array_equal(round_ggml16(ro, "BF16").view("<u2"), np.full(40, 0x3F80))
    with pytest.raises(BlockcValueError, match="type must be one of"):
        round_ggml16(x, "Q8_0")
    with pytest.raises(BlockcTypeError, match="type must be a str"):
        round_ggml16(x, 1)
    with pytest.raises(BlockcValueError, match="at least one weight"):
        round_ggml16(np.zeros((3, 0), np.float32), "F16")


def test_save_writes_through_it_with_the_oracles_bytes():
    """checkpoint.gguf.quantise (what save_gguf and save_streaming write) rounds F16 and
    BF16 matrices in C: the oracle's bytes (ggml.quantise, NumPy)."""
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((33, 64)) * 3).astype(np.float32)
    w[0, :4] = [np.nan, np.inf, 70000.0, 1e-8]
    for typ in ("F16", "BF16"):
        with np.errstate(over="ignore", invalid="ignore"):
            assert np.array_equal(cg.quantise(w, typ), ggml.quantise(w, typ))
