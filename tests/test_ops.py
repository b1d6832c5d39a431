"""blockc.ops: each C kernel against the NumPy oracle, and its input checks."""
import math

import numpy as np
import pytest

from blockc import ops
from blockc.reference import block as ref

rng = np.random.default_rng(1234)
TOL = dict(rtol=2e-5, atol=2e-6)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_linear_matches_oracle_with_and_without_bias():
    x, w, b = rand(2, 3, 7), rand(5, 7), rand(5)
    np.testing.assert_allclose(ops.linear(x, w, b), ref.linear(x.astype(np.float64), w, b), **TOL)
    np.testing.assert_allclose(ops.linear(x, w), x.astype(np.float64) @ w.T, **TOL)
    assert ops.linear(x, w).shape == (2, 3, 5)
    assert ops.linear(rand(7), w).shape == (5,)


def test_norms_match_oracle():
    x, g, b = rand(4, 9) * 3 + 1, rand(9), rand(9)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(ops.rmsnorm(x), ref.rmsnorm(x64), **TOL)
    np.testing.assert_allclose(ops.rmsnorm(x, g, eps=0.1), ref.rmsnorm(x64, g, 0.1), **TOL)
    np.testing.assert_allclose(ops.layernorm(x, g, b), ref.layernorm(x64, g, b), **TOL)
    np.testing.assert_allclose(ops.layernorm(x), ref.layernorm(x64), **TOL)


def test_layernorm_chapter6_example():
    # chapter 6: x = [1, 2, 3] -> [-1.2247, 0, 1.2247] (variance over D, not D-1)
    np.testing.assert_allclose(ops.layernorm([1.0, 2.0, 3.0], eps=0.0),
                               [-1.2247449, 0.0, 1.2247449], atol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_oracle(causal):
    q, k, v = rand(2, 3, 5, 4), rand(2, 3, 5, 4), rand(2, 3, 5, 4)
    want = ref.attention(*(a.astype(np.float64) for a in (q, k, v)), causal=causal)
    np.testing.assert_allclose(ops.attention(q, k, v, causal=causal), want, **TOL)


def test_attention_causal_first_query_sees_only_first_key():
    q, k, v = rand(1, 1, 3, 2), rand(1, 1, 3, 2), rand(1, 1, 3, 2)
    np.testing.assert_allclose(ops.attention(q, k, v, causal=True)[0, 0, 0], v[0, 0, 0], rtol=1e-6)


def test_attention_more_keys_than_queries():
    q, k, v = rand(2, 1, 3, 4), rand(2, 1, 6, 4), rand(2, 1, 6, 4)
    want = ref.attention(*(a.astype(np.float64) for a in (q, k, v)))
    np.testing.assert_allclose(ops.attention(q, k, v), want, **TOL)


def test_activations_match_oracle():
    x = np.linspace(-6, 6, 241, dtype=np.float32).reshape(1, 241)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(ops.gelu_tanh(x), ref.gelu_tanh(x64), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.gelu(x), ref.gelu(x64), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ops.relu(x), np.maximum(x, 0))
    np.testing.assert_allclose(ops.silu(x), ref.silu(x64), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.swiglu(x, 2 * x), ref.swiglu(x64, 2 * x64), rtol=1e-5, atol=1e-6)


def test_gelu_exact_vs_tanh_difference_chapter6_ex4():
    # chapter 6, exercise 4: the largest gap between the two GELUs on [-6, 6],
    # C in float32 against the float64 oracle (4.73e-4 near x = -2.7)
    x = np.linspace(-6, 6, 12001)
    d = np.abs(ops.gelu(x).astype(np.float64) - ops.gelu_tanh(x))
    d_ref = np.abs(ref.gelu(x) - ref.gelu_tanh(x))
    assert abs(d.max() - d_ref.max()) < 2e-6
    assert abs(abs(x[d.argmax()]) - abs(x[d_ref.argmax()])) < 0.05  # |gap| is symmetric in x


def test_residual_add_listing127():
    # 127_Residual: [1, 2, 3, 4] + [0.1, -0.2, 0.3, -0.1] = [1.1, 1.8, 3.3, 3.9]
    out = ops.residual_add([1.0, 2.0, 3.0, 4.0], [0.1, -0.2, 0.3, -0.1])
    np.testing.assert_allclose(out, [1.1, 1.8, 3.3, 3.9], rtol=1e-6)


def test_inputs_not_modified_and_layouts_accepted():
    x = rand(6, 8)
    w = rand(5, 8)
    xf = np.asfortranarray(x)
    xs = rand(6, 16)[:, ::2]
    ro = x.copy()
    ro.flags.writeable = False
    want = ops.linear(x, w)
    for variant in (xf, xs, ro, x.astype(np.float64)):
        before = variant.copy()
        got = ops.linear(variant, w)
        np.testing.assert_array_equal(variant, before)
        if variant is xs:
            np.testing.assert_allclose(got, ops.linear(np.ascontiguousarray(xs), w))
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        assert got.dtype == np.float32 and got.flags.c_contiguous
    for f in (ops.rmsnorm, ops.gelu, ops.relu, ops.silu, ops.gelu_tanh):
        before = xf.copy()
        np.testing.assert_allclose(f(xf), f(x), rtol=1e-6)
        np.testing.assert_array_equal(xf, before)


@pytest.mark.parametrize("bad", [np.arange(4), np.ones(4, bool), np.ones(4, complex),
                                 np.array(["a", "b"]), np.array([1.0, None], dtype=object)])
def test_non_float_dtypes_are_type_errors(bad):
    for f in (ops.relu, ops.gelu, ops.rmsnorm):
        with pytest.raises(TypeError, match="x"):
            f(bad)
    with pytest.raises(TypeError, match="w"):
        ops.linear(np.ones((2, 4), np.float32), bad.reshape(1, -1) if bad.size else bad)


def test_shape_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 3\)"):
        ops.linear(rand(2, 4), rand(5, 3))
    with pytest.raises(ValueError, match="w must have shape"):
        ops.linear(rand(2, 4), rand(4))
    with pytest.raises(ValueError, match=r"b must have shape \(5,\)"):
        ops.linear(rand(2, 3), rand(5, 3), rand(3))
    with pytest.raises(ValueError, match="weight"):
        ops.rmsnorm(rand(2, 3), rand(4))
    with pytest.raises(ValueError, match="bias"):
        ops.layernorm(rand(2, 3), None, rand(2))
    with pytest.raises(ValueError, match="k must have shape"):
        ops.attention(rand(1, 2, 3, 4), rand(1, 2, 3, 5), rand(1, 2, 3, 5))
    with pytest.raises(ValueError, match="v must have"):
        ops.attention(rand(1, 2, 3, 4), rand(1, 2, 3, 4), rand(1, 2, 2, 4))
    with pytest.raises(ValueError, match="up must have"):
        ops.swiglu(rand(3), rand(4))
    with pytest.raises(ValueError, match="sub must have"):
        ops.residual_add(rand(3), rand(3, 1))
    with pytest.raises(ValueError, match="eps"):
        ops.rmsnorm(rand(2, 3), eps=-1.0)
    with pytest.raises(ValueError, match="eps"):
        ops.layernorm(rand(2, 3), eps=float("nan"))
    with pytest.raises(TypeError, match="eps"):
        ops.rmsnorm(rand(2, 3), eps="small")
    with pytest.raises(TypeError, match="causal"):
        ops.attention(rand(1, 1, 2, 2), rand(1, 1, 2, 2), rand(1, 1, 2, 2), causal="yes")


