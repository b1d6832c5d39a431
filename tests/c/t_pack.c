/* t_pack.c: packed weight matrices (bc_engine.h): sizes, packing and unpacking
 * (the quantisers' rules), and the linear on them. */
#include <math.h>
#include <string.h>

#include "harness.h"

#define NB(n) ((n) * sizeof(float))

static const int DTYPES[] = {BC_DTYPE_F32, BC_DTYPE_BF16, BC_DTYPE_Q8_0, BC_DTYPE_Q4_0,
                             BC_DTYPE_F16, BC_DTYPE_Q5_0, BC_DTYPE_Q8_0I, BC_DTYPE_Q4_K,
                             BC_DTYPE_Q6_K, BC_DTYPE_Q4_0I, BC_DTYPE_BF16I, BC_DTYPE_Q5_0I,
                             BC_DTYPE_Q4_KI, BC_DTYPE_Q6_KI, BC_DTYPE_Q4_1, BC_DTYPE_Q5_1,
                             BC_DTYPE_Q5_K, BC_DTYPE_IQ4_NL, BC_DTYPE_IQ4_XS, BC_DTYPE_Q2_K,
                             BC_DTYPE_Q3_K, BC_DTYPE_Q5_KI, BC_DTYPE_IQ4_NLI, BC_DTYPE_IQ4_XSI,
                             BC_DTYPE_Q4_1I, BC_DTYPE_Q5_1I, BC_DTYPE_Q2_KI, BC_DTYPE_Q3_KI};
#define ND ((int)(sizeof DTYPES / sizeof DTYPES[0]))

/* the K-quants' rows (q4_k, q6_k, q4_ki, q6_ki, q5_k, iq4_xs, q2_k, q3_k, q5_ki,
 * iq4_xsi) are whole super-blocks of 256 */
static int whole_k(int dtype)
{
    return dtype == BC_DTYPE_Q4_K || dtype == BC_DTYPE_Q6_K || dtype == BC_DTYPE_Q4_KI ||
           dtype == BC_DTYPE_Q6_KI || dtype == BC_DTYPE_Q5_K || dtype == BC_DTYPE_IQ4_XS ||
           dtype == BC_DTYPE_Q2_K || dtype == BC_DTYPE_Q3_K || dtype == BC_DTYPE_Q5_KI ||
           dtype == BC_DTYPE_IQ4_XSI || dtype == BC_DTYPE_Q2_KI || dtype == BC_DTYPE_Q3_KI;
}

static int fits(int dtype, size_t cols)
{
    return !whole_k(dtype) || cols % 256 == 0;
}

static size_t packed(int dtype, size_t rows, size_t cols)
{
    size_t n = 0;
    EXPECT_STATUS(BC_OK, bc_pack_size(&n, dtype, rows, cols));
    return n;
}

static void size_checks(void)
{
    size_t *n = h_alloc_bytes(sizeof *n);
    EXPECT_STATUS(BC_ENULL, bc_pack_size(NULL, BC_DTYPE_F32, 4, 4));
    EXPECT_STATUS(BC_ESIZE, bc_pack_size(n, BC_DTYPE_F32, 0, 4));
    EXPECT_STATUS(BC_ESIZE, bc_pack_size(n, BC_DTYPE_Q8_0, 4, 0));
    const int bad[] = {-1, BC_NDTYPE, 99};
    for (int i = 0; i < 3; i++)
        EXPECT_STATUS(BC_EOPTION, bc_pack_size(n, bad[i], 4, 4));
    EXPECT_STATUS(BC_EOVERFLOW, bc_pack_size(n, BC_DTYPE_F32, H_NEG, 4));
    EXPECT_STATUS(BC_EOVERFLOW, bc_pack_size(n, BC_DTYPE_BF16, H_HALF, 2));
    EXPECT_STATUS(BC_EOVERFLOW, bc_pack_size(n, BC_DTYPE_Q8_0, (size_t)1 << 30, (size_t)1 << 30));
    EXPECT(h_untouched(n, sizeof *n));
    /* whole panels of 16 rows; q8_0: whole blocks of 32 columns, 34 bytes each */
    EXPECT(packed(BC_DTYPE_F32, 17, 5) == 32 * 5 * 4);
    EXPECT(packed(BC_DTYPE_BF16, 16, 5) == 16 * 5 * 2);
    EXPECT(packed(BC_DTYPE_Q8_0, 16, 32) == 16 * 34);
    EXPECT(packed(BC_DTYPE_Q8_0, 3, 33) == 16 * 2 * 34);
    EXPECT(packed(BC_DTYPE_Q8_0, 768, 3072) == 768 * 96 * 34);
    EXPECT(packed(BC_DTYPE_Q4_0, 3, 33) == 16 * 2 * 18);  /* q4_0: 18 bytes a block */
    EXPECT(packed(BC_DTYPE_F16, 17, 5) == 32 * 5 * 2);
    EXPECT(packed(BC_DTYPE_Q5_0, 3, 33) == 16 * 2 * 22);  /* q5_0: 22 bytes a block */
    /* q4_k: 148 bytes a row's super-block of 256; no short super-block */
    EXPECT(packed(BC_DTYPE_Q4_K, 17, 512) == 32 * 2 * 148);
    EXPECT(packed(BC_DTYPE_Q4_K, 768, 3072) == 768 * 12 * 148);
    const size_t short_cols[] = {1, 32, 255, 257, 300};
    for (int i = 0; i < 5; i++) {
        *n = 77;
        EXPECT_STATUS(BC_ESIZE, bc_pack_size(n, BC_DTYPE_Q4_K, 16, short_cols[i]));
        EXPECT_STATUS(BC_ESIZE, bc_pack_size(n, BC_DTYPE_Q6_K, 16, short_cols[i]));
        EXPECT(*n == 77);
    }
    /* q6_k: 274 bytes a row's super-block of 256 (Q6_K's 210, its quants a byte each) */
    EXPECT(packed(BC_DTYPE_Q6_K, 17, 512) == 32 * 2 * 274);
    EXPECT(packed(BC_DTYPE_Q6_K, 50257, 768) == 50272 * 3 * 274);
}

/* bc_dtype_info: every dtype's name, block and bytes, and their agreement
 * with bc_pack_size; the refusals write nothing. */
