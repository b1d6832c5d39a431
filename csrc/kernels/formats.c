/* formats.c: the weight formats' table (bc_format.h): for each, its sizes, the
 * check of the weights it can hold, packing (quantising) a panel from float32
 * and unpacking (dequantising) a row. Load-time work, in plain C; the
 * kernels that compute on each format are in fast_formats.h.
 *
 * q4_0 and q5_0 are llama.cpp's reference quantisers (below).
 * bfloat16 and float16 round to nearest even (float16 refuses what a half
 * cannot hold: no infinities made). q8_0 is llama.cpp's rule, block by block
 * of 32 weights of one row: d = max|w| / 127, q = round(w / d) (half away from
 * zero) computed as round(w * (1/d)), d stored as an IEEE half; the weight is
 * then half(d) * q. q8_0i holds the same d and q, laid out for integer dot
 * products. */
#include <math.h>

#include "bc_core.h"
#include "bc_format.h"
#include "bc_half.h"

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

/* ---- q8_0i: q8_0's blocks, each row's weights 4 by 4 (bc_q8i_block) ------- */

static int q8i_check(const float *w, size_t rs, size_t cs, size_t rows, size_t cols)
{
    return cols > BC_Q8_0I_MAX_COLS ? BC_ESIZE : q8_check(w, rs, cs, rows, cols);
}

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

/* ---- the table, indexed by BC_DTYPE_* ------------------------------------ */

static const bc_format formats[BC_NDTYPE] = {
    [BC_DTYPE_F32] = {"float32", 1, 4, NULL, f32_pack, f32_unpack_row},
    [BC_DTYPE_BF16] = {"bfloat16", 1, 2, NULL, bf16_pack, bf16_unpack_row},
    [BC_DTYPE_Q8_0] = {"q8_0", 32, 34, q8_check, q8_pack, q8_unpack_row},
    [BC_DTYPE_Q4_0] = {"q4_0", 32, 18, q4_check, q4_pack, q4_unpack_row},
    [BC_DTYPE_F16] = {"float16", 1, 2, f16_check, f16_pack, f16_unpack_row},
    [BC_DTYPE_Q5_0] = {"q5_0", 32, 22, q5_check, q5_pack, q5_unpack_row},
    [BC_DTYPE_Q8_0I] = {"q8_0i", 32, 34, q8i_check, q8i_pack, q8i_unpack_row, BC_Q8_0I_MAX_COLS},
};

/* (a value below BC_NDTYPE may have no row yet: its name is NULL) */
const bc_format *bc_format_of(int dtype)
{
    return dtype >= 0 && dtype < BC_NDTYPE && formats[dtype].name ? &formats[dtype] : NULL;
}
