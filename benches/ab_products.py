"""Two builds' decoding products against each other in one process, pass by pass.

A decode step is a few hundred small products (SmolLM2's shape: 30 layers of
960x576, 576x576, 1536x576 twice and 576x1536), each streaming its weights
once. On a shared host the memory bandwidth moves from minute to minute, so two
builds timed in separate processes (ab_builds.py) differ by more than a layout
or a prefetch change is worth. Here one C program loads both builds' extension
modules (dlopen: each is a C library too), packs a model's worth of layer-shaped
matrices with each (its own format, into one huge-page arena apiece), then times
a pass over them (one row of x, layer by layer, as decoding reads them) with
each build in turn, and a plain read of the same bytes as the bound, for
``--passes`` rounds. The table: each one's median and best GB/s, its time over
the old build's in the same round (median and quartiles; < 1: faster than the
old build), the CPU, the load average and the hypervisor's steal.

    git worktree add /tmp/old <commit> && (cd /tmp/old && python setup.py build_ext -i)
    python benches/ab_products.py --old /tmp/old --new . --dtype bfloat16i \
        --ways auto,avx2,avx512-fma --threads 1,2

``--ways`` runs each build as the environment asks it to (BLOCKC_ISA forces an
instruction set; avx512-fma is AVX-512 without vdpbf16ps; a ``-pf-on`` or ``-pf-off``
suffix, or ``pf-on``/``pf-off`` alone, forces the integer formats' software prefetch,
BLOCKC_PREFETCH); ``--docs`` writes the
table into docs/results/panels.md, section ab-products-<dtype> (ab-products-<dtype>-<tag> with
``--tag``, for a second change to the same format).
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile

from machine import _compile, cpu_name, cpu_times, run_footer

#: one layer's products (outputs, inputs) and the layers, by model shape
SHAPES = {
    "smollm2": ([(960, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)], 30),
    "gpt2": ([(2304, 768), (768, 768), (3072, 768), (768, 3072)], 12),
    # Llama-3.2-1B: q, k, v, o, gate, up, down (16 layers)
    "llama1b": ([(2048, 2048), (512, 2048), (512, 2048), (2048, 2048), (8192, 2048),
                 (8192, 2048), (2048, 8192)], 16),
}

SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef int (*size_fn)(size_t *, int, size_t, size_t);
typedef int (*pack_fn)(void *, size_t, const float *, int, size_t, size_t);
typedef int (*lin_fn)(float *, const float *, const void *, size_t, int, const float *,
                      size_t, size_t, size_t);
typedef int (*threads_fn)(int);
typedef int (*info_fn)(char *, size_t, size_t *, size_t *, int);

static clockid_t clock_id = CLOCK_MONOTONIC;  /* CLOCK_PROCESS_CPUTIME_ID: --clock cpu */

static double now(void)
{
    struct timespec t;
    clock_gettime(clock_id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static volatile float sink;

/* the bound: every byte of the arena read once, four 32-byte loads in flight */
static void read_all(const unsigned char *p, size_t n)
{
    __m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a = _mm256_add_ps(a, _mm256_load_ps((const float *)(p + i)));
        b = _mm256_add_ps(b, _mm256_load_ps((const float *)(p + i + 32)));
        c = _mm256_add_ps(c, _mm256_load_ps((const float *)(p + i + 64)));
        d = _mm256_add_ps(d, _mm256_load_ps((const float *)(p + i + 96)));
    }
    sink = _mm256_cvtss_f32(_mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
}

/* argv: dtype-name threads rows passes layers nshapes (oc c)... lib_old lib_new [cpu];
 * prints "pass build seconds bytes" lines (build 2: the read, its time scaled
 * to the weights' bytes); exit status 3: a build has no such dtype */
int main(int argc, char **argv)
{
    int dt = -1;
    const int th = atoi(argv[2]), rows = atoi(argv[3]), passes = atoi(argv[4]);
    const int layers = atoi(argv[5]), ns = atoi(argv[6]);
    if (argc > 9 + 2 * ns && !strcmp(argv[9 + 2 * ns], "cpu"))
        clock_id = CLOCK_PROCESS_CPUTIME_ID;
    size_t oc[16], c[16], wmax = 0;
    for (int s = 0; s < ns; s++) {
        oc[s] = strtoull(argv[7 + 2 * s], NULL, 10);
        c[s] = strtoull(argv[8 + 2 * s], NULL, 10);
        if (oc[s] * c[s] > wmax)
            wmax = oc[s] * c[s];
    }
    float *w = malloc(wmax * sizeof(float)), *x = malloc(4 * 65536 * sizeof(float));
    float *y = malloc(4 * 65536 * sizeof(float));
    if (!w || !x || !y)
        return 2;
    for (size_t i = 0; i < wmax; i++)
        w[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (int i = 0; i < 4 * 65536; i++)
        x[i] = 0.01f * (float)(i % 37);
    if (rows < 1 || rows > 4)
        return 2;
    lin_fn lin[2];
    unsigned char *arena[2];
    size_t nbytes[2][16], total[2], weights[2] = {0, 0};
    for (int v = 0; v < 2; v++) {
        void *h = dlopen(argv[7 + 2 * ns + v], RTLD_LAZY | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "%s\n", dlerror());
            return 2;
        }
        size_fn psize = (size_fn)dlsym(h, "bc_pack_size");
        pack_fn pack = (pack_fn)dlsym(h, "bc_pack");
        lin[v] = (lin_fn)dlsym(h, "bc_linear_packed");
        threads_fn set_threads = (threads_fn)dlsym(h, "bc_set_num_threads");
        info_fn info = (info_fn)dlsym(h, "bc_dtype_info");
        if (!psize || !pack || !lin[v] || !set_threads || !info || set_threads(th))
            return 2;
        int code = -1;
        for (int k = 0; k < 256 && code < 0; k++) {
            char name[64];
            if (!info(name, sizeof name, NULL, NULL, k) && !strcmp(name, argv[1]))
                code = k;
        }
        if (code < 0 || (dt >= 0 && code != dt))
            return 3;
        dt = code;
        total[v] = 0;
        for (int s = 0; s < ns; s++) {
            if (psize(&nbytes[v][s], dt, oc[s], c[s]))
                return 2;
            total[v] += (nbytes[v][s] + 4095) / 4096 * 4096 * (size_t)layers;
        }
        const size_t huge = (size_t)1 << 21, sz = (total[v] + huge - 1) / huge * huge;
        arena[v] = aligned_alloc(huge, sz);
        if (!arena[v])
            return 2;
        madvise(arena[v], sz, MADV_HUGEPAGE);
        size_t off = 0;
        for (int l = 0; l < layers; l++)
            for (int s = 0; s < ns; s++) {
                if (pack(arena[v] + off, nbytes[v][s], w, dt, oc[s], c[s]))
                    return 2;
                off += (nbytes[v][s] + 4095) / 4096 * 4096;
            }
    }
    for (int v = 0; v < 2; v++)
        for (int s = 0; s < ns; s++)
            weights[v] += nbytes[v][s] * (size_t)layers;
    for (int p = 0; p < passes; p++)
        for (int k = 0; k < 3; k++) {
            const int v = (k + p) % 3;  /* who goes first turns round */
            const double t0 = now();
            if (v == 2) {
                read_all(arena[1], total[1]);
                printf("%d 2 %.9f %zu\n", p, (now() - t0) * (double)weights[1] / (double)total[1],
                       weights[1]);
                continue;
            }
            size_t off = 0;
            for (int l = 0; l < layers; l++)
                for (int s = 0; s < ns; s++) {
                    lin[v](y, x, arena[v] + off, nbytes[v][s], dt, NULL, (size_t)rows, c[s], oc[s]);
                    off += (nbytes[v][s] + 4095) / 4096 * 4096;
                }
            printf("%d %d %.9f %zu\n", p, v, now() - t0, weights[v]);
        }
    return 0;
}
"""


