/* grad.c: the backward kernels (bc_parallel.h), spread over threads by output
 * blocks. Every output element is computed by one thread in one fixed order:
 * products sum K in BC_KC blocks added in order (mm_part), column sums add
 * rows in order, a norm's row is one thread's; attention's dk and dv belong
 * to key tiles and dq to query tiles. No atomics, no split-dependent
 * reduction: the same bits at any thread count. */
#include <math.h>
#include <string.h>
#include "bc_parallel.h"

static size_t min_z(size_t a, size_t b) { return a < b ? a : b; }

/* ---- products ---------------------------------------------------------- */

typedef struct {
    const bc_mm *m;
    const bc_ctx *cx;
    size_t rh, cw, ncu;
} mm_job;

static void mm_unit(const void *arg, size_t u, int t)
{
    const mm_job *j = arg;
    const size_t ci = u % j->ncu, ri = u / j->ncu;
    const size_t i0 = ri * j->rh, j0 = ci * j->cw;
    j->cx->kt->mm_part(j->m, i0, min_z(i0 + j->rh, j->m->m), j0, min_z(j0 + j->cw, j->m->n),
                       bc_rt_slice(j->cx, t));
}

/* Work units for nt threads: blocks of rh rows (whole tiles) by cw columns
 * (BC_NC, or halves of it down to 64), about four per thread. Of the splits
 * with enough units, the one packing least: every column unit packs its rows
 * of A again when they are columns of a (transposes), every row unit packs
 * its columns of B again (a copy of rows, transposes of panels). One unit on
 * one thread. Which unit a thread takes does not change any element's bits. */
static void mm_plan(const bc_mm *m, size_t mr, int nt, size_t *rh, size_t *cw)
{
    const size_t full = (m->m + mr - 1) / mr * mr;
    *rh = full;
    *cw = BC_NC;
    if (nt <= 1)
        return;
    const size_t want = 4 * (size_t)nt;
    const double a_cost = m->a_cs != 1 ? 2.0 * (double)m->m * (double)m->k : 0.0;
    const double b_cost = (m->b_kind == BC_MM_B_ROWS ? 1.0 : 2.0) * (double)m->k * (double)m->n;
    double best = -1.0;
    size_t most = 0;
    for (size_t c = BC_NC; c >= 64; c /= 2) {
        const size_t ncu = (m->n + c - 1) / c;
        for (size_t r = full;; r = ((r / 2) + mr - 1) / mr * mr) {
            const size_t nru = (m->m + r - 1) / r, units = ncu * nru;
            const double cost = a_cost * (double)ncu + b_cost * (double)nru + 1e-3 * (double)units;
            if (units >= want) {
                if (best < 0.0 || cost < best) {
                    best = cost;
                    *rh = r;
                    *cw = c;
                }
            } else if (best < 0.0 && units > most) {  /* none has enough yet: the most units */
                most = units;
                *rh = r;
                *cw = c;
            }
            if (r <= 8 * mr)
                break;
        }
    }
}

// C (M,N) = [C +] A (M,K) B (K,N)
void bc_k_mm(const bc_mm *m, const bc_ctx *cx)
{
    if (m->m == 0 || m->n == 0)
        return;
    if (m->k == 0) {
        if (!m->accumulate)
            for (size_t i = 0; i < m->m; i++)
                for (size_t j = 0; j < m->n; j++) {
                    if (m->c_panels)
                        m->c[(j / BC_PANEL) * m->m * BC_PANEL + i * BC_PANEL + j % BC_PANEL] = 0.0f;
                    else
                        m->c[i * m->ldc + j] = 0.0f;
                }
        return;
    }
    const double flops = 2.0 * (double)m->m * (double)m->n * (double)m->k;
    const int nt = bc_rt_threads(cx, flops, 4.0 * ((double)m->m * (double)m->k
                                                   + (double)m->k * (double)m->n));
    size_t rh, cw;
    mm_plan(m, cx->kt->gemm_mr, nt, &rh, &cw);
    mm_job j = {m, cx, rh, cw, (m->n + cw - 1) / cw};
    const size_t units = j.ncu * ((m->m + rh - 1) / rh);
    if (nt <= 1 || units == 1) {
        for (size_t u = 0; u < units; u++)
            mm_unit(&j, u, 0);
        return;
    }
    bc_rt_run(nt, units, mm_unit, &j);
}

