"""The machine's memory read bandwidth and FMA peak, measured in the same run as a bench.

A small STREAM-like C program (compiled here with the C compiler blockc builds
with) sums a 1 GiB float32 array with 1 and 2 threads, each thread reading its
half in groups of 1, 2, 4 or 8 adjacent chunks (16 or 64 KiB) side by side, one
vector accumulator per stream (several nearby streams read faster than one on
the machines measured: 25 against 19 GB/s here); the best of three passes per
setting, the best setting per thread count. This is a read-only bound: a
decode step only reads weights (and the KV cache) and writes a few vectors.

The FMA peak: a C loop of ten independent float32 FMA chains on 256-bit
vectors (AVX2+FMA; 512-bit ones when the compiler targets AVX-512), per
thread count: what "% of peak" is measured against.

    python benches/machine.py
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tempfile
from typing import Dict, Optional

def cpu_info():
    """(model name, set of flags) of the first processor in /proc/cpuinfo ("?" and an
    empty set where there is none): the CPU every bench names beside its figures. The
    name carries the family, model and stepping ("family 6 model 207 stepping 2"): a
    virtual machine's model name is often generic ("Intel(R) Xeon(R) Processor") and
    those numbers are what tell its generation."""
    name, flags, ids = "?", set(), {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and name == "?":
                    name = value
                elif key in ("cpu family", "model", "stepping") and key not in ids:
                    ids[key] = value
                elif key == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    if name != "?" and len(ids) == 3:
        name += f" (family {ids['cpu family']} model {ids['model']} stepping {ids['stepping']})"
    return name, flags


def cpu_name() -> str:
    """The processor's model name, or "unknown CPU"."""
    name = cpu_info()[0]
    return "unknown CPU" if name == "?" else name


def cpu_times():
    """(steal, total) jiffies of all CPUs from /proc/stat, or None: two readings give
    the share of the run the hypervisor took."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (v[7] if len(v) > 7 else 0), sum(v[:8])


def steal_share(t0, t1=None) -> str:
    """The hypervisor's share of CPU time between two :func:`cpu_times` readings (``t1``
    now when omitted; ``t0`` None: since boot), as "2.3%", or "n/a"."""
    t1 = cpu_times() if t1 is None else t1
    if t1 is None:
        return "n/a"
    s0, n0 = t0 if t0 is not None else (0, 0)
    return f"{100 * (t1[0] - s0) / max(1, t1[1] - n0):.1f}%"


def run_footer(t0) -> str:
    """The line a bench's table ends with: the hypervisor's share of CPU time since the
    :func:`cpu_times` reading ``t0`` and the load average now ("n/a" where unknown)."""
    try:
        load = f"{os.getloadavg()[0]:.2f}"
    except (AttributeError, OSError):
        load = "n/a"
    return f"steal {steal_share(t0)} of CPU time during the run; load average {load} at the end"


SOURCE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef float v8 __attribute__((vector_size(32)));
typedef struct { const float *p; size_t n, chunk; int streams; float out; } job;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* n floats in groups of `streams` adjacent chunks read side by side (two
 * vectors of each chunk a step, one accumulator per stream): the pattern of
 * a decoding kernel reading several weight panels at once */
static void *reader(void *arg)
{
    job *j = arg;
    v8 acc[8] = {{0}};
    const size_t group = j->chunk * (size_t)j->streams;
    for (size_t g = 0; g + group <= j->n; g += group)
        for (size_t i = 0; i < j->chunk; i += 16)
            for (int s = 0; s < j->streams; s++) {
                const v8 *q = (const v8 *)(j->p + g + (size_t)s * j->chunk + i);
                acc[s] += q[0] + q[1];
            }
    v8 t = acc[0];
    for (int k = 1; k < 8; k++)
        t += acc[k];
    j->out = t[0];
    return NULL;
}

int main(int argc, char **argv)
{
    const int only = argc > 1 ? atoi(argv[1]) : 0;  /* one thread count, or both */
    const size_t bytes = (size_t)1 << 30, n = bytes / sizeof(float);
    float *p = aligned_alloc(64, bytes);
    if (!p)
        return 1;
    for (size_t i = 0; i < n; i++)
        p[i] = 1.0f;
    const int streams[] = {1, 2, 4, 8};
    const size_t chunks[] = {4096, 16384};
    for (int threads = 1; threads <= 2; threads++) {
        if (only && threads != only)
            continue;
        double best = 0;
        for (int c = 0; c < 2; c++)
            for (int k = 0; k < 4; k++)
                for (int r = 0; r < 3; r++) {
                    pthread_t th[2];
                    job jobs[2];
                    const double t0 = now();
                    for (int i = 0; i < threads; i++) {
                        jobs[i].p = p + (size_t)i * (n / threads);
                        jobs[i].n = n / threads;
                        jobs[i].chunk = chunks[c];
                        jobs[i].streams = streams[k];
                        pthread_create(&th[i], NULL, reader, &jobs[i]);
                    }
                    for (int i = 0; i < threads; i++)
                        pthread_join(th[i], NULL);
                    const double gbs = bytes / (now() - t0) / 1e9;
                    if (gbs > best)
                        best = gbs;
                }
        printf("%d %.2f\n", threads, best);
    }
    return 0;
}
"""