def test_empty_batches_give_empty_results():
    assert ops.linear(np.zeros((0, 3), np.float32), rand(4, 3)).shape == (0, 4)
    assert ops.rmsnorm(np.zeros((0, 3), np.float32)).shape == (0, 3)
    assert ops.relu(np.zeros((0,), np.float32)).shape == (0,)
    assert ops.attention(*(np.zeros((0, 2, 3, 4), np.float32),) * 3).shape == (0, 2, 3, 4)


def test_c_entry_points_validate():
    from blockc._native import ffi, lib
    y = ffi.new("float[]", 8)
    x = ffi.new("float[]", 8)
    w = ffi.new("float[]", 8)
    assert lib.bc_linear(ffi.NULL, x, w, ffi.NULL, 2, 2, 2) == lib.BC_ENULL
    assert lib.bc_linear(y, x, w, ffi.NULL, 0, 2, 2) == lib.BC_ESIZE
    assert lib.bc_linear(y, x, w, ffi.NULL, 2**62, 2**62, 2) == lib.BC_EOVERFLOW
    assert lib.bc_linear(y, y, w, ffi.NULL, 2, 2, 2) == lib.BC_EALIAS
    assert lib.bc_linear(x + 1, x, w, ffi.NULL, 2, 2, 2) == lib.BC_EALIAS
    assert lib.bc_rmsnorm(y, x, ffi.NULL, 2, 4, -1.0) == lib.BC_EOPTION
    assert lib.bc_rmsnorm(y, x, ffi.NULL, 2, 4, math.inf) == lib.BC_EOPTION
    assert lib.bc_rmsnorm(x + 1, x, ffi.NULL, 2, 4, 1e-5) == lib.BC_EALIAS
    assert lib.bc_activation(y, x, 8, lib.BC_ACT_SWIGLU) == lib.BC_EOPTION
    assert lib.bc_activation(y, x, 8, 99) == lib.BC_EOPTION
    assert lib.bc_attention(y, x, w, w, 1, 1, 2, 2, 2**62, 0) == lib.BC_EOVERFLOW
    assert lib.bc_attention(y, y, w, w, 1, 1, 2, 2, 2, 0) == lib.BC_EALIAS
    assert lib.bc_residual_add(y, x, ffi.NULL, 8) == lib.BC_ENULL
    assert lib.bc_residual_add(y, x, x, 2**41) == lib.BC_EOVERFLOW
    # nothing was written on any of those errors
    assert list(y) == [0.0] * 8
    # in place is allowed where documented
    x[0:8] = [1, -2, 3, -4, 5, -6, 7, -8]
    assert lib.bc_activation(x, x, 8, lib.BC_ACT_RELU) == lib.BC_OK
    assert list(x) == [1, 0, 3, 0, 5, 0, 7, 0]