// dx (N,C) [+]= dy (N,OC) @ w (OC,C)
void bc_k_linear_dx(float *dx, const float *dy, const void *w, int wf, size_t n, size_t c,
                    size_t oc, int accumulate, const bc_ctx *cx)
{
    const bc_mm m = {dx, c, 0, dy, oc, 1, (const float *)w, c,
                     wf == BC_WF_ROWS ? BC_MM_B_ROWS : BC_MM_B_PANELS, n, c, oc, accumulate};
    bc_k_mm(&m, cx);
}

// dw (OC,C) += dy (N,OC)^T @ x (N,C); a panel matrix's as dw^T (C,OC) in panels
void bc_k_linear_dw(float *dw, int wf, const float *dy, const float *x, size_t n, size_t c,
                    size_t oc, const bc_ctx *cx)
{
    if (wf == BC_WF_ROWS) {
        const bc_mm m = {dw, c, 0, dy, 1, oc, x, c, BC_MM_B_ROWS, oc, c, n, 1};
        bc_k_mm(&m, cx);
    } else {
        const bc_mm m = {dw, 0, 1, x, 1, c, dy, oc, BC_MM_B_ROWS, c, oc, n, 1};
        bc_k_mm(&m, cx);
    }
}

/* ---- column sums ------------------------------------------------------- */

#define COL_UNIT 256

typedef struct {
    float *db;
    const float *dy;
    size_t n, oc;
    const bc_kernel_table *kt;
} col_job;

static void col_unit(const void *arg, size_t u, int t)
{
    (void)t;
    const col_job *j = arg;
    const size_t o0 = u * COL_UNIT;
    j->kt->colsum(j->db, j->dy, j->n, j->oc, o0, min_z(o0 + COL_UNIT, j->oc));
}

// db (OC) += sum_i dy (N,OC)[i]
void bc_k_colsum(float *db, const float *dy, size_t n, size_t oc, const bc_ctx *cx)
{
    const col_job j = {db, dy, n, oc, cx->kt};
    const size_t units = (oc + COL_UNIT - 1) / COL_UNIT;
    const int nt = bc_rt_threads(cx, (double)n * (double)oc, 4.0 * (double)n * (double)oc);
    if (nt <= 1 || units == 1) {
        for (size_t u = 0; u < units; u++)
            col_unit(&j, u, 0);
        return;
    }
    bc_rt_run(nt, units, col_unit, &j);
}

/* ---- norms ------------------------------------------------------------- */

typedef struct {
    int layer;
    float *dx, *xh;            /* xh (N,C): dy * xhat, for the gain's gradient */
    const float *dy, *x, *g;
    size_t c;
    float eps;
} normb_op;

