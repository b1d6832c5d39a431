/* formats.c: the weight formats' table (bc_format.h): for each, its sizes, the
 * check of the weights it can hold, packing (quantising) a panel from float32
 * and unpacking (dequantising) a row. Load-time work, in plain C; the
 * kernels that compute on each format are in fast_formats.h.
 *
 * q4_0, q5_0, q4_k and q6_k are llama.cpp's reference quantisers (below).
 * bfloat16 and float16 round to nearest even (float16 refuses what a half
 * cannot hold: no infinities made). q8_0 is llama.cpp's rule, block by block
 * of 32 weights of one row: d = max|w| / 127, q = round(w / d) (half away from
 * zero) computed as round(w * (1/d)), d stored as an IEEE half; the weight is
 * then half(d) * q. q8_0i holds the same d and q, laid out for integer dot
 * products; q4_0i q4_0's, q5_0i q5_0's, q4_ki q4_k's, q6_ki q6_k's, q5_ki q5_k's,
 * iq4_nli iq4_nl's, iq4_xsi iq4_xs's, q4_1i q4_1's, q5_1i q5_1's, q2_ki q2_k's and
 * q3_ki q3_k's likewise.
 * q4_1, q5_1 and q5_k are llama.cpp's reference quantisers too; iq4_nl, iq4_xs,
 * q2_k and q3_k blockc's simple rules (bc_engine.h), not llama.cpp's search. */
#include <math.h>
#include <stddef.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>  /* rows16_transpose: SSE2 is every x86-64's */
#endif

#include "bc_core.h"
#include "bc_dispatch.h"  /* BC_ATT_BK: a quantised cache's key tiles */
#include "bc_format.h"
#include "bc_half.h"
#include "bc_kquant.h"

#define PW BC_PANEL

/* a panel's blocks are the rows' ggml blocks, interleaved: no padding */
_Static_assert(sizeof(bc_q4_block) == 18 * PW, "bc_q4_block: 16 rows of 18 bytes");
_Static_assert(sizeof(bc_q5_block) == 22 * PW, "bc_q5_block: 16 rows of 22 bytes");

/* ---- float32: panel [k][l] = w[l][k] ------------------------------------ */

static void f32_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                     size_t nk, size_t cols)
{
    float *f = (float *)panel + k0 * PW;
    for (size_t l = 0; l < nl; l++)
        for (size_t k = 0; k < nk; k++)
            f[k * PW + l] = tile[l * ld + k];
}

static void f32_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const float *f = (const float *)panel;
    for (size_t k = 0; k < cols; k++)
        out[k] = f[k * PW + l];
}

/* ---- bfloat16: the same, each weight the high half of its float32 ------- */

static void bf16_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                      size_t nk, size_t cols)
{
    uint16_t *h = (uint16_t *)panel + k0 * PW;
    for (size_t l = 0; l < nl; l++)
        for (size_t k = 0; k < nk; k++)
            h[k * PW + l] = bc_f32_to_bf16(tile[l * ld + k]);
}

static void bf16_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const uint16_t *h = (const uint16_t *)panel;
    for (size_t k = 0; k < cols; k++)
        out[k] = bc_bf16_to_f32(h[k * PW + l]);
}

/* ---- float16: the same, each weight an IEEE half ------------------------ */

/* The largest half: a float32 weight beyond it is refused, not made infinite
 * (nor rounded down to it when it is less than half a step beyond). */
#define F16_MAX_ABS 65504.0f

static int f16_check(const float *w, size_t rs, size_t cs, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            if (!(fabsf(w[r * rs + c * cs]) <= F16_MAX_ABS))  /* NaN fails too */
                return BC_EVALUE;
    return BC_OK;
}

static void f16_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                     size_t nk, size_t cols)
{
    uint16_t *h = (uint16_t *)panel + k0 * PW;
    for (size_t l = 0; l < nl; l++)
        for (size_t k = 0; k < nk; k++)
            h[k * PW + l] = bc_f32_to_half(tile[l * ld + k]);
}

static void f16_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const uint16_t *h = (const uint16_t *)panel;
    for (size_t k = 0; k < cols; k++)
        out[k] = bc_half_to_f32(h[k * PW + l]);
}

/* ---- q8_0: per 32 columns a bc_q8_block of the panel's rows -------------- */

/* A finite weight's q8_0 scale fits a half: |w| <= 65504 * 127. */
#define Q8_MAX_ABS 8319008.0f

static int q8_check(const float *w, size_t rs, size_t cs, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            if (!(fabsf(w[r * rs + c * cs]) <= Q8_MAX_ABS))  /* NaN fails too */
                return BC_EVALUE;
    return BC_OK;
}

/* q8_0 of one block of n <= 32 weights (the rest zero): scale half into *d, q[k * stride]. */
static void q8_block(uint16_t *d, int8_t *q, size_t stride, const float *w, size_t n)
{
    float amax = 0.0f;
    for (size_t k = 0; k < n; k++) {
        const float a = fabsf(w[k]);
        amax = a > amax ? a : amax;
    }
    const float dd = amax / 127.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
    *d = bc_f32_to_half(dd);
    for (size_t k = 0; k < 32; k++)
        q[k * stride] = k < n ? (int8_t)roundf(w[k] * id) : 0;
}

static void q8_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                    size_t nk, size_t cols)
{
    bc_q8_block *bl = (bc_q8_block *)panel + k0 / 32;
    for (size_t b = 0; b < nk; b += 32, bl++) {
        const size_t n = nk - b < 32 ? nk - b : 32;
        for (size_t l = 0; l < nl; l++)
            q8_block(&bl->d[l], &bl->q[0][l], PW, tile + l * ld + b, n);
    }
}

static void q8_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q8_block *bl = (const bc_q8_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q8_block *b = bl + k / 32;
        out[k] = bc_half_to_f32(b->d[l]) * (float)b->q[k % 32][l];
    }
}

/* ---- q4_0: per 32 columns a bc_q4_block of the panel's rows -------------- */

/* A finite weight's q4_0 scale fits a half: |w| <= 65504 * 8. */
#define Q4_MAX_ABS 524032.0f

static int q4_check(const float *w, size_t rs, size_t cs, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            if (!(fabsf(w[r * rs + c * cs]) <= Q4_MAX_ABS))
                return BC_EVALUE;
    return BC_OK;
}

/* q4_0 of one block of n <= 32 weights (the rest zero), llama.cpp's
 * quantize_row_q4_0_ref: d = m / -8 for m the first weight of largest
 * magnitude, nibble = min(15, (int8)(w / d + 8.5)) computed as w * (1/d) + 8.5. */
static void q4_block(uint16_t *d, uint8_t *q, size_t stride, const float *w, size_t n)
{
    float amax = 0.0f, m = 0.0f;
    for (size_t k = 0; k < n; k++)
        if (fabsf(w[k]) > amax) {
            amax = fabsf(w[k]);
            m = w[k];
        }
    const float dd = m / -8.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
    *d = bc_f32_to_half(dd);
    for (size_t j = 0; j < 16; j++) {
        const float x0 = j < n ? w[j] * id : 0.0f, x1 = j + 16 < n ? w[j + 16] * id : 0.0f;
        const int q0 = (int8_t)(x0 + 8.5f), q1 = (int8_t)(x1 + 8.5f);
        q[j * stride] = (uint8_t)((q0 < 15 ? q0 : 15) | ((q1 < 15 ? q1 : 15) << 4));
    }
}

static void q4_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                    size_t nk, size_t cols)
{
    bc_q4_block *bl = (bc_q4_block *)panel + k0 / 32;
    for (size_t b = 0; b < nk; b += 32, bl++) {
        const size_t n = nk - b < 32 ? nk - b : 32;
        for (size_t l = 0; l < nl; l++)
            q4_block(&bl->d[l], &bl->q[0][l], PW, tile + l * ld + b, n);
    }
}

static void q4_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q4_block *bl = (const bc_q4_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q4_block *b = bl + k / 32;
        const size_t j = k % 32;
        const int nib = j < 16 ? b->q[j][l] & 15 : b->q[j - 16][l] >> 4;
        out[k] = bc_half_to_f32(b->d[l]) * (float)(nib - 8);
    }
}

/* ---- q5_0: per 32 columns a bc_q5_block of the panel's rows -------------- */

/* A finite weight's q5_0 scale fits a half: |w| <= 65504 * 16. */
#define Q5_MAX_ABS 1048064.0f

static int q5_check(const float *w, size_t rs, size_t cs, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++)
            if (!(fabsf(w[r * rs + c * cs]) <= Q5_MAX_ABS))
                return BC_EVALUE;
    return BC_OK;
}

/* q5_0 of one block of n <= 32 weights (the rest zero), llama.cpp's
 * quantize_row_q5_0_ref: d = m / -16 for m the first weight of largest
 * magnitude, q = min(31, (int8)(w / d + 16.5)) computed as w * (1/d) + 16.5;
 * the low four bits in the nibbles, the fifth in *qh. */
static void q5_block(uint16_t *d, uint32_t *qh, uint8_t *q, size_t stride, const float *w,
                     size_t n)
{
    float amax = 0.0f, m = 0.0f;
    for (size_t k = 0; k < n; k++)
        if (fabsf(w[k]) > amax) {
            amax = fabsf(w[k]);
            m = w[k];
        }
    const float dd = m / -16.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
    *d = bc_f32_to_half(dd);
    uint32_t h = 0;
    for (size_t j = 0; j < 16; j++) {
        const float x0 = j < n ? w[j] * id : 0.0f, x1 = j + 16 < n ? w[j + 16] * id : 0.0f;
        int q0 = (int8_t)(x0 + 16.5f), q1 = (int8_t)(x1 + 16.5f);
        q0 = q0 < 31 ? q0 : 31;
        q1 = q1 < 31 ? q1 : 31;
        q[j * stride] = (uint8_t)((q0 & 15) | ((q1 & 15) << 4));
        h |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
    }
    *qh = h;
}

static void q5_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                    size_t nk, size_t cols)
{
    bc_q5_block *bl = (bc_q5_block *)panel + k0 / 32;
    for (size_t b = 0; b < nk; b += 32, bl++) {
        const size_t n = nk - b < 32 ? nk - b : 32;
        for (size_t l = 0; l < nl; l++)
            q5_block(&bl->d[l], &bl->qh[l], &bl->q[0][l], PW, tile + l * ld + b, n);
    }
}

static void q5_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q5_block *bl = (const bc_q5_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q5_block *b = bl + k / 32;
        const size_t j = k % 32;
        const int nib = j < 16 ? b->q[j][l] & 15 : b->q[j - 16][l] >> 4;
        const int q = nib | (int)((b->qh[l] >> j) & 1u) << 4;
        out[k] = bc_half_to_f32(b->d[l]) * (float)(q - 16);
    }
}

/* ---- q4_1, q5_1: per 32 columns a scale and a minimum for each row -------- */

_Static_assert(sizeof(bc_q41_block) == 20 * PW, "bc_q41_block: 16 rows of 20 bytes");
_Static_assert(sizeof(bc_q51_block) == 24 * PW, "bc_q51_block: 16 rows of 24 bytes");

/* A finite weight's q4_1 / q5_1 minimum fits a half (and so does its scale,
 * (max - min) / 15): |w| <= 65504, f16_check's bound. */

/* One block of n <= 32 weights, zero-padded to 32 (as the oracle pads a short
 * row): its minimum, scale d = (max - min) / nmax (a half each) and levels q =
 * min(nmax, (int8)((w - min) * (1/d) + 0.5)) (llama.cpp's quantize_row_q4_1_ref,
 * nmax 15, and quantize_row_q5_1_ref, 31). */
static void q1_block(uint16_t *d, uint16_t *m, int q[32], const float *w, size_t n, int nmax)
{
    float v[32], lo, hi;
    for (size_t k = 0; k < 32; k++)
        v[k] = k < n ? w[k] : 0.0f;
    lo = hi = v[0];
    for (size_t k = 1; k < 32; k++) {
        lo = v[k] < lo ? v[k] : lo;
        hi = v[k] > hi ? v[k] : hi;
    }
    const float dd = (hi - lo) / (float)nmax, id = dd != 0.0f ? 1.0f / dd : 0.0f;
    *d = bc_f32_to_half(dd);
    *m = bc_f32_to_half(lo);
    for (size_t k = 0; k < 32; k++) {
        const int l = (int8_t)((v[k] - lo) * id + 0.5f);
        q[k] = l < nmax ? l : nmax;
    }
}

static void q41_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                     size_t nk, size_t cols)
{
    bc_q41_block *bl = (bc_q41_block *)panel + k0 / 32;
    for (size_t b = 0; b < nk; b += 32, bl++) {
        const size_t n = nk - b < 32 ? nk - b : 32;
        for (size_t l = 0; l < nl; l++) {
            int q[32];
            q1_block(&bl->d[l], &bl->m[l], q, tile + l * ld + b, n, 15);
            for (size_t j = 0; j < 16; j++)
                bl->q[j][l] = (uint8_t)(q[j] | q[j + 16] << 4);
        }
    }
}

/* w = d nibble + m: d nibble exact (an 11-bit half times 4 bits), one rounding */
static void q41_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q41_block *bl = (const bc_q41_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q41_block *b = bl + k / 32;
        const size_t j = k % 32;
        const int nib = j < 16 ? b->q[j][l] & 15 : b->q[j - 16][l] >> 4;
        out[k] = bc_half_to_f32(b->d[l]) * (float)nib + bc_half_to_f32(b->m[l]);
    }
}