static void dtype_info_checks(void)
{
    /* (a value below BC_NDTYPE without a format yet: no name, refused) */
    static const char *const names[BC_NDTYPE] = {
        [BC_DTYPE_F32] = "float32", [BC_DTYPE_BF16] = "bfloat16", [BC_DTYPE_Q8_0] = "q8_0",
        [BC_DTYPE_Q4_0] = "q4_0", [BC_DTYPE_F16] = "float16", [BC_DTYPE_Q5_0] = "q5_0",
        [BC_DTYPE_Q8_0I] = "q8_0i", [BC_DTYPE_Q4_K] = "q4_k", [BC_DTYPE_Q6_K] = "q6_k",
        [BC_DTYPE_Q4_0I] = "q4_0i", [BC_DTYPE_BF16I] = "bfloat16i", [BC_DTYPE_Q5_0I] = "q5_0i",
        [BC_DTYPE_Q4_KI] = "q4_ki", [BC_DTYPE_Q6_KI] = "q6_ki", [BC_DTYPE_Q4_1] = "q4_1",
        [BC_DTYPE_Q5_1] = "q5_1", [BC_DTYPE_Q5_K] = "q5_k", [BC_DTYPE_IQ4_NL] = "iq4_nl",
        [BC_DTYPE_IQ4_XS] = "iq4_xs", [BC_DTYPE_Q2_K] = "q2_k", [BC_DTYPE_Q3_K] = "q3_k",
        [BC_DTYPE_Q5_KI] = "q5_ki", [BC_DTYPE_IQ4_NLI] = "iq4_nli", [BC_DTYPE_IQ4_XSI] = "iq4_xsi",
        [BC_DTYPE_Q4_1I] = "q4_1i", [BC_DTYPE_Q5_1I] = "q5_1i",
        [BC_DTYPE_Q2_KI] = "q2_ki", [BC_DTYPE_Q3_KI] = "q3_ki"};
    static const size_t blocks[BC_NDTYPE] = {
        [BC_DTYPE_F32] = 1, [BC_DTYPE_BF16] = 1, [BC_DTYPE_Q8_0] = 32, [BC_DTYPE_Q4_0] = 32,
        [BC_DTYPE_F16] = 1, [BC_DTYPE_Q5_0] = 32, [BC_DTYPE_Q8_0I] = 32, [BC_DTYPE_Q4_K] = 256,
        [BC_DTYPE_Q6_K] = 256, [BC_DTYPE_Q4_0I] = 32, [BC_DTYPE_BF16I] = 2, [BC_DTYPE_Q5_0I] = 32,
        [BC_DTYPE_Q4_KI] = 256, [BC_DTYPE_Q6_KI] = 256, [BC_DTYPE_Q4_1] = 32,
        [BC_DTYPE_Q5_1] = 32, [BC_DTYPE_Q5_K] = 256, [BC_DTYPE_IQ4_NL] = 32,
        [BC_DTYPE_IQ4_XS] = 256, [BC_DTYPE_Q2_K] = 256, [BC_DTYPE_Q3_K] = 256,
        [BC_DTYPE_Q5_KI] = 256, [BC_DTYPE_IQ4_NLI] = 32, [BC_DTYPE_IQ4_XSI] = 256,
        [BC_DTYPE_Q4_1I] = 32, [BC_DTYPE_Q5_1I] = 32,
        [BC_DTYPE_Q2_KI] = 256, [BC_DTYPE_Q3_KI] = 256};
    static const size_t bytes[BC_NDTYPE] = {
        [BC_DTYPE_F32] = 4, [BC_DTYPE_BF16] = 2, [BC_DTYPE_Q8_0] = 34, [BC_DTYPE_Q4_0] = 18,
        [BC_DTYPE_F16] = 2, [BC_DTYPE_Q5_0] = 22, [BC_DTYPE_Q8_0I] = 34, [BC_DTYPE_Q4_K] = 148,
        [BC_DTYPE_Q6_K] = 274, [BC_DTYPE_Q4_0I] = 18, [BC_DTYPE_BF16I] = 4, [BC_DTYPE_Q5_0I] = 22,
        [BC_DTYPE_Q4_KI] = 148, [BC_DTYPE_Q6_KI] = 210, [BC_DTYPE_Q4_1] = 20,
        [BC_DTYPE_Q5_1] = 24, [BC_DTYPE_Q5_K] = 180, [BC_DTYPE_IQ4_NL] = 18,
        [BC_DTYPE_IQ4_XS] = 138, [BC_DTYPE_Q2_K] = 84, [BC_DTYPE_Q3_K] = 114,
        [BC_DTYPE_Q5_KI] = 180, [BC_DTYPE_IQ4_NLI] = 18, [BC_DTYPE_IQ4_XSI] = 138,
        [BC_DTYPE_Q4_1I] = 20, [BC_DTYPE_Q5_1I] = 24,
        [BC_DTYPE_Q2_KI] = 84, [BC_DTYPE_Q3_KI] = 114};
    for (int dt = 0; dt < BC_NDTYPE; dt++) {
        if (!names[dt]) {
            size_t *n = h_alloc_bytes(sizeof *n);
            EXPECT_STATUS(BC_EOPTION, bc_dtype_info(NULL, 0, NULL, NULL, dt));
            EXPECT_STATUS(BC_EOPTION, bc_pack_size(n, dt, 4, 4));
            EXPECT(h_untouched(n, sizeof *n));
            continue;
        }
        char *name = h_alloc_bytes(BC_DTYPE_NAME_MAX);
        size_t *blk = h_alloc_bytes(sizeof *blk), *nb = h_alloc_bytes(sizeof *nb);
        if (!names[dt]) {  /* a gap in the numbering: not a dtype, nothing written */
            size_t *n = h_alloc_bytes(sizeof *n);
            EXPECT_STATUS(BC_EOPTION, bc_dtype_info(name, BC_DTYPE_NAME_MAX, blk, nb, dt));
            EXPECT_STATUS(BC_EOPTION, bc_pack_size(n, dt, 4, 4));
            EXPECT(h_untouched(name, BC_DTYPE_NAME_MAX) && h_untouched(n, sizeof *n));
            continue;
        }
        EXPECT_STATUS(BC_OK, bc_dtype_info(name, BC_DTYPE_NAME_MAX, blk, nb, dt));
        EXPECT(strcmp(name, names[dt]) == 0);
        EXPECT(*blk == blocks[dt] && *nb == bytes[dt]);
        EXPECT(packed(dt, 16, 3 * *blk) == 16 * 3 * *nb);
        if (whole_k(dt)) {
            size_t *m = h_alloc_bytes(sizeof *m);
            EXPECT_STATUS(BC_ESIZE, bc_pack_size(m, dt, 1, 3 * *blk + 1));
        } else {
            EXPECT(packed(dt, 1, 3 * *blk + 1) == 16 * 4 * *nb);
        }
        EXPECT(h_guard_ok(name, BC_DTYPE_NAME_MAX));
        EXPECT_STATUS(BC_OK, bc_dtype_info(NULL, 0, NULL, NULL, dt));
        /* a buffer one byte short of the name and its NUL */
        char *small = h_alloc_bytes(strlen(names[dt]));
        EXPECT_STATUS(BC_ESIZE, bc_dtype_info(small, strlen(names[dt]), blk, nb, dt));
        EXPECT(h_untouched(small, strlen(names[dt])));
    }
    char *name = h_alloc_bytes(BC_DTYPE_NAME_MAX);
    size_t *blk = h_alloc_bytes(sizeof *blk);
    const int bad[] = {-1, BC_NDTYPE, 99};
    for (int i = 0; i < 3; i++)
        EXPECT_STATUS(BC_EOPTION, bc_dtype_info(name, BC_DTYPE_NAME_MAX, blk, NULL, bad[i]));
    EXPECT(h_untouched(name, BC_DTYPE_NAME_MAX) && h_untouched(blk, sizeof *blk));
}

/* pack then unpack: float32 exactly; bfloat16 the round-to-nearest-even of
 * each weight; q8_0 llama.cpp's blocks (q * d, |error| <= d / 2 + rounding). */
static void roundtrip_checks(size_t rows, size_t cols)
{
    const size_t n = rows * cols;
    float *w = h_alloc(n), *back = h_alloc(n);
    h_fill(w, n, (uint32_t)(rows * 31 + cols), 2.0f);
    for (int k = 0; k < ND; k++) {
        const int dt = DTYPES[k];
        if (!fits(dt, cols))
            continue;
        const size_t nb = packed(dt, rows, cols);
        unsigned char *p = h_alloc_bytes(nb);
        EXPECT_STATUS(BC_OK, bc_pack(p, nb, w, dt, rows, cols));
        EXPECT(h_guard_ok(p, nb));
        h_refill(back, NB(n));
        EXPECT_STATUS(BC_OK, bc_unpack(back, p, nb, dt, rows, cols));
        EXPECT(h_guard_ok(back, NB(n)));
        for (size_t i = 0; i < rows; i++) {
            float amax = 0.0f;  /* of the row's first block, for the q8_0 bound */
            for (size_t j = 0; j < cols && j < (whole_k(dt) ? 256u : 32u); j++)
                amax = fmaxf(amax, fabsf(w[i * cols + j]));
            for (size_t j = 0; j < cols; j++) {
                const float a = w[i * cols + j], b = back[i * cols + j];
                if (dt == BC_DTYPE_F32) {
                    EXPECT(memcmp(&a, &b, 4) == 0);
                } else if (dt == BC_DTYPE_BF16 || dt == BC_DTYPE_BF16I) {
                    uint32_t u, v;
                    memcpy(&u, &a, 4);
                    memcpy(&v, &b, 4);
                    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
                    if (dt == BC_DTYPE_BF16I && (r & 0x7f800000u) == 0)
                        r &= 0x80000000u;  /* bfloat16i: a subnormal is stored as zero */
                    EXPECT(v == r);
                } else if (dt == BC_DTYPE_F16) {
                    /* half an ulp of a half (11 bits), or half the smallest subnormal */
                    EXPECT(fabsf(a - b) <= fmaxf(fabsf(a) * 0x1p-11f, 0x1p-25f));
                } else if (j < 32 && (dt == BC_DTYPE_Q8_0 || dt == BC_DTYPE_Q8_0I)) {
                    /* half a step, plus the scale rounded to a half: 127 d 2^-11 */
                    EXPECT(fabsf(a - b) <= amax / 127.0f * (0.5f + 127.0f / 2048.0f) + 1e-7f);
                } else if (j < 32 && (dt == BC_DTYPE_Q4_1 || dt == BC_DTYPE_Q5_1 ||
                                      dt == BC_DTYPE_Q4_1I || dt == BC_DTYPE_Q5_1I)) {
                    /* q4_1 (q5_1): half a step of (max - min) / 15 (31) at most, the
                     * scale and minimum rounded to halves: loosely 2 amax / 15 (31) */
                    const int four = dt == BC_DTYPE_Q4_1 || dt == BC_DTYPE_Q4_1I;
                    EXPECT(fabsf(a - b) <= amax * (four ? 2.0f / 15.0f : 2.0f / 31.0f) + 1e-7f);
                } else if (j < 32 && (dt == BC_DTYPE_IQ4_NL || dt == BC_DTYPE_IQ4_NLI)) {
                    /* iq4_nl: half the widest gap of its values (24 d, d = amax / 127),
                     * or 14 d where 113 d stands for amax: loosely amax / 8 */
                    EXPECT(fabsf(a - b) <= amax / 8.0f + 1e-7f);
                } else if (j < 256 && (dt == BC_DTYPE_Q4_K || dt == BC_DTYPE_Q4_KI ||
                                       dt == BC_DTYPE_Q5_K || dt == BC_DTYPE_Q5_KI ||
                                       dt == BC_DTYPE_IQ4_XS || dt == BC_DTYPE_IQ4_XSI)) {
                    /* q4_k: a loose bound (a sub-block's 6-bit scale and min are
                     * steps of the super-block's largest); Python checks the bits */
                    EXPECT(fabsf(a - b) <= amax / 4.0f + 1e-7f);
                } else if (j < 256 && (dt == BC_DTYPE_Q2_K || dt == BC_DTYPE_Q2_KI)) {
                    /* q2_k: half a step of a sub-block's range / 3 plus its scale and min
                     * at 4 bits against the largest: loosely amax (Python checks the bits) */
                    EXPECT(fabsf(a - b) <= amax + 1e-7f);
                } else if (j < 256 && (dt == BC_DTYPE_Q3_K || dt == BC_DTYPE_Q3_KI)) {
                    /* q3_k: a step of about amax / 4 at the clipped end, plus the scale
                     * at 6 bits against the largest: loosely amax / 2 */
                    EXPECT(fabsf(a - b) <= amax / 2.0f + 1e-7f);
                } else if (j < 256 && (dt == BC_DTYPE_Q6_K || dt == BC_DTYPE_Q6_KI)) {
                    /* q6_k: half a step of a sub-block's scale (about amax / 32, its
                     * int8 against the largest) at most, loosely; Python checks the bits */
                    EXPECT(fabsf(a - b) <= amax / 16.0f + 1e-7f);
                } else if (j < 32 && (dt == BC_DTYPE_Q4_0 || dt == BC_DTYPE_Q4_0I)) {
                    /* q4_0: a step at the clipped end (+8 d stored as 7 d), half one else */
                    EXPECT(fabsf(a - b) <= amax / 8.0f * (1.0f + 8.0f / 2048.0f) + 1e-7f);
                } else if (j < 32) {
                    /* q5_0: a step at the clipped end (+16 d stored as 15 d), half one else */
                    EXPECT(fabsf(a - b) <= amax / 16.0f * (1.0f + 16.0f / 2048.0f) + 1e-7f);
                }
            }
        }
    }
}

