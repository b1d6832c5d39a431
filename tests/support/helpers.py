"""Small helpers shared by the test modules (found through tests/conftest.py)."""
from __future__ import annotations

import os

import numpy as np
import pytest

__all__ = ["rnd", "close", "close_k", "mean_kl", "plots"]

#: a test that draws with matplotlib: skipped under the sanitizer run, where matplotlib's
#: C++ extension aborts with ASan LD_PRELOADed (and without matplotlib)
plots = pytest.mark.skipif(bool(os.environ.get("BLOCKC_UNDER_SANITIZER")),
                           reason="matplotlib's C++ extension aborts under an LD_PRELOADed ASan")


def rnd(*shape, seed=0):
    """Standard-normal float32 of ``shape`` from ``default_rng(seed)``."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def close(got, want, tol=2e-5):
    """float32 against the float64 oracle, scaled to the result's magnitude."""
    want = np.asarray(want, np.float64)
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def close_k(got, want, k):
    """float32 tolerance for sums of k products of unit-size numbers."""
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6 * np.sqrt(k) + 1e-6)


def mean_kl(p_logits, q_logits):
    """Mean over positions of KL(softmax(p) || softmax(q)), in float64."""
    p = np.asarray(p_logits, np.float64).reshape(-1, np.shape(p_logits)[-1])
    q = np.asarray(q_logits, np.float64).reshape(-1, np.shape(q_logits)[-1])
    lp = p - p.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    lq = q - q.max(-1, keepdims=True)
    lq -= np.log(np.exp(lq).sum(-1, keepdims=True))
    return float(np.mean(np.sum(np.exp(lp) * (lp - lq), axis=-1)))