static void q51_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                     size_t nk, size_t cols)
{
    bc_q51_block *bl = (bc_q51_block *)panel + k0 / 32;
    for (size_t b = 0; b < nk; b += 32, bl++) {
        const size_t n = nk - b < 32 ? nk - b : 32;
        for (size_t l = 0; l < nl; l++) {
            int q[32];
            uint32_t h = 0;
            q1_block(&bl->d[l], &bl->m[l], q, tile + l * ld + b, n, 31);
            for (size_t j = 0; j < 16; j++)
                bl->q[j][l] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
            for (size_t k = 0; k < 32; k++)
                h |= (uint32_t)(q[k] >> 4) << k;
            bl->qh[l] = h;
        }
    }
}

/* w = d q + m, q the nibble with its fifth bit: d q exact (16 bits), one rounding */
static void q51_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q51_block *bl = (const bc_q51_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q51_block *b = bl + k / 32;
        const size_t j = k % 32;
        const int nib = j < 16 ? b->q[j][l] & 15 : b->q[j - 16][l] >> 4;
        const int q = nib | (int)((b->qh[l] >> j) & 1u) << 4;
        out[k] = bc_half_to_f32(b->d[l]) * (float)q + bc_half_to_f32(b->m[l]);
    }
}

/* ---- iq4_nl: per 32 columns a bc_q4_block of the panel's rows (q4_0's) ---- */

/* A finite weight's iq4_nl scale fits a half: |w| <= 65504 * 127 (q8_0's bound). */

/* The index of the value of kvalues_iq4nl nearest v (the lower one on a tie) */
static int iq4_nearest(float v)
{
    int best = 0;
    float e = fabsf(v - (float)bc_kvalues_iq4nl[0]);
    for (int i = 1; i < 16; i++) {
        const float f = fabsf(v - (float)bc_kvalues_iq4nl[i]);
        if (f < e) {
            e = f;
            best = i;
        }
    }
    return best;
}

/* One block of n <= 32 weights (the rest zero): d = m / -127 for m the first
 * weight of largest magnitude, each nibble the nearest value of w * (1/d) */
static void iq4nl_block(uint16_t *d, uint8_t *q, size_t stride, const float *w, size_t n)
{
    float amax = 0.0f, m = 0.0f;
    for (size_t k = 0; k < n; k++)
        if (fabsf(w[k]) > amax) {
            amax = fabsf(w[k]);
            m = w[k];
        }
    const float dd = m / -127.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
    *d = bc_f32_to_half(dd);
    for (size_t j = 0; j < 16; j++) {
        const int q0 = iq4_nearest(j < n ? w[j] * id : 0.0f);
        const int q1 = iq4_nearest(j + 16 < n ? w[j + 16] * id : 0.0f);
        q[j * stride] = (uint8_t)(q0 | q1 << 4);
    }
}

static void iq4nl_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                       size_t nk, size_t cols)
{
    bc_q4_block *bl = (bc_q4_block *)panel + k0 / 32;
    for (size_t b = 0; b < nk; b += 32, bl++) {
        const size_t n = nk - b < 32 ? nk - b : 32;
        for (size_t l = 0; l < nl; l++)
            iq4nl_block(&bl->d[l], &bl->q[0][l], PW, tile + l * ld + b, n);
    }
}

/* w = d kv[nibble]: exact (18 bits) */
static void iq4nl_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q4_block *bl = (const bc_q4_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q4_block *b = bl + k / 32;
        const size_t j = k % 32;
        const int nib = j < 16 ? b->q[j][l] & 15 : b->q[j - 16][l] >> 4;
        out[k] = bc_half_to_f32(b->d[l]) * (float)bc_kvalues_iq4nl[nib];
    }
}

/* ---- iq4_xs: per 256 columns a bc_iq4xs_block of the panel's rows -------- */

_Static_assert(sizeof(bc_iq4xs_block) == 138 * PW, "bc_iq4xs_block: 16 rows of 138 bytes");

/* One row's super-block: each sub-block's scale s_j = m_j / -127 (m_j its first
 * weight of largest magnitude), d = -s / 32 for s the s_j of largest magnitude
 * (a half), ls_j = nearest(s_j / d) clipped to -32..31, then each weight the
 * nearest value of w / (d ls_j) (llama.cpp's steps without its search) */
static void iq4xs_row(bc_iq4xs_block *b, size_t l, const float *x)
{
    float sj[8], smax = 0.0f, sabs = 0.0f;
    for (int j = 0; j < 8; j++) {
        float amax = 0.0f, m = 0.0f;
        for (int i = 0; i < 32; i++)
            if (fabsf(x[32 * j + i]) > amax) {
                amax = fabsf(x[32 * j + i]);
                m = x[32 * j + i];
            }
        sj[j] = m / -127.0f;
        if (fabsf(sj[j]) > sabs) {
            sabs = fabsf(sj[j]);
            smax = sj[j];
        }
    }
    const float dd = -smax / 32.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
    b->d[l] = bc_f32_to_half(dd);
    const float d = bc_half_to_f32(b->d[l]);
    for (int j = 0; j < 8; j++) {
        int ls = (int)rintf(id * sj[j]);
        ls = ls < -32 ? -32 : ls > 31 ? 31 : ls;
        b->sc[j][l] = (int8_t)ls;
        const float dl = d * (float)ls, il = dl != 0.0f ? 1.0f / dl : 0.0f;
        for (int i = 0; i < 16; i++) {
            const int q0 = iq4_nearest(x[32 * j + i] * il), q1 = iq4_nearest(x[32 * j + 16 + i] * il);
            b->q[16 * j + i][l] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

static void iq4xs_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                       size_t nk, size_t cols)
{
    bc_iq4xs_block *bl = (bc_iq4xs_block *)panel + k0 / 256;
    (void)nk;  /* 256: an iq4_xs row is whole super-blocks (bc_packed_bytes) */
    for (size_t l = 0; l < nl; l++)
        iq4xs_row(bl, l, tile + l * ld);
}

/* w = (d sc) kv[nibble]: both products exact (17 and 24 bits) */
static void iq4xs_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_iq4xs_block *bl = (const bc_iq4xs_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_iq4xs_block *b = bl + k / 256;
        const size_t t = k % 256, byte = 16 * (t / 32) + t % 16;
        const int nib = t % 32 < 16 ? b->q[byte][l] & 15 : b->q[byte][l] >> 4;
        const float s = bc_half_to_f32(b->d[l]) * (float)b->sc[t / 32][l];
        out[k] = s * (float)bc_kvalues_iq4nl[nib];
    }
}

/* ---- q2_k: per 256 columns a bc_q2k_block of the panel's rows ---------- */

_Static_assert(sizeof(bc_q2k_block) == 84 * PW, "bc_q2k_block: 16 rows of 84 bytes");

/* 0..hi: the nearest integer of v (ties to even), NaN as 0 */
static int k_clip(float v, int lo, int hi)
{
    if (!(v == v))
        return lo < 0 ? 0 : lo;
    const float r = rintf(v < (float)lo ? (float)lo : v > (float)hi ? (float)hi : v);
    return (int)r;
}

/* One row's super-block: each sub-block of 16 its range over 3 as scale and minus
 * its minimum (at most 0) as min, those to 4 bits against the largest / 15 (d and
 * dmin halves), then each weight the nearest level of (w + dmin m) / (d sc) in
 * 0..3 (0 where d sc is 0): blockc's rule, not llama.cpp's search */
static void q2k_row(bc_q2k_block *b, size_t l, const float *x)
{
    float scales[16], mins[16], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 16; j++) {
        float lo = 0.0f, hi = x[16 * j];
        for (int i = 0; i < 16; i++) {
            lo = x[16 * j + i] < lo ? x[16 * j + i] : lo;
            hi = x[16 * j + i] > hi ? x[16 * j + i] : hi;
        }
        hi = hi > lo ? hi : lo;
        scales[j] = (hi - lo) / 3.0f;
        mins[j] = -lo;
        max_scale = scales[j] > max_scale ? scales[j] : max_scale;
        max_min = mins[j] > max_min ? mins[j] : max_min;
    }
    const float inv_s = max_scale > 0.0f ? 15.0f / max_scale : 0.0f;
    const float inv_m = max_min > 0.0f ? 15.0f / max_min : 0.0f;
    b->d[l] = bc_f32_to_half(max_scale / 15.0f);
    b->dmin[l] = bc_f32_to_half(max_min / 15.0f);
    const float d = bc_half_to_f32(b->d[l]), dmin = bc_half_to_f32(b->dmin[l]);
    for (size_t i = 0; i < 64; i++)
        b->q[i][l] = 0;
    for (int j = 0; j < 16; j++) {
        const int sc = k_clip(inv_s * scales[j], 0, 15), m = k_clip(inv_m * mins[j], 0, 15);
        b->sc[j][l] = (uint8_t)(sc | m << 4);
        const float dj = d * (float)sc, dm = dmin * (float)m;
        for (int i = 0; i < 16; i++) {
            const size_t t = (size_t)(16 * j + i);
            const int q = dj != 0.0f ? k_clip((x[t] + dm) / dj, 0, 3) : 0;
            b->q[bc_k2_byte(t)][l] |= (uint8_t)(q << bc_k2_shift(t));
        }
    }
}

static void q2k_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                     size_t nk, size_t cols)
{
    bc_q2k_block *bl = (bc_q2k_block *)panel + k0 / 256;
    (void)nk;  /* 256: a q2_k row is whole super-blocks (bc_packed_bytes) */
    for (size_t l = 0; l < nl; l++)
        q2k_row(bl, l, tile + l * ld);
}

/* w = (d sc) q - dmin m: both products exact (15 and 17 bits), one rounding */
static void q2k_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q2k_block *bl = (const bc_q2k_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q2k_block *b = bl + k / 256;
        const size_t t = k % 256;
        const unsigned sc = b->sc[t / 16][l];
        const int q = b->q[bc_k2_byte(t)][l] >> bc_k2_shift(t) & 3;
        const float s = bc_half_to_f32(b->d[l]) * (float)(sc & 15u);
        const float m = bc_half_to_f32(b->dmin[l]) * (float)(sc >> 4);
        out[k] = s * (float)q - m;
    }
}

/* ---- q3_k: per 256 columns a bc_q3k_block of the panel's rows ---------- */

_Static_assert(sizeof(bc_q3k_block) == 114 * PW, "bc_q3k_block: 16 rows of 114 bytes");

/* One row's super-block: each sub-block's scale s_j = m_j / -4 (m_j its first weight
 * of largest magnitude), d = -s / 32 for s the first s_j of largest magnitude (a
 * half), ls_j = nearest(s_j (1/d)) in -32..31, then each weight q = nearest(w (1 /
 * (d ls_j))) in -4..3: blockc's rule (IQ4_XS's steps), not llama.cpp's search */
static void q3k_row(bc_q3k_block *b, size_t l, const float *x)
{
    float sj[16], smax = 0.0f, sabs = 0.0f;
    for (int j = 0; j < 16; j++) {
        float amax = 0.0f, m = 0.0f;
        for (int i = 0; i < 16; i++)
            if (fabsf(x[16 * j + i]) > amax) {
                amax = fabsf(x[16 * j + i]);
                m = x[16 * j + i];
            }
        sj[j] = m / -4.0f;
        if (fabsf(sj[j]) > sabs) {
            sabs = fabsf(sj[j]);
            smax = sj[j];
        }
    }
    const float dd = -smax / 32.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
    b->d[l] = bc_f32_to_half(dd);
    const float d = bc_half_to_f32(b->d[l]);
    for (size_t i = 0; i < 64; i++)
        b->q[i][l] = 0;
    for (size_t i = 0; i < 32; i++)
        b->hm[i][l] = 0;
    for (int j = 0; j < 16; j++) {
        const int ls = k_clip(id * sj[j], -32, 31);
        b->sc[j][l] = (int8_t)ls;
        const float dl = d * (float)ls, il = dl != 0.0f ? 1.0f / dl : 0.0f;
        for (int i = 0; i < 16; i++) {
            const size_t t = (size_t)(16 * j + i);
            const int u = k_clip(x[t] * il, -4, 3) + 4;  /* low + 4 high */
            b->q[bc_k2_byte(t)][l] |= (uint8_t)((u & 3) << bc_k2_shift(t));
            b->hm[t % 32][l] |= (uint8_t)((u >> 2) << (t / 32));
        }
    }
}

static void q3k_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                     size_t nk, size_t cols)
{
    bc_q3k_block *bl = (bc_q3k_block *)panel + k0 / 256;
    (void)nk;  /* 256: a q3_k row is whole super-blocks (bc_packed_bytes) */
    for (size_t l = 0; l < nl; l++)
        q3k_row(bl, l, tile + l * ld);
}

/* Weight t (0..255) of row l of a q3_k super-block: its value, -4..3 (the high bit
 * set: low; clear: low - 4) */
static int q3k_quant(const bc_q3k_block *b, size_t l, size_t t)
{
    const int lo = b->q[bc_k2_byte(t)][l] >> bc_k2_shift(t) & 3;
    return lo - (b->hm[t % 32][l] >> (t / 32) & 1 ? 0 : 4);
}

