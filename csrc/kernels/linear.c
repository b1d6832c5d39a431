/* linear.c: y = act(r + x @ w^T + b) on the context's kernel table, spread
 * over threads by output blocks (every element is computed by one thread, in
 * one fixed order: the result does not depend on the thread count).
 * Up to BC_ROWS_MAX rows the table's rows_part streams w once; above, the
 * packed GEMM (gemm_part) reuses each packed panel over many rows. */
#include <stddef.h>
#include "kernels.h"
#include "bc_simd_scalar.h"

/* Work units for nt threads: blocks of rh rows by cw columns (whole MR rows,
 * whole NR panels), at least about 4 per thread so that a thread slowed down by
 * a busy neighbour is balanced by the others (dynamic scheduling). Columns are
 * split first: every unit packs its own slice of w, so splitting rows would
 * pack the same columns twice. Which thread computes a unit does not change
 * its bits. */
static void plan(const bc_kernel_table *kt, size_t n, size_t oc, int nt, size_t *rh, size_t *cw)
{
    const size_t np = (oc + kt->gemm_nr - 1) / kt->gemm_nr, nb = (n + kt->gemm_mr - 1) / kt->gemm_mr;
    const size_t want = 4 * (size_t)nt;
    size_t cpan = BC_NC / kt->gemm_nr, rb = nb;
    size_t ncu = (np + cpan - 1) / cpan;
    while (ncu < want && cpan > 2) {
        cpan = (cpan + 1) / 2;
        ncu = (np + cpan - 1) / cpan;
    }
    while (ncu * ((nb + rb - 1) / rb) < want && rb * kt->gemm_mr >= 128)
        rb = (rb + 1) / 2;
    *rh = rb * kt->gemm_mr;
    *cw = cpan * kt->gemm_nr;
}

// y (N,OC), x (N,C), w (OC,C), b (OC) or NULL, r (N,OC) or NULL (may be y); N <= BC_ROWS_MAX
static void linear_rows(const bc_gemm *g, const bc_ctx *cx)
{
    const size_t group = cx->kt->rows_group;
    const long long ng = (long long)((g->oc + group - 1) / group);
    const int nt = bc_rt_threads(cx, 2.0 * (double)g->n * (double)g->c * (double)g->oc);
    if (nt <= 1) {
        cx->kt->rows_part(g, 0, g->oc);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt < ng ? nt : (int)ng)
#endif
    for (long long u = 0; u < ng; u++) {
        const size_t o0 = (size_t)u * group;
        cx->kt->rows_part(g, o0, o0 + group < g->oc ? o0 + group : g->oc);
    }
}

// y (N,OC), x (N,C), w (OC,C), b (OC) or NULL, r (N,OC) or NULL (may be y)
static void linear_gemm(const bc_gemm *g, const bc_ctx *cx)
{
    const bc_kernel_table *kt = cx->kt;
    const size_t n = g->n, oc = g->oc;
    const int nt = bc_rt_threads(cx, 2.0 * (double)n * (double)g->c * (double)oc);
    if (nt <= 1) {
        kt->gemm_part(g, 0, n, 0, oc, bc_rt_slice(cx, 0));
        return;
    }
    size_t rh, cw;
    plan(kt, n, oc, nt, &rh, &cw);
    const size_t ncu = (oc + cw - 1) / cw, nru = (n + rh - 1) / rh;
    const long long nu = (long long)(ncu * nru);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt < nu ? nt : (int)nu)
#endif
    for (long long u = 0; u < nu; u++) {
        const size_t ci = (size_t)u % ncu, ri = (size_t)u / ncu;
        const size_t o0 = ci * cw, n0 = ri * rh;
        kt->gemm_part(g, n0, n0 + rh < n ? n0 + rh : n, o0, o0 + cw < oc ? o0 + cw : oc,
                      bc_rt_slice(cx, bc_rt_thread_num()));
    }
}

// y (N,OC), x (N,C), w (OC,C), b (OC) or NULL, r (N,OC) or NULL (may be y)
void bc_k_linear(float *y, const float *x, const float *w, const float *b, const float *r,
                 size_t n, size_t c, size_t oc, int act, const bc_ctx *cx)
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
    const bc_gemm g = {y, x, w, b, r, n, c, oc, act};
    if (n <= BC_ROWS_MAX)
        linear_rows(&g, cx);
    else
        linear_gemm(&g, cx);
}
