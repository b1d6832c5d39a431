"""Timing-free evidence that a call releases the GIL, shared by benches/threads.py
and tests/test_threads.py. Importing it changes no environment."""
from __future__ import annotations

import threading
import time
from typing import Callable, Tuple


def pauses(call: Callable[[], object], bins: int = 20) -> Tuple[float, float]:
    """Run call() in a thread while this thread spins, recording when it runs.

    Returns (the longest time this thread could not run, as a share of the call;
    the share of the call, cut in ``bins`` equal slices, in which it ran at least
    once). With the GIL held through the C call this thread can only run in the
    first and last slices: about (100%, 10%); released, it runs all along, even on
    a busy machine that deschedules it now and then: noise and about (0%, 100%)."""
    inside, span, stamps = threading.Event(), {}, []

    def worker():
        inside.set()
        t0 = time.perf_counter()
        call()
        span["t"] = (t0, time.perf_counter())

    th = threading.Thread(target=worker)
    th.start()
    inside.wait()
    while th.is_alive():
        stamps.append(time.perf_counter())
    th.join()
    t0, t1 = span["t"]
    during = [s for s in stamps if t0 <= s <= t1]
    edges = [t0] + during + [t1]
    gap = max(b - a for a, b in zip(edges, edges[1:])) / (t1 - t0)
    hit = {min(int((s - t0) / (t1 - t0) * bins), bins - 1) for s in during}
    return gap, len(hit) / bins
