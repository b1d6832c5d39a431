/* linear.c: y = act(r + x @ w^T + b), packed and register-blocked, spread
 * over threads by output blocks (every element is computed by one thread, in
 * one fixed order: the result does not depend on the thread count). */
#include <stddef.h>
#include "kernels.h"
#include "bc_fast.h"
#include "bc_rt.h"
#include "bc_simd_scalar.h"


typedef void (*gemm_part_fn)(const bc_gemm *, size_t, size_t, size_t, size_t, float *);

typedef struct {
    gemm_part_fn part;
    size_t mr, nr;
} gemm_impl;

static gemm_impl pick(void)
{
    gemm_impl g = {bc_gemm_part_generic, bc_gemm_mr_generic(), bc_gemm_nr_generic()};
#ifdef BC_HAVE_X86_KERNELS
    switch (bc_rt_isa()) {
    case BC_ISA_AVX512:
        g.part = bc_gemm_part_avx512; g.mr = bc_gemm_mr_avx512(); g.nr = bc_gemm_nr_avx512();
        break;
    case BC_ISA_AVX2:
        g.part = bc_gemm_part_avx2; g.mr = bc_gemm_mr_avx2(); g.nr = bc_gemm_nr_avx2();
        break;
    default: break;
    }
#endif
    return g;
}

/* The plain loop, used only when no scratch could be had (out of memory). */
static void linear_plain(const bc_gemm *g, size_t n0, size_t n1, size_t o0, size_t o1)
{
    for (size_t i = n0; i < n1; i++) {
        const float *xi = g->x + i * g->c;
        for (size_t o = o0; o < o1; o++) {
            const float *wo = g->w + o * g->c;
            float s = g->r ? g->r[i * g->oc + o] : 0.0f;
            for (size_t j = 0; j < g->c; j++)
                s += xi[j] * wo[j];
            if (g->b)
                s += g->b[o];
            g->y[i * g->oc + o] = bc_act_scalar(s, g->act);
        }
    }
}

static void run_part(const gemm_impl *im, const bc_gemm *g, size_t n0, size_t n1,
                     size_t o0, size_t o1)
{
    if (n0 >= n1 || o0 >= o1)
        return;
    float *scratch = bc_rt_scratch(0, BC_GEMM_SCRATCH);
    if (scratch)
        im->part(g, n0, n1, o0, o1, scratch);
    else
        linear_plain(g, n0, n1, o0, o1);
}

/* Work units for nt threads: blocks of rh rows by cw columns (whole MR rows,
 * whole NR panels), at least about 4 per thread so that a thread slowed down by
 * a busy neighbour is balanced by the others (dynamic scheduling). Columns are
 * split first: every unit packs its own slice of w, so splitting rows would
 * pack the same columns twice. Which thread computes a unit does not change
 * its bits. */
static void plan(const gemm_impl *im, size_t n, size_t oc, int nt, size_t *rh, size_t *cw)
{
    const size_t np = (oc + im->nr - 1) / im->nr, nb = (n + im->mr - 1) / im->mr;
    const size_t want = 4 * (size_t)nt;
    size_t cpan = BC_NC / im->nr, rb = nb;
    size_t ncu = (np + cpan - 1) / cpan;
    while (ncu < want && cpan > 2) {
        cpan = (cpan + 1) / 2;
        ncu = (np + cpan - 1) / cpan;
    }
    while (ncu * ((nb + rb - 1) / rb) < want && rb * im->mr >= 128)
        rb = (rb + 1) / 2;
    *rh = rb * im->mr;
    *cw = cpan * im->nr;
}

// y (N,OC), x (N,C), w (OC,C), b (OC) or NULL, r (N,OC) or NULL
void bc_k_linear_ex(float *y, const float *x, const float *w, const float *b,
                    const float *r, size_t n, size_t c, size_t oc, int act)
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
    const gemm_impl im = pick();
    const int nt = bc_rt_threads(2.0 * (double)n * (double)c * (double)oc);
    if (nt <= 1) {
        run_part(&im, &g, 0, n, 0, oc);
        return;
    }
    size_t rh, cw;
    plan(&im, n, oc, nt, &rh, &cw);
    const size_t ncu = (oc + cw - 1) / cw, nru = (n + rh - 1) / rh;
    const long long nu = (long long)(ncu * nru);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt < nu ? nt : (int)nu)
#endif
    for (long long u = 0; u < nu; u++) {
        const size_t ci = (size_t)u % ncu, ri = (size_t)u / ncu;
        const size_t o0 = ci * cw, n0 = ri * rh;
        run_part(&im, &g, n0, n0 + rh < n ? n0 + rh : n, o0, o0 + cw < oc ? o0 + cw : oc);
    }
}

// y (N,OC), x (N,C), w (OC,C), b (OC) or NULL
void bc_k_linear(float *y, const float *x, const float *w, const float *b,
                 size_t n, size_t c, size_t oc)
{
    bc_k_linear_ex(y, x, w, b, NULL, n, c, oc, BC_ACT_NONE);
}
