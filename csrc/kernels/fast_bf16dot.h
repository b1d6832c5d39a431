/* fast_bf16dot.h: bfloat16i, bfloat16's weights multiplied by bfloat16 dot
 * products (part of the kernel template, fast_tmpl.h: included once per
 * instruction set, after fast_linear.h; its entry of the kernel table's wf is
 * in fast_formats.h). A product rounds each row of x to bfloat16 once
 * (xq_rows_bf16), then every output runs one chain over the pairs of
 * columns, the order and rounding of AVX512_BF16's vdpbf16ps:
 *     acc = 0;  for each pair j:  acc = ftz(fma(w[2j+1], x[2j+1], acc));
 *                                 acc = ftz(fma(w[2j],   x[2j],   acc))
 * ftz a subnormal result to a zero of its sign; the inputs are never
 * subnormal (the pack and the rounding store them as zeros). On an AMD Zen 4
 * vdpbf16ps gave these bits for 6.4 million lanes, half of them with products
 * and sums near FLT_MIN, and so did the FMA with MXCSR's FTZ and DAZ set:
 * where the CPU has no AVX512_BF16, AVX-512F and AVX2 run the chain as FMAs
 * with FTZ and DAZ set around it (and cleared for the epilogue), portable C
 * with fmaf and an explicit flush. Then y = r + acc (acc without r), + b,
 * act, as every linear. Decoding (up to BC_ROWS_MAX rows) keeps several
 * panels in flight; more rows run a register tile over a few panels at a
 * time (they stay in L2 while the tile's rows stream past). */

#if BC_SIMD == 512 || BC_SIMD == 256
#if BC_SIMD == 512
typedef __m512i RI;
#define ri_load(p) _mm512_loadu_si512((const void *)(p))
#define ri_set1(v) _mm512_set1_epi32((int)(v))
#define ri_and _mm512_and_si512
#define ri_or _mm512_or_si512
#define ri_add _mm512_add_epi32
#define ri_srli _mm512_srli_epi32
#define ri_sel_gt(a, b, t, f) _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask((a), (b)), (f), (t))
#define ri_sel_eq(a, b, t, f) _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask((a), (b)), (f), (t))
#else
typedef __m256i RI;
#define ri_load(p) _mm256_loadu_si256((const __m256i *)(p))
#define ri_set1(v) _mm256_set1_epi32((int)(v))
#define ri_and _mm256_and_si256
#define ri_or _mm256_or_si256
#define ri_add _mm256_add_epi32
#define ri_srli _mm256_srli_epi32
#define ri_sel_gt(a, b, t, f) _mm256_blendv_epi8((f), (t), _mm256_cmpgt_epi32((a), (b)))
#define ri_sel_eq(a, b, t, f) _mm256_blendv_epi8((f), (t), _mm256_cmpeq_epi32((a), (b)))
#endif
#define RL ((size_t)sizeof(RI) / 4)  /* lanes */

/* bc_f32_to_bf16_ftz on the lanes of u (float bits), each result in its
 * lane's low 16 bits: round to nearest even, NaN quiet, a subnormal result a
 * zero of its sign */
BC_INLINE RI bf16_ftz_lanes(RI u)
{
    const RI rounded = ri_srli(ri_add(ri_add(u, ri_set1(0x7fffu)),
                                      ri_and(ri_srli(u, 16), ri_set1(1u))), 16);
    const RI h = ri_sel_gt(ri_and(u, ri_set1(0x7fffffffu)), ri_set1(0x7f800000u),
                           ri_or(ri_srli(u, 16), ri_set1(0x40u)), rounded);
    return ri_sel_eq(ri_and(h, ri_set1(0x7f80u)), ri_set1(0u), ri_and(h, ri_set1(0x8000u)), h);
}

// h (C) <- x (C): RL columns at a time, the tail by bc_f32_to_bf16_ftz
static void xq_row_bf16(uint16_t *h, const float *x, size_t c)
{
    size_t k = 0;
    for (; k + RL <= c; k += RL) {
        const RI r = bf16_ftz_lanes(ri_load(x + k));
#if BC_SIMD == 512
        _mm256_storeu_si256((__m256i *)(h + k), _mm512_cvtepi32_epi16(r));
#else
        /* the pack works per 128-bit lane: its low 64 bits of each hold the four */
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((__m128i *)(h + k), _mm256_castsi256_si128(p));
#endif
    }
    for (; k < c; k++)
        h[k] = bc_f32_to_bf16_ftz(x[k]);
}
#undef ri_load
#undef ri_set1
#undef ri_and
#undef ri_or
#undef ri_add
#undef ri_srli
#undef ri_sel_gt
#undef ri_sel_eq
#undef RL
#else
// h (C) <- x (C)
static void xq_row_bf16(uint16_t *h, const float *x, size_t c)
{
    for (size_t k = 0; k < c; k++)
        h[k] = bc_f32_to_bf16_ftz(x[k]);
}
#endif

// xq (N rows of bc_xq_row_bytes(BC_DTYPE_BF16I, C)) <- x (N,C) rounded as the weights are
static void xq_rows_bf16(unsigned char *xq, const float *x, size_t n, size_t c)
{
    const size_t rb = bc_xq_row_bytes(BC_DTYPE_BF16I, c);
    for (size_t i = 0; i < n; i++) {
        uint16_t *h = (uint16_t *)(xq + i * rb);
        xq_row_bf16(h, x + i * c, c);
        for (size_t k = c; k < rb / 2; k++)
            h[k] = 0;
    }
}

/* The epilogue of a tile: rows i0..i0+mr-1 of y, panels p..p+np-1, from the
 * chains' sums (acc: mr rows of ld floats, panel q's 16 at q * PW), in the
 * default floating-point mode. */
