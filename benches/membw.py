"""The machine's memory read bandwidth, measured in the same run as a bench.

A small STREAM-like C program (compiled here with the C compiler blockc builds
with) sums a 1 GiB float32 array with 1 and 2 threads, each thread reading its
half in groups of 1, 2, 4 or 8 adjacent chunks (16 or 64 KiB) side by side, one
vector accumulator per stream (several nearby streams read faster than one on
the machines measured: 25 against 19 GB/s here); the best of three passes per
setting, the best setting per thread count. This is a read-only bound: a
decode step only reads weights (and the KV cache) and writes a few vectors.

    python benches/membw.py
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tempfile
from typing import Dict

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

int main(void)
{
    const size_t bytes = (size_t)1 << 30, n = bytes / sizeof(float);
    float *p = aligned_alloc(64, bytes);
    if (!p)
        return 1;
    for (size_t i = 0; i < n; i++)
        p[i] = 1.0f;
    const int streams[] = {1, 2, 4, 8};
    const size_t chunks[] = {4096, 16384};
    for (int threads = 1; threads <= 2; threads++) {
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


def read_bandwidth() -> Dict[int, float]:
    """{threads: GB/s} for 1 and 2 threads (empty when no C compiler works)."""
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "bw.c"), os.path.join(tmp, "bw")
        with open(src, "w") as f:
            f.write(SOURCE)
        try:
            subprocess.run(cc + ["-O3", "-march=native", "-funroll-loops", "-pthread", src, "-o", exe], check=True,
                           capture_output=True)
            out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return {}
    return {int(a): float(b) for a, b in (line.split() for line in out.splitlines())}


if __name__ == "__main__":
    bw = read_bandwidth()
    if not bw:
        sys.exit("membw: no working C compiler")
    for t, gbs in bw.items():
        print(f"{t} thread{'s' if t > 1 else ''}: {gbs:.1f} GB/s read")
