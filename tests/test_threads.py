"""Threads (issue 6): concurrent calls from Python threads give bitwise the
serial results, and the C calls release the GIL.

The speed-up figure (two threads on two cores against one thread doing both)
is a timing, so it lives in benches/threads.py; here the GIL release is shown
without timing thresholds that a noisy shared machine could break: while one
thread is inside a long C call, another thread keeps running Python code all
along (and the same measure does catch a call that holds the GIL).
"""
import threading
import time

import numpy as np

import blockc
from blockc._enums import DTYPES  # every weight format the C table has

import gilprobe

N_THREADS = 8


def _block_jobs():
    cfgs = [blockc.BlockConfig(d_model=16, n_heads=4, d_ff=32),
            blockc.BlockConfig(d_model=16, n_heads=2, d_ff=24, norm="layer", causal=True,
                               activation="swiglu"),
            blockc.BlockConfig(d_model=12, n_heads=3, d_ff=20, placement="post", activation="gelu")]
    Ws = [blockc.init_blocks(c, 1, seed=i, rand="normal")[0] for i, c in enumerate(cfgs)]
    jobs = []
    for i in range(N_THREADS * 3):
        k = i % 3
        x = np.random.default_rng(i).standard_normal((1 + i % 3, 3 + i % 7, cfgs[k].d_model))
        jobs.append(("block", (x.astype(np.float32), Ws[k], cfgs[k])))
    return jobs


def _gpt_jobs():
    cfg = blockc.GPTConfig(vocab=50, context=16, width=16, heads=4, layers=2)
    m = blockc.GPT.random(cfg, seed=3)
    rng = np.random.default_rng(7)
    jobs = [("gpt", (m, rng.integers(0, 50, size=(1 + i % 2, 2 + i % 14)))) for i in range(N_THREADS * 2)]
    jobs += [("generate", (m, rng.integers(0, 50, size=(2, 3)))) for _ in range(N_THREADS)]
    return jobs


def _run(job):
    kind, args = job
    if kind == "block":
        return blockc.block_forward(*args)
    m, ids = args
    if kind == "gpt":
        return m(ids)
    return m.generate(ids, max_new_tokens=5)


def test_eight_threads_give_the_serial_bits():
    jobs = _block_jobs() + _gpt_jobs()
    serial = [_run(j) for j in jobs]
    results = [[None] * len(jobs) for _ in range(N_THREADS)]
    errors = []
    start = threading.Barrier(N_THREADS)

    def worker(w):
        try:
            start.wait()
            # every thread runs every job, each from a different starting point, three times
            for rep in range(3):
                for i in range(len(jobs)):
                    j = (i + w * 5 + rep) % len(jobs)
                    results[w][j] = _run(jobs[j])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for w in range(N_THREADS):
        for j, want in enumerate(serial):
            np.testing.assert_array_equal(results[w][j], want, err_msg=f"thread {w}, job {j}")


def _long_call(min_seconds=0.3):
    """A block_forward call that takes at least min_seconds here, sized at run time."""
    cfg = blockc.BlockConfig(d_model=128, n_heads=4, d_ff=512)
    W = blockc.init_block(cfg, seed=1, rand="normal")
    t = 64
    while True:
        x = np.random.default_rng(0).standard_normal((2, t, 128)).astype(np.float32)
        t0 = time.perf_counter()
        blockc.block_forward(x, W, cfg)
        if time.perf_counter() - t0 >= min_seconds or t >= 16384:
            return lambda: blockc.block_forward(x, W, cfg)
        t *= 2


def _coverage(call):
    """The share of a call in which another thread ran (benches/gilprobe.py)."""
    return gilprobe.pauses(call)[1]


def _assert_released(call, what):
    best = 0.0
    for _ in range(5):  # a busy machine may starve us once; a held GIL starves us every time
        best = max(best, _coverage(call))
        if best >= 0.5:
            return
    raise AssertionError(f"this thread ran in only {best:.0%} of a {what} call: GIL held?")


def test_the_gil_is_released_during_c_calls():
    _assert_released(_long_call(), "block_forward")


def test_the_gil_is_released_during_gpt_calls():
    cfg = blockc.GPTConfig(vocab=512, context=512, width=128, heads=4, layers=2)
    m = blockc.GPT.random(cfg, seed=0)
    b = 1
    while True:  # sized at run time: at least 0.3 s a call here
        ids = np.random.default_rng(0).integers(0, 512, size=(b, 512))
        t0 = time.perf_counter()
        m(ids)
        if time.perf_counter() - t0 >= 0.3 or b >= 64:
            break
        b *= 2
    _assert_released(lambda: m(ids), "GPT")


def test_a_gil_holding_call_is_caught():
    # the measure itself: a C loop that keeps the GIL (builtin sum over a range) is seen
    assert _coverage(lambda: sum(range(10_000_000))) <= 0.3


def test_packing_gives_the_same_bytes_on_any_thread_count():
    """bc_pack_strided spreads its panels over the pool: every format packs the same
    bytes on one thread and on two (a matrix and its transpose, rows not a whole panel)."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((300, 512)) * 0.05).astype(np.float32)
    before = blockc.get_num_threads()
    try:
        for dtype in DTYPES:
            got = []
            for n in (1, 2):
                blockc.set_num_threads(n)
                cfg = blockc.GPTConfig(vocab=300, context=16, width=512, heads=4, layers=1,
                                       d_ff=512, tie_weights=True)
                sd = {**blockc.GPT.random(cfg, seed=1).state_dict(), "token.weight": w}
                m = blockc.GPT.from_state_dict(sd, cfg, dtype=dtype)
                got.append(np.array(m.params, copy=True))
            assert np.array_equal(got[0], got[1]), dtype
    finally:
        blockc.set_num_threads(before)
