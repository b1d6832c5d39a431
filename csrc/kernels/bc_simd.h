/* bc_simd.h: a tiny vector layer, one section per instruction set.
 * Loads, stores (whole and the first n lanes), arithmetic, masks (vfill_lo,
 * vkeep_lo), the VL x VL register transpose (vtranspose), exp and the
 * activations, and the generic helpers over them (min_sz, a partial
 * store): the kernels of fast_tmpl.h's op files use nothing else.
 *
 * Included once per translation unit by fast_avx512.c (BC_SIMD == 512),
 * fast_avx2.c (256) and fast_generic.c (0), each of which compiles the
 * kernel template fast_tmpl.h for its instruction set. Every operation keeps
 * IEEE semantics: no fast-math, FMA only where written (bc_fma).
 *   V      the vector type, VL float lanes
 *   MR     rows of the GEMM micro-tile (the register budget: 2*MR accumulators)
 */
#ifndef BC_SIMD_H
#define BC_SIMD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include "bc_half.h"
#include "bc_dispatch.h"  /* BC_ACT_*, BC_ACT_NONE */

/* Forced inlining: the register tricks below (a transpose through arrays of
 * vectors) only stay in registers when inlined into their caller. Not without
 * optimisation (-O0, the C driver's --debug build): there a kernel template's
 * state and vector functions, passed as pointers, stay indirect calls, which
 * always_inline refuses. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__OPTIMIZE__)
#define BC_INLINE static inline __attribute__((always_inline))
#elif defined(_MSC_VER)
#define BC_INLINE static __forceinline
#else
#define BC_INLINE static inline
#endif

/* Fully unrolled loops (the transposes' arrays then live in registers). */
#if defined(__GNUC__) && !defined(__clang__)
#define BC_UNROLL _Pragma("GCC unroll 16")
#elif defined(__clang__)
#define BC_UNROLL _Pragma("unroll")
#else
#define BC_UNROLL
#endif

/* A loop kept rolled: its body indexes arrays by the counter, which then stay in memory. */
#if defined(__GNUC__) && !defined(__clang__)
#define BC_NO_UNROLL _Pragma("GCC unroll 1")
#elif defined(__clang__)
#define BC_NO_UNROLL _Pragma("nounroll")
#else
#define BC_NO_UNROLL
#endif

#define BC_LN2_HI 0.693359375f
#define BC_LN2_LO -2.12194440e-4f
#define BC_LOG2E 1.44269504088896341f

#if BC_SIMD == 512 || BC_SIMD == 256
#include <immintrin.h>
/* The 16 bytes of a q5_k weight's five bits, q[i] = the low (hi = 0) or high nibble of
 * p[i] with bit j of h[i] as its fifth bit, 0..31, computed on the bytes before widening
 * (a word shift brings bits in from the word's other byte only where the masks do not
 * look): SSE2 byte operations, the one function of the AVX-512 and AVX2 readers */
static inline __m128i vq5k_bytes(const uint8_t *p, const uint8_t *h, int hi, unsigned j)
{
    const __m128i m4 = _mm_set1_epi8(0x0F), q = _mm_loadu_si128((const __m128i *)p);
    const __m128i b = _mm_loadu_si128((const __m128i *)h);
    const __m128i n = hi ? _mm_and_si128(_mm_srli_epi16(q, 4), m4) : _mm_and_si128(q, m4);
    /* bit j of each byte to bit 4 (a word shift: the bits it brings in from the other
     * byte of the word land outside bit 4) */
    const __m128i t = j <= 4 ? _mm_sll_epi16(b, _mm_cvtsi32_si128((int)(4 - j)))
                             : _mm_srl_epi16(b, _mm_cvtsi32_si128((int)(j - 4)));
    return _mm_or_si128(n, _mm_and_si128(t, _mm_set1_epi8(0x10)));
}
#endif