/* w = (d sc) q: both products exact (17 and 20 bits) */
static void q3k_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q3k_block *bl = (const bc_q3k_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q3k_block *b = bl + k / 256;
        const size_t t = k % 256;
        const float s = bc_half_to_f32(b->d[l]) * (float)b->sc[t / 16][l];
        out[k] = s * (float)q3k_quant(b, l, t);
    }
}

/* ---- q8_0i: q8_0's blocks, each row's weights 4 by 4 (bc_q8i_block) ------- */

/* q8_0's rule (q8_block), then each q stored as q + 128: |q| <= 127 by
 * construction (|w| * (1/d) rounds to at most 127), so the byte is 1..255 and
 * pmaddubsw's pairs (|q| times a signed 8-bit x) cannot saturate. */
static void q8i_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                     size_t nk, size_t cols)
{
    bc_q8i_block *bl = (bc_q8i_block *)panel + k0 / 32;
    for (size_t b = 0; b < nk; b += 32, bl++) {
        const size_t n = nk - b < 32 ? nk - b : 32;
        for (size_t l = 0; l < nl; l++) {
            int8_t q[32];
            q8_block(&bl->d[l], q, 1, tile + l * ld + b, n);
            for (size_t k = 0; k < 32; k++)
                bl->u[k / 4][l][k % 4] = (uint8_t)(q[k] + 128);
        }
    }
}

static void q8i_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q8i_block *bl = (const bc_q8i_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q8i_block *b = bl + k / 32;
        const size_t j = k % 32;
        out[k] = bc_half_to_f32(b->d[l]) * (float)((int)b->u[j / 4][l][j % 4] - 128);
    }
}

/* ---- q4_0i: q4_0's blocks, each row's bytes 4 by 4 (bc_q4i_block) -------- */

_Static_assert(sizeof(bc_q4i_block) == 18 * PW, "bc_q4i_block: 16 rows of 18 bytes");

/* q4_0's or iq4_nl's rule of one block of n <= 32 weights: d, 16 bytes of nibbles */
typedef void (*q4i_rule)(uint16_t *d, uint8_t *q, size_t stride, const float *w, size_t n);

/* nibble n's value: q4_0's n - 8 (iq4_nl's: bc_kvalues_iq4nl) */
static const int8_t q4i_values[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

/* the blocks of a q4_0i or iq4_nli panel (bc_q4i_block) by rule: each row's
 * 16 bytes then 4 by 4 */
static void q4i_pack_by(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                        size_t nk, q4i_rule rule)
{
    bc_q4i_block *bl = (bc_q4i_block *)panel + k0 / 32;
    for (size_t b = 0; b < nk; b += 32, bl++) {
        const size_t n = nk - b < 32 ? nk - b : 32;
        for (size_t l = 0; l < nl; l++) {
            uint8_t q[16];
            rule(&bl->d[l], q, 1, tile + l * ld + b, n);
            for (size_t j = 0; j < 16; j++)
                bl->u[j / 4][l][j % 4] = q[j];
        }
    }
}

/* row l of a q4_0i or iq4_nli panel: w = d value[nibble] */
static void q4i_unpack_by(float *out, const unsigned char *panel, size_t l, size_t cols,
                          const int8_t *value)
{
    const bc_q4i_block *bl = (const bc_q4i_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q4i_block *b = bl + k / 32;
        const size_t j = k % 16;
        const int byte = b->u[j / 4][l][j % 4];
        const int nib = k % 32 < 16 ? byte & 15 : byte >> 4;
        out[k] = bc_half_to_f32(b->d[l]) * (float)value[nib];
    }
}

/* q4_0's rule (q4_block) */
static void q4i_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                     size_t nk, size_t cols)
{
    q4i_pack_by(panel, tile, ld, nl, k0, nk, q4_block);
}

/* w = d (nibble - 8), as q4_0's */
static void q4i_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    q4i_unpack_by(out, panel, l, cols, q4i_values);
}

/* ---- q5_0i: q5_0's blocks, each row's bytes 4 by 4, its fifth bits as masks */

_Static_assert(sizeof(bc_q5i_block) == 22 * PW, "bc_q5i_block: 16 rows of 22 bytes");
_Static_assert(offsetof(bc_q5i_block, u) == offsetof(bc_q4i_block, u),
               "bc_q5i_block: q4_0i's nibbles at q4_0i's offset");

/* q5_0's rule (q5_block), each row's 16 bytes 4 by 4, bit k of its qh to h */
static void q5i_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                     size_t nk, size_t cols)
{
    bc_q5i_block *bl = (bc_q5i_block *)panel + k0 / 32;
    for (size_t b = 0; b < nk; b += 32, bl++) {
        const size_t n = nk - b < 32 ? nk - b : 32;
        for (size_t l = 0; l < nl; l++) {
            uint8_t q[16];
            uint32_t qh;
            q5_block(&bl->d[l], &qh, q, 1, tile + l * ld + b, n);
            for (size_t j = 0; j < 16; j++)
                bl->u[j / 4][l][j % 4] = q[j];
            for (size_t k = 0; k < 32; k++)
                bl->h[k % 16 / 4][k / 16] |= (uint64_t)((qh >> k) & 1u) << (4 * l + k % 4);
        }
    }
}

static void q5i_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q5i_block *bl = (const bc_q5i_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q5i_block *b = bl + k / 32;
        out[k] = bc_half_to_f32(b->d[l]) * (float)(bc_q5i_quant(b, l, k % 32) - 16);
    }
}

/* ---- q4_1i, q5_1i: q4_1's and q5_1's blocks, q4_0i's and q5_0i's layouts --- */

_Static_assert(sizeof(bc_q41i_block) == 20 * PW, "bc_q41i_block: 16 rows of 20 bytes");
_Static_assert(sizeof(bc_q51i_block) == 24 * PW, "bc_q51i_block: 16 rows of 24 bytes");
_Static_assert(offsetof(bc_q41i_block, u) == offsetof(bc_q4i_block, u),
               "bc_q41i_block: q4_0i's nibbles at q4_0i's offset");
_Static_assert(offsetof(bc_q51i_block, u) == offsetof(bc_q5i_block, u) &&
               offsetof(bc_q51i_block, h) == offsetof(bc_q5i_block, h),
               "bc_q51i_block: q5_0i's nibbles and fifth bits at q5_0i's offsets");

/* q4_1's rule (q1_block, nmax 15), each row's 16 nibble bytes 4 by 4 */
static void q41i_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                      size_t nk, size_t cols)
{
    bc_q41i_block *bl = (bc_q41i_block *)panel + k0 / 32;
    for (size_t b = 0; b < nk; b += 32, bl++) {
        const size_t n = nk - b < 32 ? nk - b : 32;
        for (size_t l = 0; l < nl; l++) {
            int q[32];
            q1_block(&bl->d[l], &bl->m[l], q, tile + l * ld + b, n, 15);
            for (size_t j = 0; j < 16; j++)
                bl->u[j / 4][l][j % 4] = (uint8_t)(q[j] | q[j + 16] << 4);
        }
    }
}

/* w = d nibble + m, as q4_1's (d nibble exact, one rounding) */
static void q41i_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q41i_block *bl = (const bc_q41i_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q41i_block *b = bl + k / 32;
        const size_t j = k % 16;
        const int byte = b->u[j / 4][l][j % 4];
        const int nib = k % 32 < 16 ? byte & 15 : byte >> 4;
        out[k] = bc_half_to_f32(b->d[l]) * (float)nib + bc_half_to_f32(b->m[l]);
    }
}

/* q5_1's rule (q1_block, nmax 31), the nibbles as q4_1i's, the fifth bits as q5_0i's */
static void q51i_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                      size_t nk, size_t cols)
{
    bc_q51i_block *bl = (bc_q51i_block *)panel + k0 / 32;
    for (size_t b = 0; b < nk; b += 32, bl++) {
        const size_t n = nk - b < 32 ? nk - b : 32;
        for (size_t l = 0; l < nl; l++) {
            int q[32];
            q1_block(&bl->d[l], &bl->m[l], q, tile + l * ld + b, n, 31);
            for (size_t j = 0; j < 16; j++)
                bl->u[j / 4][l][j % 4] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
            for (size_t k = 0; k < 32; k++)
                bl->h[k % 16 / 4][k / 16] |= (uint64_t)(q[k] >> 4) << (4 * l + k % 4);
        }
    }
}

/* w = d q + m, as q5_1's (d q exact, one rounding) */
static void q51i_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q51i_block *bl = (const bc_q51i_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q51i_block *b = bl + k / 32;
        const int q = bc_q5i_quant((const bc_q5i_block *)(const void *)b, l, k % 32);
        out[k] = bc_half_to_f32(b->d[l]) * (float)q + bc_half_to_f32(b->m[l]);
    }
}

/* ---- q4_k: per 256 columns a bc_q4k_block of the panel's rows ------------ */

/* One super-block of a panel's rows: llama.cpp's quantize_row_q4_K_ref (nmax 15)
 * or quantize_row_q5_K_ref (31), every row a lane of bc_kq_panel (kquant.c):
 * each sub-block of 32 by make_qkx2_quants (weights rms + |x|), the scales and
 * mins to 6 bits against the largest of each (d = max / 63, a half), then every
 * weight again against the stored scale and min. Row l's d, dmin, sc and m at
 * [.][l] (q5_k's lie where q4_k's do); the levels into L[t][l]. */

/* b (16 rows) <- tile (nl rows, 256 columns): kq_panel's levels 0..15, two a byte */
static void q4k_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                     size_t nk, size_t cols)
{
    bc_q4k_block *b = (bc_q4k_block *)panel + k0 / 256;
    uint8_t L[256][PW];
    (void)nk;  /* 256: a q4_k row is whole super-blocks (bc_packed_bytes) */
    bc_kq_panel(b, L, tile, ld, nl, 15, -1.0f, 20);
    for (int p = 0; p < 4; p++)
        for (int i = 0; i < 32; i++)
            for (size_t l = 0; l < nl; l++)
                b->q[32 * p + i][l] = (uint8_t)(L[64 * p + i][l] | (L[64 * p + 32 + i][l] << 4));
}

static void q4k_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q4k_block *bl = (const bc_q4k_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q4k_block *b = bl + k / 256;
        const size_t t = k % 256, j = t / 32, byte = 32 * (t / 64) + t % 32;
        const int nib = j % 2 ? b->q[byte][l] >> 4 : b->q[byte][l] & 15;
        const float s = bc_half_to_f32(b->d[l]) * (float)b->sc[j][l];
        const float m = bc_half_to_f32(b->dmin[l]) * (float)b->m[j][l];
        out[k] = s * (float)nib - m;
    }
}

/* ---- q4_ki: q4_k's super-blocks, each row's nibble bytes 4 by 4 ---------- */

_Static_assert(sizeof(bc_q4ki_block) == 148 * PW, "bc_q4ki_block: 16 rows of 148 bytes");
_Static_assert(offsetof(bc_q4ki_block, u) == offsetof(bc_q4k_block, q),
               "bc_q4ki_block: q4_k's scales where q4_k has them");

/* q4_k's super-block (one chunk of 256 columns: a grouped format's pack sees
 * one), its qs bytes then 4 by 4 */
static void q4ki_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                      size_t nk, size_t cols)
{
    bc_q4k_block k;
    memset(&k, 0, sizeof k);
    q4k_pack((unsigned char *)&k, tile, ld, nl, 0, nk, 256);
    bc_q4ki_block *b = (bc_q4ki_block *)panel + k0 / 256;
    memcpy(b, &k, offsetof(bc_q4k_block, q));
    for (size_t l = 0; l < nl; l++)
        for (size_t i = 0; i < 128; i++)
            b->u[i / 4][l][i % 4] = k.q[i][l];
}

static void q4ki_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q4ki_block *bl = (const bc_q4ki_block *)panel;
    for (size_t s = 0; s < cols / 256; s++) {
        bc_q4k_block k;
        memcpy(&k, bl + s, offsetof(bc_q4k_block, q));
        for (size_t i = 0; i < 128; i++)
            k.q[i][l] = bl[s].u[i / 4][l][i % 4];
        q4k_unpack_row(out + 256 * s, (const unsigned char *)&k, l, 256);
    }
}

/* ---- q5_k: per 256 columns a bc_q5k_block of the panel's rows ------------ */

_Static_assert(sizeof(bc_q5k_block) == 180 * PW, "bc_q5k_block: 16 rows of 180 bytes");
_Static_assert(offsetof(bc_q5k_block, qh) == offsetof(bc_q4k_block, q),
               "bc_q5k_block: q4_k's scales where q4_k has them");

/* b (16 rows) <- tile (nl rows, 256 columns): bc_kq_panel's levels 0..31, the
 * low four bits two a byte as Q4_K's nibbles, bit 4 of sub-block j's weight i
 * as bit j of qh[i] */
