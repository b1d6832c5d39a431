/* fast_intdot.h: q8_0i, q4_0i, q5_0i, q4_ki, q6_ki, q5_ki, iq4_nli, iq4_xsi, q4_1i, q5_1i,
 * q2_ki and q3_ki: q8_0's, q4_0's, q5_0's, q4_k's, q6_k's, q5_k's, iq4_nl's, iq4_xs's, q4_1's,
 * q5_1's, q2_k's and q3_k's weights multiplied by integer dot products
 * (part of the kernel template, fast_tmpl.h: included once per instruction
 * set, after fast_linear.h; its entry of the kernel table's wf is in
 * fast_formats.h). A product quantises each row of x once (xq_rows_q8: 8 bits
 * per block of 32, one float scale), then every output runs one chain, the
 * same on every instruction set and for any number of rows:
 *     acc = 0;  for each block b in order:  acc = fma((float)isum_b, d_w * d_x, acc)
 * (q4_1i and q5_1i, whose weights are d q + m, then acc = fma(m, d_x (float)sum q_x, acc):
 * llama.cpp's q4_1 x q8_1 product, the block sum of x kept in float32)
 * isum_b = sum_k q_w[k] q_x[k] is exact in int32 (|isum| <= 32 * 127 * 127
 * < 2^24, so the float conversion is exact too), so each instruction set may
 * form it as it likes: AVX-512 VNNI's vpdpbusd on the stored bytes q_w + 128
 * (unsigned) times q_x (signed), corrected by -128 * sum q_x (s, computed with
 * the quantisation); AVX2's pmaddubsw on |q_w| times q_x with q_w's sign
 * (pairs at most 2 * 127 * 127: no saturation), then pmaddwd; portable C one
 * product at a time. Then y = r + acc (acc without r), + b, act, as every
 * linear. The panels lie in runs of 4, block by block (BC_INTDOT_GROUP):
 * decoding (up to BC_ROWS_MAX rows) takes a run at a time and reads its blocks
 * in memory order; more rows run a register tile over a run's panels, a few at
 * a time (they stay in L1/L2 while the tile's rows stream past). */

#define XQ_TINY 1e-30f  /* a block whose max |x| is below this is quantised as zeros */

/* ======================================================================== */
/* Quantising rows of x (bc_xq_row_bytes' layout, bc_dispatch.h)            */
/* ======================================================================== */

/* One block of m <= 32 floats x: q[0..31] (zero past m), *d, *s. a = max|x|
 * (exact); any x not finite: d = NaN (the outputs NaN), q = 0; a < XQ_TINY
 * (zero, or so small that 127 / a would overflow): d = 0, q = 0; else d = a /
 * 127, q = x * (127 / a) rounded half to even (two IEEE operations), |q| <= 127. */