#if BC_SIMD == 512
#include <immintrin.h>
typedef __m512 V;
#define VL 16
#define MR 14
static inline V vzero(void) { return _mm512_setzero_ps(); }
static inline V vset1(float x) { return _mm512_set1_ps(x); }
static inline V vload(const float *p) { return _mm512_loadu_ps(p); }
static inline void vstore(float *p, V v) { _mm512_storeu_ps(p, v); }
static inline __mmask16 vmask_(size_t n) { return (__mmask16)((1u << n) - 1u); }
static inline V vloadn(const float *p, size_t n) { return _mm512_maskz_loadu_ps(vmask_(n), p); }
static inline void vstoren(float *p, V v, size_t n) { _mm512_mask_storeu_ps(p, vmask_(n), v); }
static inline V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
static inline V vadd(V a, V b) { return _mm512_add_ps(a, b); }
static inline V vsub(V a, V b) { return _mm512_sub_ps(a, b); }
static inline V vmul(V a, V b) { return _mm512_mul_ps(a, b); }
static inline V vdiv(V a, V b) { return _mm512_div_ps(a, b); }
static inline V vsqrt(V a) { return _mm512_sqrt_ps(a); }
/* max(a, b); a NaN in b is kept (the second operand wins on NaN) */
static inline V vmax(V a, V b) { return _mm512_max_ps(a, b); }
static inline V vmin(V a, V b) { return _mm512_min_ps(a, b); }
/* lanes [0, n) of v replaced by f */
static inline V vfill_lo(V v, size_t n, float f) { return _mm512_mask_mov_ps(v, vmask_(n), _mm512_set1_ps(f)); }
/* lanes [0, n) from old, the rest from v */
static inline V vkeep_lo(V v, V old, size_t n) { return _mm512_mask_mov_ps(v, vmask_(n), old); }
/* v > 0 ? v : (NaN ? v : 0) */
static inline V vrelu(V v)
{
    __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ)
                   | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_maskz_mov_ps(keep, v);
}
/* round to nearest even; c - a b (one rounding); p 2^n for integral n */
static inline V vround(V x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline V vfnma(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
static inline V vscale2(V p, V n) { return _mm512_scalef_ps(p, n); }
/* o[k] lane j = r[j] lane k: a 16 x 16 transpose in registers */
BC_INLINE void vtranspose(V o[VL], const V r[VL])
{
    __m512 t[16], u[16];
    BC_UNROLL
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    BC_UNROLL
    for (int g = 0; g < 4; g++) {
        const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 2]);
        const __m512d c = _mm512_castps_pd(t[4 * g + 1]), d = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    BC_UNROLL
    for (int m = 0; m < 4; m++) {
        const __m512 p0 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x44);
        const __m512 p1 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xEE);
        const __m512 p2 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x44);
        const __m512 p3 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xEE);
        o[m] = _mm512_shuffle_f32x4(p0, p2, 0x88);
        o[4 + m] = _mm512_shuffle_f32x4(p0, p2, 0xDD);
        o[8 + m] = _mm512_shuffle_f32x4(p1, p3, 0x88);
        o[12 + m] = _mm512_shuffle_f32x4(p1, p3, 0xDD);
    }
}

/* VL int8 -> float, VL bfloat16 (the high halves of float32) -> float */
static inline V vload_i8(const int8_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
/* lane i = the float 1 + n 2^-15 (hi = 0: n the low nibble of p[i]) or 1 + n 2^-11
 * (hi = 1: the high nibble): p broadcast to each 128-bit lane, byte i moved to bits
 * 8-15 of lane i (vpshufb), the other nibble masked off and the exponent of 1 set in
 * one vpternlogd ((a & b) | c: 0xEA). Exact, so fma(it, 2^15 d, -(2^15 + z) d) (hi:
 * 2^11) is (n - z) d exactly for a half d and z <= 16: three instructions where a
 * widening, a mask, a subtraction, a conversion and a multiply were five. */
static inline V vload_nibm(const uint8_t *p, int hi)
{
    const __m512i b = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p));
    const __m512i at8 = _mm512_set_epi32(
        (int)0x80800F80, (int)0x80800E80, (int)0x80800D80, (int)0x80800C80,
        (int)0x80800B80, (int)0x80800A80, (int)0x80800980, (int)0x80800880,
        (int)0x80800780, (int)0x80800680, (int)0x80800580, (int)0x80800480,
        (int)0x80800380, (int)0x80800280, (int)0x80800180, (int)0x80800080);
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
        _mm512_shuffle_epi8(b, at8), _mm512_set1_epi32(hi ? 0xF000 : 0x0F00),
        _mm512_set1_epi32(0x3F800000), 0xEA));
}
/* lane i = (q - 16) d exactly, for q the low (hi = 0) or high nibble of p[i] with bit
 * j of h[i] as its fifth bit, given a = 2^e d and d16 = 16 d (e: vload_nibm's 15 or
 * 11): fma(f, a, -a) = n d (exact: representable), less d16 where the bit is clear
 * (one test into a mask, one masked subtraction: exact too). Six instructions with
 * the FMA that uses the weight, where widening and converting made seven. */
