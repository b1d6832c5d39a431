"""The public single-kernel entry points allocate nothing per call: the only heap
memory the library takes is the runtime's per-thread scratch, grown once and kept.

A small C program linked with the library's sources counts every malloc, calloc,
realloc and posix_memalign the library makes (GNU ld's --wrap: calls from inside
libc, its thread creation included, are not counted), warms up, then repeats calls."""
import os
import re
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "c"))
import build_driver  # noqa: E402

sys.path.pop(0)

WRAPPED = ("malloc", "calloc", "realloc", "posix_memalign")

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include "blockc.h"

static long n_alloc;
void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
void *__wrap_malloc(size_t n) { n_alloc++; return __real_malloc(n); }
void *__wrap_calloc(size_t k, size_t n) { n_alloc++; return __real_calloc(k, n); }
void *__wrap_realloc(void *p, size_t n) { n_alloc++; return __real_realloc(p, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { n_alloc++; return __real_posix_memalign(p, a, n); }

#define B 2
#define H 3
#define T 37
#define D 16
#define N (B * H * T * D)
static float q[N], k[N], v[N], o[N], g[N], y[N];

/* allocations made by `calls` repetitions of every single-kernel entry point */
static long round_of(int calls)
{
    const long before = n_alloc;
    for (int r = 0; r < calls; r++) {
        if (bc_attention(o, q, k, v, B, H, T, T, D, r & 1)
            || bc_linear(y, q, k, NULL, B * H * T, D, D)
            || bc_rmsnorm(y, q, g, B * H * T, D, 1e-5f)
            || bc_layernorm(y, q, g, g, B * H * T, D, 1e-5f)
            || bc_activation(y, q, N, BC_ACT_GELU) || bc_swiglu(y, q, k, N)
            || bc_residual_add(y, q, k, N)) {
            printf("call failed\n");
            exit(1);
        }
    }
    return n_alloc - before;
}

int main(void)
{
    for (int i = 0; i < N; i++) {
        q[i] = (float)(i % 7) * 0.1f - 0.3f;
        k[i] = (float)(i % 5) * 0.2f - 0.4f;
        v[i] = (float)(i % 3) * 0.3f;
        g[i] = 1.0f;
    }
    if (bc_set_num_threads(1))
        return 1;
    const long warm = round_of(2);
    printf("warm-up %ld, per-call %ld\n", warm, round_of(50));
    return 0;
}
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="GNU ld's --wrap")
@pytest.mark.skipif(shutil.which(build_driver.compiler()[0]) is None, reason="no C compiler")
def test_single_kernel_calls_allocate_nothing(tmp_path, c_objects):
    src = tmp_path / "count_alloc.c"
    src.write_text(PROGRAM)
    exe = str(tmp_path / "count_alloc")
    wrap = ["-Wl," + ",".join(f"--wrap={f}" for f in WRAPPED)]
    # the compiler and the program must not inherit a preloaded sanitizer runtime
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "BLOCKC_ISA")}
    build = subprocess.run(build_driver.command(exe, tests=[str(src)], ldflags_extra=wrap,
                                                objects=c_objects),
                           env=env, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=120)
    m = re.search(r"^warm-up (\d+), per-call (\d+)$", run.stdout, flags=re.M)
    assert run.returncode == 0 and m, run.stdout + run.stderr
    # the counter works: the warm-up grows the runtime's scratch at least once
    assert int(m.group(1)) >= 1, run.stdout
    # 50 rounds of the seven entry points: not one allocation
    assert int(m.group(2)) == 0, run.stdout


FAILING = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "blockc.h"

/* posix_memalign fails from the start: the runtime can never get its scratch */
int __real_posix_memalign(void **p, size_t a, size_t n);
int __wrap_posix_memalign(void **p, size_t a, size_t n) { (void)p; (void)a; (void)n; return 12; }

#define N 64
static float x[N * N], w[N * N], y[N * N], g[N];

static int untouched(void)
{
    for (int i = 0; i < N * N; i++)
        if (y[i] != -7.0f)
            return 0;
    return 1;
}

int main(void)
{
    for (int i = 0; i < N * N; i++) { x[i] = 0.01f * (float)(i % 13); w[i] = 0.02f * (float)(i % 7); }
    for (int i = 0; i < N; i++) g[i] = 1.0f;
    bc_block_config c = {16, 2, 32, BC_NORM_RMS, BC_PLACE_PRE, BC_ACT_GELU_TANH, 1, 1, 1e-5f};
    bc_block_weights bw;
    memset(&bw, 0, sizeof bw);
    bw.qkv_w = w; bw.proj_w = w; bw.up_w = w; bw.down_w = w;
    size_t nwork = 0;
    if (bc_block_workspace_size(&nwork, &c, 1, 4)) return 2;
    float *work = malloc(nwork * sizeof(float));
    struct { const char *name; int st; } r[8];
    int k = 0;
#define CALL(e) do { for (int i = 0; i < N * N; i++) y[i] = -7.0f; \
                     r[k].name = #e; r[k].st = (e); \
                     printf("%s %d %d\n", r[k].name, r[k].st, untouched()); k++; } while (0)
    CALL(bc_linear(y, x, w, NULL, N, N, N));
    CALL(bc_rmsnorm(y, x, g, N, N, 1e-5f));
    CALL(bc_layernorm(y, x, g, g, N, N, 1e-5f));
    CALL(bc_attention(y, x, x, x, 1, 1, N, N, N, 1));
    CALL(bc_activation(y, x, N * N, BC_ACT_GELU));
    CALL(bc_swiglu(y, x, w, N * N));
    CALL(bc_residual_add(y, x, w, N * N));
    CALL(bc_block_forward(y, x, &c, &bw, 1, 4, work, nwork));
    free(work);
    return 0;
}
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="GNU ld's --wrap")
@pytest.mark.skipif(shutil.which(build_driver.compiler()[0]) is None, reason="no C compiler")
def test_scratch_allocation_failure_is_a_status_and_writes_nothing(tmp_path, c_objects):
    # the only memory the library allocates is its scratch, taken before any output
    # is written: when it cannot be had, every entry point returns BC_ENOMEM (6)
    # and leaves its output as it was (no fallback arithmetic, no partial result)
    src = tmp_path / "failing_alloc.c"
    src.write_text(FAILING)
    exe = str(tmp_path / "failing_alloc")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "BLOCKC_ISA")}
    build = subprocess.run(build_driver.command(exe, tests=[str(src)],
                                                ldflags_extra=["-Wl,--wrap=posix_memalign"],
                                                objects=c_objects),
                           env=env, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [line.rsplit(" ", 2) for line in run.stdout.splitlines()]
    assert len(rows) == 8, run.stdout
    for name, status, untouched in rows:
        assert (status, untouched) == ("6", "1"), name
