"""Benchmark: the dot products decoding could use on this CPU, in one self-contained C file.

blockc's q8_0 and bfloat16 decoders (csrc/kernels) dequantise every weight to
float32 and multiply it by the exact float32 activation: the same chain as the
GEMM tile, so a KV-cache step equals the full pass. The faster alternatives
change what is computed, so they would be another weight type (a ``q8_0i``
dtype) rather than a variant of the same kernel:

  q8_0, int8 activations   the activation row quantised once per product to
                           q8_0 blocks (d = max|x| / 127 per 32), int8 x int8
                           into int32 with AVX-512 VNNI ``vpdpbusd`` (x + 128 as
                           the unsigned operand, minus 128 sum(w), a second
                           vpdpbusd), one float multiply per block (llama.cpp's
                           method); weights in blockc's q8_0 panels, permuted
                           in registers (``vpermb``)
  bf16, bf16 activations   ``vdpbf16ps``: the activation rounded to bfloat16,
                           pairs of products into float32 sums; bfloat16 panels
                           interleaved in registers (``vpermw``)

each beside blockc's method on the same panels, one thread, 8 matrices of
SmolLM2-135M's MLP shapes (576 -> 1536 and 1536 -> 576) streamed in turn, best of
60; accuracy as the relative RMS error of the outputs against an exact
(double, exact activation) product. Needs avx512_vnni, avx512_vbmi and
avx512_bf16 (skipped otherwise: the AVX2 pmaddubsw and AVX-VNNI paths are not
written).

    python benches/bench_dots.py [--docs]
"""
from __future__ import annotations

import os
import subprocess
import sysconfig
import tempfile
from typing import List, Optional

from doc_section import run as run_bench  # noqa: E402
from machine import cpu_info  # noqa: E402

NEEDS = ("avx512_vnni", "avx512vbmi", "avx512_bf16", "avx512bw", "f16c")