#if BC_SIMD == 512
BC_INLINE void xq_block(int8_t *q, float *d, int32_t *s, const float *x, size_t m)
{
    const V lo = vloadn(x, m < 16 ? m : 16), hi = m > 16 ? vloadn(x + 16, m - 16) : vzero();
    const V alo = _mm512_abs_ps(lo), ahi = _mm512_abs_ps(hi);
    const __mmask16 bad = _mm512_cmp_ps_mask(alo, vset1(FLT_MAX), _CMP_NLE_UQ)
                        | _mm512_cmp_ps_mask(ahi, vset1(FLT_MAX), _CMP_NLE_UQ);
    const float a = _mm512_reduce_max_ps(_mm512_max_ps(alo, ahi));
    if (bad || !(a >= XQ_TINY)) {
        memset(q, 0, 32);
        *d = bad ? NAN : 0.0f;
        *s = 0;
        return;
    }
    const V inv = vset1(127.0f / a);
    const __m512i qlo = _mm512_cvt_roundps_epi32(vmul(lo, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512i qhi = _mm512_cvt_roundps_epi32(vmul(hi, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(qlo));
    _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtepi32_epi8(qhi));
    *d = a / 127.0f;
    *s = -128 * _mm512_reduce_add_epi32(_mm512_add_epi32(qlo, qhi));
}
#elif BC_SIMD == 256
BC_INLINE void xq_block(int8_t *q, float *d, int32_t *s, const float *x, size_t m)
{
    V v[4];
    BC_UNROLL
    for (size_t t = 0; t < 4; t++)
        v[t] = m >= 8 * t + 8 ? vload(x + 8 * t) : m > 8 * t ? vloadn(x + 8 * t, m - 8 * t) : vzero();
    const V absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), big = vset1(FLT_MAX);
    V amax = vzero();
    int bad = 0;
    BC_UNROLL
    for (size_t t = 0; t < 4; t++) {
        const V a = _mm256_and_ps(v[t], absm);
        bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, big, _CMP_NLE_UQ));
        amax = vmax(amax, a);
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    const float a = _mm_cvtss_f32(h);
    if (bad || !(a >= XQ_TINY)) {
        memset(q, 0, 32);
        *d = bad ? NAN : 0.0f;
        *s = 0;
        return;
    }
    const V inv = vset1(127.0f / a);
    __m256i qi[4];
    BC_UNROLL
    for (size_t t = 0; t < 4; t++)
        qi[t] = _mm256_cvtps_epi32(vround(vmul(v[t], inv)));  /* integral already: exact */
    /* int32 -> int8 in order: the packs interleave 4-lane groups, a permute undoes it */
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]),
                                         _mm256_packs_epi32(qi[2], qi[3]));
    _mm256_storeu_si256((__m256i *)q,
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    *d = a / 127.0f;
    *s = -128 * _mm_cvtsi128_si32(s4);
}
#else
BC_INLINE void xq_block(int8_t *q, float *d, int32_t *s, const float *x, size_t m)
{
    float a = 0.0f;
    int bad = 0;
    for (size_t k = 0; k < m; k++) {
        const float v = fabsf(x[k]);
        bad |= !(v <= FLT_MAX);
        a = v > a ? v : a;
    }
    if (bad || !(a >= XQ_TINY)) {
        memset(q, 0, 32);
        *d = bad ? NAN : 0.0f;
        *s = 0;
        return;
    }
    const float inv = 127.0f / a;
    int32_t sum = 0;
    for (size_t k = 0; k < 32; k++) {
        /* nearbyintf: half to even in the default rounding mode, as the vector kernels */
        q[k] = k < m ? (int8_t)nearbyintf(x[k] * inv) : 0;
        sum += q[k];
    }
    *d = a / 127.0f;
    *s = -128 * sum;
}
#endif

// xq (N rows of rb bytes) <- x (N,C)
static void xq_rows_at(unsigned char *xq, size_t rb, const float *x, size_t n, size_t c)
{
    const size_t nb = (c + 31) / 32;
    for (size_t i = 0; i < n; i++) {
        unsigned char *row = xq + i * rb;
        int8_t *q = (int8_t *)row;
        float *d = (float *)(row + nb * 32);
        int32_t *s = (int32_t *)(row + nb * 36);
        for (size_t b = 0; b < nb; b++)
            xq_block(q + b * 32, d + b, s + b, x + i * c + b * 32, min_sz(32, c - b * 32));
    }
}

// xq (N rows of bc_xq_row_bytes(BC_DTYPE_Q8_0I, C)) <- x (N,C)
static void xq_rows_q8(unsigned char *xq, const float *x, size_t n, size_t c)
{
    xq_rows_at(xq, bc_xq_row_bytes(BC_DTYPE_Q8_0I, c), x, n, c);
}

// xq (N rows of rb bytes) <- x (N,C): q8_0i's, then factor times each block's half sums (s16)
static void xq_rows_halves(unsigned char *xq, size_t rb, const float *x, size_t n, size_t c,
                           int32_t factor)
{
    const size_t nb = (c + 31) / 32;
    xq_rows_at(xq, rb, x, n, c);
    for (size_t i = 0; i < n; i++) {
        const int8_t *q = (const int8_t *)(xq + i * rb);
        int32_t *s16 = (int32_t *)(xq + i * rb + nb * 40);
        for (size_t h = 0; h < 2 * nb; h++) {
            int32_t sum = 0;
            for (size_t k = 0; k < 16; k++)
                sum += q[16 * h + k];
            s16[h] = factor * sum;  /* |sum| <= 16 * 127: exact */
        }
    }
}