static inline V vdeq_q5(const uint8_t *p, const uint32_t *h, int hi, unsigned j, V a, V d16)
{
    static const uint32_t bit[32] = {  /* read as a broadcast operand, not built per weight */
        1u << 0, 1u << 1, 1u << 2, 1u << 3, 1u << 4, 1u << 5, 1u << 6, 1u << 7, 1u << 8,
        1u << 9, 1u << 10, 1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15, 1u << 16,
        1u << 17, 1u << 18, 1u << 19, 1u << 20, 1u << 21, 1u << 22, 1u << 23, 1u << 24,
        1u << 25, 1u << 26, 1u << 27, 1u << 28, 1u << 29, 1u << 30, 1u << 31};
    const V nd = _mm512_fmsub_ps(vload_nibm(p, hi), a, a);
    const __mmask16 clear = _mm512_testn_epi32_mask(_mm512_loadu_si512((const void *)h),
                                                    _mm512_set1_epi32((int)bit[j]));
    return _mm512_mask_sub_ps(nd, clear, nd, d16);
}
/* lane i = the float p[i] & 15 (hi = 0) or p[i] & 0xF0 (hi = 1: 16 times the high
 * nibble, so a reader scales by 1/16 instead of shifting): the nibbles masked on the
 * 16 bytes (one 128-bit and) before they are widened, where vload_nib masks 16 widened
 * lanes (on an AMD Zen 4 a 512-bit and costs as much as the conversion). Exact. */
static inline V vload_nibx(const uint8_t *p, int hi)
{
    const __m128i u = _mm_and_si128(_mm_loadu_si128((const __m128i *)p),
                                    _mm_set1_epi8((char)(hi ? 0xF0 : 0x0F)));
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(u));
}
/* lane i = the q5_k weight's five bits q[lane0 + i] (vq5k_bytes of the panel's 16 rows
 * p, h), 0..31 */
