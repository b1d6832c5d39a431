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

int bc_dtype_traits_of(bc_dtype_traits *out, int dtype)
{
    const bc_format *f = bc_format_of(dtype);
    if (!out)
        return BC_ENULL;
    if (!f)
        return BC_EOPTION;
    const bc_dtype_traits t = {f->block, f->block_bytes, f->max_cols, f->whole,
                               f->from_ggml ? f->ggml_type : BC_GGML_NONE, f->integer,
                               f->limit, f->group > 1 ? f->group : 1};
    *out = t;
    return BC_OK;
}

int bc_ggml_size(size_t *bytes, int type, size_t rows, size_t cols)
{
    const bc_ggml *g = bc_ggml_of(type);
    size_t n;
    int st;
    if (!bytes)
        return BC_ENULL;
    if (!g)
        return BC_EOPTION;
    if (!rows || !cols || cols % g->block)
        return BC_ESIZE;
    if (rows > (size_t)BC_MAX_ELEMENTS || cols > (size_t)BC_MAX_ELEMENTS)
        return BC_EOVERFLOW;
    if ((st = bc_mul(&n, rows, cols / g->block)) || (st = bc_mul(&n, n, g->block_bytes)))
        return st;
    *bytes = n;
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

/* ---- a GGUF tensor's rows of blocks into panels and back ------------------- */

typedef struct {
    unsigned char *panels;    /* bc_pack_ggml: written; bc_unpack_ggml: read */
    unsigned char *rows_out;  /* bc_unpack_ggml: written */
    const unsigned char *rows_in;
    size_t pbytes, row_bytes, rows, cols, file_block_bytes;
    const bc_format *f;
} ggml_job;

/* panel p (16 rows, zeroed first) from rows 16p.. of j->rows_in, chunk by chunk
 * (a grouped format's through a zeroed chunk it then scatters), pack_panel's walk */
static void ggml_in_panel(const void *arg, size_t p, int thread)
{
    const ggml_job *j = arg;
    const bc_format *f = j->f;
    const int grouped = f->group > 1;
    const bc_panel_at at = bc_format_panel_at(f, j->cols, (j->rows + PW - 1) / PW, p);
    unsigned char *panel = j->panels + p * j->pbytes;
    const size_t nl = j->rows - p * PW < PW ? j->rows - p * PW : PW, r0 = p * PW;
    _Alignas(64) unsigned char chunk[CHUNK_PANEL_BYTES];
    (void)thread;
    if (!grouped)
        memset(panel, 0, j->pbytes);
    for (size_t k0 = 0; k0 < j->cols; k0 += BC_FORMAT_CHUNK) {
        const size_t nk = j->cols - k0 < BC_FORMAT_CHUNK ? j->cols - k0 : BC_FORMAT_CHUNK;
        const size_t at_k = k0 / f->block * j->file_block_bytes;
        if (grouped)
            memset(chunk, 0, sizeof chunk);
        if (!grouped && nl == PW && f->from_ggml_panel)  /* a whole panel at once */
            f->from_ggml_panel(panel, j->rows_in + r0 * j->row_bytes + at_k, j->row_bytes, k0,
                               nk);
        else
            for (size_t l = 0; l < nl; l++)
                f->from_ggml(grouped ? chunk : panel,
                             j->rows_in + (r0 + l) * j->row_bytes + at_k, l, grouped ? 0 : k0, nk);
        if (grouped)
            chunk_scatter(j->panels, chunk, f, at, k0, nk);
    }
}

/* rows 16p.. of j->rows_out from panel p (a grouped format's chunk by chunk,
 * gathered first) */
static void ggml_out_panel(const void *arg, size_t p, int thread)
{
    const ggml_job *j = arg;
    const bc_format *f = j->f;
    const int grouped = f->group > 1;
    const bc_panel_at at = bc_format_panel_at(f, j->cols, (j->rows + PW - 1) / PW, p);
    const unsigned char *panel = j->panels + p * j->pbytes;
    const size_t nl = j->rows - p * PW < PW ? j->rows - p * PW : PW, r0 = p * PW;
    _Alignas(64) unsigned char chunk[CHUNK_PANEL_BYTES];
    (void)thread;
    for (size_t k0 = 0; k0 < j->cols; k0 += BC_FORMAT_CHUNK) {
        const size_t nk = j->cols - k0 < BC_FORMAT_CHUNK ? j->cols - k0 : BC_FORMAT_CHUNK;
        const size_t at_k = k0 / f->block * j->file_block_bytes;
        if (grouped)
            chunk_gather(chunk, j->panels, f, at, k0, nk);
        for (size_t l = 0; l < nl; l++)
            f->to_ggml(j->rows_out + (r0 + l) * j->row_bytes + at_k, grouped ? chunk : panel,
                       l, grouped ? 0 : k0, nk);
    }
}

/* The checks bc_pack_ggml and bc_unpack_ggml share: the format, its ggml
 * type (whose block is the format's), both sizes, both buffers */
static int check_ggml(ggml_job *j, size_t *need, size_t *file, int dtype, size_t panels_bytes,
                      size_t rows_bytes, size_t rows, size_t cols)
{
    const bc_format *f = bc_format_of(dtype);
    int st;
    if (!f || !f->from_ggml)
        return BC_EOPTION;
    const bc_ggml *g = bc_ggml_of(f->ggml_type);
    if (!g || g->block != f->block)
        return BC_EOPTION;
    if ((st = check_packed(need, NULL, panels_bytes, dtype, rows, cols))
        || (st = bc_ggml_size(file, f->ggml_type, rows, cols)))
        return st;
    if (rows_bytes < *file)
        return BC_EWORKSPACE;
    const ggml_job t = {NULL, NULL, NULL, *need / ((rows + PW - 1) / PW), *file / rows, rows,
                        cols, g->block_bytes, f};
    *j = t;
    return BC_OK;
}

static void ggml_run(const ggml_job *j, bc_unit_fn fn)
{
    bc_ctx cx;
    const size_t panels = (j->rows + PW - 1) / PW;
    /* load-time work over the pool, a panel a unit (each panel's bytes depend
     * only on its rows); one thread without scratch */
    const int threads = bc_rt_ctx(&cx, 0) ? 1 : bc_rt_threads(&cx, (double)j->rows * (double)j->cols,
                                                              (double)(j->pbytes * panels));
    bc_rt_run(threads, panels, fn, j);
}

int bc_pack_ggml(void *out, size_t out_bytes, const void *src, size_t src_bytes, int dtype,
                 size_t rows, size_t cols)
{
    size_t need, file;
    ggml_job j;
    int st;
    if (!out || !src)
        return BC_ENULL;
    if ((st = check_ggml(&j, &need, &file, dtype, out_bytes, src_bytes, rows, cols)))
        return st;
    if (overlap_bytes(out, need, src, file))
        return BC_EALIAS;
    j.panels = out;
    j.rows_in = src;
    ggml_run(&j, ggml_in_panel);
    return BC_OK;
}

int bc_unpack_ggml(void *out, size_t out_bytes, const void *packed, size_t packed_bytes,
                   int dtype, size_t rows, size_t cols)
{
    size_t need, file;
    ggml_job j;
    int st;
    if (!out || !packed)
        return BC_ENULL;
    if ((st = check_ggml(&j, &need, &file, dtype, packed_bytes, out_bytes, rows, cols)))
        return st;
    if (overlap_bytes(out, file, packed, need))
        return BC_EALIAS;
    j.panels = (unsigned char *)(uintptr_t)packed;  /* only read (ggml_out_panel) */
    j.rows_out = out;
    ggml_run(&j, ggml_out_panel);
    return BC_OK;
}

typedef struct {
    unsigned char *out;
    const unsigned char *src;
    size_t blocks;
    const bc_ggml *from, *to;
} convert_job;

#define CONVERT_UNIT 4096  /* blocks of bc_ggml_convert a unit of the pool */

/* blocks CONVERT_UNIT * u .. of j->src as j->to's blocks */
static void convert_unit(const void *arg, size_t u, int thread)
{
    const convert_job *j = arg;
    const size_t b0 = u * CONVERT_UNIT,
                 b1 = j->blocks - b0 < CONVERT_UNIT ? j->blocks : b0 + CONVERT_UNIT;
    (void)thread;
    for (size_t b = b0; b < b1; b++)
        j->from->to_q8_0(j->out + b * j->to->block_bytes, j->src + b * j->from->block_bytes);
}

int bc_ggml_convert(void *out, size_t out_bytes, const void *src, size_t src_bytes, int to_type,
                    int from_type, size_t blocks)
{
    const bc_ggml *from = bc_ggml_of(from_type), *to = bc_ggml_of(to_type);
    size_t nin, nout;
    int st;
    if (!out || !src)
        return BC_ENULL;
    if (!from || !to || to_type != BC_GGML_Q8_0 || !from->to_q8_0)
        return BC_EOPTION;
    if (!blocks)
        return BC_ESIZE;
    if (blocks > (size_t)BC_MAX_ELEMENTS)
        return BC_EOVERFLOW;
    if ((st = bc_mul(&nin, blocks, from->block_bytes)) || (st = bc_mul(&nout, blocks, to->block_bytes)))
        return st;
    if (src_bytes < nin || out_bytes < nout)
        return BC_EWORKSPACE;
    if (overlap_bytes(out, nout, src, nin))
        return BC_EALIAS;
    const convert_job j = {out, src, blocks, from, to};
    bc_ctx cx;
    /* load-time work over the pool, CONVERT_UNIT blocks a unit (each block's bytes
     * depend only on its own); one thread without scratch */
    const int threads = bc_rt_ctx(&cx, 0) ? 1 : bc_rt_threads(&cx, (double)blocks * 32.0,
                                                              (double)(nin + nout));
    bc_rt_run(threads, (blocks + CONVERT_UNIT - 1) / CONVERT_UNIT, convert_unit, &j);
    return BC_OK;
}

typedef struct {
    unsigned char *out;
    const float *x;
    size_t n;
    int to_type;
    const bc_kernel_table *kt;
} round16_job;

#define ROUND16_UNIT 65536  /* floats of bc_ggml_from_f32 a unit of the pool */

/* floats ROUND16_UNIT * u .. of j->x as 2-byte values */
static void round16_unit(const void *arg, size_t u, int thread)
{
    const round16_job *j = arg;
    const size_t i0 = u * ROUND16_UNIT, m = j->n - i0 < ROUND16_UNIT ? j->n - i0 : ROUND16_UNIT;
    (void)thread;
    j->kt->round16(j->out + 2 * i0, j->x + i0, m, j->to_type);
}

// out (2 n bytes), x (n)
int bc_ggml_from_f32(void *out, size_t out_bytes, const float *x, size_t n, int to_type)
{
    size_t nin, nout;
    int st;
    if (!out || !x)
        return BC_ENULL;
    if (to_type != BC_GGML_F16 && to_type != BC_GGML_BF16)
        return BC_EOPTION;
    if (!n)
        return BC_ESIZE;
    if (n > (size_t)BC_MAX_ELEMENTS)
        return BC_EOVERFLOW;
    if ((st = bc_mul(&nin, n, sizeof(float))) || (st = bc_mul(&nout, n, 2)))
        return st;
    if (out_bytes < nout)
        return BC_EWORKSPACE;
    if (overlap_bytes(out, nout, x, nin))
        return BC_EALIAS;
    bc_ctx cx;
    if ((st = bc_rt_ctx(&cx, 0)))
        return st;
    const round16_job j = {out, x, n, to_type, cx.kt};
    const int threads = bc_rt_threads(&cx, (double)n * 4.0, (double)(nin + nout));
    bc_rt_run(threads, (n + ROUND16_UNIT - 1) / ROUND16_UNIT, round16_unit, &j);
    return BC_OK;
}