#: the ways to run, as the environment asks each build for them
WAYS = {
    "auto": {},
    "avx2": {"BLOCKC_ISA": "avx2"},
    "avx512": {"BLOCKC_ISA": "avx512"},
    "avx512-fma": {"BLOCKC_ISA": "avx512", "BLOCKC_AVX512BF16": "0"},  # no vdpbf16ps
}
# integer decoding's software prefetch forced on every format, or off (BLOCKC_PREFETCH; a
# build older than the setting ignores it), on each way above: e.g. avx2-pf-off
WAYS.update({f"{w}-pf-{m}" if w != "auto" else f"pf-{m}": dict(env, BLOCKC_PREFETCH=m)
             for w, env in list(WAYS.items()) for m in ("on", "off")})


def extension(root: str) -> str:
    """The compiled extension module of the checkout at ``root``."""
    found = sorted(glob.glob(os.path.join(root, "blockc", "_blockc*.so")))
    if not found:
        sys.exit(f"no built extension under {root}/blockc (python setup.py build_ext -i)")
    return os.path.abspath(found[0])


def commit(root: str) -> str:
    """The short commit of the checkout at ``root`` ("+" when what builds the extension
    has changes: csrc, build_ffi.py, setup.py), or its path when it is not a git
    checkout."""
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "-uno", "--",
                                "csrc", "build_ffi.py", "setup.py"], check=True,
                               capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return root
    return head + ("+" if dirty else "")


def quartiles(v):
    """(first quartile, median, third quartile) of v."""
    q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
    return q[0], q[1], q[2]