static inline V vload_q5k(const uint8_t *p, const uint8_t *h, size_t lane0, int hi, unsigned j)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(vq5k_bytes(p, h, hi, j)));
}
/* lane i = p[i] (unsigned); the low (hi = 0) or high nibble of p[i] */
static inline V vload_u8(const uint8_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
/* lane i = (p[i] >> sh) & mask (Q2_K's and Q3_K's bit fields) */
static inline V vload_bits(const uint8_t *p, unsigned sh, unsigned mask)
{
    __m512i u = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    u = _mm512_and_si512(_mm512_srl_epi32(u, _mm_cvtsi32_si128((int)sh)),
                         _mm512_set1_epi32((int)mask));
    return _mm512_cvtepi32_ps(u);
}
static inline V vload_nib(const uint8_t *p, int hi)
{
    __m512i u = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    u = hi ? _mm512_srli_epi32(u, 4) : _mm512_and_si512(u, _mm512_set1_epi32(15));
    return _mm512_cvtepi32_ps(u);
}
/* lane i = the low (hi = 0) or high nibble of p[i] with bit j of h[i] (a uint32) as
 * its fifth bit, 0..31 */
static inline V vload_q5w(const uint8_t *p, int hi, const uint32_t *h, unsigned j)
{
    __m512i u = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    u = hi ? _mm512_srli_epi32(u, 4) : _mm512_and_si512(u, _mm512_set1_epi32(15));
    const __m512i b = _mm512_srl_epi32(_mm512_loadu_si512((const void *)h), _mm_cvtsi32_si128((int)j));
    u = _mm512_or_si512(u, _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(1)), 4));
    return _mm512_cvtepi32_ps(u);
}
/* lane i = lut[n], n the low (hi = 0) or high nibble of p[i] (vpermps of a table) */
static inline V vload_lut16(const uint8_t *p, int hi, const float *lut)
{
    __m512i u = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    u = hi ? _mm512_srli_epi32(u, 4) : _mm512_and_si512(u, _mm512_set1_epi32(15));
    return _mm512_permutexvar_ps(u, _mm512_loadu_ps(lut));
}
/* -a, the sign flipped (-0 for +0) */
static inline V vneg(V a)
{
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a),
                                                _mm512_set1_epi32((int)0x80000000u)));
}
static inline V vload_bf16(const uint16_t *p)
{
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}
/* VL IEEE halves -> float */
static inline V vload_half(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
/* The sums of VL vectors: lane j = the lanes of a[j] added in the fixed tree
 * ((h0+h1)+(h2+h3))+((h4+h5)+(h6+h7)) of h_i = lane i + lane i+8. */
BC_INLINE V vsum_lanes(const V a[VL])
{
    __m256 h[VL], g[8], f[4], e[2];
    BC_UNROLL
    for (int j = 0; j < VL; j++)
        h[j] = _mm256_add_ps(_mm512_castps512_ps256(a[j]),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[j]), 1)));
    BC_UNROLL
    for (int j = 0; j < 8; j++)
        g[j] = _mm256_hadd_ps(h[2 * j], h[2 * j + 1]);
    BC_UNROLL
    for (int j = 0; j < 4; j++)
        f[j] = _mm256_hadd_ps(g[2 * j], g[2 * j + 1]);
    BC_UNROLL
    for (int j = 0; j < 2; j++)
        e[j] = _mm256_add_ps(_mm256_permute2f128_ps(f[2 * j], f[2 * j + 1], 0x20),
                             _mm256_permute2f128_ps(f[2 * j], f[2 * j + 1], 0x31));
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(e[0])),
                                               _mm256_castps_pd(e[1]), 1));
}

#elif BC_SIMD == 256
#include <immintrin.h>
typedef __m256 V;
#define VL 8
#define MR 6
static inline V vzero(void) { return _mm256_setzero_ps(); }
static inline V vset1(float x) { return _mm256_set1_ps(x); }
static inline V vload(const float *p) { return _mm256_loadu_ps(p); }
static inline void vstore(float *p, V v) { _mm256_storeu_ps(p, v); }
static inline __m256i vmask_(size_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline V vloadn(const float *p, size_t n) { return _mm256_maskload_ps(p, vmask_(n)); }
static inline void vstoren(float *p, V v, size_t n) { _mm256_maskstore_ps(p, vmask_(n), v); }
static inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
static inline V vadd(V a, V b) { return _mm256_add_ps(a, b); }
static inline V vsub(V a, V b) { return _mm256_sub_ps(a, b); }
static inline V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
static inline V vdiv(V a, V b) { return _mm256_div_ps(a, b); }
static inline V vsqrt(V a) { return _mm256_sqrt_ps(a); }
static inline V vmax(V a, V b) { return _mm256_max_ps(a, b); }
static inline V vmin(V a, V b) { return _mm256_min_ps(a, b); }
static inline V vfill_lo(V v, size_t n, float f)
{
    return _mm256_blendv_ps(v, _mm256_set1_ps(f), _mm256_castsi256_ps(vmask_(n)));
}
static inline V vkeep_lo(V v, V old, size_t n)
{
    return _mm256_blendv_ps(v, old, _mm256_castsi256_ps(vmask_(n)));
}
static inline V vrelu(V v)
{
    V keep = _mm256_or_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ),
                          _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_and_ps(keep, v);
}
static inline V vround(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline V vfnma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
/* p 2^n as two factors 2^(n/2) 2^(n - n/2), each a normal float, so that
 * underflow and overflow come out as 0 and inf. n is NaN only for NaN x in
 * vexp, and then p is NaN too. */
static inline V vscale2(V p, V n)
{
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1);
    __m256i n2 = _mm256_sub_epi32(ni, n1);
    V s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    V s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}