static void pack_hostile_checks(void)
{
    enum { R = 5, C = 40 };
    float *w = h_alloc(R * C);
    h_fill(w, R * C, 3, 1.0f);
    const size_t nq = packed(BC_DTYPE_Q8_0, R, C);
    unsigned char *q = h_alloc_bytes(nq);
    EXPECT_STATUS(BC_ENULL, bc_pack(NULL, nq, w, BC_DTYPE_Q8_0, R, C));
    EXPECT_STATUS(BC_ENULL, bc_pack(q, nq, NULL, BC_DTYPE_Q8_0, R, C));
    EXPECT_STATUS(BC_ESIZE, bc_pack(q, nq, w, BC_DTYPE_Q8_0, 0, C));
    EXPECT_STATUS(BC_EOPTION, bc_pack(q, nq, w, BC_NDTYPE, R, C));
    EXPECT_STATUS(BC_EWORKSPACE, bc_pack(q, nq - 1, w, BC_DTYPE_Q8_0, R, C));
    EXPECT_STATUS(BC_EOVERFLOW, bc_pack(q, nq, w, BC_DTYPE_Q8_0, H_NEG, C));
    EXPECT_STATUS(BC_EALIAS, bc_pack((unsigned char *)w + 8, nq, w, BC_DTYPE_F32, 1, 4));
    /* q8_0 cannot hold a non-finite weight, nor one whose scale overflows a half */
    const float bad[] = {NAN, INFINITY, -INFINITY, 1e7f * 0.9f * 10.0f};
    for (int i = 0; i < 4; i++) {
        const float keep = w[R * C - 1];
        w[R * C - 1] = bad[i];
        EXPECT_STATUS(BC_EVALUE, bc_pack(q, nq, w, BC_DTYPE_Q8_0, R, C));
        w[R * C - 1] = keep;
    }
    EXPECT(h_untouched(q, nq));
    /* q5_0: its scale a half too (|w| <= 65504 * 16) */
    {
        const size_t n5 = packed(BC_DTYPE_Q5_0, R, C);
        unsigned char *q5 = h_alloc_bytes(n5);
        const float bad5[] = {NAN, -INFINITY, 1048064.0f * 1.0001f};
        for (int i = 0; i < 3; i++) {
            const float keep = w[R * C - 1];
            w[R * C - 1] = bad5[i];
            EXPECT_STATUS(BC_EVALUE, bc_pack(q5, n5, w, BC_DTYPE_Q5_0, R, C));
            w[R * C - 1] = keep;
        }
        EXPECT(h_untouched(q5, n5));
        w[R * C - 1] = 1048064.0f;
        EXPECT_STATUS(BC_OK, bc_pack(q5, n5, w, BC_DTYPE_Q5_0, R, C));
        float *back5 = h_alloc(R * C);
        EXPECT_STATUS(BC_OK, bc_unpack(back5, q5, n5, BC_DTYPE_Q5_0, R, C));
        EXPECT(back5[R * C - 1] == 1048064.0f && h_finite(back5, R * C));
        h_fill(w, R * C, 3, 1.0f);
    }
    /* float16 refuses what a half cannot hold (beyond 65504: no infinities made),
     * keeps 65504 and underflows the tiny to zero */
    const float badh[] = {NAN, INFINITY, -INFINITY, 65504.5f, -65519.0f};
    const size_t nh = packed(BC_DTYPE_F16, R, C);
    unsigned char *hq = h_alloc_bytes(nh);
    for (int i = 0; i < 5; i++) {
        const float keep = w[7];
        w[7] = badh[i];
        EXPECT_STATUS(BC_EVALUE, bc_pack(hq, nh, w, BC_DTYPE_F16, R, C));
        w[7] = keep;
    }
    EXPECT(h_untouched(hq, nh));
    {
        float *e = h_alloc(4), *eb = h_alloc(4);
        e[0] = 65504.0f; e[1] = -65504.0f; e[2] = 1e-9f; e[3] = 0x1p-24f;
        const size_t ne = packed(BC_DTYPE_F16, 1, 4);
        unsigned char *pe = h_alloc_bytes(ne);
        EXPECT_STATUS(BC_OK, bc_pack(pe, ne, e, BC_DTYPE_F16, 1, 4));
        EXPECT_STATUS(BC_OK, bc_unpack(eb, pe, ne, BC_DTYPE_F16, 1, 4));
        EXPECT(eb[0] == 65504.0f && eb[1] == -65504.0f && eb[2] == 0.0f && eb[3] == 0x1p-24f);
    }
    /* q4_k and q6_k the same (beyond 65504 * 8), and rows of whole super-blocks only */
    for (int kq = 0; kq < 2; kq++) {
        const int dk = kq ? BC_DTYPE_Q6_K : BC_DTYPE_Q4_K;
        float *wk = h_alloc(2 * 256);
        h_fill(wk, 2 * 256, 4, 1.0f);
        const size_t nk = packed(dk, 2, 256);
        unsigned char *qk = h_alloc_bytes(nk);
        const float badk[] = {NAN, INFINITY, 6e5f};
        for (int i = 0; i < 3; i++) {
            wk[300] = badk[i];
            EXPECT_STATUS(BC_EVALUE, bc_pack(qk, nk, wk, dk, 2, 256));
        }
        EXPECT_STATUS(BC_ESIZE, bc_pack(qk, nk, wk, dk, 4, 128));
        EXPECT(h_untouched(qk, nk));
        wk[300] = 5e5f;  /* within: packs */
        EXPECT_STATUS(BC_OK, bc_pack(qk, nk, wk, dk, 2, 256));
    }
    /* ... which bfloat16 and float32 keep */
    w[0] = NAN;
    w[1] = INFINITY;
    const size_t nb = packed(BC_DTYPE_BF16, R, C);
    unsigned char *b = h_alloc_bytes(nb);
    float *back = h_alloc(R * C);
    EXPECT_STATUS(BC_OK, bc_pack(b, nb, w, BC_DTYPE_BF16, R, C));
    EXPECT_STATUS(BC_OK, bc_unpack(back, b, nb, BC_DTYPE_BF16, R, C));
    EXPECT(isnan(back[0]) && isinf(back[1]) && back[1] > 0);
    /* unpack */
    EXPECT_STATUS(BC_ENULL, bc_unpack(NULL, b, nb, BC_DTYPE_BF16, R, C));
    EXPECT_STATUS(BC_ENULL, bc_unpack(back, NULL, nb, BC_DTYPE_BF16, R, C));
    EXPECT_STATUS(BC_EWORKSPACE, bc_unpack(back, b, nb - 2, BC_DTYPE_BF16, R, C));
    EXPECT_STATUS(BC_EOPTION, bc_unpack(back, b, nb, -1, R, C));
    EXPECT_STATUS(BC_ESIZE, bc_unpack(back, b, nb, BC_DTYPE_BF16, R, 0));
    EXPECT_STATUS(BC_EALIAS, bc_unpack((float *)b, b, nb, BC_DTYPE_BF16, R, C));
    /* zero and tiny blocks quantise to exact zeros and representable scales */
    float *z = h_alloc(32);
    for (int i = 0; i < 32; i++)
        z[i] = i < 16 ? 0.0f : 1e-30f;
    const size_t nz = packed(BC_DTYPE_Q8_0, 1, 32);
    unsigned char *qz = h_alloc_bytes(nz);
    float *zb = h_alloc(32);
    EXPECT_STATUS(BC_OK, bc_pack(qz, nz, z, BC_DTYPE_Q8_0, 1, 32));
    EXPECT_STATUS(BC_OK, bc_unpack(zb, qz, nz, BC_DTYPE_Q8_0, 1, 32));
    for (int i = 0; i < 32; i++)
        EXPECT(zb[i] == 0.0f || fabsf(zb[i] - z[i]) < 1e-30f);
}

