/* linear.c: y = act(r + x @ w^T + b) on the context's kernel table, spread
 * over threads by output blocks (every element is computed by one thread, in
 * one fixed order: the result does not depend on the thread count).
 * Up to BC_ROWS_MAX rows (decoding) the table's rows_part streams w once,
 * split by columns; above, the GEMM (gemm_part) reuses each block of w over
 * many rows. On packed weights the two give the same bits. */
#include <stddef.h>
#include "bc_parallel.h"
#include "bc_format.h"
#include "bc_simd_scalar.h"

/* Work units for nt threads: blocks of rh rows by cw columns (whole MR rows,
 * whole NR panels), at least about 4 per thread so that a thread slowed down by
 * a busy neighbour is balanced by the others (units are claimed dynamically).
 * Every unit copies its columns of w into panels (unless they are float32
 * panels already) and, when C is a multiple of 1024, its rows of x side by side
 * (gemm_part: rows 4 KiB apart would evict each other from L1): splitting
 * columns repeats the row copies, splitting rows the column copies. Of the
 * splits with enough units, the one copying least: columns first when rows
 * are read in place. Which thread computes a unit does not change its bits. */
static void plan(const bc_kernel_table *kt, const bc_gemm *g, int nt, size_t *rh, size_t *cw)
{
    const size_t nr = kt->gemm_nr > BC_PANEL ? kt->gemm_nr : BC_PANEL, mr = kt->gemm_mr;
    const size_t n = g->n, oc = g->oc;
    const size_t np = (oc + nr - 1) / nr, nb = (n + mr - 1) / mr;
    const size_t want = 4 * (size_t)nt;
    const int rows_copied = g->c % 1024 == 0;
    const int cols_copied = kt->wf[g->wf].panels != NULL;
    double best = -1.0;
    for (size_t cpan = BC_NC / nr; cpan >= 1; cpan = cpan > 1 ? (cpan + 1) / 2 : 0) {
        const size_t ncu = (np + cpan - 1) / cpan;
        for (size_t rb = nb; rb >= 1; rb = rb > 1 ? (rb + 1) / 2 : 0) {
            const size_t nru = (nb + rb - 1) / rb;
            if (ncu * nru < want && (cpan > 2 || rb * mr >= 128))
                continue;  /* too few units, and still room to split */
            /* floats copied: x once per column unit, w once per row unit */
            const double cost = (rows_copied ? (double)ncu * (double)n : 0.0)
                              + (cols_copied ? (double)nru * (double)oc : 0.0)
                              + 1e-3 * (double)(ncu * nru);  /* ties: fewer units */
            if (best < 0.0 || cost < best) {
                best = cost;
                *rh = rb * mr;
                *cw = cpan * nr;
            }
            if (rb * mr < 128)
                break;
        }
        if (cpan <= 2)
            break;
    }
}

typedef struct {
    const bc_gemm *g;
    const bc_kernel_table *kt;
    const bc_ctx *cx;
    size_t rh, cw, ncu;  /* unit rows and columns; column units */
} lin_job;

static void gemm_unit(const void *arg, size_t u, int t)
{
    const lin_job *j = arg;
    const bc_gemm *g = j->g;
    const size_t ci = u % j->ncu, ri = u / j->ncu;
    const size_t o0 = ci * j->cw, n0 = ri * j->rh;
    j->kt->gemm_part(g, n0, n0 + j->rh < g->n ? n0 + j->rh : g->n, o0,
                     o0 + j->cw < g->oc ? o0 + j->cw : g->oc, bc_rt_slice(j->cx, t));
}

/* Products on quantised x, and decoding's on panels, split the columns of w
 * into units of whole panels claimed in order. Decoding (up to BC_ROWS_MAX
 * rows) gives each thread one unit, an even share: its kernel keeps up to 16
 * panels in flight, and the integer formats, bound by their arithmetic, ran a
 * quarter slower in units of 4 panels (a decode step on two threads, measured
 * with benches); a late helper's unit is still taken by whoever is free. A
 * format that interleaves its panels in runs rounds the share up to whole
 * runs (an AMD Zen 4, two threads: bfloat16i's even shares cutting runs in two
 * ran 3-5% slower; q8_0i's units of one run, claimed in turn, 8% slower than
 * whole-run shares, benches/ab_products.py). A prompt's rows (quantised x) take
 * units of 4 panels, their panels kept in L2 while the rows stream past. The
 * bits do not depend on the units. */
#define COL_UNIT 64  /* 4 panels */

