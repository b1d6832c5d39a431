/* pack.c: packed weight matrices (bc_engine.h): their sizes, packing
 * (quantising), unpacking, one row of one, and the linear on them.
 *
 * q8_0 is llama.cpp's rule, block by block of 32 weights of one row:
 * d = max|w| / 127, q = round(w / d) (half away from zero) computed as
 * round(w * (1/d)), d stored as an IEEE half; the weight is then half(d) * q.
 * bfloat16 rounds to nearest even. Packing is load-time work, in plain C. */
#include <math.h>
#include <string.h>

#include "bc_check.h"
#include "bc_engine.h"
#include "bc_half.h"
#include "bc_pack.h"
#include "kernels.h"  /* bc_dispatch.h: the q8_0 block */

#define PW BC_PANEL

int bc_packed_bytes(size_t *out, int dtype, size_t rows, size_t cols)
{
    size_t elems;
    int st;
    if (dtype != BC_DTYPE_F32 && dtype != BC_DTYPE_BF16 && dtype != BC_DTYPE_Q8_0)
        return BC_EOPTION;
    if (rows > (size_t)BC_MAX_ELEMENTS || cols > (size_t)BC_MAX_ELEMENTS)
        return BC_EOVERFLOW;
    /* rows padded to whole panels, q8_0 columns to whole blocks */
    const size_t prow = (rows + PW - 1) / PW * PW;
    const size_t pcol = dtype == BC_DTYPE_Q8_0 ? (cols + 31) / 32 * 32 : cols;
    if ((st = bc_mul(&elems, prow, pcol)))
        return st;
    *out = dtype == BC_DTYPE_F32 ? elems * 4 : dtype == BC_DTYPE_BF16 ? elems * 2 : elems / 32 * 34;
    return BC_OK;
}

int bc_pack_size(size_t *bytes, int dtype, size_t rows, size_t cols)
{
    if (!bytes)
        return BC_ENULL;
    if (!rows || !cols)
        return BC_ESIZE;
    return bc_packed_bytes(bytes, dtype, rows, cols);
}

/* 1 if byte ranges [a, a+na) and [b, b+nb) overlap. */
static int overlap_bytes(const void *a, size_t na, const void *b, size_t nb)
{
    if (!a || !b || !na || !nb)
        return 0;
    const uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return pa < pb + nb && pb < pa + na;
}

/* The checks shared by the entry points: sizes, the buffer's size, overlap. */
static int check_packed(size_t *need, const void *packed, size_t packed_bytes_, int dtype,
                        size_t rows, size_t cols)
{
    int st;
    if (!rows || !cols)
        return BC_ESIZE;
    if ((st = bc_packed_bytes(need, dtype, rows, cols)))
        return st;
    if (packed_bytes_ < *need)
        return BC_EWORKSPACE;
    (void)packed;
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

/* A finite weight's q8_0 scale fits a half: |w| <= 65504 * 127. */
#define Q8_MAX_ABS 8319008.0f

/* w(r, c) = w[r * rs + c * cs]: element by element in the order that reads w
 * contiguously (rows side by side for a transposed w, cs > rs). */
#define W(r, c) w[(r) * rs + (c) * cs]

int bc_pack_strided(void *out, size_t out_bytes, const float *w, size_t rs, size_t cs,
                    int dtype, size_t rows, size_t cols)
{
    size_t need, last, t;
    int st;
    if (!out || !w)
        return BC_ENULL;
    if ((st = check_packed(&need, out, out_bytes, dtype, rows, cols)))
        return st;
    /* the floats w spans: (rows - 1) rs + (cols - 1) cs + 1 */
    if ((st = bc_mul(&last, rows - 1, rs)) || (st = bc_mul(&t, cols - 1, cs))
        || (st = bc_add(&last, last, t)) || (st = bc_add(&last, last, 1)))
        return st;
    if (overlap_bytes(out, need, w, last * sizeof(float)))
        return BC_EALIAS;
    if (dtype == BC_DTYPE_Q8_0)
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++)
                if (!(fabsf(W(r, c)) <= Q8_MAX_ABS))  /* NaN fails too */
                    return BC_EVALUE;
    const size_t panels = (rows + PW - 1) / PW, pbytes = need / panels;
    const int by_rows = cs > rs;  /* a transposed w: the PW rows of a column are adjacent */
    unsigned char *o = out;
    memset(out, 0, need);
    for (size_t p = 0; p < panels; p++) {
        unsigned char *panel = o + p * pbytes;
        const size_t nl = rows - p * PW < PW ? rows - p * PW : PW, r0 = p * PW;
        if (dtype == BC_DTYPE_F32) {
            float *f = (float *)panel;
            if (by_rows)
                for (size_t k = 0; k < cols; k++)
                    for (size_t l = 0; l < nl; l++)
                        f[k * PW + l] = W(r0 + l, k);
            else
                for (size_t l = 0; l < nl; l++)
                    for (size_t k = 0; k < cols; k++)
                        f[k * PW + l] = W(r0 + l, k);
        } else if (dtype == BC_DTYPE_BF16) {
            uint16_t *h = (uint16_t *)panel;
            if (by_rows)
                for (size_t k = 0; k < cols; k++)
                    for (size_t l = 0; l < nl; l++)
                        h[k * PW + l] = bc_f32_to_bf16(W(r0 + l, k));
            else
                for (size_t l = 0; l < nl; l++)
                    for (size_t k = 0; k < cols; k++)
                        h[k * PW + l] = bc_f32_to_bf16(W(r0 + l, k));
        } else {
            bc_q8_block *bl = (bc_q8_block *)panel;
            for (size_t k0 = 0; k0 < cols; k0 += 32, bl++) {
                const size_t nk = cols - k0 < 32 ? cols - k0 : 32;
                float tile[PW][32];
                if (by_rows)
                    for (size_t k = 0; k < nk; k++)
                        for (size_t l = 0; l < nl; l++)
                            tile[l][k] = W(r0 + l, k0 + k);
                else
                    for (size_t l = 0; l < nl; l++)
                        for (size_t k = 0; k < nk; k++)
                            tile[l][k] = W(r0 + l, k0 + k);
                for (size_t l = 0; l < nl; l++)
                    q8_block(&bl->d[l], &bl->q[0][l], PW, tile[l], nk);
            }
        }
    }
    return BC_OK;
}