static void q5k_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                     size_t nk, size_t cols)
{
    bc_q5k_block *b = (bc_q5k_block *)panel + k0 / 256;
    uint8_t L[256][PW];
    (void)nk;  /* 256: a q5_k row is whole super-blocks (bc_packed_bytes) */
    bc_kq_panel((bc_q4k_block *)(void *)b, L, tile, ld, nl, 31, -0.5f, 15);
    for (int i = 0; i < 32; i++)
        for (size_t l = 0; l < nl; l++) {
            unsigned h = 0;
            for (int j = 0; j < 8; j++)
                h |= (unsigned)(L[32 * j + i][l] >> 4) << j;
            b->qh[i][l] = (uint8_t)h;
        }
    for (int p = 0; p < 4; p++)
        for (int i = 0; i < 32; i++)
            for (size_t l = 0; l < nl; l++)
                b->q[32 * p + i][l] =
                    (uint8_t)((L[64 * p + i][l] & 15) | (L[64 * p + 32 + i][l] & 15) << 4);
}

/* Weight t (0..255) of row l of a q5_k super-block: its five bits, 0..31 */
static int q5k_quant(const bc_q5k_block *b, size_t l, size_t t)
{
    const size_t j = t / 32, byte = 32 * (t / 64) + t % 32;
    const int nib = j % 2 ? b->q[byte][l] >> 4 : b->q[byte][l] & 15;
    return nib | (b->qh[t % 32][l] >> j & 1) << 4;
}

/* w = (d sc) q - dmin m: both products exact (22 and 17 bits), one rounding */
static void q5k_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q5k_block *bl = (const bc_q5k_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q5k_block *b = bl + k / 256;
        const size_t t = k % 256, j = t / 32;
        const float s = bc_half_to_f32(b->d[l]) * (float)b->sc[j][l];
        const float m = bc_half_to_f32(b->dmin[l]) * (float)b->m[j][l];
        out[k] = s * (float)q5k_quant(b, l, t) - m;
    }
}

/* ---- iq4_nli: iq4_nl's blocks, each row's bytes 4 by 4 (bc_q4i_block) ---- */

/* iq4_nl's rule (iq4nl_block), as q4_0i's */
static void iq4nli_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                        size_t nk, size_t cols)
{
    q4i_pack_by(panel, tile, ld, nl, k0, nk, iq4nl_block);
}

/* w = d kv[nibble], as iq4_nl's */
static void iq4nli_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    q4i_unpack_by(out, panel, l, cols, bc_kvalues_iq4nl);
}

/* ---- iq4_xsi: iq4_xs's super-blocks, each row's qs bytes 4 by 4 ---------- */

_Static_assert(sizeof(bc_iq4xsi_block) == 138 * PW, "bc_iq4xsi_block: 16 rows of 138 bytes");
_Static_assert(offsetof(bc_iq4xsi_block, u) == offsetof(bc_iq4xs_block, q),
               "bc_iq4xsi_block: iq4_xs's scales where iq4_xs has them");

/* iq4_xs's super-block (one chunk of 256 columns: a grouped format's pack sees one) */
static void iq4xsi_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                        size_t nk, size_t cols)
{
    bc_iq4xs_block k;
    memset(&k, 0, sizeof k);
    iq4xs_pack((unsigned char *)&k, tile, ld, nl, 0, nk, 256);
    bc_iq4xsi_block *b = (bc_iq4xsi_block *)panel + k0 / 256;
    memcpy(b, &k, offsetof(bc_iq4xs_block, q));
    for (size_t l = 0; l < nl; l++)
        for (size_t i = 0; i < 128; i++)
            b->u[i / 4][l][i % 4] = k.q[i][l];
}

/* w = (d sc) kv[nibble], as iq4_xs's */
static void iq4xsi_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_iq4xsi_block *bl = (const bc_iq4xsi_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_iq4xsi_block *b = bl + k / 256;
        const size_t t = k % 256;
        const float s = bc_half_to_f32(b->d[l]) * (float)b->sc[t / 32][l];
        out[k] = s * (float)bc_kvalues_iq4nl[bc_iq4xsi_nibble(b, l, t)];
    }
}

/* ---- q2_ki, q3_ki: q2_k's and q3_k's super-blocks, each row's bytes 4 by 4 -- */

_Static_assert(sizeof(bc_q2ki_block) == 84 * PW, "bc_q2ki_block: 16 rows of 84 bytes");
_Static_assert(offsetof(bc_q2ki_block, u) == offsetof(bc_q2k_block, q),
               "bc_q2ki_block: q2_k's scales where q2_k has them");
_Static_assert(sizeof(bc_q3ki_block) == 114 * PW, "bc_q3ki_block: 16 rows of 114 bytes");
_Static_assert(offsetof(bc_q3ki_block, h) == offsetof(bc_q3k_block, hm),
               "bc_q3ki_block: q3_k's scales where q3_k has them");

/* row l of q2_k's super-block k into q2_ki's b (the same bits) */
static void q2ki_from_q2k(bc_q2ki_block *b, const bc_q2k_block *k, size_t l)
{
    b->d[l] = k->d[l];
    b->dmin[l] = k->dmin[l];
    for (size_t j = 0; j < 16; j++)
        b->sc[j][l] = k->sc[j][l];
    for (size_t i = 0; i < 64; i++)
        b->u[i / 4][l][i % 4] = k->q[i][l];
}

static void q2k_from_q2ki(bc_q2k_block *k, const bc_q2ki_block *b, size_t l)
{
    k->d[l] = b->d[l];
    k->dmin[l] = b->dmin[l];
    for (size_t j = 0; j < 16; j++)
        k->sc[j][l] = b->sc[j][l];
    for (size_t i = 0; i < 64; i++)
        k->q[i][l] = b->u[i / 4][l][i % 4];
}

static void q3ki_from_q3k(bc_q3ki_block *b, const bc_q3k_block *k, size_t l)
{
    b->d[l] = k->d[l];
    for (size_t j = 0; j < 16; j++)
        b->sc[j][l] = k->sc[j][l];
    for (size_t i = 0; i < 32; i++)
        b->h[i / 4][l][i % 4] = k->hm[i][l];
    for (size_t i = 0; i < 64; i++)
        b->u[i / 4][l][i % 4] = k->q[i][l];
}

static void q3k_from_q3ki(bc_q3k_block *k, const bc_q3ki_block *b, size_t l)
{
    k->d[l] = b->d[l];
    for (size_t j = 0; j < 16; j++)
        k->sc[j][l] = b->sc[j][l];
    for (size_t i = 0; i < 32; i++)
        k->hm[i][l] = b->h[i / 4][l][i % 4];
    for (size_t i = 0; i < 64; i++)
        k->q[i][l] = b->u[i / 4][l][i % 4];
}

/* q2_k's super-block (one chunk of 256 columns: a grouped format's pack sees one) */
static void q2ki_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                      size_t nk, size_t cols)
{
    bc_q2k_block k;
    memset(&k, 0, sizeof k);
    q2k_pack((unsigned char *)&k, tile, ld, nl, 0, nk, 256);
    bc_q2ki_block *b = (bc_q2ki_block *)panel + k0 / 256;
    for (size_t l = 0; l < nl; l++)
        q2ki_from_q2k(b, &k, l);
}

/* w = (d sc) q - dmin m, as q2_k's */
static void q2ki_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q2ki_block *bl = (const bc_q2ki_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q2ki_block *b = bl + k / 256;
        const size_t t = k % 256;
        const unsigned sc = b->sc[t / 16][l];
        const float s = bc_half_to_f32(b->d[l]) * (float)(sc & 15u);
        const float m = bc_half_to_f32(b->dmin[l]) * (float)(sc >> 4);
        out[k] = s * (float)bc_q2ki_quant(b, l, t) - m;
    }
}

static void q3ki_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                      size_t nk, size_t cols)
{
    bc_q3k_block k;
    memset(&k, 0, sizeof k);
    q3k_pack((unsigned char *)&k, tile, ld, nl, 0, nk, 256);
    bc_q3ki_block *b = (bc_q3ki_block *)panel + k0 / 256;
    for (size_t l = 0; l < nl; l++)
        q3ki_from_q3k(b, &k, l);
}

/* w = (d sc) (q - 4), as q3_k's */
static void q3ki_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q3ki_block *bl = (const bc_q3ki_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q3ki_block *b = bl + k / 256;
        const size_t t = k % 256;
        const float s = bc_half_to_f32(b->d[l]) * (float)b->sc[t / 16][l];
        out[k] = s * (float)(bc_q3ki_quant(b, l, t) - 4);
    }
}

/* ---- q5_ki: q5_k's super-blocks, each row's nibble and qh bytes 4 by 4 ---- */

_Static_assert(sizeof(bc_q5ki_block) == 180 * PW, "bc_q5ki_block: 16 rows of 180 bytes");
_Static_assert(offsetof(bc_q5ki_block, d) == offsetof(bc_q4ki_block, d)
                   && offsetof(bc_q5ki_block, dmin) == offsetof(bc_q4ki_block, dmin)
                   && offsetof(bc_q5ki_block, sc) == offsetof(bc_q4ki_block, sc)
                   && offsetof(bc_q5ki_block, m) == offsetof(bc_q4ki_block, m),
               "bc_q5ki_block: q4_ki's scales where q4_ki has them (its kernels read them so)");

/* row l of a q5_ki super-block <- row l of a q5_k one (the same bits) */
static void q5ki_from_q5k(bc_q5ki_block *b, const bc_q5k_block *k, size_t l)
{
    b->d[l] = k->d[l];
    b->dmin[l] = k->dmin[l];
    for (size_t j = 0; j < 8; j++) {
        b->sc[j][l] = k->sc[j][l];
        b->m[j][l] = k->m[j][l];
    }
    for (size_t i = 0; i < 128; i++)
        b->u[i / 4][l][i % 4] = k->q[i][l];
    for (size_t i = 0; i < 32; i++)
        b->h[i / 4][l][i % 4] = k->qh[i][l];
}

/* q5_k's super-block (one chunk of 256 columns: a grouped format's pack sees one) */
static void q5ki_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                      size_t nk, size_t cols)
{
    bc_q5k_block k;
    memset(&k, 0, sizeof k);
    q5k_pack((unsigned char *)&k, tile, ld, nl, 0, nk, 256);
    bc_q5ki_block *b = (bc_q5ki_block *)panel + k0 / 256;
    for (size_t l = 0; l < nl; l++)
        q5ki_from_q5k(b, &k, l);
}

/* w = (d sc) q - dmin m, as q5_k's */
static void q5ki_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q5ki_block *bl = (const bc_q5ki_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q5ki_block *b = bl + k / 256;
        const size_t t = k % 256, j = t / 32;
        const float s = bc_half_to_f32(b->d[l]) * (float)b->sc[j][l];
        const float m = bc_half_to_f32(b->dmin[l]) * (float)b->m[j][l];
        out[k] = s * (float)bc_q5ki_quant(b, l, t) - m;
    }
}

/* ---- q6_k: per 256 columns a bc_q6k_block of the panel's rows ------------ */

_Static_assert(sizeof(bc_q6k_block) == 274 * PW, "bc_q6k_block: 16 rows of 274 bytes");

/* One super-block of a panel's rows, llama.cpp's quantize_row_q6_K_ref, every
 * row a lane of bc_q6k_panel (kquant.c): each sub-block of 16 by make_qx_quants,
 * the scales to int8 against the one of largest magnitude (d = -max / 128, a
 * half), then every weight again against its stored scale: q = nearest(x / (d
 * sc)) + 32 in 0..63. b (16 rows) <- tile (nl rows, 256 columns) */
static void q6k_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                     size_t nk, size_t cols)
{
    (void)nk;  /* 256: a q6_k row is whole super-blocks (bc_packed_bytes) */
    bc_q6k_panel((bc_q6k_block *)panel + k0 / 256, tile, ld, nl);
}

static void q6k_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q6k_block *bl = (const bc_q6k_block *)panel;
    for (size_t k = 0; k < cols; k++) {
        const bc_q6k_block *b = bl + k / 256;
        const size_t t = k % 256;
        const float s = bc_half_to_f32(b->d[l]) * (float)b->sc[t / 16][l];
        out[k] = s * (float)b->q[t][l];
    }
}

/* ---- q6_ki: q6_k's super-blocks, the file's bits 4 bytes by 4 ----------- */

_Static_assert(sizeof(bc_q6ki_block) == 210 * PW, "bc_q6ki_block: 16 rows of 210 bytes");

/* q6_k's super-block (one chunk of 256 columns), each six-bit value's bits
 * put where Q6_K keeps them (bc_engine.h) */
static void q6ki_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                      size_t nk, size_t cols)
{
    bc_q6k_block k;
    memset(&k, 0, sizeof k);
    q6k_pack((unsigned char *)&k, tile, ld, nl, 0, nk, 256);
    bc_q6ki_block *b = (bc_q6ki_block *)panel + k0 / 256;
    memcpy(b->d, k.d, sizeof b->d);
    memcpy(b->sc, k.sc, sizeof b->sc);
    for (size_t l = 0; l < nl; l++)
        for (size_t w = 0; w < 256; w++) {
            const unsigned v = (unsigned)(k.q[w][l] + 32);  /* 0..63 */
            const bc_q6k_at at = bc_q6k_where(w);
            BC_Q6KI_QL(b, at.ql / 4)[l][at.ql % 4] |= (uint8_t)((v & 15u) << at.ls);
            BC_Q6KI_QH(b, at.qh / 4)[l][at.qh % 4] |= (uint8_t)((v >> 4) << at.hs);
        }
}