/* The columns of a unit of a product of n rows of x on nt threads, w in
 * layout wf. */
static size_t unit_cols(size_t oc, size_t n, int nt, int wf)
{
    const size_t group = wf == BC_WF_ROWS ? 0 : bc_format_of(BC_WF_DTYPE(wf))->group;
    const size_t np = (oc + BC_PANEL - 1) / BC_PANEL, share = (np + (size_t)nt - 1) / (size_t)nt;
    if (n > BC_ROWS_MAX)
        return COL_UNIT;
    if (group > 1)  /* whole runs of the format's panels (bc_format_panel_at) */
        return (share + group - 1) / group * group * BC_PANEL;
    return share * BC_PANEL;
}

static void rows_unit(const void *arg, size_t u, int t)
{
    const lin_job *j = arg;
    const size_t o0 = u * j->cw;
    j->kt->wf[j->g->wf].rows_part(j->g, o0, o0 + j->cw < j->g->oc ? o0 + j->cw : j->g->oc);
}

/* ---- formats on x rounded once per product (q8_0i, bfloat16i) ---- */

typedef struct {
    const bc_gemm *g;
    const bc_kernel_table *kt;
    const unsigned char *xq;  /* rows n0.. quantised */
    size_t n0, n1, cw;        /* the chunk's rows; unit columns (unit_cols) */
} xq_job;

/* The kernel for n rows: decoding's (xq_part) up to BC_ROWS_MAX, the prompts' (xq_gemm)
 * above; the same bits either way. */
typedef void (*xq_kernel)(const bc_gemm *, const unsigned char *, size_t, size_t, size_t, size_t);
static xq_kernel xq_fn(const bc_kernel_table *kt, int wf, size_t n)
{
    return n <= BC_ROWS_MAX ? kt->wf[wf].xq_part : kt->wf[wf].xq_gemm;
}

static void xq_unit(const void *arg, size_t u, int t)
{
    const xq_job *j = arg;
    const size_t o0 = u * j->cw, o1 = o0 + j->cw < j->g->oc ? o0 + j->cw : j->g->oc;
    (void)t;
    xq_fn(j->kt, j->g->wf, j->n1 - j->n0)(j->g, j->xq, j->n0, j->n1, o0, o1);
}

/* Values of x from which a chunk's rows are quantised by every thread */
#define XQ_SPREAD ((size_t)1 << 16)

/* One chunk's rows of x to quantise (xq_row: one row, on any thread). */
typedef struct {
    const bc_kernel_table *kt;
    int wf;
    unsigned char *xq;
    const float *x;
    size_t c, rb;
} xq_rows_job;

static void xq_row(const void *arg, size_t i)
{
    const xq_rows_job *j = arg;
    j->kt->wf[j->wf].xq_rows(j->xq + i * j->rb, j->x + i * j->c, 1, j->c);
}

/* A prompt's rows quantised at once (at most XQ_BYTES of them): each chunk of
 * rows streams every weight of the product once more, and in the GEMM's
 * scratch alone long rows made small chunks (AMD Zen 4, one thread, 512 rows
 * by 8,192 columns to 8,192 outputs, the two builds in separate runs: q8_0i in
 * chunks of 36 rows 199 GOPS, whole 304; q4_0i 228, 309; q5_ki 201, 234; at
 * 14,336 columns, chunks of 21 rows, q8_0i 149, whole 232-270; issue 51) */
#define XQ_ROWS 512
#define XQ_BYTES ((size_t)32 << 20)

/* The rows of x quantised once, chunk by chunk into the call's scratch (every
 * thread's slice: the kernels on quantised x need none; the rows spread over
 * the threads, each row's bytes its own), or, where that holds fewer than
 * XQ_ROWS of a prompt's rows, into the calling thread's buffer for them (the
 * scratch when that cannot be had); each chunk's product spread over columns.
 * A format's columns are bounded (max_cols) so that one row always fits the
 * scratch. The bits do not depend on the chunks. */