/* One row: the forward's statistics recomputed in double (as it takes them). */
static void normb_row(const void *arg, size_t i)
{
    const normb_op *o = arg;
    const size_t c = o->c;
    const float *x = o->x + i * c, *dy = o->dy + i * c, *g = o->g;
    float *dx = o->dx + i * c, *xh = o->xh ? o->xh + i * c : NULL;
    double mean = 0.0, r;
    if (o->layer) {
        double s = 0.0, var = 0.0;
        for (size_t j = 0; j < c; j++)
            s += x[j];
        mean = s / (double)c;
        for (size_t j = 0; j < c; j++) {
            const double d = x[j] - mean;
            var += d * d;
        }
        r = 1.0 / sqrt(var / (double)c + (double)o->eps);
    } else {
        double ss = 0.0;
        for (size_t j = 0; j < c; j++)
            ss += (double)x[j] * x[j];
        r = 1.0 / sqrt(ss / (double)c + (double)o->eps);
    }
    /* xhat = (x - mean) r (mean 0 for RMSNorm); u = dy g;
     * layer: dx = r (u - mean(u) - xhat mean(u xhat)); rms: dx = r (u - xhat mean(u xhat)) */
    double su = 0.0, sux = 0.0;
    for (size_t j = 0; j < c; j++) {
        const double xhat = (x[j] - mean) * r, u = g ? (double)dy[j] * g[j] : dy[j];
        su += u;
        sux += u * xhat;
    }
    const double mu = o->layer ? su / (double)c : 0.0, mux = sux / (double)c;
    for (size_t j = 0; j < c; j++) {
        const double xhat = (x[j] - mean) * r, u = g ? (double)dy[j] * g[j] : dy[j];
        if (xh)
            xh[j] = (float)(dy[j] * xhat);
        dx[j] = (float)(r * (u - mu - xhat * mux));
    }
}

static void normb_run(const normb_op *o, size_t n, const bc_ctx *cx)
{
    const double elems = (double)n * (double)o->c;
    bc_rt_rows(bc_rt_threads(cx, 12.0 * elems, 16.0 * elems), n, normb_row, o);
}

// dx (N,C), dg (C) or NULL, dy (N,C), x (N,C), g (C) or NULL, work (N,C)
void bc_k_rmsnorm_bwd(float *dx, float *dg, const float *dy, const float *x, const float *g,
                      size_t n, size_t c, float eps, float *work, const bc_ctx *cx)
{
    const normb_op o = {0, dx, dg ? work : NULL, dy, x, g, c, eps};
    normb_run(&o, n, cx);
    if (dg)
        bc_k_colsum(dg, work, n, c, cx);
}

// dx (N,C), dg (C) or NULL, db (C) or NULL, dy (N,C), x (N,C), g (C) or NULL, work (N,C)
void bc_k_layernorm_bwd(float *dx, float *dg, float *db, const float *dy, const float *x,
                        const float *g, size_t n, size_t c, float eps, float *work,
                        const bc_ctx *cx)
{
    if (db)  /* before dx, which may overwrite dy */
        bc_k_colsum(db, dy, n, c, cx);
    const normb_op o = {1, dx, dg ? work : NULL, dy, x, g, c, eps};
    normb_run(&o, n, cx);
    if (dg)
        bc_k_colsum(dg, work, n, c, cx);
}

/* ---- elementwise ------------------------------------------------------- */

#define EW_CHUNK 16384

typedef struct {
    int swiglu, kind;
    float *o1, *o2;
    const float *dy, *a, *b;
    size_t n;
} ewb_job;

typedef struct {
    const ewb_job *j;
    const bc_kernel_table *kt;
} ewb_ctx;

static void ewb_run_unit(const void *arg, size_t u, int t)
{
    (void)t;
    const ewb_ctx *e = arg;
    const ewb_job *j = e->j;
    const size_t i0 = u * EW_CHUNK, m = min_z(EW_CHUNK, j->n - i0);
    if (j->swiglu)
        e->kt->swiglu_bwd(j->o1 + i0, j->o2 + i0, j->dy + i0, j->a + i0, j->b + i0, m);
    else
        e->kt->act_bwd(j->o1 + i0, j->dy + i0, j->a + i0, m, j->kind);
}

static void ewb_run(const ewb_job *j, const bc_ctx *cx)
{
    const ewb_ctx e = {j, cx->kt};
    const size_t units = (j->n + EW_CHUNK - 1) / EW_CHUNK;
    const int nt = bc_rt_threads(cx, 20.0 * (double)j->n, 12.0 * (double)j->n);
    if (nt <= 1 || units <= 1) {
        for (size_t u = 0; u < units; u++)
            ewb_run_unit(&e, u, 0);
        return;
    }
    bc_rt_run(nt, units, ewb_run_unit, &e);
}