#undef W

int bc_pack(void *out, size_t out_bytes, const float *w, int dtype, size_t rows, size_t cols)
{
    return bc_pack_strided(out, out_bytes, w, cols, 1, dtype, rows, cols);
}

void bc_packed_row(float *out, const void *packed, int dtype, size_t rows, size_t cols, size_t o)
{
    size_t need = 0;
    bc_packed_bytes(&need, dtype, rows, cols);
    const size_t pbytes = need / ((rows + PW - 1) / PW), l = o % PW;
    const unsigned char *panel = (const unsigned char *)packed + (o / PW) * pbytes;
    if (dtype == BC_DTYPE_F32) {
        const float *f = (const float *)panel;
        for (size_t k = 0; k < cols; k++)
            out[k] = f[k * PW + l];
    } else if (dtype == BC_DTYPE_BF16) {
        const uint16_t *h = (const uint16_t *)panel;
        for (size_t k = 0; k < cols; k++)
            out[k] = bc_bf16_to_f32(h[k * PW + l]);
    } else {
        const bc_q8_block *bl = (const bc_q8_block *)panel;
        for (size_t k = 0; k < cols; k++) {
            const bc_q8_block *b = bl + k / 32;
            out[k] = bc_half_to_f32(b->d[l]) * (float)b->q[k % 32][l];
        }
    }
}

int bc_unpack(float *out, const void *packed, size_t packed_bytes_, int dtype, size_t rows,
              size_t cols)
{
    size_t need, nw;
    int st;
    if (!out || !packed)
        return BC_ENULL;
    if ((st = check_packed(&need, packed, packed_bytes_, dtype, rows, cols))
        || (st = bc_mul(&nw, rows, cols)))
        return st;
    if (overlap_bytes(out, nw * sizeof(float), packed, need))
        return BC_EALIAS;
    for (size_t o = 0; o < rows; o++)
        bc_packed_row(out + o * cols, packed, dtype, rows, cols, o);
    return BC_OK;
}

// y (N,OC), x (N,C), w (OC,C) packed as dtype, b (OC) or NULL
int bc_linear_packed(float *y, const float *x, const void *w, size_t w_bytes, int dtype,
                     const float *b, size_t n, size_t c, size_t oc)
{
    size_t need, nx, ny;
    int st;
    if (!y || !x || !w)
        return BC_ENULL;
    if (!n)
        return BC_ESIZE;
    if ((st = check_packed(&need, w, w_bytes, dtype, oc, c)) || (st = bc_mul(&nx, n, c))
        || (st = bc_mul(&ny, n, oc)))
        return st;
    if (bc_overlap(y, ny, x, nx) || overlap_bytes(y, ny * sizeof(float), w, need)
        || bc_overlap(y, ny, b, oc))
        return BC_EALIAS;
    bc_ctx cx;
    if ((st = bc_rt_ctx(&cx, 0)))
        return st;
    bc_k_linear(y, x, w, BC_WF_PANEL_F32 + dtype, b, NULL, n, c, oc, BC_ACT_NONE, &cx);
    return BC_OK;
}