/* The linear on packed weights: the unpacked matrix's product (the same
 * float32 weights, to float32 tolerance), and the same bits for any number of
 * rows: one row streams the panels, many run the GEMM. */
static void linear_checks(size_t n, size_t c, size_t oc)
{
    float *x = h_alloc(n * c), *w = h_alloc(oc * c), *b = h_alloc(oc), *y = h_alloc(n * oc);
    float *wu = h_alloc(oc * c), *ref = h_alloc(n * oc), *row = h_alloc(oc);
    h_fill(x, n * c, 11, 1.0f);
    h_fill(w, oc * c, 12, 0.5f);
    h_fill(b, oc, 13, 0.5f);
    for (int k = 0; k < ND; k++) {
        const int dt = DTYPES[k];
        if (!fits(dt, c))
            continue;
        /* the integer formats' (q8_0i's, ...) 8-bit activations: about 1e-2 of each
         * product's magnitude; bfloat16i's rounded ones 2^-9 */
        bc_dtype_traits tr;
        EXPECT_STATUS(BC_OK, bc_dtype_traits_of(&tr, dt));
        const float tol = tr.integer ? 2e-2f : dt == BC_DTYPE_BF16I ? 4e-3f : 1e-4f;
        const size_t nb = packed(dt, oc, c);
        unsigned char *p = h_alloc_bytes(nb);
        EXPECT_STATUS(BC_OK, bc_pack(p, nb, w, dt, oc, c));
        EXPECT_STATUS(BC_OK, bc_unpack(wu, p, nb, dt, oc, c));
        EXPECT_STATUS(BC_OK, bc_linear(ref, x, wu, b, n, c, oc));
        EXPECT_STATUS(BC_OK, bc_linear_packed(y, x, p, nb, dt, b, n, c, oc));
        EXPECT(h_guard_ok(y, NB(n * oc)));
        for (size_t i = 0; i < n * oc; i++)
            EXPECT(fabsf(y[i] - ref[i]) <= tol * (1.0f + fabsf(ref[i])) * sqrtf((float)c));
        for (size_t i = 0; i < n; i++) {
            EXPECT_STATUS(BC_OK, bc_linear_packed(row, x + i * c, p, nb, dt, b, 1, c, oc));
            EXPECT(memcmp(row, y + i * oc, NB(oc)) == 0);
        }
    }
}

static void linear_hostile_checks(void)
{
    enum { N = 3, C = 20, OC = 18 };
    float *x = h_alloc(N * C), *w = h_alloc(OC * C), *y = h_alloc(N * OC);
    h_fill(w, OC * C, 5, 1.0f);
    h_fill(x, N * C, 6, 1.0f);
    const size_t nb = packed(BC_DTYPE_Q8_0, OC, C);
    unsigned char *p = h_alloc_bytes(nb);
    EXPECT_STATUS(BC_OK, bc_pack(p, nb, w, BC_DTYPE_Q8_0, OC, C));
    EXPECT_STATUS(BC_ENULL, bc_linear_packed(NULL, x, p, nb, BC_DTYPE_Q8_0, NULL, N, C, OC));
    EXPECT_STATUS(BC_ENULL, bc_linear_packed(y, NULL, p, nb, BC_DTYPE_Q8_0, NULL, N, C, OC));
    EXPECT_STATUS(BC_ENULL, bc_linear_packed(y, x, NULL, nb, BC_DTYPE_Q8_0, NULL, N, C, OC));
    EXPECT_STATUS(BC_ESIZE, bc_linear_packed(y, x, p, nb, BC_DTYPE_Q8_0, NULL, 0, C, OC));
    EXPECT_STATUS(BC_ESIZE, bc_linear_packed(y, x, p, nb, BC_DTYPE_Q8_0, NULL, N, 0, OC));
    EXPECT_STATUS(BC_EOPTION, bc_linear_packed(y, x, p, nb, BC_NDTYPE, NULL, N, C, OC));
    EXPECT_STATUS(BC_EWORKSPACE, bc_linear_packed(y, x, p, nb - 1, BC_DTYPE_Q8_0, NULL, N, C, OC));
    /* a buffer of the right size for another dtype is still checked against this one */
    EXPECT_STATUS(BC_EWORKSPACE, bc_linear_packed(y, x, p, nb, BC_DTYPE_F32, NULL, N, C, OC));
    EXPECT_STATUS(BC_EOVERFLOW, bc_linear_packed(y, x, p, nb, BC_DTYPE_Q8_0, NULL, H_NEG, C, OC));
    EXPECT_STATUS(BC_EOVERFLOW, bc_linear_packed(y, x, p, nb, BC_DTYPE_Q8_0, NULL, N, C, H_HALF));
    EXPECT_STATUS(BC_EALIAS, bc_linear_packed(x + 1, x, p, nb, BC_DTYPE_Q8_0, NULL, N, C, OC));
    EXPECT_STATUS(BC_EALIAS, bc_linear_packed((float *)p, x, p, nb, BC_DTYPE_Q8_0, NULL, N, C, OC));
    EXPECT_STATUS(BC_EALIAS, bc_linear_packed(y, x, p, nb, BC_DTYPE_Q8_0, y + 2, N, C, OC));
    EXPECT(h_untouched(y, NB(N * OC)));
}

/* q8_0i (q4_0i, q5_0i, bfloat16i): the same bits on every instruction set and at any
 * thread count (its chain is the same everywhere: integer block sums, one fma
 * per block; bfloat16i's vdpbf16ps or its emulation), the weights q8_0's
 * (q4_0's, bfloat16's), and its columns bounded (a rounded row fits the
 * scratch). */
static void intdot_checks(int di, int dq, size_t n, size_t c, size_t oc)
{
    float *x = h_alloc(n * c), *w = h_alloc(oc * c), *b = h_alloc(oc);
    float *y0 = h_alloc(n * oc), *y = h_alloc(n * oc), *w8 = h_alloc(oc * c), *wi = h_alloc(oc * c);
    h_fill(x, n * c, 21, 1.0f);
    h_fill(w, oc * c, 22, 0.5f);
    h_fill(b, oc, 23, 0.5f);
    /* the same bytes as the plain format's (bfloat16i: pairs of columns), but
     * q6_ki's 210 a row's super-block where q6_k widens its quants to 274 */
    const size_t nb = packed(di, oc, c), n8 = packed(dq, oc, c);
    if (di == BC_DTYPE_Q6_KI)
        EXPECT(nb * 274 == n8 * 210);
    else
        EXPECT(nb == packed(dq, oc, di == BC_DTYPE_BF16I ? c + c % 2 : c));
    unsigned char *p = h_alloc_bytes(nb), *p8 = h_alloc_bytes(n8);
    EXPECT_STATUS(BC_OK, bc_pack(p, nb, w, di, oc, c));
    EXPECT_STATUS(BC_OK, bc_pack(p8, n8, w, dq, oc, c));
    EXPECT_STATUS(BC_OK, bc_unpack(wi, p, nb, di, oc, c));
    EXPECT_STATUS(BC_OK, bc_unpack(w8, p8, n8, dq, oc, c));
    EXPECT(memcmp(wi, w8, NB(oc * c)) == 0);
    int best = 0, start = 0;
    EXPECT_STATUS(BC_OK, bc_best_isa(&best));
    EXPECT_STATUS(BC_OK, bc_get_isa(&start));
    EXPECT_STATUS(BC_OK, bc_set_isa(BC_ISA_GENERIC));
    EXPECT_STATUS(BC_OK, bc_linear_packed(y0, x, p, nb, di, b, n, c, oc));
    for (int isa = BC_ISA_GENERIC; isa <= best; isa++)
        for (int t = 1; t <= 2; t++) {
            EXPECT_STATUS(BC_OK, bc_set_isa(isa));
            EXPECT_STATUS(BC_OK, bc_set_num_threads(t));
            h_refill(y, NB(n * oc));
            EXPECT_STATUS(BC_OK, bc_linear_packed(y, x, p, nb, di, b, n, c, oc));
            EXPECT(memcmp(y, y0, NB(n * oc)) == 0);
            EXPECT_STATUS(BC_OK, bc_linear_packed(y, x + (n - 1) * c, p, nb, di, b, 1,
                                                  c, oc));
            EXPECT(memcmp(y, y0 + (n - 1) * oc, NB(oc)) == 0);
        }
    EXPECT_STATUS(BC_OK, bc_set_num_threads(0));
    EXPECT_STATUS(BC_OK, bc_set_isa(start));
    size_t sz = 0;
    EXPECT_STATUS(BC_ESIZE, bc_pack_size(&sz, di, 1, BC_Q8_0I_MAX_COLS + 1));
    EXPECT_STATUS(BC_OK, bc_pack_size(&sz, di, 1, BC_Q8_0I_MAX_COLS));
    EXPECT(sz * (di == BC_DTYPE_Q6_KI ? 274 : 1) ==
           packed(dq, 16, BC_Q8_0I_MAX_COLS) * (di == BC_DTYPE_Q6_KI ? 210 : 1));
}