// xq (N rows of bc_xq_row_bytes(BC_DTYPE_Q6_KI, C)) <- x (N,C): q8_0i's, then -32 times each block's half sums
static void xq_rows_q6(unsigned char *xq, const float *x, size_t n, size_t c)
{
    xq_rows_halves(xq, bc_xq_row_bytes(BC_DTYPE_Q6_KI, c), x, n, c, -32);  /* the weights' + 32 */
}

// xq (N rows of bc_xq_row_bytes(BC_DTYPE_Q2_KI, C), q3_ki's the same) <- x (N,C): q8_0i's, then each block's half sums
static void xq_rows_k2(unsigned char *xq, const float *x, size_t n, size_t c)
{
    xq_rows_halves(xq, bc_xq_row_bytes(BC_DTYPE_Q2_KI, c), x, n, c, 1);
}

/* xq (N rows of bc_xq_row_bytes(BC_DTYPE_Q4_KI, C), q5_ki's the same) <- x (N,C): q8_0i's,
 * then each block's m = d * (float)sum q (the factor of its minimums: every
 * output's chain takes this one rounding, computed once a row instead of once
 * a tile) */
static void xq_rows_q4k(unsigned char *xq, const float *x, size_t n, size_t c)
{
    const size_t nb = (c + 31) / 32, rb = bc_xq_row_bytes(BC_DTYPE_Q4_KI, c);
    xq_rows_at(xq, rb, x, n, c);
    for (size_t i = 0; i < n; i++) {
        const float *d = (const float *)(xq + i * rb + nb * 32);
        const int32_t *s = (const int32_t *)(xq + i * rb + nb * 36);
        float *m = (float *)(xq + i * rb + nb * 40);
        for (size_t b = 0; b < nb; b++)
            m[b] = d[b] * (float)(-s[b] / 128);  /* s = -128 sum: exact */
    }
}

/* ======================================================================== */
/* The products                                                              */
/* ======================================================================== */

#if BC_SIMD == 512
/* vpdpbusd needs AVX512_VNNI beyond the file's AVX-512F: the functions that
 * use it say so; xq_part_q8_0i checks the CPU first. */
#define Q8I_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")))
#define QM 6     /* the GEMM tile: rows by */
#define QN 2     /* panels */
#define Q8I_SPLIT 1  /* decoding: two chains a panel (vpdpbusd's latency, 4 cycles on AMD Zen 4) */
typedef __m512i IV;
#elif BC_SIMD == 256
#define Q8I_TARGET
#define QM 2
#define QN 1
#define Q8I_SPLIT 0
typedef __m256i IV;
#else
#define Q8I_TARGET
#define QM 4
#define QN 1
#define Q8I_SPLIT 0
#endif
#define QR (QM > BC_ROWS_MAX ? QM : BC_ROWS_MAX)  /* rows a tile may have */

/* The integer formats the tiles serve (fast_intdot_part.h's fk, a constant in each copy) */
#define FK_Q8 0  /* q8_0i: bytes q + 128 */
#define FK_Q4 1  /* q4_0i: nibbles q + 8 */
#define FK_Q5 2  /* q5_0i: nibbles and fifth bits, q + 16 */
#define FK_Q4K 3 /* q4_ki: q4_k's nibbles (unsigned) by sub-blocks of a super-block */
#define FK_Q6K 4 /* q6_ki: q6_k's six bits (unsigned, q + 32) by sub-blocks of 16 */
#define FK_Q5K 5 /* q5_ki: q4_ki's nibbles with q5_k's fifth bits (unsigned, 0..31) */
#define FK_IQ4NL 6 /* iq4_nli: q4_0i's nibbles, each an index into kvalues_iq4nl (a byte shuffle) */
#define FK_IQ4XS 7 /* iq4_xsi: iq4_nli's by sub-blocks of a super-block */
#define FK_Q2K 8 /* q2_ki: q2_k's two bits (unsigned, 0..3) by sub-blocks of 16, mins by s16 */
#define FK_Q3K 9 /* q3_ki: q3_k's three bits (unsigned, q + 4) by sub-blocks of 16 */
#define FK_Q41 10 /* q4_1i: q4_0i's nibbles (unsigned, 0..15), the block's minimum times x's sum */
#define FK_Q51 11 /* q5_1i: q5_0i's nibbles and fifth bits (unsigned, 0..31), likewise */

