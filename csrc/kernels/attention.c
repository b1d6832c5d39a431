/* attention.c: fused multi-head attention with an online softmax.
 *
 * Work is split into units of (head, tile of BQ queries); each unit walks the
 * key tiles once, keeping a running max and sum per query, so no more than one
 * tile of scores (BC_ATT_BK x BQ) exists at any time. Under causal masking the
 * key tiles after a tile's last query are never visited. Units are independent,
 * so the result does not depend on the thread count. */
#include <math.h>
#include <string.h>
#include "kernels.h"
#include "bc_fast.h"
#include "bc_rt.h"

typedef struct {
    void (*unit)(const bc_attn *, size_t, size_t, float *);
    size_t (*scratch)(size_t);
    size_t bq;
} attn_impl;

static attn_impl pick(void)
{
    attn_impl a = {bc_attn_unit_generic, bc_attn_scratch_generic, bc_attn_bq_generic()};
#ifdef BC_HAVE_X86_KERNELS
    switch (bc_rt_isa()) {
    case BC_ISA_AVX512:
        a.unit = bc_attn_unit_avx512; a.scratch = bc_attn_scratch_avx512; a.bq = bc_attn_bq_avx512();
        break;
    case BC_ISA_AVX2:
        a.unit = bc_attn_unit_avx2; a.scratch = bc_attn_scratch_avx2; a.bq = bc_attn_bq_avx2();
        break;
    default: break;
    }
#endif
    return a;
}

size_t bc_k_attention_work(size_t tq, size_t tk, size_t n_heads, size_t d_head)
{
    (void)tq; (void)tk; (void)n_heads; (void)d_head;
    return 0;  /* per-thread tiles live in the runtime's scratch */
}

/* One query row, one key at a time (online softmax straight into the output);
 * used only when no scratch could be had. */
static void attn_plain(const bc_attn *A, size_t h, size_t i0, size_t nq)
{
    const size_t dh = A->d_head, off = h * dh;
    const float scale = 1.0f / sqrtf((float)dh);
    for (size_t i = i0; i < i0 + nq; i++) {
        const float *qi = A->q + i * A->ldq + off;
        float *oi = A->out + i * A->ldo + off;
        size_t nk = A->tk;
        if (A->causal && A->q_pos0 + i + 1 < nk)
            nk = A->q_pos0 + i + 1;
        memset(oi, 0, dh * sizeof(float));
        float m = -INFINITY, l = 0.0f;
        for (size_t j = 0; j < nk; j++) {
            const float *kj = A->k + j * A->ldk + off, *vj = A->v + j * A->ldv + off;
            float s = 0.0f;
            for (size_t d = 0; d < dh; d++)
                s += qi[d] * scale * kj[d];
            const float mn = s > m ? s : m;
            const float al = j ? expf(m - mn) : 0.0f, p = expf(s - mn);
            l = l * al + p;
            for (size_t d = 0; d < dh; d++)
                oi[d] = oi[d] * al + p * vj[d];
            m = mn;
        }
        if (nk)
            for (size_t d = 0; d < dh; d++)
                oi[d] /= l;
    }
}

static void run_unit(const attn_impl *im, const bc_attn *A, size_t h, size_t qt)
{
    const size_t i0 = qt * im->bq;
    float *s = bc_rt_scratch(1, im->scratch(A->d_head));
    if (s) {
        im->unit(A, h, i0, s);
    } else {
        const size_t nq = A->tq - i0 < im->bq ? A->tq - i0 : im->bq;
        attn_plain(A, h, i0, nq);
    }
}

// out (Tq,H*Dh), q (Tq,.), k (Tk,.), v (Tk,.); head h at column h*Dh of each
void bc_k_attention(float *out, size_t ldo,
                    const float *q, size_t ldq,
                    const float *k, size_t ldk,
                    const float *v, size_t ldv,
                    size_t tq, size_t tk, size_t n_heads, size_t d_head,
                    size_t q_pos0, int causal, float *work)
{
    (void)work;
    if (tq == 0 || n_heads == 0 || d_head == 0)
        return;
    const bc_attn A = {out, q, k, v, ldo, ldq, ldk, ldv, tq, tk, n_heads, d_head,
                       q_pos0, causal};
    const attn_impl im = pick();
    const size_t nqt = (tq + im.bq - 1) / im.bq, units = nqt * n_heads;
    double flops = 4.0 * (double)tq * (double)tk * (double)n_heads * (double)d_head;
    if (causal)
        flops *= 0.5;
    const int nt = bc_rt_threads(flops);
    if (nt <= 1 || units == 1) {
        for (size_t u = 0; u < units; u++)
            run_unit(&im, &A, u % n_heads, u / n_heads);
        return;
    }
    /* the last query tiles (most keys under causal) first, for balance */
    const long long nu = (long long)units;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt < nu ? nt : (int)nu)
#endif
    for (long long u = 0; u < nu; u++)
        run_unit(&im, &A, (size_t)u % n_heads, nqt - 1 - (size_t)u / n_heads);
}