// dx (n), dy (n), x (n)
void bc_k_act_bwd(float *dx, const float *dy, const float *x, size_t n, int kind,
                  const bc_ctx *cx)
{
    const ewb_job j = {0, kind, dx, NULL, dy, x, NULL, n};
    ewb_run(&j, cx);
}

// dgate (n), dup (n), dy (n), gate (n), up (n)
void bc_k_swiglu_bwd(float *dgate, float *dup, const float *dy, const float *gate,
                     const float *up, size_t n, const bc_ctx *cx)
{
    const ewb_job j = {1, 0, dgate, dup, dy, gate, up, n};
    ewb_run(&j, cx);
}

// x (T, .) heads at columns h*Dh, cs (T, Dh/2, 2)
void bc_k_rope_bwd(float *x, size_t ldx, size_t t, size_t n_heads, size_t d_head,
                   const float *cs, const bc_ctx *cx)
{
    (void)cx;
    const size_t half = d_head / 2;
    for (size_t r = 0; r < t; r++) {
        const float *c = cs + r * half * 2;
        for (size_t h = 0; h < n_heads; h++) {
            float *v = x + r * ldx + h * d_head;
            for (size_t i = 0; i < half; i++) {
                const float a = v[i], b = v[i + half], co = c[2 * i], si = c[2 * i + 1];
                v[i] = a * co + b * si;
                v[i + half] = b * co - a * si;
            }
        }
    }
}

/* ---- attention --------------------------------------------------------- */

typedef struct {
    const bc_attn_bwd *a;
    const bc_ctx *cx;
    size_t tiles, kv_units;   /* key (and query) tiles; units of the dk/dv pass */
} attb_job;

static void attb_kv_unit(const void *arg, size_t u, int t)
{
    const attb_job *j = arg;
    j->cx->kt->attn_bwd_kv(j->a, u / j->tiles, (u % j->tiles) * BC_ATT_BK, bc_rt_slice(j->cx, t));
}

static void attb_q_unit(const void *arg, size_t u, int t)
{
    const attb_job *j = arg;
    /* the last query tiles (most keys under causal) first */
    j->cx->kt->attn_bwd_q(j->a, u / j->tiles, (j->tiles - 1 - u % j->tiles) * BC_ATT_BK,
                          bc_rt_slice(j->cx, t));
}

void bc_k_attention_bwd(bc_attn_bwd *a, float *dsum, const bc_ctx *cx)
{
    const size_t t = a->t, h = a->n_heads, dh = a->d_head;
    if (!t || !h || !dh)
        return;
    /* D (H, T) = rowsum(do * o), per head */
    for (size_t hh = 0; hh < h; hh++)
        for (size_t i = 0; i < t; i++) {
            const float *o = a->o + i * a->ldo + hh * dh, *d = a->dout + i * a->ldo + hh * dh;
            float s = 0.0f;
            for (size_t k = 0; k < dh; k++)
                s += o[k] * d[k];
            dsum[hh * t + i] = s;
        }
    a->dsum = dsum;
    const size_t tiles = (t + BC_ATT_BK - 1) / BC_ATT_BK, kvh = h / a->kv_group;
    attb_job j = {a, cx, tiles, kvh * tiles};
    double flops = 10.0 * (double)t * (double)t * (double)h * (double)dh;
    if (a->causal)
        flops *= 0.5;
    const int nt = bc_rt_threads(cx, flops, 16.0 * (double)t * (double)h * (double)dh);
    if (nt <= 1) {
        for (size_t u = 0; u < kvh * tiles; u++)
            attb_kv_unit(&j, u, 0);
        for (size_t u = 0; u < h * tiles; u++)
            attb_q_unit(&j, u, 0);
        return;
    }
    bc_rt_run(nt, kvh * tiles, attb_kv_unit, &j);
    bc_rt_run(nt, h * tiles, attb_q_unit, &j);
}
