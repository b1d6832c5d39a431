"""Large outputs' memory is kept between outputs (blockc._native.output_empty on the
C library's bc_out_take / bc_out_give): a block comes back only when no array views
it any more; recycled memory holds the new result (against NumPy), never an old
one; two threads taking and handing back blocks at once never share one; a child
forked while the parent's threads use the pool works; BLOCKC_OUTPUT_POOL=0 keeps
nothing."""
from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from helpers import rnd

from blockc import ops
from blockc._native import SMALL_PAGES_FROM, ffi, lib, output_empty

#: rows, columns, outputs of a linear whose result (256 x 4608 floats, 4.5 MiB) is kept
N, C, OC = 256, 64, 4608


def kept():
    blocks, nbytes = ffi.new("size_t *"), ffi.new("size_t *")
    assert lib.bc_out_kept(blocks, nbytes) == lib.BC_OK
    return int(blocks[0]), int(nbytes[0])


def addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_a_block_handed_back_is_reused_and_holds_the_new_result_only():
    assert N * OC * 4 >= SMALL_PAGES_FROM
    w = rnd(OC, C, seed=1)
    x1, x2 = rnd(N, C, seed=2), rnd(N, C, seed=3)
    y1 = ops.linear(x1, w)
    first = addr(y1)
    np.testing.assert_allclose(y1, x1 @ w.T, rtol=1e-5, atol=1e-5)
    del y1  # the block goes back
    y2 = ops.linear(x2, w)
    assert addr(y2) == first  # the same memory ...
    np.testing.assert_allclose(y2, x2 @ w.T, rtol=1e-5, atol=1e-5)  # ... the new values
    y3 = ops.linear(x1, w)  # y2 is alive: never its block
    assert addr(y3) != addr(y2)
    np.testing.assert_allclose(y2, x2 @ w.T, rtol=1e-5, atol=1e-5)


def test_a_view_keeps_its_block():
    w, x = rnd(OC, C, seed=4), rnd(N, C, seed=5)
    y = ops.linear(x, w)
    row = y[7]
    want = row.copy()
    start = addr(y)
    del y
    others = [ops.linear(x * 2, w) for _ in range(3)]
    assert all(not (start <= addr(o) < start + N * OC * 4) for o in others)
    np.testing.assert_array_equal(row, want)
    assert not row.flags.owndata and row.flags.writeable


def test_the_kept_blocks_are_bounded():
    arrays = [output_empty((SMALL_PAGES_FROM // 4 + 1000 * i,)) for i in range(lib.BC_OUT_KEEP + 3)]
    del arrays
    blocks, nbytes = kept()
    assert blocks == lib.BC_OUT_KEEP and nbytes <= lib.BC_OUT_KEEP_BYTES
    assert lib.bc_out_release() == lib.BC_OK
    assert kept() == (0, 0)


def test_two_threads_taking_and_handing_back_never_share_a_block():
    w = rnd(OC, C, seed=6)
    xs = [rnd(N, C, seed=10 + i) for i in range(4)]
    wants = [x @ w.T for x in xs]
    errors = []

    def work(k):
        try:
            held = []
            for r in range(12):
                i = (r + k) % 4
                y = ops.linear(xs[i], w)
                held.append((i, y))
                if len(held) > 2:
                    held.pop(0)
                for j, h in held:  # what this thread holds is still its own
                    np.testing.assert_allclose(h, wants[j], rtol=1e-5, atol=1e-5)
                live.append(y)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    live = []
    ts = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert not errors, errors
    spans = sorted((addr(a), addr(a) + a.nbytes) for a in live)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def _child(conn):
    a = output_empty((N, OC))
    a[...] = 3.0
    conn.send(float(a.sum()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork: POSIX only")
def test_a_child_forked_while_threads_use_the_pool_works():
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            output_empty((N, OC))

    ts = [threading.Thread(target=churn) for _ in range(2)]
    for t in ts:
        t.start()
    try:
        ctx = mp.get_context("fork")
        for _ in range(5):
            here, there = ctx.Pipe()
            p = ctx.Process(target=_child, args=(there,))
            p.start()
            assert here.poll(60), "the forked child did not answer"
            assert here.recv() == 3.0 * N * OC
            p.join(timeout=60)
            assert p.exitcode == 0
    finally:
        stop.set()
        for t in ts:
            t.join(timeout=60)


def test_blockc_output_pool_0_keeps_nothing():
    code = ("from blockc._native import output_empty, ffi, lib\n"
            "a = output_empty((1 << 21,)); a[:] = 1; del a\n"
            "b, n = ffi.new('size_t *'), ffi.new('size_t *')\n"
            "lib.bc_out_kept(b, n); print(b[0], n[0])")
    env = dict(os.environ, BLOCKC_OUTPUT_POOL="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                         text=True, timeout=120).stdout.split()
    assert out == ["0", "0"]
    env.pop("BLOCKC_OUTPUT_POOL")
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                         text=True, timeout=120).stdout.split()
    assert out == ["1", str(4 << 21)]