def measure(exe: str, args, way: str):
    """{build: {pass: seconds}} and {build: bytes} of one run of the program, the way
    ``way`` (WAYS) set in its environment; build 2 the read."""
    env = dict(os.environ, **WAYS[way])
    run = subprocess.run([exe, *args], capture_output=True, text=True, env=env)
    if run.returncode == 3:
        sys.exit(f"--dtype {args[0]}: not a weight format of both builds")
    if run.returncode:
        sys.exit(f"the measuring program failed ({run.returncode}): {run.stderr.strip()}")
    secs, nbytes = {0: {}, 1: {}, 2: {}}, {}
    for line in run.stdout.splitlines():
        p, v, t, b = line.split()
        secs[int(v)][int(p)] = float(t)
        nbytes[int(v)] = int(b)
    return secs, nbytes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="checkout whose build is the reference")
    ap.add_argument("--new", required=True, help="checkout whose build is measured against it")
    ap.add_argument("--dtype", default="bfloat16i")
    ap.add_argument("--model", choices=sorted(SHAPES), default="smollm2")
    ap.add_argument("--threads", default="1", help="thread counts, comma-separated")
    ap.add_argument("--ways", default="auto",
                    help=f"comma-separated, of {', '.join(WAYS)} (avx512-fma: AVX-512 without "
                         "vdpbf16ps)")
    ap.add_argument("--rows", default="1",
                    help="rows of x a product takes (decoding 1-3 sequences at once; 1-4), "
                         "comma-separated")
    ap.add_argument("--passes", type=int, default=40)
    ap.add_argument("--shapes", default="",
                    help="products OUTxIN, comma-separated, in place of --model's (e.g. 512x2048)")
    ap.add_argument("--layers", type=int, default=0,
                    help="copies of the shapes streamed in turn (0: the model's layers)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall time, or the process's CPU time (with --threads 1: the one "
                         "thread's, what a neighbour on the core does not add to)")
    ap.add_argument("--tag", default="", help="with --docs: the section ab-products-<dtype>-<tag>")
    a = ap.parse_args(argv)
    ways, rows = a.ways.split(","), a.rows.split(",")
    if any(r not in ("1", "2", "3", "4") for r in rows):
        sys.exit(f"--rows: {a.rows!r} is not a list of 1-4")
    for w in ways:
        if w not in WAYS:
            sys.exit(f"--ways: {w!r} is not one of {', '.join(WAYS)}")
    shapes, layers = SHAPES[a.model]
    if a.shapes:
        try:
            shapes = [tuple(int(n) for n in sh.split("x")) for sh in a.shapes.split(",")]
        except ValueError:
            sys.exit(f"--shapes: {a.shapes!r} is not a list of OUTxIN")
        if any(len(sh) != 2 or min(sh) < 1 for sh in shapes) or len(shapes) > 16:
            sys.exit(f"--shapes: {a.shapes!r} is not a list of at most 16 OUTxIN")
    if a.layers > 0:
        layers = a.layers
    libs = [extension(a.old), extension(a.new)]
    names = {0: f"old ({commit(a.old)})", 1: f"new ({commit(a.new)})",
             2: "read of the same bytes"}
    print(f"CPU: {cpu_name()}")
    print(f"{a.shapes and 'shapes' or a.model}: {layers} layers of "
          f"{', '.join(f'{o}x{c}' for o, c in shapes)} products on {a.rows} row(s) of x, "
          f"{a.dtype}, {a.passes} passes a run, the builds and the read in turn within each "
          f"pass, {a.clock} time")
    with tempfile.TemporaryDirectory() as tmp:
        exe = _compile(SOURCE, ["-O2", "-mavx2"], tmp, ["-ldl"])
        if exe is None:
            sys.exit("no C compiler")
        print()
        print("| way | threads | rows | build | median GB/s | best GB/s "
              "| time / old (q1, median, q3) |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        t0 = cpu_times()
        for way, th, r in ((w, t, r) for w in ways for t in a.threads.split(",") for r in rows):
            args = [a.dtype, th, r, str(a.passes), str(layers), str(len(shapes))]
            args += [str(n) for s in shapes for n in s] + libs + [a.clock]
            secs, nbytes = measure(exe, args, way)
            for v in (0, 1, 2):
                order = sorted(secs[v])
                gb = [nbytes[v] / secs[v][p] / 1e9 for p in order]
                q1, q2, q3 = quartiles([secs[v][p] / secs[0][p] for p in order])
                print(f"| {way} | {th} | {r} | {names[v]} | {statistics.median(gb):.1f} "
                      f"| {max(gb):.1f} | {q1:.3f}, {q2:.3f}, {q3:.3f} |")
    print()
    print(run_footer(t0))
    return 0


if __name__ == "__main__":
    from doc_section import run as run_bench
    pre = argparse.ArgumentParser(add_help=False)  # the section is the format's
    pre.add_argument("--dtype", default="bfloat16i")
    pre.add_argument("--tag", default="")
    known = pre.parse_known_args()[0]
    run_bench(main, "results/panels.md", f"ab-products-{known.dtype}" + (f"-{known.tag}" if known.tag else ""))