/* Decoding prefetches each block's bytes this far ahead (a run's blocks lie in
 * the order the tile reads them, so the bytes ahead are the next ones it
 * reads). AMD Zen 5, one row of 96 matrices of 3072 x 768 from memory, one
 * thread, GB/s without / with: q8_0i 37 / 37, q4_0i 31 / 37, q5_0i 28 / 38,
 * q4_ki 23 / 36, q6_ki 16 / 35 (16 KiB: within 10% either way) */
#define INT_AHEAD 8192

/* Whether decoding prefetches format fk's blocks (INT_AHEAD on), or leaves
 * them to the hardware's prefetchers: the super-blocks whose kernels read a
 * block forward (q4_ki, q5_ki, q6_ki, iq4_xsi) stream faster without. AMD Zen 4
 * (family 25 model 17, KVM), Llama-3.2-1B's products, one row from memory,
 * GB/s with / without, one thread: AVX-512 q4_ki 14-17 / 21-27, iq4_xsi
 * 21 / 30; AVX2 q4_ki 14-17 / 26, iq4_xsi 13 / 21; two threads AVX-512
 * q4_ki 29 / 35, iq4_xsi 32 / 35 (q5_ki: its commit, 767ed0c; q6_ki, its qh
 * before its ql by halves: AVX-512 15 / 20, AVX2 11.7 / 12.9, issue 51). q2_ki and
 * q3_ki keep them (without: q2_ki within 3%, q3_ki AVX-512 1.27x, AVX2
 * 0.84x). The Zen 5 figures above (prefetch 1.6x faster for q4_ki) were
 * measured before the runs' layout; not remeasured there. */
static inline int fk_prefetches(int fk)
{
    return !(fk == FK_Q4K || fk == FK_Q5K || fk == FK_Q6K || fk == FK_IQ4XS);
}

/* Whether decoding prefetches format fk's blocks in a product whose bc_gemm
 * asks pf (BC_GEMM_PF_*): the mode the runtime chose for the format's group
 * (csrc/runtime/prefetch.c: timed per CPU, since the split above is Zen 4's
 * and Zen 5 wants the opposite for q4_ki), or the default above. */
static inline int fk_decode_prefetches(int fk, int pf)
{
    return pf == BC_GEMM_PF_ON ? 1 : pf == BC_GEMM_PF_OFF ? 0 : fk_prefetches(fk);
}

static inline int fk_dtype(int fk)
{
    return fk == FK_Q4 ? BC_DTYPE_Q4_0I : fk == FK_Q5 ? BC_DTYPE_Q5_0I
         : fk == FK_Q4K ? BC_DTYPE_Q4_KI : fk == FK_Q6K ? BC_DTYPE_Q6_KI
         : fk == FK_Q5K ? BC_DTYPE_Q5_KI : fk == FK_IQ4NL ? BC_DTYPE_IQ4_NLI
         : fk == FK_IQ4XS ? BC_DTYPE_IQ4_XSI : fk == FK_Q2K ? BC_DTYPE_Q2_KI
         : fk == FK_Q3K ? BC_DTYPE_Q3_KI : fk == FK_Q41 ? BC_DTYPE_Q4_1I
         : fk == FK_Q51 ? BC_DTYPE_Q5_1I : BC_DTYPE_Q8_0I;
}