/* o[k] lane j = r[j] lane k: an 8 x 8 transpose in registers */
BC_INLINE void vtranspose(V o[VL], const V r[VL])
{
    __m256 a[8], b[8];
    BC_UNROLL
    for (int i = 0; i < 4; i++) {
        a[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    BC_UNROLL
    for (int g = 0; g < 2; g++) {
        b[4 * g + 0] = _mm256_shuffle_ps(a[4 * g], a[4 * g + 2], 0x44);
        b[4 * g + 1] = _mm256_shuffle_ps(a[4 * g], a[4 * g + 2], 0xEE);
        b[4 * g + 2] = _mm256_shuffle_ps(a[4 * g + 1], a[4 * g + 3], 0x44);
        b[4 * g + 3] = _mm256_shuffle_ps(a[4 * g + 1], a[4 * g + 3], 0xEE);
    }
    BC_UNROLL
    for (int m = 0; m < 4; m++) {
        o[m] = _mm256_permute2f128_ps(b[m], b[4 + m], 0x20);
        o[4 + m] = _mm256_permute2f128_ps(b[m], b[4 + m], 0x31);
    }
}

static inline V vload_i8(const int8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
/* lane i = the float 1 + n 2^-15 (hi = 0: n the low nibble of p[i]) or 1 + n 2^-11
 * (hi = 1), as the AVX-512 vload_nibm: p's 8 bytes broadcast, byte i moved to bits
 * 8-15 of lane i (vpshufb), then a mask and an or */
static inline V vload_nibm(const uint8_t *p, int hi)
{
    const __m256i b = _mm256_broadcastq_epi64(_mm_loadl_epi64((const __m128i *)p));
    const __m256i at8 = _mm256_set_epi32(
        (int)0x80800780, (int)0x80800680, (int)0x80800580, (int)0x80800480,
        (int)0x80800380, (int)0x80800280, (int)0x80800180, (int)0x80800080);
    const __m256i u = _mm256_and_si256(_mm256_shuffle_epi8(b, at8),
                                       _mm256_set1_epi32(hi ? 0xF000 : 0x0F00));
    return _mm256_castsi256_ps(_mm256_or_si256(u, _mm256_set1_epi32(0x3F800000)));
}
/* lane i = the low (hi = 0) or high nibble of p[i] with bit j of h[i] as its
 * fifth bit, less 16: the nibble where the bit is set, the nibble - 16 where it
 * is clear (the clear lanes' all-ones, shifted, is -16) */
static inline V vload_nib16(const uint8_t *p, const uint32_t *h, int hi, unsigned j)
{
    __m256i u = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    u = hi ? _mm256_srli_epi32(u, 4) : _mm256_and_si256(u, _mm256_set1_epi32(15));
    const __m256i bit = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)h),
                                         _mm256_set1_epi32((int)(1u << j)));
    const __m256i clear = _mm256_cmpeq_epi32(bit, _mm256_setzero_si256());
    return _mm256_cvtepi32_ps(_mm256_add_epi32(u, _mm256_slli_epi32(clear, 4)));
}
/* lane i = the float p[i] & 15 (hi = 0) or p[i] & 0xF0 (hi = 1: 16 times the high
 * nibble), as the AVX-512 vload_nibx (here the mask is on the widened lanes: on 8 bytes
 * a 128-bit and before widening saved nothing on an AMD Zen 4) */
static inline V vload_nibx(const uint8_t *p, int hi)
{
    const __m256i u = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_cvtepi32_ps(_mm256_and_si256(u, _mm256_set1_epi32(hi ? 0xF0 : 0x0F)));
}
/* lane i = q[lane0 + i] of vq5k_bytes (lane0 0 or 8: the two calls of a panel compute
 * the same 16 bytes once, the compiler sees, and widen one half each) */