SOURCE = r"""
/* The dot products a decoding kernel could use: q8_0 decode as int8 x int8 (vpdpbusd) vs dequantised float; bf16 via
 * vdpbf16ps vs shift conversion. One row x (C), weights as blockc's panels:
 *   q8_0 block: uint16 d[16]; int8 q[32][16];   bf16 panel: u16 w[C][16]  */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
typedef struct { uint16_t d[16]; int8_t q[32][16]; } blk;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}

/* ---- q8_0, float dequantisation, 4 panels in flight (blockc's method) */
__attribute__((target("avx512f,f16c,fma")))
static void q8_deq512(float *y, const float *x, const blk *w, size_t c, size_t oc)
{
    const size_t nb = c / 32;
    for (size_t p = 0; p < oc / 16; p += 4) {
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (size_t b = 0; b < nb; b++) {
            __m512 d[4];
            for (int t = 0; t < 4; t++) d[t] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)w[(p + t) * nb + b].d));
            for (int k = 0; k < 32; k++) {
                const __m512 xv = _mm512_set1_ps(x[b * 32 + k]);
                for (int t = 0; t < 4; t++) {
                    const __m512 wv = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                        _mm_loadu_si128((const __m128i *)w[(p + t) * nb + b].q[k]))), d[t]);
                    acc[t] = _mm512_fmadd_ps(xv, wv, acc[t]);
                }
            }
        }
        for (int t = 0; t < 4; t++) _mm512_storeu_ps(y + (p + t) * 16, acc[t]);
    }
}

/* ---- the activation quantised: per block of 32, d = max|x| / 127, q = round(x / d) */
static void quant_x(int8_t *q, float *dx, const float *x, size_t c)
{
    for (size_t b = 0; b < c / 32; b++) {
        float m = 0; for (int k = 0; k < 32; k++) m = fmaxf(m, fabsf(x[b*32+k]));
        const float d = m / 127.0f, id = d ? 1.0f / d : 0.0f;
        dx[b] = d;
        for (int k = 0; k < 32; k++) q[b*32+k] = (int8_t)lrintf(x[b*32+k] * id);
    }
}

/* ---- q8_0, int8 x int8 -> int32 with vpdpbusd; x + 128 unsigned, corrected by 128 sum(w) */
__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi,f16c,fma")))
static void q8_vnni512(float *y, const int8_t *qx, const float *dx, const blk *w, size_t c, size_t oc)
{
    const size_t nb = c / 32;
    /* dword j of the permuted 64 bytes = (q[k0][j], q[k1][j], q[k2][j], q[k3][j]) */
    uint8_t idx[64];
    for (int j = 0; j < 16; j++) for (int t = 0; t < 4; t++) idx[4*j+t] = (uint8_t)(16*t + j);
    const __m512i perm = _mm512_loadu_si512(idx), c80 = _mm512_set1_epi8((char)0x80);
    for (size_t p = 0; p < oc / 16; p += 4) {
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (size_t b = 0; b < nb; b++) {
            __m512i s[4], cs[4];
            for (int t = 0; t < 4; t++) s[t] = cs[t] = _mm512_setzero_si512();
            const uint32_t *xu = (const uint32_t *)(qx + b * 32);
            for (int g = 0; g < 8; g++) {
                const __m512i xv = _mm512_xor_si512(_mm512_set1_epi32((int)xu[g]), c80);  /* x + 128 */
                for (int t = 0; t < 4; t++) {
                    const __m512i wv = _mm512_permutexvar_epi8(perm, _mm512_loadu_si512(w[(p + t) * nb + b].q[4 * g]));
                    s[t] = _mm512_dpbusd_epi32(s[t], xv, wv);
                    cs[t] = _mm512_dpbusd_epi32(cs[t], c80, wv);
                }
            }
            const __m512 dxv = _mm512_set1_ps(dx[b]);
            for (int t = 0; t < 4; t++) {
                const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)w[(p + t) * nb + b].d)), dxv);
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s[t], cs[t])), d, acc[t]);
            }
        }
        for (int t = 0; t < 4; t++) _mm512_storeu_ps(y + (p + t) * 16, acc[t]);
    }
}

/* ---- bf16: the shift conversion (blockc's) vs vdpbf16ps with x rounded to bf16 */
__attribute__((target("avx512f,fma")))
static void bf16_shift512(float *y, const float *x, const uint16_t *w, size_t c, size_t oc)
{
    for (size_t p = 0; p < oc / 16; p += 4) {
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (size_t k = 0; k < c; k++) {
            const __m512 xv = _mm512_set1_ps(x[k]);
            for (int t = 0; t < 4; t++) {
                const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w + (p + t) * c * 16 + k * 16)));
                acc[t] = _mm512_fmadd_ps(xv, _mm512_castsi512_ps(_mm512_slli_epi32(u, 16)), acc[t]);
            }
        }
        for (int t = 0; t < 4; t++) _mm512_storeu_ps(y + (p + t) * 16, acc[t]);
    }
}

__attribute__((target("avx512f,avx512bw,avx512bf16,fma")))
static void bf16_dp512(float *y, const uint32_t *xb2, const uint16_t *w, size_t c, size_t oc)
{
    /* word 2j of the permuted 64 bytes = row k's lane j, 2j+1 = row k+1's lane j */
    uint16_t idx[32];
    for (int j = 0; j < 16; j++) { idx[2*j] = (uint16_t)j; idx[2*j+1] = (uint16_t)(16 + j); }
    const __m512i perm = _mm512_loadu_si512(idx);
    for (size_t p = 0; p < oc / 16; p += 4) {
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (size_t k = 0; k < c; k += 2) {
            const __m512bh xv = (__m512bh)_mm512_set1_epi32((int)xb2[k / 2]);
            for (int t = 0; t < 4; t++) {
                const __m512i wv = _mm512_permutexvar_epi16(perm, _mm512_loadu_si512(w + (p + t) * c * 16 + k * 16));
                acc[t] = _mm512_dpbf16_ps(acc[t], xv, (__m512bh)wv);
            }
        }
        for (int t = 0; t < 4; t++) _mm512_storeu_ps(y + (p + t) * 16, acc[t]);
    }
}

static uint16_t f2bf(float f){uint32_t u;memcpy(&u,&f,4);u+=0x7fff+((u>>16)&1);return (uint16_t)(u>>16);}
static float bf2f(uint16_t h){uint32_t u=(uint32_t)h<<16;float f;memcpy(&f,&u,4);return f;}
static float h2f(uint16_t h){return _cvtsh_ss(h);}

int main(int argc, char **argv)
{
    const size_t c = argc > 1 ? atoi(argv[1]) : 576, oc = argc > 2 ? atoi(argv[2]) : 1536;
    const size_t layers = 8;   /* several matrices so the set exceeds L2 */
    const size_t nb = c / 32, np = oc / 16;
    blk *w8 = aligned_alloc(64, layers * np * nb * sizeof(blk));
    uint16_t *wb = aligned_alloc(64, layers * c * oc * 2);
    float *x = malloc(c * 4), *y = malloc(oc * 4), *yr = malloc(oc * 4), *dx = malloc(nb * 4);
    int8_t *qx = malloc(c); uint32_t *xb2 = malloc(c * 2);
    srand(1);
    for (size_t i = 0; i < layers * np * nb; i++) {
        for (int j = 0; j < 16; j++) w8[i].d[j] = _cvtss_sh(0.02f / 127 * (1 + (rand() % 100) / 100.0f), 0);
        for (int k = 0; k < 32; k++) for (int j = 0; j < 16; j++) w8[i].q[k][j] = (int8_t)(rand() % 255 - 127);
    }
    for (size_t i = 0; i < layers * c * oc; i++) wb[i] = f2bf(((rand() % 2001) - 1000) * 2e-5f);
    for (size_t k = 0; k < c; k++) x[k] = (float)((rand() % 2001) - 1000) / 1000.0f * (1 + (k % 17 == 0) * 5);
    for (size_t k = 0; k < c; k += 2) xb2[k/2] = (uint32_t)f2bf(x[k]) | ((uint32_t)f2bf(x[k+1]) << 16);
    /* accuracy against a double reference (layer 0) */
    double e_deq = 0, e_vnni = 0, e_sh = 0, e_dp = 0, n8 = 0, nb16 = 0;
    quant_x(qx, dx, x, c);
    q8_deq512(y, x, w8, c, oc);
    q8_vnni512(yr, qx, dx, w8, c, oc);
    for (size_t o = 0; o < oc; o++) {
        double r = 0; const size_t p = o / 16, j = o % 16;
        for (size_t k = 0; k < c; k++) { const blk *b = &w8[p * nb + k / 32]; r += (double)x[k] * h2f(b->d[j]) * b->q[k % 32][j]; }
        e_deq += (y[o] - r) * (y[o] - r); e_vnni += (yr[o] - r) * (yr[o] - r); n8 += r * r;
    }
    bf16_shift512(y, x, wb, c, oc);
    bf16_dp512(yr, xb2, wb, c, oc);
    for (size_t o = 0; o < oc; o++) {
        double r = 0; const size_t p = o / 16, j = o % 16;
        for (size_t k = 0; k < c; k++) r += (double)x[k] * bf2f(wb[p * c * 16 + k * 16 + j]);
        e_sh += (y[o] - r) * (y[o] - r); e_dp += (yr[o] - r) * (yr[o] - r); nb16 += r * r;
    }
    printf("C=%zu OC=%zu x%zu matrices; relative rms error vs exact-activation double:\n", c, oc, layers);
    printf("  q8_0 float dequant %.2e   q8_0 int8 activations (vpdpbusd) %.2e\n", sqrt(e_deq / n8), sqrt(e_vnni / n8));
    printf("  bf16 shift-convert %.2e   bf16 activations (vdpbf16ps)     %.2e\n", sqrt(e_sh / nb16), sqrt(e_dp / nb16));
    const int reps = 60;
    double best[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
    for (int r = 0; r < reps; r++) {
        for (int v = 0; v < 5; v++) {
            const double t0 = now();
            for (size_t l = 0; l < layers; l++) {
                const blk *wl = w8 + l * np * nb; const uint16_t *bl = wb + l * c * oc;
                if (v == 0) q8_deq512(y, x, wl, c, oc);
                else if (v == 1) { quant_x(qx, dx, x, c); q8_vnni512(y, qx, dx, wl, c, oc); }
                else if (v == 2) bf16_shift512(y, x, bl, c, oc);
                else if (v == 3) bf16_dp512(y, xb2, bl, c, oc);
                else { memcpy(yr, y, 4); }
            }
            const double t = now() - t0;
            if (t < best[v]) best[v] = t;
        }
    }
    const double q8b = layers * np * nb * sizeof(blk), b16 = layers * c * oc * 2.0;
    printf("single thread, best of %d (GB/s of weights streamed; matrices from L3/DRAM):\n", reps);
    printf("  q8_0 float dequant   %6.1f GB/s  %7.1f us\n", q8b / best[0] / 1e9, best[0] * 1e6 / layers);
    printf("  q8_0 int8 vpdpbusd   %6.1f GB/s  %7.1f us  (x quantised once per product included) %.2fx\n", q8b / best[1] / 1e9, best[1] * 1e6 / layers, best[0] / best[1]);
    printf("  bf16 shift convert   %6.1f GB/s  %7.1f us\n", b16 / best[2] / 1e9, best[2] * 1e6 / layers);
    printf("  bf16 vdpbf16ps       %6.1f GB/s  %7.1f us  %.2fx\n", b16 / best[3] / 1e9, best[3] * 1e6 / layers, best[2] / best[3]);
    return 0;
}
"""


def main(argv: Optional[List[str]] = None) -> int:
    name, flags = cpu_info()
    missing = [f for f in NEEDS if f not in flags]
    try:
        load = f"load average {os.getloadavg()[0]:.2f} at the start; "
    except (AttributeError, OSError):
        load = ""
    print(f"{load}CPU: {name}")
    if missing:
        print(f"skipped: this CPU lacks {', '.join(missing)}")
        return 0
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "dots.c"), os.path.join(d, "dots")
        with open(src, "w") as f:
            f.write(SOURCE)
        subprocess.run(cc + ["-O2", "-mf16c", src, "-o", exe, "-lm"], check=True)
        for shape in (("576", "1536"), ("1536", "576")):
            print(subprocess.run([exe, *shape], check=True, capture_output=True,
                                 text=True).stdout.rstrip())
    return 0


if __name__ == "__main__":
    run_bench(main, "results/kernels.md", "dots")