/* x's blocks of 32 per block of the format: 8 for the super-blocks of 256
 * (q4_ki, q6_ki, q5_ki: a block function of their own, a run's panels one at a time) */
static inline size_t fk_x_blocks(int fk)
{
    return fk == FK_Q4K || fk == FK_Q6K || fk == FK_Q5K || fk == FK_IQ4XS || fk == FK_Q2K
           || fk == FK_Q3K ? 8 : 1;
}

/* bytes of one block of a panel (its 16 rows) */
static inline size_t fk_block_bytes(int fk)
{
    return fk == FK_Q4 || fk == FK_IQ4NL ? sizeof(bc_q4i_block) : fk == FK_Q5 ? sizeof(bc_q5i_block)
         : fk == FK_Q4K ? sizeof(bc_q4ki_block) : fk == FK_Q6K ? sizeof(bc_q6ki_block)
         : fk == FK_Q5K ? sizeof(bc_q5ki_block) : fk == FK_IQ4XS ? sizeof(bc_iq4xsi_block)
         : fk == FK_Q2K ? sizeof(bc_q2ki_block) : fk == FK_Q3K ? sizeof(bc_q3ki_block)
         : fk == FK_Q41 ? sizeof(bc_q41i_block) : fk == FK_Q51 ? sizeof(bc_q51i_block)
         : sizeof(bc_q8i_block);
}

#if BC_SIMD == 512
/* w + 16 in each byte lane whose bit of the 64-bit word at bits is set */
BC_INLINE IV q5i_fifth_512(IV w, const unsigned char *bits)
{
    uint64_t m;
    memcpy(&m, bits, 8);
    return _mm512_mask_add_epi8(w, _cvtu64_mask64(m), w, _mm512_set1_epi8(16));
}
#elif BC_SIMD == 256
/* the same for 32 lanes and the 32-bit word at bits: byte i of the vector is
 * byte i / 8 of the word, kept where its bit i % 8 is set */
BC_INLINE IV q5i_fifth_256(IV w, const unsigned char *bits)
{
    uint32_t m;
    memcpy(&m, bits, 4);
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i b = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)m), pick), bit);
    return _mm256_or_si256(w, _mm256_and_si256(_mm256_cmpeq_epi8(b, bit), _mm256_set1_epi8(16)));
}
#endif
#define QP (BC_INTDOT_GROUP > QN ? BC_INTDOT_GROUP : QN)  /* panels a tile may have */

/* The GEMM's expanded weights (fast_intdot_part.h's wx_expand): a record of
 * WX_VECS vectors (WX_BYTES) for each block of 32 inputs of QN panels, made
 * for a part of at least WX_ROWS rows */
#define WX_T (QN * VPP)
#define WX_VECS (10 * WX_T)
#define WX_BYTES ((size_t)WX_VECS * VL * 4)
#define WX_ROWS 16