static inline V vload_q5k(const uint8_t *p, const uint8_t *h, size_t lane0, int hi, unsigned j)
{
    __m128i u = vq5k_bytes(p, h, hi, j);
    if (lane0)
        u = _mm_unpackhi_epi64(u, u);
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(u));
}
/* lane i = p[i] (unsigned); the low (hi = 0) or high nibble of p[i] */
static inline V vload_u8(const uint8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
static inline V vload_bits(const uint8_t *p, unsigned sh, unsigned mask)
{
    __m256i u = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    u = _mm256_and_si256(_mm256_srl_epi32(u, _mm_cvtsi32_si128((int)sh)),
                         _mm256_set1_epi32((int)mask));
    return _mm256_cvtepi32_ps(u);
}
static inline V vload_nib(const uint8_t *p, int hi)
{
    __m256i u = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    u = hi ? _mm256_srli_epi32(u, 4) : _mm256_and_si256(u, _mm256_set1_epi32(15));
    return _mm256_cvtepi32_ps(u);
}
static inline V vload_q5w(const uint8_t *p, int hi, const uint32_t *h, unsigned j)
{
    __m256i u = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    u = hi ? _mm256_srli_epi32(u, 4) : _mm256_and_si256(u, _mm256_set1_epi32(15));
    const __m256i b = _mm256_srl_epi32(_mm256_loadu_si256((const __m256i *)h), _mm_cvtsi32_si128((int)j));
    u = _mm256_or_si256(u, _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(1)), 4));
    return _mm256_cvtepi32_ps(u);
}
/* lane i = lut[n] (two 8-entry vpermps, the one of n's bit 3 kept) */
static inline V vload_lut16(const uint8_t *p, int hi, const float *lut)
{
    __m256i u = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    u = hi ? _mm256_srli_epi32(u, 4) : _mm256_and_si256(u, _mm256_set1_epi32(15));
    const __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(lut), u);
    const __m256 up = _mm256_permutevar8x32_ps(_mm256_loadu_ps(lut + 8), u);
    return _mm256_blendv_ps(lo, up, _mm256_castsi256_ps(_mm256_slli_epi32(u, 28)));
}
/* -a, the sign flipped (-0 for +0) */
static inline V vneg(V a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
static inline V vload_bf16(const uint16_t *p)
{
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}
static inline V vload_half(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
/* The sums of VL vectors: lane j = the lanes of a[j] added in the fixed tree
 * ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)). */
BC_INLINE V vsum_lanes(const V a[VL])
{
    const __m256 g0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 g1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(g0, g1, 0x20), _mm256_permute2f128_ps(g0, g1, 0x31));
}

#else /* portable C: a "vector" of 4 floats, plain IEEE operations (no FMA) */
typedef struct { float f[4]; } V;
#define VL 4
#define MR 4
static inline V vzero(void) { V r = {{0.0f, 0.0f, 0.0f, 0.0f}}; return r; }
static inline V vset1(float x) { V r = {{x, x, x, x}}; return r; }
static inline V vload(const float *p) { V r; for (int i = 0; i < 4; i++) r.f[i] = p[i]; return r; }
static inline void vstore(float *p, V v) { for (int i = 0; i < 4; i++) p[i] = v.f[i]; }
static inline V vloadn(const float *p, size_t n) { V r = vzero(); for (size_t i = 0; i < n; i++) r.f[i] = p[i]; return r; }
static inline void vstoren(float *p, V v, size_t n) { for (size_t i = 0; i < n; i++) p[i] = v.f[i]; }
static inline V vfma(V a, V b, V c) { for (int i = 0; i < 4; i++) c.f[i] = a.f[i] * b.f[i] + c.f[i]; return c; }
static inline V vadd(V a, V b) { for (int i = 0; i < 4; i++) a.f[i] += b.f[i]; return a; }
static inline V vsub(V a, V b) { for (int i = 0; i < 4; i++) a.f[i] -= b.f[i]; return a; }
static inline V vmul(V a, V b) { for (int i = 0; i < 4; i++) a.f[i] *= b.f[i]; return a; }
static inline V vdiv(V a, V b) { for (int i = 0; i < 4; i++) a.f[i] /= b.f[i]; return a; }
static inline V vsqrt(V a) { for (int i = 0; i < 4; i++) a.f[i] = sqrtf(a.f[i]); return a; }
static inline V vmax(V a, V b) { for (int i = 0; i < 4; i++) a.f[i] = a.f[i] > b.f[i] ? a.f[i] : b.f[i]; return a; }
static inline V vmin(V a, V b) { for (int i = 0; i < 4; i++) a.f[i] = a.f[i] < b.f[i] ? a.f[i] : b.f[i]; return a; }
static inline V vfill_lo(V v, size_t n, float f) { for (size_t i = 0; i < n && i < 4; i++) v.f[i] = f; return v; }
static inline V vkeep_lo(V v, V old, size_t n) { for (size_t i = 0; i < n && i < 4; i++) v.f[i] = old.f[i]; return v; }
static inline V vrelu(V v) { for (int i = 0; i < 4; i++) v.f[i] = v.f[i] > 0.0f ? v.f[i] : (v.f[i] == v.f[i] ? 0.0f : v.f[i]); return v; }
static inline V vexp(V x) { for (int i = 0; i < 4; i++) x.f[i] = expf(x.f[i]); return x; }
/* o[k] lane j = r[j] lane k */
BC_INLINE void vtranspose(V o[VL], const V r[VL])
{
    BC_UNROLL
    for (int k = 0; k < VL; k++)
        BC_UNROLL
        for (int j = 0; j < VL; j++)
            o[k].f[j] = r[j].f[k];
}
static inline V vload_i8(const int8_t *p) { V r; for (int i = 0; i < 4; i++) r.f[i] = (float)p[i]; return r; }
/* lane i = the low (hi = 0) or high nibble of p[i], less 8 */
static inline V vload_nib8(const uint8_t *p, int hi)
{
    V r;
    for (int i = 0; i < 4; i++)
        r.f[i] = (float)((hi ? p[i] >> 4 : p[i] & 15) - 8);
    return r;
}
/* lane i = the low (hi = 0) or high nibble of p[i] with bit j of h[i] as its
 * fifth bit, less 16 */
static inline V vload_nib16(const uint8_t *p, const uint32_t *h, int hi, unsigned j)
{
    V r;
    for (int i = 0; i < 4; i++)
        r.f[i] = (float)(((hi ? p[i] >> 4 : p[i] & 15) | (int)((h[i] >> j) & 1u) << 4) - 16);
    return r;
}
/* lane i = p[i] & 15 (hi = 0) or p[i] & 0xF0 (hi = 1) */
static inline V vload_nibx(const uint8_t *p, int hi)
{
    V r;
    for (int i = 0; i < 4; i++)
        r.f[i] = (float)(p[i] & (hi ? 0xF0 : 0x0F));
    return r;
}
/* lane i = the low (hi = 0) or high nibble of p[lane0 + i] with bit j of h[lane0 + i]
 * as its fifth bit, 0..31 (p, h: the panel's 16 rows) */
static inline V vload_q5k(const uint8_t *p, const uint8_t *h, size_t lane0, int hi, unsigned j)
{
    V r;
    for (size_t i = 0; i < 4; i++)
        r.f[i] = (float)((hi ? p[lane0 + i] >> 4 : p[lane0 + i] & 15)
                         | (h[lane0 + i] >> j & 1) << 4);
    return r;
}
/* lane i = p[i] (unsigned); the low (hi = 0) or high nibble of p[i] */
static inline V vload_u8(const uint8_t *p) { V r; for (int i = 0; i < 4; i++) r.f[i] = (float)p[i]; return r; }
static inline V vload_bits(const uint8_t *p, unsigned sh, unsigned mask)
{
    V r;
    for (int i = 0; i < 4; i++)
        r.f[i] = (float)((unsigned)(p[i] >> sh) & mask);
    return r;
}
static inline V vload_nib(const uint8_t *p, int hi)
{
    V r;
    for (int i = 0; i < 4; i++)
        r.f[i] = (float)(hi ? p[i] >> 4 : p[i] & 15);
    return r;
}
static inline V vload_q5w(const uint8_t *p, int hi, const uint32_t *h, unsigned j)
{
    V r;
    for (int i = 0; i < 4; i++)
        r.f[i] = (float)((hi ? p[i] >> 4 : p[i] & 15) | (int)((h[i] >> j) & 1u) << 4);
    return r;
}
static inline V vload_lut16(const uint8_t *p, int hi, const float *lut)
{
    V r;
    for (int i = 0; i < 4; i++)
        r.f[i] = lut[hi ? p[i] >> 4 : p[i] & 15];
    return r;
}
/* -a, the sign flipped (-0 for +0) */
static inline V vneg(V a) { for (int i = 0; i < 4; i++) a.f[i] = -a.f[i]; return a; }
static inline V vload_bf16(const uint16_t *p)
{
    V r;
    for (int i = 0; i < 4; i++)
        r.f[i] = bc_bf16_to_f32(p[i]);
    return r;
}
/* lane j = (a[j].0 + a[j].1) + (a[j].2 + a[j].3) */
static inline V vsum_lanes(const V a[VL])
{
    V r;
    for (int j = 0; j < 4; j++)
        r.f[j] = (a[j].f[0] + a[j].f[1]) + (a[j].f[2] + a[j].f[3]);
    return r;
}
static inline V vload_half(const uint16_t *p)
{
    V r;
    for (int i = 0; i < 4; i++)
        r.f[i] = bc_half_to_f32(p[i]);
    return r;
}
#endif

#if BC_SIMD == 512 || BC_SIMD == 256
/* exp(x): x = n ln2 + r (Cody-Waite, |r| <= ln2/2), a degree-6 polynomial in r,
 * then 2^n. Clamped to [-104, 89]; NaN stays NaN (vmax/vmin keep their second operand). */
static inline V vexp(V x)
{
    x = vmax(vset1(-104.0f), x);
    x = vmin(vset1(89.0f), x);
    V n = vround(vmul(x, vset1(BC_LOG2E)));
    V r = vfnma(n, vset1(BC_LN2_HI), x);
    r = vfnma(n, vset1(BC_LN2_LO), r);
    V p = vset1(1.9875691500e-4f);
    p = vfma(p, r, vset1(1.3981999507e-3f));
    p = vfma(p, r, vset1(8.3334519073e-3f));
    p = vfma(p, r, vset1(4.1665795894e-2f));
    p = vfma(p, r, vset1(1.6666665459e-1f));
    p = vfma(p, r, vset1(5.0000001201e-1f));
    p = vfma(p, vmul(r, r), vadd(r, vset1(1.0f)));
    return vscale2(p, n);
}
#endif

#define NR (2 * VL)

/* Activations on a vector (BC_ACT_*; anything else is the identity). */
static inline V vgelu_tanh(V x)
{
    /* 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3) */
    V x3 = vmul(vmul(x, x), x);
    V u = vmul(vset1(0.7978845608f), vadd(x, vmul(vset1(0.044715f), x3)));
    return vdiv(x, vadd(vset1(1.0f), vexp(vmul(vset1(-2.0f), u))));
}
static inline V vsilu(V x) { return vdiv(x, vadd(vset1(1.0f), vexp(vsub(vzero(), x)))); }
static inline V vgelu_erf(V x)
{
    float t[VL];
    vstore(t, x);
    for (int i = 0; i < VL; i++)
        t[i] = 0.5f * t[i] * (1.0f + erff(t[i] * 0.70710678118654752f));
    return vload(t);
}
static inline V vact(V x, int kind)
{
    switch (kind) {
    case BC_ACT_GELU_TANH: return vgelu_tanh(x);
    case BC_ACT_GELU: return vgelu_erf(x);
    case BC_ACT_RELU: return vrelu(x);
    case BC_ACT_SILU: return vsilu(x);
    default: return x;
    }
}


/* ---- generic helpers over the vector layer ---------------------------------- */

static inline size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* the first n lanes of v to p (n == VL: one whole store) */
BC_INLINE void vstore_n(float *p, V v, size_t n)
{
    if (n == VL)
        vstore(p, v);
    else
        vstoren(p, v, n);
}


#endif
