"""The portable generators against the platform C library and known values."""
import ctypes
import ctypes.util
import sys

import numpy as np
import pytest

from blockc import CRand
from blockc._native import ffi, lib, check

SEEDS = [0, 1, 2, 42, 12345, 2**31 - 1, 2**31, 2**31 + 7, 2**32 - 1]


def c_rand(kind, seed, n):
    g = ffi.new("bc_rng *")
    check(lib.bc_rng_init(g, kind, seed), "init")
    out = ffi.new("uint32_t[]", n)
    check(lib.bc_rng_rand(out, g, n), "rand")
    return np.frombuffer(ffi.buffer(out), dtype=np.uint32).copy()


def test_msvc_known_sequence():
    # srand(1) on the Microsoft C runtime: 41, 18467, 6334, 26500, 19169
    assert list(CRand(1, "msvc").rands(5)) == [41, 18467, 6334, 26500, 19169]
    assert list(c_rand(lib.BC_RAND_MSVC, 1, 5)) == [41, 18467, 6334, 26500, 19169]


def test_glibc_known_sequence():
    # srand(1) with glibc: the first values every Linux C programmer has seen
    assert list(CRand(1, "glibc").rands(3)) == [1804289383, 846930886, 1681692777]
    assert list(c_rand(lib.BC_RAND_GLIBC, 1, 3)) == [1804289383, 846930886, 1681692777]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs glibc's rand()")
@pytest.mark.parametrize("seed", SEEDS)
def test_glibc_matches_platform_rand(seed):
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.srand.argtypes = [ctypes.c_uint]
    libc.srand(seed)
    want = [libc.rand() for _ in range(1000)]
    assert list(c_rand(lib.BC_RAND_GLIBC, seed, 1000)) == want
    assert list(CRand(seed, "glibc").rands(1000)) == want


@pytest.mark.parametrize("rand", ["msvc", "glibc"])
@pytest.mark.parametrize("seed", SEEDS)
def test_c_and_python_agree(rand, seed):
    kind = lib.BC_RAND_MSVC if rand == "msvc" else lib.BC_RAND_GLIBC
    assert np.array_equal(c_rand(kind, seed, 500), CRand(seed, rand).rands(500))
    g = ffi.new("bc_rng *")
    check(lib.bc_rng_init(g, kind, seed), "init")
    out = np.empty(500, np.float32)
    check(lib.bc_rng_uniform(ffi.from_buffer("float[]", out), g, 500, 0.1), "uniform")
    assert np.array_equal(out, CRand(seed, rand).uniform(500, 0.1))


def test_bad_arguments():
    with pytest.raises(ValueError, match="rand must be one of"):
        CRand(1, "posix")
    with pytest.raises(ValueError, match="seed"):
        CRand(-1)
    with pytest.raises(TypeError, match="seed"):
        CRand(1.5)
    g = ffi.new("bc_rng *")
    assert lib.bc_rng_init(g, 7, 1) == lib.BC_EOPTION
    assert lib.bc_rng_init(ffi.NULL, 0, 1) == lib.BC_ENULL
    with pytest.raises(ValueError, match="unknown option"):
        check(lib.bc_rng_init(g, 7, 1), "bc_rng_init")