static void q8i_checks(size_t n, size_t c, size_t oc)
{
    intdot_checks(BC_DTYPE_Q8_0I, BC_DTYPE_Q8_0, n, c, oc);
    intdot_checks(BC_DTYPE_Q4_0I, BC_DTYPE_Q4_0, n, c, oc);
    intdot_checks(BC_DTYPE_Q5_0I, BC_DTYPE_Q5_0, n, c, oc);
    intdot_checks(BC_DTYPE_IQ4_NLI, BC_DTYPE_IQ4_NL, n, c, oc);
    intdot_checks(BC_DTYPE_Q4_1I, BC_DTYPE_Q4_1, n, c, oc);
    intdot_checks(BC_DTYPE_Q5_1I, BC_DTYPE_Q5_1, n, c, oc);
    if (c % 256 == 0) {  /* q4_ki, q6_ki, q5_ki, iq4_xsi: whole super-blocks */
        intdot_checks(BC_DTYPE_Q4_KI, BC_DTYPE_Q4_K, n, c, oc);
        intdot_checks(BC_DTYPE_Q6_KI, BC_DTYPE_Q6_K, n, c, oc);
        intdot_checks(BC_DTYPE_Q5_KI, BC_DTYPE_Q5_K, n, c, oc);
        intdot_checks(BC_DTYPE_IQ4_XSI, BC_DTYPE_IQ4_XS, n, c, oc);
        intdot_checks(BC_DTYPE_Q2_KI, BC_DTYPE_Q2_K, n, c, oc);
        intdot_checks(BC_DTYPE_Q3_KI, BC_DTYPE_Q3_K, n, c, oc);
    }
    intdot_checks(BC_DTYPE_BF16I, BC_DTYPE_BF16, n, c, oc);
}

/* bfloat16i's bytes lie where bc_engine.h says: pair j of panel p at byte
 * 64 (npair (p - p % 4) + j n + p % 4), n the panels of p's run of 4; row l,
 * column 2j + t at 4 l + 2 t within it; zero past the rows and the columns.
 * The weights are small integers, so their bfloat16 is their float's high half. */
static void bf16i_layout_checks(size_t rows, size_t cols)
{
    float *w = h_alloc(rows * cols);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            w[r * cols + c] = (float)((r * 7 + c * 3) % 255) - 127.0f;
    const size_t nb = packed(BC_DTYPE_BF16I, rows, cols), panels = (rows + 15) / 16;
    const size_t npair = (cols + 1) / 2;
    unsigned char *p8 = h_alloc_bytes(nb);
    EXPECT_STATUS(BC_OK, bc_pack(p8, nb, w, BC_DTYPE_BF16I, rows, cols));
    EXPECT(nb == panels * npair * 64);
    size_t bad = 0;
    for (size_t r = 0; r < panels * 16; r++)
        for (size_t c = 0; c < 2 * npair; c++) {
            const size_t p = r / 16, l = r % 16, j = c / 2, t = c % 2, p0 = p - p % 4;
            const size_t n = panels - p0 < 4 ? panels - p0 : 4;
            uint16_t got;
            memcpy(&got, p8 + 64 * (npair * p0 + j * n + p % 4) + 4 * l + 2 * t, 2);
            uint32_t bits = 0;
            if (r < rows && c < cols)
                memcpy(&bits, &w[r * cols + c], 4);
            bad += got != (uint16_t)(bits >> 16);
        }
    EXPECT(bad == 0);
}

/* The IEEE half of an integer |v| < 2048 (exact), computed apart from the library. */
static uint16_t half_of_int(int v)
{
    const unsigned a = (unsigned)(v < 0 ? -v : v), sign = v < 0 ? 0x8000u : 0u;
    if (a == 0)
        return (uint16_t)sign;
    unsigned e = 0;
    while ((a >> (e + 1)) != 0)
        e++;
    return (uint16_t)(sign | (e + 15) << 10 | ((a << (10 - e)) & 0x3ffu));
}

/* bfloat16's and float16's weights lie where bc_engine.h says: weight (row
 * 16p + l, column k) at byte 32 (cols (p - p % 4) + k n + p % 4) + 2 l, n the
 * panels of p's run of 4 (the last run: those left); zero past the rows. */
static void half_layout_checks(int dt, size_t rows, size_t cols)
{
    float *w = h_alloc(rows * cols);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            w[r * cols + c] = (float)((r * 7 + c * 3) % 255) - 127.0f;
    const size_t nb = packed(dt, rows, cols), panels = (rows + 15) / 16;
    unsigned char *p8 = h_alloc_bytes(nb);
    EXPECT_STATUS(BC_OK, bc_pack(p8, nb, w, dt, rows, cols));
    EXPECT(nb == panels * cols * 32);
    size_t bad = 0;
    for (size_t r = 0; r < panels * 16; r++)
        for (size_t k = 0; k < cols; k++) {
            const size_t p = r / 16, l = r % 16, p0 = p - p % 4;
            const size_t n = panels - p0 < 4 ? panels - p0 : 4;
            uint16_t got, want = 0;
            memcpy(&got, p8 + 32 * (cols * p0 + k * n + p % 4) + 2 * l, 2);
            if (r < rows) {
                const int v = (int)((r * 7 + k * 3) % 255) - 127;
                uint32_t bits;
                const float f = (float)v;
                memcpy(&bits, &f, 4);
                want = dt == BC_DTYPE_BF16 ? (uint16_t)(bits >> 16) : half_of_int(v);
            }
            bad += got != want;
        }
    EXPECT(bad == 0);
}

/* the integer formats' blocks (q8_0i's, ..., iq4_xsi's) lie where bc_engine.h says: block b of panel p at
 * byte B (nb (p - p % 4) + b n + p % 4), B a block's bytes (its 16 rows'), nb
 * the blocks of a row, n the panels of p's run of 4; each block as the panel
 * packed alone holds it (whose bytes the round trips check). */
static void intdot_layout_checks(int dt, size_t rows, size_t cols)
{
    float *w = h_alloc(rows * cols);
    h_fill(w, rows * cols, (uint32_t)(rows + 3 * cols), 1.0f);
    const size_t blk = dt == BC_DTYPE_Q4_KI || dt == BC_DTYPE_Q6_KI || dt == BC_DTYPE_Q5_KI
                       || dt == BC_DTYPE_IQ4_XSI || dt == BC_DTYPE_Q2_KI || dt == BC_DTYPE_Q3_KI
                       ? 256 : 32;
    const size_t bytes = packed(dt, rows, cols), panels = (rows + 15) / 16, nb = (cols + blk - 1) / blk;
    const size_t bb = dt == BC_DTYPE_Q8_0I ? 544 : dt == BC_DTYPE_Q5_0I ? 352
                    : dt == BC_DTYPE_Q4_KI ? 2368 : dt == BC_DTYPE_Q6_KI ? 3360
                    : dt == BC_DTYPE_Q5_KI ? 2880 : dt == BC_DTYPE_IQ4_XSI ? 2208
                    : dt == BC_DTYPE_Q4_1I ? 320 : dt == BC_DTYPE_Q5_1I ? 384
                    : dt == BC_DTYPE_Q2_KI ? 1344 : dt == BC_DTYPE_Q3_KI ? 1824
                    : 288;  /* (bc_engine.h; q4_0i's and iq4_nli's 288) */
    unsigned char *m = h_alloc_bytes(bytes), *one = h_alloc_bytes(nb * bb);
    EXPECT_STATUS(BC_OK, bc_pack(m, bytes, w, dt, rows, cols));
    EXPECT(bytes == panels * nb * bb);
    size_t bad = 0;
    for (size_t p = 0; p < panels; p++) {
        const size_t nl = rows - 16 * p < 16 ? rows - 16 * p : 16;
        const size_t p0 = p - p % 4, n = panels - p0 < 4 ? panels - p0 : 4;
        EXPECT_STATUS(BC_OK, bc_pack(one, nb * bb, w + 16 * p * cols, dt, nl, cols));
        for (size_t b = 0; b < nb; b++)
            bad += memcmp(m + bb * (nb * p0 + b * n + p % 4), one + b * bb, bb) != 0;
    }
    EXPECT(bad == 0);
}

/* A transposed matrix (Conv1D's (in, out)) packs, through the strides, to the
 * bytes its contiguous transpose packs to. */