static void q6ki_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_q6ki_block *bl = (const bc_q6ki_block *)panel;
    for (size_t s = 0; s < cols / 256; s++) {
        bc_q6k_block k;
        memcpy(k.d, bl[s].d, sizeof k.d);
        memcpy(k.sc, bl[s].sc, sizeof k.sc);
        for (size_t w = 0; w < 256; w++)
            k.q[w][l] = (int8_t)(bc_q6ki_quant(bl + s, l, w) - 32);
        q6k_unpack_row(out + 256 * s, (const unsigned char *)&k, l, 256);
    }
}

/* ---- bfloat16i: bfloat16's weights, each row's columns 2 by 2 (bc_bf16i_pair) */

static void bf16i_pack(unsigned char *panel, const float *tile, size_t ld, size_t nl, size_t k0,
                       size_t nk, size_t cols)
{
    bc_bf16i_pair *pr = (bc_bf16i_pair *)panel + k0 / 2;
    (void)cols;
    for (size_t l = 0; l < nl; l++)
        for (size_t k = 0; k < nk; k++)
            pr[k / 2].u[l][k % 2] = bc_f32_to_bf16_ftz(tile[l * ld + k]);
}

static void bf16i_unpack_row(float *out, const unsigned char *panel, size_t l, size_t cols)
{
    const bc_bf16i_pair *pr = (const bc_bf16i_pair *)panel;
    for (size_t k = 0; k < cols; k++)
        out[k] = bc_bf16_to_f32(pr[k / 2].u[l][k % 2]);
}

/* ---- a GGUF row's blocks into panels and back (from_ggml, to_ggml) ------- */

/* Each pair moves one row's ggml blocks (little-endian, as GGUF stores them)
 * to row l of a panel and back, field by field: the very bits, rearranged. */

static uint16_t rd16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static void wr16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)(v & 255u);
    p[1] = (unsigned char)(v >> 8);
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i) & 255u);
}

/* F32 <-> float32: panel [k][l], 4 bytes a weight (the float's bits) */
static void f32_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                          size_t nk)
{
    for (size_t k = 0; k < nk; k++)
        memcpy(panel + ((k0 + k) * PW + l) * 4, src + 4 * k, 4);
}

static void f32_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                        size_t nk)
{
    for (size_t k = 0; k < nk; k++)
        memcpy(dst + 4 * k, panel + ((k0 + k) * PW + l) * 4, 4);
}

/* F16 <-> float16, BF16 <-> bfloat16: panel [k][l], 2 bytes a weight */
static void half_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                           size_t nk)
{
    uint16_t *h = (uint16_t *)panel + k0 * PW;
    for (size_t k = 0; k < nk; k++)
        h[k * PW + l] = rd16(src + 2 * k);
}

static void half_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                         size_t nk)
{
    const uint16_t *h = (const uint16_t *)panel + k0 * PW;
    for (size_t k = 0; k < nk; k++)
        wr16(dst + 2 * k, h[k * PW + l]);
}

/* Q8_0 (d, int8 q[32]: 34 bytes) <-> q8_0 and q8_0i (q + 128: the top bit flipped) */
static void q8_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                         size_t nk)
{
    bc_q8_block *bl = (bc_q8_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, src += 34) {
        bl[b].d[l] = rd16(src);
        for (size_t k = 0; k < 32; k++)
            bl[b].q[k][l] = (int8_t)src[2 + k];
    }
}

static void q8_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                       size_t nk)
{
    const bc_q8_block *bl = (const bc_q8_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, dst += 34) {
        wr16(dst, bl[b].d[l]);
        for (size_t k = 0; k < 32; k++)
            dst[2 + k] = (unsigned char)bl[b].q[k][l];
    }
}

static void q8i_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                          size_t nk)
{
    bc_q8i_block *bl = (bc_q8i_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, src += 34) {
        bl[b].d[l] = rd16(src);
        for (size_t k = 0; k < 32; k++)
            bl[b].u[k / 4][l][k % 4] = (uint8_t)(src[2 + k] ^ 0x80u);
    }
}

static void q8i_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                        size_t nk)
{
    const bc_q8i_block *bl = (const bc_q8i_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, dst += 34) {
        wr16(dst, bl[b].d[l]);
        for (size_t k = 0; k < 32; k++)
            dst[2 + k] = (unsigned char)(bl[b].u[k / 4][l][k % 4] ^ 0x80u);
    }
}

/* The BC_PANEL rows' 16 bytes at src + l * row_bytes (l = 0 .. 15) transposed:
 * out[16 * k + l] = byte k of row l (a 16 x 16 byte tile; out 256 bytes). SSE2's
 * unpacks where the compiler has them (every x86-64), else byte by byte: the
 * same bytes. */
static void rows16_transpose(unsigned char *out, const unsigned char *src, size_t row_bytes)
{
#if defined(__SSE2__)
    __m128i a[16], b[16];
    for (int l = 0; l < 16; l++)
        a[l] = _mm_loadu_si128((const __m128i *)(const void *)(src + (size_t)l * row_bytes));
    /* rows 2i, 2i+1 interleaved by bytes: b[2i] columns 0-7, b[2i+1] 8-15 */
    for (int i = 0; i < 8; i++) {
        b[2 * i] = _mm_unpacklo_epi8(a[2 * i], a[2 * i + 1]);
        b[2 * i + 1] = _mm_unpackhi_epi8(a[2 * i], a[2 * i + 1]);
    }
    /* rows 4j..4j+3 by 16-bit pairs: a[4j + q] columns 4q..4q+3 */
    for (int j = 0; j < 4; j++) {
        a[4 * j] = _mm_unpacklo_epi16(b[4 * j], b[4 * j + 2]);
        a[4 * j + 1] = _mm_unpackhi_epi16(b[4 * j], b[4 * j + 2]);
        a[4 * j + 2] = _mm_unpacklo_epi16(b[4 * j + 1], b[4 * j + 3]);
        a[4 * j + 3] = _mm_unpackhi_epi16(b[4 * j + 1], b[4 * j + 3]);
    }
    /* rows 8h..8h+7 by 32-bit quads: b[8h + 2q] columns 4q, 4q+1, b[8h + 2q + 1] 4q+2, 4q+3 */
    for (int h = 0; h < 2; h++)
        for (int q = 0; q < 4; q++) {
            b[8 * h + 2 * q] = _mm_unpacklo_epi32(a[8 * h + q], a[8 * h + 4 + q]);
            b[8 * h + 2 * q + 1] = _mm_unpackhi_epi32(a[8 * h + q], a[8 * h + 4 + q]);
        }
    /* all 16 rows: column 2p from b[p]'s and b[8 + p]'s low halves, 2p + 1 the high */
    for (int p = 0; p < 8; p++) {
        _mm_storeu_si128((__m128i *)(void *)(out + 32 * p), _mm_unpacklo_epi64(b[p], b[8 + p]));
        _mm_storeu_si128((__m128i *)(void *)(out + 32 * p + 16),
                         _mm_unpackhi_epi64(b[p], b[8 + p]));
    }
#else
    for (size_t k = 0; k < 16; k++)
        for (size_t l = 0; l < 16; l++)
            out[16 * k + l] = src[l * row_bytes + k];
#endif
}

/* q8_0's from_ggml_panel: 16 rows of Q8_0 blocks, each block's 32 quants as two
 * 16 x 16 transposes */
static void q8_from_ggml_panel(unsigned char *panel, const unsigned char *src, size_t row_bytes,
                               size_t k0, size_t nk)
{
    bc_q8_block *bl = (bc_q8_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, src += 34) {
        for (size_t l = 0; l < BC_PANEL; l++)
            bl[b].d[l] = rd16(src + l * row_bytes);
        rows16_transpose((unsigned char *)&bl[b].q[0][0], src + 2, row_bytes);
        rows16_transpose((unsigned char *)&bl[b].q[16][0], src + 18, row_bytes);
    }
}

/* Q4_0 (d, qs[16]: 18 bytes) <-> q4_0 and q4_0i (qs 4 bytes by 4) */
static void q4_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                         size_t nk)
{
    bc_q4_block *bl = (bc_q4_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, src += 18) {
        bl[b].d[l] = rd16(src);
        for (size_t j = 0; j < 16; j++)
            bl[b].q[j][l] = src[2 + j];
    }
}

/* q4_0's from_ggml_panel: each block's 16 bytes of nibbles one 16 x 16 transpose */
static void q4_from_ggml_panel(unsigned char *panel, const unsigned char *src, size_t row_bytes,
                               size_t k0, size_t nk)
{
    bc_q4_block *bl = (bc_q4_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, src += 18) {
        for (size_t l = 0; l < BC_PANEL; l++)
            bl[b].d[l] = rd16(src + l * row_bytes);
        rows16_transpose(&bl[b].q[0][0], src + 2, row_bytes);
    }
}

static void q4_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                       size_t nk)
{
    const bc_q4_block *bl = (const bc_q4_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, dst += 18) {
        wr16(dst, bl[b].d[l]);
        for (size_t j = 0; j < 16; j++)
            dst[2 + j] = bl[b].q[j][l];
    }
}

static void q4i_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                          size_t nk)
{
    bc_q4i_block *bl = (bc_q4i_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, src += 18) {
        bl[b].d[l] = rd16(src);
        for (size_t j = 0; j < 16; j++)
            bl[b].u[j / 4][l][j % 4] = src[2 + j];
    }
}

static void q4i_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                        size_t nk)
{
    const bc_q4i_block *bl = (const bc_q4i_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, dst += 18) {
        wr16(dst, bl[b].d[l]);
        for (size_t j = 0; j < 16; j++)
            dst[2 + j] = bl[b].u[j / 4][l][j % 4];
    }
}

/* Q5_0 (d, uint32 qh, qs[16]: 22 bytes) <-> q5_0 and q5_0i (qs 4 bytes by 4,
 * bit k of qh to bit 4 l + k % 4 of h[k % 16 / 4][k / 16]) */
static void q5_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                         size_t nk)
{
    bc_q5_block *bl = (bc_q5_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, src += 22) {
        bl[b].d[l] = rd16(src);
        bl[b].qh[l] = rd32(src + 2);
        for (size_t j = 0; j < 16; j++)
            bl[b].q[j][l] = src[6 + j];
    }
}

static void q5_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                       size_t nk)
{
    const bc_q5_block *bl = (const bc_q5_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, dst += 22) {
        wr16(dst, bl[b].d[l]);
        wr32(dst + 2, bl[b].qh[l]);
        for (size_t j = 0; j < 16; j++)
            dst[6 + j] = bl[b].q[j][l];
    }
}

static void q5i_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                          size_t nk)
{
    bc_q5i_block *bl = (bc_q5i_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, src += 22) {
        const uint32_t qh = rd32(src + 2);
        bl[b].d[l] = rd16(src);
        for (size_t j = 0; j < 16; j++)
            bl[b].u[j / 4][l][j % 4] = src[6 + j];
        for (size_t k = 0; k < 32; k++)  /* (the panel zeroed: or) */
            bl[b].h[k % 16 / 4][k / 16] |= (uint64_t)((qh >> k) & 1u) << (4 * l + k % 4);
    }
}

static void q5i_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                        size_t nk)
{
    const bc_q5i_block *bl = (const bc_q5i_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, dst += 22) {
        uint32_t qh = 0;
        for (size_t k = 0; k < 32; k++)
            qh |= (uint32_t)((bl[b].h[k % 16 / 4][k / 16] >> (4 * l + k % 4)) & 1u) << k;
        wr16(dst, bl[b].d[l]);
        wr32(dst + 2, qh);
        for (size_t j = 0; j < 16; j++)
            dst[6 + j] = bl[b].u[j / 4][l][j % 4];
    }
}

/* Q4_K (d, dmin, scales[12], qs[128]: 144 bytes) <-> q4_k and q4_ki: the 12
 * bytes hold eight 6-bit scales and eight 6-bit mins (bytes 0-3: scales 0-3
 * and the top two bits of scales 4-7; 4-7 the same for the mins; 8-11 the low
 * nibbles of scales 4-7, the mins' in the high ones), a byte each in the
 * panels; every one of the 96 bits is a scale's or a min's. q4_k's and q4_ki's
 * scales lie at the same offsets (bc_format.h), so both go through these. */
static void k4_scales_in(bc_q4k_block *b, size_t l, const unsigned char *s)
{
    for (size_t j = 0; j < 4; j++) {
        b->sc[j][l] = s[j] & 63u;
        b->m[j][l] = s[j + 4] & 63u;
        b->sc[j + 4][l] = (uint8_t)((s[j + 8] & 15u) | (s[j] >> 6) << 4);
        b->m[j + 4][l] = (uint8_t)((s[j + 8] >> 4) | (s[j + 4] >> 6) << 4);
    }
}

static void k4_scales_out(unsigned char *s, const bc_q4k_block *b, size_t l)
{
    for (size_t j = 0; j < 4; j++) {
        s[j] = (unsigned char)((b->sc[j][l] & 63u) | (b->sc[j + 4][l] >> 4) << 6);
        s[j + 4] = (unsigned char)((b->m[j][l] & 63u) | (b->m[j + 4][l] >> 4) << 6);
        s[j + 8] = (unsigned char)((b->sc[j + 4][l] & 15u) | (b->m[j + 4][l] & 15u) << 4);
    }
}