BC_INLINE void bf16i_finish(const bc_gemm *g, const float *acc, size_t ld, int mr, size_t i0,
                            size_t p, size_t np)
{
    const size_t oc = g->oc;
    for (int i = 0; i < mr; i++)
        for (size_t t = 0; t < np * VPP; t++) {
            const size_t o = (p + t / VPP) * PW + (t % VPP) * VL;
            if (o >= oc)
                continue;
            const size_t nv = min_sz(VL, oc - o), row = i0 + (size_t)i;
            V v = vload(acc + (size_t)i * ld + t * VL);
            if (g->r)
                v = vadd(vloadn(g->r + row * oc + o, nv), v);
            const V bias = g->b ? vloadn(g->b + o, nv) : vzero();
            vstore_n(g->y + row * oc + o, finish(v, g->b ? &bias : NULL, g->act), nv);
        }
}

#if BC_SIMD == 512 || BC_SIMD == 256
#if BC_SIMD == 512
typedef __m512i BV;
#define bv_load(p) _mm512_loadu_si512((const void *)(p))
#define bv_hi(v) _mm512_castsi512_ps(_mm512_and_si512((v), _mm512_set1_epi32((int)0xffff0000u)))
#define bv_lo(v) _mm512_castsi512_ps(_mm512_slli_epi32((v), 16))
#else
typedef __m256i BV;
#define bv_load(p) _mm256_loadu_si256((const __m256i *)(p))
#define bv_hi(v) _mm256_castsi256_ps(_mm256_and_si256((v), _mm256_set1_epi32((int)0xffff0000u)))
#define bv_lo(v) _mm256_castsi256_ps(_mm256_slli_epi32((v), 16))
#endif

/* FMAs with MXCSR's FTZ (bit 15) and DAZ (bit 6): the emulation's mode */
#define BF_MXCSR_FTZ_DAZ 0x8040u

#if BC_SIMD == 512
/* vdpbf16ps needs AVX512_BF16 beyond the file's AVX-512F: the copy that uses it
 * says so; xq_part_bf16i checks the CPU first. */
#define BF_DP 1
#define BF_FN(name) name##_dp
#define BF_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma,f16c")))
#define BF_D1 8   /* decoding: panels in flight for one row */
#define BF_D 4    /* ... for two or three rows */
#define BF_M 6    /* the GEMM tile: rows by */
#define BF_N 4    /* panels */
#include "fast_bf16dot_part.h"  /* (which undefines its BF_* parameters) */
#endif
#define BF_DP 0
#define BF_FN(name) name##_fma
#define BF_TARGET
#if BC_SIMD == 512
#define BF_D1 8
#define BF_D 4
#define BF_M 6
#define BF_N 2
#else
/* a run for two and three rows too: their accumulators spill to L1, which cost
 * less than reading half a run at a time (1.3x slower) */
#define BF_D1 4
#define BF_D 4
#define BF_M 3
#define BF_N 1
#endif
#include "fast_bf16dot_part.h"  /* (which undefines its BF_* parameters) */
#undef bv_load
#undef bv_hi
#undef bv_lo

#if BC_SIMD == 512
/* The CPU has AVX512_BF16, unless BLOCKC_AVX512BF16=0 asks for the FMA copy
 * (the tests compare the two). */
static int has_bf16dot(void)
{
    static int known = -1;  /* a benign race: every thread stores the same value */
    if (known < 0) {
        __builtin_cpu_init();
        const char *off = getenv("BLOCKC_AVX512BF16");
        known = __builtin_cpu_supports("avx512bf16") != 0 && !(off && off[0] == '0');
    }
    return known;
}
#endif

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. rounded; w (OC,C) bfloat16i panels
static void xq_part_bf16i(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                          size_t o0, size_t o1)
{
#if BC_SIMD == 512
    if (has_bf16dot()) {
        bf16i_part_dp(g, xq, n0, n1, o0, o1);
        return;
    }
#endif
    bf16i_part_fma(g, xq, n0, n1, o0, o1);
}

#else /* portable C: one output at a time, fmaf and an explicit flush */

BC_INLINE float bf16i_ftz(float v)
{
    return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v;
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. rounded; w (OC,C) bfloat16i panels
static void xq_part_bf16i(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                          size_t o0, size_t o1)
{
    const size_t npair = (g->c + 1) / 2, rb = bc_xq_row_bytes(BC_DTYPE_BF16I, g->c);
    const size_t panels = (g->oc + PW - 1) / PW;
    for (size_t i = n0; i < n1; i++) {
        const uint16_t *xr = (const uint16_t *)(xq + (i - n0) * rb);
        for (size_t p = o0 / PW; p < (o1 + PW - 1) / PW; p++) {
            const bc_panel_at at =
                bc_format_panel_at(bc_format_of(BC_DTYPE_BF16I), g->c, panels, p);
            const unsigned char *pan = (const unsigned char *)g->w + at.origin;
            float acc[PW];
            for (size_t l = 0; l < PW; l++) {
                float a = 0.0f;
                for (size_t j = 0; j < npair; j++) {
                    const bc_bf16i_pair *pr = (const bc_bf16i_pair *)(pan + j * at.stride);
                    a = bf16i_ftz(fmaf(bc_bf16_to_f32(pr->u[l][1]),
                                       bc_bf16_to_f32(xr[2 * j + 1]), a));
                    a = bf16i_ftz(fmaf(bc_bf16_to_f32(pr->u[l][0]),
                                       bc_bf16_to_f32(xr[2 * j]), a));
                }
                acc[l] = a;
            }
            bf16i_finish(g, acc, PW, 1, i, p, 1);
        }
    }
}
#endif
