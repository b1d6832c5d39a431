/* linear_rows.c: the linear for a few rows (decoding: one token per sequence).
 *
 * bc_k_linear_ex packs the weight into panels on every call, which pays when
 * it is reused over many rows and costs several passes over memory when there
 * is only one row. Here each weight row is streamed once, straight from w, for
 * all n rows: 8 weight rows are loaded 8 columns at a time and transposed in
 * registers, so every output lane runs the same chain as in bc_k_linear_ex:
 *   acc = fma(x[k], w[o][k], acc) over each BC_KC block of k from 0,
 *   y = r + acc (first block, or acc without r), y += acc (later blocks),
 *   y += b, then act (the same vector activation, through bc_k_act).
 * The result is bit for bit that of bc_k_linear_ex, for every row count and
 * thread count (each output is computed by one thread). AVX2+FMA only; other
 * instruction sets (and BLOCKC_ISA=generic) go to bc_k_linear_ex.
 */
#include <stddef.h>
#include "kernels.h"
#include "bc_fast.h"
#include "bc_rt.h"

#ifdef BC_HAVE_X86_KERNELS
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
#include <immintrin.h>

/* t[m] lane j <- s[j][m]: the 8x8 transpose of rows s[0..7] */
static inline void transpose8(__m256 t[8], const __m256 s[8])
{
    const __m256 a0 = _mm256_unpacklo_ps(s[0], s[1]), a1 = _mm256_unpackhi_ps(s[0], s[1]);
    const __m256 a2 = _mm256_unpacklo_ps(s[2], s[3]), a3 = _mm256_unpackhi_ps(s[2], s[3]);
    const __m256 a4 = _mm256_unpacklo_ps(s[4], s[5]), a5 = _mm256_unpackhi_ps(s[4], s[5]);
    const __m256 a6 = _mm256_unpacklo_ps(s[6], s[7]), a7 = _mm256_unpackhi_ps(s[6], s[7]);
    const __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xEE);
    const __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xEE);
    const __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xEE);
    const __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xEE);
    t[0] = _mm256_permute2f128_ps(b0, b4, 0x20);
    t[1] = _mm256_permute2f128_ps(b1, b5, 0x20);
    t[2] = _mm256_permute2f128_ps(b2, b6, 0x20);
    t[3] = _mm256_permute2f128_ps(b3, b7, 0x20);
    t[4] = _mm256_permute2f128_ps(b0, b4, 0x31);
    t[5] = _mm256_permute2f128_ps(b1, b5, 0x31);
    t[6] = _mm256_permute2f128_ps(b2, b6, 0x31);
    t[7] = _mm256_permute2f128_ps(b3, b7, 0x31);
}

#define ROWS_MAX 4

/* Outputs o0..o0+nv-1 (nv <= 8) of rows 0..n-1 (n <= ROWS_MAX), without act. */
static void group8(float *y, const float *x, const float *w, const float *b, const float *r,
                   size_t n, size_t c, size_t oc, size_t o0, size_t nv)
{
    const float *wr[8];
    for (size_t j = 0; j < 8; j++)  /* lanes past nv repeat the last row: computed, not stored */
        wr[j] = w + (o0 + (j < nv ? j : nv - 1)) * c;
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nv),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 v[ROWS_MAX] = {_mm256_setzero_ps()};
    for (size_t pc = 0; pc < c; pc += BC_KC) {
        const size_t kc = c - pc < BC_KC ? c - pc : BC_KC;
        __m256 acc[ROWS_MAX];
        for (size_t i = 0; i < n; i++)
            acc[i] = _mm256_setzero_ps();
        size_t k = 0;
        for (; k + 8 <= kc; k += 8) {
            __m256 s[8], t[8];
            for (size_t j = 0; j < 8; j++)
                s[j] = _mm256_loadu_ps(wr[j] + pc + k);
            transpose8(t, s);
            for (size_t i = 0; i < n; i++) {
                const float *xi = x + i * c + pc + k;
                for (size_t m = 0; m < 8; m++)
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(xi[m]), t[m], acc[i]);
            }
        }
        for (; k < kc; k++) {
            const size_t q = pc + k;
            const __m256 t = _mm256_setr_ps(wr[0][q], wr[1][q], wr[2][q], wr[3][q],
                                            wr[4][q], wr[5][q], wr[6][q], wr[7][q]);
            for (size_t i = 0; i < n; i++)
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(x[i * c + q]), t, acc[i]);
        }
        for (size_t i = 0; i < n; i++) {
            if (pc)
                v[i] = _mm256_add_ps(v[i], acc[i]);
            else if (r)
                v[i] = _mm256_add_ps(_mm256_maskload_ps(r + i * oc + o0, mask), acc[i]);
            else
                v[i] = acc[i];
        }
    }
    const __m256 bb = b ? _mm256_maskload_ps(b + o0, mask) : _mm256_setzero_ps();
    for (size_t i = 0; i < n; i++) {
        const __m256 out = b ? _mm256_add_ps(v[i], bb) : v[i];
        _mm256_maskstore_ps(y + i * oc + o0, mask, out);
    }
}

// y (N,OC), x (N,C), w (OC,C), b (OC) or NULL, r (N,OC) or NULL (may be y); N <= ROWS_MAX
static void rows_avx2(float *y, const float *x, const float *w, const float *b,
                      const float *r, size_t n, size_t c, size_t oc)
{
    const long long ng = (long long)((oc + 7) / 8);
    const int nt = bc_rt_threads(2.0 * (double)n * (double)c * (double)oc);
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt < ng ? nt : (int)ng) if (nt > 1)
#endif
    for (long long g = 0; g < ng; g++) {
        const size_t o0 = (size_t)g * 8;
        group8(y, x, w, b, r, n, c, oc, o0, oc - o0 < 8 ? oc - o0 : 8);
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif /* BC_HAVE_X86_KERNELS */

// y (N,OC), x (N,C), w (OC,C), b (OC) or NULL, r (N,OC) or NULL (may be y)
void bc_k_linear_rows(float *y, const float *x, const float *w, const float *b,
                      const float *r, size_t n, size_t c, size_t oc, int act)
{
#ifdef BC_HAVE_X86_KERNELS
    if (n >= 1 && n <= ROWS_MAX && c >= 1 && oc >= 1 && bc_rt_isa() >= BC_ISA_AVX2) {
        rows_avx2(y, x, w, b, r, n, c, oc);
        if (act != BC_ACT_NONE)
            bc_k_act(y, y, n * oc, act);
        return;
    }
#endif
    bc_k_linear_ex(y, x, w, b, r, n, c, oc, act);
}