static void q4k_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                          size_t nk)
{
    bc_q4k_block *bl = (bc_q4k_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, src += 144) {
        bl[b].d[l] = rd16(src);
        bl[b].dmin[l] = rd16(src + 2);
        k4_scales_in(bl + b, l, src + 4);
        for (size_t i = 0; i < 128; i++)
            bl[b].q[i][l] = src[16 + i];
    }
}

/* q4_k's from_ggml_panel: each super-block's 128 bytes of nibbles as eight 16 x 16
 * transposes, its scales row by row */
static void q4k_from_ggml_panel(unsigned char *panel, const unsigned char *src, size_t row_bytes,
                                size_t k0, size_t nk)
{
    bc_q4k_block *bl = (bc_q4k_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, src += 144) {
        for (size_t l = 0; l < BC_PANEL; l++) {
            bl[b].d[l] = rd16(src + l * row_bytes);
            bl[b].dmin[l] = rd16(src + l * row_bytes + 2);
            k4_scales_in(bl + b, l, src + l * row_bytes + 4);
        }
        for (size_t t = 0; t < 8; t++)
            rows16_transpose(&bl[b].q[16 * t][0], src + 16 + 16 * t, row_bytes);
    }
}

static void q4k_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                        size_t nk)
{
    const bc_q4k_block *bl = (const bc_q4k_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, dst += 144) {
        wr16(dst, bl[b].d[l]);
        wr16(dst + 2, bl[b].dmin[l]);
        k4_scales_out(dst + 4, bl + b, l);
        for (size_t i = 0; i < 128; i++)
            dst[16 + i] = bl[b].q[i][l];
    }
}

static void q4ki_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                           size_t nk)
{
    bc_q4ki_block *bl = (bc_q4ki_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, src += 144) {
        bl[b].d[l] = rd16(src);
        bl[b].dmin[l] = rd16(src + 2);
        k4_scales_in((bc_q4k_block *)(void *)(bl + b), l, src + 4);
        for (size_t i = 0; i < 128; i++)
            bl[b].u[i / 4][l][i % 4] = src[16 + i];
    }
}

static void q4ki_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                         size_t nk)
{
    const bc_q4ki_block *bl = (const bc_q4ki_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, dst += 144) {
        wr16(dst, bl[b].d[l]);
        wr16(dst + 2, bl[b].dmin[l]);
        k4_scales_out(dst + 4, (const bc_q4k_block *)(const void *)(bl + b), l);
        for (size_t i = 0; i < 128; i++)
            dst[16 + i] = bl[b].u[i / 4][l][i % 4];
    }
}

/* Q4_1 (d, m, qs[16]: 20 bytes) <-> q4_1; Q5_1 (d, m, uint32 qh, qs[16]: 24
 * bytes) <-> q5_1 */
static void q41_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                          size_t nk)
{
    bc_q41_block *bl = (bc_q41_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, src += 20) {
        bl[b].d[l] = rd16(src);
        bl[b].m[l] = rd16(src + 2);
        for (size_t j = 0; j < 16; j++)
            bl[b].q[j][l] = src[4 + j];
    }
}

static void q41_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                        size_t nk)
{
    const bc_q41_block *bl = (const bc_q41_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, dst += 20) {
        wr16(dst, bl[b].d[l]);
        wr16(dst + 2, bl[b].m[l]);
        for (size_t j = 0; j < 16; j++)
            dst[4 + j] = bl[b].q[j][l];
    }
}

static void q51_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                          size_t nk)
{
    bc_q51_block *bl = (bc_q51_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, src += 24) {
        bl[b].d[l] = rd16(src);
        bl[b].m[l] = rd16(src + 2);
        bl[b].qh[l] = rd32(src + 4);
        for (size_t j = 0; j < 16; j++)
            bl[b].q[j][l] = src[8 + j];
    }
}

static void q51_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                        size_t nk)
{
    const bc_q51_block *bl = (const bc_q51_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, dst += 24) {
        wr16(dst, bl[b].d[l]);
        wr16(dst + 2, bl[b].m[l]);
        wr32(dst + 4, bl[b].qh[l]);
        for (size_t j = 0; j < 16; j++)
            dst[8 + j] = bl[b].q[j][l];
    }
}

/* Q4_1 <-> q4_1i (qs 4 bytes by 4); Q5_1 <-> q5_1i (qs likewise, bit k of qh to
 * bit 4 l + k % 4 of h[k % 16 / 4][k / 16], as q5_0i's) */
static void q41i_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                           size_t nk)
{
    bc_q41i_block *bl = (bc_q41i_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, src += 20) {
        bl[b].d[l] = rd16(src);
        bl[b].m[l] = rd16(src + 2);
        for (size_t j = 0; j < 16; j++)
            bl[b].u[j / 4][l][j % 4] = src[4 + j];
    }
}

static void q41i_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                         size_t nk)
{
    const bc_q41i_block *bl = (const bc_q41i_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, dst += 20) {
        wr16(dst, bl[b].d[l]);
        wr16(dst + 2, bl[b].m[l]);
        for (size_t j = 0; j < 16; j++)
            dst[4 + j] = bl[b].u[j / 4][l][j % 4];
    }
}

static void q51i_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                           size_t nk)
{
    bc_q51i_block *bl = (bc_q51i_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, src += 24) {
        const uint32_t qh = rd32(src + 4);
        bl[b].d[l] = rd16(src);
        bl[b].m[l] = rd16(src + 2);
        for (size_t j = 0; j < 16; j++)
            bl[b].u[j / 4][l][j % 4] = src[8 + j];
        for (size_t k = 0; k < 32; k++)  /* (the panel zeroed: or) */
            bl[b].h[k % 16 / 4][k / 16] |= (uint64_t)((qh >> k) & 1u) << (4 * l + k % 4);
    }
}

static void q51i_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                         size_t nk)
{
    const bc_q51i_block *bl = (const bc_q51i_block *)panel + k0 / 32;
    for (size_t b = 0; b < (nk + 31) / 32; b++, dst += 24) {
        uint32_t qh = 0;
        for (size_t k = 0; k < 32; k++)
            qh |= (uint32_t)((bl[b].h[k % 16 / 4][k / 16] >> (4 * l + k % 4)) & 1u) << k;
        wr16(dst, bl[b].d[l]);
        wr16(dst + 2, bl[b].m[l]);
        wr32(dst + 4, qh);
        for (size_t j = 0; j < 16; j++)
            dst[8 + j] = bl[b].u[j / 4][l][j % 4];
    }
}

/* Q5_K (d, dmin, scales[12], qh[32], qs[128]: 176 bytes) <-> q5_k (q4_k's scales
 * and mins a byte each, qh and qs as they are) */
static void q5k_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                          size_t nk)
{
    bc_q5k_block *bl = (bc_q5k_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, src += 176) {
        bl[b].d[l] = rd16(src);
        bl[b].dmin[l] = rd16(src + 2);
        k4_scales_in((bc_q4k_block *)(void *)(bl + b), l, src + 4);
        for (size_t i = 0; i < 32; i++)
            bl[b].qh[i][l] = src[16 + i];
        for (size_t i = 0; i < 128; i++)
            bl[b].q[i][l] = src[48 + i];
    }
}

static void q5k_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                        size_t nk)
{
    const bc_q5k_block *bl = (const bc_q5k_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, dst += 176) {
        wr16(dst, bl[b].d[l]);
        wr16(dst + 2, bl[b].dmin[l]);
        k4_scales_out(dst + 4, (const bc_q4k_block *)(const void *)(bl + b), l);
        for (size_t i = 0; i < 32; i++)
            dst[16 + i] = bl[b].qh[i][l];
        for (size_t i = 0; i < 128; i++)
            dst[48 + i] = bl[b].q[i][l];
    }
}

/* Q5_K <-> q5_ki (through q5_k's block of the row: the same bits) */
static void q5ki_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                           size_t nk)
{
    bc_q5ki_block *bl = (bc_q5ki_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, src += 176) {
        bc_q5k_block k;
        q5k_from_ggml((unsigned char *)&k, src, l, 0, 256);
        q5ki_from_q5k(bl + b, &k, l);
    }
}

static void q5ki_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                         size_t nk)
{
    const bc_q5ki_block *bl = (const bc_q5ki_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, dst += 176) {
        bc_q5k_block k;
        k.d[l] = bl[b].d[l];
        k.dmin[l] = bl[b].dmin[l];
        for (size_t j = 0; j < 8; j++) {
            k.sc[j][l] = bl[b].sc[j][l];
            k.m[j][l] = bl[b].m[j][l];
        }
        for (size_t i = 0; i < 128; i++)
            k.q[i][l] = bl[b].u[i / 4][l][i % 4];
        for (size_t i = 0; i < 32; i++)
            k.qh[i][l] = bl[b].h[i / 4][l][i % 4];
        q5k_to_ggml(dst, (const unsigned char *)&k, l, 0, 256);
    }
}

/* IQ4_XS (d, uint16 scales_h, scales_l[4], qs[128]: 136 bytes) <-> iq4_xs (sub-block
 * j's 6-bit scale ls, the low four bits nibble j % 2 of scales_l[j / 2], the high two
 * bits 2j, 2j + 1 of scales_h, as the signed byte ls - 32); IQ4_NL moves as Q4_0 */
static void iq4xs_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                            size_t nk)
{
    bc_iq4xs_block *bl = (bc_iq4xs_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, src += 136) {
        const unsigned sh = rd16(src + 2);
        bl[b].d[l] = rd16(src);
        for (size_t j = 0; j < 8; j++) {
            const unsigned ls = (unsigned)(src[4 + j / 2] >> (4 * (j % 2)) & 15u)
                                | (sh >> (2 * j) & 3u) << 4;
            bl[b].sc[j][l] = (int8_t)((int)ls - 32);
        }
        for (size_t i = 0; i < 128; i++)
            bl[b].q[i][l] = src[8 + i];
    }
}

static void iq4xs_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                          size_t nk)
{
    const bc_iq4xs_block *bl = (const bc_iq4xs_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, dst += 136) {
        unsigned sh = 0;
        memset(dst + 4, 0, 4);
        wr16(dst, bl[b].d[l]);
        for (size_t j = 0; j < 8; j++) {
            const unsigned ls = (unsigned)(bl[b].sc[j][l] + 32) & 63u;
            dst[4 + j / 2] |= (unsigned char)((ls & 15u) << (4 * (j % 2)));
            sh |= (ls >> 4) << (2 * j);
        }
        wr16(dst + 2, (uint16_t)sh);
        for (size_t i = 0; i < 128; i++)
            dst[8 + i] = bl[b].q[i][l];
    }
}

/* IQ4_XS <-> iq4_xsi (through iq4_xs's block of the row: the same bits) */
static void iq4xsi_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                             size_t nk)
{
    bc_iq4xsi_block *bl = (bc_iq4xsi_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, src += 136) {
        bc_iq4xs_block k;
        iq4xs_from_ggml((unsigned char *)&k, src, l, 0, 256);
        bl[b].d[l] = k.d[l];
        for (size_t j = 0; j < 8; j++)
            bl[b].sc[j][l] = k.sc[j][l];
        for (size_t i = 0; i < 128; i++)
            bl[b].u[i / 4][l][i % 4] = k.q[i][l];
    }
}

static void iq4xsi_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                           size_t nk)
{
    const bc_iq4xsi_block *bl = (const bc_iq4xsi_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, dst += 136) {
        bc_iq4xs_block k;
        k.d[l] = bl[b].d[l];
        for (size_t j = 0; j < 8; j++)
            k.sc[j][l] = bl[b].sc[j][l];
        for (size_t i = 0; i < 128; i++)
            k.q[i][l] = bl[b].u[i / 4][l][i % 4];
        iq4xs_to_ggml(dst, (const unsigned char *)&k, l, 0, 256);
    }
}

/* Q6_K (ql[128], qh[64], int8 scales[16], d: 210 bytes) <-> q6_k (each six-bit
 * value widened to a byte, less 32: bc_q6k_where says where its bits lie) and
 * q6_ki (the file's ql and qh 4 bytes by 4) */
static void q6k_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                          size_t nk)
{
    bc_q6k_block *bl = (bc_q6k_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, src += 210) {
        bl[b].d[l] = rd16(src + 208);
        for (size_t j = 0; j < 16; j++)
            bl[b].sc[j][l] = (int8_t)src[192 + j];
        for (size_t w = 0; w < 256; w++) {
            const bc_q6k_at at = bc_q6k_where(w);
            const unsigned v = (unsigned)(src[at.ql] >> at.ls & 15u)
                               | (unsigned)(src[128 + at.qh] >> at.hs & 3u) << 4;
            bl[b].q[w][l] = (int8_t)((int)v - 32);
        }
    }
}

/* q6_k's from_ggml_panel: each super-block's 128 bytes of ql, 64 of qh and 16
 * scales as 16 x 16 transposes (the 16 rows' bytes side by side), then each
 * weight's six bits put together for the 16 rows at once (its place in ql and
 * qh found once, not once a row): from_ggml's bytes */
