/* attention.c: fused multi-head attention with an online softmax.
 *
 * Work is split into units of (head, tile of BQ queries), head by head; each
 * unit walks the key tiles once, keeping a running max and sum per query, so no more than one
 * tile of scores (BC_ATT_BK x BQ) exists at any time. Under causal masking the
 * key tiles after a tile's last query are never visited. Units are independent,
 * so the result does not depend on the thread count. A unit's tiles live in
 * its thread's slice of the call's scratch (bc_rt_ctx). */
#include "bc_parallel.h"

/* Query rows up to which attention runs the decoding kernel (the same bits). */
#define BC_DECODE_MAX 3

typedef struct {
    const bc_attn *a;
    const bc_kernel_table *kt;
    const bc_ctx *cx;
    size_t nqt;
} attn_job;

/* Units head by head, so that the threads walk one head's keys and values at
 * a time (a long context's K and V of all heads outgrow the last-level cache,
 * one head's fit); within a head the last query tiles (most keys under
 * causal) first, for balance. */
static void attn_job_unit(const void *arg, size_t u, int t)
{
    const attn_job *j = arg;
    j->kt->attn_unit(j->a, u / j->nqt, (j->nqt - 1 - u % j->nqt) * j->kt->attn_bq,
                     bc_rt_slice(j->cx, t));
}

/* Decoding units: (query row, group of query heads sharing one K/V head). */
typedef struct {
    const bc_attn *a;
    const bc_kernel_table *kt;
    const bc_ctx *cx;
    size_t chunk, chunks;  /* query heads per unit (<= attn_bq), units per query row */
} decode_job;

static void decode_unit(const void *arg, size_t u, int t)
{
    const decode_job *j = arg;
    const size_t i = u / j->chunks, c = u % j->chunks;
    const size_t group = j->a->kv_group, kv = c / ((group + j->chunk - 1) / j->chunk);
    const size_t first = kv * group + (c % ((group + j->chunk - 1) / j->chunk)) * j->chunk;
    const size_t nh = first + j->chunk < (kv + 1) * group ? j->chunk : (kv + 1) * group - first;
    j->kt->attn_decode(j->a, i, first, nh, bc_rt_slice(j->cx, t));
}

// out (Tq,H*Dh), q (Tq,.): query head h at column h*Dh of q and out; its K/V head
// h / (H/KVH) where kv says
void bc_k_attention(float *out, size_t ldo, const float *q, size_t ldq, const bc_kv *kv,
                    size_t tq, size_t tk, size_t n_heads, size_t kv_heads, size_t d_head,
                    size_t q_pos0, int causal, const bc_ctx *cx)
{
    bc_k_attention_lse(out, ldo, NULL, q, ldq, kv, tq, tk, n_heads, kv_heads, d_head, q_pos0,
                       causal, cx);
}

// out (Tq,H*Dh), lse (H,Tq) or NULL, q (Tq,.)
void bc_k_attention_lse(float *out, size_t ldo, float *lse, const float *q, size_t ldq,
                        const bc_kv *kv, size_t tq, size_t tk, size_t n_heads, size_t kv_heads,
                        size_t d_head, size_t q_pos0, int causal, const bc_ctx *cx)
{
    if (tq == 0 || n_heads == 0 || d_head == 0 || kv_heads == 0)
        return;
    const bc_attn A = {out, q, ldo, ldq, kv->k, kv->v, kv->ldk, kv->ldv, kv->khs, kv->vhs,
                       kv->k_tiled, kv->k16, kv->v16, tq, tk, n_heads, d_head, q_pos0,
                       n_heads / kv_heads, causal, lse, kv->ring, kv->window, kv->kq, kv->vq,
                       kv->kq_dtype, kv->softcap};
    const bc_kernel_table *kt = cx->kt;
    const size_t bq = kt->attn_bq;
    const size_t nqt = (tq + bq - 1) / bq, units = nqt * n_heads;
    /* a sliding window reads at most W + Tq keys (the thread count only: no bits) */
    const size_t seen = kv->window && kv->window + tq < tk ? kv->window + tq : tk;
    double flops = 4.0 * (double)tq * (double)seen * (double)n_heads * (double)d_head;
    if (causal && tq > 1)
        flops *= 0.5;
    const int nt = bc_rt_threads(cx, flops, 8.0 * (double)seen * (double)kv_heads * (double)d_head);
    if (tq <= BC_DECODE_MAX && !lse) {
        /* decoding: a query row at a time, each K/V head's query heads together
         * (its keys and values read once, the heads' chains side by side), in
         * smaller groups only when there are fewer units than threads; a head's
         * bits do not depend on its group. SmolLM2 (3 K/V heads of 3 query
         * heads) on 2 threads: 3 units ran context-1000 q8_0 decoding 14%
         * faster than 9 units of one head (Intel Xeon family 6 model 167) */
        const size_t group = n_heads / kv_heads;
        size_t chunk = group < bq ? group : bq;
        while (nt > 1 && chunk > 1
               && tq * kv_heads * ((group + chunk - 1) / chunk) < (size_t)nt)
            chunk = (chunk + 1) / 2;
        const decode_job j = {&A, kt, cx, chunk, kv_heads * ((group + chunk - 1) / chunk)};
        const size_t du = tq * j.chunks;
        if (nt <= 1 || du == 1) {
            for (size_t u = 0; u < du; u++)
                decode_unit(&j, u, 0);
            return;
        }
        bc_rt_run(nt, du, decode_unit, &j);
        return;
    }
    if (nt <= 1 || units == 1) {
        for (size_t u = 0; u < units; u++)
            kt->attn_unit(&A, u / nqt, (u % nqt) * bq, bc_rt_slice(cx, 0));
        return;
    }
    const attn_job j = {&A, kt, cx, nqt};
    bc_rt_run(nt, units, attn_job_unit, &j);
}