static void strided_checks(size_t rows, size_t cols)
{
    float *w = h_alloc(rows * cols), *wt = h_alloc(rows * cols);
    h_fill(w, rows * cols, (uint32_t)(rows + 7 * cols), 1.5f);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            wt[c * rows + r] = w[r * cols + c];
    for (int k = 0; k < ND; k++) {
        const int dt = DTYPES[k];
        if (!fits(dt, cols))
            continue;
        const size_t nb = packed(dt, rows, cols);
        unsigned char *a = h_alloc_bytes(nb), *b = h_alloc_bytes(nb);
        EXPECT_STATUS(BC_OK, bc_pack(a, nb, w, dt, rows, cols));
        EXPECT_STATUS(BC_OK, bc_pack_strided(b, nb, wt, 1, rows, dt, rows, cols));
        EXPECT(memcmp(a, b, nb) == 0);
        EXPECT_STATUS(BC_OK, bc_pack_strided(b, nb, w, cols, 1, dt, rows, cols));
        EXPECT(memcmp(a, b, nb) == 0);
    }
}

static void strided_hostile_checks(void)
{
    float *w = h_alloc(64);
    const size_t nb = packed(BC_DTYPE_F32, 4, 4);
    unsigned char *o = h_alloc_bytes(nb);
    EXPECT_STATUS(BC_ENULL, bc_pack_strided(NULL, nb, w, 4, 1, BC_DTYPE_F32, 4, 4));
    EXPECT_STATUS(BC_ENULL, bc_pack_strided(o, nb, NULL, 4, 1, BC_DTYPE_F32, 4, 4));
    /* strides whose span overflows */
    EXPECT_STATUS(BC_EOVERFLOW, bc_pack_strided(o, nb, w, H_NEG, 1, BC_DTYPE_F32, 4, 4));
    EXPECT_STATUS(BC_EOVERFLOW, bc_pack_strided(o, nb, w, 1, H_HALF, BC_DTYPE_F32, 4, 4));
    /* the span of w reaching the output */
    unsigned char *big = h_alloc_bytes(nb + 4096);
    EXPECT_STATUS(BC_EALIAS, bc_pack_strided(big, nb, (const float *)(big + nb) - 8, 1, 4,
                                             BC_DTYPE_F32, 4, 4));
    EXPECT(h_untouched(o, nb));
}


/* bc_dtype_traits_of: every format's traits agree with bc_dtype_info and
 * bc_pack_size; the refusals write nothing. */
static void traits_checks(void)
{
    int holders = 0;
    for (int i = 0; i < ND; i++) {
        const int dt = DTYPES[i];
        bc_dtype_traits *t = h_alloc_bytes(sizeof *t);
        size_t blk, nb, *n = h_alloc_bytes(sizeof *n);
        EXPECT_STATUS(BC_OK, bc_dtype_traits_of(t, dt));
        EXPECT_STATUS(BC_OK, bc_dtype_info(NULL, 0, &blk, &nb, dt));
        EXPECT(t->block == blk && t->block_bytes == nb);
        EXPECT(t->whole == whole_k(dt));
        EXPECT((t->max_cols != 0) == (bc_pack_size(n, dt, 1, BC_Q8_0I_MAX_COLS + 256 * blk)
                                      == BC_ESIZE));
        EXPECT(t->integer == (dt == BC_DTYPE_Q8_0I || dt == BC_DTYPE_Q4_0I || dt == BC_DTYPE_Q5_0I
                              || dt == BC_DTYPE_Q4_KI || dt == BC_DTYPE_Q6_KI
                              || dt == BC_DTYPE_Q5_KI || dt == BC_DTYPE_IQ4_NLI
                              || dt == BC_DTYPE_IQ4_XSI || dt == BC_DTYPE_Q4_1I
                              || dt == BC_DTYPE_Q5_1I || dt == BC_DTYPE_Q2_KI
                              || dt == BC_DTYPE_Q3_KI));
        /* a limit exactly where packing refuses weights: every format but the float ones */
        EXPECT((t->limit != NULL) == (dt != BC_DTYPE_F32 && dt != BC_DTYPE_BF16
                                      && dt != BC_DTYPE_BF16I));
        if (t->ggml_type != BC_GGML_NONE) {
            holders++;
            EXPECT_STATUS(BC_OK, bc_ggml_size(n, t->ggml_type, 1, t->block));
        }
        EXPECT(h_guard_ok(t, sizeof *t));
    }
    EXPECT(holders == ND - 1);  /* all but bfloat16i */
    bc_dtype_traits *t = h_alloc_bytes(sizeof *t);
    const int bad[] = {-1, BC_NDTYPE, 99};
    for (int i = 0; i < 3; i++)
        EXPECT_STATUS(BC_EOPTION, bc_dtype_traits_of(t, bad[i]));
    EXPECT_STATUS(BC_ENULL, bc_dtype_traits_of(NULL, BC_DTYPE_F32));
    EXPECT(h_untouched(t, sizeof *t));
    /* ggml's block sizes (GGUF's own numbering) */
    static const size_t types[][3] = {{BC_GGML_F32, 1, 4}, {BC_GGML_F16, 1, 2},
                                      {BC_GGML_Q4_0, 32, 18}, {BC_GGML_Q5_0, 32, 22},
                                      {BC_GGML_Q8_0, 32, 34}, {BC_GGML_Q4_K, 256, 144},
                                      {BC_GGML_Q6_K, 256, 210}, {BC_GGML_BF16, 1, 2},
                                      {BC_GGML_Q4_1, 32, 20}, {BC_GGML_Q5_1, 32, 24},
                                      {BC_GGML_Q5_K, 256, 176}, {BC_GGML_IQ4_NL, 32, 18},
                                      {BC_GGML_IQ4_XS, 256, 136}, {BC_GGML_Q2_K, 256, 84},
                                      {BC_GGML_Q3_K, 256, 110}};
    size_t *n = h_alloc_bytes(sizeof *n);
    for (int i = 0; i < 15; i++) {
        EXPECT_STATUS(BC_OK, bc_ggml_size(n, (int)types[i][0], 3, 2 * types[i][1]));
        EXPECT(*n == 3 * 2 * types[i][2]);
    }
    size_t *m = h_alloc_bytes(sizeof *m);
    EXPECT_STATUS(BC_ENULL, bc_ggml_size(NULL, BC_GGML_Q8_0, 1, 32));
    EXPECT_STATUS(BC_EOPTION, bc_ggml_size(m, 16, 1, 256));  /* IQ2_XXS: not moved */
    EXPECT_STATUS(BC_EOPTION, bc_ggml_size(m, BC_GGML_NONE, 1, 32));
    EXPECT_STATUS(BC_ESIZE, bc_ggml_size(m, BC_GGML_Q8_0, 0, 32));
    EXPECT_STATUS(BC_ESIZE, bc_ggml_size(m, BC_GGML_Q8_0, 1, 33));
    EXPECT_STATUS(BC_ESIZE, bc_ggml_size(m, BC_GGML_Q4_K, 1, 300));
    EXPECT_STATUS(BC_EOVERFLOW, bc_ggml_size(m, BC_GGML_F32, H_NEG, 1));
    EXPECT_STATUS(BC_EOVERFLOW, bc_ggml_size(m, BC_GGML_F32, (size_t)1 << 30, (size_t)1 << 30));
    EXPECT(h_untouched(m, sizeof *m));
}

/* bc_unpack_ggml then bc_pack_ggml: a matrix bc_pack made, out as its ggml
 * rows and in again, is the very bytes; and the rows of a format's ggml type,
 * moved into another format of that type (q8_0 -> q8_0i, q4_k -> q4_ki), are
 * that format's bc_pack of the same weights. */
static void ggml_roundtrip_checks(size_t rows, size_t cols)
{
    float *w = h_alloc(rows * cols);
    h_fill(w, rows * cols, (uint32_t)(rows * 131 + cols), 2.0f);
    for (int i = 0; i < ND; i++) {
        const int dt = DTYPES[i];
        bc_dtype_traits t;
        size_t np, nf;
        EXPECT_STATUS(BC_OK, bc_dtype_traits_of(&t, dt));
        if (t.ggml_type == BC_GGML_NONE || cols % t.block || !fits(dt, cols))
            continue;
        np = packed(dt, rows, cols);
        EXPECT_STATUS(BC_OK, bc_ggml_size(&nf, t.ggml_type, rows, cols));
        unsigned char *p = h_alloc_bytes(np), *g = h_alloc_bytes(nf), *p2 = h_alloc_bytes(np);
        EXPECT_STATUS(BC_OK, bc_pack(p, np, w, dt, rows, cols));
        EXPECT_STATUS(BC_OK, bc_unpack_ggml(g, nf, p, np, dt, rows, cols));
        EXPECT(h_guard_ok(g, nf));
        EXPECT_STATUS(BC_OK, bc_pack_ggml(p2, np, g, nf, dt, rows, cols));
        EXPECT(memcmp(p, p2, np) == 0);
        EXPECT(h_guard_ok(p2, np));
        for (int k = 0; k < ND; k++) {  /* the other formats of the same ggml type */
            bc_dtype_traits u;
            EXPECT_STATUS(BC_OK, bc_dtype_traits_of(&u, DTYPES[k]));
            if (DTYPES[k] == dt || u.ggml_type != t.ggml_type || !fits(DTYPES[k], cols))
                continue;
            const size_t nq = packed(DTYPES[k], rows, cols);
            unsigned char *q = h_alloc_bytes(nq), *q2 = h_alloc_bytes(nq);
            EXPECT_STATUS(BC_OK, bc_pack(q, nq, w, DTYPES[k], rows, cols));
            EXPECT_STATUS(BC_OK, bc_pack_ggml(q2, nq, g, nf, DTYPES[k], rows, cols));
            EXPECT(memcmp(q, q2, nq) == 0);
        }
    }
}