PEAK_SOURCE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#if defined(__AVX512F__)
typedef float vf __attribute__((vector_size(64)));
#define LANES 16
#else
typedef float vf __attribute__((vector_size(32)));
#define LANES 8
#endif
#define STEPS 100000000L

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void *run(void *out)
{
    vf c0 = {0}, c1 = c0 + 1, c2 = c0 + 2, c3 = c0 + 3, c4 = c0 + 4, c5 = c0 + 5, c6 = c0 + 6,
       c7 = c0 + 7, c8 = c0 + 8, c9 = c0 + 9;
    const vf a = c0 + 0.999f, b = c0 + 0.0001f;
    for (long i = 0; i < STEPS; i++) {
        c0 = c0 * a + b;  /* each a * b + c contracted to an FMA (-ffp-contract=fast) */
        c1 = c1 * a + b; c2 = c2 * a + b; c3 = c3 * a + b; c4 = c4 * a + b;
        c5 = c5 * a + b; c6 = c6 * a + b; c7 = c7 * a + b; c8 = c8 * a + b; c9 = c9 * a + b;
    }
    const vf s = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9;
    *(float *)out = s[0];
    return NULL;
}

int main(void)
{
    for (int threads = 1; threads <= 2; threads++) {
        pthread_t th[2];
        float r[2];
        const double t0 = now();
        for (int i = 0; i < threads; i++)
            pthread_create(&th[i], NULL, run, &r[i]);
        for (int i = 0; i < threads; i++)
            pthread_join(th[i], NULL);
        printf("%d %.2f\n", threads, threads * (double)STEPS * 10 * LANES * 2 / (now() - t0) / 1e9);
    }
    return 0;
}
"""


READ_FLAGS = ["-O3", "-march=native", "-funroll-loops"]


class ReadBound:
    """The read bandwidth measured again at every call, for one thread count: the
    program of :func:`read_bandwidth` compiled once. A shared host's memory bandwidth
    moves with its neighbours (seen here: 2 threads 35 GB/s, then 55 a few minutes
    later, no steal), so a bench that times rounds measures the bound in the same
    rounds and states its % of bound against that. A call returns GB/s, or nan when
    no C compiler works; close() (or a with block) removes the program."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self._exe = _compile(SOURCE, READ_FLAGS, self._tmp.name)

    def __call__(self, threads: int) -> float:
        if self._exe is None:
            return float("nan")
        return _run(self._exe, str(threads)).get(threads, float("nan"))

    def close(self) -> None:
        """Remove the compiled program."""
        self._tmp.cleanup()

    def __enter__(self) -> "ReadBound":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _compile(source: str, flags, folder: str, libs=()) -> Optional[str]:
    """Compile a measuring program into `folder` (``libs``: linker arguments after the
    source): its path, or None when no C compiler works."""
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    src, exe = os.path.join(folder, "m.c"), os.path.join(folder, "m")
    with open(src, "w") as f:
        f.write(source)
    try:
        subprocess.run(cc + flags + ["-pthread", src, "-o", exe, *libs], check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return exe


def _run(exe: str, *args: str) -> Dict[int, float]:
    """Run a measuring program: its "threads value" lines as a dict ({} on failure)."""
    try:
        out = subprocess.run([exe, *args], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {int(a): float(b) for a, b in (line.split() for line in out.splitlines())}


def _compile_run(source: str, flags) -> Dict[int, float]:
    """Compile and run a measuring program once ({} on failure)."""
    with tempfile.TemporaryDirectory() as tmp:
        exe = _compile(source, flags, tmp)
        return _run(exe) if exe else {}


def read_bandwidth(runs: int = 3, reader: Optional[ReadBound] = None) -> Dict[int, float]:
    """{threads: GB/s} for 1 and 2 threads, the best of ``runs`` runs (empty when no C
    compiler works); through ``reader`` when given (a bench that measures again later),
    else a ReadBound of its own. The best: on a shared machine a neighbour only ever
    lowers a run's figure, and a bound measured low would put a % of the bound above 100."""
    own = reader is None
    reader = ReadBound() if own else reader
    best: Dict[int, float] = {}
    try:
        for _ in range(runs):
            for t in (1, 2):
                v = reader(t)
                if v == v:  # not nan
                    best[t] = max(best.get(t, 0.0), v)
    finally:
        if own:
            reader.close()
    return best


def fma_peak() -> Dict[int, float]:
    """{threads: float32 GFLOP/s} of a loop of FMAs, for 1 and 2 threads."""
    return _compile_run(PEAK_SOURCE, ["-O3", "-march=native", "-ffp-contract=fast"])


if __name__ == "__main__":
    bw, peak = read_bandwidth(), fma_peak()
    if not bw or not peak:
        sys.exit("machine: no working C compiler")
    for t in bw:
        print(f"{t} thread{'s' if t > 1 else ''}: {bw[t]:.1f} GB/s read, {peak[t]:.1f} GFLOP/s FMA peak")
