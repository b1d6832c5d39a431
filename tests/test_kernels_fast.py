"""The fast kernels against the NumPy oracle, on every instruction set this
CPU has, at sizes that cross every tile edge; and the same bits whatever the
thread count.

Tile edges: the GEMM micro-tile is MR x NR (14 x 32 AVX-512, 6 x 16 AVX2,
4 x 8 generic), K blocks of 256, column blocks of 512; attention takes query
tiles of NR and key tiles of 64.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import close_k, rnd

import blockc
from blockc.reference import block as ref

ops = pytest.importorskip("blockc.ops")

EDGES = [1, 7, 13, 14, 15, 16, 17, 31, 32, 33, 63, 64, 65]


def oracle_linear(x, w, b=None):
    return ref.linear(x.astype(np.float64), w.astype(np.float64),
                      None if b is None else b.astype(np.float64))


# ---------------------------------------------------------------- linear

LINEAR_SHAPES = sorted(
    {(n, 37, 45) for n in EDGES + [127, 129]}
    | {(9, c, 33) for c in [1, 7, 15, 16, 17, 255, 256, 257, 511, 512, 513, 777, 1024, 2048]}
    | {(17, 20, oc) for oc in EDGES + [511, 512, 513, 530, 1025]}
    | {(65, 257, 513), (29, 300, 97), (1, 1, 1), (31, 1024, 70)}
)


@pytest.mark.parametrize("n,c,oc", LINEAR_SHAPES)
def test_linear_matches_oracle_at_tile_edges(isa, n, c, oc):
    x, w, b = rnd(n, c, seed=n), rnd(oc, c, seed=c + 1), rnd(oc, seed=oc + 2)
    close_k(ops.linear(x, w, b), oracle_linear(x, w, b), c)
    close_k(ops.linear(x, w), oracle_linear(x, w), c)


@pytest.mark.parametrize("layout", ["rows", "float32", "bfloat16"])
def test_linear_row_does_not_depend_on_how_many_rows_share_the_call(isa, layout, threads):
    # 1000 rows: past the output's row blocks on every instruction set (16 MR rows
    # where float32 panels are read in place, 64 MR where each block copies the
    # weights); 300 columns of x: two K blocks. A few rows (still the GEMM: more
    # than 3) at the start, across a block's end and at the end give the full
    # call's bits, on 1 and 2 threads.
    x, w, b = rnd(1000, 300, seed=11), rnd(70, 300, seed=12), rnd(70, seed=13)
    wl = w if layout == "rows" else ops.pack(w, dtype=layout)
    threads(1)
    full = ops.linear(x, wl, b)
    want = oracle_linear(x, w if layout == "rows" else wl.unpack(), b)
    close_k(full, want, 300)
    for n in (1, 2):
        threads(n)
        np.testing.assert_array_equal(ops.linear(x, wl, b), full)
        for i0, i1 in ((0, 5), (220, 230), (380, 400), (890, 900), (993, 1000)):
            np.testing.assert_array_equal(ops.linear(x[i0:i1], wl, b), full[i0:i1])


def test_linear_batched_leading_axes(isa):
    x, w, b = rnd(2, 3, 19, 40, seed=1), rnd(70, 40, seed=2), rnd(70, seed=3)
    got = ops.linear(x, w, b)
    assert got.shape == (2, 3, 19, 70)
    close_k(got, oracle_linear(x, w, b), 40)


def test_linear_nan_and_inf_stay_in_their_rows(isa):
    x, w = rnd(40, 50, seed=4), rnd(70, 50, seed=5)
    x[3, 7] = np.nan
    x[20, 0] = np.inf
    y = ops.linear(x, w)
    assert np.isnan(y[3]).all()
    assert not np.isfinite(y[20]).any()
    ok = np.ones(40, bool)
    ok[[3, 20]] = False
    close_k(y[ok], oracle_linear(x[ok], w), 50)


# ---------------------------------------------------------------- attention

ATTN_SHAPES = sorted(
    {(1, 2, t, t, 8) for t in EDGES + [127, 129, 200]}
    | {(1, 1, 40, 40, dh) for dh in [1, 2, 5, 13, 14, 15, 16, 17, 64, 65, 100]}
    | {(2, 3, 33, 70, 16), (1, 2, 70, 33, 16), (1, 1, 1, 150, 64), (2, 1, 150, 1, 4)}
)


# (causal with fewer keys than queries would leave the oracle's rows empty)
@pytest.mark.parametrize("b,h,tq,tk,dh,causal",
                         [s + (c,) for s in ATTN_SHAPES for c in (False, True)
                          if not (c and s[3] < s[2])])
def test_attention_matches_oracle_at_tile_edges(isa, b, h, tq, tk, dh, causal):
    q, k, v = rnd(b, h, tq, dh, seed=1), rnd(b, h, tk, dh, seed=2), rnd(b, h, tk, dh, seed=3)
    want = ref.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                         causal=causal)
    close_k(ops.attention(q, k, v, causal=causal), want, tk)


def test_causal_attention_never_reads_future_keys(isa):
    # NaN and inf in later keys and values must not reach earlier queries
    q, k, v = rnd(1, 2, 100, 16, seed=7), rnd(1, 2, 100, 16, seed=8), rnd(1, 2, 100, 16, seed=9)
    k2, v2 = k.copy(), v.copy()
    k2[..., 70:, :] = np.nan
    v2[..., 50:, 3] = np.inf
    got = ops.attention(q, k2, v2, causal=True)
    want = ref.attention(q[..., :50, :].astype(np.float64), k[..., :50, :].astype(np.float64),
                         v[..., :50, :].astype(np.float64), causal=True)
    close_k(got[..., :50, :], want, 50)
    assert np.isnan(got[..., 70:, :]).all()


def test_attention_large_scores_do_not_overflow(isa):
    q, k, v = rnd(1, 1, 80, 8, seed=1) * 60, rnd(1, 1, 80, 8, seed=2) * 60, rnd(1, 1, 80, 8, seed=3)
    want = ref.attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                         causal=True)
    got = ops.attention(q, k, v, causal=True)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------- elementwise

SPECIAL = np.array([0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 3.0, -3.0, 9.0, -9.0, 20.0, -20.0,
                    88.0, -88.0, 100.0, -100.0, 1e30, -1e30, np.inf, -np.inf, np.nan],
                   dtype=np.float32)


@pytest.mark.parametrize("name", ["gelu_tanh", "gelu", "relu", "silu"])
@pytest.mark.parametrize("n", [1, 3, 15, 16, 17, 33, 1000])
def test_activations_match_oracle(isa, name, n):
    x = np.concatenate([SPECIAL, rnd(n, seed=n) * 4])[: max(n, 1)] if n < len(SPECIAL) \
        else np.concatenate([SPECIAL, rnd(n, seed=n) * 4])
    with np.errstate(all="ignore"):
        want = getattr(ref, name)(x.astype(np.float64))
    got = getattr(ops, name)(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-7)


def test_swiglu_and_residual_add(isa):
    g, u = rnd(1001, seed=1) * 5, rnd(1001, seed=2)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(ops.swiglu(g, u), ref.swiglu(g.astype(np.float64), u),
                                   rtol=2e-6, atol=2e-7)
    np.testing.assert_array_equal(ops.residual_add(g, u), g + u)


# ---------------------------------------------------------------- threads

def test_results_do_not_depend_on_the_thread_count(isa, threads):
    x, w, b = rnd(300, 333, seed=1), rnd(530, 333, seed=2), rnd(530, seed=3)
    q, k, v = rnd(1, 3, 250, 40, seed=4), rnd(1, 3, 250, 40, seed=5), rnd(1, 3, 250, 40, seed=6)
    h = rnd(200, 999, seed=7)
    outs = []
    for n in (1, 2, 3):
        threads(n)
        outs.append((ops.linear(x, w, b), ops.attention(q, k, v, causal=True),
                     ops.attention(q, k, v), ops.gelu_tanh(h), ops.rmsnorm(h)))
    for other in outs[1:]:
        for a, b_ in zip(outs[0], other):
            np.testing.assert_array_equal(a, b_)  # bitwise


def test_generic_path_forced_from_the_environment():
    code = (
        "import numpy as np, blockc, blockc.ops as ops\n"
        "assert blockc.get_isa() == 'generic', blockc.get_isa()\n"
        "r = np.random.default_rng(0)\n"
        "x = r.standard_normal((37, 300)).astype(np.float32)\n"
        "w = r.standard_normal((45, 300)).astype(np.float32)\n"
        "y = ops.linear(x, w)\n"
        "d = np.abs(y - x.astype(np.float64) @ w.T.astype(np.float64)).max()\n"
        "assert d < 1e-3, d\n"
        "print('ok')\n"
    )
    env = dict(os.environ, BLOCKC_ISA="generic")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
@pytest.mark.skipif(os.environ.get("BLOCKC_UNDER_SANITIZER") == "1",
                    reason="ASan's shadow memory distorts the resident set")
def test_attention_never_holds_a_score_matrix():
    # one head at T=4096: its T x T scores alone would be 64 MiB; the kernel's
    # peak extra memory, output included, must stay far below that
    code = (
        "import numpy as np, blockc.ops as ops\n"
        "T, dh = 4096, 64\n"
        "r = np.random.default_rng(0)\n"
        "q, k, v = (r.standard_normal((1, 1, T, dh)).astype(np.float32) for _ in range(3))\n"
        "ops.attention(q[..., :64, :], k[..., :64, :], v[..., :64, :], causal=True)\n"
        "def st(key):\n"
        "    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith(key))\n"
        "open('/proc/self/clear_refs', 'w').write('5')\n"
        "base = st('VmRSS:')\n"
        "for causal in (False, True):\n"
        "    y = ops.attention(q, k, v, causal=causal)\n"
        "print((st('VmHWM:') - base) * 1024)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    extra = int(r.stdout.split()[-1])
    scores = 4096 * 4096 * 4
    assert extra < scores / 8, f"peak extra {extra / 2**20:.1f} MiB"


def test_attention_row_does_not_depend_on_its_neighbours(isa):
    # a query alone (one vector of lanes) or inside a full tile (two): same bits
    q, k, v = rnd(1, 2, 45, 24, seed=1), rnd(1, 2, 130, 24, seed=2), rnd(1, 2, 130, 24, seed=3)
    full = ops.attention(q, k, v)
    for i in (0, 5, 31, 32, 44):
        np.testing.assert_array_equal(ops.attention(q[..., i:i + 1, :], k, v), full[..., i:i + 1, :])
    np.testing.assert_array_equal(ops.attention(q[..., 3:10, :], k, v), full[..., 3:10, :])