/* Q4_0's and Q5_0's rows as Q8_0's: the same weights (bc_unpack of a q8_0
 * matrix holding the converted blocks is the q4_0 (q5_0) matrix's). */
static void ggml_convert_checks(size_t rows, size_t cols)
{
    const int from[] = {BC_DTYPE_Q4_0, BC_DTYPE_Q5_0};
    const size_t nw = rows * cols, nq = packed(BC_DTYPE_Q8_0, rows, cols);
    float *w = h_alloc(nw), *want = h_alloc(nw), *got = h_alloc(nw);
    h_fill(w, nw, 7u, 3.0f);
    for (int i = 0; i < 2; i++) {
        bc_dtype_traits t;
        size_t np = packed(from[i], rows, cols), nf, n8;
        EXPECT_STATUS(BC_OK, bc_dtype_traits_of(&t, from[i]));
        EXPECT_STATUS(BC_OK, bc_ggml_size(&nf, t.ggml_type, rows, cols));
        EXPECT_STATUS(BC_OK, bc_ggml_size(&n8, BC_GGML_Q8_0, rows, cols));
        unsigned char *p = h_alloc_bytes(np), *g = h_alloc_bytes(nf), *g8 = h_alloc_bytes(n8);
        unsigned char *q = h_alloc_bytes(nq);
        EXPECT_STATUS(BC_OK, bc_pack(p, np, w, from[i], rows, cols));
        EXPECT_STATUS(BC_OK, bc_unpack(want, p, np, from[i], rows, cols));
        EXPECT_STATUS(BC_OK, bc_unpack_ggml(g, nf, p, np, from[i], rows, cols));
        EXPECT_STATUS(BC_OK, bc_ggml_convert(g8, n8, g, nf, BC_GGML_Q8_0, t.ggml_type,
                                             rows * cols / 32));
        EXPECT(h_guard_ok(g8, n8));
        EXPECT_STATUS(BC_OK, bc_pack_ggml(q, nq, g8, n8, BC_DTYPE_Q8_0, rows, cols));
        EXPECT_STATUS(BC_OK, bc_unpack(got, q, nq, BC_DTYPE_Q8_0, rows, cols));
        EXPECT(memcmp(want, got, nw * sizeof(float)) == 0);
    }
}

/* The refusals of bc_pack_ggml, bc_unpack_ggml and bc_ggml_convert: each
 * status, nothing written. */
static void ggml_hostile_checks(void)
{
    const size_t rows = 17, cols = 64, np = packed(BC_DTYPE_Q8_0, rows, cols), nf = rows * 2 * 34;
    unsigned char *p = h_alloc_bytes(np), *g = h_alloc_bytes(nf);
    memset(g, 0, nf);
    memset(p, 0, np);
    unsigned char *o = h_alloc_bytes(np + nf);
    EXPECT_STATUS(BC_ENULL, bc_pack_ggml(NULL, np, g, nf, BC_DTYPE_Q8_0, rows, cols));
    EXPECT_STATUS(BC_ENULL, bc_pack_ggml(o, np, NULL, nf, BC_DTYPE_Q8_0, rows, cols));
    EXPECT_STATUS(BC_EOPTION, bc_pack_ggml(o, np, g, nf, BC_DTYPE_BF16I, rows, cols));
    EXPECT_STATUS(BC_EOPTION, bc_pack_ggml(o, np, g, nf, -1, rows, cols));
    EXPECT_STATUS(BC_EOPTION, bc_pack_ggml(o, np, g, nf, BC_NDTYPE, rows, cols));
    EXPECT_STATUS(BC_ESIZE, bc_pack_ggml(o, np, g, nf, BC_DTYPE_Q8_0, 0, cols));
    EXPECT_STATUS(BC_ESIZE, bc_pack_ggml(o, np, g, nf, BC_DTYPE_Q8_0, rows, 0));
    EXPECT_STATUS(BC_ESIZE, bc_pack_ggml(o, np, g, nf, BC_DTYPE_Q8_0, rows, 33));  /* short block */
    EXPECT_STATUS(BC_ESIZE, bc_pack_ggml(o, np, g, nf, BC_DTYPE_Q4_K, rows, cols));
    EXPECT_STATUS(BC_EOVERFLOW, bc_pack_ggml(o, np, g, nf, BC_DTYPE_Q8_0, H_NEG, cols));
    EXPECT_STATUS(BC_EWORKSPACE, bc_pack_ggml(o, np - 1, g, nf, BC_DTYPE_Q8_0, rows, cols));
    EXPECT_STATUS(BC_EWORKSPACE, bc_pack_ggml(o, np, g, nf - 1, BC_DTYPE_Q8_0, rows, cols));
    EXPECT_STATUS(BC_EALIAS, bc_pack_ggml(o, np, o + np - 1, nf, BC_DTYPE_Q8_0, rows, cols));
    EXPECT_STATUS(BC_ENULL, bc_unpack_ggml(NULL, nf, p, np, BC_DTYPE_Q8_0, rows, cols));
    EXPECT_STATUS(BC_ENULL, bc_unpack_ggml(o, nf, NULL, np, BC_DTYPE_Q8_0, rows, cols));
    EXPECT_STATUS(BC_EOPTION, bc_unpack_ggml(o, nf, p, np, BC_DTYPE_BF16I, rows, cols));
    EXPECT_STATUS(BC_ESIZE, bc_unpack_ggml(o, nf, p, np, BC_DTYPE_Q8_0, rows, 40));
    EXPECT_STATUS(BC_EWORKSPACE, bc_unpack_ggml(o, nf - 1, p, np, BC_DTYPE_Q8_0, rows, cols));
    EXPECT_STATUS(BC_EWORKSPACE, bc_unpack_ggml(o, nf, p, np - 1, BC_DTYPE_Q8_0, rows, cols));
    EXPECT_STATUS(BC_EALIAS, bc_unpack_ggml(o + 1, nf, o, np, BC_DTYPE_Q8_0, rows, cols));
    EXPECT(h_untouched(o, np + nf));
    const size_t b4 = 4 * 18, b8 = 4 * 34;
    EXPECT_STATUS(BC_ENULL, bc_ggml_convert(NULL, b8, g, b4, BC_GGML_Q8_0, BC_GGML_Q4_0, 4));
    EXPECT_STATUS(BC_ENULL, bc_ggml_convert(o, b8, NULL, b4, BC_GGML_Q8_0, BC_GGML_Q4_0, 4));
    EXPECT_STATUS(BC_EOPTION, bc_ggml_convert(o, b8, g, b4, BC_GGML_Q4_0, BC_GGML_Q8_0, 4));
    EXPECT_STATUS(BC_EOPTION, bc_ggml_convert(o, b8, g, b4, BC_GGML_Q8_0, BC_GGML_Q8_0, 4));
    EXPECT_STATUS(BC_EOPTION, bc_ggml_convert(o, b8, g, b4, BC_GGML_Q8_0, BC_GGML_Q4_K, 4));
    EXPECT_STATUS(BC_EOPTION, bc_ggml_convert(o, b8, g, b4, BC_GGML_Q8_0, 3, 4));
    EXPECT_STATUS(BC_ESIZE, bc_ggml_convert(o, b8, g, b4, BC_GGML_Q8_0, BC_GGML_Q4_0, 0));
    EXPECT_STATUS(BC_EOVERFLOW, bc_ggml_convert(o, b8, g, b4, BC_GGML_Q8_0, BC_GGML_Q4_0, H_NEG));
    EXPECT_STATUS(BC_EWORKSPACE, bc_ggml_convert(o, b8 - 1, g, b4, BC_GGML_Q8_0, BC_GGML_Q4_0, 4));
    EXPECT_STATUS(BC_EWORKSPACE, bc_ggml_convert(o, b8, g, b4 - 1, BC_GGML_Q8_0, BC_GGML_Q4_0, 4));
    EXPECT_STATUS(BC_EALIAS, bc_ggml_convert(o, b8, o + 8, b4, BC_GGML_Q8_0, BC_GGML_Q4_0, 4));
    EXPECT(h_untouched(o, np + nf));
}

/* bc_ggml_from_f32: NumPy's float16 bits and bfloat16's for values whose answer is known
 * (NaN payloads, overflow, ties, subnormals), then pseudo-random bit patterns (NaNs and
 * infinities among them) in a length leaving vector tails and spanning two pool units:
 * the same bytes on every instruction set and thread count; and the refusals. */