static void q6k_from_ggml_panel(unsigned char *panel, const unsigned char *src, size_t row_bytes,
                                size_t k0, size_t nk)
{
    bc_q6k_block *bl = (bc_q6k_block *)panel + k0 / 256;
    unsigned char ql[128][BC_PANEL], qh[64][BC_PANEL];
    for (size_t b = 0; b < nk / 256; b++, src += 210) {
        for (size_t l = 0; l < BC_PANEL; l++)
            bl[b].d[l] = rd16(src + l * row_bytes + 208);
        rows16_transpose((unsigned char *)&bl[b].sc[0][0], src + 192, row_bytes);
        for (size_t t = 0; t < 8; t++)
            rows16_transpose(&ql[16 * t][0], src + 16 * t, row_bytes);
        for (size_t t = 0; t < 4; t++)
            rows16_transpose(&qh[16 * t][0], src + 128 + 16 * t, row_bytes);
        for (size_t w = 0; w < 256; w++) {
            const bc_q6k_at at = bc_q6k_where(w);
            const unsigned char *lo = ql[at.ql], *hi = qh[at.qh];
            for (size_t l = 0; l < BC_PANEL; l++) {
                const unsigned v = (unsigned)(lo[l] >> at.ls & 15u)
                                   | (unsigned)(hi[l] >> at.hs & 3u) << 4;
                bl[b].q[w][l] = (int8_t)((int)v - 32);
            }
        }
    }
}

static void q6k_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                        size_t nk)
{
    const bc_q6k_block *bl = (const bc_q6k_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, dst += 210) {
        memset(dst, 0, 192);
        for (size_t w = 0; w < 256; w++) {
            const bc_q6k_at at = bc_q6k_where(w);
            const unsigned v = (unsigned)(bl[b].q[w][l] + 32) & 63u;
            dst[at.ql] |= (unsigned char)((v & 15u) << at.ls);
            dst[128 + at.qh] |= (unsigned char)((v >> 4) << at.hs);
        }
        for (size_t j = 0; j < 16; j++)
            dst[192 + j] = (unsigned char)bl[b].sc[j][l];
        wr16(dst + 208, bl[b].d[l]);
    }
}

static void q6ki_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                           size_t nk)
{
    bc_q6ki_block *bl = (bc_q6ki_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, src += 210) {
        for (size_t i = 0; i < 128; i++)
            BC_Q6KI_QL(&bl[b], i / 4)[l][i % 4] = src[i];
        for (size_t i = 0; i < 64; i++)
            BC_Q6KI_QH(&bl[b], i / 4)[l][i % 4] = src[128 + i];
        for (size_t j = 0; j < 16; j++)
            bl[b].sc[j][l] = (int8_t)src[192 + j];
        bl[b].d[l] = rd16(src + 208);
    }
}

static void q6ki_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                         size_t nk)
{
    const bc_q6ki_block *bl = (const bc_q6ki_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, dst += 210) {
        for (size_t i = 0; i < 128; i++)
            dst[i] = BC_Q6KI_QL(&bl[b], i / 4)[l][i % 4];
        for (size_t i = 0; i < 64; i++)
            dst[128 + i] = BC_Q6KI_QH(&bl[b], i / 4)[l][i % 4];
        for (size_t j = 0; j < 16; j++)
            dst[192 + j] = (unsigned char)bl[b].sc[j][l];
        wr16(dst + 208, bl[b].d[l]);
    }
}

/* ---- ggml's block types blockc moves, and Q4_0's and Q5_0's as Q8_0's ---- */

/* Q4_0 -> Q8_0: the same d, q = nibble - 8 */
static void q4_0_to_q8_0(unsigned char *q8, const unsigned char *b)
{
    memcpy(q8, b, 2);
    for (size_t j = 0; j < 16; j++) {
        q8[2 + j] = (unsigned char)(int8_t)((b[2 + j] & 15) - 8);
        q8[18 + j] = (unsigned char)(int8_t)((b[2 + j] >> 4) - 8);
    }
}

/* Q5_0 -> Q8_0: the same d, q = (nibble | fifth bit << 4) - 16 */
static void q5_0_to_q8_0(unsigned char *q8, const unsigned char *b)
{
    const uint32_t qh = rd32(b + 2);
    memcpy(q8, b, 2);
    for (size_t j = 0; j < 16; j++) {
        const int lo = (b[6 + j] & 15) | (int)((qh >> j) & 1u) << 4;
        const int hi = (b[6 + j] >> 4) | (int)((qh >> (j + 16)) & 1u) << 4;
        q8[2 + j] = (unsigned char)(int8_t)(lo - 16);
        q8[18 + j] = (unsigned char)(int8_t)(hi - 16);
    }
}

/* Q2_K (scales[16], qs[64], d, dmin: 84 bytes) <-> q2_k (the same bytes, interleaved) */
static void q2k_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                          size_t nk)
{
    bc_q2k_block *bl = (bc_q2k_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, src += 84) {
        for (size_t j = 0; j < 16; j++)
            bl[b].sc[j][l] = src[j];
        for (size_t i = 0; i < 64; i++)
            bl[b].q[i][l] = src[16 + i];
        bl[b].d[l] = rd16(src + 80);
        bl[b].dmin[l] = rd16(src + 82);
    }
}

static void q2k_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                        size_t nk)
{
    const bc_q2k_block *bl = (const bc_q2k_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, dst += 84) {
        for (size_t j = 0; j < 16; j++)
            dst[j] = bl[b].sc[j][l];
        for (size_t i = 0; i < 64; i++)
            dst[16 + i] = bl[b].q[i][l];
        wr16(dst + 80, bl[b].d[l]);
        wr16(dst + 82, bl[b].dmin[l]);
    }
}

/* Q3_K (hmask[32], qs[64], scales[12], d: 110 bytes) <-> q3_k: sub-block j's 6-bit
 * scale s, its low four bits nibble j / 8 of scales[j % 8], its high two bits 2 (j /
 * 4) of scales[8 + j % 4], as the signed byte s - 32 */
static void q3k_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                          size_t nk)
{
    bc_q3k_block *bl = (bc_q3k_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, src += 110) {
        for (size_t i = 0; i < 32; i++)
            bl[b].hm[i][l] = src[i];
        for (size_t i = 0; i < 64; i++)
            bl[b].q[i][l] = src[32 + i];
        for (size_t j = 0; j < 16; j++) {
            const unsigned v = (unsigned)(src[96 + j % 8] >> (4 * (j / 8)) & 15u)
                               | (unsigned)(src[104 + j % 4] >> (2 * (j / 4)) & 3u) << 4;
            bl[b].sc[j][l] = (int8_t)((int)v - 32);
        }
        bl[b].d[l] = rd16(src + 108);
    }
}

static void q3k_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                        size_t nk)
{
    const bc_q3k_block *bl = (const bc_q3k_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, dst += 110) {
        for (size_t i = 0; i < 32; i++)
            dst[i] = bl[b].hm[i][l];
        for (size_t i = 0; i < 64; i++)
            dst[32 + i] = bl[b].q[i][l];
        memset(dst + 96, 0, 12);
        for (size_t j = 0; j < 16; j++) {
            const unsigned v = (unsigned)(bl[b].sc[j][l] + 32) & 63u;
            dst[96 + j % 8] |= (unsigned char)((v & 15u) << (4 * (j / 8)));
            dst[104 + j % 4] |= (unsigned char)((v >> 4) << (2 * (j / 4)));
        }
        wr16(dst + 108, bl[b].d[l]);
    }
}

/* Q2_K <-> q2_ki and Q3_K <-> q3_ki (through q2_k's / q3_k's block of the row: the same bits) */
static void q2ki_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                           size_t nk)
{
    bc_q2ki_block *bl = (bc_q2ki_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, src += 84) {
        bc_q2k_block k;
        q2k_from_ggml((unsigned char *)&k, src, l, 0, 256);
        q2ki_from_q2k(bl + b, &k, l);
    }
}

static void q2ki_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                         size_t nk)
{
    const bc_q2ki_block *bl = (const bc_q2ki_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, dst += 84) {
        bc_q2k_block k;
        q2k_from_q2ki(&k, bl + b, l);
        q2k_to_ggml(dst, (const unsigned char *)&k, l, 0, 256);
    }
}

static void q3ki_from_ggml(unsigned char *panel, const unsigned char *src, size_t l, size_t k0,
                           size_t nk)
{
    bc_q3ki_block *bl = (bc_q3ki_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, src += 110) {
        bc_q3k_block k;
        q3k_from_ggml((unsigned char *)&k, src, l, 0, 256);
        q3ki_from_q3k(bl + b, &k, l);
    }
}

static void q3ki_to_ggml(unsigned char *dst, const unsigned char *panel, size_t l, size_t k0,
                         size_t nk)
{
    const bc_q3ki_block *bl = (const bc_q3ki_block *)panel + k0 / 256;
    for (size_t b = 0; b < nk / 256; b++, dst += 110) {
        bc_q3k_block k;
        q3k_from_q3ki(&k, bl + b, l);
        q3k_to_ggml(dst, (const unsigned char *)&k, l, 0, 256);
    }
}

static const bc_ggml ggml_types[] = {
    {BC_GGML_F32, 1, 4, NULL},        {BC_GGML_F16, 1, 2, NULL},
    {BC_GGML_Q4_0, 32, 18, q4_0_to_q8_0}, {BC_GGML_Q5_0, 32, 22, q5_0_to_q8_0},
    {BC_GGML_Q8_0, 32, 34, NULL},     {BC_GGML_Q4_K, 256, 144, NULL},
    {BC_GGML_Q6_K, 256, 210, NULL},   {BC_GGML_BF16, 1, 2, NULL},
    {BC_GGML_Q4_1, 32, 20, NULL},     {BC_GGML_Q5_1, 32, 24, NULL},
    {BC_GGML_Q5_K, 256, 176, NULL},
    {BC_GGML_IQ4_NL, 32, 18, NULL},   {BC_GGML_IQ4_XS, 256, 136, NULL},
    {BC_GGML_Q2_K, 256, 84, NULL},    {BC_GGML_Q3_K, 256, 110, NULL},
};

const bc_ggml *bc_ggml_of(int type)
{
    for (size_t i = 0; i < sizeof ggml_types / sizeof ggml_types[0]; i++)
        if (ggml_types[i].type == type)
            return &ggml_types[i];
    return NULL;
}

/* ---- the table, indexed by BC_DTYPE_* ------------------------------------ */

/* what check refuses, in words */
#define LIMIT_Q8 "finite weights of magnitude <= 65504 * 127 (the block scale is a half)"
#define LIMIT_Q4 "finite weights of magnitude <= 65504 * 8 (the block scale is a half)"
#define LIMIT_Q5 "finite weights of magnitude <= 65504 * 16 (the block scale is a half)"
#define LIMIT_K "finite weights of magnitude <= 65504 * 8 (the super-block scales are halves)"
#define LIMIT_IQ4XS "finite weights of magnitude <= 65504 * 127 (the super-block scale is a half)"
#define LIMIT_Q1 "finite weights of magnitude <= 65504 (the block's minimum is a half)"
#define LIMIT_F16 \
    "finite weights of magnitude <= 65504 (the largest half; larger ones are refused, not made " \
    "infinite)"