static void linear_xq(const bc_gemm *g, int nt, const bc_ctx *cx)
{
    const bc_kernel_table *kt = cx->kt;
    const size_t rb = bc_xq_row_bytes(BC_WF_DTYPE(g->wf), g->c);
    const size_t avail = cx->per_thread * (size_t)cx->threads * sizeof(float);
    size_t chunk = avail / rb;
    unsigned char *xq = (unsigned char *)cx->scratch;
    if (!chunk)
        return;  /* cannot happen: bc_packed_bytes bounds the columns */
    size_t want = g->n < XQ_ROWS ? g->n : XQ_ROWS;
    if (want > XQ_BYTES / rb)
        want = XQ_BYTES / rb;
    if (chunk < want) {
        unsigned char *own = bc_rt_xq_buffer(want * rb);
        if (own) {
            xq = own;
            chunk = want;
        }
    }
    for (size_t n0 = 0; n0 < g->n; n0 += chunk) {
        const size_t n1 = g->n - n0 < chunk ? g->n : n0 + chunk;
        const xq_rows_job rj = {kt, g->wf, xq, g->x + n0 * g->c, g->c, rb};
        /* a few rows (decoding) are quantised where they are: less than a
         * hand-over of work costs */
        bc_rt_rows((n1 - n0) * g->c >= XQ_SPREAD ? nt : 1, n1 - n0, xq_row, &rj);
        if (nt <= 1) {
            xq_fn(kt, g->wf, n1 - n0)(g, xq, n0, n1, 0, g->oc);
            continue;
        }
        const xq_job j = {g, kt, xq, n0, n1, unit_cols(g->oc, n1 - n0, nt, g->wf)};
        bc_rt_run(nt, (g->oc + j.cw - 1) / j.cw, xq_unit, &j);
    }
}

/* Bytes of weights a linear streams: float32 rows, or its format's. */
static double weight_bytes(int wf, size_t c, size_t oc)
{
    const double per = wf == BC_WF_ROWS ? 4.0
                                        : bc_format_weight_bytes(bc_format_of(BC_WF_DTYPE(wf)));
    return per * (double)c * (double)oc;
}

// y (N,OC), x (N,C), w (OC,C) in layout wf, b (OC) or NULL, r (N,OC) or NULL (may be y)
static void linear(float *y, const float *x, const void *w, int wf, const float *b,
                   const float *r, size_t n, size_t c, size_t oc, int act, int few,
                   const bc_ctx *cx)
{
    if (n == 0 || oc == 0)
        return;
    if (c == 0) {
        for (size_t i = 0; i < n; i++)
            for (size_t o = 0; o < oc; o++) {
                float s = r ? r[i * oc + o] : 0.0f;
                if (b)
                    s += b[o];
                y[i * oc + o] = bc_act_scalar(s, act);
            }
        return;
    }
    const bc_kernel_table *kt = cx->kt;
    /* decoding on an integer format: the software prefetch its group runs
     * (chosen here, before any thread starts: the first may time a probe) */
    const int pf = kt->wf[wf].xq_part && n <= BC_ROWS_MAX  /* (never a caller's rows) */
                   ? bc_rt_prefetch(kt, BC_WF_DTYPE(wf)) : BC_GEMM_PF_DEFAULT;
    const bc_gemm g = {y, x, w, b, r, n, c, oc, wf, act, pf, bc_rt_wx_buffer};
    const int nt = bc_rt_threads(cx, 2.0 * (double)n * (double)c * (double)oc,
                                 weight_bytes(wf, c, oc));
    if (kt->wf[wf].xq_part) {
        linear_xq(&g, nt, cx);
        return;
    }
    lin_job j = {&g, kt, cx, 0, 0, 0};
    /* a caller's rows take dot products only through bc_k_linear_few */
    if (n <= BC_ROWS_MAX && (wf != BC_WF_ROWS || few)) {
        if (nt <= 1) {
            kt->wf[wf].rows_part(&g, 0, oc);
            return;
        }
        j.cw = unit_cols(oc, n, nt, wf);
        bc_rt_run(nt, (oc + j.cw - 1) / j.cw, rows_unit, &j);
        return;
    }
    if (nt <= 1) {
        kt->gemm_part(&g, 0, n, 0, oc, bc_rt_slice(cx, 0));
        return;
    }
    plan(kt, &g, nt, &j.rh, &j.cw);
    j.ncu = (oc + j.cw - 1) / j.cw;
    bc_rt_run(nt, j.ncu * ((n + j.rh - 1) / j.rh), gemm_unit, &j);
}

void bc_k_linear(float *y, const float *x, const void *w, int wf, const float *b,
                 const float *r, size_t n, size_t c, size_t oc, int act, const bc_ctx *cx)
{
    linear(y, x, w, wf, b, r, n, c, oc, act, 0, cx);
}

void bc_k_linear_few(float *y, const float *x, const float *w, const float *b, size_t n,
                     size_t c, size_t oc, const bc_ctx *cx)
{
    linear(y, x, w, BC_WF_ROWS, b, NULL, n, c, oc, BC_ACT_NONE, 1, cx);
}
