/* pack.c: packed weight matrices (bc_engine.h): their sizes, packing
 * (quantising), unpacking, one row of one, and the linear on them, written
 * once over the formats' table (bc_format.h): what a format stores and how
 * is its row there. Packing is load-time work, in plain C, spread over the
 * thread pool a panel at a time. */
#include <math.h>
#include <string.h>

#include "bc_check.h"
#include "bc_engine.h"
#include "bc_format.h"
#include "bc_pack.h"
#include "bc_rt.h"
#include "bc_parallel.h"

#define PW BC_PANEL

int bc_packed_bytes(size_t *out, int dtype, size_t rows, size_t cols)
{
    const bc_format *f = bc_format_of(dtype);
    size_t elems;
    int st;
    if (!f)
        return BC_EOPTION;
    if (rows > (size_t)BC_MAX_ELEMENTS || cols > (size_t)BC_MAX_ELEMENTS)
        return BC_EOVERFLOW;
    if ((f->max_cols && cols > f->max_cols) || (f->whole && cols % f->block))
        return BC_ESIZE;
    /* rows padded to whole panels, columns to whole blocks */
    const size_t prow = (rows + PW - 1) / PW * PW;
    const size_t pcol = (cols + f->block - 1) / f->block * f->block;
    if ((st = bc_mul(&elems, prow, pcol)))
        return st;
    *out = elems / f->block * f->block_bytes;
    return BC_OK;
}

int bc_dtype_info(char *name, size_t name_cap, size_t *block, size_t *block_bytes, int dtype)
{
    const bc_format *f = bc_format_of(dtype);
    if (!f)
        return BC_EOPTION;
    const size_t len = strlen(f->name);
    if (name && name_cap <= len)
        return BC_ESIZE;
    if (name)
        memcpy(name, f->name, len + 1);
    if (block)
        *block = f->block;
    if (block_bytes)
        *block_bytes = f->block_bytes;
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

/* w(r, c) = w[r * rs + c * cs]: element by element in the order that reads w
 * contiguously (rows side by side for a transposed w, cs > rs). */
#define W(r, c) w[(r) * rs + (c) * cs]

typedef struct {
    unsigned char *out;
    size_t pbytes;            /* bytes of one panel */
    const float *w;
    size_t rs, cs, rows, cols;
    const bc_format *f;
    int by_rows;              /* a transposed w: the PW rows of a column are adjacent */
} pack_job;

/* Bytes of a chunk's blocks of one panel, for any format (at most 4 bytes a
 * weight: float32's). */
#define CHUNK_PANEL_BYTES (BC_FORMAT_CHUNK * 4 * PW)

/* The chunk of columns k0.. of a panel of a grouped format, its blocks side by
 * side at chunk, to or from their places in the matrix (at: bc_format_panel_at) */
static void chunk_scatter(unsigned char *m, const unsigned char *chunk, const bc_format *f,
                          bc_panel_at at, size_t k0, size_t nk)
{
    const size_t bb = f->block_bytes * PW, b0 = k0 / f->block;
    for (size_t b = 0; b < (nk + f->block - 1) / f->block; b++)
        memcpy(m + at.origin + (b0 + b) * at.stride, chunk + b * bb, bb);
}

static void chunk_gather(unsigned char *chunk, const unsigned char *m, const bc_format *f,
                         bc_panel_at at, size_t k0, size_t nk)
{
    const size_t bb = f->block_bytes * PW, b0 = k0 / f->block;
    for (size_t b = 0; b < (nk + f->block - 1) / f->block; b++)
        memcpy(chunk + b * bb, m + at.origin + (b0 + b) * at.stride, bb);
}

/* panel p of job->out (zeroed, then packed chunk by chunk) from rows 16p.. of w;
 * a grouped format's chunk by chunk through a zeroed copy, then to its places */
static void pack_panel(const void *arg, size_t p, int thread)
{
    const pack_job *j = arg;
    const float *w = j->w;
    const size_t rs = j->rs, cs = j->cs, cols = j->cols;
    const int grouped = j->f->group > 1;
    const bc_panel_at at = bc_format_panel_at(j->f, cols, (j->rows + PW - 1) / PW, p);
    unsigned char *panel = j->out + p * j->pbytes;
    const size_t nl = j->rows - p * PW < PW ? j->rows - p * PW : PW, r0 = p * PW;
    _Alignas(64) unsigned char chunk[CHUNK_PANEL_BYTES];
    (void)thread;
    if (!grouped)
        memset(panel, 0, j->pbytes);
    for (size_t k0 = 0; k0 < cols; k0 += BC_FORMAT_CHUNK) {
        const size_t nk = cols - k0 < BC_FORMAT_CHUNK ? cols - k0 : BC_FORMAT_CHUNK;
        float tile[PW][BC_FORMAT_CHUNK];
        if (j->by_rows)
            for (size_t k = 0; k < nk; k++)
                for (size_t l = 0; l < nl; l++)
                    tile[l][k] = W(r0 + l, k0 + k);
        else
            for (size_t l = 0; l < nl; l++)
                for (size_t k = 0; k < nk; k++)
                    tile[l][k] = W(r0 + l, k0 + k);
        if (grouped) {
            memset(chunk, 0, sizeof chunk);
            j->f->pack(chunk, &tile[0][0], BC_FORMAT_CHUNK, nl, 0, nk, nk);
            chunk_scatter(j->out, chunk, j->f, at, k0, nk);
        } else {
            j->f->pack(panel, &tile[0][0], BC_FORMAT_CHUNK, nl, k0, nk, cols);
        }
    }
}

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
    const bc_format *f = bc_format_of(dtype);
    if (f->check && (st = f->check(w, rs, cs, rows, cols)))
        return st;
    const size_t panels = (rows + PW - 1) / PW;
    const pack_job job = {out, need / panels, w, rs, cs, rows, cols, f, cs > rs};
    bc_ctx cx;
    /* load-time work spread over the pool, a panel a unit (each panel depends only
     * on its rows: the same bytes at any thread count); one thread without scratch */
    const int threads = bc_rt_ctx(&cx, 0) ? 1 : bc_rt_threads(&cx, (double)rows * (double)cols,
                                                              (double)need);
    bc_rt_run(threads, panels, pack_panel, &job);
    return BC_OK;
}