static const bc_format formats[BC_NDTYPE] = {
    [BC_DTYPE_F32] = {.name = "float32", .block = 1, .block_bytes = 4, .pack = f32_pack,
                      .unpack_row = f32_unpack_row, .ggml_type = BC_GGML_F32,
                      .from_ggml = f32_from_ggml, .to_ggml = f32_to_ggml},
    [BC_DTYPE_BF16] = {.name = "bfloat16", .block = 1, .block_bytes = 2, .pack = bf16_pack,
                       .unpack_row = bf16_unpack_row, .group = BC_HALF_GROUP,
                       .ggml_type = BC_GGML_BF16, .from_ggml = half_from_ggml,
                       .to_ggml = half_to_ggml},
    [BC_DTYPE_Q8_0] = {.name = "q8_0", .block = 32, .block_bytes = 34, .check = q8_check,
                       .pack = q8_pack, .unpack_row = q8_unpack_row, .ggml_type = BC_GGML_Q8_0,
                       .limit = LIMIT_Q8, .from_ggml = q8_from_ggml, .to_ggml = q8_to_ggml,
                       .from_ggml_panel = q8_from_ggml_panel},
    [BC_DTYPE_Q4_0] = {.name = "q4_0", .block = 32, .block_bytes = 18, .check = q4_check,
                       .pack = q4_pack, .unpack_row = q4_unpack_row, .ggml_type = BC_GGML_Q4_0,
                       .limit = LIMIT_Q4, .from_ggml = q4_from_ggml, .to_ggml = q4_to_ggml,
                       .from_ggml_panel = q4_from_ggml_panel},
    [BC_DTYPE_F16] = {.name = "float16", .block = 1, .block_bytes = 2, .check = f16_check,
                      .pack = f16_pack, .unpack_row = f16_unpack_row, .group = BC_HALF_GROUP,
                      .ggml_type = BC_GGML_F16, .limit = LIMIT_F16, .from_ggml = half_from_ggml,
                      .to_ggml = half_to_ggml},
    [BC_DTYPE_Q5_0] = {.name = "q5_0", .block = 32, .block_bytes = 22, .check = q5_check,
                       .pack = q5_pack, .unpack_row = q5_unpack_row, .ggml_type = BC_GGML_Q5_0,
                       .limit = LIMIT_Q5, .from_ggml = q5_from_ggml, .to_ggml = q5_to_ggml},
    [BC_DTYPE_Q8_0I] = {.name = "q8_0i", .block = 32, .block_bytes = 34, .check = q8_check,
                        .pack = q8i_pack, .unpack_row = q8i_unpack_row,
                        .max_cols = BC_Q8_0I_MAX_COLS, .group = BC_INTDOT_GROUP,
                        .ggml_type = BC_GGML_Q8_0, .integer = 1, .limit = LIMIT_Q8,
                        .from_ggml = q8i_from_ggml, .to_ggml = q8i_to_ggml},
    [BC_DTYPE_Q4_0I] = {.name = "q4_0i", .block = 32, .block_bytes = 18, .check = q4_check,
                        .pack = q4i_pack, .unpack_row = q4i_unpack_row,
                        .max_cols = BC_Q8_0I_MAX_COLS, .group = BC_INTDOT_GROUP,
                        .ggml_type = BC_GGML_Q4_0, .integer = 1, .limit = LIMIT_Q4,
                        .from_ggml = q4i_from_ggml, .to_ggml = q4i_to_ggml},
    /* (bfloat16's weights with subnormals flushed: no ggml type's very bits) */
    [BC_DTYPE_BF16I] = {.name = "bfloat16i", .block = 2, .block_bytes = 4, .pack = bf16i_pack,
                        .unpack_row = bf16i_unpack_row, .max_cols = BC_Q8_0I_MAX_COLS,
                        .group = BC_BF16I_GROUP, .ggml_type = BC_GGML_NONE},
    [BC_DTYPE_Q5_0I] = {.name = "q5_0i", .block = 32, .block_bytes = 22, .check = q5_check,
                        .pack = q5i_pack, .unpack_row = q5i_unpack_row,
                        .max_cols = BC_Q8_0I_MAX_COLS, .group = BC_INTDOT_GROUP,
                        .ggml_type = BC_GGML_Q5_0, .integer = 1, .limit = LIMIT_Q5,
                        .from_ggml = q5i_from_ggml, .to_ggml = q5i_to_ggml},
    [BC_DTYPE_Q4_K] = {.name = "q4_k", .block = 256, .block_bytes = 148, .check = q4_check,
                       .pack = q4k_pack, .unpack_row = q4k_unpack_row, .whole = 1,
                       .ggml_type = BC_GGML_Q4_K, .limit = LIMIT_K, .from_ggml = q4k_from_ggml,
                       .to_ggml = q4k_to_ggml,
                       .from_ggml_panel = q4k_from_ggml_panel},
    [BC_DTYPE_Q6_K] = {.name = "q6_k", .block = 256, .block_bytes = 274, .check = q4_check,
                       .pack = q6k_pack, .unpack_row = q6k_unpack_row, .whole = 1,
                       .ggml_type = BC_GGML_Q6_K, .limit = LIMIT_K, .from_ggml = q6k_from_ggml,
                       .to_ggml = q6k_to_ggml, .from_ggml_panel = q6k_from_ggml_panel},
    [BC_DTYPE_Q4_KI] = {.name = "q4_ki", .block = 256, .block_bytes = 148, .check = q4_check,
                        .pack = q4ki_pack, .unpack_row = q4ki_unpack_row,
                        .max_cols = BC_Q8_0I_MAX_COLS, .whole = 1, .group = BC_INTDOT_GROUP,
                        .ggml_type = BC_GGML_Q4_K, .integer = 1, .limit = LIMIT_K,
                        .from_ggml = q4ki_from_ggml, .to_ggml = q4ki_to_ggml},
    [BC_DTYPE_Q6_KI] = {.name = "q6_ki", .block = 256, .block_bytes = 210, .check = q4_check,
                        .pack = q6ki_pack, .unpack_row = q6ki_unpack_row,
                        .max_cols = BC_Q8_0I_MAX_COLS, .whole = 1, .group = BC_INTDOT_GROUP,
                        .ggml_type = BC_GGML_Q6_K, .integer = 1, .limit = LIMIT_K,
                        .from_ggml = q6ki_from_ggml, .to_ggml = q6ki_to_ggml},
    [BC_DTYPE_Q4_1] = {.name = "q4_1", .block = 32, .block_bytes = 20, .check = f16_check,
                       .pack = q41_pack, .unpack_row = q41_unpack_row, .ggml_type = BC_GGML_Q4_1,
                       .limit = LIMIT_Q1, .from_ggml = q41_from_ggml, .to_ggml = q41_to_ggml},
    [BC_DTYPE_Q5_1] = {.name = "q5_1", .block = 32, .block_bytes = 24, .check = f16_check,
                       .pack = q51_pack, .unpack_row = q51_unpack_row, .ggml_type = BC_GGML_Q5_1,
                       .limit = LIMIT_Q1, .from_ggml = q51_from_ggml, .to_ggml = q51_to_ggml},
    [BC_DTYPE_Q5_K] = {.name = "q5_k", .block = 256, .block_bytes = 180, .check = q4_check,
                       .pack = q5k_pack, .unpack_row = q5k_unpack_row, .whole = 1,
                       .ggml_type = BC_GGML_Q5_K, .limit = LIMIT_K, .from_ggml = q5k_from_ggml,
                       .to_ggml = q5k_to_ggml},
    [BC_DTYPE_IQ4_NL] = {.name = "iq4_nl", .block = 32, .block_bytes = 18, .check = q8_check,
                         .pack = iq4nl_pack, .unpack_row = iq4nl_unpack_row,
                         .ggml_type = BC_GGML_IQ4_NL, .limit = LIMIT_Q8,
                         .from_ggml = q4_from_ggml, .to_ggml = q4_to_ggml,
                         .from_ggml_panel = q4_from_ggml_panel},
    [BC_DTYPE_IQ4_XS] = {.name = "iq4_xs", .block = 256, .block_bytes = 138, .check = q8_check,
                         .pack = iq4xs_pack, .unpack_row = iq4xs_unpack_row, .whole = 1,
                         .ggml_type = BC_GGML_IQ4_XS, .limit = LIMIT_IQ4XS,
                         .from_ggml = iq4xs_from_ggml, .to_ggml = iq4xs_to_ggml},
    [BC_DTYPE_Q2_K] = {.name = "q2_k", .block = 256, .block_bytes = 84, .check = q4_check,
                       .pack = q2k_pack, .unpack_row = q2k_unpack_row, .whole = 1,
                       .ggml_type = BC_GGML_Q2_K, .limit = LIMIT_K, .from_ggml = q2k_from_ggml,
                       .to_ggml = q2k_to_ggml},
    [BC_DTYPE_Q3_K] = {.name = "q3_k", .block = 256, .block_bytes = 114, .check = q4_check,
                       .pack = q3k_pack, .unpack_row = q3k_unpack_row, .whole = 1,
                       .ggml_type = BC_GGML_Q3_K, .limit = LIMIT_K, .from_ggml = q3k_from_ggml,
                       .to_ggml = q3k_to_ggml},
    [BC_DTYPE_Q5_KI] = {.name = "q5_ki", .block = 256, .block_bytes = 180, .check = q4_check,
                        .pack = q5ki_pack, .unpack_row = q5ki_unpack_row,
                        .max_cols = BC_Q8_0I_MAX_COLS, .whole = 1, .group = BC_INTDOT_GROUP,
                        .ggml_type = BC_GGML_Q5_K, .integer = 1, .limit = LIMIT_K,
                        .from_ggml = q5ki_from_ggml, .to_ggml = q5ki_to_ggml},
    /* (IQ4_NL's blocks move as Q4_0's: the same bytes) */
    [BC_DTYPE_IQ4_NLI] = {.name = "iq4_nli", .block = 32, .block_bytes = 18, .check = q8_check,
                          .pack = iq4nli_pack, .unpack_row = iq4nli_unpack_row,
                          .max_cols = BC_Q8_0I_MAX_COLS, .group = BC_INTDOT_GROUP,
                          .ggml_type = BC_GGML_IQ4_NL, .integer = 1, .limit = LIMIT_Q8,
                          .from_ggml = q4i_from_ggml, .to_ggml = q4i_to_ggml},
    [BC_DTYPE_IQ4_XSI] = {.name = "iq4_xsi", .block = 256, .block_bytes = 138,
                          .check = q8_check, .pack = iq4xsi_pack,
                          .unpack_row = iq4xsi_unpack_row, .max_cols = BC_Q8_0I_MAX_COLS,
                          .whole = 1, .group = BC_INTDOT_GROUP, .ggml_type = BC_GGML_IQ4_XS,
                          .integer = 1, .limit = LIMIT_IQ4XS, .from_ggml = iq4xsi_from_ggml,
                          .to_ggml = iq4xsi_to_ggml},
    [BC_DTYPE_Q4_1I] = {.name = "q4_1i", .block = 32, .block_bytes = 20, .check = f16_check,
                         .pack = q41i_pack, .unpack_row = q41i_unpack_row,
                         .max_cols = BC_Q8_0I_MAX_COLS, .group = BC_INTDOT_GROUP,
                         .ggml_type = BC_GGML_Q4_1, .integer = 1, .limit = LIMIT_Q1,
                         .from_ggml = q41i_from_ggml, .to_ggml = q41i_to_ggml},
    [BC_DTYPE_Q5_1I] = {.name = "q5_1i", .block = 32, .block_bytes = 24, .check = f16_check,
                         .pack = q51i_pack, .unpack_row = q51i_unpack_row,
                         .max_cols = BC_Q8_0I_MAX_COLS, .group = BC_INTDOT_GROUP,
                         .ggml_type = BC_GGML_Q5_1, .integer = 1, .limit = LIMIT_Q1,
                         .from_ggml = q51i_from_ggml, .to_ggml = q51i_to_ggml},
    [BC_DTYPE_Q2_KI] = {.name = "q2_ki", .block = 256, .block_bytes = 84, .check = q4_check,
                        .pack = q2ki_pack, .unpack_row = q2ki_unpack_row,
                        .max_cols = BC_Q8_0I_MAX_COLS, .whole = 1, .group = BC_INTDOT_GROUP,
                        .ggml_type = BC_GGML_Q2_K, .integer = 1, .limit = LIMIT_K,
                        .from_ggml = q2ki_from_ggml, .to_ggml = q2ki_to_ggml},
    [BC_DTYPE_Q3_KI] = {.name = "q3_ki", .block = 256, .block_bytes = 114, .check = q4_check,
                        .pack = q3ki_pack, .unpack_row = q3ki_unpack_row,
                        .max_cols = BC_Q8_0I_MAX_COLS, .whole = 1, .group = BC_INTDOT_GROUP,
                        .ggml_type = BC_GGML_Q3_K, .integer = 1, .limit = LIMIT_K,
                        .from_ggml = q3ki_from_ggml, .to_ggml = q3ki_to_ggml},
};

/* (a value below BC_NDTYPE may have no row yet: its name is NULL) */
const bc_format *bc_format_of(int dtype)
{
    return dtype >= 0 && dtype < BC_NDTYPE && formats[dtype].name ? &formats[dtype] : NULL;
}

/* ---- a quantised KV cache's rows and key tiles (bc_format.h) ------------- */

/* One block of 32 values, saturated, quantised: scale into *d, q[k * stride] (q8_0:
 * int8 value k; q4_0: byte k < 16, value k low and k + 16 high); a NaN: a NaN scale. */
static void kvq_block(uint16_t *d, unsigned char *q, size_t stride, const float *x, int dtype)
{
    const int q8 = dtype == BC_DTYPE_Q8_0;
    const float top = q8 ? Q8_MAX_ABS : Q4_MAX_ABS;
    float w[BC_KVQ_BLOCK];
    int nan = 0;
    for (size_t k = 0; k < BC_KVQ_BLOCK; k++) {
        const float f = x[k];
        nan |= f != f;
        w[k] = f > top ? top : f < -top ? -top : f;
    }
    if (nan) {
        *d = 0x7e00u;  /* the block reads back NaN */
        for (size_t k = 0; k < (q8 ? 32u : 16u); k++)
            q[k * stride] = q8 ? 0 : 0x88;
    } else if (q8) {
        q8_block(d, (int8_t *)q, stride, w, BC_KVQ_BLOCK);
    } else {
        q4_block(d, q, stride, w, BC_KVQ_BLOCK);
    }
}

void bc_kvq_row(unsigned char *dst, const float *x, size_t n, int dtype)
{
    const size_t bb = bc_kvq_block_bytes(dtype);
    for (size_t b = 0; b < n; b += BC_KVQ_BLOCK, dst += bb) {
        uint16_t d;
        kvq_block(&d, dst + 2, 1, x + b, dtype);
        memcpy(dst, &d, sizeof d);  /* little-endian, as ggml's files */
    }
}

void bc_kvq_key(unsigned char *tile, size_t j, const float *x, size_t dh, int dtype)
{
    const size_t nb = dh / BC_KVQ_BLOCK, bk = BC_ATT_BK;
    unsigned char *q = tile + nb * bk * sizeof(uint16_t);
    const size_t rows = dtype == BC_DTYPE_Q8_0 ? BC_KVQ_BLOCK : BC_KVQ_BLOCK / 2;
    for (size_t b = 0; b < nb; b++) {
        uint16_t d;
        kvq_block(&d, q + (b * rows) * bk + j, bk, x + b * BC_KVQ_BLOCK, dtype);
        memcpy(tile + (b * bk + j) * sizeof(uint16_t), &d, sizeof d);
    }
}