static void round16_checks(void)
{
    static const uint32_t in[] = {0x7f800001u, 0x7fc00000u, 0xff800001u, 0x7fffffffu,
                                  0x7f800000u, 0x477ff000u, 0x477fefffu, 0x33000000u,
                                  0x33000001u, 0x387fffffu, 0x00000001u, 0x80000001u,
                                  0x3f800000u, 0x3f801000u, 0x3f803000u, 0xc0200000u};
    static const uint16_t f16[] = {0x7c01, 0x7e00, 0xfc01, 0x7fff, 0x7c00, 0x7c00, 0x7bff,
                                   0x0000, 0x0001, 0x0400, 0x0000, 0x8000, 0x3c00, 0x3c00,
                                   0x3c02, 0xc100};
    static const uint16_t bf16[] = {0x7fc0, 0x7fc0, 0xffc0, 0x7fff, 0x7f80, 0x4780, 0x4780,
                                    0x3300, 0x3300, 0x3880, 0x0000, 0x8000, 0x3f80, 0x3f80,
                                    0x3f80, 0xc020};
    const size_t nk = sizeof in / sizeof in[0], n = 2 * 65536 + 37;
    float *x = h_alloc(n);
    unsigned char *o = h_alloc_bytes(2 * n), *ref = h_alloc_bytes(2 * n);
    memcpy(x, in, sizeof in);
    int best = 0, start = 0;
    EXPECT_STATUS(BC_OK, bc_best_isa(&best));
    EXPECT_STATUS(BC_OK, bc_get_isa(&start));
    for (int isa = BC_ISA_GENERIC; isa <= best; isa++) {
        EXPECT_STATUS(BC_OK, bc_set_isa(isa));
        EXPECT_STATUS(BC_OK, bc_ggml_from_f32(o, 2 * nk, x, nk, BC_GGML_F16));
        for (size_t i = 0; i < nk; i++)
            EXPECT((o[2 * i] | o[2 * i + 1] << 8) == f16[i]);
        EXPECT_STATUS(BC_OK, bc_ggml_from_f32(o, 2 * nk, x, nk, BC_GGML_BF16));
        for (size_t i = 0; i < nk; i++)
            EXPECT((o[2 * i] | o[2 * i + 1] << 8) == bf16[i]);
    }
    uint32_t r = 12345u;
    for (size_t i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u;
        const uint32_t u = (i % 3) ? r : (r & 0x807fffffu) | ((100u + (r >> 24) % 50u) << 23);
        memcpy(x + i, &u, 4);
    }
    for (int ty = 0; ty < 2; ty++) {
        const int t16 = ty ? BC_GGML_BF16 : BC_GGML_F16;
        EXPECT_STATUS(BC_OK, bc_set_isa(BC_ISA_GENERIC));
        EXPECT_STATUS(BC_OK, bc_set_num_threads(1));
        EXPECT_STATUS(BC_OK, bc_ggml_from_f32(ref, 2 * n, x, n, t16));
        EXPECT(h_guard_ok(ref, 2 * n));
        for (int isa = BC_ISA_GENERIC; isa <= best; isa++)
            for (int t = 1; t <= 2; t++) {
                EXPECT_STATUS(BC_OK, bc_set_isa(isa));
                EXPECT_STATUS(BC_OK, bc_set_num_threads(t));
                h_refill(o, 2 * n);
                EXPECT_STATUS(BC_OK, bc_ggml_from_f32(o, 2 * n, x, n, t16));
                EXPECT(memcmp(o, ref, 2 * n) == 0);
                EXPECT(h_guard_ok(o, 2 * n));
            }
    }
    EXPECT_STATUS(BC_OK, bc_set_num_threads(0));
    EXPECT_STATUS(BC_OK, bc_set_isa(start));
    h_refill(o, 2 * n);
    EXPECT_STATUS(BC_ENULL, bc_ggml_from_f32(NULL, 2 * n, x, n, BC_GGML_F16));
    EXPECT_STATUS(BC_ENULL, bc_ggml_from_f32(o, 2 * n, NULL, n, BC_GGML_F16));
    EXPECT_STATUS(BC_EOPTION, bc_ggml_from_f32(o, 2 * n, x, n, BC_GGML_F32));
    EXPECT_STATUS(BC_EOPTION, bc_ggml_from_f32(o, 2 * n, x, n, BC_GGML_Q8_0));
    EXPECT_STATUS(BC_EOPTION, bc_ggml_from_f32(o, 2 * n, x, n, -1));
    EXPECT_STATUS(BC_ESIZE, bc_ggml_from_f32(o, 2 * n, x, 0, BC_GGML_F16));
    EXPECT_STATUS(BC_EOVERFLOW, bc_ggml_from_f32(o, 2 * n, x, H_NEG, BC_GGML_F16));
    EXPECT_STATUS(BC_EOVERFLOW, bc_ggml_from_f32(o, 2 * n, x, H_HALF, BC_GGML_BF16));
    EXPECT_STATUS(BC_EWORKSPACE, bc_ggml_from_f32(o, 2 * n - 1, x, n, BC_GGML_F16));
    EXPECT_STATUS(BC_EALIAS, bc_ggml_from_f32((unsigned char *)x + 2, 2 * n, x, n, BC_GGML_F16));
    EXPECT(h_untouched(o, 2 * n));
}

void test_pack(void)
{
    traits_checks();
    const size_t gs[][2] = {{1, 32}, {17, 64}, {16, 256}, {40, 288}, {65, 512}, {3, 1024},
                            {90, 256}};
    for (int i = 0; i < 7; i++)
        ggml_roundtrip_checks(gs[i][0], gs[i][1]);
    ggml_convert_checks(17, 96);
    ggml_convert_checks(70, 256);
    ggml_convert_checks(41, 3200);  /* 4,100 blocks: two of bc_ggml_convert's pool units */
    ggml_hostile_checks();
    round16_checks();
    strided_checks(1, 1);
    strided_checks(17, 33);
    strided_checks(40, 100);
    strided_checks(17, 256);
    strided_hostile_checks();
    size_checks();
    dtype_info_checks();
    const size_t shapes[][2] = {{1, 1}, {3, 5}, {16, 32}, {17, 33}, {40, 100}, {5, 64},
                                {17, 256}, {3, 768}};
    for (int i = 0; i < 8; i++)
        roundtrip_checks(shapes[i][0], shapes[i][1]);
    pack_hostile_checks();
    /* rows across the decoding limit, columns across panels, K across blocks */
    const size_t lin[][3] = {{1, 5, 3}, {2, 33, 17}, {3, 64, 16}, {4, 100, 65}, {7, 300, 40},
                             {1, 520, 33}, {20, 257, 130}, {3, 256, 40}, {1, 512, 33},
                             {20, 768, 130}};
    for (int i = 0; i < 10; i++)
        linear_checks(lin[i][0], lin[i][1], lin[i][2]);
    linear_hostile_checks();
    q8i_checks(1, 40, 20);
    q8i_checks(3, 100, 33);
    q8i_checks(2, 41, 17);
    q8i_checks(37, 700, 90);
    /* runs of 4 panels (bfloat16i's, q8_0i's, q4_0i's, bfloat16's, float16's):
     * whole runs, two at a time for one row on AVX-512, a short last run, a run
     * a tile (bfloat16's and float16's: linear_checks' shapes of 65-130
     * outputs, against their unpacked weights) */
    q8i_checks(1, 300, 200);
    q8i_checks(1, 64, 256);
    q8i_checks(2, 300, 100);
    q8i_checks(3, 301, 130);
    q8i_checks(1, 256, 20);  /* (q4_ki's and q6_ki's whole super-blocks too) */
    q8i_checks(3, 512, 33);
    q8i_checks(37, 768, 90);
    q8i_checks(1, 512, 200);
    q8i_checks(2, 256, 100);
    const size_t lay[][2] = {{1, 1}, {17, 3}, {64, 8}, {90, 33}, {200, 300}};
    for (int i = 0; i < 5; i++) {
        bf16i_layout_checks(lay[i][0], lay[i][1]);
        half_layout_checks(BC_DTYPE_BF16, lay[i][0], lay[i][1]);
        half_layout_checks(BC_DTYPE_F16, lay[i][0], lay[i][1]);
        intdot_layout_checks(BC_DTYPE_Q8_0I, lay[i][0], lay[i][1]);
        intdot_layout_checks(BC_DTYPE_Q4_0I, lay[i][0], lay[i][1]);
        intdot_layout_checks(BC_DTYPE_Q5_0I, lay[i][0], lay[i][1]);
        intdot_layout_checks(BC_DTYPE_Q4_KI, lay[i][0], 256 * (i % 3 + 1));
        intdot_layout_checks(BC_DTYPE_Q6_KI, lay[i][0], 256 * (i % 3 + 1));
        intdot_layout_checks(BC_DTYPE_Q5_KI, lay[i][0], 256 * (i % 3 + 1));
        intdot_layout_checks(BC_DTYPE_IQ4_NLI, lay[i][0], lay[i][1]);
        intdot_layout_checks(BC_DTYPE_IQ4_XSI, lay[i][0], 256 * (i % 3 + 1));
        intdot_layout_checks(BC_DTYPE_Q4_1I, lay[i][0], lay[i][1]);
        intdot_layout_checks(BC_DTYPE_Q5_1I, lay[i][0], lay[i][1]);
        intdot_layout_checks(BC_DTYPE_Q2_KI, lay[i][0], 256 * (i % 3 + 1));
        intdot_layout_checks(BC_DTYPE_Q3_KI, lay[i][0], 256 * (i % 3 + 1));
    }
}
