"""Threads (issue 6): concurrent calls from Python threads give bitwise the
serial results, and the C calls release the GIL.

The speed-up figure (two threads on two cores against one thread doing both)
is a timing, so it lives in benches/threads.py; here the GIL release is shown
without timing thresholds that a noisy shared machine could break: while one
thread is inside a long C call, another thread keeps running Python code.
"""
import threading
import time

import numpy as np

import blockc

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


def _long_call(min_seconds=0.15):
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


def _largest_stall(call):
    """Run call() in a thread while this thread spins, recording when it runs.
    Returns (call seconds, longest pause of this thread during the call)."""
    inside = threading.Event()
    span = {}

    def worker():
        inside.set()
        t0 = time.perf_counter()
        call()
        span["t"] = (t0, time.perf_counter())

    th = threading.Thread(target=worker)
    stamps = []
    th.start()
    inside.wait()
    while th.is_alive():
        stamps.append(time.perf_counter())
    th.join()
    t0, t1 = span["t"]
    during = [s for s in stamps if t0 <= s <= t1]
    edges = [t0] + during + [t1]
    return t1 - t0, max(b - a for a, b in zip(edges, edges[1:]))


def test_the_gil_is_released_during_c_calls():
    # with the GIL held, this thread could not run at all while the worker is in C:
    # its longest pause would be the whole call. Released, it keeps running.
    call = _long_call()
    best = None
    for _ in range(3):  # a shared machine may stall us once; the GIL would stall us always
        seconds, stall = _largest_stall(call)
        best = min(best or 1.0, stall / seconds)
        if best < 0.5:
            break
    assert best < 0.5, f"this thread was stopped for {best:.0%} of a C call: GIL held?"


def test_the_gil_is_released_during_gpt_calls():
    cfg = blockc.GPTConfig(vocab=512, context=512, width=128, heads=4, layers=2)
    m = blockc.GPT.random(cfg, seed=0)
    b = 1
    while True:  # sized at run time: at least 0.15 s a call here
        ids = np.random.default_rng(0).integers(0, 512, size=(b, 512))
        t0 = time.perf_counter()
        m(ids)
        if time.perf_counter() - t0 >= 0.15 or b >= 64:
            break
        b *= 2
    best = 1.0
    for _ in range(3):
        seconds, stall = _largest_stall(lambda: m(ids))
        best = min(best, stall / seconds)
        if best < 0.5:
            break
    assert best < 0.5, f"this thread was stopped for {best:.0%} of a GPT call: GIL held?"