static inline int32_t ld32(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

#if BC_SIMD == 256
/* two copies: pmaddubsw on every AVX2 CPU, AVX-VNNI's vpdpbusd where the CPU has it */
#define Q8I_DP 0
#define Q8I_FN(name) name##_mad
#include "fast_intdot_part.h"
#undef Q8I_DP
#undef Q8I_FN
#undef Q8I_TARGET
#undef Q8I_DP
#undef Q8I_FN
#define Q8I_TARGET __attribute__((target("avx2,avxvnni,fma,f16c")))
#define Q8I_DP 1
#define Q8I_FN(name) name##_vnni
#include "fast_intdot_part.h"
#else
#define Q8I_DP 1
#define Q8I_FN(name) name
#include "fast_intdot_part.h"
#endif

#if BC_SIMD == 512 || BC_SIMD == 256
/* The CPU has the VNNI this copy uses (AVX512_VNNI; AVX-VNNI for AVX2, unless
 * BLOCKC_AVXVNNI=0 asks for pmaddubsw: the tests compare the two). */
static int has_vnni(void)
{
    static int known = -1;  /* a benign race: every thread stores the same value */
    if (known < 0) {
        __builtin_cpu_init();
#if BC_SIMD == 512
        known = __builtin_cpu_supports("avx512vnni") != 0;
#else
        const char *off = getenv("BLOCKC_AVXVNNI");
        known = __builtin_cpu_supports("avxvnni") != 0 && !(off && off[0] == '0');
#endif
    }
    return known;
}
#endif

/* The products on q8_0i, q4_0i, q5_0i, q4_ki or q6_ki (fk) panels, by the copy the CPU runs. */
static void xq_part_int(int fk, const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                        size_t o0, size_t o1)
{
#if BC_SIMD == 512
    /* AVX-512F without VNNI: the AVX2 kernel, whose bits are the same */
    if (!has_vnni()) {
        bc_kernels_avx2.wf[BC_WF_PANEL(fk_dtype(fk))].xq_part(g, xq, n0, n1, o0, o1);
        return;
    }
#endif
#if BC_SIMD == 256
    if (has_vnni())
        q8i_part_vnni(fk, g, xq, n0, n1, o0, o1);
    else
        q8i_part_mad(fk, g, xq, n0, n1, o0, o1);
#else
    q8i_part(fk, g, xq, n0, n1, o0, o1);
#endif
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. quantised; w (OC,C) q8_0i panels
static void xq_part_q8_0i(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                          size_t o0, size_t o1)
{
    xq_part_int(FK_Q8, g, xq, n0, n1, o0, o1);
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. quantised; w (OC,C) q4_0i panels
static void xq_part_q4_0i(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                          size_t o0, size_t o1)
{
    xq_part_int(FK_Q4, g, xq, n0, n1, o0, o1);
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. quantised; w (OC,C) q5_0i panels
static void xq_part_q5_0i(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                          size_t o0, size_t o1)
{
    xq_part_int(FK_Q5, g, xq, n0, n1, o0, o1);
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. quantised; w (OC,C) q4_ki panels
static void xq_part_q4_ki(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                          size_t o0, size_t o1)
{
    xq_part_int(FK_Q4K, g, xq, n0, n1, o0, o1);
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. quantised; w (OC,C) iq4_nli panels
static void xq_part_iq4_nli(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                            size_t o0, size_t o1)
{
    xq_part_int(FK_IQ4NL, g, xq, n0, n1, o0, o1);
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. quantised; w (OC,C) iq4_xsi panels
static void xq_part_iq4_xsi(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                            size_t o0, size_t o1)
{
    xq_part_int(FK_IQ4XS, g, xq, n0, n1, o0, o1);
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. quantised (with s16); w (OC,C) q2_ki panels
static void xq_part_q2_ki(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                          size_t o0, size_t o1)
{
    xq_part_int(FK_Q2K, g, xq, n0, n1, o0, o1);
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. quantised (with s16); w (OC,C) q3_ki panels
static void xq_part_q3_ki(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                          size_t o0, size_t o1)
{
    xq_part_int(FK_Q3K, g, xq, n0, n1, o0, o1);
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. quantised; w (OC,C) q4_1i panels
static void xq_part_q4_1i(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                          size_t o0, size_t o1)
{
    xq_part_int(FK_Q41, g, xq, n0, n1, o0, o1);
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. quantised; w (OC,C) q5_1i panels
static void xq_part_q5_1i(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                          size_t o0, size_t o1)
{
    xq_part_int(FK_Q51, g, xq, n0, n1, o0, o1);
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. quantised; w (OC,C) q5_ki panels
static void xq_part_q5_ki(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                          size_t o0, size_t o1)
{
    xq_part_int(FK_Q5K, g, xq, n0, n1, o0, o1);
}

// y (N,OC) rows [n0,n1), columns [o0,o1); xq rows n0.. quantised (with s16); w (OC,C) q6_ki panels
static void xq_part_q6_ki(const bc_gemm *g, const unsigned char *xq, size_t n0, size_t n1,
                          size_t o0, size_t o1)
{
    xq_part_int(FK_Q6K, g, xq, n0, n1, o0, o1);
}

#undef Q8I_TARGET
#undef Q8I_DP
#undef Q8I_FN


