/* moe.c: a mixture of experts in place of a layer's MLP (bc_layer.h's
 * bc_layer_moe; the routing as bc_gpt.h describes it: Mixtral, Qwen3-MoE).
 *
 * Per call: the router's logits for every row, each row's K experts and
 * weights; then expert by expert (index order) the rows that chose it are
 * gathered, run through its SwiGLU on the shared linear kernel (its
 * matrices in their own formats: only the experts some row chose are read),
 * and each row's output lands in that row's slot for the rank it gave the
 * expert; last, each row sums its K slots in rank order. Every linear's
 * row is its own bits whatever the other rows (bc_k_linear), the gathers
 * and the sums are serial and in fixed order: a row's result does not
 * depend on the batch nor on the threads.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bc_check.h"
#include "bc_layer.h"

/* The workspace (floats), N rows: logits (N,E) (the probabilities in place);
 * sel (N,K) the chosen experts (int32 in float slots); wt (N,K) their weights;
 * idx (N) one expert's rows (int32: row * K + rank); xa (N,D) its gathered
 * inputs; up, gat, hid (N,F); ye (N,D) its outputs; slots (N*K, D). */
typedef struct {
    size_t logits, sel, wt, idx, xa, up, gat, hid, ye, slots, total;
} moe_parts;

static int carve(moe_parts *p, const bc_layer_cfg *c, size_t n)
{
    size_t ne, nk, nd, nf, nkd, at = 0;
    int st;
    if ((st = bc_mul(&ne, n, c->n_experts)) || (st = bc_mul(&nk, n, c->n_used))
        || (st = bc_mul(&nd, n, c->d)) || (st = bc_mul(&nf, n, c->d_ff))
        || (st = bc_mul(&nkd, nk, c->d)))
        return st;
    if (nk > (size_t)INT32_MAX)  /* idx holds a row's slot (row * K + rank) as int32 */
        return BC_EOVERFLOW;
    const size_t sizes[10] = {ne, nk, nk, n, nd, nf, nf, nf, nd, nkd};
    size_t *const offs[10] = {&p->logits, &p->sel, &p->wt, &p->idx, &p->xa,
                              &p->up, &p->gat, &p->hid, &p->ye, &p->slots};
    for (int i = 0; i < 10; i++) {
        *offs[i] = at;
        if ((st = bc_add(&at, at, sizes[i])))
            return st;
    }
    p->total = at;
    return BC_OK;
}

int bc_layer_moe_work(size_t *n_floats, const bc_layer_cfg *c, size_t n)
{
    moe_parts p;
    const int st = carve(&p, c, n);
    if (!st)
        *n_floats = p.total;
    return st;
}

// sel (K) int32, wt (K) = one row's experts and weights from its logits lg (E), which
// become its probabilities: softmax over all E in float32, the K largest (ties: the
// lower index), each its probability, or its share of the K's sum when norm
static void route_row(int32_t *sel, float *wt, float *lg, size_t e, size_t k, int norm)
{
    float mx = lg[0], sum = 0.0f;
    for (size_t i = 1; i < e; i++)
        mx = lg[i] > mx ? lg[i] : mx;
    for (size_t i = 0; i < e; i++) {
        lg[i] = expf(lg[i] - mx);
        sum += lg[i];
    }
    for (size_t i = 0; i < e; i++)
        lg[i] /= sum;
    float chosen = 0.0f;
    for (size_t r = 0; r < k; r++) {
        size_t best = e;
        for (size_t i = 0; i < e; i++) {
            int taken = 0;
            for (size_t q = 0; q < r; q++)
                taken |= (size_t)sel[q] == i;
            if (!taken && (best == e || lg[i] > lg[best]))
                best = i;  /* strictly greater: a tie keeps the lower index */
        }
        sel[r] = (int32_t)best;
        wt[r] = lg[best];
        chosen += lg[best];
    }
    if (norm)
        for (size_t r = 0; r < k; r++)
            wt[r] /= chosen;
}

// out (N,D) = r (N,D) or 0 + sum_k wt_k expert_{sel_k}(a (N,D)); router (E,D) rows;
// expert e: up, gate (F,D), down (D,F) in their formats
void bc_layer_moe(float *out, const float *a, const float *r, const bc_layer_cfg *c,
                  const bc_layer_w *w, size_t n, float *work, const bc_ctx *cx)
{
    moe_parts p;
    carve(&p, c, n);  /* checked by the caller's bc_layer_work */
    const size_t e = c->n_experts, k = c->n_used, d = c->d, f = c->d_ff;
    float *lg = work + p.logits, *wt = work + p.wt, *xa = work + p.xa, *up = work + p.up;
    float *gat = work + p.gat, *hid = work + p.hid, *ye = work + p.ye, *slots = work + p.slots;
    int32_t *sel = (int32_t *)(void *)(work + p.sel), *idx = (int32_t *)(void *)(work + p.idx);
    bc_k_linear(lg, a, w->router, BC_WF_ROWS, NULL, NULL, n, d, e, BC_ACT_NONE, cx);
    for (size_t i = 0; i < n; i++)
        route_row(sel + i * k, wt + i * k, lg + i * e, e, k, c->router_norm);
    const unsigned char *pu = w->eup.p, *pg = w->egate.p, *pd = w->edown.p;
    for (size_t x = 0; x < e; x++) {
        size_t m = 0;
        for (size_t i = 0; i < n * k; i++)
            if ((size_t)sel[i] == x) {
                idx[m] = (int32_t)i;
                memcpy(xa + m * d, a + (i / k) * d, d * sizeof(float));
                m++;
            }
        if (!m)
            continue;  /* no row chose it: its weights are not read */
        bc_k_linear(up, xa, pu + x * w->eup_bytes, w->eup.wf, NULL, NULL, m, d, f, BC_ACT_NONE,
                    cx);
        bc_k_linear(gat, xa, pg + x * w->egate_bytes, w->egate.wf, NULL, NULL, m, d, f,
                    BC_ACT_NONE, cx);
        bc_k_swiglu(hid, gat, up, m * f, cx);
        bc_k_linear(ye, hid, pd + x * w->edown_bytes, w->edown.wf, NULL, NULL, m, f, d,
                    BC_ACT_NONE, cx);
        for (size_t j = 0; j < m; j++)
            memcpy(slots + (size_t)idx[j] * d, ye + j * d, d * sizeof(float));
    }
    for (size_t i = 0; i < n; i++) {
        float *o = out + i * d;
        const float *ri = r ? r + i * d : NULL;
        for (size_t j = 0; j < d; j++) {
            float s = ri ? ri[j] : 0.0f, acc = 0.0f;
            for (size_t q = 0; q < k; q++)
                acc += wt[i * k + q] * slots[(i * k + q) * d + j];
            o[j] = s + acc;
        }
    }
}