#undef W

int bc_pack(void *out, size_t out_bytes, const float *w, int dtype, size_t rows, size_t cols)
{
    return bc_pack_strided(out, out_bytes, w, cols, 1, dtype, rows, cols);
}

// out (cols), row o of packed (rows, cols)
void bc_packed_row(float *out, const void *packed, int dtype, size_t rows, size_t cols, size_t o)
{
    const bc_format *f = bc_format_of(dtype);
    if (f->group <= 1) {
        const size_t pbytes = bc_format_panel_bytes(f, cols);
        f->unpack_row(out, (const unsigned char *)packed + (o / PW) * pbytes, o % PW, cols);
        return;
    }
    const bc_panel_at at = bc_format_panel_at(f, cols, (rows + PW - 1) / PW, o / PW);
    _Alignas(64) unsigned char chunk[CHUNK_PANEL_BYTES];
    for (size_t k0 = 0; k0 < cols; k0 += BC_FORMAT_CHUNK) {
        const size_t nk = cols - k0 < BC_FORMAT_CHUNK ? cols - k0 : BC_FORMAT_CHUNK;
        chunk_gather(chunk, packed, f, at, k0, nk);
        f->unpack_row(out + k0, chunk, o % PW, nk);
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
    bc_k_linear(y, x, w, BC_WF_PANEL(dtype), b, NULL, n, c, oc, BC_ACT_NONE, &cx);
    return BC_OK;
}
